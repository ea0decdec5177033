"""VACDB (Di, Jin, Li, Gu 2023, "Variance-aware regret bounds for stochastic contextual dueling
bandits", Alg. 1): SupLinUCB-style layers with variance-aware weighted MLE, on per-round context sets.

Layers l = 1..L, each with its own estimate theta_l and Gram matrix
Sigma_l = lam 4^-l I + sum_{i in layer l} w_i^2 z_i z_i^T (z_i = x_{i,a1} - x_{i,a2}). Each round
starts with D_1 = all K arms and walks up the layers (alpha = 2^-L):

1. if ||x - y||_{Sigma_l^-1} <= alpha for all x, y in D_l: exploit, (a1, a2) = argmax over
   D_l x D_l of theta_l^T (x + y) + beta_l ||x - y||_{Sigma_l^-1}; the duel is stored in no layer;
2. else if ||x - y||_{Sigma_l^-1} <= 2^-l for all x, y in D_l: keep
   D_{l+1} = {x in D_l : theta_l^T x >= max_{y in D_l} theta_l^T y - 2^-l beta_l} and go up;
3. else explore: play a pair of D_l with ||x - y||_{Sigma_l^-1} > 2^-l (uniformly among them,
   as the authors' code does) and store it in layer l with weight w = 2^-l / ||z||_{Sigma_l^-1}.

theta_l = argmin sum_{i in layer l} w_i^2 (-log g(s_i theta^T z_i)) + lam 4^-l / 2 ||theta||^2
(Newton, float64). Departure: beta_l = beta 2^-l sqrt(log T) with beta = 1, the value the authors'
code runs with, instead of the paper's variance-dependent expression (whose constants are for
the proof); L defaults to ceil(log2(T) / 2), so that alpha is about 1/sqrt(T).
Batched over seeds: the layer walk is a loop over l (L <= about 10) with per-seed masks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from ..maths import gram, objective, seedwise
from ..maths.seedwise import reads_without_sync
from .base import DuelingLearner
from .settings import LinkedSettings, check_fields


@dataclass(frozen=True)
class VACDBSettings(LinkedSettings):
    """VACDB's settings, checked as they are made (each refusal naming its field): ``lam`` the ridge (lam 4^-l in layer
    l), ``beta`` the width's factor (beta_l = beta 2^-l sqrt(log T)), ``layers`` L in force, ``refit_iterations``
    Newton's per round and layer."""

    lam: float = 1.0
    beta: float = 1.0
    layers: int = 1
    refit_iterations: int = 8

    def checked(self):
        super().checked()
        check_fields(self, integers={"layers": 1, "refit_iterations": 1}, numbers={"lam": True, "beta": True})
        return self


class VACDB(DuelingLearner):
    method = "VACDB"
    HISTORY_BUFFERS = DuelingLearner.HISTORY_BUFFERS + ("hist_layer", "hist_w")
    LIVE = False  # a duel's layer and weight are decided at selection time, for that round only
    EXTENDABLE = False  # beta_l and the default number of layers depend on T

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        lam: float = 1.0,
        beta: float = 1.0,
        layers: Optional[int] = None,
        refit_iterations: int = 8,
    ):
        super().__init__(dim, arms, rounds, num_seeds, link)
        L = layers if layers is not None else max(1, math.ceil(math.log2(max(rounds, 2)) / 2))
        s = self.settings = VACDBSettings(dim, arms, rounds, num_seeds, link, lam, beta, L, refit_iterations).checked()
        self.save_hyperparameters(asdict(s))  # the layers in force (LightningCLI would otherwise save the given None)
        S, d = num_seeds, dim
        self._reg = [lam * 4.0**-l for l in range(1, L + 1)]  # lam 4^-l on the host (the refit reads it per round)
        self.register_buffer("reg", torch.tensor(self._reg, dtype=torch.float64))  # [L]
        self.register_buffer("theta", torch.zeros(S, L, d, dtype=torch.float64))
        self.register_buffer("Sigma", (self.reg[:, None, None] * torch.eye(d, dtype=torch.float64)).repeat(S, 1, 1, 1))
        self.register_buffer("hist_layer", torch.zeros(S, rounds, dtype=torch.int64))  # 0: stored nowhere
        self.register_buffer("hist_w", torch.zeros(S, rounds, dtype=torch.float64))

    def beta_l(self, layer: int) -> float:
        return self.settings.beta * 2.0**-layer * math.sqrt(math.log(max(self.settings.rounds, 2)))

    @torch.no_grad()
    def propose(self, contexts, noise, t):
        """Round t's pair, with the duel's ``layer`` [S] (0: stored nowhere) and weight ``w`` [S]."""
        with self._timed("select"):
            S, K, d = contexts.shape
            L = self.settings.layers
            x = contexts.to(torch.float64)
            width, ok = gram.pairwise_norms(x.repeat_interleave(L, 0), self.Sigma.reshape(S * L, d, d))
            width, ok = width.view(S, L, K, K), ok.view(S, L).all(dim=1)
            f = seedwise.einsum("skd,sld->slk", x, self.theta)  # theta_l^T x_k
            alpha = 2.0**-L
            active = torch.ones(S, K, dtype=torch.bool, device=x.device)
            open_ = torch.ones(S, dtype=torch.bool, device=x.device)  # no pair chosen yet
            a1 = torch.zeros(S, dtype=torch.int64, device=x.device)
            a2 = torch.zeros_like(a1)
            layer_of = torch.zeros_like(a1)  # 0: exploit (stored nowhere)
            for l in range(1, L + 1):
                w, fl = width[:, l - 1], f[:, l - 1]
                mask = active.unsqueeze(2) & active.unsqueeze(1)
                wmax = torch.where(mask, w, 0.0).flatten(1).amax(dim=1)
                exploit = open_ & (wmax <= alpha)
                explore = open_ & ~exploit & (wmax > 2.0**-l)
                score_x = fl.unsqueeze(2) + fl.unsqueeze(1) + self.beta_l(l) * w
                pick_x = torch.argmax(torch.where(mask, score_x, -torch.inf).flatten(1), dim=1)
                far = mask & (w > 2.0**-l)
                pick_e = torch.argmax(torch.where(far, noise.to(torch.float64), -torch.inf).flatten(1), dim=1)
                pick = torch.where(explore, pick_e, pick_x)
                chosen = exploit | explore
                a1 = torch.where(chosen, pick // K, a1)
                a2 = torch.where(chosen, pick % K, a2)
                layer_of = torch.where(explore, l, layer_of)
                open_ = open_ & ~chosen
                best = torch.where(active, fl, -torch.inf).amax(dim=1, keepdim=True)
                active = active & (fl >= best - 2.0**-l * self.beta_l(l))
            # at l = L, 2^-l = alpha: every seed has chosen (exploit or explore) by now
            rows = torch.arange(S, device=x.device)
            wz = width[rows, (layer_of - 1).clamp(min=0), a1, a2]
            self._flag_bad(~ok | ~torch.isfinite(f).flatten(1).all(dim=1), t)
            return {
                "a1": a1,
                "a2": a2,
                "layer": layer_of,
                "w": torch.where(layer_of > 0, 2.0 ** -layer_of.double() / wz, 0.0),
            }

    @torch.no_grad()
    def update(self, duel):
        t, hp = self.t, self.settings
        layer_of, w = duel["layer"], duel["w"]
        self.hist_layer[:, t - 1] = layer_of
        self.hist_w[:, t - 1] = w
        S, L, d = self.theta.shape
        with self._timed("gram"):
            z = (self.hist_xt[:, :, 2 * t - 2] - self.hist_xt[:, :, 2 * t - 1]).to(torch.float64)
            onehot = torch.nn.functional.one_hot(layer_of, L + 1)[:, 1:].to(torch.float64)  # [S, L]
            self.Sigma = (
                self.Sigma
                + (onehot * w.pow(2).unsqueeze(1))[:, :, None, None] * (z.unsqueeze(2) * z.unsqueeze(1))[:, None]
            )
        with self._timed("refit"):
            pairs = self.history().to(torch.float64)
            Z = pairs[:, :, 0] - pairs[:, :, 1]  # z_i, shared by the layers
            o = self.hist_o[:, :t].to(torch.float64)
            new = self.theta.clone()
            # A seed's layer is refit only when that seed stored this round's duel in it (the others keep
            # their optimum). In host memory the layers no seed stored into are skipped (a free read);
            # on an accelerator every layer is refit and masked per seed, so the round never syncs.
            layers = range(1, L + 1)
            if reads_without_sync(layer_of):
                layers = sorted(set(layer_of.tolist()) - {0})
            for l in layers:  # one problem per (seed, layer), ridge lam 4^-l; batched over seeds
                weight = (self.hist_layer[:, :t] == l) * self.hist_w[:, :t].pow(2)  # w_i^2 in layer l, else 0
                refit = objective.refit_theta(
                    hp.link,
                    self.theta[:, l - 1],
                    Z,
                    o,
                    weight,
                    torch.zeros_like(self.theta[:, l - 1]),
                    self._reg[l - 1],
                    hp.refit_iterations,
                )
                new[:, l - 1] = torch.where((layer_of == l).unsqueeze(1), refit, self.theta[:, l - 1])
            self.theta = new
            self._flag_bad(~torch.isfinite(self.theta).flatten(1).all(dim=1), t)
