"""A grid report's figures: R^a_t against t per task, one NVLDB/NLDB rule a panel against every baseline, each method
in the same colour and line style in every figure (:func:`plot_task`, for :mod:`nvldb_pl.experiments.report`)."""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from ..learners.registry import LITERAL_SUFFIX


# One colour per method in every figure: NVLDB blue, NLDB orange (each panel holds one rule),
# each baseline its own; a "-literal" run is dotted in its method's colour.
BASELINE_COLOURS = {
    "NDB-UCB": "tab:green",
    "NDB-TS": "tab:olive",
    "CoLSTIM": "tab:purple",
    "VACDB": "tab:brown",
    "MaxInP": "tab:pink",
    "Random": "tab:gray",
}


def method_style(method: str) -> tuple[str, str]:
    """(colour, line style) of a method, the same in every figure."""
    literal = method.endswith(LITERAL_SUFFIX)
    base = method[: -len(LITERAL_SUFFIX)] if literal else method
    if base.startswith("NVLDB-"):
        colour = "tab:blue"
    elif base.startswith("NLDB-"):
        colour = "tab:orange"
    else:
        colour = BASELINE_COLOURS.get(base, "black")
    return colour, (":" if literal else "-" if base.startswith(("NVLDB-", "NLDB-")) else "--")


def figure_panels(methods: list[str]) -> list[tuple[str, list[str]]]:
    """(title, methods) per panel, as the paper's figures: one NVLDB/NLDB rule a panel (with its
    literal runs) against every baseline; a single panel when no NVLDB/NLDB method is there."""

    def rule(m: str) -> Optional[str]:
        base = m[: -len(LITERAL_SUFFIX)] if m.endswith(LITERAL_SUFFIX) else m
        return base.split("-", 1)[1] if base.startswith(("NVLDB-", "NLDB-")) else None

    rules = list(dict.fromkeys(r for r in map(rule, methods) if r is not None))
    baselines = [m for m in methods if rule(m) is None]
    if not rules:
        return [("baselines", baselines)]
    return [(r, [m for m in methods if rule(m) == r] + baselines) for r in rules]


def plot_task(out: str, task: str, curves: dict) -> Optional[str]:
    """R^a_t against t, mean line and ±1 standard-error band per method, one rule per panel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[report]'): no figure for", task)
        return None
    panels = figure_panels(list(curves))
    cols = min(3, len(panels))
    rows_ = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4.6 * cols, 3.6 * rows_), squeeze=False, sharey=True)
    seeds = next(iter(curves.values()))[2].shape[1]
    for ax, (title, methods) in zip(axes.flat, panels):
        for method in sorted(methods, key=lambda m: curves[m][2][-1].mean()):
            rounds, _, R = curves[method]
            mean = R.mean(axis=1)
            se = R.std(axis=1, ddof=1) / np.sqrt(R.shape[1]) if R.shape[1] > 1 else np.zeros(len(R))
            colour, style = method_style(method)
            ax.plot(rounds, mean, style, color=colour, label=method, linewidth=1.5)
            ax.fill_between(rounds, mean - se, mean + se, color=colour, alpha=0.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("round t")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("$R^a_t$ (mean ± 1 s.e.)")
    sep = "; " if cols > 1 else "\n"  # one panel: two lines, so the title fits its width
    fig.suptitle(
        f"{task}: cumulative average regret, {seeds} seeds{sep}bands: ±1 standard error over seeds", fontsize=10
    )
    fig.tight_layout()
    path = os.path.join(out, f"{task}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
