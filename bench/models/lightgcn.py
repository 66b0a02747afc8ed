"""LightGCN and XSimGCL: embeddings propagated over the user-item training graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import TrainData
from bench.datasets.base import CSR
from bench.errors import ConfigError
from bench.models.mf import MF
from bench.models.registry import MODELS
from bench.models.sparse import sparse_product, to_csr, transpose_csr


def normalized_adjacency(train: CSR, n_users: int, n_items: int) -> Tensor:
    r"""The symmetric normalised bipartite adjacency :math:`D^{-1/2} A D^{-1/2}`.

    Nodes are users ``0..n_users-1`` then items ``n_users..n_users+n_items-1``; edge
    (u, i) and (i, u) weigh 1 / sqrt(deg(u) deg(i)).

    Returns:
        a coalesced sparse COO tensor of shape (n_users + n_items, n_users + n_items).
    """
    pairs = train.to_pairs()
    users, items = pairs[:, 0], pairs[:, 1] + n_users
    n = n_users + n_items
    deg = torch.bincount(torch.cat([users, items]), minlength=n).float()
    inv_sqrt = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    weight = inv_sqrt[users] * inv_sqrt[items]
    index = torch.stack([torch.cat([users, items]), torch.cat([items, users])])
    return torch.sparse_coo_tensor(index, torch.cat([weight, weight]), (n, n), check_invariants=True).coalesce()


def layer_mean(layers: list[Tensor]) -> Tensor:
    """The mean of equal-shaped (n, d) layers: summed in order, then divided by their number.

    On CPU the digits of ``torch.stack(layers).mean(0)`` (which also sums in order, then divides;
    tests/models/test_sparse_product.py checks it), without the stacked copy and its backward split.
    """
    total = layers[0]
    for layer in layers[1:]:
        total = total + layer
    return total / len(layers)


@MODELS.register("lightgcn")
class LightGCN(MF):
    r"""LightGCN (He et al., SIGIR 2020):
    :math:`E^{(l+1)} = D^{-1/2} A D^{-1/2} E^{(l)}`, final :math:`E = \frac{1}{L+1}\sum_{l=0}^{L} E^{(l)}`
    over the joint user-item table :math:`E^{(0)}` (the free embeddings).

    The graph is the training interactions (validation and test excluded), given by
    :meth:`bind`. Propagation runs once per training step and once per evaluation pass, as CSR
    products (:func:`bench.models.sparse.sparse_product`).

    Args:
        n_users, n_items, dim, score, init, init_std: as :class:`~bench.models.mf.MF`.
        layers: L (2 in the SL@K paper).
    """

    adjacency: Tensor  # CSR, a buffer set by bind()
    adjacency_t: Tensor  # its transpose (CSR), or empty where the adjacency is symmetric
    bound_buffers = ("adjacency", "adjacency_t")

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 2, score: str = "cosine",
                 init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, score=score, init=init, init_std=init_std)
        if layers < 0:
            raise ConfigError(f"model.layers must be >= 0, got {layers}")
        self.layers = int(layers)
        self.register_buffer("adjacency", torch.zeros(0), persistent=False)
        self.register_buffer("adjacency_t", torch.zeros(0), persistent=False)

    def bind(self, data: TrainData) -> None:
        self.set_adjacency(normalized_adjacency(data.train, self.n_users, self.n_items), symmetric=True)

    def set_adjacency(self, matrix: Tensor, symmetric: bool) -> None:
        """Store the propagation matrix (sparse, (n_users + n_items)²) as CSR on the model's device, with
        its transpose for the backward unless ``symmetric``."""
        device = self.user_emb.weight.device
        self.adjacency = to_csr(matrix).to(device)
        transposed = transpose_csr(self.adjacency)
        if symmetric and not all(torch.equal(a, b) for a, b in zip(
                (self.adjacency.crow_indices(), self.adjacency.col_indices(), self.adjacency.values()),
                (transposed.crow_indices(), transposed.col_indices(), transposed.values()))):
            # the backward would multiply by A where it needs Aᵀ: wrong gradients, silently
            raise ValueError(f"{type(self).__name__}: the adjacency given as symmetric is not; pass symmetric=False")
        self.adjacency_t = torch.zeros(0, device=device) if symmetric else transposed

    def spread(self, x: Tensor) -> Tensor:
        """One propagation, adjacency @ x: (n_users + n_items, d) -> (n_users + n_items, d)."""
        if self.adjacency.numel() == 0:
            raise RuntimeError("bind() the model to the training data first")
        return sparse_product(self.adjacency, x, self.adjacency_t if self.adjacency_t.numel() else None)

    def split_nodes(self, nodes: Tensor) -> tuple[Tensor, Tensor]:
        """(n_users + n_items, d) -> the (n_users, d) users' and (n_items, d) items' rows, as views.

        ``split``'s backward joins the two gradients in one pass; two slices would each scatter theirs
        into a zeroed full-size tensor and add the two (5 ms of a Gowalla step; the same digits, since
        the other part's rows are exact zeros)."""
        users, items = nodes.split([self.n_users, self.n_items])
        return users, items

    def propagate(self, ego: Tensor) -> list[Tensor]:
        """[E^(1), ..., E^(L)] from E^(0) = ``ego`` (n_users + n_items, d)."""
        out, x = [], ego
        for _ in range(self.layers):
            x = self.spread(x)
            out.append(x)
        return out

    def embeddings(self) -> tuple[Tensor, Tensor]:
        ego = torch.cat([self.user_emb.weight, self.item_emb.weight])
        final = layer_mean([ego, *self.propagate(ego)])
        return self.split_nodes(final)


@MODELS.register("xsimgcl")
class XSimGCL(LightGCN):
    r"""XSimGCL (Yu et al., TKDE 2023): LightGCN whose layers add, in training,
    :math:`\epsilon\,\mathrm{sign}(E)\odot \hat\Delta` (random unit rows), final embedding the
    mean of layers 1..L, plus a cross-layer InfoNCE between the final embedding and layer
    ``contrast_layer`` for the batch's users and positive items:
    :math:`\lambda\,(\mathrm{InfoNCE}_\tau(E_U, E^{(l^*)}_U) + \mathrm{InfoNCE}_\tau(E_I, E^{(l^*)}_I))`,
    added to whichever recommendation loss is chosen.

    Args:
        layers: L (3). noise_eps: epsilon (0.1). contrast_layer: l* (1).
        cl_tau: InfoNCE temperature (0.1). cl_weight: lambda, in {0.05, 0.1, 0.2}.
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 3, noise_eps: float = 0.1,
                 contrast_layer: int = 1, cl_tau: float = 0.1, cl_weight: float = 0.1, score: str = "cosine",
                 init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, layers=layers, score=score, init=init, init_std=init_std)
        if not 1 <= contrast_layer <= layers:
            raise ConfigError(f"model.contrast_layer must be in [1, {layers}], got {contrast_layer}")
        self.noise_eps, self.contrast_layer = float(noise_eps), int(contrast_layer)
        self.cl_tau, self.cl_weight = float(cl_tau), float(cl_weight)
        self._views: tuple[Tensor, Tensor] | None = None

    def propagate(self, ego: Tensor) -> list[Tensor]:
        out, x = [], ego
        for _ in range(self.layers):
            x = self.spread(x)
            if self.training:
                x = perturb(x, self.noise_eps)
            out.append(x)
        return out

    def embeddings(self) -> tuple[Tensor, Tensor]:
        ego = torch.cat([self.user_emb.weight, self.item_emb.weight])
        layers = self.propagate(ego)
        final = layer_mean(layers)
        if self.training and torch.is_grad_enabled():
            # the views of this very (gradient-carrying) propagation, for the contrastive term;
            # no-grad calls (ranks, threshold refreshes) must not replace them
            self._views = (final, layers[self.contrast_layer - 1])
        return self.split_nodes(final)

    def extra_loss(self, users: Tensor, items: Tensor) -> Tensor | None:
        if self._views is None or self.cl_weight == 0:
            return None
        final, view = self._views
        self._views = None
        loss = info_nce(final[users], view[users], self.cl_tau)
        loss = loss + info_nce(final[self.n_users + items], view[self.n_users + items], self.cl_tau)
        return self.cl_weight * loss


def perturb(x: Tensor, eps: float, uniform: bool = False) -> Tensor:
    """``x`` (n, d) plus noise of norm ``eps`` in each row's own orthant, ε·sign(x)⊙Δ/‖Δ‖, with Δ Gaussian
    (XSimGCL as IR-Benchmark runs it) or ``uniform`` in [0, 1)^d (SimGCL's authors)."""
    delta = torch.rand_like(x) if uniform else torch.randn_like(x)
    return x + torch.sign(x) * F.normalize(delta, dim=1) * eps


def info_nce(a: Tensor, b: Tensor, tau: float) -> Tensor:
    """(R, d) views a, b -> scalar mean over rows of -log softmax_k(a_r . b_k / tau)[r], rows L2-normalised."""
    logits = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T / tau
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))
