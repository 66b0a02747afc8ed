r"""SogCLR (Yuan et al., ICML 2022) for recommendation, as the SL@K authors' IR-Benchmark adapts it.

SogCLR optimises the softmax loss :math:`-s_{ui}/\tau + \log \mathbb{E}_j e^{s_{uj}/\tau}` with a
per-user moving average :math:`g_u` of the inner expectation in place of the batch estimate in
the gradient's denominator: the gradient divides by an estimate of the expectation, and the
error of one small sample's estimate, which biases that ratio, averages out over the steps.

The moving average is kept in log space (``log_g``): :math:`e^{s/\tau}` overflows float32 from
s/τ ≈ 88 on (cosine scores at τ = 0.01 reach 100, dot scores any value), while every quantity the
loss needs is a ratio :math:`e^{s_{uj}/\tau} / g_u` or a log, both finite in log space whatever the
scores.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from bench.contracts import LossBatch, SyncedRows, TrainData
from bench.errors import ConfigError
from bench.losses.base import RecLoss
from bench.losses.registry import LOSSES


class _RowStats(NamedTuple):
    shift: Tensor  # (P,) row max of s_uj / tau over valid columns; 0 for a row without any (no gradient)
    sum_exp: Tensor  # (P,) sum_j exp(s_uj / tau - shift), with gradient; 0 for an empty row
    n_valid: Tensor  # (P,) number of valid negatives
    empty: Tensor  # (P,) bool, no valid negative
    lse: Tensor  # (P,) log sum_j exp(s_uj / tau) (no gradient); -inf for an empty row


def _row_stats(neg: Tensor, tau: float, valid: Tensor | None) -> _RowStats:
    x = neg / tau  # masked columns hold -inf and stay -inf
    shift = x.detach().amax(1)
    if valid is None:
        count = torch.full_like(shift, neg.shape[1])
        empty = torch.zeros_like(shift, dtype=torch.bool)
    else:
        count = valid.sum(1).to(shift.dtype)
        empty = count == 0
        shift = shift.masked_fill(empty, 0.0)
    # exp(-inf - finite) = 0 with zero gradient, so masked columns drop out exactly
    sum_exp = torch.exp(x - shift[:, None]).sum(1)
    lse = torch.log(sum_exp.detach()) + shift  # log 0 = -inf for empty rows
    return _RowStats(shift, sum_exp, count, empty, lse)


def pooled_log_mean_exp(lse: Tensor, count: Tensor, users: Tensor, n_users: int) -> Tensor:
    r"""(P,) per row, :math:`\log \hat g_u`: the log of the mean of :math:`e^{s_{uj}/\tau}` over all
    valid negatives of all the batch's rows of the row's user u (-inf when u has none).

    Args:
        lse: (P,) :math:`\log \sum_{j} e^{s_{rj}/\tau}` of each row r (-inf for an empty row).
        count: (P,) valid negatives per row.
        users: (P,) user ids in ``[0, n_users)``.
    """
    # scatter into (n_users,) tensors instead of torch.unique: no host sync, and every row of a
    # user reads the same pooled value, so duplicate writes of the buffer agree
    top = torch.full((n_users,), float("-inf"), dtype=lse.dtype, device=lse.device)
    top = top.scatter_reduce(0, users, lse, reduce="amax")[users]
    top = top.masked_fill(torch.isneginf(top), 0.0)
    total = torch.zeros(n_users, dtype=lse.dtype, device=lse.device).index_add_(0, users, torch.exp(lse - top))
    n = torch.zeros(n_users, dtype=lse.dtype, device=lse.device).index_add_(0, users, count.to(lse.dtype))
    total, n = total[users], n[users]
    # total >= 1 wherever n > 0 (the user's largest row contributes exp(0))
    return torch.where(n > 0, torch.log(total) + top - torch.log(n.clamp(min=1)), torch.full_like(top, -math.inf))


def moving_average_log(old: Tensor, log_ghat: Tensor, gamma: float) -> Tensor:
    r"""log of :math:`g \leftarrow (1-\gamma)\,g + \gamma\,\hat g`, all in log space.

    ``old`` = -inf marks a user never seen: g starts at the batch estimate (so the first update
    gives :math:`\hat g`). ``log_ghat`` = -inf (no valid negative this step) keeps ``old``.
    """
    start = torch.where(torch.isneginf(old), log_ghat, old)
    keep = math.log1p(-gamma) if gamma < 1 else -math.inf
    new = torch.logaddexp(start + keep, log_ghat + math.log(gamma))
    return torch.where(torch.isneginf(log_ghat), old, new)


def _terms(pos: Tensor, stats: _RowStats, log_g: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        # e^{shift}/g_u <= (rows' valid negatives of u)/gamma after the update: finite
        scale = torch.exp(stats.shift - log_g.masked_fill(stats.empty, 0.0)).masked_fill(stats.empty, 0.0)
    zero = torch.zeros_like(pos)
    surrogate = torch.where(stats.empty, zero, stats.sum_exp * scale / stats.n_valid.clamp(min=1) - pos / tau)
    value = torch.where(stats.empty, zero, stats.lse - pos.detach() / tau)
    return surrogate, value


def sogclr_terms(pos: Tensor, neg: Tensor, log_g: Tensor, tau: float,
                 valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""Per-pair SogCLR gradient surrogate and softmax-loss value for a *given* :math:`\log g`.

    Args:
        pos: (P,) positive scores; neg: (P, N) negative scores (-inf where ``valid`` is False).
        log_g: (P,) :math:`\log g_u` of each row's user, held constant.
        tau: temperature.
        valid: (P, N) bool, the true negatives of shared draws; None = all.
    Returns:
        surrogate (P,) :math:`-s_{ui}/\tau + \mathrm{mean}_j e^{s_{uj}/\tau} / g_u`, whose gradient
        is SogCLR's (its value is not a loss), and value (P,) without gradient
        :math:`\log\sum_j e^{(s_{uj}-s_{ui})/\tau}` (the ``sl`` loss of the row); both 0 for a row
        without valid negatives.
    """
    return _terms(pos, _row_stats(neg, tau, valid), log_g, tau)


def sogclr_loss(pos: Tensor, neg: Tensor, users: Tensor, log_g: Tensor, tau: float, gamma: float,
                valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""One SogCLR step, without side effects.

    Args:
        pos: (P,) positive scores; neg: (P, N) negative scores (-inf where ``valid`` is False).
        users: (P,) user ids.
        log_g: (n_users,) the state :math:`\log g_u` before the step (-inf: never seen).
        tau: temperature; gamma: moving-average rate in (0, 1].
        valid: (P, N) bool, the true negatives of shared draws; None = all.
    Returns:
        the scalar to minimise, and (P,) the updated :math:`\log g_u` of each row's user (to write
        at ``users``; rows of the same user hold the same value). The scalar's gradient is the
        mean over pairs of SogCLR's; its value is the mean over pairs of the sampled softmax loss
        :math:`\log\sum_j e^{(s_{uj}-s_{ui})/\tau}` (rows without valid negatives count 0).
    """
    stats = _row_stats(neg, tau, valid)
    with torch.no_grad():
        log_ghat = pooled_log_mean_exp(stats.lse, stats.n_valid, users, log_g.shape[0])
        new = moving_average_log(log_g[users].to(log_ghat.dtype), log_ghat, gamma)
    surrogate, value = _terms(pos, stats, new, tau)
    s = surrogate.mean()
    # value of the softmax loss, gradient of the surrogate (x - x.detach() is exactly 0)
    return value.mean() + (s - s.detach()), new


@LOSSES.register("sogclr")
class SogCLR(RecLoss):
    r"""SogCLR (docs/losses.md#sogclr): per pair (u, i) with negatives N,

    - :math:`\hat g_u = \mathrm{mean}\, e^{s_{uj}/\tau}` over the valid negatives of all the
      batch's rows of user u
    - :math:`g_u \leftarrow (1-\gamma) g_u + \gamma \hat g_u` (once per step and user; the first
      visit starts from :math:`\hat g_u`)
    - gradient of :math:`-s_{ui}/\tau + \mathrm{mean}_{j\in N} e^{s_{uj}/\tau} / g_u` with
      :math:`g_u` constant, averaged over the pairs

    The returned scalar has that gradient and the value of the sampled softmax loss
    :math:`\log\sum_{j} e^{(s_{uj}-s_{ui})/\tau}` (as ``sl`` reports). The state is
    :math:`\log g_u` per user (buffer ``log_g``, -inf = not seen yet), checkpointed and shared
    across data-parallel ranks.

    Args:
        tau: temperature (> 0).
        gamma: moving-average rate in (0, 1]; 1 = the batch estimate alone (plain sampled
            softmax gradient).
        n_negatives: N.
    """

    log_g: Tensor  # buffer (checkpointed)

    def __init__(self, tau: float = 0.2, gamma: float = 0.9, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if tau <= 0:
            raise ConfigError(f"loss.tau must be > 0, got {tau}")
        if not 0 < gamma <= 1:
            raise ConfigError(f"loss.gamma must be in (0, 1], got {gamma}")
        self.tau, self.gamma = float(tau), float(gamma)
        self.register_buffer("log_g", torch.zeros(0))

    def bind(self, data: TrainData) -> None:
        self.log_g = torch.full((data.n_users,), float("-inf"), device=self.log_g.device)

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        return [(self.log_g, batch.require("users"))]

    def forward(self, batch: LossBatch) -> Tensor:
        users = batch.require("users")
        if self.log_g.numel() == 0:
            raise ValueError("sogclr keeps per-user state: call bind(data) before the first batch")
        out, new = sogclr_loss(batch.pos, batch.neg, users, self.log_g, self.tau, self.gamma, batch.neg_valid)
        with torch.no_grad():
            self.log_g[users] = new.to(self.log_g.dtype)
        return out
