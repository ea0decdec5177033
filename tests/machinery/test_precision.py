"""bf16-mixed on CPU: the network runs in bfloat16, everything else stays float32/float64."""

import torch

from nvldb_pl.maths import gram
from nvldb_pl.loop.run import run_experiment


def test_bf16_mixed_trains_network_in_bf16_and_keeps_gram_refit_selection_in_float64():
    data = {"task": "square", "rounds": 12, "num_seeds": 2, "seed": 1}
    model = {"network": {"width": 8}, "grad_steps": 2}
    s32, m32 = run_experiment(data, model, precision="32-true")
    s16, m16 = run_experiment(data, model, precision="bf16-mixed")
    assert m16.net.weights[0].dtype == torch.float32  # master weights stay float32
    # V was built in float64 from float32 features: recomputing it so from the run's own final
    # parameters and history gives it to float64 rounding (under bf16 features it would be off
    # by about 1e-3 relative)
    with torch.no_grad():
        t = m16.t
        phi = m16._history_features(t).to(torch.float64)
        dphi = phi[:, :, 0] - phi[:, :, 1]
        w = m16._weights(torch.einsum("std,sd->st", dphi, m16.net.theta.to(torch.float64)), t)
        V = gram.gram_from_history(dphi, w, m16.hparams.lam)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # what bf16 features would give instead
            phi16 = m16._history_features(t).to(torch.float64)
        V16 = gram.gram_from_history(phi16[:, :, 0] - phi16[:, :, 1], w, m16.hparams.lam)
    assert m16.V.dtype == torch.float64
    torch.testing.assert_close(m16.V, V, rtol=1e-6, atol=1e-6)  # float32 features: ~1e-8 relative
    assert float(((V16 - V).abs() / V.abs().clamp(min=1e-3)).max()) > 1e-4  # the tolerance tells them apart
    # round 1 is selected before any training: identical; afterwards bf16 gradients differ
    assert torch.equal(m16.history()[:, 0], m32.history()[:, 0])
    assert not torch.equal(m16.net.weights[1], m32.net.weights[1])
    rel = (m16.net.weights[1] - m32.net.weights[1]).detach().norm() / m32.net.weights[1].detach().norm()
    assert float(rel) < 0.2  # close: 24 Adam steps of lr 1e-3 from the same start
