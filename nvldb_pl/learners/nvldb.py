"""NVLDB (Algorithm 1) as a plain torch algorithm: S independent seeds stacked in one set of parameters.

Reading order, one round t (in a fit, the callback :class:`nvldb_pl.loop.callbacks.DuelingLoop` drives 1-2 and
puts the duel into the batch, and the adapter :class:`nvldb_pl.loop.module.LearnerModule` runs 3-4 through
``learn``; the live API calls the same two methods):

1. ``propose`` (Alg. 1 line 6): ``estimate`` (phi(x_{t,k}; W_{t-1}), f = theta_{t-1}^T phi, the
   exploration norms ||Delta phi||_{V_{t-1}^{-1}}), then the rule object of :mod:`nvldb_pl.maths.selection`;
   the duel carries Delta phi at W_{t-1}. The network and its Adam steps live in
   :class:`nvldb_pl.learners.neural.NeuralLearner`, shared with NDB.
2. the environment answers o_t ~ Bernoulli(g(u(x_a1) - u(x_a2))) (line 7).
3. ``observe`` appends (x_a1, x_a2, o_t) to the preallocated history.
4. ``update`` (lines 8-13): every H rounds, ``_adam_steps`` (n Adam steps on eq. (total_loss) over
   the whole history, warm-started), ``_refit_theta`` (Newton with W fixed), ``_update_gram``
   (zeta of eq. wi and V).

zeta during training: the weights 1/zeta_i^2 are recomputed, detached, from the current
parameters at every Adam step (eq. wi: "by (theta_t, W_t)"); the theta refit holds them at their
value after the Adam steps so that it solves one fixed convex problem; V then uses zeta at the
final (theta_t, W_t).

Gram modes: ``recompute`` rebuilds V_t = lambda I + sum_i dphi_i dphi_i^T / zeta_i^2 from the whole
history with the current phi and zeta after each update (what the paper's experiments do,
appendix "Hyperparameters"); ``incremental`` adds dphi_t dphi_t^T / zeta_t^2 with dphi_t taken at
selection time (Alg. 1 line 13, eq. gram_matrix's W_{i-1}). Between updates (H > 1) the two agree.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ..maths import gram, objective, seedwise, selection, selfduel
from ..maths.checks import LINKED_FROM_DATA
from .base import Estimate, as_pairs
from .network_settings import ComputeOptions, SamplerOptions
from .nvldb_settings import NVLDBSettings, SelfDuelOptions, resolved_args, variance_mode
from .neural import TRAIN_CHUNK_ROUNDS, NeuralLearner, pair_difference

__all__ = ["NVLDB", "LINKED_FROM_DATA", "LITERAL", "LITERAL_OF", "TRAIN_CHUNK_ROUNDS"]

# The strict reading of the equations, where the defaults follow the practice of the public code
# the paper's experiments build on (configs/literal/ and the reports' "-literal" methods).
LITERAL = {"parametrization": "ntk", "bias": False, "distinct_arms": False}
# ... and NVLDB's loss as eq. (total_loss) writes it: no prior toward the initial weights (the default's w_reg 0.1)
LITERAL_OF = {"NVLDB": {**LITERAL, "w_reg": 0.0}, "NDB": LITERAL}


class NVLDB(NeuralLearner):
    """Neural variance-aware linear dueling bandit, S seeds at once.

    Args (paper symbol in brackets):
        dim, arms, rounds, num_seeds, link: linked from the data module (d, K, T, S, g).
        strategy: arm-selection rule, one of :data:`nvldb_pl.maths.selection.STRATEGIES`, or the import path of
            a :class:`nvldb_pl.maths.selection.SelectionRule` subclass.
        variance_aware: zeta_i = max(sigma_hat_i, epsilon) if true (NVLDB), 1 if false (NLDB).
        oracle_variance: use the true sigma_i instead of sigma_hat_i (needs variance_aware).
        width, depth: m and L of eq. (nn).
        parametrization: ``ntk`` (eq. nn literally: sqrt(m) output factor, no biases) or
            ``standard`` (``nn.Linear`` layers: no sqrt(m), optional biases); see :mod:`nvldb_pl.maths.network`.
        activation: every layer's nonlinearity, ``relu`` (eq. nn), ``gelu`` or ``silu`` (smooth: no unit of phi
            dies; :mod:`nvldb_pl.maths.network`).
        bias: biases in every layer (``standard`` only); ``None`` = true for ``standard``, false for ``ntk``.
        feature_dim: the dimension p of phi and theta (W^L in R^{p x m}, V p x p); ``None`` = d, eq. (nn).
        init: ``kaiming`` or ``paper`` (eq. init) for ``ntk``; ``kaiming``, ``torch`` or ``normal``
            for ``standard``; ``None`` = kaiming.
        lr: Adam step size [eta].
        lam: regularization [lambda] of eq. (total_loss) and V_0 = lambda I.
        beta: confidence width coefficient [a_t]; ``None`` = 1, the paper's value (``None`` rather
            than 1 so that ``--model CoLSTIM`` on an NVLDB config gets the baseline's own default).
        epsilon: lower bound on zeta [epsilon] of eq. (wi); ``None`` = 1/sqrt(d), the order
            Theorem (Variance-aware UCB methods) asks for (epsilon = O(1/sqrt(d))).
        grad_steps: Adam steps per update [n].
        episode: update every H rounds [H].
        train_network: take the n Adam steps (Alg. 1 line 9).
        refit_theta: refit theta with W fixed (Alg. 1 line 10).
        refit_iterations: Newton iterations of that refit.
        gram_mode: ``recompute`` or ``incremental``.
        distinct_arms: the rule itself never duels an arm with itself, as NDB's public code (the
            equations allow it; see :mod:`nvldb_pl.maths.selection`); ``self_duel`` may then still play the
            greedy arm's self-duel.
        self_duel: when the greedy arm's self-duel replaces the rule's distinct pair: a
            :class:`~nvldb_pl.learners.nvldb_settings.SelfDuelOptions` (test, escape_rate, width, second_arm), in
            YAML a mapping; default: the deep test ``deep_diag`` where distinct_arms, else none.
        sampler: the rows each Adam step trains on, a
            :class:`~nvldb_pl.learners.network_settings.SamplerOptions` (size, weighting); default the whole history.
        compute: how the steps are computed, not what, a
            :class:`~nvldb_pl.learners.network_settings.ComputeOptions` (backward, history_pass).
        network: phi of one's own: the import path of a one-seed ``torch.nn.Module`` mapping [N, d] to
            [N, p] (or ``{class_path, init_args}``), stacked over seeds by :mod:`nvldb_pl.maths.user_network`;
            then width, depth, parametrization, activation, bias and init are not used, and it trains by autograd.
            ``None``: the built-in MLP of eq. (nn).
        w_reg: mu >= 0 of an extra term mu/2 sum_l ||W^l - W^l_0||^2 in the loss, a prior toward the initial
            weights (not in the paper's eq. total_loss, which regularizes theta only: 0 = the paper, as
            configs/literal/ runs). Default 0.1, chosen by measurement (lab/results/short/prior/README.md).
    """

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
        width: int = 32,
        depth: int = 3,
        parametrization: str = "standard",
        activation: str = "relu",
        bias: Optional[bool] = None,
        feature_dim: Optional[int] = None,
        init: Optional[str] = None,
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
        network: Optional[Union[str, dict]] = None,
    ):
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        args = resolved_args(args)  # checked, naming the field; derived values in force (nvldb_settings.py)
        super().__init__(args, variance_mode(variance_aware, oracle_variance), w_reg)  # hparams, self.settings
        s = self.settings  # NVLDBSettings: every argument typed, with its value in force
        beta, sd = s.beta, s.self_duel
        self.own_test = s.own_test
        self.selection_rule = selection.make_rule(strategy, beta, distinct_arms)  # line 3, built once (an acquisition)
        settings = selfduel.SelfDuelSettings(
            num_seeds=num_seeds,
            num_params=sum(par[0].numel() for par in self.net.parameters()),  # Z over all network parameters
            lam=lam,
            beta=beta,
            width=beta if sd.width is None else sd.width,
            escape_rate=sd.escape_rate,
            second_arm=sd.second_arm,
            strategy=strategy,
        )
        self.self_duel = selfduel.make_test(sd.test, settings)  # built once, owns its Gram Z
        # the method's name: a subclass by its class name, a network of one's own in brackets
        if type(self) is NVLDB:
            prefix = "NVLDB" if variance_aware else "NLDB"
        else:
            prefix = type(self).__name__ + ("" if variance_aware else "-NLDB")
        self.method = prefix + "-" + selection.rule_label(strategy)
        if network is not None:
            self.method += f"[{self.net.path.rpartition('.')[2]}]"
        if oracle_variance:  # not the estimate NVLDB is: said in its name (summaries, the CLI's last line)
            self.method += "-oracle"
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
        """Round t's pair from contexts [S, K, d] and TS noise [S, K, K] (line 6): the estimate,
        then the rule; with ``dphi`` [S, p] = Delta phi_{t,a1,a2} at W_{t-1} (V's new term in
        incremental mode)."""
        with self._timed("select"):
            est = self.estimate(contexts)
            f, norm = est.f, est.norm
            pair = self.selection_rule(f, norm, noise, t)  # line 6: a_t, b_t with beta, X_t, V_{t-1}
            # a rule of one's own, checked where it meets the loop
            if self.settings.strategy not in selection.STRATEGIES:
                pair = selection.checked_pair(self.selection_rule, pair, *f.shape)
            g = self._gradients(contexts) if self.self_duel.uses_gradients else None  # df/d(W, theta, b) [S, K, p]
            a1, a2 = self.self_duel(pair, f, norm, noise, t, g, self.execution.self_duels)
            if self.own_test:  # a test of one's own, checked as a rule is
                a1, a2 = selection.checked_pair(self.self_duel, (a1, a2), *f.shape, field="model.self_duel.test")
            self._flag_bad(~est.ok | ~torch.isfinite(f).all(dim=1), t)
        duel = {"a1": a1, "a2": a2, "dphi": pair_difference(est.phi, a1, a2)}
        if g is not None:  # the test's Gram gains every duel's gradient difference, played or asked
            duel["dg"] = pair_difference(g, a1, a2)
        return duel

    @torch.no_grad()
    def memo(self, contexts, a1, a2):
        with torch.autocast(self.device.type, enabled=False):
            out = {"dphi": pair_difference(self.net.features(contexts.float()).to(torch.float64), a1, a2)}
        if self.self_duel.uses_gradients:
            out["dg"] = pair_difference(self._gradients(contexts), a1, a2)
        return out

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
        else:
            loss, theta, dphi = self._train_and_refit(t)
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
            with self._timed("gram"):
                self._update_gram(t, theta, dphi, duel["dphi"])  # lines 12-13: zeta_t (eq. wi), V_t
            bad = ~torch.isfinite(theta).all(dim=1)
            if loss is not None:
                bad |= ~torch.isfinite(loss)
            self._flag_bad(bad, t)

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
        rows = self._sample_rows(t, 1) if s.refit_theta else None
        if rows is not None:  # on a sample of B rows, scaled t / B
            x, o, weights = next(self._train_blocks(t, rows[:, 0]))
            phi = as_pairs(self.net.features_t(x)).to(torch.float64)
            sample_dphi = phi[:, :, 0] - phi[:, :, 1]
            w = weights(seedwise.matvec(sample_dphi, theta))
            theta = objective.refit_theta(s.link, theta, sample_dphi, o, w, self.net.theta0, s.lam, s.refit_iterations)
            self.net.theta.copy_(theta)
        if s.gram_mode == "recompute" or (s.refit_theta and rows is None):
            phi = self._history_features(self._history_rows(t)).to(torch.float64)
            dphi = phi[:, :, 0] - phi[:, :, 1]  # Delta phi_i with W_t
        if s.refit_theta and rows is None:
            w = self._history_weights(seedwise.matvec(dphi, theta), t)
            theta = objective.refit_theta(
                s.link, theta, dphi, self.hist_o[:, : dphi.shape[1]], w, self.net.theta0, s.lam, s.refit_iterations
            )
            self.net.theta.copy_(theta)
        return theta, dphi

    def _update_gram(
        self, t: int, theta: torch.Tensor, dphi: Optional[torch.Tensor], selected_dphi: torch.Tensor
    ) -> None:
        """V_t (eq. gram_matrix). ``recompute``: from the whole history's Delta phi at W_t [S, t, d]
        with zeta at (theta_t, W_t); ``incremental``: V_{t-1} plus the newest duel's Delta phi from
        selection time ``selected_dphi`` [S, d], weighted by its zeta at (theta_t, W_t)."""
        s = self.settings
        if s.gram_mode == "recompute":
            w = self._history_weights(seedwise.matvec(dphi, theta), t)
            self.V = gram.gram_from_history(dphi, w, s.lam)
        else:
            last = as_pairs(self.net.features_t(self.hist_xt[:, :, 2 * t - 2 : 2 * t])).to(torch.float64)
            df = seedwise.einsum("sd,sd->s", last[:, 0, 0] - last[:, 0, 1], theta).unsqueeze(1)
            w = self._weights(df, t, t - 1)[:, 0]
            self.V = gram.rank_one_update(self.V, selected_dphi, w)
