"""A last-layer Laplace in place of NVLDB's variance-weighted V, for the short-horizon screens of
lab/results/short/prior/ (issue "Few answers, the GP's ground", item 3): a learner of one's own, from the sweep's
``learner`` key.

    python scripts/sweep.py --rounds 300 --seeds 8 --tasks square quadratic cos \
        --grid '[{"learner": "scripts.diagnostics.laplace_gram.LaplaceGram"},
                 {"learner": "scripts.diagnostics.laplace_gram.LaplaceGram", "evidence": true}]'

V_t = lambda I + sum_i g'(Delta f_i) Delta phi_i Delta phi_i^T: the Hessian of the logistic log-likelihood in theta at
theta_t with phi fixed (its Fisher weight g'(Delta f) <= 1/4 where NVLDB weighs a duel by 1/zeta_i^2 in [4, 1/eps^2]).
``evidence``: lambda is read from the answers per seed and update, the value of a grid of largest Laplace evidence
-lambda/2 ||theta - theta_0||^2 + p/2 log lambda - 1/2 log det V_lambda (theta held at the refit's theta_t, fitted
with the loss's lambda), as a GP fits its output scale. Only V changes: the loss, the refit and the deep self-duel
test are NVLDB's. Recompute mode only (the default).
"""

import math

import torch

from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.maths import gram, links, seedwise

LAMBDAS = tuple(10.0**k for k in (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0))


class LaplaceGram(NVLDB):
    def __init__(self, *args, evidence: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if self.hparams.gram_mode != "recompute":
            raise ValueError("model.gram_mode: LaplaceGram rebuilds V from the history (recompute)")
        self.evidence = bool(evidence)

    def _update_gram(self, t, theta, dphi, selected_dphi):
        hp = self.hparams
        df = seedwise.matvec(dphi, theta)  # [S, t]
        _, w = links.nll_derivatives(hp.link, df, self.hist_o[:, : df.shape[1]].to(df.dtype))  # g'(Delta f) [S, t]
        if not self.evidence:
            self.V = gram.gram_from_history(dphi, w, hp.lam)
            return
        p = dphi.shape[-1]
        data = gram.gram_from_history(dphi, w, 0.0)  # sum_i w_i dphi_i dphi_i^T [S, p, p]
        eye = torch.eye(p, dtype=data.dtype, device=data.device)
        gap = (theta - self.net.theta0.to(theta.dtype)).pow(2).sum(-1)  # ||theta - theta_0||^2 [S]
        scores = []
        for lam in LAMBDAS:
            logdet = torch.linalg.cholesky(data + lam * eye).diagonal(dim1=-2, dim2=-1).log().sum(-1) * 2
            scores.append(-0.5 * lam * gap + 0.5 * p * math.log(lam) - 0.5 * logdet)
        best = torch.stack(scores, -1).argmax(-1)  # [S]
        lam = torch.tensor(LAMBDAS, dtype=data.dtype, device=data.device)[best]
        self.V = data + lam[:, None, None] * eye
