"""SimGCL (Yu et al., SIGIR 2022): LightGCN with a contrastive term between two noise-perturbed views."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.errors import ConfigError
from bench.models.lightgcn import LightGCN, info_nce, layer_mean, perturb
from bench.models.registry import MODELS

NOISES = ("uniform", "gaussian")


@MODELS.register("simgcl")
class SimGCL(LightGCN):
    r"""SimGCL: the recommendation loss on the clean LightGCN propagation (symmetric normalisation,
    final embedding the mean of layers 1..L, layer 0 left out), plus

    .. math::
        \lambda\big(\mathrm{InfoNCE}_\tau(E'_U, E''_U) + \mathrm{InfoNCE}_\tau(E'_I, E''_I)\big)

    over the batch's users and positive items, where each view E', E'' is a propagation whose
    every layer adds :math:`\epsilon\,\mathrm{sign}(e)\odot \bar\Delta/\lVert\bar\Delta\rVert` (noise of
    norm ε in the embedding's own orthant). Three propagations a step (XSimGCL, its successor, needs one).

    Args:
        n_users, n_items, dim, score, init, init_std: as :class:`~bench.models.mf.MF`.
        layers: L (2 in the authors' SELFRec; 3 in IR-Benchmark).
        noise_eps: ε (0.1). cl_tau: τ (0.2 in the authors' code; IR-Benchmark 0.1). cl_weight: λ (0.5).
        noise: "uniform" (Δ ~ U(0, 1)^d, the authors') or "gaussian" (N(0, I), IR-Benchmark's).
        unique: the contrastive term over the batch's distinct users and items (the authors') or over
            its rows, repeats included (IR-Benchmark).
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 2, noise_eps: float = 0.1,
                 cl_tau: float = 0.2, cl_weight: float = 0.5, noise: str = "uniform", unique: bool = True,
                 score: str = "cosine", init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, layers=layers, score=score, init=init, init_std=init_std)
        if layers < 1:
            raise ConfigError(f"model.layers must be >= 1 for simgcl (its views are perturbed layers), got {layers}")
        if noise not in NOISES:
            raise ConfigError(f"unknown model.noise '{noise}'; known: {', '.join(NOISES)}")
        if cl_tau <= 0:
            raise ConfigError(f"model.cl_tau must be > 0, got {cl_tau}")
        self.noise_eps, self.cl_tau, self.cl_weight = float(noise_eps), float(cl_tau), float(cl_weight)
        self.noise, self.unique = noise, bool(unique)

    def perturbed(self) -> Tensor:
        """(n_users + n_items, d) one noisy view: the mean of the perturbed layers 1..L."""
        ego = torch.cat([self.user_emb.weight, self.item_emb.weight])
        out, x = [], ego
        for _ in range(self.layers):
            x = perturb(self.spread(x), self.noise_eps, uniform=self.noise == "uniform")
            out.append(x)
        return layer_mean(out)

    def embeddings(self) -> tuple[Tensor, Tensor]:
        ego = torch.cat([self.user_emb.weight, self.item_emb.weight])
        final = layer_mean(self.propagate(ego))
        return self.split_nodes(final)

    def extra_loss(self, users: Tensor, items: Tensor) -> Tensor | None:
        if not (self.training and torch.is_grad_enabled()) or self.cl_weight == 0:
            return None
        if self.unique:
            users, items = users.unique(), items.unique()
        a, b = self.perturbed(), self.perturbed()
        nodes = self.n_users + items
        return self.cl_weight * (info_nce(a[users], b[users], self.cl_tau) + info_nce(a[nodes], b[nodes], self.cl_tau))
