"""Run the paper's comparison grid and write the reproduction report.

    nvldb-reproduce --out lab/results/synthetic                                  # the full grid (or python scripts/reproduce.py)
    python scripts/reproduce.py --out lab/results/synthetic                       # the same
    python scripts/reproduce.py --out /tmp/quick --rounds 200 --seeds 3      # a quick version
    python scripts/reproduce.py --out lab/results/synthetic --report-only        # tables/figures only

Methods (default): the six NVLDB rules, NLDB-UCB-ASYM, NDB-UCB, NDB-TS, CoLSTIM, VACDB, MaxInP,
Random; the other five NLDB rules on request (see nvldb_pl/learners/registry.py); a method may also be the import
path of one's own DuelingLearner subclass, or of a SelectionRule subclass (NVLDB with that rule). Tasks: cos,
square, quadratic, statlog, magic, covertype, or the import path of a Task subclass (docs/extending.md). A finished run under <out>/runs made with the same T, seeds, base seed,
--set and --dim is reused (other settings run anew beside it); a run stopped by Ctrl-C, SIGTERM or a killed job goes on
from its last checkpoint when the same command is given again; the report covers every finished run there
for the tasks asked (for methods not run in this call, the newest one), so methods run one per call add up to
one report; --report-only reports just the --methods asked (the newest finished run of each). A method's runs with
other --set settings on the same streams stay beside it, each named by its settings (NDB-UCB{network.width=8}; the
defaults' run by the method alone). Writes <out>/report.md,
<out>/<task>.png (needs matplotlib: pip install -e '.[report]'), <out>/curves_<task>.csv.gz and
TensorBoard logs (tensorboard --logdir <out>/runs).
"""

import argparse
import os
import shlex
import signal
import sys

from ..learners.registry import DEFAULT_METHODS, LITERAL_LEARNERS, LITERAL_SUFFIX, METHODS
from .arguments import check_positive, parse_overrides
from .cluster import GridStopped, add_ray_arguments, connect, gpus_asked, run_grid_on_ray
from .grid import check_grid, finished_runs, run_grid, with_variants
from ..machinery.host import check_folder_can_be_made
from .curves import committed_curves
from .report import write_report
from ..loop.run import RunStopped, check_placement
from ..machinery.own_modules import find_own_modules_here


def data_settings(a) -> dict:
    """--dim, --arms and --data KEY=VALUE as the data module's arguments, each name checked."""
    from ..learners.registry import init_args
    from ..loop.data import BanditDataModule

    given = parse_overrides(a.data, "--data")
    takes = init_args(BanditDataModule) - {"task", "rounds", "num_seeds", "seed", "first_seed_id"}
    unknown = sorted(set(given) - takes)
    if unknown:
        raise ValueError(f"--data: no data setting {unknown}; the data take {sorted(takes)}")
    if "dim" in given or "arms" in given:
        raise ValueError("--data: give dim and arms as --dim and --arms")
    return {**given, **{k: v for k, v in (("dim", a.dim), ("arms", a.arms)) if v is not None}}


def parser() -> argparse.ArgumentParser:
    """The grid's options (``--help`` lists them with their defaults)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=os.path.expanduser, help="folder for runs and the report")
    p.add_argument("--tasks", nargs="+", default=["cos", "square", "quadratic"])
    p.add_argument(
        "--methods",
        nargs="+",
        default=DEFAULT_METHODS,
        help=f"default: {' '.join(DEFAULT_METHODS)}; also: {' '.join(m for m in METHODS if m not in DEFAULT_METHODS)}",
    )
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument(
        "--base-seed", type=int, default=0, help="another set of streams: seed id i of base seed b is its own stream"
    )
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        metavar="I",
        help="seed ids I .. I+S-1: the same streams as those seeds of a run from 0 (a run split in parts)",
    )
    p.add_argument("--dim", type=int, default=None, help="context dimension d of the synthetic tasks (default 5)")
    p.add_argument("--arms", type=int, default=None, help="arms K a round of the synthetic tasks (default 5)")
    p.add_argument(
        "--data",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="data settings for every task, as main.py's --data.KEY: data_file=my.csv (with --tasks table), "
        "link=probit, label_column=species, ...",
    )
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="model arguments for every method that accepts them, e.g. width=8 grad_steps=5",
    )
    p.add_argument(
        "--accelerator",
        default="cpu",
        choices=["cpu", "gpu"],
        help="device of every run (one device; wall times in the report name it when not cpu)",
    )
    p.add_argument("--report-only", action="store_true", help="only reuse finished runs; run nothing")
    p.add_argument(
        "--cell",
        type=int,
        default=None,
        metavar="I",
        help="run only the grid's (task, method) pairs at places I, I+N, ... (of --cells N): one share of a job "
        "array's N tasks; no report (--report-only builds it once every share finished)",
    )
    p.add_argument("--cells", type=int, default=None, metavar="N", help="the number of shares --cell counts")
    add_ray_arguments(p, "(task, method)")
    p.add_argument(
        "--literal-from",
        default=None,
        type=os.path.expanduser,
        metavar="DIR",
        help="a report folder made with the literal reading (its curves_<task>.csv.gz, same T and seeds): "
        "its NVLDB, NLDB and NDB runs join this report as '<method>-literal', its other baselines "
        "(which the defaults do not change) under their own names where not run here",
    )
    return p


def main(argv=None):
    find_own_modules_here()  # a --methods, --tasks or --set class of one's own, from the working folder
    a = parser().parse_args(argv)
    try:
        check_placement(a.accelerator)  # before --out is made: a refused run leaves no empty folder
        check_positive("--rounds", a.rounds)
        check_positive("--seeds", a.seeds)
        if a.arms is not None and a.arms < 2:
            raise ValueError(f"--arms: a duel needs at least 2 arms, got {a.arms}")
        if a.first_seed < 0:
            raise ValueError(f"--first-seed: must be >= 0, got {a.first_seed}")
        if not 0 <= a.base_seed <= 2**32 - 1:  # numpy's seeds (its own message names no option)
            raise ValueError(f"--base-seed: must be between 0 and {2**32 - 1}, got {a.base_seed}")
        a.tasks, a.methods = list(dict.fromkeys(a.tasks)), list(dict.fromkeys(a.methods))  # each once
        if (a.cell is None) != (a.cells is None):
            raise ValueError("--cell and --cells: give both (share I of N), or neither")
        if a.cells is not None:
            check_positive("--cells", a.cells)
            if not 0 <= a.cell < a.cells:
                raise ValueError(f"--cell: must be between 0 and --cells - 1 = {a.cells - 1}, got {a.cell}")
            if a.report_only:
                raise ValueError("--cell: a share runs part of the grid; --report-only builds the report of them all")
        if a.ray is not None and (a.cell is not None or a.report_only):
            raise ValueError(
                f"--ray: runs the whole grid; not with {'--cell' if a.cell is not None else '--report-only'}"
            )
        if a.ray is not None:
            connect(a.ray)  # the extra and the cluster, before --out is made
        check_folder_can_be_made(a.out, "--out")
        extra, note = {}, ""
        if a.literal_from:  # read before any run: a wrong folder is found now, not after hours of runs
            if not os.path.isdir(a.literal_from):
                raise ValueError(f"--literal-from: {a.literal_from} is not a folder")
            extra = {
                t: {
                    (m + LITERAL_SUFFIX if m.startswith(LITERAL_LEARNERS) else m): c
                    for m, c in committed_curves(a.literal_from, t, a.rounds, a.seeds).items()
                }
                for t in a.tasks
            }
            if not any(extra.values()):
                raise ValueError(
                    f"--literal-from: no curves_<task>.csv.gz with T={a.rounds}, {a.seeds} seeds in {a.literal_from}"
                )
            note = (
                f"The '-literal' rows, and baselines not run here, come from `{a.literal_from}` (its committed "
                "curves: every round to 100, then every 10th; no wall time or self-duel share), run on the same "
                "streams and seeds."
            )
        os.makedirs(a.out, exist_ok=True)
        streams = data_settings(a)  # the report pairs only runs on these streams (a run of another d is not one)
        command = "python scripts/reproduce.py " + " ".join(
            shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])
        )
        if a.report_only:
            runs = finished_runs(a.out, a.tasks, a.methods, a.rounds, a.seeds, a.base_seed, a.first_seed, streams)
            runs = with_variants(runs, a.out, a.rounds, a.seeds, a.base_seed, a.first_seed, streams)
            if not runs:
                raise ValueError(
                    f"--report-only: no finished runs under {a.out}/runs for T={a.rounds}, S={a.seeds}"
                    + (f", {streams}" if streams else "")
                )
        else:
            grid = dict(
                out=a.out,
                tasks=a.tasks,
                methods=a.methods,
                rounds=a.rounds,
                num_seeds=a.seeds,
                base_seed=a.base_seed,
                overrides=parse_overrides(a.set),
                accelerator=a.accelerator,
                data_overrides=streams,
                first_seed=a.first_seed,
            )
            if a.ray is not None:
                check_grid(a.tasks, a.methods, a.rounds, a.seeds, grid["overrides"], a.accelerator, streams)
                done = run_grid_on_ray(a.ray, grid, a.ray_cpus, gpus_asked(a))
            else:
                done = run_grid(**grid, cell=None if a.cell is None else (a.cell, a.cells))
            if a.cell is not None:  # the shares run at once: one report, once they all finished
                print(
                    f"share {a.cell} of {a.cells}: {len(done)} of {len(a.tasks) * len(a.methods)} runs of the grid "
                    f"done; once every share finished, the same command with --report-only instead of --cell "
                    f"writes the report"
                )
                return 0
            # the report keeps the methods earlier calls ran here (their newest finished run): one method per
            # call adds up to one report; this call's methods are the runs it made or reused
            runs = {
                **finished_runs(a.out, a.tasks, list(METHODS), a.rounds, a.seeds, a.base_seed, a.first_seed, streams),
                **done,
            }
            runs = with_variants(runs, a.out, a.rounds, a.seeds, a.base_seed, a.first_seed, streams)
            made_here = set(done.values())
            earlier = list(dict.fromkeys(m for (t, m), f in runs.items() if f not in made_here))
            if earlier:
                command += f"` plus the runs of earlier calls in this folder: `{' '.join(earlier)}"
        print("wrote", write_report(a.out, runs, command, extra, note))
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunStopped as stop:  # a first Ctrl-C or SIGTERM: the run stopped at the end of a round, saved
        name = "Ctrl-C" if stop.signum == signal.SIGINT else signal.Signals(stop.signum).name
        print(
            f"stopped by {name}: {stop.where} at round {stop.round}, saved in {stop.checkpoint}; the finished "
            f"runs are kept, and the same command goes on from there",
            file=sys.stderr,
        )
        return 128 + stop.signum  # as a shell reports a signal: 130, 143
    except GridStopped as stop:  # --ray: the unfinished runs cancelled, each saved where it could be
        name = "Ctrl-C" if stop.signum == signal.SIGINT else signal.Signals(stop.signum).name
        print(
            f"stopped by {name}: {len(stop.finished)} of {len(stop.finished) + len(stop.left)} runs finished"
            + "".join(f"; {t} {m}" for t, m in stop.finished)
            + "; the same command reuses them and goes on with the others from their last saves",
            file=sys.stderr,
        )
        return 128 + stop.signum
    except KeyboardInterrupt:  # a second Ctrl-C (at once), or one between runs
        print(
            "stopped by Ctrl-C; the finished runs are kept, and a stopped run goes on from its last save (every "
            "100 rounds) when the same command is given again",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
