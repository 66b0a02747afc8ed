"""Per-edge (filtered) ranking for link prediction, beside the per-node averages.

Each held-out pair (u, v) is one query: v is ranked against every node that u's masked score
row leaves in play, except u's other held-out neighbours, which are filtered out as in
knowledge-graph completion (Bordes et al., 2013). With ``s`` the masked scores of u (masked
nodes hold -inf) and ``T`` u's held-out set, ``x = s[v]``:

.. math::

    G = \\#\\{w \\notin T : s_w > x\\},\\quad
    Q = \\#\\{w \\notin T : s_w = x\\},\\quad
    L = \\#\\{w \\notin T : s_w = x,\\ w < v\\}

(``Q = L = 0`` when ``x = -inf``: such a score cannot be told apart from a mask, and the target
then ranks right after every candidate with a higher score). The rank under ``eval.ties`` is
``1 + G`` (optimistic), ``1 + G + Q`` (pessimistic), ``1 + G + L`` (lowest_id); under
``expected`` every place ``1 + G .. 1 + G + Q`` is equally likely and the metrics are their
exact means:

.. math::

    E[1/\\mathrm{rank}] = \\frac{1}{Q+1}\\sum_{j=0}^{Q}\\frac{1}{G+1+j}
                     = \\frac{\\psi(G+Q+2) - \\psi(G+1)}{Q+1},\\qquad
    E[\\mathrm{Hit@}K] = \\frac{\\min(\\max(K-G,\\,0),\\,Q+1)}{Q+1}.

Reported per edge: ``mrr`` (reciprocal rank, no cut-off) and ``hit@K`` for every K. The
evaluator stores per-source sums in :data:`EDGE_PREFIX` columns; :func:`edge_summary` turns
them into means over edges (a micro average: a node with more held-out edges weighs more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from bench.evaluation.ties import check_mode

#: per-source columns of the per-edge protocol: ``edge:edges`` (held-out edges of the source),
#: ``edge:mrr`` and ``edge:hit@K`` (sums over those edges)
EDGE_PREFIX = "edge:"
EDGE_COUNT = "edges"

__all__ = ["EDGE_COUNT", "EDGE_PREFIX", "FilteredRanks", "edge_columns", "edge_metrics", "edge_summary",
           "filtered_ranks", "format_per_edge"]


class FilteredRanks(NamedTuple):
    """Counts behind each edge's filtered rank, (E,) int64 each.

    Attributes:
        above: G, candidates scored strictly higher than the target.
        tied: Q, other candidates with the target's score.
        tied_lower: L, those of the tied candidates with a lower node id.
    """

    above: Tensor
    tied: Tensor
    tied_lower: Tensor


@torch.no_grad()
def filtered_ranks(scores: Tensor, rows: Tensor, items: Tensor, max_scores: int = 1 << 24) -> FilteredRanks:
    """The counts G, Q, L (module docstring) of every held-out pair.

    Args:
        scores: (B, I) masked scores (masked items at -inf), no NaN.
        rows: (E,) int64 row of each pair in ``scores`` (its source).
        items: (E,) int64 target of each pair; a row's pairs are its whole held-out set.
        max_scores: score entries compared at once (pairs are processed in blocks of
            ``max_scores // I`` rows, so memory stays within one evaluation chunk).
    Returns:
        :class:`FilteredRanks`.
    """
    n_items = scores.shape[1]
    target = scores[rows, items].unsqueeze(1)
    others = scores.clone()
    # a held-out neighbour is no competitor of another: set it below every candidate
    others[rows, items] = float("-inf")
    finite = target.squeeze(1) > float("-inf")
    ids = torch.arange(n_items, device=scores.device)
    counts = torch.zeros(3, rows.numel(), dtype=torch.int64, device=scores.device)
    step = max(1, int(max_scores) // max(n_items, 1))
    for start in range(0, rows.numel(), step):
        block = slice(start, start + step)
        row_scores = others.index_select(0, rows[block])
        x = target[block]
        counts[0, block] = torch.count_nonzero(row_scores > x, dim=1)  # faster than a bool sum
        same = row_scores == x
        tied = torch.where(finite[block], torch.count_nonzero(same, dim=1), 0)
        counts[1, block] = tied
        # the lower ids only where there is a tie (rare with float scores)
        where = tied.nonzero().squeeze(1)
        if where.numel():
            lower = same.index_select(0, where) & (ids < items[block][where].unsqueeze(1))
            counts[2, start + where] = torch.count_nonzero(lower, dim=1)
    return FilteredRanks(counts[0], counts[1], counts[2])


def edge_metrics(ranks: FilteredRanks, ks: Sequence[int], ties: str = "expected") -> dict[str, Tensor]:
    """Per-edge metrics from the counts.

    Args:
        ranks: :func:`filtered_ranks`'s counts.
        ks: Hit@K cut-offs.
        ties: a rule of bench.evaluation.ties.TIE_MODES.
    Returns:
        ``{"mrr": (E,) float64 reciprocal rank, "hit@K": (E,) float64 in [0, 1], ...}``.
    """
    check_mode(ties)
    g, q = ranks.above.to(torch.float64), ranks.tied.to(torch.float64)
    if ties == "expected":
        # exact means over the Q + 1 equally likely places; untied edges take 1 / (G + 1) as
        # the other rules do, so the rules agree to the bit without ties
        mean_rr = (torch.special.digamma(g + q + 2) - torch.special.digamma(g + 1)) / (q + 1)
        out = {"mrr": torch.where(q > 0, mean_rr, 1.0 / (g + 1))}
        for k in ks:
            out[f"hit@{k}"] = ((k - g).clamp(min=0) / (q + 1)).clamp(max=1)
        return out
    share = {"optimistic": torch.zeros_like(q), "pessimistic": q, "lowest_id": ranks.tied_lower.to(torch.float64)}
    rank = 1 + g + share[ties]
    return {"mrr": 1.0 / rank, **{f"hit@{k}": (rank <= k).to(torch.float64) for k in ks}}


def edge_columns(scores: Tensor, rows: Tensor, items: Tensor, ks: Sequence[int], ties: str = "expected",
                 max_scores: int = 1 << 24) -> dict[str, Tensor]:
    """Per-source sums of the per-edge metrics: the evaluator's :data:`EDGE_PREFIX` columns.

    Args:
        scores, rows, items, max_scores: as in :func:`filtered_ranks`.
        ks, ties: as in :func:`edge_metrics`.
    Returns:
        ``{"edge:edges": (B,) float64 pairs per row, "edge:mrr": (B,) float64 sum of
        reciprocal ranks, "edge:hit@K": (B,) float64 sum of hits, ...}``.
    """
    per_edge = edge_metrics(filtered_ranks(scores, rows, items, max_scores), ks, ties)
    zeros = torch.zeros(scores.shape[0], dtype=torch.float64, device=scores.device)
    out = {EDGE_PREFIX + EDGE_COUNT: zeros.index_add(0, rows, torch.ones_like(per_edge["mrr"]))}
    out.update({EDGE_PREFIX + key: zeros.index_add(0, rows, value) for key, value in per_edge.items()})
    return out


def edge_summary(per_user: dict[str, Tensor]) -> dict[str, float | int]:
    """Means over edges of an evaluation's :data:`EDGE_PREFIX` columns (all sources summed
    first, so every edge counts once); ``{}`` when it has none.

    Returns:
        ``{"edges": E, "mrr": ..., "hit@20": ..., ...}``.
    """
    columns = {k[len(EDGE_PREFIX):]: v for k, v in per_user.items() if k.startswith(EDGE_PREFIX)}
    if EDGE_COUNT not in columns:
        return {}
    n = int(columns.pop(EDGE_COUNT).sum())
    return {EDGE_COUNT: n, **{k: float(v.sum()) / max(n, 1) for k, v in columns.items()}}


def format_per_edge(summary: dict[str, float | int], ks: Sequence[int]) -> str:
    """One console line of a run's per-edge summary (:func:`edge_summary`)."""
    hits = ", ".join(f"Hit@{k} {summary[f'hit@{k}']:.4f}" for k in ks if f"hit@{k}" in summary)
    return f"Per edge (filtered, {summary['edges']} held-out pairs): MRR {summary['mrr']:.4f}, {hits}"
