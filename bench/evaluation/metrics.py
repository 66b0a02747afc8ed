"""Full-ranking top-K metrics with binary relevance (EVALUATION.md; trec_eval/ranx definitions).

For user u with held-out set R_u and a ranked list (ranks start at 1):

- Recall@K    = |top-K ∩ R_u| / |R_u|
- Precision@K = |top-K ∩ R_u| / K
- HitRate@K   = 1 if top-K ∩ R_u is non-empty
- MRR@K       = 1 / rank of the first hit within K (0 if none)
- NDCG@K      = DCG@K / IDCG@K, DCG@K = sum over hits at rank r <= K of 1 / log2(r + 1),
  IDCG@K = sum_{r=1}^{min(K, |R_u|)} 1 / log2(r + 1)

Users with no held-out item have no defined value and must be excluded by the caller.
"""

from __future__ import annotations

import torch
from torch import Tensor

METRICS = ("recall", "ndcg", "precision", "hit", "mrr")
DEFAULT_KS = (5, 10, 20, 50, 100)


def metric_key(metric: str, k: int) -> str:
    """Canonical name, e.g. ``ndcg@20``."""
    return f"{metric}@{k}"


def metrics_from_hits(hits: Tensor, n_relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS) -> dict[str, Tensor]:
    """Per-user metrics from the relevance of each user's ranked list.

    Args:
        hits: (B, L) bool/0-1, ``hits[b, r]`` = the item at rank r + 1 is relevant; L is
            the list length (>= max(ks), or the catalogue size if smaller).
        n_relevant: (B,) number of relevant items per user (>= 1).
        ks: cut-offs. A cut-off beyond L counts the whole list (Precision still divides by K).
    Returns:
        ``{"ndcg@20": (B,) float tensor, ...}`` for every metric in METRICS and K in ks.
    """
    hits = hits.to(torch.float64)
    n_rel = n_relevant.to(torch.float64)
    if (n_rel < 1).any():
        raise ValueError("every user needs at least one relevant item; exclude the others")
    length = hits.shape[1]
    ranks = torch.arange(1, length + 1, dtype=torch.float64, device=hits.device)
    discount = 1.0 / torch.log2(ranks + 1.0)
    cum_hits = torch.cumsum(hits, 1)
    cum_dcg = torch.cumsum(hits * discount, 1)
    max_k = max(ks)
    ideal = torch.cumsum(1.0 / torch.log2(torch.arange(1, max_k + 1, dtype=torch.float64, device=hits.device) + 1.0), 0)
    # rank of the first hit (length + 1 when none)
    any_hit = hits.bool().any(1)
    first = torch.where(any_hit, hits.bool().to(torch.int8).argmax(1).to(torch.float64) + 1.0,
                        torch.full_like(n_rel, float(length + 1)))
    out: dict[str, Tensor] = {}
    for k in ks:
        col = min(k, length) - 1
        h = cum_hits[:, col] if length else torch.zeros_like(n_rel)
        dcg = cum_dcg[:, col] if length else torch.zeros_like(n_rel)
        idcg = ideal[(torch.clamp(n_rel, max=k) - 1).long()]
        out[metric_key("recall", k)] = h / n_rel
        out[metric_key("ndcg", k)] = dcg / idcg
        out[metric_key("precision", k)] = h / k
        out[metric_key("hit", k)] = (h > 0).to(torch.float64)
        out[metric_key("mrr", k)] = torch.where(first <= min(k, length), 1.0 / first, torch.zeros_like(first))
    return out


def rank_items(scores: Tensor, k: int) -> Tensor:
    """Indices of the ``k`` best items per row, ties broken by lower item index.

    ``torch.topk`` leaves the order of equal scores unspecified; here a tie is always
    resolved in favour of the smaller item id, both inside the list and at its cut-off,
    so results do not depend on the kernel.

    Args:
        scores: (B, I) scores; masked items should hold -inf.
        k: list length (clamped to I).
    Returns:
        (B, min(k, I)) int64 item indices, best first.
    """
    n_items = scores.shape[1]
    k = min(k, n_items)
    if k == 0:
        return torch.empty(scores.shape[0], 0, dtype=torch.int64, device=scores.device)
    probe = min(k + 1, n_items)
    vals, idx = torch.topk(scores, probe, dim=1)
    # topk sorts by value; equal values are adjacent but in unspecified order. Only rows
    # with a tie are re-ordered (by index first, then a stable sort by value).
    tied = (vals[:, 1:] == vals[:, :-1]).any(1)
    if tied.any():
        rows = tied.nonzero().squeeze(1)
        idx_sorted, perm = torch.sort(idx[rows], dim=1)
        order = torch.sort(vals[rows].gather(1, perm), dim=1, descending=True, stable=True).indices
        idx[rows] = idx_sorted.gather(1, order)
    idx = idx[:, :k].clone()
    if probe > k:
        # a tie straddling the cut-off: the top-(k+1) may hold any of the tied items,
        # so those rows are ranked exactly with a full stable sort
        boundary = vals[:, k - 1] == vals[:, k]
        if boundary.any():
            rows = boundary.nonzero().squeeze(1)
            idx[rows] = torch.sort(scores[rows], dim=1, descending=True, stable=True).indices[:, :k]
    return idx


def ranking_metrics(scores: Tensor, relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS) -> dict[str, Tensor]:
    """Per-user metrics from a full score matrix (functional form).

    Args:
        scores: (B, I) scores, with excluded (e.g. training) items already set to -inf.
        relevant: (B, I) bool, the held-out items; every row needs one True.
        ks: cut-offs.
    Returns:
        dict of (B,) float64 tensors, see :func:`metrics_from_hits`.
    """
    top = rank_items(scores, max(ks))
    hits = relevant.gather(1, top)
    return metrics_from_hits(hits, relevant.sum(1), ks)
