"""Do the page's bands hold the truth as often as they say? The taste posterior's 90% bands, per kind of person.

    OMP_NUM_THREADS=1 python lab/screens/taste_bands.py --persons 12 > lab/screens/rows/taste_bands.txt

Persons of taste_screen.py's kinds (the mixture left out: its order is not a utility on the link's scale) on its
catalogs, answering random pairs; after 20, 40 and 100 answers, how often the 90% band of g(f_k - mean f) (the
page's "vs an average item", :func:`nvldb_pl.maths.posterior.posterior_ranking_view`) holds the true g(u_k - mean u),
over items and persons, for the page's posterior now (``taste``: linear, quadratic and, from 40 answers, separable
maps by evidence), the two maps of before (``two``: ``separable_after=None``) and the linear map alone (``linear``: the
page before that, on the items' own standardized features).
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taste_screen import CATALOGS, catalog, person  # noqa: E402

from nvldb_pl.maths import links  # noqa: E402
from nvldb_pl.maths.posterior import (  # noqa: E402
    SEPARABLE_AFTER,
    linear_posterior,
    posterior_ranking_view,
    taste_maps,
    taste_posterior,
)

KINDS = ("linear", "ideal", "interact", "noisy", "sharp")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--persons", type=int, default=12)
    a = ap.parse_args()
    print(
        "| kind | catalog | answers | taste: band holds the truth | two maps | linear alone "
        "| taste's weight on quadratic, separable |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for cat in CATALOGS:
            held = {n: {"taste": [], "two": [], "linear": [], "w": [], "ws": []} for n in (20, 40, 100)}
            for p in range(a.persons):
                x, x01 = catalog(cat, "raw")
                P, u = person(kind, x01, p)
                rng = np.random.default_rng([85, p])
                N = len(u)
                pairs = [tuple(rng.choice(N, 2, replace=False)) for _ in range(100)]
                o = np.array([float(rng.uniform() < P[i, j]) for i, j in pairs])
                truth = links.prob("logistic", torch.tensor(u - u.mean()))
                for n in held:
                    first, second = x[[i for i, _ in pairs[:n]]], x[[j for _, j in pairs[:n]]]
                    for name, after in (("taste", SEPARABLE_AFTER), ("two", None)):
                        f, cov, w = taste_posterior(x, first, second, o[:n], separable_after=after)
                        view = posterior_ranking_view(f, cov, "logistic")
                        held[n][name].append(float(((view["low"] <= truth) & (truth <= view["high"])).double().mean()))
                        if name == "taste":
                            held[n]["w"].append(w["quadratic"])
                            held[n]["ws"].append(w.get("separable", 0.0))
                    phi = taste_maps(x)["linear"]
                    mean, c, _ = linear_posterior(phi(first) - phi(second), o[:n])
                    F = phi(x)
                    view = posterior_ranking_view(F @ mean, F @ c @ F.T, "logistic")
                    held[n]["linear"].append(float(((view["low"] <= truth) & (truth <= view["high"])).double().mean()))
            for n, h in held.items():
                print(
                    f"| {kind} | {cat} | {n} | {np.mean(h['taste']):.0%} | {np.mean(h['two']):.0%} "
                    f"| {np.mean(h['linear']):.0%} | {np.mean(h['w']):.2f}, {np.mean(h['ws']):.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
