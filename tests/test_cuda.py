"""The GPU paths (skipped where torch sees no CUDA GPU; run on the device machine with
``python -m pytest -q tests/test_cuda.py``): a float32 GPU run is the CPU run up to float rounding,
bf16-mixed keeps the Gram matrix, refit and selection in float32/float64, 16-mixed warns."""
import math

import pytest
import torch

from nvldb_pl.run import run_experiment

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DATA = {"task": "cos", "rounds": 25, "num_seeds": 3, "seed": 2}
MODEL = {"width": 16, "grad_steps": 5}


@pytest.mark.parametrize("strategy", ["ucb_asym", "ts_csym"])
def test_float32_gpu_run_is_the_cpu_run(strategy):
    # matmuls in float32 (TF32 off, torch's default): same selections, regret within float rounding
    assert not torch.backends.cuda.matmul.allow_tf32
    model = {**MODEL, "strategy": strategy}
    s_cpu, m_cpu = run_experiment(DATA, model, accelerator="cpu")
    s_gpu, m_gpu = run_experiment(DATA, model, accelerator="gpu")
    assert s_cpu["device"] == "cpu" and s_gpu["device"].startswith("cuda: ")
    for a, b in zip(s_cpu["seeds"], s_gpu["seeds"]):
        assert a["seed"] == b["seed"]
        assert b["cum_avg_regret"] == pytest.approx(a["cum_avg_regret"], rel=1e-5, abs=1e-6)
    h_cpu, h_gpu = m_cpu.history(), m_gpu.history().cpu()
    assert torch.allclose(h_gpu, h_cpu, atol=1e-6)  # the same arm pairs were played every round
    assert torch.allclose(m_gpu.V.cpu(), m_cpu.V, rtol=1e-4, atol=1e-6)
    assert torch.allclose(m_gpu.net.theta.cpu(), m_cpu.net.theta, rtol=1e-3, atol=1e-5)


def test_bf16_mixed_on_gpu_keeps_gram_refit_and_selection_in_full_precision():
    data = {**DATA, "task": "square", "rounds": 12, "num_seeds": 2}
    s32, m32 = run_experiment(data, MODEL, precision="32-true", accelerator="gpu")
    s16, m16 = run_experiment(data, MODEL, precision="bf16-mixed", accelerator="gpu")
    assert m16.V.dtype == torch.float64 and m16.net.theta.dtype == torch.float32
    assert m16.net.weights[0].dtype == torch.float32  # master weights
    assert torch.isfinite(m16.V).all() and torch.isfinite(m16.net.theta).all()
    assert torch.equal(m16.history()[:, 0], m32.history()[:, 0])  # round 1: before any training
    w16, w32 = m16.net.weights[1].cpu(), m32.net.weights[1].cpu()
    assert not torch.equal(w16, w32)  # the network did run in bfloat16
    assert float((w16 - w32).norm() / w32.norm()) < 0.2


def test_16_mixed_on_gpu_warns_that_one_scaler_couples_the_seeds():
    with pytest.warns(UserWarning, match="one GradScaler serves all stacked seeds"):
        s, _ = run_experiment({**DATA, "rounds": 8}, MODEL, precision="16-mixed", accelerator="gpu", quiet=False)
    assert s["rounds"] == 8 and all(math.isfinite(x["cum_avg_regret"]) for x in s["seeds"])  # it ran to the end
