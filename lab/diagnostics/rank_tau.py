"""How well a ranking is learned from few answers: Kendall tau to a simulated person's hidden order, per policy.

    python lab/diagnostics/rank_tau.py --persons 20 --out lab/results/rank/tau.jsonl
    .venv-gp/bin/python lab/diagnostics/rank_tau.py --persons 20 --policies gp_variance --out lab/results/rank/tau.jsonl

A person p has a hidden linear taste w ~ N(0, I_d) over the catalog's item contexts (unit norm), utilities
u = scale * x^T w / ||w||, and answers "i over j" with probability sigmoid(u_i - u_j) (logistic noise), from
uniforms drawn once per person: every policy meets the same person and the same noise (paired by person). On the
Train catalog, person p is 20 trips drawn for p and the logit fitted to the real choices
(:mod:`nvldb_pl.environments.train_choices`), its utilities in the data's own scale. After
each of the first ``--answers`` answers the learned order (the learner's scores of every item) is compared with u.

Policies: ``regret`` (configs/live.yaml's learner, its own rule, ``--offer`` random items a question as the page
offers them, and over every item: ``regret_all``), ``rank`` (objective rank: the most informative pair among all
items, :mod:`nvldb_pl.maths.ranking`), ``random`` (a uniform random pair; the learner learns from it), and
``gp_variance`` (BoTorch's PairwiseGP, the pair of largest posterior variance of f_i - f_j, its order the posterior
mean; needs the gp extra). Each row: catalog, policy, person, tau after each answer. ``--summary FILE`` prints
the table (mean ± standard error over persons at 10/20/40 answers, and paired differences to ``random``).
"""

import argparse
import copy
import functools
import json
import math
import os
import sys

import numpy as np
import torch

from nvldb_pl.environments import train_choices as tc
from nvldb_pl.live import DuelingBandit
from nvldb_pl.serve.items import builtin_catalog, contexts_of, kendall_tau, read_items

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

POLICIES = ("regret", "regret_all", "rank", "random", "gp_variance")
CONFIG = os.path.join(ROOT, "configs", "live.yaml")


def catalogs() -> dict:
    """name -> person(p) -> (contexts [N, d], hidden utilities u [N]): the built-in catalog, docs/serve-items.csv
    and 25 random items of 6 features, each with person p's random linear taste; and 20 trips of the Train data
    drawn for person p, whose utilities are the logit fitted to the travellers' real choices."""
    raw = np.round(np.random.default_rng(7).uniform(0, 1, (25, 6)), 2)
    fixed = {
        "built-in (12 items, d=5)": builtin_catalog().contexts,
        "serve-items.csv (8, d=5)": read_items(os.path.join(ROOT, "docs", "serve-items.csv")).contexts,
        "random (25, d=6)": contexts_of(raw, [f"f{i}" for i in range(6)], "random catalog"),
    }
    out = {name: functools.partial(_taste, x) for name, x in fixed.items()}
    out["Train trips (20, d=4), fitted person"] = lambda p, scale: tc.catalog(20, seed=p)[2:]
    return out


def _taste(x: np.ndarray, p: int, scale: float):
    w = np.random.default_rng([2026, p]).standard_normal(x.shape[1])
    return x, scale * x @ (w / np.linalg.norm(w))


def person(make, p: int, answers: int, scale: float):
    """(contexts, utilities, the answers' uniforms, the policy's generator) of person p: the same for every policy."""
    x, u = make(p, scale)
    rng = np.random.default_rng([2027, p])
    return x, u, rng.uniform(size=answers), rng


def gp_posterior(X: torch.Tensor, comps) -> tuple[torch.Tensor, torch.Tensor]:
    """PairwiseGP (logit likelihood, hyperparameters fitted by Laplace evidence) on comparisons ``comps`` [[winner,
    loser], ...] of items X [N, d]: its posterior mean [N] and covariance [N, N] over the items' utilities."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.likelihoods.pairwise import PairwiseLogitLikelihood
    from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood

    model = PairwiseGP(X, torch.as_tensor(comps, dtype=torch.long), likelihood=PairwiseLogitLikelihood())
    try:
        fit_gpytorch_mll(PairwiseLaplaceMarginalLogLikelihood(model.likelihood, model))
    except Exception:  # a failed hyperparameter fit keeps the defaults
        pass
    with torch.no_grad():
        post = model.posterior(X)
        return post.mean.squeeze(-1), post.covariance_matrix.squeeze(0)


def _gp_pick(X, comps, rng):
    """PairwiseGP on the comparisons so far; the pair of largest Var(f_i - f_j) and the posterior mean."""
    N = X.shape[0]
    if not comps:
        i, j = rng.choice(N, 2, replace=False)
        return (int(i), int(j)), np.zeros(N)
    mean, cov = gp_posterior(X, comps)
    var = torch.diag(cov).unsqueeze(1) + torch.diag(cov).unsqueeze(0) - 2 * cov
    var.fill_diagonal_(-math.inf)
    flat = int(torch.argmax(var))
    return (flat // N, flat % N), mean.numpy()


def run(
    policy: str,
    make,
    p: int,
    answers: int,
    offer: int,
    scale: float,
    config: str = CONFIG,
    batch: int = 1,
    pending: bool = False,
    train_all: bool = False,
) -> list[float]:
    x, u, uniforms, rng = person(make, p, answers, scale)
    N, taus = x.shape[0], []
    if policy == "gp_variance":
        X, comps = torch.tensor(x, dtype=torch.float64), []
        for n in range(answers + 1):  # one fit an answer: its mean is the order after it, its variance the next pair
            (i, j), mean = _gp_pick(X, comps, rng)
            if n > 0:
                taus.append(kendall_tau(mean, u))
            if n < answers:
                won = uniforms[n] < 1 / (1 + math.exp(-(u[i] - u[j])))
                comps.append([i, j] if won else [j, i])
        return taus
    bandit = DuelingBandit.from_config(
        config, dim=x.shape[1], seed=p, objective="rank" if policy == "rank" else "regret"
    )
    for n in range(answers):
        if n % batch == 0:  # a group's questions are chosen on the learner as it stood before the group
            asked = bandit if batch == 1 else copy.deepcopy(bandit)
        if policy == "random":
            offered = sorted(rng.choice(N, 2, replace=False).tolist())
            i, j = 0, 1
        else:
            k = N if policy in ("rank", "regret_all") else min(offer, N)
            offered = sorted(rng.choice(N, k, replace=False).tolist()) if k < N else list(range(N))
            i, j = asked.select(x[offered])
            if pending and batch > 1:  # the question asked, not answered yet: its copy's V gains the pair
                asked.pending(x[offered], i, j)
        a, b = offered[i], offered[j]
        won = uniforms[n] < 1 / (1 + math.exp(-(u[a] - u[b])))
        # a group's answers join the history one by one, the network's steps taken after its last only
        bandit.observe(x[offered], i, j, int(won), train=train_all or (n + 1) % batch == 0 or n + 1 == answers)
        taus.append(kendall_tau(bandit.scores(x), u))
    return taus


def summarize(path: str, at=(10, 20, 40)) -> None:
    """Per catalog: tau mean ± standard error over persons after each of ``at`` answers, and in brackets the mean
    paired difference to ``random`` over the persons both have (a row made under another config says which)."""
    table: dict = {}
    for line in open(path):
        r = json.loads(line)
        name = (
            r["policy"]
            + (f" ({r['config']})" if r.get("config") else "")
            + (f" (batch {r['batch']})" if r.get("batch") else "")
        )
        table.setdefault(r["catalog"], {}).setdefault(name, {})[r["person"]] = r["tau"]
    for cat, pol in table.items():
        print(f"\n{cat}\n| policy | persons | " + " | ".join(f"tau after {n}" for n in at) + " |")
        print("|---|---|" + "---|" * len(at))
        base = pol.get("random", {})
        for name in sorted(
            pol,
            key=lambda n: (
                n.split()[0] not in POLICIES,
                POLICIES.index(n.split()[0]) if n.split()[0] in POLICIES else 0,
                n,
            ),
        ):
            persons = sorted(pol[name])
            cells = []
            for n in at:
                v = np.array([pol[name][p][n - 1] for p in persons if len(pol[name][p]) >= n])
                cell = f"{v.mean():.3f} ± {v.std(ddof=1) / math.sqrt(len(v)):.3f}" if len(v) > 1 else "–"
                shared = [p for p in persons if p in base and len(base[p]) >= n and len(pol[name][p]) >= n]
                if name != "random" and len(shared) > 1:
                    d = np.array([pol[name][p][n - 1] - base[p][n - 1] for p in shared])
                    cell += f" ({d.mean():+.3f} ± {d.std(ddof=1) / math.sqrt(len(d)):.3f})"
                cells.append(cell)
            print(f"| {name} | {len(persons)} | " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--persons", type=int, default=20)
    ap.add_argument("--first-person", type=int, default=0)
    ap.add_argument("--answers", type=int, default=40)
    ap.add_argument("--offer", type=int, default=4, help="items offered a question under 'regret' (the page's)")
    ap.add_argument("--scale", type=float, default=3.0, help="the person's utilities' scale (answer noise)")
    ap.add_argument("--policies", nargs="+", default=["regret", "regret_all", "rank", "random"], choices=POLICIES)
    ap.add_argument("--catalogs", nargs="+", default=None, help="names of catalogs() to run (default: all)")
    ap.add_argument(
        "--batch",
        type=int,
        default=1,
        help="answers that come together, as to the page under load: their questions chosen on the learner as it "
        "stood before them, the network's steps taken after the last (default 1: every answer)",
    )
    ap.add_argument("--config", default=CONFIG, help="the learner's config (default configs/live.yaml)")
    ap.add_argument("--out", default=None, help="JSON lines, one a (catalog, policy, person), appended")
    ap.add_argument("--summary", default=None, metavar="FILE", help="print the table of FILE and stop")
    ap.add_argument(
        "--pending",
        action="store_true",
        help="with --batch: each question asked joins the V of the "
        "learner the group's questions are chosen on (DuelingBandit.pending)",
    )
    ap.add_argument(
        "--train-all",
        action="store_true",
        help="with --batch: the steps after every answer (only the questions chosen on the learner before the group)",
    )
    ap.add_argument("--at", type=int, nargs="+", default=[10, 20, 40], help="the table's answer counts (10 20 40)")
    a = ap.parse_args(argv)
    if a.batch < 1 or min(a.at) < 1:
        ap.error("--batch and --at: at least 1")
    if a.summary:
        summarize(a.summary, a.at)
        return 0
    torch.set_num_threads(1)
    cats = catalogs()
    for name in a.catalogs or list(cats):
        make = cats[name]
        for policy in a.policies:
            for p in range(a.first_person, a.first_person + a.persons):
                taus = run(policy, make, p, a.answers, a.offer, a.scale, a.config, a.batch, a.pending, a.train_all)
                row = {"catalog": name, "policy": policy, "person": p, "scale": a.scale, "offer": a.offer, "tau": taus}
                if a.batch != 1:
                    row["batch"] = (
                        f"{a.batch}" + (" pending" if a.pending else "") + (" train all" if a.train_all else "")
                    )
                if a.config != CONFIG:
                    row["config"] = os.path.relpath(a.config, ROOT)
                shown = " ".join(f"@{n} {taus[n - 1]:.2f}" for n in (10, 20, 40) if n <= len(taus))
                print(f"{name} {policy} person {p}: tau {shown}", flush=True)
                if a.out:
                    with open(a.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
    if a.out:
        summarize(a.out, a.at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
