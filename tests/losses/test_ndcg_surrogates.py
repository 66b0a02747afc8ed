"""ApproxNDCG and NeuralNDCG: the formulas on padded graded lists, their exact-NDCG limits, the
Sinkhorn matrix, invariances, gradients, the sampled-list losses and shared-negatives masking."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.ndcg_surrogates import approx_ndcg, neural_ndcg, neural_sort_matrix

NEG_INF = float("-inf")


def _d(r):
    return 1 / math.log2(1 + r)


def _sig(x):
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _rows(scores, labels, mask):
    """Per row: the (scores, labels) of its valid entries, in list order."""
    out = []
    for b in range(scores.shape[0]):
        keep = [j for j in range(scores.shape[1]) if mask is None or mask[b, j]]
        out.append(([scores[b, j].item() for j in keep], [int(labels[b, j].item()) for j in keep]))
    return out


def _idcg(y, k):
    gains = sorted((2**v - 1 for v in y), reverse=True)
    return sum(g * _d(r) for r, g in enumerate(gains, 1) if k is None or r <= k)


def _exact_ndcg(s, y, k):
    order = sorted(range(len(s)), key=lambda i: -s[i])
    dcg = sum((2 ** y[i] - 1) * _d(r) for r, i in enumerate(order, 1) if k is None or r <= k)
    return dcg / _idcg(y, k)


def _slow_approx(s, y, alpha, k, beta):
    dcg = 0.0
    for i in range(len(s)):
        pi = 1 + sum(_sig(-alpha * (s[i] - s[j])) for j in range(len(s)) if j != i)
        term = (2 ** y[i] - 1) / math.log2(1 + pi)
        dcg += term * (_sig(beta * (k + 0.5 - pi)) if k is not None else 1.0)
    return dcg / _idcg(y, k)


def _slow_sort_matrix(s, tau, iters, tol):
    """NeuralSort rows r = 1..n, then Sinkhorn (columns, then rows; stop when all sums are within tol)."""
    n = len(s)
    p = []
    for r in range(1, n + 1):
        logits = [((n + 1 - 2 * r) * s[a] - sum(abs(s[a] - s[b]) for b in range(n))) / tau for a in range(n)]
        top = max(logits)
        w = [math.exp(v - top) for v in logits]
        p.append([v / sum(w) for v in w])
    for _ in range(iters):
        cols = [sum(p[r][a] for r in range(n)) for a in range(n)]
        p = [[p[r][a] / cols[a] for a in range(n)] for r in range(n)]
        p = [[v / sum(row) for v in row] for row in p]
        col_err = max(abs(sum(p[r][a] for r in range(n)) - 1) for a in range(n))
        row_err = max(abs(sum(row) - 1) for row in p)
        if max(col_err, row_err) < tol:
            break
    return p


def _slow_neural(s, y, tau, k, iters, tol, transposed):
    p = _slow_sort_matrix(s, tau, iters, tol)
    n, g = len(s), [2**v - 1 for v in y]
    d = [_d(r) if k is None or r <= k else 0.0 for r in range(1, n + 1)]
    if transposed:
        dcg = sum(g[a] * sum(p[r][a] * d[r] for r in range(n)) for a in range(n))
    else:
        dcg = sum(d[r] * sum(p[r][a] * g[a] for a in range(n)) for r in range(n))
    return dcg / _idcg(y, k)


def _batch(seed, b=6, length=8, spread=False):
    """Graded labels 0-4 with padding anywhere (scores -inf, labels -1 there); row 1 has no relevant
    item, row 4 no valid entry at all, row 0 no padding. ``spread``: well-separated scores."""
    gen = torch.Generator().manual_seed(seed)
    if spread:
        scores = torch.stack([torch.randperm(length, generator=gen) for _ in range(b)]).double() * 0.1
        scores = scores + 0.01 * torch.rand(b, length, generator=gen, dtype=torch.float64)
    else:
        scores = torch.randn(b, length, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 5, (b, length), generator=gen)
    mask = torch.rand(b, length, generator=gen) > 0.3
    mask[0] = True
    mask[2, : length // 2] = False  # padding in front
    mask[2, length - 1] = True
    mask[4] = False
    labels[1] = 0
    labels[3, 1] = 4  # at least one relevant entry
    mask[3, 1] = True
    return scores.masked_fill(~mask, NEG_INF), labels.masked_fill(~mask, -1), mask


def _want(fn, scores, labels, mask, **kw):
    out = []
    for s, y in _rows(scores, labels, mask):
        out.append(-fn(s, y, **kw) if s and any(v > 0 for v in y) else 0.0)
    return torch.tensor(out, dtype=torch.float64)


# the formulas --------------------------------------------------------------------------------------------------

def test_two_items_by_hand():
    s, y = torch.tensor([[0.3, -0.2]], dtype=torch.float64), torch.tensor([[1, 0]])
    # pi_1 = 1 + sigmoid(2 (-0.2 - 0.3)); IDCG = 1
    assert approx_ndcg(s, y, alpha=2.0)[0].item() == pytest.approx(-1 / math.log2(2 + _sig(-1.0)), rel=1e-12)
    # n = 2: rows softmax(s / tau) and softmax(-s / tau), already doubly stochastic; NDCG = p + (1 - p)/log2(3)
    p = _sig(0.5 / 0.25)
    for transposed in (False, True):
        got = neural_ndcg(s, y, tau=0.25, transposed=transposed)[0].item()
        assert got == pytest.approx(-(p + (1 - p) / math.log2(3)), rel=1e-12)


@pytest.mark.parametrize("k", [None, 3])
def test_approx_ndcg_matches_the_formula_on_padded_graded_lists(k):
    scores, labels, mask = _batch(0)
    loss, counted = approx_ndcg(scores, labels, mask, alpha=1.5, k=k, truncation_slope=2.0)
    assert counted.tolist() == [True, False, True, True, False, True]
    want = _want(_slow_approx, scores, labels, mask, alpha=1.5, k=k, beta=2.0)
    torch.testing.assert_close(loss, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k,transposed,tol", [(None, False, 0.0), (3, False, 0.0), (3, True, 0.0),
                                              (None, False, 1e-3)])
def test_neural_ndcg_matches_the_formula_on_padded_graded_lists(k, transposed, tol):
    scores, labels, mask = _batch(1)
    loss, counted = neural_ndcg(scores, labels, mask, tau=0.7, k=k, sinkhorn_iters=30, sinkhorn_tol=tol,
                                transposed=transposed)
    assert counted.tolist() == [True, False, True, True, False, True]
    want = _want(_slow_neural, scores, labels, mask, tau=0.7, k=k, iters=30, tol=tol, transposed=transposed)
    torch.testing.assert_close(loss, want, rtol=1e-9, atol=1e-12)


def test_neural_ndcg_without_sinkhorn_is_plain_neuralsort():
    scores, labels, mask = _batch(2)
    loss, _ = neural_ndcg(scores, labels, mask, tau=0.5, sinkhorn_iters=0)
    want = _want(_slow_neural, scores, labels, mask, tau=0.5, k=None, iters=0, tol=0.0, transposed=False)
    torch.testing.assert_close(loss, want, rtol=1e-10, atol=1e-12)
    p = neural_sort_matrix(scores, mask, tau=0.5, sinkhorn_iters=0)
    assert (p.sum(1)[0] - 1).abs().max() > 1e-3  # NeuralSort alone is not column-stochastic


# limits that a wrong implementation misses ---------------------------------------------------------------------

@pytest.mark.parametrize("k", [None, 2, 4])
def test_large_alpha_gives_the_exact_ndcg_of_the_order(k):
    scores, labels, mask = _batch(3, spread=True)
    loss, _ = approx_ndcg(scores, labels, mask, alpha=1e4, k=k, truncation_slope=1e3)
    want = _want(_exact_ndcg, scores, labels, mask, k=k)
    torch.testing.assert_close(loss, want, rtol=1e-9, atol=1e-12)
    soft, _ = approx_ndcg(scores, labels, mask, alpha=1.0, k=k)
    assert (soft - want).abs().max() > 1e-2  # the limit is not reached at the reference alpha


@pytest.mark.parametrize("k,transposed", [(None, False), (3, False), (3, True), (1, True)])
def test_small_tau_gives_the_exact_ndcg_at_k(k, transposed):
    scores, labels, mask = _batch(4, spread=True)
    loss, _ = neural_ndcg(scores, labels, mask, tau=1e-3, k=k, transposed=transposed)
    want = _want(_exact_ndcg, scores, labels, mask, k=k)
    torch.testing.assert_close(loss, want, rtol=1e-9, atol=1e-12)


def test_sinkhorn_matrix_is_doubly_stochastic_on_the_valid_block_and_zero_elsewhere():
    scores, _, mask = _batch(5)
    p = neural_sort_matrix(scores, mask, tau=1.0, sinkhorn_iters=2000, sinkhorn_tol=1e-13)
    assert torch.isfinite(p).all()
    n = mask.sum(1)
    ranks = torch.arange(1, scores.shape[1] + 1)
    block = (ranks[None, :, None] <= n[:, None, None]) & mask[:, None, :]
    assert (p[~block] == 0).all()
    rows, cols = p.sum(2), p.sum(1)
    torch.testing.assert_close(rows, (ranks[None, :] <= n[:, None]).double(), atol=1e-10, rtol=0)
    torch.testing.assert_close(cols, mask.double(), atol=1e-10, rtol=0)
    # stopping early leaves column sums within the tolerance (rows are exact after each iteration)
    q = neural_sort_matrix(scores, mask, tau=0.5, sinkhorn_iters=500, sinkhorn_tol=1e-4)
    assert ((q.sum(1) - mask.double()).abs().max()) < 1e-4
    assert ((q.sum(1) - mask.double()).abs().max()) > 1e-12  # it did stop early


# invariances and gradients ---------------------------------------------------------------------------------------

def test_losses_are_invariant_to_shuffling_columns_with_labels_and_mask():
    scores, labels, mask = _batch(6)
    perm = torch.randperm(scores.shape[1], generator=torch.Generator().manual_seed(0))
    for fn in (lambda *a: approx_ndcg(*a, alpha=3.0, k=3)[0], lambda *a: neural_ndcg(*a, tau=0.4, k=3)[0]):
        torch.testing.assert_close(fn(scores[:, perm], labels[:, perm], mask[:, perm]), fn(scores, labels, mask),
                                   rtol=1e-9, atol=1e-12)


def test_transposed_and_plain_neural_ndcg_agree():
    scores, labels, mask = _batch(7)
    for k in (None, 2):
        a = neural_ndcg(scores, labels, mask, tau=0.3, k=k)[0]
        b = neural_ndcg(scores, labels, mask, tau=0.3, k=k, transposed=True)[0]
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_chunked_rows_give_the_same_values_and_gradients():
    scores, labels, mask = _batch(8)
    scores = scores.masked_fill(~mask, 0.0)
    for fn, per_row in ((approx_ndcg, 8 * 8), (neural_ndcg, 8 * 8)):
        kw = {"sinkhorn_tol": 0.0} if fn is neural_ndcg else {}
        grads, values = [], []
        for chunk in (10**9, 2 * per_row):  # one chunk; three checkpointed chunks of two rows
            s = scores.clone().requires_grad_(True)
            loss, _ = fn(s, labels, mask, k=3, chunk_elements=chunk, **kw)
            loss.sum().backward()
            values.append(loss.detach())
            grads.append(s.grad)
        torch.testing.assert_close(values[0], values[1], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("transposed", [False, True])
def test_neural_ndcg_of_lists_of_very_different_lengths_equals_each_list_alone(transposed):
    # NeuralNDCG groups rows by width and cuts each group to its widest row: every list's value and
    # gradient must be what it gets alone, at its own length, and padding must get no gradient
    gen = torch.Generator().manual_seed(5)
    lengths = [3, 40, 1, 9, 0, 17, 5, 40, 2, 26, 12, 8]
    n, width = len(lengths), max(lengths) + 3
    scores = torch.randn(n, width, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (n, width), generator=gen)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    mask[3, 1] = False  # a hole inside a list: its width is still its last valid column + 1
    s = scores.clone().requires_grad_(True)
    loss, counted = neural_ndcg(s, labels, mask, tau=0.2, k=5, transposed=transposed)
    loss.sum().backward()
    for r, length in enumerate(lengths):
        w = max(length, 1)
        alone = scores[r:r + 1, :w].clone().requires_grad_(True)
        want, want_counted = neural_ndcg(alone, labels[r:r + 1, :w], mask[r:r + 1, :w], tau=0.2, k=5,
                                         transposed=transposed)
        want.sum().backward()
        torch.testing.assert_close(loss[r], want[0], rtol=1e-12, atol=1e-14)
        assert bool(counted[r]) == bool(want_counted[0])
        torch.testing.assert_close(s.grad[r, :w], alone.grad[0], rtol=1e-10, atol=1e-13)
        assert (s.grad[r, w:] == 0).all()
    assert loss[4] == 0 and not counted[4]  # the empty list


@pytest.mark.parametrize("case", ["approx", "approx_k", "neural", "neural_k_transposed"])
def test_gradcheck(case):
    scores, labels, mask = _batch(9, length=5)
    scores = scores.masked_fill(~mask, 0.3).requires_grad_(True)
    fn = {
        "approx": lambda s: approx_ndcg(s, labels, mask, alpha=2.0)[0],
        "approx_k": lambda s: approx_ndcg(s, labels, mask, alpha=2.0, k=2, truncation_slope=1.5)[0],
        # a fixed number of Sinkhorn iterations: a tolerance would make the function step-wise
        "neural": lambda s: neural_ndcg(s, labels, mask, tau=0.5, sinkhorn_iters=20, sinkhorn_tol=0.0)[0],
        "neural_k_transposed": lambda s: neural_ndcg(s, labels, mask, tau=0.5, k=2, sinkhorn_iters=20,
                                                     sinkhorn_tol=0.0, transposed=True)[0],
    }[case]
    assert torch.autograd.gradcheck(fn, (scores,))


def test_lists_without_relevant_or_valid_entries_give_zero_and_finite_gradients():
    scores = torch.tensor([[0.5, NEG_INF, -0.2], [NEG_INF, NEG_INF, NEG_INF], [0.1, 0.4, 0.9]],
                          dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[0, -1, 0], [-1, -1, -1], [2, 0, 1]])
    mask = torch.isfinite(scores.detach())
    for fn in (lambda: approx_ndcg(scores, labels, mask, alpha=5.0, k=2),
               lambda: neural_ndcg(scores, labels, mask, tau=0.1, k=2)):
        scores.grad = None
        loss, counted = fn()
        assert counted.tolist() == [False, False, True]
        assert loss[:2].tolist() == [0.0, 0.0]
        (loss[counted].sum() / counted.sum()).backward()
        assert torch.isfinite(scores.grad).all() and (scores.grad[:2] == 0).all()
    # no list counts at all: zeros that still backpropagate (to zero)
    for fn in (approx_ndcg, neural_ndcg):
        scores.grad = None
        loss, counted = fn(scores[:2], labels[:2], mask[:2])
        assert not counted.any() and loss.requires_grad
        loss.sum().backward()
        assert (scores.grad == 0).all()


# the registered losses on [pos | negatives] ----------------------------------------------------------------------

def test_approxndcg_loss_is_one_minus_the_positive_discount_of_its_soft_rank():
    gen = torch.Generator().manual_seed(10)
    pos, neg = torch.rand(4, generator=gen, dtype=torch.float64), torch.rand(4, 7, generator=gen, dtype=torch.float64)
    got = build("approxndcg", alpha=3.0, n_negatives=7)(LossBatch(pos=pos, neg=neg))
    want = sum(1 - 1 / math.log2(2 + sum(_sig(3.0 * (neg[b, j] - pos[b]).item()) for j in range(7)))
               for b in range(4)) / 4
    assert got.item() == pytest.approx(want, rel=1e-12)


def test_neuralndcg_loss_is_one_minus_the_functional_form():
    gen = torch.Generator().manual_seed(11)
    pos, neg = torch.rand(4, generator=gen, dtype=torch.float64), torch.rand(4, 7, generator=gen, dtype=torch.float64)
    got = build("neuralndcg", tau=0.2, n_negatives=7)(LossBatch(pos=pos, neg=neg))
    want = _want(_slow_neural, torch.cat([pos[:, None], neg], 1),
                 torch.tensor([[1] + [0] * 7] * 4), None, tau=0.2, k=None, iters=50, tol=1e-6, transposed=False)
    assert got.item() == pytest.approx(1 + want.mean().item(), rel=1e-9)


@pytest.mark.parametrize("name,kwargs", [("approxndcg", {"alpha": 4.0}), ("approxndcg", {"alpha": 4.0, "list_k": 2}),
                                         ("neuralndcg", {"tau": 0.3, "sinkhorn_tol": 0.0}),
                                         ("neuralndcg", {"tau": 0.3, "list_k": 2, "transposed": True})])
def test_shared_negatives_masking_equals_removing_the_columns(name, kwargs):
    gen = torch.Generator().manual_seed(12)
    pos = torch.rand(3, generator=gen, dtype=torch.float64)
    neg = torch.rand(3, 5, generator=gen, dtype=torch.float64)
    valid = torch.tensor([[True, False, True, True, False], [True] * 5, [False] * 5])
    loss = build(name, n_negatives=5, **kwargs)
    p, n = pos.clone().requires_grad_(True), neg.masked_fill(~valid, NEG_INF).requires_grad_(True)
    got = loss(LossBatch(pos=p, neg=n, neg_valid=valid))
    got.backward()
    kept = [neg[b:b + 1, valid[b]] for b in range(3)]
    want = sum(loss(LossBatch(pos=pos[b:b + 1], neg=kept[b], neg_valid=torch.ones_like(kept[b], dtype=torch.bool)))
               for b in range(3)) / 3
    assert got.item() == pytest.approx(want.item(), rel=1e-12, abs=1e-15)
    assert torch.isfinite(p.grad).all() and torch.isfinite(n.grad).all()
    assert (n.grad[~valid] == 0).all() and p.grad[2].item() == 0.0  # a row with no valid negative: 0, no gradient
    assert loss(LossBatch(pos=pos[2:], neg=n[2:].detach(), neg_valid=valid[2:])).item() == 0.0


@pytest.mark.parametrize("name", ["approxndcg", "neuralndcg"])
def test_all_negatives_winning_is_finite_and_pushes_the_positive_up(name):
    for kwargs in ({}, {"list_k": 5}):
        pos = torch.tensor([-1.0, -1.0], requires_grad=True)
        neg = torch.ones(2, 50, requires_grad=True)
        value = build(name, n_negatives=50, **kwargs)(LossBatch(pos=pos, neg=neg))
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
        assert (pos.grad <= 0).all() and value.item() > 0.5
    # at a moderate gap the push is strictly positive
    pos = torch.tensor([-0.1], requires_grad=True)
    build(name, n_negatives=3)(LossBatch(pos=pos, neg=torch.tensor([[0.1, 0.2, 0.0]]))).backward()
    assert pos.grad.item() < 0


@pytest.mark.parametrize("name,kwargs,message", [
    ("approxndcg", {"alpha": 0.0}, r"loss.alpha must be > 0, got 0.0"),
    ("approxndcg", {"truncation_slope": -1.0}, r"loss.truncation_slope must be > 0, got -1.0"),
    ("approxndcg", {"list_k": 0}, r"loss.list_k must be null or an integer >= 1, got 0"),
    ("approxndcg", {"chunk_elements": 0}, r"loss.chunk_elements must be >= 1, got 0"),
    ("neuralndcg", {"tau": -0.5}, r"loss.tau must be > 0, got -0.5"),
    ("neuralndcg", {"sinkhorn_iters": -1}, r"loss.sinkhorn_iters must be an integer >= 0, got -1"),
    ("neuralndcg", {"sinkhorn_tol": -1e-6}, r"loss.sinkhorn_tol must be >= 0, got -1e-06"),
    ("neuralndcg", {"list_k": 2.5}, r"loss.list_k must be null or an integer >= 1, got 2.5"),
])
def test_bad_settings_are_refused(name, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build(name, **kwargs)


def test_defaults():
    a, n = build("approxndcg"), build("neuralndcg")
    assert (a.alpha, a.list_k, a.n_negatives) == (10.0, None, 1000)
    assert (n.tau, n.list_k, n.sinkhorn_iters, n.sinkhorn_tol, n.transposed, n.n_negatives) == \
        (1.0, None, 50, 1e-6, False, 100)
