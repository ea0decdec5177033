"""The experiments: the reproduction grid of methods × tasks × seeds (:mod:`.grid`) and its report
(:mod:`.report`)."""
