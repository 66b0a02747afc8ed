"""Top-K selection with a per-user lower bound: filter, then select among the survivors.

THRESHOLDS.md "Using a lower bound in evaluation": with b_u <= the K-th best unmasked
score of u, every top-K item (and every item tied with the K-th) scores >= b_u, so
ranking only those survivors gives the same list as ranking the whole row. Rows where
fewer than K items survive (the bound was too high: an unsafe estimate) are ranked in
full, so any bound is usable and the result never changes.

Measured on CPU it does not pay (see ``benchmarks/eval_lower_bound.py``): the
compare-and-compact pass costs about what ``torch.topk`` does. It is kept as a tested
building block, not used by the evaluator.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.evaluation.metrics import rank_items


def rank_items_with_bound(scores: Tensor, k: int, bound: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`~bench.evaluation.metrics.rank_items` (same order, ties by lower item id)
    computed from the items scoring at least ``bound``.

    Args:
        scores: (B, I) scores, masked items -inf.
        k: list length.
        bound: (B,) lower bounds of each row's k-th best score (any values: rows where it is
            too high fall back to a full ranking).
    Returns:
        ((B, min(k, I)) item indices, (B,) bool: rows that fell back).
    """
    n_items = scores.shape[1]
    k = min(k, n_items)
    keep = scores >= bound[:, None]
    counts = keep.sum(1)
    fallback = counts < k
    out = torch.empty(scores.shape[0], k, dtype=torch.int64, device=scores.device)
    if fallback.any():
        out[fallback] = rank_items(scores[fallback], k)
    ok = ~fallback
    if ok.any() and k:
        keep &= ok[:, None]
        rows, items = keep.nonzero(as_tuple=True)  # row-major: items ascending within a row
        vals = scores[rows, items]
        order = torch.sort(vals, descending=True, stable=True).indices  # ties keep the lower item first
        order = order[torch.sort(rows[order], stable=True).indices]  # then group by row, stably
        kept = torch.where(ok, counts, torch.zeros_like(counts))
        starts = (torch.cumsum(kept, 0) - kept)[ok]
        out[ok] = items[order][starts[:, None] + torch.arange(k, device=scores.device)]
    return out, fallback
