"""What a run may be placed on: the accelerators, device counts and precisions this package runs
under, checked before anything runs or is written (by the CLI for ``--trainer.*`` and by
:func:`nvldb_pl.loop.run.run_experiment` for the scripts), each refusal naming the field.

Precision: the Adam steps may run in float32, bf16-mixed or 16-mixed (autocast); the Gram
matrices, the refit of θ and the selection stay in float32/float64 whatever the setting. The
"true" half and double settings (``16-true``, ``bf16-true``, ``64-true``) would cast the network's
parameters themselves, which the float32 history cannot feed, so they are refused.
"""

from __future__ import annotations

import os

import torch

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16", "16-mixed", "16")
BLAS_LIBRARIES = ("default", "cublas", "cublaslt")


def _named(field: str, value) -> str:
    """How a message names the setting: a script's flag as typed (``--accelerator gpu``), a config
    field as the CLI's other messages do (``trainer.accelerator='gpu'``)."""
    return f"{field} {value}" if field.startswith("--") else f"{field}={value!r}"


def uses_gpu(accelerator) -> bool:
    """Whether Lightning places a run with this accelerator on CUDA GPUs."""
    return str(accelerator) in ("gpu", "cuda") or (str(accelerator) == "auto" and torch.cuda.is_available())


def check_accelerator(accelerator, field: str = "trainer.accelerator", allowed=ACCELERATORS) -> None:
    """Refuse an accelerator this package does not run on, or a GPU this machine does not have.
    (An ``Accelerator`` object given by class path is the user's own: not checked.)"""
    if not isinstance(accelerator, str):
        return
    if accelerator not in allowed:
        raise ValueError(f"{_named(field, accelerator)}: this package runs on {', '.join(allowed)}")
    if uses_gpu(accelerator) and not torch.cuda.is_available():
        raise ValueError(
            f"{_named(field, accelerator)}: torch sees no CUDA GPU here (torch.cuda.is_available() is False); use cpu"
        )


def device_count(devices, accelerator="auto", field: str = "trainer.devices") -> int:
    """How many devices (processes per node) ``devices`` asks for: a count of at least 1, ``auto``
    or -1 (every GPU; one process on the CPU; -1 only on a GPU), or a list of device indices.
    Anything else is refused, naming the field."""
    indices = (
        list(devices)
        if isinstance(devices, (list, tuple))
        else [d for d in devices.split(",") if d.strip()]
        if isinstance(devices, str) and "," in devices
        else None
    )
    if indices is not None:
        if not uses_gpu(accelerator):
            raise ValueError(
                f"{_named(field, devices)}: a list picks GPUs by index, and this run is on the CPU; give "
                f"a number of processes ({len(indices)})"
            )
        return max(len(indices), 1)
    if str(devices) == "auto":
        return torch.cuda.device_count() if uses_gpu(accelerator) else 1
    try:
        n = int(devices)
    except (TypeError, ValueError):
        raise ValueError(
            f"{_named(field, devices)}: give a number of devices >= 1, 'auto' or a list of indices"
        ) from None
    if n == -1 and not uses_gpu(accelerator):
        raise ValueError(
            f"{_named(field, devices)}: -1 means every GPU, and this run is on the CPU; give a number of processes >= 1"
        )
    if n < 1 and n != -1:
        raise ValueError(f"{_named(field, devices)}: a run needs at least one device (or 'auto')")
    return torch.cuda.device_count() if n == -1 else n


def check_precision(precision, field: str = "trainer.precision") -> None:
    """float32, or mixed precision for the Adam steps (module docstring)."""
    if precision is None or str(precision) in PRECISIONS:
        return
    raise ValueError(
        f"{_named(field, precision)}: choose 32-true, bf16-mixed or 16-mixed (mixed precision applies to "
        f"the Adam steps; the Gram matrices, the refit and the selection stay in float32/float64)"
    )


def use_blas_library(library: str, accelerator, field: str = "--blas") -> None:
    """torch's CUDA BLAS library for this process (``torch.backends.cuda.preferred_blas_library``; torch calls
    it experimental): ``default`` leaves torch's choice (cuBLAS), ``cublaslt`` may split a product's long inner
    dimension over thread blocks (the weight gradient's history). A GPU setting: refused for a CPU run."""
    if library not in BLAS_LIBRARIES:
        raise ValueError(f"{_named(field, library)}: choose one of {', '.join(BLAS_LIBRARIES)}")
    if library == "default":
        return
    if not uses_gpu(accelerator):
        raise ValueError(f"{_named(field, library)}: a CUDA setting, and this run is on the CPU; leave it at default")
    torch.backends.cuda.preferred_blas_library(library)


# below this S * T * m^2 (an Adam step's work over a whole history, at its widest layer), a second CPU thread
# buys little alone and stalls a run beside another (docs/performance.md, "Threads")
ONE_THREAD_BELOW = 10_000_000


def cpu_threads(given, num_seeds: int, width: int | None, rounds: int = 1) -> int | None:
    """:func:`threads_for` a problem of ``num_seeds`` x ``rounds`` x m^2, m = ``width`` (None: the default MLP's 32)."""
    m = 32 if width is None else width
    return threads_for(given, num_seeds * rounds * m * m)


def threads_for(given, size: int) -> int | None:
    """The CPU threads a run takes: ``given`` (``--threads``) if set; None (torch's own choice: one a core, or
    OMP_NUM_THREADS) where that variable is set or the problem is large; else 1. ``size``: the run's arithmetic as
    its learner measures it (:meth:`nvldb_pl.learners.base.DuelingLearner.problem_size`)."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"threads: must be an integer >= 1 (or null: chosen by the problem's size), got {given!r}")
        return given
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return 1 if size < ONE_THREAD_BELOW else None
