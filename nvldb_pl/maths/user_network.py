"""A network of one's own for phi, stacked over seeds: ``model.network.module`` names a ``torch.nn.Module`` class.

The user writes an ordinary one-seed module mapping contexts [N, d] to features [N, p] (p =
``feature_dim``, default d), e.g. ``nn.Sequential(nn.Linear(d, 64), nn.LayerNorm(64), nn.ReLU(),
nn.Linear(64, p))``, and names its class (with ``init_args``) in ``model.network.module``. :class:`StackedNetwork`
builds one copy a seed, each initialised by the module's own ``__init__`` under that seed's generator
(so a seed's draw does not depend on the others), stacks their parameters along a leading seed
dimension S and runs them with ``torch.func.vmap``. Exploration stays on the last layer: theta [S, p] and
V are the learner's, as with the built-in MLP. Such a network trains by autograd (the hand-written
gradient of :mod:`nvldb_pl.maths.backward` is the built-in MLP's), and modules with buffers (BatchNorm's running
statistics) are refused: a seed's forward pass must not change state.

Stochastic modules (dropout, noise layers) run in train mode only inside :meth:`StackedNetwork.training_pass`
(the Adam steps' forward passes); every other pass (the estimate, the theta refit, V, and the per-arm gradients of
the deep self-duel test, :meth:`StackedNetwork.per_point_gradients`) runs the module in eval mode, so it is
deterministic. A training pass of a stochastic module runs seed by seed, each under torch's generator seeded from
that seed's own key and a count of its passes (buffers ``noise_key``, ``noise_step``): a seed's dropout masks depend
on neither the other seeds nor how many run in one process, and a resumed run draws the same ones.

It offers what the learners use of :class:`nvldb_pl.maths.network.StackedMLP`: ``features_t``/``features``,
``utility_t``/``utility``, ``theta``/``theta0``, ``layer_params``/``initial_layer_params``/
``distance_to_init``, ``param_list``.
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch
from torch import nn

from .checks import class_path_and_args, import_class, require


def network_and_args(network) -> tuple[str, dict]:
    """``model.network.module`` as (class path, init_args): a string, or ``{class_path, init_args}``."""
    path, args = class_path_and_args(network, "model.network.module")
    return path, args or {}


class StackedNetwork(nn.Module):
    """S copies of a user's module ``cls(**init_args)``: x [S, N, d] -> phi [S, N, p]; f = theta^T phi."""

    def __init__(self, network, num_seeds: int, dim: int, feature_dim: Optional[int] = None):
        super().__init__()
        path, self.init_args = network_and_args(network)
        self.cls = import_class(path, nn.Module, "model.network.module", "a torch.nn.Module subclass")
        self.path, self.dim = path, dim
        template = self._build(torch.Generator().manual_seed(0)).eval()
        require(
            not list(template.buffers()),
            "model.network.module",
            f"{path} has buffers ({', '.join(n for n, _ in template.named_buffers())}); a stacked network must "
            f"not change state in its forward pass (use LayerNorm rather than BatchNorm)",
        )
        names = [n for n, _ in template.named_parameters()]
        require(bool(names), "model.network.module", f"{path} has no parameters")
        p = dim if feature_dim is None else feature_dim
        with torch.no_grad():
            try:
                out = template(torch.zeros(3, dim, device=next(template.parameters()).device))
            except RuntimeError as err:  # a first layer of another input size: "mat1 and mat2 shapes ..."
                first = str(err).splitlines()[0]
                raise ValueError(
                    f"model.network.module: {path} does not take [N, {dim}] contexts (data.dim = {dim}): {first}"
                ) from None
        require(
            tuple(out.shape) == (3, p),
            "model.network.module",
            f"{path} maps [N, {dim}] contexts to {list(out.shape[1:])} features per point, where phi has "
            f"model.feature_dim = {p} (None: data.dim)",
        )
        self.names = names
        self._template = [template]  # a list: not a submodule (its parameters are not the learner's)
        self.stochastic = _draws_noise(template, names, dim)
        self.params = nn.ParameterList(nn.Parameter(torch.zeros(num_seeds, *t.shape)) for t in template.parameters())
        self.theta = nn.Parameter(torch.zeros(num_seeds, p))
        self.register_buffer("theta0", torch.zeros(num_seeds, p))
        for i, w in enumerate(self.params):
            self.register_buffer(f"w0_{i}", torch.zeros_like(w))
        if self.stochastic:  # each seed's key for its training passes' noise, and how many it has drawn
            self.register_buffer("noise_key", torch.zeros(num_seeds, dtype=torch.int64))
            self.register_buffer("noise_step", torch.zeros(num_seeds, dtype=torch.int64))
        self._training = False

    def _build(self, gen: torch.Generator) -> nn.Module:
        # on the CPU whatever the ambient device (torch.device("meta") in the sweeps' pre-check): the template is
        # one seed's module, and its first draw must be a number
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
            try:
                return self.cls(**self.init_args)
            except TypeError as err:
                raise ValueError(f"model.network.module: {self.path} does not take these init_args: {err}") from None

    @torch.no_grad()
    def init_seeds(self, generators: list[torch.Generator]) -> None:
        """Each seed's module built under its own generator; theta_0 ~ N(0, 1/p) from the same one."""
        for s, gen in enumerate(generators):
            module = self._build(gen)
            for w, v in zip(self.params, module.parameters()):
                w[s].copy_(v.detach().to(w.dtype))
            p = self.theta.shape[1]
            self.theta[s].copy_(torch.randn(p, generator=gen, dtype=torch.float64) / math.sqrt(p))
            if self.stochastic:
                self.noise_key[s] = int(torch.randint(2**62, (1,), generator=gen))
        for i, w in enumerate(self.params):
            getattr(self, f"w0_{i}").copy_(w)
        self.theta0.copy_(self.theta)

    def _one(self, flat: tuple[torch.Tensor, ...], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self._template[0], dict(zip(self.names, flat)), (x,))

    @contextlib.contextmanager
    def training_pass(self):
        """The module in train mode for the passes inside (the Adam steps'); eval mode everywhere else."""
        self._template[0].train()
        self._training = True
        try:
            yield
        finally:
            self._template[0].eval()
            self._training = False

    def _noisy_features(self, x: torch.Tensor) -> torch.Tensor:
        """A training pass of a stochastic module, seed by seed under its own key and pass count: [S, N, p]."""
        out = []
        for s in range(x.shape[0]):
            key = (int(self.noise_key[s]) * 1_000_003 + int(self.noise_step[s])) % 2**62
            with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                torch.manual_seed(key)
                out.append(self._one(tuple(w[s] for w in self.params), x[s]))
        with torch.no_grad():
            self.noise_step += 1
        return torch.stack(out)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x; W): [S, N, d] -> [S, N, p]. One seed runs as two (as :mod:`nvldb_pl.maths.seedwise` does)."""
        if self._training and self.stochastic:
            return self._noisy_features(x)
        params = tuple(self.params)
        if x.shape[0] == 1:
            params, x = tuple(w.expand(2, *w.shape[1:]) for w in params), x.expand(2, *x.shape[1:])
            return torch.func.vmap(self._one)(params, x)[:1]
        return torch.func.vmap(self._one)(params, x)

    def per_point_gradients(self, x: torch.Tensor) -> torch.Tensor:
        """g(x_k) = d f(x_k) / d(W, theta) at the current parameters, the module in eval mode: x [S, K, d] ->
        [S, K, P], P every parameter's size summed in ``parameters()`` order (the module's, then theta); the
        deep self-duel test's features, as :func:`nvldb_pl.maths.backward.per_point_gradients` is the built-in
        MLP's."""

        def f_one(flat, theta, point):  # one seed, one context [d] -> f
            return self._one(flat, point.unsqueeze(0))[0] @ theta

        params, theta = tuple(w.detach() for w in self.params), self.theta.detach()
        one_seed = x.shape[0] == 1
        if one_seed:  # one seed runs as two, as in features
            params, theta = tuple(w.expand(2, *w.shape[1:]) for w in params), theta.expand(2, -1)
            x = x.expand(2, *x.shape[1:])
        per_point = torch.func.vmap(torch.func.grad(f_one, argnums=(0, 1)), in_dims=(None, None, 0))
        g_params, g_theta = torch.func.vmap(per_point)(params, theta, x.to(theta.dtype))
        S, K = x.shape[:2]
        g = torch.cat([gw.reshape(S, K, -1) for gw in g_params] + [g_theta.reshape(S, K, -1)], dim=2)
        return g[:1] if one_seed else g

    def features_t(self, x_t: torch.Tensor) -> torch.Tensor:
        """Feature-major: x_t [S, d, N] -> [S, p, N]."""
        return self.features(x_t.transpose(1, 2)).transpose(1, 2)

    def utility_t(self, phi_t: torch.Tensor) -> torch.Tensor:
        """f = theta^T phi: phi_t [S, p, N] -> [S, N]."""
        return torch.einsum("sp,spn->sn", self.theta.to(phi_t.dtype), phi_t)

    def utility(self, phi: torch.Tensor, theta: Optional[torch.Tensor] = None) -> torch.Tensor:
        """f = theta^T phi: [S, N, p] -> [S, N]."""
        theta = self.theta if theta is None else theta
        return torch.einsum("snp,sp->sn", phi, theta.to(phi.dtype))

    def layer_params(self) -> list[torch.Tensor]:
        return list(self.params)

    def param_list(self) -> list[torch.Tensor]:
        return list(self.params) + [self.theta]

    def initial_layer_params(self) -> list[torch.Tensor]:
        return [getattr(self, f"w0_{i}") for i in range(len(self.params))]

    def distance_to_init(self) -> torch.Tensor:
        """sum ||W - W_0||^2 over the module's parameters, per seed: [S]."""
        return sum((w - w0).pow(2).flatten(1).sum(1) for w, w0 in zip(self.params, self.initial_layer_params()))


def _draws_noise(template: nn.Module, names: list[str], dim: int) -> bool:
    """Whether the module draws random numbers in train mode (dropout, noise layers): vmap refuses those."""
    flat = tuple(w.detach().unsqueeze(0).expand(2, *w.shape) for w in template.parameters())
    template.train()
    try:
        torch.func.vmap(lambda p, x: torch.func.functional_call(template, dict(zip(names, p)), (x,)))(
            flat, torch.zeros(2, 3, dim, device=flat[0].device)
        )
    except RuntimeError as err:
        if "random" not in str(err):
            raise
        return True
    finally:
        template.eval()
    return False
