"""The sampled "1 positive + N negatives" test protocol of older papers, reported beside the
full ranking and never instead of it.

SASRec (Kang and McAuley, ICDM 2018) and BERT4Rec rank each test item among 100 randomly drawn
items the user never interacted with and report Hit@10 and NDCG@10 of that short list. Such
sampled metrics are biased estimates of the full-ranking ones and can even reverse the order of
two models (Krichene and Rendle, KDD 2020); they are computed here only to compare with those
papers (``eval.sampled_negatives``, test time only).

**The sample.** Every evaluated user u gets ``min(N, a_u)`` distinct items, drawn uniformly
without replacement from the ``a_u`` items outside all its interactions (training, validation
and test items, and whatever else the evaluator masks, e.g. a node itself); a user with fewer
than N such items gets all of them. The draw is made once, when the test evaluator is built,
with one generator seeded by ``eval.sampled_seed``, for all evaluated users in id order: it
depends neither on the evaluation chunks nor on the number of devices, and the run's seed does
not enter it (the seeds of a configuration share the negatives, their interactions being the
same). SASRec's code draws with replacement, so one list may hold an item twice; here it never
does.

**The rank.** With ``x`` the score of a test item v of u and ``s`` u's masked score row, over
u's sampled negatives ``S_u``:

.. math::

    G = \\#\\{w \\in S_u : s_w > x\\},\\quad Q = \\#\\{w \\in S_u : s_w = x\\},\\quad
    L = \\#\\{w \\in S_u : s_w = x,\\ w < v\\}

(``Q = L = 0`` when ``x = -inf``), and the rank under ``eval.ties`` is that of the per-edge
protocol (:mod:`bench.evaluation.per_edge`): ``1 + G`` plus nothing (optimistic), ``Q``
(pessimistic), ``L`` (lowest_id), or every place ``1 + G .. 1 + G + Q`` equally likely
(expected, exact means). Per test item: ``mrr`` (1 / rank; the list is short, so no cut-off),
``hit@K`` ([rank <= K]) and ``ndcg@K`` ([rank <= K] / log2(1 + rank): one relevant item, so
IDCG = 1). Under ``expected``, NDCG@K is the mean of the discount over the Q + 1 places:

.. math::

    E[\\mathrm{NDCG@}K] = \\frac{D(\\min(G+Q+1, K)) - D(\\min(G, K))}{Q+1},\\qquad
    D(m) = \\sum_{r=1}^{m} \\frac{1}{\\log_2(r+1)}.

A user with several test items ranks each against the negatives alone (its other test items
are no candidates: they are not in ``S_u``) and takes the mean over them; the reported values
are means over users, as the full-ranking metrics are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bench.datasets.base import CSR
from bench.errors import ConfigError
from bench.evaluation.per_edge import FilteredRanks, edge_metrics
from bench.evaluation.ties import check_mode

#: per-user columns of the sampled protocol: ``sampled:drawn`` (negatives drawn for the user)
#: and ``sampled:mrr``, ``sampled:hit@K``, ``sampled:ndcg@K`` (means over its test items)
SAMPLED_PREFIX = "sampled:"
DRAWN = "drawn"
#: the entries of :func:`sampled_summary` that describe the protocol rather than measure a model
SUMMARY_INFO = ("negatives", "seed", "protocol", "users", "short_users")

__all__ = ["DRAWN", "SAMPLED_PREFIX", "SUMMARY_INFO", "check_sampled", "draw_negatives", "format_sampled",
           "protocol", "sampled_columns", "sampled_metrics", "sampled_summary"]


def protocol(n: int) -> str:
    """The protocol's name as results.json records it."""
    return f"1 positive + {n} sampled negatives (biased: Krichene & Rendle, KDD 2020)"


def check_sampled(n: Any, seed: Any = 0) -> int | None:
    """``n`` as an int (None: off), or a one-line :class:`ConfigError` for a count below 1 or a bad seed."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"eval.sampled_negatives={n} is out of range: use null (off) or an integer >= 1, e.g. 100")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ConfigError(f"eval.sampled_seed={seed} is out of range: use an integer in [0, 2^63)")
    return int(n)


#: random numbers drawn at once while sampling (a block of users at a time: bounded memory)
_BLOCK = 1 << 22


@torch.no_grad()
def draw_negatives(users: Tensor, seen: Sequence[CSR], n: int, seed: int = 0) -> Tensor:
    """``min(n, a_u)`` distinct items per user, uniform over the ``a_u`` items in none of ``seen``.

    Positions in ``[0, a_u)`` are drawn first (:func:`_positions`), then position p is mapped
    to the p-th item outside the user's ``seen`` set.

    Args:
        users: (U,) int64 user ids, in the order of the rows returned.
        seen: item sets to leave out (each with n_users rows and the same n_items; at least one).
        n: negatives per user (>= 1).
        seed: the seed of the one generator that draws every row, in order.
    Returns:
        (U, n) int64 item ids, each row ascending, padded with -1 after a user's ``a_u`` items
        when ``a_u < n``.
    """
    n_items = seen[0].n_items
    users = users.cpu().to(torch.int64)
    n_users = users.numel()
    # each user's seen items, sorted and without repeats (the sets may overlap)
    keys = torch.unique(torch.cat([torch.zeros(0, dtype=torch.int64)]
                                  + [r * n_items + i for r, i in (c.on("cpu").gather_rows(users) for c in seen)]))
    rows = keys // n_items
    counts = torch.bincount(rows, minlength=n_users)
    chosen = _positions(n_items - counts, n, torch.Generator().manual_seed(int(seed)))
    # position p -> the p-th unseen item: p plus the seen items f_k with f_k - k <= p, where k is
    # f_k's index in its row (f_k - k unseen items lie below f_k, and that count never decreases)
    starts = torch.cumsum(counts, 0) - counts
    gaps = rows * n_items + (keys % n_items - (torch.arange(keys.numel()) - starts[rows]))  # sorted
    valid = chosen >= 0
    query = torch.arange(n_users).unsqueeze(1) * n_items + chosen.clamp(min=0)
    below = torch.searchsorted(gaps, query, right=True) - starts.unsqueeze(1)
    return torch.where(valid, chosen + below, -1)  # a monotone map: rows stay ascending


def _positions(allowed: Tensor, n: int, gen: torch.Generator) -> Tensor:
    """A uniform ``min(n, a)``-subset of ``[0, a)`` for every entry a of ``allowed``.

    Most rows (a >= 2n) take the first n distinct values of n + n/4 + 16 uniform draws with
    replacement: the rare row whose draws repeat too often to give n values falls through to the
    second way (the draws are exchangeable over ``[0, a)``, so the subset is uniform given either
    outcome). The other rows take the n smallest of a uniform random keys, one per position.

    Returns:
        (R, n) int64 positions, each row ascending, -1 after its ``min(n, a)`` values.
    """
    n_rows = allowed.numel()
    take = allowed.clamp(max=n)
    out = torch.full((n_rows, n), -1, dtype=torch.int64)
    width = n + n // 4 + 16
    big = torch.iinfo(torch.int64).max
    for block in (allowed >= 2 * n).nonzero().squeeze(1).split(max(1, _BLOCK // width)):
        a = allowed[block].unsqueeze(1)
        draws = torch.minimum((torch.rand(block.numel(), width, generator=gen, dtype=torch.float64) * a).long(),
                              a - 1)
        ordered, order = draws.sort(dim=1, stable=True)  # equal values keep the order they were drawn in
        repeat = torch.zeros_like(draws, dtype=torch.bool)
        repeat.scatter_(1, order[:, 1:], ordered[:, 1:] == ordered[:, :-1])
        first = ~repeat & (torch.cumsum(~repeat, 1) <= n)
        full = torch.count_nonzero(first, dim=1) == n
        out[block[full]] = torch.where(first, draws, big).sort(1).values[:, :n][full]
    rest = ((out[:, 0] < 0) & (take > 0)).nonzero().squeeze(1)
    if rest.numel():
        width = int(allowed[rest].max())
        cols = torch.arange(width)
        for block in rest.split(max(1, _BLOCK // width)):
            a = allowed[block].unsqueeze(1)
            keys = torch.rand(block.numel(), width, generator=gen, dtype=torch.float64).masked_fill_(cols >= a, 2.0)
            picked = keys.topk(min(n, width), dim=1, largest=False).indices
            picked = torch.where(torch.arange(picked.shape[1]) < take[block].unsqueeze(1),
                                 picked, big).sort(1).values
            out[block, :picked.shape[1]] = picked.masked_fill_(picked == big, -1)
    return out


def _ndcg(g: Tensor, q: Tensor, share: Tensor | None, k: int) -> Tensor:
    """(E,) float64 NDCG@k of one relevant item: its rank 1 + G + share, or (share None) the
    exact mean over the places 1 + G .. 1 + G + Q."""
    def direct(rank: Tensor) -> Tensor:
        return torch.where(rank <= k, 1.0 / torch.log2(1.0 + rank), torch.zeros_like(rank))

    if share is not None:
        return direct(1.0 + g + share)
    cum = torch.zeros(k + 1, dtype=torch.float64, device=g.device)
    cum[1:] = torch.cumsum(1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64, device=g.device)), 0)
    top = (g + q + 1).clamp(max=k).to(torch.int64)
    bottom = g.clamp(max=k).to(torch.int64)
    mean = (cum[top] - cum[bottom]) / (q + 1)
    return torch.where(q > 0, mean, direct(1.0 + g))  # untied: to the bit what every other rule gives


def sampled_columns(scores: Tensor, negatives: Tensor, rows: Tensor, items: Tensor, ks: Sequence[int],
                    ties: str = "expected") -> dict[str, Tensor]:
    """The :data:`SAMPLED_PREFIX` columns of one evaluation chunk.

    Args:
        scores: (B, I) masked scores (masked items at -inf), no NaN.
        negatives: (B, N) int64 sampled items of each row (:func:`draw_negatives`; -1 pads).
        rows: (E,) int64 row of each test pair; every row holds at least one.
        items: (E,) int64 its test item.
        ks: cut-offs.
        ties: a rule of bench.evaluation.ties.TIE_MODES.
    Returns:
        ``{"sampled:drawn": (B,) float64 negatives per row, "sampled:mrr": (B,) float64,
        "sampled:hit@K": ..., "sampled:ndcg@K": ...}``: each metric the mean over the row's test items.
    """
    check_mode(ties)
    valid = negatives >= 0
    neg_scores = scores.gather(1, negatives.clamp(min=0))
    x = scores[rows, items].unsqueeze(1)
    pair_valid, pair_scores = valid[rows], neg_scores[rows]
    finite = x.squeeze(1) > float("-inf")
    same = (pair_scores == x) & pair_valid
    g = torch.count_nonzero((pair_scores > x) & pair_valid, dim=1)
    q = torch.where(finite, torch.count_nonzero(same, dim=1), 0)
    lower = torch.where(finite, torch.count_nonzero(same & (negatives[rows] < items.unsqueeze(1)), dim=1), 0)
    per_pair = edge_metrics(FilteredRanks(g, q, lower), ks, ties)
    g64, q64 = g.to(torch.float64), q.to(torch.float64)
    share = {"expected": None, "optimistic": torch.zeros_like(q64), "pessimistic": q64,
             "lowest_id": lower.to(torch.float64)}[ties]
    for k in ks:
        per_pair[f"ndcg@{k}"] = _ndcg(g64, q64, share, int(k))
    n_rows = scores.shape[0]
    zeros = torch.zeros(n_rows, dtype=torch.float64, device=scores.device)
    per_row = zeros.index_add(0, rows, torch.ones_like(g64)).clamp(min=1)
    out = {SAMPLED_PREFIX + DRAWN: valid.sum(1).to(torch.float64)}
    order = ["mrr", *(f"hit@{k}" for k in ks), *(f"ndcg@{k}" for k in ks)]
    out.update({SAMPLED_PREFIX + key: zeros.index_add(0, rows, per_pair[key]) / per_row for key in order})
    return out


def sampled_summary(per_user: dict[str, Tensor], n: int | None, seed: int = 0) -> dict[str, Any]:
    """results.json's ``sampled``: the protocol and each metric's mean over users; ``{}`` when
    the evaluation has no :data:`SAMPLED_PREFIX` columns.

    Returns:
        ``{"negatives": N, "seed": s, "protocol": ..., "users": U, "short_users": users with
        fewer than N negatives, "mrr": ..., "hit@10": ..., "ndcg@10": ..., ...}``.
    """
    columns = {k[len(SAMPLED_PREFIX):]: v for k, v in per_user.items() if k.startswith(SAMPLED_PREFIX)}
    if DRAWN not in columns or n is None:
        return {}
    drawn = columns.pop(DRAWN)
    return {"negatives": int(n), "seed": int(seed), "protocol": protocol(int(n)), "users": int(drawn.numel()),
            "short_users": int((drawn < n).sum()), **{k: float(v.mean()) for k, v in columns.items()}}


def sampled_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The measured entries of a :func:`sampled_summary` (``{"mrr": ..., "hit@10": ...}``)."""
    return {k: float(v) for k, v in summary.items()
            if k not in SUMMARY_INFO and isinstance(v, int | float) and not isinstance(v, bool)}


def format_sampled(summary: dict[str, Any], ks: Sequence[int] = (10,)) -> str:
    """One line for the console: the sampled Hit@K and NDCG@K at ``ks`` (those present) and MRR,
    labelled biased."""
    values = sampled_metrics(summary)
    shown = [f"{m}@{k}" for k in ks for m in ("hit", "ndcg") if f"{m}@{k}" in values] + ["mrr"]
    short = summary.get("short_users", 0)
    note = f"; {short} users had fewer unseen items and ranked among all of them" if short else ""
    return (f"Sampled metrics, biased: each test item ranked among its user's {summary.get('negatives')} sampled "
            f"negatives (Krichene & Rendle, KDD 2020), not comparable with the full ranking above{note}: "
            + " ".join(f"{key}={values[key]:.4f}" for key in shown if key in values and math.isfinite(values[key])))
