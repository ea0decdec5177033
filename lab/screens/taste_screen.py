"""Screen for issue 81: which posterior ranks people whose taste is not linear, and which questions serve it.

    OMP_NUM_THREADS=1 python lab/screens/taste_screen.py --persons 8 --answers 100 --out lab/screens/taste.jsonl
    python lab/screens/taste_screen.py --summary lab/screens/taste.jsonl

A person of a kind (``linear``, ``ideal`` point, ``interact``ions, a ``mixture`` of two linear tastes, ``noisy``
linear, ``sharp`` nearly deterministic linear) meets a catalog (N items, d features, in the raw [0, 1] scale, a wide
raw scale [0, 100], or standardized), answers each question from uniforms drawn once per (person, catalog), so
every policy meets the same person and the same noise (paired by person). After 20, 40 and 100 answers each ranker
orders the items from the same answers, compared with the person's hidden order (Kendall tau):

- ``linear``: the page's posterior now (:func:`nvldb_pl.maths.posterior.linear_posterior` on the features as given);
- ``quad``: the same posterior on the standardized features, their squares and pairwise products;
- ``net``: the page's learner's own estimate (configs/live.yaml, features as given);
- ``netstd``: the same learner on standardized features;
- ``netlap``: the linear posterior on the standardized learner's phi (a last-layer Laplace, scale from the evidence),
  feature_dim 16;
- ``evid``: the linear and the quad posteriors averaged by their Laplace evidence (Bayesian model averaging);
- ``taste``: the page's ranking now, :func:`nvldb_pl.maths.posterior.taste_posterior` on the items as given;
- ``taste_sep``: the same model averaging over three maps, a separable one (the standardized features and their
  squares: an ideal point in 2d coefficients) between the linear and the quadratic;
- ``taste_net``: the same over the linear and quadratic maps and the standardized learner's phi (feature_dim 16),
  the network's last layer as a third map (its evidence is read on features fitted to the same answers);
- ``taste_sep_prior``: ``taste_sep`` with the separable map a priori ``exp(SEP_PRIOR)`` as likely as each other map;
- ``taste_sep_late``: the page's two maps until ``SEP_AFTER`` answers, the three after;
- ``taste_sep_prior_late``: both (the separable map joins after ``SEP_AFTER`` answers, with its prior);
- ``taste_items``: the page's maps (the separable one from 40 answers, as the page has it) and a fourth, the items'
  identity (one-hot, N columns: a utility of each item's own, Bradley-Terry under a Gaussian prior), a priori
  ``exp(ITEMS_PRIOR)`` as likely as each other map: any taste at all, once the answers outweigh its N coefficients.

Two hedges of the page's questions against a posterior that is wrong about the person: ``taste_mix`` asks a uniform
allowed pair with probability ``MIX`` and the page's question otherwise; ``taste_least`` asks, among the allowed pairs
whose BALD is at least ``NEAR`` of the best, the one asked least often so far (then the larger BALD).

Policies: ``random`` (a uniform pair, never the last one), ``page`` (objective rank: BALD on the raw learner's
estimate, as the page asked before the taste posterior), ``bald_linear``, ``bald_quad``, ``bald_netlap``,
``bald_evid`` (BALD under that ranker's posterior), ``taste``, ``taste_sep``, ``taste_net``, ``taste_sep_prior``,
``taste_sep_late`` (:func:`nvldb_pl.maths.ranking.posterior_pair` under that ranker's posterior among the pairs
:func:`nvldb_pl.maths.ranking.question_mask` allows: never the last pair, an item not yet shown in every pair until
all were; ``taste`` is the page now), ``gp`` (PairwiseGP's own active rule, the pair of largest posterior variance of
the gap, ranked by its posterior mean; needs the gp extra's venv). Each row: catalog, kind, person, policy, taus per
ranker at each count, the longest run of one pair, items never shown after 20 answers, dead-network count.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time

import numpy as np
import torch
import yaml

from nvldb_pl.live import DuelingBandit
from nvldb_pl.maths.posterior import (
    SEPARABLE_AFTER,
    SEPARABLE_LOG_PRIOR,
    linear_posterior,
    taste_maps,
    taste_posterior,
)
from nvldb_pl.maths.ranking import bald, posterior_pair, question_mask
from nvldb_pl.serve.items import kendall_tau

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
KINDS = ("linear", "ideal", "interact", "mixture", "noisy", "sharp")
CATALOGS = {"N8d2": (8, 2), "N30d4": (30, 4), "N60d12": (60, 12)}
SCALES = ("raw", "wide", "std")
POLICIES = (
    "random",
    "page",
    "bald_linear",
    "bald_quad",
    "bald_netlap",
    "bald_evid",
    "gp",
    "taste",
    "taste_sep",
    "taste_net",
    "taste_sep_prior",
    "taste_sep_late",
    "taste_sep_prior_late",
    "taste_mix",
    "taste_least",
    "taste_items",
)
RANKERS = (
    "linear",
    "quad",
    "net",
    "netstd",
    "netlap",
    "evid",
    "gp",
    "taste",
    "taste_sep",
    "taste_net",
    "taste_sep_prior",
    "taste_sep_late",
    "taste_sep_prior_late",
    "taste_items",
)
SEP_PRIOR = -2.0  # taste_sep_prior: the separable map's log prior odds against each of the page's two maps
SEP_AFTER = 40  # taste_sep_late: the separable map joins the average after this many answers
CHECKS = (20, 40, 100, 200)
MIX = 0.25  # taste_mix: the share of uniform allowed pairs
NEAR = 0.5  # taste_least: the share of the best BALD a pair needs to be a candidate
ITEMS_PRIOR = 0.0  # taste_items: the item-identity map's log prior odds against each of the page's maps


def catalog(name: str, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """(the features as given [N, d], the same in [0, 1] for the persons' tastes)."""
    N, d = CATALOGS[name]
    u01 = np.random.default_rng([81, N, d]).uniform(0, 1, (N, d))
    if scale == "raw":
        return u01, u01
    if scale == "wide":
        return 100.0 * u01, u01
    return (u01 - u01.mean(0)) / u01.std(0), u01


def person(kind: str, x01: np.ndarray, p: int):
    """(answer probability P[i, j] that i beats j [N, N], hidden order scores [N])."""
    rng = np.random.default_rng([82, KINDS.index(kind), p, *x01.shape])
    N, d = x01.shape
    c = x01 - 0.5

    def spread(u, s=3.0):
        return s * (u - u.mean()) / (u.std() + 1e-12)

    def pref(u):
        return 1.0 / (1.0 + np.exp(-(u[:, None] - u[None, :])))

    if kind in ("linear", "noisy", "sharp"):
        u = spread(c @ rng.standard_normal(d), {"linear": 3.0, "noisy": 1.0, "sharp": 10.0}[kind])
        return pref(u), u
    if kind == "ideal":
        centre = rng.uniform(0.2, 0.8, d)
        w = rng.uniform(0.5, 1.5, d)
        u = spread(-(((x01 - centre) ** 2) * w).sum(1))
        return pref(u), u
    if kind == "interact":
        A = rng.standard_normal((d, d))
        A = np.triu(A, 1)
        u = spread(np.einsum("ni,ij,nj->n", c, A, c) + 0.3 * c @ rng.standard_normal(d))
        return pref(u), u
    ua, ub = spread(c @ rng.standard_normal(d)), spread(c @ rng.standard_normal(d))
    P = 0.5 * pref(ua) + 0.5 * pref(ub)
    return P, P.mean(1)  # the order: how often each item wins against the catalog (Borda)


def quad_features(x: np.ndarray) -> np.ndarray:
    z = (x - x.mean(0)) / (x.std(0) + 1e-12)
    cols = [z, z**2 - 1.0] + [z[:, [i]] * z[:, [j]] for i, j in itertools.combinations(range(z.shape[1]), 2)]
    return np.concatenate(cols, axis=1) / math.sqrt(z.shape[1])


class Posterior:
    """The linear posterior on a feature map of the items, refit from the answers on demand."""

    def __init__(self, feats: np.ndarray):
        self.F = torch.as_tensor(feats, dtype=torch.float64)

    def fit(self, pairs, outcomes):
        z = self.F[[i for i, _ in pairs]] - self.F[[j for _, j in pairs]]
        mean, cov, _ = linear_posterior(z, torch.tensor(outcomes, dtype=torch.float64))
        f = self.F @ mean
        C = self.F @ cov @ self.F.T
        return f, C


def evidence_posterior(F: torch.Tensor, pairs, outcomes):
    """The linear posterior on items' features F [N, q] (:func:`linear_posterior`) as the items' means and
    covariance, with its log evidence log p(D)."""
    z = F[[i for i, _ in pairs]] - F[[j for _, j in pairs]]
    mean, cov, _, log_ev = linear_posterior(z, torch.tensor(outcomes, dtype=torch.float64), with_evidence=True)
    return F @ mean, F @ cov @ F.T, log_ev


class Evidence:
    """Bayesian model averaging of the linear posteriors on several feature maps, weighted by their evidence."""

    def __init__(self, *feats: np.ndarray):
        self.Fs = [torch.as_tensor(f, dtype=torch.float64) for f in feats]
        self.F = self.Fs[0]
        self.last_weights = None

    def fit(self, pairs, outcomes):
        fits = [evidence_posterior(F, pairs, outcomes) for F in self.Fs]
        top = max(f[2] for f in fits)
        pw = torch.tensor([math.exp(f[2] - top) for f in fits], dtype=torch.float64)
        pw = pw / pw.sum()
        self.last_weights = pw.tolist()
        f = sum(p * m[0] for p, m in zip(pw, fits))
        C = sum(p * (m[1] + torch.outer(m[0] - f, m[0] - f)) for p, m in zip(pw, fits))
        return f, C


def bald_pair(f, C, last, shown):
    var = torch.diagonal(C).unsqueeze(1) + torch.diagonal(C).unsqueeze(0) - 2 * C
    score = bald(f.unsqueeze(1) - f.unsqueeze(0), torch.sqrt(var.clamp(min=0)))
    return constrained_argmax(score, last, shown)


def constrained_argmax(score, last, shown):
    N = score.shape[0]
    score = score.clone()
    score.fill_diagonal_(-math.inf)
    if last is not None:
        score[last[0], last[1]] = score[last[1], last[0]] = -math.inf
    unseen = shown == 0
    if unseen.any():  # every item early: a pair with an item not yet shown
        keep = torch.as_tensor(unseen).unsqueeze(1) | torch.as_tensor(unseen).unsqueeze(0)
        score = score.masked_fill(~keep, -math.inf)
    flat = int(torch.argmax(score.flatten()))
    return flat // N, flat % N


def live_model(**extra) -> dict:
    with open(os.path.join(ROOT, "configs", "live.yaml")) as fh:
        return {**yaml.safe_load(fh)["model"], **extra}


def taste_fit(x, pairs, outcomes):
    """The page's taste posterior on the answers so far: f [N], cov [N, N]."""
    X = torch.as_tensor(x, dtype=torch.float64)
    first, second = X[[i for i, _ in pairs]], X[[j for _, j in pairs]]
    f, cov, _ = taste_posterior(X, first, second, torch.tensor(outcomes, dtype=torch.float64))
    return f, cov


def separable(x: np.ndarray) -> np.ndarray:
    z = (x - x.mean(0)) / (x.std(0) + 1e-12)
    return np.concatenate([z, z**2 - 1.0], axis=1) / math.sqrt(z.shape[1])


def maps_fit(Fs, pairs, outcomes, log_prior=None):
    """taste_posterior's model averaging over the item feature matrices Fs ([N, q] each), each map's evidence times
    exp(log_prior[k]) (0 for all when None): f [N], cov [N, N]."""
    o = torch.tensor(outcomes, dtype=torch.float64)
    fits = []
    for k, F in enumerate(Fs):
        F = torch.as_tensor(F, dtype=torch.float64)
        z = F[[i for i, _ in pairs]] - F[[j for _, j in pairs]] if pairs else torch.zeros(0, F.shape[1]).double()
        mean, cov, _, log_ev = linear_posterior(z, o, "logistic", with_evidence=True)
        fits.append((log_ev + (log_prior[k] if log_prior else 0.0), F @ mean, F @ cov @ F.T))
    top = max(f[0] for f in fits)
    pw = torch.tensor([math.exp(f[0] - top) for f in fits], dtype=torch.float64)
    pw = pw / pw.sum()
    f = sum(p * m[1] for p, m in zip(pw, fits))
    return f, sum(p * (m[2] + torch.outer(m[1] - f, m[1] - f)) for p, m in zip(pw, fits))


def run(
    cat: str,
    scale: str,
    kind: str,
    p: int,
    policy: str,
    answers: int,
    rankers=RANKERS,
    sep_prior=SEP_PRIOR,
    items_prior=ITEMS_PRIOR,
) -> dict:
    x, x01 = catalog(cat, scale)
    N, d = x.shape
    P, truth = person(kind, x01, p)
    uniforms = np.random.default_rng([83, p, N, d, KINDS.index(kind)]).uniform(size=answers)
    rng = np.random.default_rng([84, p, POLICIES.index(policy)])
    xs = (x - x.mean(0)) / (x.std(0) + 1e-12)
    raw = DuelingBandit.create(dim=d, horizon=200, seed=p, objective="rank", **live_model())
    std = DuelingBandit.create(dim=d, horizon=200, seed=p, objective="rank", **live_model(feature_dim=16))
    lin, quad = Posterior(x), Posterior(quad_features(x))
    evid = Evidence(x, quad_features(x))
    nets = policy in ("page", "bald_netlap", "taste_net") or bool(
        {"net", "netstd", "netlap", "taste_net"} & set(rankers)
    )
    xq = taste_maps(x)
    lin_F, quad_F = xq["linear"](x), xq["quadratic"](x)
    sep_F = torch.as_tensor(separable(x), dtype=torch.float64)
    map_sets = {
        "taste_sep": lambda: (lin_F, sep_F, quad_F),
        "taste_net": lambda: (lin_F, quad_F, phi_of(std, xs)),
        "taste_sep_prior": lambda: (lin_F, quad_F, sep_F),
        "taste_sep_late": lambda: (lin_F, quad_F, sep_F) if len(pairs) >= SEP_AFTER else (lin_F, quad_F),
        "taste_sep_prior_late": lambda: (lin_F, quad_F, sep_F) if len(pairs) >= SEP_AFTER else (lin_F, quad_F),
    }
    page_sep_F = taste_maps(x, separable=True)["separable"](x)
    eye = torch.eye(N, dtype=torch.float64)
    map_sets["taste_items"] = lambda: (
        (lin_F, quad_F, page_sep_F, eye) if len(pairs) >= SEPARABLE_AFTER else (lin_F, quad_F, eye)
    )
    priors = {
        "taste_sep_prior": lambda: (0.0, 0.0, sep_prior),
        "taste_sep_prior_late": lambda: (0.0, 0.0, sep_prior),
        "taste_items": lambda: (
            (0.0, 0.0, SEPARABLE_LOG_PRIOR, items_prior) if len(pairs) >= SEPARABLE_AFTER else (0.0, 0.0, items_prior)
        ),
    }
    pairs, outcomes, shown = [], [], np.zeros(N, dtype=int)
    asked = np.zeros((N, N), dtype=int)  # times each pair was asked, either order
    last, run_len, longest = None, 0, 0
    taus, never_shown, t0 = {}, None, time.perf_counter()
    for t in range(1, answers + 1):
        if policy == "random":
            while True:
                i, j = rng.choice(N, 2, replace=False)
                if last is None or {int(i), int(j)} != set(last):
                    break
        elif policy == "page":
            i, j = raw.select(x)
        elif policy == "taste":  # the page's questions now
            f, C = taste_fit(x, pairs, outcomes)
            allowed = question_mask(torch.as_tensor(shown > 0), last)
            i, j = posterior_pair(f, C, allowed)
        elif policy in ("taste_mix", "taste_least"):
            f, C = taste_fit(x, pairs, outcomes)
            allowed = question_mask(torch.as_tensor(shown > 0), last)
            i, j = hedged_pair(policy, f, C, allowed, asked, rng)
        elif policy in map_sets:
            f, C = maps_fit(map_sets[policy](), pairs, outcomes, priors[policy]() if policy in priors else None)
            i, j = posterior_pair(f, C, question_mask(torch.as_tensor(shown > 0), last))
        elif policy == "gp":  # PairwiseGP's own active rule: the pair of largest Var(f_i - f_j) (needs the gp extra)
            i, j = gp_question(x, pairs, outcomes, rng)
        else:
            post = {"bald_linear": lin, "bald_quad": quad, "bald_evid": evid}.get(policy)
            if post is not None:
                f, C = post.fit(pairs, outcomes) if pairs else (torch.zeros(N, dtype=torch.float64), post.F @ post.F.T)
            else:
                phi = phi_of(std, xs)
                f, C = Posterior(phi).fit(pairs, outcomes) if pairs else (torch.zeros(N), torch.eye(N))
            i, j = bald_pair(f, C.to(torch.float64), last, shown)
        i, j = int(i), int(j)
        o = int(uniforms[t - 1] < P[i, j])
        run_len = run_len + 1 if last is not None and {i, j} == set(last) else 1
        longest = max(longest, run_len)
        last = (i, j)
        shown[[i, j]] += 1
        asked[i, j] += 1
        asked[j, i] += 1
        pairs.append((i, j))
        outcomes.append(o)
        if nets:
            raw.observe(x, i, j, o)
            std.observe(xs, i, j, o)
        if t == 20:
            never_shown = int((shown == 0).sum())
        if t in CHECKS:
            scorers = {
                "linear": lambda: lin.fit(pairs, outcomes)[0].numpy(),
                "quad": lambda: quad.fit(pairs, outcomes)[0].numpy(),
                "net": lambda: raw.scores(x),
                "netstd": lambda: std.scores(xs),
                "netlap": lambda: Posterior(phi_of(std, xs)).fit(pairs, outcomes)[0].numpy(),
                "evid": lambda: evid.fit(pairs, outcomes)[0].numpy(),
                "taste": lambda: taste_fit(x, pairs, outcomes)[0].numpy(),
                "taste_sep": lambda: maps_fit(map_sets["taste_sep"](), pairs, outcomes)[0].numpy(),
                "taste_net": lambda: maps_fit(map_sets["taste_net"](), pairs, outcomes)[0].numpy(),
                "taste_sep_prior": lambda: maps_fit(
                    map_sets["taste_sep_prior"](), pairs, outcomes, priors["taste_sep_prior"]()
                )[0].numpy(),
                "taste_sep_late": lambda: maps_fit(map_sets["taste_sep_late"](), pairs, outcomes)[0].numpy(),
                "taste_sep_prior_late": lambda: maps_fit(
                    map_sets["taste_sep_prior_late"](), pairs, outcomes, priors["taste_sep_prior_late"]()
                )[0].numpy(),
                "taste_items": lambda: maps_fit(map_sets["taste_items"](), pairs, outcomes, priors["taste_items"]())[
                    0
                ].numpy(),
            }
            taus[t] = {rk: kendall_tau(fn(), truth) for rk, fn in scorers.items() if rk in rankers}
            if policy == "gp" and "gp" in rankers:
                taus[t]["gp"] = kendall_tau(gp_fit(x, pairs, outcomes)[0].numpy(), truth)
    dead = int(np.ptp(raw.scores(x)) == 0) if nets else None
    return {
        "catalog": cat,
        "scale": scale,
        "kind": kind,
        "person": p,
        "policy": policy,
        "tau": taus,
        "longest_run": longest,
        "never_shown_at_20": never_shown,
        "raw_net_flat": dead,
        "seconds": round(time.perf_counter() - t0, 2),
        "sep_prior": sep_prior,
        "items_prior": items_prior,
    }


def hedged_pair(policy, f, C, allowed, asked, rng):
    """taste_mix / taste_least's question (the module docstring) among ``allowed`` [N, N]."""
    if policy == "taste_mix" and rng.uniform() < MIX:
        i, j = np.argwhere(np.triu(allowed.numpy() | allowed.numpy().T, 1))[rng.integers(0, int(allowed.sum() // 2))]
        return int(i), int(j)
    if policy == "taste_mix":
        return posterior_pair(f, C, allowed)
    var = torch.diagonal(C).unsqueeze(1) + torch.diagonal(C).unsqueeze(0) - 2 * C
    score = bald(f.unsqueeze(1) - f.unsqueeze(0), torch.sqrt(var.clamp(min=0.0)))
    score = score.masked_fill(~allowed | torch.eye(len(f), dtype=torch.bool), -math.inf)
    near = score >= NEAR * score.max()
    key = torch.where(near, -torch.as_tensor(asked, dtype=torch.float64) * 1e6 + score, torch.tensor(-math.inf))
    flat = int(torch.argmax(key.flatten()))
    return flat // len(f), flat % len(f)


def gp_fit(x, pairs, outcomes):
    """PairwiseGP (logit likelihood, hyperparameters by Laplace evidence) on the answers so far, as
    lab/diagnostics/rank_tau.py fits it: posterior mean [N] and covariance [N, N]."""
    sys.path.insert(0, os.path.join(ROOT, "lab", "diagnostics"))
    from rank_tau import gp_posterior

    comps = [[i, j] if o else [j, i] for (i, j), o in zip(pairs, outcomes)]
    return gp_posterior(torch.as_tensor(x, dtype=torch.float64), comps)


def gp_question(x, pairs, outcomes, rng):
    N = x.shape[0]
    if not pairs:
        return tuple(int(k) for k in rng.choice(N, 2, replace=False))
    _, cov = gp_fit(x, pairs, outcomes)
    var = torch.diag(cov).unsqueeze(1) + torch.diag(cov).unsqueeze(0) - 2 * cov
    var.fill_diagonal_(-math.inf)
    flat = int(torch.argmax(var))
    return flat // N, flat % N


@torch.no_grad()
def phi_of(bandit: DuelingBandit, x: np.ndarray) -> np.ndarray:
    L = bandit.learner
    return L.net.features(torch.as_tensor(x, dtype=torch.float32).unsqueeze(0))[0].double().numpy()


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    for t in ("20", "40", "100"):
        print(f"\n## tau after {t} answers (mean ± s.e. over persons), rows kind x scale, cells policy/ranker")
        cells = {}
        for r in rows:
            if t in r["tau"]:
                for rk, v in r["tau"][t].items():
                    cells.setdefault((r["kind"], r["policy"], rk), []).append(v)
        heads = [(pol, rk) for pol in POLICIES for rk in RANKERS]
        heads = [h for h in heads if any((k, *h) in cells for k in KINDS)]
        for kind in KINDS:
            best = []
            for pol, rk in heads:
                v = cells.get((kind, pol, rk))
                if v:
                    best.append((np.mean(v), np.std(v) / math.sqrt(len(v)), len(v), pol, rk))
            best.sort(reverse=True)
            print(kind, " | ".join(f"{pol}/{rk} {m:.3f}±{s:.3f} (n{n})" for m, s, n, pol, rk in best[:8]))
    print("\n## tau after 100 answers by catalog and scale (mean over persons, n)")
    picks = [
        ("gp", "gp"),
        ("random", "linear"),
        ("page", "linear"),
        ("bald_linear", "linear"),
        ("bald_quad", "quad"),
        ("bald_netlap", "netlap"),
        ("bald_evid", "evid"),
        ("random", "evid"),
        ("random", "taste"),
        ("taste", "taste"),
    ]
    by = {}
    for r in rows:
        for pol, rk in picks:
            if r["policy"] == pol and "100" in r["tau"] and rk in r["tau"]["100"]:
                by.setdefault((r["kind"], r["catalog"], r["scale"]), {}).setdefault(f"{pol}/{rk}", []).append(
                    r["tau"]["100"][rk]
                )
    for key in sorted(by):
        print(*key, " | ".join(f"{k} {np.mean(v):.3f} (n{len(v)})" for k, v in by[key].items()))
    runs = {}
    for r in rows:
        runs.setdefault(r["policy"], []).append(r["longest_run"])
    print("\nlongest run of one pair:", {k: max(v) for k, v in runs.items()})


def paired(paths: list, answers: str = "100") -> None:
    """The page now (policy and ranker taste) against random pairs under the same posterior and PairwiseGP's own
    rule and mean, paired by (catalog, kind, person): a markdown table per kind, over every catalog and per catalog."""
    rows = [json.loads(line) for path in paths for line in open(path)]
    tau = {}
    for r in rows:
        for rk, v in r["tau"].get(answers, {}).items():
            tau[(r["catalog"], r["kind"], r["person"], r["policy"], rk)] = v
    arms = {"page": ("taste", "taste"), "random": ("random", "taste"), "gp": ("gp", "gp")}
    print("| kind | catalogs | persons | the page | random pairs | PairwiseGP | page - random | page - GP |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for cats in [tuple(CATALOGS)] + [(c,) for c in CATALOGS]:
            keys = sorted({(c, p) for (c, k, p, pol, rk) in tau if k == kind and c in cats and pol == "taste"})
            got = {a: [tau.get((c, kind, p, *arms[a])) for c, p in keys] for a in arms}
            cell, diff = [], []
            for a in arms:
                v = [x for x in got[a] if x is not None]
                cell.append(f"{np.mean(v):.3f} ± {np.std(v) / math.sqrt(len(v)):.3f}" if v else "–")
            for other in ("random", "gp"):
                d = [x - y for x, y in zip(got["page"], got[other]) if x is not None and y is not None]
                diff.append(f"{np.mean(d):+.3f} ± {np.std(d) / math.sqrt(len(d)):.3f} (n{len(d)})" if d else "–")
            name = "all" if len(cats) > 1 else cats[0]
            print(f"| {kind} | {name} | {len(keys)} | " + " | ".join(cell + diff) + " |")
    runs = [r["longest_run"] for r in rows if r["policy"] == "taste"]
    unseen = [r["never_shown_at_20"] for r in rows if r["policy"] == "taste" and r["catalog"] != "N60d12"]
    print(
        f"\nthe page's questions: longest run of one pair {max(runs)} over {len(runs)} persons; items never shown "
        f"after 20 answers (8 and 30 items): at most {max(unseen)}"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--persons", type=int, default=8)
    ap.add_argument("--answers", type=int, default=100)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--catalogs", nargs="+", default=list(CATALOGS))
    ap.add_argument("--scales", nargs="+", default=list(SCALES))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--rankers", nargs="+", default=list(RANKERS))
    ap.add_argument("--sep-prior", type=float, default=SEP_PRIOR, help="taste_sep_prior's log prior odds")
    ap.add_argument("--items-prior", type=float, default=ITEMS_PRIOR, help="taste_items's log prior odds")
    ap.add_argument("--person-from", type=int, default=0, help="the first person (a second thread takes the rest)")
    ap.add_argument("--out")
    ap.add_argument("--summary")
    ap.add_argument("--paired", nargs="+", metavar="ROWS", help="the page against random pairs and the GP, by person")
    a = ap.parse_args(argv)
    if a.summary:
        summary(a.summary)
        return
    if a.paired:
        paired(a.paired)
        return
    done = set()
    if a.out and os.path.exists(a.out):
        for line in open(a.out):
            r = json.loads(line)
            done.add((r["catalog"], r["scale"], r["kind"], r["person"], r["policy"]))
    for p in range(a.person_from, a.persons):
        for cat, scale, kind, policy in itertools.product(a.catalogs, a.scales, a.kinds, a.policies):
            if (cat, scale, kind, p, policy) in done:
                continue
            write_row(a.out, run(cat, scale, kind, p, policy, a.answers, tuple(a.rankers), a.sep_prior, a.items_prior))


def write_row(out, row: dict) -> None:
    """A finished row appended to ``out`` as it comes (a stopped screen goes on from the rows there), else printed."""
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    else:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
