"""Slow, obviously-correct references written straight from the paper's equations.

One seed at a time, Python loops over arms, pairs and history rows, numpy float64. The
vectorized package code is tested against these.
"""

from __future__ import annotations

import math

import numpy as np


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def features(x, weights, width):
    """eq. (nn) for one seed and one context: phi = sqrt(m) ReLU(W^L ... ReLU(W^1 x))."""
    h = np.asarray(x, dtype=np.float64)
    for w in weights:
        h = np.maximum(np.asarray(w, dtype=np.float64) @ h, 0.0)
    return math.sqrt(width) * h


def width_between(phi_a, phi_b, V):
    """||phi_a - phi_b||_{V^{-1}} by a direct linear solve."""
    diff = np.asarray(phi_a, np.float64) - np.asarray(phi_b, np.float64)
    return math.sqrt(max(float(diff @ np.linalg.solve(V, diff)), 0.0))


def argmax_first(values):
    best, arg = -math.inf, 0
    for i, v in enumerate(values):
        if v > best:
            best, arg = v, i
    return arg


def select(strategy, f, W, beta, noise, t, distinct=False):
    """One seed: f [K], W [K][K] widths, noise [K][K]. Returns (a1, a2) per the section's equations.

    ``distinct``: the package's option that never pairs an arm with itself.
    """
    K = len(f)
    kind, rule = strategy.split("_")
    if rule == "asym":
        a1 = argmax_first(f)
        scores = []
        for k in range(K):
            if distinct and k == a1:
                scores.append(-math.inf)
            elif kind == "ucb":
                scores.append(f[k] + beta * W[k][a1])
            else:
                scores.append((f[k] - f[a1]) + beta * W[k][a1] * noise[0][k])
        return a1, argmax_first(scores)
    if rule == "osym":
        best, pair = -math.inf, (0, 0)
        for k in range(K):
            for k2 in range(K):
                if distinct and k == k2:
                    continue
                bonus = beta * W[k][k2] * (noise[k][k2] if kind == "ts" else 1.0)
                score = f[k] + f[k2] + bonus
                if score > best:
                    best, pair = score, (k, k2)
        return pair
    cand = []
    greedy = argmax_first(f)
    for k in range(K):
        ok = all(beta * W[k][k2] > f[k2] - f[k] for k2 in range(K) if k2 != k)
        if ok or k == greedy:
            cand.append(k)
    if distinct and len(cand) == 1:  # a lone candidate c duels its optimistic competitor, as ASYM
        c = cand[0]
        scores = [
            -math.inf if k == c else f[k] + beta * W[c][k] * (noise[c][k] if kind == "ts" else 1.0) for k in range(K)
        ]
        return c, argmax_first(scores)
    best, pair = -math.inf, None
    for k in range(K):
        for k2 in range(K):
            if distinct and k == k2:
                continue
            if k not in cand or k2 not in cand:
                continue
            if kind == "ucb":
                score = W[k][k2]
            else:
                mean = W[k][k2] ** 2
                std = math.sqrt(W[k][k2] ** 4 / (4.0 * math.log(K * t * t)))
                score = mean + std * noise[k][k2]
            if score > best:
                best, pair = score, (k, k2)
    return pair


def zeta(delta, epsilon, variance_aware=True):
    if not variance_aware:
        return 1.0
    p = sigmoid(delta)
    return max(math.sqrt(p * (1 - p)), epsilon)


def loss(theta, theta0, dphis, outcomes, zetas, lam):
    """eq. (total_loss) for one seed, logistic link, looping over the history."""
    total = 0.0
    for dphi, o, z in zip(dphis, outcomes, zetas):
        df = float(np.dot(theta, dphi))
        s = 1.0 if o == 1 else -1.0
        total += -math.log(sigmoid(s * df)) / z**2
    return total + 0.5 * lam * float(np.sum((np.asarray(theta) - np.asarray(theta0)) ** 2))


def gram(dphis, zetas, lam, d):
    """eq. (gram_matrix) for one seed."""
    V = lam * np.eye(d)
    for dphi, z in zip(dphis, zetas):
        dphi = np.asarray(dphi, np.float64)
        V += np.outer(dphi, dphi) / z**2
    return V


def regret(u, a1, a2):
    """(r^a, r^w) of the Objective section for one seed and round."""
    best = max(u)
    return (2 * best - u[a1] - u[a2]) / 2, best - max(u[a1], u[a2])
