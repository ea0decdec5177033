"""The machinery a run stands on, apart from the algorithm: files written whole (:mod:`.host`), devices and
threads (:mod:`.devices`), checkpoints and resume (:mod:`.checkpoint`, :mod:`.resume`, :mod:`.shards`), seeds
over processes (:mod:`.parallel`), CUDA graphs (:mod:`.graphs`), the CLI's messages and defaults
(:mod:`.messages`, :mod:`.own_defaults`). It imports no learner and not the loop."""
