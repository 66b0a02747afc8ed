"""``binomial_safe``: a higher sample order statistic, chosen for a target overestimate probability."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import Scorer
from bench.errors import ConfigError
from bench.thresholds.base import SampleEstimator, kth_largest, mask_duplicates
from bench.thresholds.registry import ESTIMATORS


def _log_comb(n: Tensor, k: Tensor) -> Tensor:
    out = torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
    return torch.where((k >= 0) & (k <= n), out, torch.full_like(out, float("-inf")))


def hypergeom_upper_tail(population: Tensor, drawn: Tensor, k: int) -> Tensor:
    """P(X >= j) for X ~ Hypergeometric(population M, successes m, draws n), all m, j < k.

    Args:
        population: (B,) M per row; drawn: (B,) n per row (float64).
        k: table size.
    Returns:
        (B, k, k + 1) float64: [b, m, j] = P(X >= j) with m successes (0 <= m < k, 0 <= j <= k).
    """
    dt = torch.float64
    m = torch.arange(k, dtype=dt, device=population.device)[None, :, None]  # successes
    x = torch.arange(k, dtype=dt, device=population.device)[None, None, :]  # hits, x <= m < k
    M, n = population.to(dt)[:, None, None], drawn.to(dt)[:, None, None]
    log_pmf = _log_comb(m, x) + _log_comb(M - m, n - x) - _log_comb(M, n)
    pmf = torch.exp(log_pmf)  # (B, k, k); zero outside the support
    tail = pmf.flip(-1).cumsum(-1).flip(-1)  # P(X >= j), j = 0..k-1
    return torch.cat([tail, torch.zeros_like(tail[..., :1])], -1)  # j = k: impossible when m < k


@ESTIMATORS.register("binomial_safe")
class BinomialSafeEstimator(SampleEstimator):
    """A sample order statistic high enough to overestimate with probability <= delta
    (docs/thresholds.md#binomial_safe), with positives counted exactly.

    The distinct sampled negatives are a uniform subset of size n of the user's
    M = |I| - |P_u| negatives. For the j-th largest sampled negative t_j, with a_j
    positives scoring >= t_j, t_j can exceed beta only if at least j of the (at most)
    K - a_j - 1 negatives above beta were sampled: P <= P(Hypergeom(M, K - a_j - 1, n) >= j).
    The estimate is the first (highest) t_j with that probability <= delta, or the plain
    de-duplicated sample's K-th largest (always safe) when higher. Taking the first
    accepted j keeps P(overestimate) <= delta: on that event j >= the least j accepted
    with the true count of negatives above beta.

    Safe with probability 1 - delta per estimate. Cost: |P_u| + N scores, a sort and a
    (B, K, K) table per batch. State: none.

    Args:
        delta: target overestimate probability per estimate.
        positives: "all" or "p90" (see ``sampled``).
    """

    safe = False

    def __init__(self, delta: float = 1e-3, positives: str = "all") -> None:
        super().__init__(positives)
        if not 0 < delta < 1:
            raise ConfigError(f"binomial_safe needs 0 < delta < 1, got {delta}")
        self.delta = float(delta)

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        pos_items, valid = self.positive_items(users)
        scores = scorer.score_items(users, torch.cat([pos_items, negatives], 1))
        n_p = pos_items.shape[1]
        pos = scores[:, :n_p].masked_fill(~valid, float("-inf"))
        neg = mask_duplicates(negatives, scores[:, n_p:])
        plain = kth_largest(torch.cat([pos, neg], 1), k)  # the safe de-duplicated sample estimate
        j_max = min(k, neg.shape[1])
        t = torch.topk(neg, j_max, dim=1).values  # t_1 >= ... >= t_J (-inf past the distinct ones)
        a = (pos[:, None, :] >= t[:, :, None]).sum(-1)  # (B, J) positives >= t_j
        n_drawn = torch.isfinite(neg).sum(1)
        population = self.n_items - valid.sum(1)
        table = hypergeom_upper_tail(population, n_drawn, k)  # (B, k, k + 1)
        m = (k - a - 1).clamp(min=0, max=k - 1)  # negatives above beta, at most
        j = torch.arange(1, j_max + 1, device=users.device).expand_as(a)
        p_over = table.gather(1, m[:, :, None].expand(-1, -1, k + 1)).gather(2, j[:, :, None]).squeeze(2)
        p_over = torch.where(k - a - 1 < j, torch.zeros_like(p_over), p_over)  # cannot exceed: a_j + j >= K
        accept = (p_over <= self.delta) & torch.isfinite(t)
        first = torch.where(accept.any(1), accept.float().argmax(1), torch.full_like(n_drawn, -1))
        best = torch.where(first >= 0, t.gather(1, first.clamp(min=0)[:, None]).squeeze(1),
                           torch.full_like(plain, float("-inf")))
        return torch.maximum(best, plain)
