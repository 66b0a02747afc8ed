"""SONG@K: K-SONG's practical version (Qiu et al., ICML 2022; LibAUC's NDCGLoss with top-k), and SONG (no top-K)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from bench.contracts import LossBatch, SyncedRows, TrainData
from bench.errors import ConfigError
from bench.evaluation.metrics import ideal_dcg
from bench.losses.base import RecLoss, row_mean
from bench.losses.registry import LOSSES
from bench.thresholds import ThresholdEstimator, from_spec


def song_weights(pos: Tensor, u: Tensor, lam: Tensor, idcg: Tensor, n_items: int, alpha: float | None) -> Tensor:
    """(B,) the no-gradient factor psi * nabla f / IDCG of each pair (psi = 1 when alpha is None)."""
    n = float(n_items)
    nabla_f = n / (torch.log2(1 + n * u) ** 2 * (1 + n * u) * math.log(2))
    weight = nabla_f / idcg
    if alpha is not None:
        weight = weight * torch.sigmoid((pos.detach() - lam) * alpha)
    return weight


def song_g(pos: Tensor, neg: Tensor, margin: float, valid: Tensor | None = None) -> Tensor:
    """(B,) g_ui = mean over S = {i} ∪ N of max(0, m - (s_ui - s_uj))^2; ``valid`` (B, 1 + N)
    marks the list's true members (shared negatives: a row's own positives are not)."""
    listed = torch.cat([pos.unsqueeze(1), neg], dim=1)
    return row_mean(torch.clamp(margin - (pos.unsqueeze(1) - listed), min=0).pow(2), valid)


@LOSSES.register("songk")
class SONGAtK(RecLoss):
    r"""SONG@K (docs/losses.md#songk), per positive pair (u, i) with list S = {i} ∪ N_ui:

    - :math:`g_{ui} = \mathrm{mean}_{j \in S}\, \max(0, m - (s_{ui} - s_{uj}))^2`
    - :math:`u_{ui} \leftarrow (1-\gamma_0) u_{ui} + \gamma_0 g_{ui}` (one state per training pair)
    - :math:`\nabla f = |I| / ((\log_2(1 + |I| u_{ui}))^2 (1 + |I| u_{ui}) \ln 2)` (no gradient)
    - :math:`\psi_{ui} = \sigma((s_{ui} - \lambda_u)\,a)` (no gradient), a = 1/tau1 by default
    - :math:`\lambda_u \leftarrow \lambda_u - \eta_0 (K/|I| + \tau_2 \lambda_u
      - \mathrm{mean}_{j \in S} \sigma((s_{uj} - \lambda_u)/\tau_1))`
    - loss = mean over pairs of :math:`\psi_{ui} \nabla f\, g_{ui} / \mathrm{IDCG@K}_u`

    Per-pair u and per-user lambda are buffers (checkpointed). With K = 0 the top-K
    weight is off (SONG).

    Args:
        k: the K of NDCG@K.
        gamma0: moving-average rate of u.
        eta0: step size of lambda.
        margin: m of the squared hinge.
        tau1, tau2: lambda's smoothing and regulariser.
        sigmoid_alpha: the psi slope a; null = 1/tau1 (the formula sheet); LibAUC uses 2.
        threshold: "learned" (lambda by the update above, K-SONG) or a top-K threshold
            estimator (a name such as ``exact`` or ``cached``, or ``{name: ..., **options}``)
            whose estimate of the K-th score replaces lambda at every step.
        n_negatives: N.
    """

    u: Tensor  # buffers (checkpointed)
    lam: Tensor
    idcg: Tensor

    def __init__(self, k: int = 20, gamma0: float = 0.9, eta0: float = 0.01, margin: float = 1.0,
                 tau1: float = 0.01, tau2: float = 1e-4, sigmoid_alpha: float | None = None,
                 threshold: Any = "learned", n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if not 0 < gamma0 <= 1:
            raise ConfigError(f"loss.gamma0 must be in (0, 1], got {gamma0}")
        self.k, self.gamma0, self.eta0, self.margin = int(k), float(gamma0), float(eta0), float(margin)
        self.tau1, self.tau2 = float(tau1), float(tau2)
        self.alpha = 1.0 / self.tau1 if sigmoid_alpha is None else float(sigmoid_alpha)
        self.estimator: ThresholdEstimator | None = None if threshold == "learned" else from_spec(threshold)
        self.register_buffer("u", torch.zeros(0))
        self.register_buffer("lam", torch.zeros(0))
        self.register_buffer("idcg", torch.zeros(0))
        self.n_items = 0

    def bind(self, data: TrainData) -> None:
        self.n_items = data.n_items
        self.u = torch.zeros(data.n_pairs, device=self.u.device)
        self.lam = torch.zeros(data.n_users, device=self.u.device)
        self.idcg = ideal_dcg(data.train.degrees(), self.k if self.k > 0 else None).float().to(self.u.device)
        if self.estimator is not None:
            self.estimator.bind(data)

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        extra = [] if self.estimator is None else self.estimator.synced_rows(batch)
        return [(self.u, batch.require("pair_ids")), (self.lam, batch.require("users")), *extra]

    def on_train_epoch_start(self, epoch: int) -> None:
        if self.estimator is not None:
            self.estimator.on_train_epoch_start(epoch)

    def forward(self, batch: LossBatch) -> Tensor:
        pos, neg, users, pair_ids = batch.pos, batch.neg, batch.require("users"), batch.require("pair_ids")
        listed_valid = None if batch.neg_valid is None else torch.cat(
            [torch.ones_like(batch.neg_valid[:, :1]), batch.neg_valid], dim=1)
        g = song_g(pos, neg, self.margin, listed_valid)
        with torch.no_grad():
            u = (1 - self.gamma0) * self.u[pair_ids] + self.gamma0 * g.detach()
            self.u[pair_ids] = u
            if self.estimator is not None and self.k > 0:
                estimate = self.estimator.estimate_batch(batch, self.k)
                self.lam[users] = estimate.to(self.lam.dtype)
            lam = self.lam[users]
            weight = song_weights(pos, u, lam, self.idcg[users], self.n_items, self.alpha if self.k > 0 else None)
            if self.k > 0 and self.estimator is None:
                listed = torch.cat([pos.unsqueeze(1), neg], dim=1).detach()
                above = row_mean(torch.sigmoid((listed - lam[:, None]) / self.tau1), listed_valid)
                grad = self.k / self.n_items + self.tau2 * lam - above
                self.lam[users] = lam - self.eta0 * grad
        return (weight * g).mean()


@LOSSES.register("song")
class SONG(SONGAtK):
    """SONG, untruncated (docs/losses.md#song): SONG@K with ``k = 0``, i.e. no top-K weight
    (ψ = 1), no λ, and the IDCG over all of the user's training positives.

    Args:
        gamma0: moving-average rate of u.
        margin: m of the squared hinge.
        n_negatives: N.
    """

    def __init__(self, gamma0: float = 0.9, margin: float = 1.0, n_negatives: int = 1000) -> None:
        super().__init__(k=0, gamma0=gamma0, margin=margin, n_negatives=n_negatives)

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        # lambda is never written without a top-K weight: only the per-pair averages change
        return [(self.u, batch.require("pair_ids"))]
