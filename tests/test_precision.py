"""bf16-mixed on CPU: the network runs in bfloat16, everything else stays float32/float64."""
import torch

from nvldb_pl.run import run_experiment


def test_bf16_mixed_trains_network_in_bf16_and_keeps_gram_refit_selection_in_float64():
    data = {"task": "square", "rounds": 12, "num_seeds": 2, "seed": 1}
    model = {"width": 8, "grad_steps": 2}
    s32, m32 = run_experiment(data, model, precision="32-true")
    s16, m16 = run_experiment(data, model, precision="bf16-mixed")
    assert m16.V.dtype == torch.float64 and m16.net.theta.dtype == torch.float32
    assert m16.net.weights[0].dtype == torch.float32  # master weights stay float32
    assert torch.isfinite(m16.V).all() and torch.isfinite(m16.net.theta).all()
    # round 1 is selected before any training: identical; afterwards bf16 gradients differ
    assert torch.equal(m16.history()[:, 0], m32.history()[:, 0])
    assert not torch.equal(m16.net.weights[1], m32.net.weights[1])
    rel = (m16.net.weights[1] - m32.net.weights[1]).norm() / m32.net.weights[1].norm()
    assert float(rel) < 0.2  # close: 24 Adam steps of lr 1e-3 from the same start
    assert all(0 <= x["cum_avg_regret"] for x in s16["seeds"])
