"""Smooth NDCG surrogates: ApproxNDCG (Qin, Liu and Li, Information Retrieval 2010) and NeuralNDCG
(Pobrotyn and Białobrzeski, arXiv 2102.07831, 2021, on NeuralSort of Grover et al., ICLR 2019).

The functional forms take any batch of padded lists with graded labels:

- gains :math:`g = 2^y - 1`, discount :math:`d(r) = 1/\\log_2(1 + r)`;
- NDCG is normalised by each list's ideal DCG@k over its valid entries;
- they return the per-list loss :math:`-\\mathrm{NDCG}` (B,) and a (B,) bool of the lists that count.
  A list without a relevant item (ideal DCG 0) gives 0 with zero gradient; the caller leaves it out of
  its mean (``loss[counted].sum() / counted.sum()``).

The registered losses apply them to each pair's sampled list [positive | negatives], labels 1, 0, ..., 0.
Docs: docs/losses.md#approxndcg and #neuralndcg.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, list_mean
from bench.losses.listwise import counted_lists
from bench.losses.registry import LOSSES

#: default element budgets of one chunk of rows: B_c * m * L for ApproxNDCG (one saved (B_c, m, L)
#: tensor), B_c * L * L for NeuralNDCG (about 2 * iterations + 4 saved (B_c, L, L) tensors)
APPROX_CHUNK = 2**24
NEURAL_CHUNK = 2**22
#: NeuralNDCG groups rows whose widths are within this factor (padded work at most its square)
WIDTH_RATIO = 2**0.5


def rank_discounts(n: int, k: int | None, like: Tensor) -> Tensor:
    """(n,) d(r) = 1/log2(1 + r) for ranks r = 1..n, 0 beyond ``k`` (None: no cut), in ``like``'s dtype."""
    r = torch.arange(1, n + 1, device=like.device, dtype=like.dtype)
    d = 1.0 / torch.log2(1.0 + r)
    return d if k is None else d.masked_fill(r > k, 0.0)


def graded_gains(labels: Tensor, valid: Tensor, like: Tensor) -> Tensor:
    """(B, L) gains 2^y - 1 of the valid entries, 0 on padding (whatever its label, e.g. -1)."""
    y = labels.to(like.dtype)
    return torch.where(valid, torch.exp2(torch.where(valid, y, 0.0)) - 1.0, 0.0)


def ideal_dcg_at(gains: Tensor, k: int | None) -> Tensor:
    """(B,) DCG@k of each row's gains sorted in decreasing order (padding holds gain 0)."""
    best = gains.sort(dim=1, descending=True).values
    return (best * rank_discounts(gains.shape[1], k, gains)).sum(1)


def _prepare(scores: Tensor, labels: Tensor, mask: Tensor | None, k: int | None
             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Scores with padding set to 0 (no -inf or NaN reaches a product), gains, validity, the ideal
    DCG@k with 1 where it is 0 (so that no 0/0 reaches the backward pass), and the rows that count."""
    if scores.dim() != 2 or labels.shape != scores.shape or (mask is not None and mask.shape != scores.shape):
        raise ValueError(f"scores, labels and mask must be (B, L) alike; got {tuple(scores.shape)}, "
                         f"{tuple(labels.shape)}, {None if mask is None else tuple(mask.shape)}")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1 or None, got {k}")
    valid = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    s = torch.where(valid, scores, 0.0)
    g = graded_gains(labels, valid, s)
    idcg = ideal_dcg_at(g, k)
    counted = idcg > 0
    return s, g, valid, torch.where(counted, idcg, 1.0), counted


def _by_rows(fn: Callable[..., Tensor], tensors: tuple[Tensor, ...], per_row: int, budget: int) -> Tensor:
    """(B,) ``fn`` over chunks of rows of at most ``budget`` elements (``per_row`` each).

    With several chunks and a gradient to compute, each chunk is checkpointed: its graph is rebuilt
    during the backward pass, so the peak memory is one chunk's graph instead of the batch's.
    """
    n_rows = tensors[0].shape[0]
    size = max(1, budget // max(per_row, 1))
    if size >= n_rows:
        return fn(*tensors)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    parts = []
    for start in range(0, n_rows, size):
        chunk = tuple(t[start:start + size] for t in tensors)
        parts.append(checkpoint(fn, *chunk, use_reentrant=False, preserve_rng_state=False) if grad else fn(*chunk))
    return torch.cat(parts)


def _by_width(fn: Callable[..., Tensor], s: Tensor, valid: Tensor, g: Tensor, budget: int) -> Tensor:
    """(B,) ``fn(s, valid, g)`` over groups of rows of similar width, each cut to its widest row.

    A row's width is its last valid column + 1; its value does not depend on columns past it, nor on
    the other rows (Sinkhorn stops per list), so the groups give each row's value as the whole padded
    batch would. The work is (rows, w, w) per group: padded to the batch's longest list, the short
    lists of a learning-to-rank batch (MQ2008: median 8 documents, longest 121) cost up to
    (121 / 8)^2 times their own. Rows sorted by width start a new group once a width exceeds
    :data:`WIDTH_RATIO` times the group's first (at most 2x padded work per group), and no group
    exceeds ``budget`` (rows * w * w) elements; groups are checkpointed when all of them together
    exceed it (as :func:`_by_rows`).
    """
    n_rows, length = s.shape
    if n_rows == 0:
        return fn(s, valid, g)
    place = torch.arange(1, length + 1, device=s.device)
    width = torch.where(valid, place, 0).amax(1).clamp(min=1)
    order = torch.argsort(width, stable=True)
    widths = width[order].tolist()
    groups, start = [], 0
    for i in range(1, n_rows + 1):
        if i == n_rows or widths[i] > WIDTH_RATIO * widths[start] or (i - start + 1) * widths[i] ** 2 > budget:
            groups.append((start, i))
            start = i
    if len(groups) == 1 and widths[-1] == length:
        return fn(s, valid, g)
    checkpointed = (torch.is_grad_enabled() and s.requires_grad
                    and sum((b - a) * widths[b - 1] ** 2 for a, b in groups) > budget)
    parts = []
    for a, b in groups:
        rows, w = order[a:b], widths[b - 1]
        chunk = (s[rows, :w], valid[rows, :w], g[rows, :w])
        parts.append(checkpoint(fn, *chunk, use_reentrant=False, preserve_rng_state=False) if checkpointed
                     else fn(*chunk))
    return torch.cat(parts)[torch.argsort(order)]


# ApproxNDCG ---------------------------------------------------------------------------------------------------

def _approx_dcg(s: Tensor, valid: Tensor, s_top: Tensor, g_top: Tensor, alpha: float, k: int | None,
                truncation_slope: float) -> Tensor:
    """(b,) approximate DCG from the m columns (b, m) that may carry gain, against the whole list (b, L)."""
    beats = torch.sigmoid(alpha * (s[:, None, :] - s_top[:, :, None]))  # (b, m, L)
    # the sum over all valid j includes j = i itself, whose term is sigmoid(0) = 1/2 exactly
    rank = 0.5 + torch.where(valid[:, None, :], beats, 0.0).sum(-1)
    terms = g_top / torch.log2(1.0 + rank)
    if k is not None:
        terms = terms * torch.sigmoid(truncation_slope * (k + 0.5 - rank))
    return terms.sum(1)


def approx_ndcg(scores: Tensor, labels: Tensor, mask: Tensor | None = None, alpha: float = 1.0,
                k: int | None = None, truncation_slope: float = 1.0,
                chunk_elements: int = APPROX_CHUNK) -> tuple[Tensor, Tensor]:
    r"""ApproxNDCG per list: the NDCG of the soft ranks

    .. math:: \hat\pi_i = 1 + \sum_{j \ne i,\ j\ \mathrm{valid}} \sigma(\alpha (s_j - s_i)),\qquad
              \mathrm{ApproxNDCG} = \frac{1}{\mathrm{IDCG@k}} \sum_i \frac{2^{y_i} - 1}{\log_2(1 + \hat\pi_i)}
              \,[\,\sigma(\beta (k + \tfrac12 - \hat\pi_i))\,]

    The bracket (the smooth top-k truncation) applies only when ``k`` is given; without it this is
    the paper's (untruncated) surrogate. Only entries with positive gain enter the sum, so the work
    is (B, m, L) for m = the largest number of relevant entries in a row (one sync to read m).

    Args:
        scores: (B, L) scores; padded entries may hold anything (-inf included).
        labels: (B, L) graded relevance >= 0 (any value on padding).
        mask: (B, L) bool, True on real entries; None: all real.
        alpha: sigmoid slope, in 1/score units (> 0); large alpha -> exact ranks.
        k: NDCG@k (IDCG@k and the smooth truncation); None: the whole list.
        truncation_slope: beta of the smooth truncation, in 1/rank units (> 0).
        chunk_elements: rows are processed in chunks of at most this many (row, m, L) elements.
    Returns:
        loss (B,) = -ApproxNDCG (0 for lists with no relevant entry) and counted (B,) bool.
    """
    s, g, valid, idcg, counted = _prepare(scores, labels, mask, k)
    m = int((g > 0).sum(1).max()) if g.numel() else 0
    if m == 0:
        return (s * 0.0).sum(1), counted
    g_top, idx = g.topk(m, dim=1)
    fn = lambda s_, v_, st_, gt_: _approx_dcg(s_, v_, st_, gt_, alpha, k, truncation_slope)
    dcg = _by_rows(fn, (s, valid, s.gather(1, idx), g_top), m * s.shape[1], chunk_elements)
    return torch.where(counted, -dcg / idcg, 0.0), counted


# NeuralNDCG ---------------------------------------------------------------------------------------------------

def neural_sort_log(s: Tensor, valid: Tensor, tau: float) -> Tensor:
    r"""(B, L, L) log of the NeuralSort matrix: row r (1-based rank) over columns j (items).

    Rows r <= n (n = the row's valid entries) are
    :math:`\mathrm{softmax}_j\big(((n + 1 - 2r)\, s_j - \sum_{k\ \mathrm{valid}} |s_j - s_k|)/\tau\big)`
    over the valid columns (padded columns: -inf). Rows r > n are padding: row n + t holds a 1 (log 0)
    at the t-th padded column, so the full matrix is a block permutation of the valid block and every
    row and column has a finite entry (Sinkhorn never divides by an empty sum). ``s`` (B, L) must be
    finite on padding.
    """
    n_rows, length = s.shape
    n = valid.sum(1)
    r = torch.arange(1, length + 1, device=s.device)
    scale = (n[:, None] + 1 - 2 * r[None, :]).to(s.dtype)  # (B, L) over ranks
    spread = torch.where(valid[:, None, :], (s[:, :, None] - s[:, None, :]).abs(), 0.0).sum(-1)  # (B, L) items
    logits = (scale[:, :, None] * s[:, None, :] - spread[:, None, :]) / tau
    # a list with no valid entry keeps finite logits, so its unused softmax has finite gradients
    cols = valid | (n == 0)[:, None]
    logp = torch.log_softmax(logits.masked_fill(~cols[:, None, :], float("-inf")), dim=-1)
    pad_col = torch.cumsum((~valid).to(torch.long), dim=1)  # t for the t-th padded column
    pad = (~valid)[:, None, :] & ((r[None, :, None] - n[:, None, None]) == pad_col[:, None, :])
    rows = r[None, :] <= n[:, None]
    return torch.where(rows[:, :, None], logp, torch.where(pad, 0.0, float("-inf")))


def sinkhorn_log(x: Tensor, iters: int = 50, tol: float = 1e-6) -> Tensor:
    """(B, L, L) log-space Sinkhorn scaling of the row-stochastic ``exp(x)``.

    Each iteration divides by the column sums, then by the row sums, as the paper's code does, but in
    logs, so that no sum underflows at small tau. A list stops once all its column sums are within
    ``tol`` of 1 after an iteration (its rows are then exact) and is left as it is from then on; the
    loop ends when every list has stopped or after ``iters`` iterations. Per list, unlike the paper's
    code (which stops when the whole batch has), so that a list's value does not depend on the other
    lists of its batch or chunk. ``tol = 0`` runs all ``iters`` (no check, no sync); ``iters = 0``
    returns ``x`` unchanged.
    """
    done: Tensor | None = None
    for it in range(iters):
        col = torch.logsumexp(x, dim=1, keepdim=True)
        if it > 0 and tol > 0:
            done = torch.expm1(col.detach()).abs().amax(dim=(1, 2)) < tol
            if bool(done.all()):
                break
        y = x - col
        y = y - torch.logsumexp(y, dim=2, keepdim=True)
        x = y if done is None else torch.where(done[:, None, None], x, y)
    return x


def _soft_permutation(s: Tensor, valid: Tensor, tau: float, iters: int, tol: float) -> Tensor:
    """(b, L, L) P~ = Sinkhorn(NeuralSort), zero outside the valid block (ranks r <= n, valid items)."""
    x = sinkhorn_log(neural_sort_log(s, valid, tau), iters, tol)
    r = torch.arange(1, s.shape[1] + 1, device=s.device)
    keep = valid[:, None, :] & (r[None, :, None] <= valid.sum(1)[:, None, None])
    return torch.where(keep, x.exp(), 0.0)


def neural_sort_matrix(scores: Tensor, mask: Tensor | None = None, tau: float = 1.0, sinkhorn_iters: int = 50,
                       sinkhorn_tol: float = 1e-6) -> Tensor:
    """(B, L, L) the relaxed sorting matrix P~ (rows: ranks 1..L, columns: the list's entries):
    NeuralSort then Sinkhorn, zero on padded columns and on ranks beyond the row's valid count."""
    valid = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    return _soft_permutation(torch.where(valid, scores, 0.0), valid, tau, sinkhorn_iters, sinkhorn_tol)


def _neural_dcg(s: Tensor, valid: Tensor, g: Tensor, tau: float, k: int | None, iters: int, tol: float,
                transposed: bool) -> Tensor:
    p = _soft_permutation(s, valid, tau, iters, tol)
    d = rank_discounts(s.shape[1], k, s)
    if transposed:  # each entry's expected discount (P~^T d_k)_j times its gain
        return (g * torch.matmul(p.transpose(1, 2), d)).sum(1)
    return (torch.matmul(p, g.unsqueeze(-1)).squeeze(-1) * d).sum(1)  # quasi-sorted gains (P~ g)_r times d(r)


def neural_ndcg(scores: Tensor, labels: Tensor, mask: Tensor | None = None, tau: float = 1.0,
                k: int | None = None, sinkhorn_iters: int = 50, sinkhorn_tol: float = 1e-6,
                transposed: bool = False, chunk_elements: int = NEURAL_CHUNK) -> tuple[Tensor, Tensor]:
    r"""NeuralNDCG per list:

    .. math:: \mathrm{NeuralNDCG@k} = \frac{1}{\mathrm{IDCG@k}} \sum_{r \le k} (\tilde P g)_r\, d(r),
              \qquad \mathrm{NeuralNDCG^T@k} = \frac{1}{\mathrm{IDCG@k}} \sum_i g_i\, (\tilde P^\top d_k)_i

    with :math:`\tilde P` = Sinkhorn(NeuralSort(s)) over each list's valid entries
    (:func:`neural_sort_log`, :func:`sinkhorn_log`). For the same :math:`\tilde P` the two variants are
    the same bilinear form :math:`d_k^\top \tilde P g`, so they agree up to rounding.

    Args:
        scores: (B, L) scores; padded entries may hold anything (-inf included).
        labels: (B, L) graded relevance >= 0 (any value on padding).
        mask: (B, L) bool, True on real entries; None: all real.
        tau: NeuralSort temperature (> 0), in score units; small tau -> exact sorting.
        k: NDCG@k; None: the whole list.
        sinkhorn_iters: maximum Sinkhorn iterations (0: NeuralSort's row-stochastic matrix as it is).
        sinkhorn_tol: stop once every column sum is within this of 1 (0: always run ``sinkhorn_iters``).
        transposed: compute the NeuralNDCG^T form.
        chunk_elements: rows are processed in groups of similar length (:func:`_by_width`) of at most
            this many (row, w, w) elements; the graph of a group holds about 2 * sinkhorn_iters + 4
            tensors of that size.
    Returns:
        loss (B,) = -NeuralNDCG (0 for lists with no relevant entry) and counted (B,) bool.
    """
    s, g, valid, idcg, counted = _prepare(scores, labels, mask, k)
    fn = lambda s_, v_, g_: _neural_dcg(s_, v_, g_, tau, k, sinkhorn_iters, sinkhorn_tol, transposed)
    dcg = _by_width(fn, s, valid, g, chunk_elements)
    return torch.where(counted, -dcg / idcg, 0.0), counted


# registered losses on the sampled list [pos | negatives] ------------------------------------------------------

def _sampled_list(batch: LossBatch) -> tuple[Tensor, Tensor, Tensor | None]:
    """Scores (P, 1 + N), labels 1, 0, ..., 0 and the validity mask (None for per-pair negatives)."""
    scores = torch.cat([batch.pos.unsqueeze(1), batch.neg], dim=1)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    valid = batch.neg_valid
    mask = None if valid is None else torch.cat([valid.new_ones(valid.shape[0], 1), valid], dim=1)
    return scores, labels, mask


def _pair_mean(loss: Tensor, batch: LossBatch) -> Tensor:
    """Mean over the P pairs of 1 + loss (= 1 - NDCG surrogate); a pair with no valid negative (shared
    draws) has nothing to rank and gives exactly 0 (with a soft truncation its lone positive would not)."""
    keep = None if batch.neg_valid is None else batch.neg_valid.any(1)
    per_pair = 1.0 + loss
    return (per_pair if keep is None else torch.where(keep, per_pair, 0.0)).mean()


def _check(name: str, value: float, low: float, strict: bool = True) -> None:
    if value < low or (strict and value == low):
        raise ConfigError(f"loss.{name} must be {'>' if strict else '>='} {low:g}, got {value}")


def _check_list_k(list_k: int | None) -> int | None:
    if list_k is None:
        return None
    if int(list_k) != list_k or list_k < 1:
        raise ConfigError(f"loss.list_k must be null or an integer >= 1, got {list_k}")
    return int(list_k)


@LOSSES.register("approxndcg")
class ApproxNDCGLoss(RecLoss):
    r"""ApproxNDCG (docs/losses.md#approxndcg) on each pair's list [i | N]: the mean over pairs of
    :math:`1 - \mathrm{ApproxNDCG}`, which with one relevant item is
    :math:`1 - 1/\log_2(2 + \sum_{j} \sigma(\alpha (s_{uj} - s_{ui})))` without truncation. The loss is
    the functional form's plus 1 (values in [0, 1]; a pair with no valid negative gives 0).

    Args:
        alpha: sigmoid slope (> 0); 1.0 in the reference code, for unbounded scores.
        list_k: NDCG@k within the sampled list with a smooth truncation; None (the paper): whole list.
        truncation_slope: slope of that truncation (> 0).
        n_negatives: N; the list has one relevant entry, so the cost is (P, 1 + N), as SL's.
        chunk_elements: memory bound of one chunk, see :func:`approx_ndcg`.
    """

    def __init__(self, alpha: float = 10.0, list_k: int | None = None, truncation_slope: float = 1.0,
                 n_negatives: int = 1000, chunk_elements: int = APPROX_CHUNK) -> None:
        super().__init__(n_negatives=n_negatives)
        _check("alpha", alpha, 0.0)
        _check("truncation_slope", truncation_slope, 0.0)
        _check("chunk_elements", chunk_elements, 1.0, strict=False)
        self.alpha, self.truncation_slope = float(alpha), float(truncation_slope)
        self.list_k, self.chunk_elements = _check_list_k(list_k), int(chunk_elements)

    def forward(self, batch: LossBatch) -> Tensor:
        scores, labels, mask = _sampled_list(batch)
        loss, _ = approx_ndcg(scores, labels, mask, self.alpha, self.list_k, self.truncation_slope,
                              self.chunk_elements)
        return _pair_mean(loss, batch)

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """1 - ApproxNDCG of the graded lists (gains 2^y - 1; ``list_k`` truncates), mean over the
        lists with two grades (a list of one grade has no order to learn, though the surrogate is
        below 1 there)."""
        loss, counted = approx_ndcg(scores, labels, mask, self.alpha, self.list_k, self.truncation_slope,
                                    self.chunk_elements)
        return list_mean(1.0 + loss, counted & counted_lists(labels.to(scores.dtype), mask))


@LOSSES.register("neuralndcg")
class NeuralNDCGLoss(RecLoss):
    r"""NeuralNDCG (docs/losses.md#neuralndcg) on each pair's list [i | N]: the mean over pairs of
    :math:`1 - \mathrm{NeuralNDCG}` (the functional form's plus 1; values in [0, 1]; a pair with no
    valid negative gives 0).

    Args:
        tau: NeuralSort temperature (> 0); 1.0 in the paper's configuration (tanh scores in [-1, 1]).
        list_k: NDCG@k within the sampled list; None (the paper's configuration): whole list.
        sinkhorn_iters: maximum Sinkhorn iterations (>= 0; 50 in the paper's code).
        sinkhorn_tol: Sinkhorn tolerance on the column sums (>= 0; 1e-6 in the paper's code).
        transposed: the NeuralNDCG^T form.
        n_negatives: N; memory and time grow as P (1 + N)^2 per Sinkhorn iteration.
        chunk_elements: memory bound of one chunk, see :func:`neural_ndcg`.
    """

    def __init__(self, tau: float = 1.0, list_k: int | None = None, sinkhorn_iters: int = 50,
                 sinkhorn_tol: float = 1e-6, transposed: bool = False, n_negatives: int = 100,
                 chunk_elements: int = NEURAL_CHUNK) -> None:
        super().__init__(n_negatives=n_negatives)
        _check("tau", tau, 0.0)
        _check("sinkhorn_tol", sinkhorn_tol, 0.0, strict=False)
        _check("chunk_elements", chunk_elements, 1.0, strict=False)
        if int(sinkhorn_iters) != sinkhorn_iters or sinkhorn_iters < 0:
            raise ConfigError(f"loss.sinkhorn_iters must be an integer >= 0, got {sinkhorn_iters}")
        self.tau, self.sinkhorn_iters, self.sinkhorn_tol = float(tau), int(sinkhorn_iters), float(sinkhorn_tol)
        self.list_k, self.transposed, self.chunk_elements = _check_list_k(list_k), bool(transposed), int(chunk_elements)

    def forward(self, batch: LossBatch) -> Tensor:
        scores, labels, mask = _sampled_list(batch)
        loss, _ = neural_ndcg(scores, labels, mask, self.tau, self.list_k, self.sinkhorn_iters,
                              self.sinkhorn_tol, self.transposed, self.chunk_elements)
        return _pair_mean(loss, batch)

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """1 - NeuralNDCG of the graded lists (gains 2^y - 1; ``list_k`` truncates), mean over the
        lists with two grades (a list of one grade has no order to learn, though the surrogate is
        below 1 there)."""
        loss, counted = neural_ndcg(scores, labels, mask, self.tau, self.list_k, self.sinkhorn_iters,
                                    self.sinkhorn_tol, self.transposed, self.chunk_elements)
        return list_mean(1.0 + loss, counted & counted_lists(labels.to(scores.dtype), mask))
