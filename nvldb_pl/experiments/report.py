"""The report of a grid of runs (:mod:`nvldb_pl.experiments.grid`): per task a table of R(T)/T with the
paper's values, paired differences seed by seed, figures, and the curves as ``curves_<task>.csv.gz``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from typing import Optional

import numpy as np
import torch

from ..learners.settings import flat_settings
from .curves import kept_round, load_curves, mean_std, paired_lines
from .figures import plot_task
from .arguments import TASK_DATA
from .grid import base_method, read_summary, run_hparams, run_settings
from ..machinery.host import atomic_open, software_text, write_json_atomic
from ..learners.registry import LITERAL

# What the paper states in numbers, by (task, method, context dimension d, width m; None: any m), then
# by horizon T (None: any T; the value names its own). Figure 1 (d=5, K=5, m=32, T=2000) is given as
# plots only; the square task has R(T)/T at T = 2000, 6000, 10000 for NVLDB-UCB at widths 500 and 1000
# (appendix table "Network Width Sensitivity") and at d=20 (appendix table "High-Dimensional
# Experiments", m=100). A run of another T gets no value: R(T)/T falls with T.
PAPER = {
    ("square", "NVLDB-UCB-ASYM", 5, 500): {2000: "1.66 ± 0.78", 6000: "0.82 ± 0.39", 10000: "0.54 ± 0.19"},
    ("square", "NVLDB-UCB-OSYM", 5, 500): {2000: "0.97 ± 0.17", 6000: "0.51 ± 0.07", 10000: "0.39 ± 0.04"},
    ("square", "NVLDB-UCB-CSYM", 5, 500): {2000: "1.13 ± 0.35", 6000: "0.61 ± 0.13", 10000: "0.46 ± 0.07"},
    ("square", "NVLDB-UCB-ASYM", 5, 1000): {2000: "1.37 ± 0.22", 6000: "0.65 ± 0.09", 10000: "0.42 ± 0.04"},
    ("square", "NVLDB-UCB-OSYM", 5, 1000): {2000: "1.73 ± 0.65", 6000: "0.81 ± 0.27", 10000: "0.52 ± 0.13"},
    ("square", "NVLDB-UCB-CSYM", 5, 1000): {2000: "1.54 ± 0.65", 6000: "0.73 ± 0.27", 10000: "0.51 ± 0.14"},
    ("square", "NVLDB-UCB-ASYM", 20, 100): {2000: "9.33 ± 1.89", 6000: "6.79 ± 1.09", 10000: "6.05 ± 0.74"},
    ("square", "NVLDB-UCB-OSYM", 20, 100): {2000: "9.49 ± 2.05", 6000: "6.82 ± 1.11", 10000: "6.07 ± 0.83"},
    ("square", "NVLDB-UCB-CSYM", 20, 100): {2000: "10.76 ± 1.29", 6000: "7.69 ± 0.80", 10000: "6.73 ± 0.58"},
    ("statlog", "NVLDB-UCB-OSYM", 63, None): {None: "0.017 at T=200 (main text)"},
    ("statlog", "NLDB-UCB-OSYM", 63, None): {None: "0.199 at T=200 (main text)"},
}


def paper_value(task: str, method: str, dim: int, width: Optional[int], rounds: int) -> str:
    """The paper's R(T)/T for this row, if it states one for this d, width m (or any m) and T (or any T)."""
    by_T = PAPER.get((task, method, dim, width), PAPER.get((task, method, dim, None), {}))
    return by_T.get(rounds, by_T.get(None, ""))


def wall_cell(summary: dict) -> str:
    """A run's wall seconds, with its device when not the CPU (runs made before it was recorded: CPU), and the
    rounds they cover when the run went on from a checkpoint (its earlier part's time is not known); "–" where its
    summary was written from its last checkpoint (stopped after its last round, before its summary)."""
    device, t0 = summary.get("device", "cpu"), summary.get("resumed_at_round")
    if summary.get("wall_seconds") is None:  # its summary written from its last checkpoint: no part's time known
        return "–"
    return (
        f"{summary['wall_seconds']:.0f}"
        + ("" if device == "cpu" else f" ({device})")
        + ("" if not t0 else f" (rounds {t0 + 1}-{summary['rounds']})")
    )


def distinct_floor(
    task: str,
    rounds: int,
    num_seeds: int,
    base_seed: int = 0,
    dim: int = 5,
    first_seed: int = 0,
    arms: Optional[int] = None,
    task_args: Optional[dict] = None,
) -> Optional[float]:
    """E[(u_(1) - u_(2)) / 2] over the streams of any task (the built-in ones, the UCI tables in their own
    shape, a Task class by import path): the least average regret per round of any policy that never duels
    an arm with itself (its best pair is the two best arms), so a lower bound on R(T)/T under
    ``distinct_arms`` (0.5 on the UCI tasks, where one arm has u = 1 and the rest 0). None where the
    stream cannot be made here (a UCI file absent)."""
    from ..environments.stream import RoundStream
    from ..loop.data import BanditDataModule

    shape = {
        k: v
        for k, v in TASK_DATA.get(task, {"dim": dim, **({"arms": arms} if arms else {})}).items()
        if k in ("dim", "arms")
    }
    try:
        dm = BanditDataModule(
            task=task,
            rounds=rounds,
            num_seeds=num_seeds,
            first_seed_id=first_seed,
            seed=base_seed,
            task_args=task_args,
            **shape,
        )
    except (FileNotFoundError, ValueError):
        return None
    gaps = []
    for batch in RoundStream(dm.spec, 0, dm.dataset):
        top = torch.topk(batch["utilities"].double(), 2, dim=1).values
        gaps.append((top[:, 0] - top[:, 1]) / 2)
    return float(torch.stack(gaps).mean())


def _table_row(method: str, rounds: np.ndarray, seeds: list, R: np.ndarray, wall: str, duels: str) -> tuple:
    """(sort key, method, R(T)/T mean and std, {q: R(qT/4) mean and std}, wall, seeds, self-duels)."""
    T = int(rounds[-1])
    at = {q: R[min(len(rounds) - 1, int(np.searchsorted(rounds, max(1, T * q // 4))))] for q in (1, 2, 4)}
    return (
        R[-1].mean() / T,
        method,
        mean_std(R[-1] / T),
        {q: mean_std(v) for q, v in at.items()},
        wall,
        len(seeds),
        duels,
    )


def write_report(
    out: str, runs: dict[tuple[str, str], str], command: str, extra: Optional[dict] = None, extra_note: str = ""
) -> str:
    """report.md, one PNG per task (if matplotlib is installed) and curves_<task>.csv.gz; an earlier report there of
    other tasks, T or seeds is kept beside it (:func:`keep_aside`), never lost.

    ``extra``: {task: {method: (rounds, seed ids, R^a_t)}}, curves of runs made elsewhere (e.g. the
    literal reading's committed curves), reported and paired like the runs, ``extra_note`` saying where from.
    """
    extra = extra or {}
    tasks = list(dict.fromkeys([t for t, _ in runs] + list(extra)))
    held = _earlier_files(out, tasks)
    for name in held:  # the earlier report's files, until this one is written whole
        os.replace(os.path.join(out, name), os.path.join(out, name + ".held"))
    try:
        new = _write_report(out, runs, command, extra, extra_note, tasks)
    except BaseException:
        for name in held:  # as they were
            os.replace(os.path.join(out, name + ".held"), os.path.join(out, name))
        raise
    keep_aside(out, new, held)
    return os.path.join(out, "report.md")


def _write_report(out: str, runs: dict, command: str, extra: dict, extra_note: str, tasks: list) -> dict:
    """:func:`write_report`'s files; returns report.json's entries."""
    lines = [
        "# Reproduction report",
        "",
        f"Made by: `{command}`",
        "",
        "R(T)/T: mean ± std over seeds of the cumulative average regret divided by T. "
        "R(t): cumulative average regret R^a_t (mean ± std) at t = T/4, T/2, T. "
        "curves_<task>.csv.gz: R^a_t per method, seed and round (every round to 100, then every 10th). "
        "Self-duels: share of rounds whose two arms were the same arm (no information; '–': "
        "run made before this was recorded). Rows sorted by R(T)/T. Paper: numbers the paper states for this setting, if any "
        "(its Figure 1 is given as plots only). A method named '<method>-literal' is the strict reading of "
        f"the equations ({', '.join(f'{k}={v}' for k, v in flat_settings(LITERAL).items())}, and NVLDB's w_reg=0); the others run the "
        "package's defaults.",
        "",
    ] + ([extra_note, ""] if extra_note else [])
    table = {}
    for task in tasks:
        rows = []
        curves = {}
        base_seed = 0
        dim = TASK_DATA.get(task, {}).get("dim", 5)
        arms = TASK_DATA.get(task, {}).get("arms")
        streams = {}  # method -> the data settings its streams came from (summary.json's data): pair.py checks them
        widths, bases = {}, {}  # method -> width m (None: made elsewhere, not recorded), base seed of its run
        settings = {}  # method -> what its run changed from the method's defaults (runs with hparams.yaml)
        dead = {}  # method -> seeds whose phi ended with no live unit (summary.json's live_feature_units)
        made_with = {}  # method -> the software its run ended in (summary.json's software; None: not recorded)
        earlier = {}  # method -> the parts its run was made in before the last (summary.json's earlier_parts)
        for (t_, name), folder in runs.items():
            if t_ != task:
                continue
            method = base_method(name)  # a variant's name: the method and, in braces, its settings
            rounds, seeds, R = load_curves(folder)
            summary = read_summary(folder)
            hparams = run_hparams(folder)
            changed = (
                " ".join(f"{k}={v}" for k, v in sorted(flat_settings(run_settings(method, hparams)).items()))
                if hparams
                else None
            )
            # the name the run ran under where it says more (a network of one's own: NVLDB-UCB-ASYM[LayerNormMLP])
            ran = summary.get("method")
            shown = ran if isinstance(ran, str) and ran.startswith(method) and ran != method else method
            method = shown + name[len(method) :]  # a variant keeps its settings in its name
            base_seed = bases[method] = summary.get("base_seed", 0)
            streams[method] = summary.get("data")
            dim = hparams.get("dim") or dim
            arms = hparams.get("arms") or arms
            net = hparams.get("network")  # (a run of before the network's settings were nested: flat)
            widths[method] = net.get("width") if isinstance(net, dict) else hparams.get("width")
            if hparams:
                settings[method] = changed  # as --set
            dead[method] = [s["seed"] for s in summary["seeds"] if s.get("live_feature_units") == 0]
            made_with[method] = summary.get("software")
            earlier[method] = summary.get("earlier_parts", [])
            duels = [s.get("self_duel_fraction") for s in summary["seeds"]]
            duels = f"{100 * np.mean(duels):.0f}%" if all(d is not None for d in duels) else "–"
            rows.append(_table_row(method, rounds, seeds, R, wall_cell(summary), duels))
            curves[method] = (rounds, seeds, R)
        for method, (rounds, seeds, R) in extra.get(task, {}).items():
            if method in curves:
                continue
            rows.append(_table_row(method, rounds, seeds, R, "–", "–"))  # made elsewhere: no summary
            curves[method] = (rounds, seeds, R)
        rows.sort()
        T = int(max(c[0][-1] for c in curves.values()))
        S = rows[0][5]
        # a Task class's init_args (summary.json's data; a grid reuses and pairs runs of the same ones only)
        task_args = next((s["task_args"] for s in streams.values() if isinstance(s, dict) and s.get("task_args")), None)
        named = f"{task} {json.dumps(task_args, sort_keys=True)}" if task_args else task
        lines += [
            f"## {named} (T={T}, {S} seeds{'' if dim == 5 or task in TASK_DATA else f', d={dim}'})",
            "",
            f"| method | R(T)/T | R({T // 4}) | R({T // 2}) | R({T}) | self-duels | wall s | paper R(T)/T |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for _, method, (m, s), at, wall, _, duels in rows:
            cells = " | ".join(f"{at[q][0]:.1f} ± {at[q][1]:.1f}" for q in (1, 2, 4))
            lines.append(
                f"| {method} | {m:.3f} ± {s:.3f} | {cells} | {duels} | {wall} | {paper_value(task, method, dim, widths.get(method), T)} |"
            )
            # a seed id names a stream only with its base seed (recorded when not 0): scripts/pair.py reads it
            table[task, method] = {
                "R_T_over_T_mean": m,
                "R_T_over_T_std": s,
                "rounds": T,
                "num_seeds": S,
                **({"base_seed": bases[method]} if bases.get(method) else {}),
                **({"streams": streams[method]} if isinstance(streams.get(method), dict) else {}),
                **({"settings": settings[method]} if settings.get(method) else {}),
                **({"software": made_with[method]} if made_with.get(method) else {}),
            }
        lines += settings_lines(settings)
        lines += software_lines(made_with, earlier)
        lines += [
            f"Dead φ, {method}: seed{'s' if len(d) > 1 else ''} {', '.join(map(str, d))} ended with every unit of φ at 0 "
            f"on every context played: stopped learning (summary.json, live_feature_units)."
            for method, d in dead.items()
            if d
        ]
        floor = distinct_floor(task, T, S, base_seed, dim, min(min(c[1]) for c in curves.values()), arms, task_args)
        lines += [
            "",
            f"A policy that never duels an arm with itself (`distinct_arms`) cannot get R(T)/T below "
            f"{floor:.3f} on these streams (the mean of (u_(1) − u_(2))/2, best against second-best arm)."
            if floor is not None
            else "(The a2 ≠ a1 floor of these streams could not be computed here: their data is not on this machine.)",
            "",
        ]
        lines += paired_lines(curves, T)
        png = plot_task(out, task, curves)
        if png:
            lines += [f"![{task}]({os.path.basename(png)})", ""]
        path = os.path.join(out, f"curves_{task}.csv.gz")
        # mtime 0: the same curves give the same bytes (no timestamp in the gzip header)
        with (
            atomic_open(path, "wb") as raw,
            gzip.GzipFile(path, "wb", fileobj=raw, mtime=0) as gz,
            io.TextIOWrapper(gz, encoding="utf-8") as fh,
        ):
            fh.write("method,seed,round,cum_avg_regret\n")
            for method, (rounds, seeds, R) in curves.items():
                for i, r in enumerate(rounds):
                    if not kept_round(int(r), T):
                        continue
                    for j, seed in enumerate(seeds):
                        fh.write(f"{method},{seed},{r},{R[i, j]:.6g}\n")
    new = {f"{t}/{m}": v for (t, m), v in table.items()}
    path = os.path.join(out, "report.md")
    with atomic_open(path) as fh:
        fh.write("\n".join(lines) + "\n")
    write_json_atomic(os.path.join(out, "report.json"), new)
    return new


def _earlier_files(out: str, tasks: list) -> list[str]:
    """The files of a report in ``out`` that a report of ``tasks`` writes over."""
    names = ["report.md", "report.json"] + [f for t in tasks for f in (f"curves_{t}.csv.gz", f"{t}.png")]
    return [n for n in names if os.path.exists(os.path.join(out, n))]


def keep_aside(out: str, new: dict, held: list[str]) -> None:
    """After a report was written over another (its files ``held`` as NAME.held meanwhile): where the earlier one
    (report.json) holds a task/method the new one does not, or one made otherwise (another T, number of seeds,
    base seed, streams as a task's init_args or d, or --set settings), its files are
    kept as report.N.md, report.N.json, curves_<task>.N.csv.gz, <task>.N.png (N the first free number) and said (a
    second call into one --out with another task or T replaced the first's report without a word); else they go."""
    old = {}
    if "report.json" in held:
        try:
            with open(os.path.join(out, "report.json.held"), encoding="utf-8") as fh:
                old = json.load(fh)
        except (OSError, ValueError):
            old = {}
    old = old if isinstance(old, dict) else {}
    same = ("rounds", "num_seeds", "base_seed", "streams", "settings")  # what a run was made with
    lost = [
        k
        for k, v in old.items()
        if k not in new or (isinstance(v, dict) and any(v.get(k2) != new[k].get(k2) for k2 in same))
    ]
    if not lost:
        for name in held:
            os.remove(os.path.join(out, name + ".held"))
        return
    n = next(n for n in range(1, 10**6) if not os.path.exists(os.path.join(out, f"report.{n}.md")))
    moved = []
    for name in held:
        ext = next(e for e in (".csv.gz", ".md", ".json", ".png") if name.endswith(e))  # a task may hold dots
        kept = f"{name[: -len(ext)]}.{n}{ext}"
        os.replace(os.path.join(out, name + ".held"), os.path.join(out, kept))
        moved.append(kept)
    print(
        f"the report there held {', '.join(sorted(lost)[:4])}{' ...' if len(lost) > 4 else ''}, which this one does not "
        f"(another task, T, seeds, streams or settings): kept as {', '.join(moved)}",
        flush=True,
    )


def settings_lines(settings: dict) -> list[str]:
    """The report's line on what the runs changed from each method's defaults ({method: "k=v ..."}),
    once when every run changed the same; nothing when none changed anything."""
    if not any(settings.values()):
        return []
    if len(set(settings.values())) == 1:
        return [
            "",
            f"Every run here changed these settings from its method's defaults: `{next(iter(settings.values()))}`.",
        ]
    return [
        "",
        "Settings each run changed from its method's defaults: "
        + "; ".join(f"{m} `{v}`" if v else f"{m} none" for m, v in settings.items())
        + ".",
    ]


def software_lines(made_with: dict, earlier: dict | None = None) -> list[str]:
    """The report's line on the software the runs were made with ({method: summary.json's software
    or None}): once when every run shares it, else per method; runs that did not record it named; the
    earlier parts of a resumed run ({method: summary.json's earlier_parts}) made with other software, named."""
    known = {m: software_text(v) for m, v in made_with.items() if v}
    if not known:
        return []
    texts = list(dict.fromkeys(known.values()))
    lines = [
        "",
        f"Made with {texts[0]}."
        if len(texts) == 1 and len(known) == len(made_with)
        else "Made with: " + "; ".join(f"{m}: {t}" for m, t in known.items()) + ".",
    ]
    older = [m for m, v in made_with.items() if not v]
    if older:
        lines[-1] += f" Not recorded (made before summary.json held it): {', '.join(older)}."
    other = [
        f"{m}: rounds {p['rounds'][0]}-{p['rounds'][1]} with {software_text(p['software'])}"
        for m, parts in (earlier or {}).items()
        if made_with.get(m)
        for p in parts
        if p.get("software") and software_text(p["software"]) != known[m]
    ]
    if other:
        lines[-1] += f" Earlier parts of resumed runs made with other software: {'; '.join(other)}."
    return lines
