"""NDB (Verma, Dai, Lin, Jaillet, Low 2024, "Neural Dueling Bandits"): NDB-UCB and NDB-TS.

The same network f(x) = theta^T phi(x; W) as NVLDB (:class:`nvldb_pl.learners.neural.NeuralLearner`),
trained the same way (n warm-started Adam steps per round) but on the unweighted log-likelihood with lam/2 ||(W, theta) - (W_0, theta_0)||^2
over all parameters, and no theta refit. Exploration uses g(x) = d f(x) / d(W, theta), the
gradient with respect to ALL p network parameters (p = 1349 at d=5, m=32, L=3):

    V_t = lam I + sum_{i<=t} (g(x_{i,a1}) - g(x_{i,a2})) (...)^T     (gradients at selection time)
    a1 = argmax_k f(x_k);
    NDB-UCB: a2 = argmax_k f(x_k) + beta ||g(x_k) - g(x_a1)||_{V^-1}
    NDB-TS:  a2 = argmax_k u~_k, u~_k ~ N(f(x_k) - f(x_a1), beta^2 ||g(x_k) - g(x_a1)||^2_{V^-1})

i.e. NVLDB's ASYM rules (:mod:`nvldb_pl.maths.selection`) with gradient features instead of phi.
``gram``: ``full`` (default: the NDB paper's V; feasible at width 32: V^-1 is kept in float64 by
Sherman-Morrison rank-one updates, O(p^2) per round, since a Cholesky of a p x p matrix per round
would cost O(p^3)) or ``diag`` (the diagonal approximation neural-bandit codes use at larger widths:
||z||^2 ~ sum_j z_j^2 / U_j, U = diag(V)).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Optional

import torch

from ..maths import selection
from ..maths.checks import check, check_memory
from ..maths.gram import GradientGram
from .base import Estimate, history_bytes
from .network_settings import NetworkOptions, NetworkSettings
from .settings import check_fields
from .neural import NeuralLearner, pair_difference

NDB_GRAMS = ("full", "diag")
NDB_STRATEGIES = ("ucb_asym", "ts_asym")


@dataclass(frozen=True)
class NDBSettings(NetworkSettings):
    """NDB's settings: the network's, then its own (``strategy`` by its name now, ``gram``, ``beta`` in force,
    ``distinct_arms``), checked by :class:`NDB` before anything is built."""

    strategy: str = "ucb_asym"
    gram: str = "full"
    beta: float = 1.0
    distinct_arms: bool = True

    def checked(self):
        """NDB's constraints (:func:`~nvldb_pl.learners.settings.check_fields`), then the network learner's; self."""
        check(
            self.strategy in NDB_STRATEGIES,
            "strategy",
            f"{self.strategy!r}: NDB's rules are NVLDB's ASYM rules on the network's gradients, one of "
            f"{list(NDB_STRATEGIES)}",
        )
        check_fields(self, numbers={"beta": True}, choices={"gram": NDB_GRAMS})
        return super().checked()


class NDB(NeuralLearner):
    """NDB-UCB / NDB-TS: the network of :class:`nvldb_pl.NVLDB` (same arguments) with ``strategy``
    (NVLDB's name for the rule: ``ucb_asym`` or ``ts_asym``, NDB's UCB and TS being NVLDB's ASYM rules on the
    gradients; a saved file's ``rule``, ``ucb`` or ``ts``, its old name, reads as it: :mod:`nvldb_pl.migrations`) and
    ``gram`` (``full`` or ``diag``, the form of :class:`nvldb_pl.maths.gram.GradientGram`); lam is both the ridge
    towards the initial parameters and V_0. The defaults give NDB NVLDB's network and second arm (a2 != a1, as
    NDB's authors' code); ``network: {parametrization: ntk, bias: false}, distinct_arms: false`` is the NDB
    paper's equations."""

    DEFERS_TRAINING = True  # update: a duel with train False joins V (and Z), the steps wait
    SETTINGS = NDBSettings  # self.settings: every argument typed, frozen, with its value in force

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        strategy: str = "ucb_asym",
        gram: str = "full",
        network: NetworkOptions = NetworkOptions(),
        lr: float = 1e-3,
        lam: float = 1.0,
        beta: Optional[float] = None,
        grad_steps: int = 20,
        distinct_arms: bool = True,
    ):
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        net = NetworkOptions.of(network, "network").resolved()
        beta = 1.0 if beta is None else beta
        # the unweighted likelihood (zeta = 1) and lam/2 ||W - W_0||^2 on every layer (the NDB paper's loss)
        super().__init__(
            {**args, "network": net.saved(), "beta": beta, "feature_dim": None}, variance_mode="none", w_reg=lam
        )
        p = sum(par[0].numel() for par in self.net.parameters())  # |W| + |theta| + |b| of one seed's network
        check_memory(
            history_bytes(dim, rounds, num_seeds) + num_seeds * GradientGram.bytes_per_seed(p, gram),
            f"history and V^-1 of {num_seeds} x {p} x {p} float64",
            "model.network.width / model.network.depth (p = {p} network parameters; model.gram diag keeps {num_seeds} x {p}), "
            "or data.num_seeds".format(p=p, num_seeds=num_seeds)
            if gram == "full"
            else "data.num_seeds / data.rounds",
        )
        self.selection_rule = selection.make_rule(strategy, beta, distinct_arms)  # NVLDB's ASYM on gradients
        kind = strategy.split("_")[0].upper()
        self.method = f"{'NDB' if type(self) is NDB else type(self).__name__}-{kind}"  # a subclass by its name
        if self.custom_network:  # a network of one's own, in brackets (as NVLDB's)
            self.method += f"[{self.net.path.rpartition('.')[2]}]"
        self.gradient_gram = GradientGram(num_seeds, p, lam, gram)  # V_0 = lam I over all p parameters

    def norms_from_gradients(self, g: torch.Tensor) -> torch.Tensor:
        """||g_k - g_k'||_{V^-1} for all pairs: g [S, K, p] (float64) -> [S, K, K]."""
        return self.gradient_gram.pair_norms(g)

    @torch.no_grad()
    def memo(self, contexts, a1, a2):
        with torch.autocast(self.device.type, enabled=False):
            return {"dg": pair_difference(self._gradients(contexts), a1, a2)}

    @torch.no_grad()
    def estimate(self, contexts: torch.Tensor) -> Estimate:
        """Gradients ``g`` [S, K, p], utilities ``f`` [S, K] and exploration norms ``norm``
        [S, K, K] = ||g_k - g_k'||_{V^-1} of contexts [S, K, d] (float64)."""
        with torch.autocast(self.device.type, enabled=False):
            g = self._gradients(contexts)
            return Estimate(f=self.scores(contexts), norm=self.norms_from_gradients(g), g=g)

    @torch.no_grad()
    def propose(self, contexts, noise, t):
        """Round t's pair, with ``dg`` [S, p] = g(x_a1) - g(x_a2) at selection time (V's new term)."""
        with self._timed("select"):
            est = self.estimate(contexts)
            f, norm = est.f, est.norm
            a1, a2 = self.selection_rule(f, norm, noise, t)
            self._flag_bad(~torch.isfinite(f).all(dim=1) | ~torch.isfinite(norm).flatten(1).all(dim=1), t)
        return {"a1": a1, "a2": a2, "dg": pair_difference(est.g, a1, a2)}

    def update(self, duel):
        """V^-1 (or diag V) gains the duel's gradient difference, then the n Adam steps."""
        t = self.t
        with self._timed("gram"), torch.no_grad():
            self.gradient_gram.add_(duel["dg"])  # full: Sherman-Morrison, (V + z z^T)^-1 in place
        if self.settings.grad_steps > 0 and duel.get("train", True):  # train False: the steps wait (learn)
            with self._timed("train"):
                loss = self._adam_steps(t)
            self._flag_bad(~torch.isfinite(loss), t)
