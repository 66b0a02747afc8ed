"""Graded-relevance metrics of padded candidate lists, for learning to rank
(docs/evaluation.md#learning-to-rank-graded-metrics).

Each query ranks its own candidate documents, whose labels are integer grades (0..2 on
MQ2008 / OHSUMED, 0..4 on MSLR). With gain g(rel) and discount 1 / log2(1 + rank):

- ``ndcg@K`` = DCG@K / IDCG@K, where IDCG@K ranks the query's own documents by gain; a query
  with no document of grade > 0 (IDCG = 0) gets 0, and :func:`has_relevant` tells the caller
  which queries those are.
- ``precision@K`` = (documents of grade > 0 in the top K) / K, K even when the list is shorter
  (trec_eval's ``P_K``).

Ties follow ``eval.ties`` (:data:`bench.evaluation.ties.TIE_MODES`); documents with equal
scores form a tie group, and the tie columns are those of the binary metrics, so
``split_tie_columns`` and ``tie_summary`` read them unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from bench.errors import ConfigError, DataError, TrainingDiverged
from bench.evaluation.metrics import TIE_PREFIX, metric_key
from bench.evaluation.ties import BOUNDS, check_mode

#: ``exponential``: g = 2^rel - 1 (the LETOR / MSLR convention); ``linear``: g = rel (trec_eval's
#: ``ndcg_cut`` on raw grades)
GAINS = ("exponential", "linear")

__all__ = ["GAINS", "graded_metrics", "has_relevant"]


def has_relevant(labels: Tensor, mask: Tensor) -> Tensor:
    """(Q,) bool: the query has a real document of grade > 0, i.e. IDCG > 0 and NDCG is defined.

    Args:
        labels: (Q, L) integer grades.
        mask: (Q, L) bool, True = a real document (padding is ignored).
    """
    return ((labels > 0) & mask).any(1)


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(ks)
    if not out:
        raise ConfigError("eval.ks is empty; give at least one cut-off, e.g. eval.ks=[1,3,5,10]")
    for k in out:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"eval.ks holds {k!r}; every cut-off must be an integer >= 1")
    return out


def _check_inputs(scores: Tensor, labels: Tensor, mask: Tensor) -> None:
    if scores.dim() != 2 or labels.shape != scores.shape or mask.shape != scores.shape:
        raise ValueError(f"scores {tuple(scores.shape)}, labels {tuple(labels.shape)} and mask {tuple(mask.shape)} "
                         "must all be (queries, list length); pad every query's list to the same length")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask is {mask.dtype}; pass a bool tensor (True = a real document)")
    if labels.dtype.is_floating_point or labels.dtype.is_complex:
        raise ValueError(f"labels are {labels.dtype}; relevance grades are integers, pass labels.long()")
    if not scores.dtype.is_floating_point:
        raise ValueError(f"scores are {scores.dtype}; pass floating-point scores")
    negative = int(((labels < 0) & mask).sum())
    if negative:
        raise DataError(f"{negative} real documents have a negative relevance grade; grades are integers >= 0")
    if bool((torch.isnan(scores) & mask).any()):
        raise TrainingDiverged("the model produced NaN scores; lower the learning rate or check the loss")


def _gain(labels: Tensor, gain: str) -> Tensor:
    grades = labels.to(torch.float64)
    return torch.exp2(grades) - 1.0 if gain == "exponential" else grades


def _segment_mean(values: Tensor, group: Tensor, size: Tensor) -> Tensor:
    """Each position's value replaced by its group's mean (groups: ids along dim 1)."""
    return torch.zeros_like(values).scatter_add_(1, group, values).gather(1, group) / size


@torch.no_grad()
def graded_metrics(scores: Tensor, labels: Tensor, mask: Tensor, ks: Sequence[int], ties: str = "expected",
                   gain: str = "exponential") -> dict[str, Tensor]:
    """Per-query NDCG@K and Precision@K of padded candidate lists, with their tie columns.

    Args:
        scores: (Q, L) float model scores; higher ranks first.
        labels: (Q, L) integer relevance grades, >= 0 on real documents.
        mask: (Q, L) bool, True = a real document; padding may hold any score and label.
        ks: cut-offs (>= 1); one beyond a query's list counts the whole list.
        ties: how documents with equal scores are ordered (bench.evaluation.ties.TIE_MODES):
            ``expected`` (exact mean over all orders of each tie group), ``optimistic`` /
            ``pessimistic`` (higher / lower gains first), ``lowest_id`` (lower column first).
        gain: ``exponential`` (2^rel - 1) or ``linear`` (rel).
    Returns:
        ``{"ndcg@K": (Q,) float64, "precision@K": ..., for K in ks}`` under ``ties``, then
        ``"ties:pessimistic/ndcg@K"``, ``"ties:optimistic/ndcg@K"`` (the range over all orders
        of tied documents; likewise precision) and ``"ties:cut@K"`` (1.0 where the K-th and
        (K+1)-th documents tie). Queries with IDCG = 0 get NDCG 0 (see :func:`has_relevant`).
    """
    check_mode(ties)
    if gain not in GAINS:
        raise ConfigError(f"task.gain={gain} is not a gain; use one of {', '.join(GAINS)} (2^rel - 1 or rel)")
    ks = _check_ks(ks)
    _check_inputs(scores, labels, mask)
    if scores.shape[1] == 0:  # one padding column keeps every cut-off index valid
        scores, labels, mask = (torch.zeros(scores.shape[0], 1, dtype=t.dtype, device=t.device)
                                for t in (scores, labels, mask))
    n_queries, length = scores.shape
    device = scores.device

    # rank by score descending, ties by column (stable sort); padding holds NaN, which an
    # ascending torch.sort puts after every number (-inf included) on CPU and CUDA alike
    key = torch.where(mask, -scores, torch.full_like(scores, float("nan")))
    order = torch.sort(key, dim=1, stable=True).indices
    ranked_key = key.gather(1, order)
    grades = torch.where(mask, labels, torch.zeros_like(labels)).to(torch.int64)
    gains = _gain(grades, gain)
    ranked_grades = grades.gather(1, order)
    ranked_gains = gains.gather(1, order)
    ranked_hits = (ranked_grades > 0).to(torch.float64)

    discount = 1.0 / torch.log2(torch.arange(2, length + 2, dtype=torch.float64, device=device))
    ideal = torch.cumsum(torch.sort(gains, dim=1, descending=True).values * discount, 1)
    if not bool(torch.isfinite(ideal[:, -1]).all()):
        raise DataError(f"grades up to {int(grades.max())} overflow the gain 2^rel - 1; use task.gain=linear "
                        "or map the grades to a small range")
    cut = [min(k, length) - 1 for k in ks]
    idcg = {k: ideal[:, c] for k, c in zip(ks, cut)}

    # tie groups: runs of real documents with equal scores (NaN != NaN: each padding place is alone)
    new = torch.ones(n_queries, length, dtype=torch.bool, device=device)
    new[:, 1:] = ranked_key[:, 1:] != ranked_key[:, :-1]
    group = torch.cumsum(new, 1) - 1
    tied = torch.zeros_like(new)  # the position's group goes on to the next place
    tied[:, :-1] = ~new[:, 1:]

    def metrics(position_gains: Tensor, position_hits: Tensor) -> dict[str, Tensor]:
        dcg = torch.cumsum(position_gains * discount, 1)
        hits = torch.cumsum(position_hits, 1)
        out = {}
        for k, c in zip(ks, cut):
            out[metric_key("ndcg", k)] = torch.where(idcg[k] > 0, dcg[:, c] / idcg[k], torch.zeros_like(idcg[k]))
            out[metric_key("precision", k)] = hits[:, c] / k
        return out

    cache: dict[str, dict[str, Tensor]] = {}

    def under(rule: str) -> dict[str, Tensor]:
        if rule in cache:
            return cache[rule]
        if rule == "lowest_id":
            cache[rule] = metrics(ranked_gains, ranked_hits)
            return cache[rule]
        pos = torch.arange(length, device=device).expand(n_queries, length)
        start = torch.cummax(torch.where(new, pos, torch.zeros_like(pos)), 1).values
        size = torch.zeros_like(ranked_gains).scatter_add_(1, group, torch.ones_like(ranked_gains)).gather(1, group)
        # DCG and the hit count are linear in the gains: every place of a group holding the
        # group's mean gain gives their exact mean over the group's orders
        cache["expected"] = metrics(_segment_mean(ranked_gains, group, size), _segment_mean(ranked_hits, group, size))
        # both gains rise with the grade, so sorting each group by grade puts the higher gains and
        # the relevant documents first; equal keys hold equal grades, so the sort need not be stable
        top = int(ranked_grades.max())
        best = torch.sort(group * (top + 1) + (top - ranked_grades), dim=1).indices
        cache["optimistic"] = metrics(ranked_gains.gather(1, best), ranked_hits.gather(1, best))
        # the pessimistic order is the optimistic one read backwards inside each group
        worst = best.gather(1, 2 * start + size.to(torch.int64) - 1 - pos)
        cache["pessimistic"] = metrics(ranked_gains.gather(1, worst), ranked_hits.gather(1, worst))
        return cache[rule]

    result = dict(under(ties))
    for bound in BOUNDS:
        result.update({f"{TIE_PREFIX}{bound}/{name}": v for name, v in under(bound).items()})
    for k, c in zip(ks, cut):
        result[f"{TIE_PREFIX}cut@{k}"] = tied[:, c].to(torch.float64)
    return result
