"""Learning-to-rank losses on score lists: ListNet (Cao et al., ICML 2007), ListMLE (Xia et al.,
ICML 2008; top-k form: Xia et al., NIPS 2009) and RankNet (Burges et al., ICML 2005).

The functional forms take any rows of scores with graded labels and a padding mask, so a
learning-to-rank task can call them directly; the registered losses build each pair's sampled
list ``[positive | negatives]`` (labels 1, 0, ..., 0) and call them.

Conventions shared by the three functions:

- ``scores`` (B, L) float, ``labels`` (B, L) float graded relevance >= 0 (not checked: a check
  would synchronise the GPU), ``mask`` (B, L) bool, False for padding or items not in the list
  (their scores may be anything, -inf included: they get neither value nor gradient).
- They return :class:`RowLosses`: the (B,) per-list losses and a (B,) bool ``counted``. A list
  has something to learn only when its listed labels are not all equal (which needs two
  listed items and, labels being >= 0, one relevant item); the others give exactly 0 with a
  zero (never NaN) gradient and ``counted`` False. ``RowLosses.mean()`` averages over the
  counted lists; the recommendation losses instead average over all P pairs, as every loss of
  the zoo does (a pair whose negatives are all masked is rare and counts as 0).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, positive, row_mean
from bench.losses.registry import LOSSES

TARGETS = ("linear", "softmax")
POSITIONS = ("positives_only", "all")
TIES = ("random", "stable")
#: RankNet's default cap on the (rows, L, L) pair tensors of one chunk (elements)
PAIR_CHUNK = 1 << 24


class RowLosses(NamedTuple):
    """Per-list losses of a batch of B lists.

    Attributes:
        loss: (B,) the loss of each list; 0 where ``counted`` is False.
        counted: (B,) bool, True for lists whose listed labels are not all equal.
    """

    loss: Tensor
    counted: Tensor

    def mean(self) -> Tensor:
        """Scalar mean over the counted lists (0 when none is)."""
        return self.loss.sum() / self.counted.sum().clamp(min=1)


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _prepare(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Labels in the scores' dtype (integer grades welcome), the (B, L) listed mask, (B,) counted."""
    labels = labels.to(scores.dtype)
    listed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    return labels, listed, counted_lists(labels, listed)


def counted_lists(labels: Tensor, listed: Tensor) -> Tensor:
    """(B,) bool: the listed labels of the row are not all equal (something to learn)."""
    top = labels.masked_fill(~listed, float("-inf")).amax(1)
    bottom = labels.masked_fill(~listed, float("inf")).amin(1)
    return top > bottom


def listnet(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, tau: float = 1.0,
            target: str = "linear") -> RowLosses:
    r"""ListNet with top-one probabilities: the cross-entropy between the target distribution
    and :math:`P_s(j) = \mathrm{softmax}_j(s / \tau)` over each list's listed items,
    :math:`-\sum_j P_y(j) \log P_s(j)`.

    Args:
        scores: (B, L) scores; labels: (B, L) graded relevance >= 0; mask: (B, L) bool or None.
        tau: temperature on the scores (> 0); 1 is the paper.
        target: "linear", :math:`P_y(j) = y_j / \sum_k y_k` (default: with implicit feedback
            the target is uniform over the relevant items, so one relevant item among N gets
            mass 1 and the loss is the softmax cross-entropy of that item), or "softmax",
            :math:`P_y = \mathrm{softmax}(y)` (the paper; with binary labels one positive among
            N = 100 negatives gets only e / (e + 100) = 0.026 of the mass).
    Returns:
        :class:`RowLosses`, losses in nats.
    """
    positive("tau", tau)
    _choice("target", target, TARGETS)
    labels, listed, counted = _prepare(scores, labels, mask)
    off = ~listed
    # lists with nothing to learn may have no listed item; zeroing them keeps log_softmax finite
    logits = (scores / tau).masked_fill(off, float("-inf")).masked_fill(~counted[:, None], 0.0)
    log_p = F.log_softmax(logits, dim=1).masked_fill(off, 0.0)
    if target == "softmax":
        weights = torch.softmax(labels.masked_fill(off, float("-inf")).masked_fill(~counted[:, None], 0.0), dim=1)
        weights = weights.masked_fill(off, 0.0)
    else:
        kept = labels.masked_fill(off, 0.0)
        weights = kept / kept.sum(1, keepdim=True).clamp(min=torch.finfo(kept.dtype).tiny)
    loss = -(weights * log_p).sum(1)
    return RowLosses(torch.where(counted, loss, torch.zeros_like(loss)), counted)


def label_order(labels: Tensor, listed: Tensor, ties: str = "random",
                generator: torch.Generator | None = None) -> Tensor:
    """(B, L) column indices sorting each row by label, highest first, unlisted items last.

    ``ties="random"`` breaks ties among equal labels by a uniform random permutation drawn
    from ``generator`` (the global generator when None; deterministic given its state);
    ``"stable"`` keeps their input order (for lists whose order is already random, such as
    sampled negatives).
    """
    key = labels.masked_fill(~listed, float("-inf"))
    if ties == "stable":
        return key.sort(dim=1, descending=True, stable=True).indices
    device = key.device if generator is None else generator.device
    shuffle = torch.rand(key.shape, generator=generator, device=device).to(key.device).argsort(1)
    order = key.gather(1, shuffle).sort(dim=1, descending=True, stable=True).indices
    return shuffle.gather(1, order)


def listmle(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, tau: float = 1.0,
            positions: str = "positives_only", ties: str = "random",
            generator: torch.Generator | None = None, presorted: bool = False) -> RowLosses:
    r"""ListMLE: the negative Plackett-Luce log-likelihood of the label-sorted permutation
    :math:`\pi` of each list, :math:`\sum_{k} [\log \sum_{m \ge k} e^{s_{\pi(m)}/\tau} - s_{\pi(k)}/\tau]`,
    the inner sum over the listed items at or below position k.

    Args:
        scores: (B, L) scores; labels: (B, L) graded relevance >= 0; mask: (B, L) bool or None.
        tau: temperature on the scores (> 0); 1 is the paper.
        positions: which positions k are summed. "positives_only" (default): those of relevant
            items (label > 0) only, the top-k ListMLE of Xia et al. (NIPS 2009) with k the
            number of relevant items; the order among non-relevant items, which with implicit
            feedback is noise, then plays no part. With one relevant item this is the softmax
            cross-entropy of that item over the list. "all": every listed position (the ICML
            2008 paper; allRank).
        ties: "random" or "stable" (see :func:`label_order`).
        generator: source of the random tie-breaking.
        presorted: the listed items of every row are already in the order to score (labels
            non-increasing; unlisted columns may sit anywhere, as they take no part): skips the
            sort, and ``ties`` and ``generator`` are unused. Not checked.
    Returns:
        :class:`RowLosses`, losses in nats (a sum over positions, not a mean).
    """
    positive("tau", tau)
    _choice("positions", positions, POSITIONS)
    _choice("ties", ties, TIES)
    labels, listed, counted = _prepare(scores, labels, mask)
    # a finite fill, unlike -inf, keeps the gradient free of NaN; exp of it is exactly 0, so an
    # unlisted column adds nothing to any suffix sum wherever it sits
    s = (scores / tau).masked_fill(~listed, torch.finfo(scores.dtype).min)
    if not presorted:
        order = label_order(labels, listed, ties, generator)
        s, labels, listed = s.gather(1, order), labels.gather(1, order), listed.gather(1, order)
    summed = listed & counted[:, None]
    if positions == "positives_only":
        summed = summed & (labels > 0)
    terms = suffix_logsumexp(s, summed) - s
    return RowLosses(torch.where(summed, terms, torch.zeros_like(terms)).sum(1), counted)


def suffix_logsumexp(x: Tensor, needed: Tensor) -> Tensor:
    r"""(B, L) :math:`\log \sum_{m \ge k} e^{x_m}` along each row of finite ``x`` (B, L), exact at
    the positions ``needed`` (B, L) bool.

    A reversed cumulative sum of ``exp(x - row max)``, ~10x faster than ``torch.logcumsumexp``
    with its gradient on CPU. It is exact where every needed term is a normal float (the sum
    then holds at least that term); when one is not (a needed score more than ~87 below its
    row's maximum in float32, ~708 in float64) the whole batch falls back to logcumsumexp.
    """
    top = x.detach().amax(1, keepdim=True)
    shifted = x - top
    if bool((needed & (shifted < math.log(torch.finfo(x.dtype).tiny))).any()):
        return torch.logcumsumexp(x.flip(1), dim=1).flip(1)
    sums = shifted.exp().flip(1).cumsum(1).flip(1)
    # suffixes that underflow to 0 are never needed; the clamp keeps log's gradient there at 0, not NaN
    return torch.log(sums.clamp(min=torch.finfo(x.dtype).tiny)) + top


def _ranknet_block(scaled: Tensor, high: Tensor, low: Tensor, weighted: bool) -> Tensor:
    """(b,) summed pair terms of b rows from (b, L, L) pair tensors; ``scaled`` = sigma * scores,
    ``high`` / ``low`` the labels with unlisted items at -inf / +inf, so that
    ``high_i > low_j`` holds exactly for the pairs of listed items with y_i > y_j."""
    terms = F.softplus(scaled[:, None, :] - scaled[:, :, None])  # [i, j]: softplus(-sigma (s_i - s_j))
    if weighted:  # y_i - y_j on the pairs, <= 0 or -inf elsewhere
        weight = (high[:, :, None] - low[:, None, :]).clamp(min=0)
        return (weight * terms).sum((1, 2))
    return torch.where(high[:, :, None] > low[:, None, :], terms, torch.zeros_like(terms)).sum((1, 2))


def pair_counts(labels: Tensor, listed: Tensor) -> Tensor:
    """(B,) number of pairs of listed items with y_i > y_j, by sorting (no (B, L, L) tensor)."""
    low = labels.masked_fill(~listed, float("inf")).sort(dim=1).values
    below = torch.searchsorted(low, labels.masked_fill(~listed, float("-inf")).contiguous())  # #{j: y_j < y_i}
    return torch.where(listed, below, torch.zeros_like(below)).sum(1)


def ranknet(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, sigma: float = 1.0,
            weighted: bool = False, chunk: int = PAIR_CHUNK) -> RowLosses:
    r"""RankNet: for every pair of listed items with :math:`y_i > y_j`,
    :math:`\mathrm{softplus}(-\sigma (s_i - s_j)) = -\log \sigma_{\mathrm{sig}}(\sigma (s_i - s_j))`,
    times :math:`|y_i - y_j|` when ``weighted``, averaged over the list's pairs (the divisor is
    the number of pairs, weighted or not).

    Memory: the pairs are (rows, L, L) tensors built by broadcasting, about four of them
    (float and bool), for ``chunk // L**2`` rows at a time (at least one row). With gradient
    and more than one chunk each chunk is checkpointed, so backward keeps only the inputs and
    rebuilds one chunk at a time: peak memory ~ 4 x ``chunk`` elements whatever B is
    (default 2^24 elements: ~200 MiB in float32; B = 1024, L = 1000 runs as 64 chunks of 16 rows).

    Args:
        scores: (B, L) scores; labels: (B, L) graded relevance >= 0; mask: (B, L) bool or None.
        sigma: slope of the pairwise sigmoid (> 0); 1 is usual.
        weighted: weight each pair by |y_i - y_j| (allRank's ``weight_by_diff``).
        chunk: most pair elements built at once (>= 1).
    Returns:
        :class:`RowLosses`, losses in nats.
    """
    positive("sigma", sigma)
    if chunk < 1:
        raise ConfigError(f"chunk must be >= 1, got {chunk}")
    labels, listed, counted = _prepare(scores, labels, mask)
    # unlisted scores may be -inf: zero them so that no pair term is inf - inf
    scaled = sigma * scores.masked_fill(~listed, 0.0)
    high, low = labels.masked_fill(~listed, float("-inf")), labels.masked_fill(~listed, float("inf"))
    n_rows, length = scores.shape
    rows = max(1, chunk // max(1, length * length))
    if rows >= n_rows:
        total = _ranknet_block(scaled, high, low, weighted)
    else:
        keep = torch.is_grad_enabled() and scaled.requires_grad
        parts = []
        for start in range(0, n_rows, rows):
            part = (scaled[start:start + rows], high[start:start + rows], low[start:start + rows])
            if keep:
                parts.append(checkpoint(_ranknet_block, *part, weighted, use_reentrant=False))
            else:
                parts.append(_ranknet_block(*part, weighted))
        total = torch.cat(parts)
    loss = total / pair_counts(labels, listed).clamp(min=1).to(total.dtype)
    return RowLosses(torch.where(counted, loss, torch.zeros_like(loss)), counted)


def sampled_list(batch: LossBatch) -> tuple[Tensor, Tensor, Tensor | None]:
    """The pairs' lists ``[positive | negatives]``: scores (P, 1 + N), labels 1, 0, ..., 0 in the
    scores' dtype, and the mask (None with per-pair negatives)."""
    pos, neg = batch.pos, batch.neg
    scores = torch.cat([pos.unsqueeze(1), neg], dim=1)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    mask = None
    if batch.neg_valid is not None:
        mask = torch.cat([torch.ones_like(batch.neg_valid[:, :1]), batch.neg_valid], dim=1)
    return scores, labels, mask


@LOSSES.register("listnet")
class ListNet(RecLoss):
    r"""ListNet on each pair's list ``[positive | negatives]`` (docs/losses.md#listnet); mean over
    the P pairs. With ``target="linear"`` the target is one-hot and the loss is
    :math:`\log(1 + \sum_j e^{(s_{uj} - s_{ui})/\tau})`, SL with the self term.

    Args:
        tau: temperature on the scores (> 0).
        target: "linear" (y / sum y) or "softmax" (softmax of the labels, the paper).
        n_negatives: N.
    """

    def __init__(self, tau: float = 0.2, target: str = "linear", n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        self.tau = positive("loss.tau", tau)
        self.target = _choice("loss.target", target, TARGETS)

    def forward(self, batch: LossBatch) -> Tensor:
        scores, labels, mask = sampled_list(batch)
        return listnet(scores, labels, mask, tau=self.tau, target=self.target).loss.mean()

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """:func:`listnet` on the graded lists, mean over the lists with two grades."""
        return listnet(scores, labels, mask, tau=self.tau, target=self.target).mean()


@LOSSES.register("listmle")
class ListMLE(RecLoss):
    r"""ListMLE on each pair's list ``[positive | negatives]`` (docs/losses.md#listmle); mean
    over the P pairs. With ``positions="positives_only"`` only the positive's position counts:
    :math:`\log(1 + \sum_j e^{(s_{uj} - s_{ui})/\tau})`, SL with the self term.

    The negatives tie (label 0); their order is the column order, which is already uniformly
    random because they are drawn independently, so no generator (and no state to checkpoint)
    is needed, and the list is already in label order (``presorted``; masked columns take no
    part wherever they are).

    Args:
        tau: temperature on the scores (> 0).
        positions: "positives_only" (top-k ListMLE) or "all" (also orders the negatives).
        n_negatives: N.
    """

    def __init__(self, tau: float = 0.2, positions: str = "positives_only", n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        self.tau = positive("loss.tau", tau)
        self.positions = _choice("loss.positions", positions, POSITIONS)

    def forward(self, batch: LossBatch) -> Tensor:
        scores, labels, mask = sampled_list(batch)
        return listmle(scores, labels, mask, tau=self.tau, positions=self.positions, presorted=True).loss.mean()

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """:func:`listmle` on the graded lists (documents of equal grade in a random order drawn
        from ``generator``), mean over the lists with two grades."""
        return listmle(scores, labels, mask, tau=self.tau, positions=self.positions, ties="random",
                       generator=generator).mean()


@LOSSES.register("ranknet")
class RankNet(RecLoss):
    r"""RankNet on each pair's list ``[positive | negatives]`` (docs/losses.md#ranknet): the pairs
    are (positive, negative j), :math:`\mathrm{softplus}(-\sigma (s_{ui} - s_{uj}))`, mean over a
    list's valid negatives, then over the P pairs. With sigma = 1 this is BPR.

    Only the positive outranks anything in these lists, so the (P, N) pairs are computed directly
    instead of the functional form's (P, 1 + N, 1 + N) (the tests check both agree).
    ``shares_negatives`` is True only with more than one negative per pair: with one, a shared
    draw would give every row of the batch the same negative (as for BPR).

    Args:
        sigma: slope (> 0).
        n_negatives: N (1, as BPR).
    """

    def __init__(self, sigma: float = 1.0, n_negatives: int = 1) -> None:
        super().__init__(n_negatives=n_negatives)
        self.sigma = positive("loss.sigma", sigma)
        self.shares_negatives = self.n_negatives > 1

    def forward(self, batch: LossBatch) -> Tensor:
        valid = batch.neg_valid
        neg = batch.neg if valid is None else batch.neg.masked_fill(~valid, 0.0)  # no -inf into softplus
        terms = F.softplus(-self.sigma * (batch.pos.unsqueeze(1) - neg))
        return row_mean(terms, valid).mean()

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """:func:`ranknet` over every pair of different grades, mean over the lists."""
        return ranknet(scores, labels, mask, sigma=self.sigma).mean()
