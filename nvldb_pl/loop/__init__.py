"""The loop: the DataModule (:mod:`.data`), the callbacks that select the pair, deliver the feedback and write the
run summary (:mod:`.callbacks`), the trainer settings a bandit run refuses (:mod:`.trainer_checks`) and
``run_experiment`` (:mod:`.run`)."""
