"""Full-ranking top-K metrics with binary relevance, looked up by name in :data:`METRICS`
(definitions: docs/evaluation.md; they match trec_eval / ranx).

A metric is a function ``(stats: HitStats, k: int) -> (B,) float64`` registered with
``@METRICS.register("name")``; every registered metric is computed at every cut-off of
``eval.ks`` and reported as ``name@K``. Adding one is a module in this package (modules
here are discovered automatically).

Users with no held-out item have no defined value and must be excluded by the caller.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bench.evaluation.metrics import standard  # noqa: F401  (the built-ins register first)
from bench.evaluation.metrics.ranking import (
    HitStats,
    RankedList,
    ideal_dcg,
    rank_items,
    ranked_list,
    ranks_within,
)
from bench.evaluation.metrics.registry import METRICS
from bench.evaluation.ties import BOUNDS, TieGroups, check_mode

DEFAULT_KS = (5, 10, 20, 50, 100)

#: per-user columns of :func:`list_metrics` that describe ties rather than measure the ranking:
#: ``ties:pessimistic/ndcg@20``, ``ties:optimistic/ndcg@20``, ``ties:cut@20`` (1 where the cut-off
#: splits a tie group)
TIE_PREFIX = "ties:"

__all__ = ["DEFAULT_KS", "METRICS", "TIE_PREFIX", "HitStats", "RankedList", "ideal_dcg", "list_metrics", "metric_key",
           "metric_names", "metrics_from_hits", "rank_items", "ranked_list", "ranking_metrics", "ranks_within",
           "tie_groups", "tie_rows", "cut_in_tie"]

#: (rows (R,), their boundary scores (R,)) -> (items (R,), relevant items (R,)) of each row that
#: hold the boundary score, over the whole row (what a ranked list's last group continues into)
TailCounter = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


def metric_key(metric: str, k: int) -> str:
    """Canonical name, e.g. ``ndcg@20``."""
    return f"{metric}@{k}"


def metric_names() -> list[str]:
    """Registered metric names, built-ins first (recall, ndcg, precision, hit, mrr)."""
    return [name for name, _ in METRICS.items()]


def metrics_from_hits(hits: Tensor, n_relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS,
                      groups: TieGroups | None = None, ties: str = "lowest_id") -> dict[str, Tensor]:
    """Per-user metrics from the relevance of each user's ranked list.

    Args:
        hits: (B, L) bool/0-1, ``hits[b, r]`` = the item at rank r + 1 is relevant; L is
            the list length (>= max(ks), or the catalogue size if smaller).
        n_relevant: (B,) number of relevant items per user (>= 1).
        ks: cut-offs. A cut-off beyond L counts the whole list (Precision still divides by K).
        groups: the lists' tie groups (:func:`tie_groups`); None = take ``hits`` as they are.
        ties: how tied items are ordered (bench.evaluation.ties.TIE_MODES); only read with
            ``groups``. ``lowest_id`` keeps ``hits`` (lists ordered by item id within ties).
    Returns:
        ``{"ndcg@20": (B,) float64 tensor, ...}`` for every registered metric and K in ks.
    """
    if groups is not None and check_mode(ties) != "lowest_id" and groups.any:
        stats = HitStats.from_hits(groups.hits(ties), n_relevant, groups if ties == "expected" else None)
    else:
        stats = HitStats.from_hits(hits, n_relevant)
    functions = METRICS.items()
    return {metric_key(name, k): fn(stats, k) for k in ks for name, fn in functions}


def tie_rows(ranked: RankedList) -> Tensor:
    """(R,) int64 the lists that hold a tie or end inside one (two adjacent equal scores, or
    the last score shared past the list): the only ones whose metrics depend on the tie rule."""
    scores = ranked.scores
    return ((scores[:, 1:] == scores[:, :-1]).any(1) | ranked.straddles).nonzero().squeeze(1)


def tie_groups(ranked: RankedList, hits: Tensor, count_tail: TailCounter, rows: Tensor | None = None) -> TieGroups:
    """The tie groups of ranked lists (of the lists ``rows`` only, when given); ``count_tail``
    counts the rows' items that share the last listed score, for the rows whose last group
    continues past the list (it is called with row numbers of the whole ``ranked``)."""
    scores, straddles = ranked.scores, ranked.straddles
    if rows is not None:
        scores, straddles, hits = scores[rows], straddles[rows], hits[rows]
    n_rows = hits.shape[0]
    size = torch.zeros(n_rows, dtype=torch.float64, device=hits.device)
    relevant = torch.zeros_like(size)
    if straddles.any():
        local = straddles.nonzero().squeeze(1)
        tail_size, tail_relevant = count_tail(local if rows is None else rows[local], scores[local, -1])
        size[local], relevant[local] = tail_size.to(size.dtype), tail_relevant.to(size.dtype)
    return TieGroups.from_list(scores, hits, straddles, size, relevant)


def cut_in_tie(ranked: RankedList, k: int) -> Tensor:
    """(B,) bool: does a cut-off after rank ``k`` (at most the list's length) split a tie group?"""
    length = ranked.scores.shape[1]
    if k < length:
        return ranked.scores[:, k - 1] == ranked.scores[:, k]
    return ranked.straddles.clone()


def list_metrics(ranked: RankedList, hits: Tensor, n_relevant: Tensor, ks: tuple[int, ...], ties: str,
                 count_tail: TailCounter, bounds: bool = False) -> dict[str, Tensor]:
    """Per-user metrics of ranked lists under the tie rule ``ties``; with ``bounds``, also
    the :data:`TIE_PREFIX` columns: each metric with relevant items last and first inside
    every tie group (its range over all orders), and which cut-offs split a group.

    Only the lists that hold a tie are scored again under each rule; the others keep the
    values of the plain lists (any rule gives those exactly).

    Args:
        ranked: the lists (:func:`ranked_list`).
        hits: (B, L) bool relevance of the listed items.
        n_relevant: (B,) relevant items per user (>= 1).
        ks: cut-offs.
        ties: a rule of bench.evaluation.ties.TIE_MODES.
        count_tail: see :data:`TailCounter`.
    """
    check_mode(ties)
    plain = metrics_from_hits(hits, n_relevant, ks)
    # scores of trained models rarely tie, so the groups are built for the few lists that do
    rows = tie_rows(ranked)
    tied = tie_groups(ranked, hits, count_tail, rows) if rows.numel() else None

    def under(rule: str) -> dict[str, Tensor]:
        if rule == "lowest_id" or tied is None:
            return plain
        values = metrics_from_hits(hits[rows], n_relevant[rows], ks, tied, rule)
        return {key: column.index_copy(0, rows, values[key]) for key, column in plain.items()}

    out = dict(under(ties))
    if bounds:
        for bound in BOUNDS:
            out.update({f"{TIE_PREFIX}{bound}/{key}": v for key, v in under(bound).items()})
        length = hits.shape[1]
        for k in ks:
            if length:
                out[f"{TIE_PREFIX}cut@{k}"] = cut_in_tie(ranked, min(k, length)).to(torch.float64)
    return out


def ranking_metrics(scores: Tensor, relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS,
                    ties: str = "expected") -> dict[str, Tensor]:
    """Per-user metrics from a full score matrix (functional form).

    Args:
        scores: (B, I) scores, with excluded (e.g. training) items already set to -inf.
        relevant: (B, I) bool, the held-out items; every row needs one True.
        ks: cut-offs.
        ties: how tied items are ordered (bench.evaluation.ties.TIE_MODES).
    Returns:
        dict of (B,) float64 tensors, see :func:`metrics_from_hits`.
    """
    ranked = ranked_list(scores, max(ks))
    hits = relevant.gather(1, ranked.items)

    def count_tail(rows: Tensor, boundary: Tensor) -> tuple[Tensor, Tensor]:
        same = scores[rows] == boundary.unsqueeze(1)
        return same.sum(1), (same & relevant[rows]).sum(1)

    return list_metrics(ranked, hits, relevant.sum(1), ks, ties, count_tail)
