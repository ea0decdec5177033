"""The network learner NVLDB and NDB share: f(x) = theta^T phi(x; W) for S seeds stacked in one
set of parameters, its initial draw, and its training (Alg. 1 line 9: n warm-started Adam steps on
the weighted log-likelihood of the whole history plus lambda/2 ||theta - theta_0||^2).

What differs between the two learners sits in the subclasses: NVLDB (:mod:`nvldb_pl.learners.nvldb`)
adds the last-layer Gram matrix V and the theta refit; NDB (:mod:`nvldb_pl.learners.ndb`) a Gram
matrix of the gradients of all parameters.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import history
from .history import (
    TRAIN_CHUNK_ROUNDS,
    block_bytes,
    history_blocks,
    resolve_history_pass,
    sample_rows,
    settle_adam,
)
from ..maths import objective
from ..maths.backward import accumulate_nll_grad, per_point_gradients
from .base import DuelingLearner, as_pairs
from .network_settings import NetworkSettings
from ..maths.checks import check as _check
from ..maths.checks import check_memory
from ..maths.network import (
    StackedMLP,
    init_biases,
    init_weights,
    parameter_count,
)
from ..environments.seeding import TAG_INIT, torch_seed
from ..maths.user_network import StackedNetwork


def pair_difference(x: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor) -> torch.Tensor:
    """x [S, K, p] -> x[a1] - x[a2] per seed [S, p] (a duel's feature or gradient difference)."""
    rows = torch.arange(x.shape[0], device=x.device)
    return x[rows, a1] - x[rows, a2]


class NeuralLearner(DuelingLearner):
    """The stacked network ``self.net`` and its training, from the resolved hyperparameters ``hp``
    (saved as the learner's hparams: the subclass's own arguments with their values in force).

    ``hp`` needs dim, arms, rounds, num_seeds, link, feature_dim, lr, lam, grad_steps and network (a mapping of
    :class:`~nvldb_pl.learners.network_settings.NetworkOptions`, resolved); optional: epsilon, sampler and compute
    (mappings of :class:`~nvldb_pl.learners.network_settings.SamplerOptions`,
    :class:`~nvldb_pl.learners.network_settings.ComputeOptions`).
    ``variance_mode`` is zeta's (eq. wi): ``estimated``, ``oracle`` or ``none``;
    ``w_reg`` the weight of mu/2 sum_l ||W^l - W^l_0||^2 in the loss.
    """

    SETTINGS = NetworkSettings  # the typed view of hp a subclass reads (NVLDB: its own, with every field)

    def __init__(self, hp: dict, variance_mode: str, w_reg: float):
        s = self.settings = self.SETTINGS.of(hp).checked()  # every constraint, naming its field
        super().__init__(s.dim, s.arms, s.rounds, s.num_seeds, s.link)
        self.save_hyperparameters(hp)
        self.variance_mode = variance_mode
        self.w_reg = w_reg
        net = s.network
        if net.module is not None:  # a user's module for phi, stacked over seeds (trains by autograd)
            self.net = StackedNetwork(net.module, s.num_seeds, s.dim, s.feature_dim)
        else:
            count = parameter_count(s.dim, net.width, net.depth, bool(net.bias), s.feature_dim)  # per seed
            check_memory(  # with their initial copy, Adam's two moments and a gradient: refused before allocating
                5 * 4 * s.num_seeds * count,
                f"{s.num_seeds} networks of {count} parameters with their Adam state",
                "model.network.width / model.network.depth",
            )
            self.net = StackedMLP(
                s.num_seeds, s.dim, net.width, net.depth, net.parametrization, net.bias, s.feature_dim, net.activation
            )

    # ------------------------------------------------------------------ set-up
    def init_seed_state(self, base_seed: int, seed_ids: list[int]) -> None:
        """Draw each seed's theta_0, W_0 from its own stream (base seed, seed id): S-independent."""
        hp, net = self.settings, self.settings.network
        if self.custom_network:
            self.net.init_seeds([torch.Generator().manual_seed(torch_seed(base_seed, i, TAG_INIT)) for i in seed_ids])
            return
        per_seed, biases = [], []
        for i in seed_ids:
            gen = torch.Generator().manual_seed(torch_seed(base_seed, i, TAG_INIT))
            per_seed.append(init_weights(hp.dim, net.width, net.depth, net.init, gen, hp.feature_dim))
            if self.net.biases:
                biases.append(init_biases(hp.dim, net.width, net.depth, net.init, gen, hp.feature_dim))
        self.net.load_seed_init(per_seed, biases)

    def make_optimizer(self):
        # Elementwise, so seeds stay independent. foreach, not fused, off the graph: torch's fused CPU Adam
        # rounds the last bit of an element differently depending on the tensor's size (the number of seeds).
        # Under history_pass=graphed on CUDA: capturable (the step count on the device, so that a CUDA graph
        # can hold the step) and fused (one kernel a step for every tensor, foreach ~15; CUDA's fused kernel
        # computes each element by the same code whatever the tensor's size)
        graphed = self._capturable()
        return torch.optim.Adam(
            self.net.parameters(), lr=self.settings.lr, foreach=not graphed, fused=graphed, capturable=graphed
        )

    def _scaler(self):
        """16-mixed's GradScaler (the execution's: Lightning's precision plugin under a Trainer), else None."""
        return self.execution.scaler

    def problem_size(self) -> int:
        """S x T x m^2 with the built-in MLP's width m (a network of one's own: 32)."""
        m = 32 if self.custom_network else self.settings.network.width
        return self.num_local * self.settings.rounds * m * m

    @property
    def custom_network(self) -> bool:
        """phi is a user's module (``model.network.module``), not the built-in MLP."""
        return isinstance(self.net, StackedNetwork)

    @property
    def history_pass(self) -> str:
        """How the whole history is walked on this learner's device (``auto`` resolved)."""
        if self.custom_network and self.settings.compute.history_pass == "auto":
            return "chunked"
        return resolve_history_pass(
            self.settings.compute.history_pass,
            self.device,
            self.settings.sampler.size,
            self._scaler() is not None,
        )

    def _graphed(self) -> bool:
        """The update's Adam steps and refit go through a CUDA graph: history_pass=graphed where graphs exist."""
        return self.history_pass == "graphed" and history.graphs_available(self.device)

    def _capturable(self) -> bool:
        """Adam keeps its step count on the device (what a CUDA graph of its step needs)."""
        return self._graphed() and self.device.type == "cuda"

    def settle_optimizer(self, opt) -> None:
        """After a checkpoint's optimizer state was restored: Adam as this run needs it (:func:`settle_adam`)."""
        settle_adam(opt, self._capturable())

    def execution_notes(self, scaled: bool) -> list[tuple[str, str]]:
        """graphed refused under a loss scaler; a network of one's own trains by autograd; one scaler couples the
        stacked seeds."""
        _check(
            not (self._graphed() and scaled),
            "compute.history_pass",
            "graphed cannot run under 16-mixed: its GradScaler reads the inf check on the host, which a "
            "CUDA graph cannot hold; use bf16-mixed, or compute.history_pass auto or chunked",
        )
        notes = []
        if self.custom_network and self.settings.compute.backward == "manual":
            notes.append(
                (
                    "info",
                    f"model.network.module={self.net.path}: trained by autograd (the hand-written gradient, "
                    f"model.compute.backward=manual, is the built-in MLP's)",
                )
            )
        if scaled and self.settings.num_seeds > 1:
            notes.append(
                (
                    "warning",
                    "16-mixed: one GradScaler serves all stacked seeds, so an inf gradient in one seed skips "
                    "every seed's Adam step and halves the shared scale: seeds are no longer independent. "
                    "Use bf16-mixed (no scaler), or one seed per process.",
                )
            )
        return notes

    def training_block_bytes(self, rows: int) -> int:
        """About the activations of one Adam step over ``rows`` history rounds (:func:`block_bytes`)."""
        return block_bytes(self.settings.network.depth, self.num_local, self.settings.network.width, rows)

    def _gradients(self, contexts: torch.Tensor) -> torch.Tensor:
        """g(x_k) = df(x_k)/d(W, theta, b) at the current parameters: [S, K, d] -> [S, K, p] (float64); NDB's
        exploration features and the deep self-duel test's (a user's network: by torch.func, in eval mode)."""
        net = self.net
        with torch.autocast(self.device.type, enabled=False):
            if self.custom_network:
                return net.per_point_gradients(contexts.float()).to(torch.float64)
            return per_point_gradients(
                list(net.weights),
                net.theta,
                contexts.float().transpose(1, 2),
                list(net.biases),
                net.scale,
                net.activation,
            ).to(torch.float64)

    @torch.no_grad()
    def scores(self, contexts):
        with torch.autocast(self.device.type, enabled=False):
            return self.net.utility(self.net.features(contexts.float()).to(torch.float64))  # theta^T phi

    @torch.no_grad()
    def live_feature_units(self) -> Optional[torch.Tensor]:
        """[S]: how many of phi's p units are positive on at least one of the 2t contexts played so far.
        The others are dead: ReLU passes no gradient back to their weights from any of those contexts, so
        training on this history cannot revive them; with all p dead, phi = 0 and f is the same for
        every arm (the run then picks pairs by its tie-break and exploration alone). ``None`` for the built-in
        MLP with a smooth activation: its units pass a gradient everywhere, none is dead in this sense."""
        if not self.custom_network and self.net.activation != "relu":
            return None
        S, p, t = self.net.theta.shape[0], self.net.theta.shape[1], self.t
        alive = torch.zeros(S, p, dtype=torch.bool, device=self.net.theta.device)
        with torch.autocast(self.device.type, enabled=False):
            for lo in range(0, 2 * t, 2 * TRAIN_CHUNK_ROUNDS):
                phi = self.net.features_t(self.hist_xt[:, :, lo : min(2 * t, lo + 2 * TRAIN_CHUNK_ROUNDS)])  # [S, p, n]
                alive |= (phi > 0).any(dim=2)
        return alive.sum(dim=1)

    def _history_rows(self, t: int) -> int:
        """How many history rows a whole-history computation at round t walks: t, or under
        history_pass=graphed t rounded up to its bucket (the rows after t weighted 0)."""
        return history.bucket(t, self.hist_o.shape[1]) if self.history_pass == "graphed" else t

    def _history_weights(self, delta_f: torch.Tensor, t: int) -> torch.Tensor:
        """1 / zeta_i^2 of the first n = delta_f.shape[1] history rows at round t ([S, n]), 0 for the rows
        not played yet (n > t under history_pass=graphed; counted on the device)."""
        n = delta_f.shape[1]
        w = self._weights(delta_f, n)
        if self.history_pass != "graphed":  # n = t
            return w
        return torch.where(self._played(n), w, 0.0)

    def _played(self, n: int) -> torch.Tensor:
        """[n] bool: history row i < n holds a played round (i < t), counted on the device from the
        rounds_done buffer, so that a CUDA graph's replay reads the current round."""
        return torch.arange(n, device=self.rounds_done.device) < self.rounds_done

    def _history_features(self, t: int) -> torch.Tensor:
        """phi of both items of every past duel with the current W: [S, t, 2, d]."""
        return as_pairs(self.net.features_t(self.hist_xt[:, :, : 2 * t]))

    def _weights(self, delta_f: torch.Tensor, t: int, lo: int = 0, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """1 / zeta_i^2 (eq. wi) given Delta f_i, for rows lo..t-1 ([S, t - lo]) or the history
        rows ``rows`` [S, B] (a training sample)."""
        hp = self.settings
        if self.variance_mode == "oracle":
            delta = self.hist_du[:, lo:t] if rows is None else self.hist_du.gather(1, rows)
        else:
            delta = delta_f
        return objective.zeta(delta, hp.link, self.settings.epsilon, self.variance_mode).to(torch.float64).pow(-2)

    def _sample_rows(self, t: int, draws: int) -> Optional[torch.Tensor]:
        """``draws`` samples of B = sampler.size history rows per seed, [S, draws, B] (:func:`sample_rows`)."""
        s = self.settings
        return sample_rows(self._seed_ids, self._base_seed, t, draws, s.sampler.size, s.sampler.weighting, self.device)

    def _train_blocks(self, t: int, rows: Optional[torch.Tensor]):
        """The blocks of the loss at round t (:func:`history_blocks`, under this learner's history_pass)."""
        return history_blocks(self.history_pass, self.hist_xt, self.hist_o, t, rows, self._weights, self._played)

    def _adam_steps(self, t: int) -> torch.Tensor:
        """n Adam steps on eq. (total_loss), summed over seeds (each seed its own trajectory).

        Each step's gradient is accumulated over blocks of ``TRAIN_CHUNK_ROUNDS`` history rows
        (the loss is a sum over rows, so this is the full-batch gradient up to float rounding);
        a block's activations stay in cache, about 2x faster on CPU at t >= 1000.
        Returns the loss per seed [S] at the parameters before the last step.
        """
        if self.settings.compute.backward == "autograd" or self._scaler() is not None or self.custom_network:
            return self._adam_steps_autograd(t)
        hp, opt, net = self.settings, self.optimizer(), self.net
        params = net.param_list()
        grads = [torch.zeros_like(p) for p in params]
        grad_of = {id(p): g for p, g in zip(params, grads)}  # a parameter's accumulator, by identity
        device = self.device.type
        compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        samples = self._sample_rows(t, hp.grad_steps)
        whole = None if samples is not None else list(self._train_blocks(t, None))  # the same blocks every step
        with torch.no_grad(), torch.autocast(device, enabled=False):
            for step in range(hp.grad_steps):
                last = step == hp.grad_steps - 1  # the loss is returned for the last step only: computed only there
                torch._foreach_zero_(grads)
                grad_of[id(net.theta)].add_(
                    net.theta - net.theta0, alpha=hp.lam
                )  # d/dtheta lambda/2 ||theta - theta_0||^2
                if last:
                    per_seed = objective.ridge(net.theta, net.theta0, hp.lam)
                if self.w_reg > 0:
                    if last:
                        per_seed = per_seed + 0.5 * self.w_reg * net.distance_to_init()
                    for w, w0 in zip(net.layer_params(), net.initial_layer_params()):
                        grad_of[id(w)].add_(w - w0, alpha=self.w_reg)
                for x, o, weights in whole if samples is None else self._train_blocks(t, samples[:, step]):
                    block = accumulate_nll_grad(
                        list(net.weights),
                        net.theta,
                        x,
                        o,
                        hp.link,
                        weights,
                        grads,
                        compute_dtype,
                        list(net.biases),
                        net.scale,
                        with_loss=last,
                        activation=net.activation,
                    )
                    if last:
                        per_seed = per_seed + block
                for p, g in zip(params, grads):
                    p.grad = g
                opt.step()
        return per_seed

    def _adam_steps_autograd(self, t: int) -> torch.Tensor:
        """:meth:`_adam_steps` with the gradient from autograd (reference, and 16-mixed)."""
        hp, opt = self.settings, self.optimizer()
        S = self.hist_xt.shape[0]
        samples = self._sample_rows(t, hp.grad_steps)
        for step in range(hp.grad_steps):
            opt.zero_grad(set_to_none=True)
            per_seed = None
            for x, o, weights in self._train_blocks(t, None if samples is None else samples[:, step]):
                with self.net.training_pass():  # a user's dropout is on here only
                    phi_t = self.net.features_t(x)
                f = self.net.utility_t(phi_t).view(S, o.shape[1], 2)
                delta_f = (f[..., 0] - f[..., 1]).float()
                w = weights(delta_f).to(delta_f.dtype)
                block = objective.weighted_nll(hp.link, delta_f, o, w)
                if per_seed is None:
                    block = block + objective.ridge(self.net.theta, self.net.theta0, hp.lam)
                    if self.w_reg > 0:
                        block = block + 0.5 * self.w_reg * self.net.distance_to_init()
                self.backprop(block.sum())
                per_seed = block.detach() if per_seed is None else per_seed + block.detach()
            opt.step()
        return per_seed
