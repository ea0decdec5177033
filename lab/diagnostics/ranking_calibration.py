"""The page's ranking against what the same answers allow, and whether its bands say how sure it is.

    python lab/diagnostics/ranking_calibration.py --persons 20 --out lab/results/short/ranking/calibration.jsonl
    .venv-gp/bin/python lab/diagnostics/ranking_calibration.py --persons 20 --rankers gp --out ...

Each simulated person of lab/diagnostics/rank_tau.py's four catalogs answers the page's questions (objective
rank over every item, configs/live.yaml's learner). After 10, 20, 40 and 100 answers, each ranker orders the items
from the same answers:

* ``network``: the learner's own estimate f = theta^T phi(x), its bands those the page showed before (a_t ||.||_V^-1,
  :func:`nvldb_pl.maths.ranking.ranking_view`);
* ``linear``: the Bayesian linear-logistic posterior of :mod:`nvldb_pl.maths.posterior` (Laplace, prior variance by
  evidence), its 90% bands from its covariance: what the page shows now;
* ``gp``: BoTorch's PairwiseGP fitted to the answers, its posterior mean and covariance (needs the gp extra).

Per ranker: Kendall tau to the person's hidden order; the share of items whose true "probability preferred to the
average item", g(u_k - mean u), lies in the shown band (90% if the band is honest); the share of pairs the ranking
puts in the true order, and the share it says it does (``settled``). ``--summary FILE`` prints the tables.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

from nvldb_pl.live import DuelingBandit
from nvldb_pl.maths import links
from nvldb_pl.maths.posterior import item_posterior, linear_posterior, posterior_ranking_view
from nvldb_pl.maths.ranking import ranking_view
from nvldb_pl.serve.items import kendall_tau
from scripts.diagnostics.rank_tau import CONFIG, catalogs, gp_posterior, person

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

RANKERS = ("network", "linear", "gp")
AT = (10, 20, 40, 100)


def _gp_view(x, answers, link):
    X = torch.tensor(x, dtype=torch.float64)
    f, cov = gp_posterior(X, [[a, b] if won else [b, a] for a, b, won in answers])
    return f.double(), posterior_ranking_view(f.double(), cov.double(), link)


def views(ranker: str, bandit: DuelingBandit, x: np.ndarray, answers: list, link: str):
    """(scores [N], the page's view) of one ranker from the answers so far."""
    if ranker == "network":
        est = bandit.learner.estimate(torch.as_tensor(x, dtype=torch.float32).unsqueeze(0))
        beta = float(bandit.learner.hparams.get("beta") or 1.0)
        return est.f[0].double(), ranking_view(est.f[0].double(), est.norm[0].double(), beta, link)
    if ranker == "linear":
        z = np.array([x[a] - x[b] for a, b, _ in answers])
        o = np.array([float(won) for _, _, won in answers])
        mean, cov, _ = linear_posterior(z, o, link)
        f, cov_f = item_posterior(x, mean, cov)
        return f, posterior_ranking_view(f, cov_f, link)
    return _gp_view(x, answers, link)


def measure(f, view, u: np.ndarray, link: str) -> dict:
    f = f.numpy()
    truth = links.prob(link, torch.as_tensor(u - u.mean())).numpy()
    low, high = view["low"].numpy(), view["high"].numpy()
    i, j = np.triu_indices(len(u), 1)
    return {
        "tau": kendall_tau(f, u),
        "covered": float(np.mean((low <= truth) & (truth <= high))),
        "right_order": float(np.mean(np.sign(f[i] - f[j]) == np.sign(u[i] - u[j]))),
        "settled": view["settled"],
    }


def run(make, p: int, rankers, answers: int, scale: float) -> dict:
    x, u, uniforms, _ = person(make, p, answers, scale)
    bandit = DuelingBandit.from_config(CONFIG, dim=x.shape[1], seed=p, objective="rank")
    link = bandit.learner.hparams["link"]
    given, out = [], {r: {} for r in rankers}
    for n in range(answers):
        i, j = bandit.select(x)
        won = bool(uniforms[n] < 1 / (1 + math.exp(-(u[i] - u[j]))))
        bandit.observe(x, i, j, int(won))
        given.append((i, j, won))
        if n + 1 in AT:
            for r in rankers:
                out[r][n + 1] = measure(*views(r, bandit, x, given, link), u, link)
    return out


def summarize(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    for stat in ("tau", "covered", "right_order", "settled"):
        print(f"\n{stat} (mean ± s.e. over persons)\n")
        cats = list(dict.fromkeys(r["catalog"] for r in rows))
        rankers = list(dict.fromkeys(r["ranker"] for r in rows))
        print("| catalog | answers | " + " | ".join(rankers) + " |")
        print("|---|---|" + "---|" * len(rankers))
        for c in cats:
            for n in [n for n in AT if any(str(n) in row["at"] for row in rows)]:
                cells = []
                for r in rankers:
                    v = [row["at"][str(n)][stat] for row in rows if row["catalog"] == c and row["ranker"] == r]
                    v = [x for x in v if x is not None]
                    cells.append(
                        f"{np.mean(v):.3f} ± {np.std(v, ddof=1) / math.sqrt(len(v)):.3f}" if len(v) > 1 else ""
                    )
                print(f"| {c} | {n} | " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--persons", type=int, default=20)
    ap.add_argument("--rankers", nargs="+", default=["network", "linear"], choices=RANKERS)
    ap.add_argument("--scale", type=float, default=3.0, help="the person's utilities' scale (answer noise)")
    ap.add_argument("--answers", type=int, default=max(AT))
    ap.add_argument("--out", help="JSON lines: one row a catalog, person and ranker")
    ap.add_argument("--summary", help="print the tables of this file")
    a = ap.parse_args(argv)
    if a.summary:
        summarize(a.summary)
        return 0
    if a.persons < 1 or a.answers < 1:
        ap.error("--persons and --answers: at least 1")
    fh = open(a.out, "a") if a.out else None
    for name, make in catalogs().items():
        for p in range(a.persons):
            res = run(make, p, a.rankers, a.answers, a.scale)
            for r in a.rankers:
                row = {"catalog": name, "person": p, "ranker": r, "at": res[r]}
                if fh:
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
            print(name, p, {r: res[r].get(10, {}).get("tau") for r in a.rankers}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
