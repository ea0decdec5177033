"""The maths of NVLDB and its baselines: tensors in, tensors out, batched over seeds, no Lightning.

The link g (:mod:`.links`), the network f = θᵀφ(x; W) (:mod:`.network`, a user's own φ: :mod:`.user_network`)
and its hand-written history gradient (:mod:`.backward`), the objective (ζ, the loss, the θ refit:
:mod:`.objective`), the Gram matrix V and its norms (:mod:`.gram`), the six arm-selection rules
(:mod:`.selection`), the self-duel tests (:mod:`.selfduel`), seed-independent products (:mod:`.seedwise`) and the
one validation style every layer uses (:mod:`.checks`). Nothing here imports anything above it."""
