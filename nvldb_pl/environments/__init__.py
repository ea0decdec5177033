"""The environments: what a learner duels against. The random streams (:mod:`.seeding`), the synthetic tasks and
the base class of one's own (:mod:`.tasks`), the tables (UCI and a user's CSV: :mod:`.uci`), the round stream
with the preference answer o_t (:mod:`.stream`) and the regret (:mod:`.regret`). No learner and no loop here."""
