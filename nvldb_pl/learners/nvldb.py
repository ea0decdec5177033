"""NVLDB (Algorithm 1), S seeds stacked in one set of parameters: :meth:`NVLDB.propose` is line 6, :meth:`NVLDB.update`
lines 8-13; the network and its Adam steps are :class:`~nvldb_pl.learners.neural.NeuralLearner`'s, shared with NDB.
A fit drives it through :class:`nvldb_pl.loop.module.LearnerModule`, the live API directly (docs/architecture.md)."""

from __future__ import annotations

from typing import Optional

import torch

from ..maths import gram, objective, seedwise, selection, selfduel
from . import nvldb_settings
from .base import Estimate, as_pairs, duel_gap
from .neural import NeuralLearner, pair_difference
from .nvldb_settings import ComputeOptions, NetworkOptions, NVLDBSettings, SamplerOptions, SelfDuelOptions


class NVLDB(NeuralLearner):
    __doc__ = "Neural variance-aware linear dueling bandit, S seeds at once.\n\n" + nvldb_settings.ARGUMENTS  # --help

    DEFERS_TRAINING = True  # update: a duel with train False joins V (and Z), the steps wait
    SETTINGS = NVLDBSettings  # self.settings: every argument typed, frozen, with its value in force

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        strategy: str = "ucb_asym",
        variance_aware: bool = True,
        oracle_variance: bool = False,
        network: NetworkOptions = NetworkOptions(),
        feature_dim: Optional[int] = None,
        lr: float = 1e-3,
        lam: float = 1.0,
        beta: Optional[float] = None,
        epsilon: Optional[float] = None,
        grad_steps: int = 20,
        episode: int = 1,
        train_network: bool = True,
        refit_theta: bool = True,
        refit_iterations: int = 8,
        gram_mode: str = "recompute",
        w_reg: float = 0.1,
        distinct_arms: bool = True,
        sampler: SamplerOptions = SamplerOptions(),
        compute: ComputeOptions = ComputeOptions(),
        self_duel: SelfDuelOptions = SelfDuelOptions(),
    ):
        args = nvldb_settings.resolved_args({k: v for k, v in locals().items() if k not in ("self", "__class__")})
        super().__init__(args, nvldb_settings.variance_mode(variance_aware, oracle_variance), w_reg)  # all checked
        s = self.settings  # NVLDBSettings: every argument typed, with its value in force
        self.selection_rule = selection.make_rule(strategy, s.beta, distinct_arms)  # line 3, built once
        num_params = sum(par[0].numel() for par in self.net.parameters())  # the self-duel test's Z: all of them
        self.self_duel = selfduel.make_test(s.self_duel.test, nvldb_settings.self_duel_settings(s, num_params))
        self.method = nvldb_settings.method_name(self, s)  # NVLDB-UCB-ASYM; a subclass or network by name
        self.register_buffer("V", lam * torch.eye(s.p, dtype=torch.float64).repeat(num_seeds, 1, 1))  # line 1: V_0

    # ------------------------------------------------------------------ Alg. 1 line 6
    @torch.no_grad()
    def estimate(self, contexts: torch.Tensor) -> Estimate:
        """The model's view of contexts [S, K, d] (float64): ``phi`` [S, K, p] = phi(x; W_{t-1}),
        utilities ``f`` [S, K] = theta_{t-1}^T phi, exploration norms ``norm`` [S, K, K] =
        ||Delta phi||_{V_{t-1}^{-1}}, and ``ok`` [S] (False where V was not positive definite)."""
        with torch.autocast(self.device.type, enabled=False):
            phi = self.net.features(contexts.float()).to(torch.float64)
            f = self.net.utility(phi, self.net.theta.to(torch.float64))
            norm, ok = gram.pairwise_norms(phi, self.V)
        return Estimate(f=f, norm=norm, phi=phi, ok=ok)

    @torch.no_grad()
    def propose(self, contexts: torch.Tensor, noise: torch.Tensor, t: int) -> dict:
        """Round t's pair from contexts [S, K, d] and TS noise [S, K, K] (line 6): the estimate, the rule, the
        self-duel test; with :meth:`_selection_terms`."""
        s = self.settings
        with self._timed("select"):
            est = self.estimate(contexts)
            f, norm = est.f, est.norm
            pair = self.selection_rule(f, norm, noise, t)  # line 6: a_t, b_t with beta, X_t, V_{t-1}
            if s.strategy not in selection.STRATEGIES:  # a rule of one's own, checked where it meets the loop
                pair = selection.checked_pair(self.selection_rule, pair, *f.shape)
            g = self._gradients(contexts) if self.self_duel.uses_gradients else None  # df/d(W, theta, b) [S, K, p]
            a1, a2 = self.self_duel(pair, f, norm, noise, t, g, self.execution.self_duels)
            if s.own_test:  # a test of one's own, checked as a rule is
                a1, a2 = selection.checked_pair(self.self_duel, (a1, a2), *f.shape, field="model.self_duel.test")
            self._flag_bad(~est.ok | ~torch.isfinite(f).all(dim=1), t)
        return {"a1": a1, "a2": a2, **self._selection_terms(est.phi, g, a1, a2)}

    @torch.no_grad()
    def memo(self, contexts, a1, a2):
        g = self._gradients(contexts) if self.self_duel.uses_gradients else None
        return self._selection_terms(self.estimate(contexts).phi, g, a1, a2)

    @staticmethod
    def _selection_terms(phi, g, a1, a2) -> dict:
        """What the update takes from selection time: ``dphi`` [S, p] (V's term in incremental mode) and, with the
        deep test's gradients g, ``dg`` [S, q] (its Gram gains every duel's, played or asked)."""
        return {"dphi": pair_difference(phi, a1, a2), **({} if g is None else {"dg": pair_difference(g, a1, a2)})}

    # ------------------------------------------------------------------ Alg. 1 lines 8-13
    def update(self, duel: dict) -> None:
        """After round t's duel joined the history: every H rounds n Adam steps (line 9), the theta
        refit (line 10), then V (lines 11-13); between updates, and for a duel whose ``train`` is False
        (:meth:`learn`), V gains the duel's term only."""
        s, t = self.settings, self.t
        if "dg" in duel:  # the self-duel test's Gram Z gains the duel's gradient difference (at selection time)
            with self._timed("gram"), torch.no_grad():
                self.self_duel.remember(duel["dg"])
        if t % s.episode != 0 or not duel.get("train", True):  # line 8 false: V gains round t's term (12-13) only
            with self._timed("gram"), torch.no_grad(), torch.autocast(self.device.type, enabled=False):
                df = self.net.utility(duel["dphi"].unsqueeze(1), self.net.theta.to(torch.float64))
                w = self._weights(df, t, t - 1)[:, 0]  # zeta_t of the newest duel only
                self.V = gram.rank_one_update(self.V, duel["dphi"], w)
            return
        if self._graphed():  # lines 9-10 as one CUDA graph per history bucket, replayed (nvldb_pl.machinery.graphs)
            with self._timed("train"), self._untimed():  # the refit's time is counted in train
                loss, theta, dphi = self.execution.steps(self._history_rows(t), lambda: self._train_and_refit(t))
        else:  # line 9: n Adam steps on eq. (total_loss); line 10: theta with W_t fixed
            loss, theta, dphi = self._train_and_refit(t)
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
            with self._timed("gram"):
                self._update_gram(t, theta, dphi, duel["dphi"])  # lines 12-13: zeta_t (eq. wi), V_t
            finite = torch.isfinite(theta).all(dim=1) & (torch.isfinite(loss) if loss is not None else True)
            self._flag_bad(~finite, t)

    def _train_and_refit(self, t: int) -> tuple[Optional[torch.Tensor], torch.Tensor, Optional[torch.Tensor]]:
        """Lines 9-10: the n Adam steps (loss per seed [S], or None when not trained), then the theta refit."""
        loss = None
        if self.settings.train_network and self.settings.grad_steps > 0:
            with self._timed("train"):
                loss = self._adam_steps(t)  # line 9: n Adam steps on eq. (total_loss)
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False), self._timed("refit"):
            theta, dphi = self._refit_theta(t)  # line 10: theta minimizing eq. (total_loss), W_t fixed
        return loss, theta, dphi

    def _refit_theta(self, t: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """theta_t by Newton with W_t fixed (line 10). Returns theta_t [S, d] (float64) and, when it
        was computed on the way, Delta phi_i of the whole history at W_t [S, t, d] (else None)."""
        s = self.settings
        theta, dphi = self.net.theta.to(torch.float64), None
        rows = self._sample_rows(t, 1) if s.refit_theta else None  # None: the whole history
        if s.gram_mode == "recompute" or (s.refit_theta and rows is None):
            dphi = duel_gap(self._history_features(self._history_rows(t)))  # Delta phi_i with W_t
        if s.refit_theta:  # on the whole history, or on a sample of B rows scaled t / B
            if rows is None:
                z, o, weights = dphi, self.hist_o[:, : dphi.shape[1]], lambda df: self._history_weights(df, t)
            else:
                x, o, weights = next(self._train_blocks(t, rows[:, 0]))
                z = duel_gap(as_pairs(self.net.features_t(x)))
            w = weights(seedwise.matvec(z, theta))
            theta = objective.refit_theta(s.link, theta, z, o, w, self.net.theta0, s.lam, s.refit_iterations)
            self.net.theta.copy_(theta)
        return theta, dphi

    def _update_gram(self, t: int, theta: torch.Tensor, dphi: Optional[torch.Tensor], dphi_t: torch.Tensor) -> None:
        """V_t (eq. gram_matrix). ``recompute``: from the whole history's Delta phi at W_t [S, t, p] with zeta at
        (theta_t, W_t); ``incremental``: V_{t-1} plus ``dphi_t`` [S, p] (selection time's) by its zeta there."""
        s = self.settings
        if s.gram_mode == "recompute":
            w = self._history_weights(seedwise.matvec(dphi, theta), t)
            self.V = gram.gram_from_history(dphi, w, s.lam)
        else:
            last = duel_gap(as_pairs(self.net.features_t(self.hist_xt[:, :, 2 * t - 2 : 2 * t])))  # [S, 1, p]
            df = seedwise.einsum("sd,sd->s", last[:, 0], theta).unsqueeze(1)
            w = self._weights(df, t, t - 1)[:, 0]
            self.V = gram.rank_one_update(self.V, dphi_t, w)
