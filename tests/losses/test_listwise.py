"""ListNet, ListMLE, RankNet: the functional forms against loops written from the formulas (graded
labels, padding), hand cases, the identities with SL (self term) and BPR, masking, empty lists,
gradients, tie breaking, bad settings."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.bpr import bpr_loss
from bench.losses.listwise import label_order, listmle, listnet, ranknet, sampled_list

F64 = torch.float64


def _lists(seed, b=6, n=7, distinct=False):
    """(b, n) scores, graded labels 0-4 (or distinct non-negative labels) and a padding mask."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, n, generator=gen, dtype=F64) * 1.5
    if distinct:
        labels = (torch.stack([torch.randperm(n, generator=gen) for _ in range(b)]).to(F64) + 1) * 0.75
    else:
        labels = torch.randint(0, 5, (b, n), generator=gen).to(F64)
    mask = torch.rand(b, n, generator=gen) > 0.3
    mask[:, :2] = True
    labels[:, 0], labels[:, 1] = 3.0, 0.0  # every row has something to learn
    return scores, labels, mask


def _row(scores, labels, mask, b):
    """The listed items of row b: (columns, scores, labels) as Python lists."""
    cols = [k for k in range(scores.shape[1]) if mask[b, k]]
    return cols, [scores[b, k].item() for k in cols], [labels[b, k].item() for k in cols]


def _listnet_ref(s, y, tau, target):
    if len(set(y)) < 2:
        return 0.0
    z = math.log(sum(math.exp(x / tau) for x in s))
    if target == "softmax":
        t = [math.exp(v) / sum(math.exp(u) for u in y) for v in y]
    else:
        t = [v / sum(y) for v in y]
    return -sum(tj * (x / tau - z) for tj, x in zip(t, s))


def _listmle_ref(s, y, order, tau, positions):
    """-log P(order | s / tau), summing the positions of relevant items only or all."""
    if len(set(y)) < 2:
        return 0.0
    loss = 0.0
    for k, i in enumerate(order):
        if positions == "all" or y[i] > 0:
            loss += math.log(sum(math.exp(s[m] / tau) for m in order[k:])) - s[i] / tau
    return loss


def _ranknet_ref(s, y, sigma, weighted):
    pairs = [(i, j) for i in range(len(s)) for j in range(len(s)) if y[i] > y[j]]
    if not pairs:
        return 0.0
    total = sum((y[i] - y[j] if weighted else 1.0) * math.log1p(math.exp(-sigma * (s[i] - s[j]))) for i, j in pairs)
    return total / len(pairs)


# --- the functional forms against the formulas ---------------------------------------------

@pytest.mark.parametrize("target", ["linear", "softmax"])
@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_listnet_matches_the_formula_on_graded_padded_lists(target, tau):
    scores, labels, mask = _lists(0)
    out = listnet(scores, labels, mask, tau=tau, target=target)
    for b in range(scores.shape[0]):
        _, s, y = _row(scores, labels, mask, b)
        assert out.loss[b].item() == pytest.approx(_listnet_ref(s, y, tau, target), rel=1e-12)
    assert out.counted.all()


@pytest.mark.parametrize("positions", ["all", "positives_only"])
def test_listmle_matches_the_formula_with_distinct_labels(positions):
    scores, labels, mask = _lists(1, distinct=True)
    labels[:, 0], labels[:, 1] = 9.0, 0.0  # keep the labels distinct within a row
    out = listmle(scores, labels, mask, tau=0.5, positions=positions)
    for b in range(scores.shape[0]):
        _, s, y = _row(scores, labels, mask, b)
        order = sorted(range(len(y)), key=lambda i: -y[i])
        assert out.loss[b].item() == pytest.approx(_listmle_ref(s, y, order, 0.5, positions), rel=1e-12)


@pytest.mark.parametrize("positions", ["all", "positives_only"])
def test_listmle_with_ties_matches_the_formula_for_the_drawn_order(positions):
    scores, labels, mask = _lists(2)
    order = label_order(labels, mask, "random", torch.Generator().manual_seed(5))
    out = listmle(scores, labels, mask, positions=positions, generator=torch.Generator().manual_seed(5))
    for b in range(scores.shape[0]):
        cols, s, y = _row(scores, labels, mask, b)
        drawn = [cols.index(c) for c in order[b].tolist() if mask[b, c]]
        assert [y[i] for i in drawn] == sorted(y, reverse=True)  # a label sort of the listed items
        assert order[b, : len(cols)].tolist() == [cols[i] for i in drawn]  # padding last
        assert out.loss[b].item() == pytest.approx(_listmle_ref(s, y, drawn, 1.0, positions), rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("sigma", [1.0, 2.5])
def test_ranknet_matches_the_formula_on_graded_padded_lists(weighted, sigma):
    scores, labels, mask = _lists(3)
    out = ranknet(scores, labels, mask, sigma=sigma, weighted=weighted)
    for b in range(scores.shape[0]):
        _, s, y = _row(scores, labels, mask, b)
        assert out.loss[b].item() == pytest.approx(_ranknet_ref(s, y, sigma, weighted), rel=1e-12)


def test_hand_checked_small_lists():
    s = torch.tensor([[2.0, 0.0, 1.0]], dtype=F64)
    y = torch.tensor([[1.0, 0.0, 0.0]], dtype=F64)
    lse = math.log(math.exp(2) + 1 + math.e)
    assert listmle(s, y).loss.item() == pytest.approx(lse - 2, rel=1e-12)  # positives_only
    want = lse - 2 + math.log(1 + math.e)  # stable order 0, 1, 2; the last position adds 0
    assert listmle(s, y, positions="all", ties="stable").loss.item() == pytest.approx(want, rel=1e-12)
    flat = torch.zeros(1, 3, dtype=F64)
    assert listnet(flat, torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)).loss.item() == pytest.approx(math.log(3))
    s, y = torch.tensor([[1.0, 0.0, 2.0]], dtype=F64), torch.tensor([[2.0, 1.0, 0.0]], dtype=F64)

    def sp(x):
        return math.log1p(math.exp(x))

    assert ranknet(s, y).loss.item() == pytest.approx((sp(-1) + sp(1) + sp(2)) / 3, rel=1e-12)
    assert ranknet(s, y, weighted=True).loss.item() == pytest.approx((sp(-1) + 2 * sp(1) + sp(2)) / 3, rel=1e-12)


@pytest.mark.parametrize("name", ["listnet", "listmle", "ranknet"])
def test_integer_grades_are_accepted(name):
    scores, labels, mask = _lists(15)
    fn = {"listnet": listnet, "listmle": lambda *a: listmle(*a, ties="stable"), "ranknet": ranknet}[name]
    assert torch.equal(fn(scores, labels.long(), mask).loss, fn(scores, labels, mask).loss)


def test_listnet_softmax_target_gives_one_positive_little_mass():
    s = torch.zeros(1, 101, dtype=F64)
    y = torch.zeros(1, 101, dtype=F64)
    y[0, 0] = 1.0
    # uniform prediction: the loss is log 101 whatever the target; the gradient shows the target
    s.requires_grad_(True)
    listnet(s, y, target="softmax").loss.sum().backward()
    assert s.grad[0, 0].item() == pytest.approx(1 / 101 - math.e / (math.e + 100), rel=1e-12)


@pytest.mark.parametrize("positions", ["all", "positives_only"])
def test_listmle_is_exact_for_scores_far_apart_in_float32(positions):
    # item 2 is needed (label 1) and 200 below the top: exp underflows, the exact path takes over;
    # item 3 (label 0) is not needed with positives_only and its suffix underflows to 0 there
    s64 = torch.tensor([[100.0, 0.0, -100.0, -300.0], [1.0, 0.5, -150.0, -160.0]], dtype=F64)
    y = torch.tensor([[3.0, 2.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=F64)
    s = s64.float().requires_grad_(True)
    out = listmle(s, y.float(), positions=positions, ties="stable")
    out.loss.sum().backward()
    assert torch.isfinite(s.grad).all()
    for b in range(2):
        want = _listmle_ref(s64[b].tolist(), y[b].tolist(), [0, 1, 2, 3], 1.0, positions)
        assert out.loss[b].item() == pytest.approx(want, rel=1e-6)
    second = s[1:].detach().clone().requires_grad_(True)  # alone: positives_only takes the fast path
    listmle(second, y[1:].float(), positions=positions, ties="stable").loss.sum().backward()
    assert torch.isfinite(second.grad).all()
    assert torch.allclose(second.grad, s.grad[1:], rtol=1e-5, atol=1e-30)


# --- padding, empty lists -------------------------------------------------------------------

FUNCTIONS = {
    "listnet": lambda s, y, m: listnet(s, y, m, tau=0.7),
    "listnet_softmax": lambda s, y, m: listnet(s, y, m, target="softmax"),
    "listmle": lambda s, y, m: listmle(s, y, m, ties="stable"),
    "listmle_all": lambda s, y, m: listmle(s, y, m, positions="all", ties="stable"),
    "listmle_all_presorted": lambda s, y, m: listmle(s, y, m, positions="all", presorted=True),
    "ranknet": lambda s, y, m: ranknet(s, y, m, weighted=True),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_padding_takes_no_part_whatever_its_scores(name):
    scores, labels, mask = _lists(4)
    wild = scores.clone()
    wild[~mask] = torch.tensor([float("inf"), float("-inf"), 1e30, -7.0], dtype=F64).repeat(8)[: int((~mask).sum())]
    wild.requires_grad_(True)
    got = FUNCTIONS[name](wild, labels, mask)
    got.loss.sum().backward()
    assert torch.isfinite(wild.grad).all() and (wild.grad[~mask] == 0).all()
    for b in range(scores.shape[0]):  # the same list without its padding
        cols = mask[b].nonzero().squeeze(1)
        alone = FUNCTIONS[name](scores[b:b + 1, cols], labels[b:b + 1, cols], None)
        assert got.loss[b].item() == pytest.approx(alone.loss.item(), rel=1e-12)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_lists_with_nothing_to_learn_give_zero_and_no_nan_gradient(name):
    scores = torch.tensor([[float("-inf")] * 4, [0.5, float("-inf"), 0.0, 0.0], [0.1, 0.9, -0.3, 0.0],
                           [0.2, 0.4, 0.6, 0.0], [0.3, -0.2, 0.8, float("-inf")]], dtype=F64, requires_grad=True)
    labels = torch.tensor([[0.0, 0, 0, 0], [2, 0, 0, 0], [2, 2, 2, 2], [0, 0, 0, 0], [1, 0, 3, 0]], dtype=F64)
    mask = torch.tensor([[False] * 4, [True, False, False, False], [True] * 4, [True] * 4, [True, True, True, False]])
    out = FUNCTIONS[name](scores, labels, mask)
    assert out.counted.tolist() == [False, False, False, False, True]
    assert (out.loss[:4] == 0).all() and out.loss[4] > 0
    assert out.mean().item() == pytest.approx(out.loss[4].item(), rel=1e-12)
    out.mean().backward()
    assert torch.isfinite(scores.grad).all() and (scores.grad[:4] == 0).all() and (scores.grad[4] != 0).any()


# --- gradients --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["listnet", "listnet_softmax", "listmle", "listmle_random", "ranknet",
                                  "ranknet_chunked"])
def test_gradcheck(name):
    scores, labels, mask = _lists(6, b=4, n=5)
    fns = {
        **FUNCTIONS,
        # a fresh generator per call: gradcheck evaluates many times and must see one permutation
        "listmle_random": lambda s, y, m: listmle(s, y, m, positions="all", generator=torch.Generator().manual_seed(1)),
        "ranknet_chunked": lambda s, y, m: ranknet(s, y, m, sigma=1.5, chunk=30),  # 2 rows per chunk, checkpointed
    }
    s = scores.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: fns[name](x, labels, mask).loss, (s,))


def test_ranknet_chunks_give_the_same_value_and_gradient():
    scores, labels, mask = _lists(7, b=5, n=6)
    a, b = scores.clone().requires_grad_(True), scores.clone().requires_grad_(True)
    whole = ranknet(a, labels, mask)
    chunked = ranknet(b, labels, mask, chunk=36)  # one row per chunk
    whole.loss.sum().backward()
    chunked.loss.sum().backward()
    assert torch.allclose(whole.loss, chunked.loss, rtol=1e-14, atol=0) and torch.allclose(a.grad, b.grad, rtol=1e-14)
    with torch.no_grad():
        assert torch.allclose(ranknet(scores, labels, mask, chunk=1).loss, whole.loss, rtol=1e-14)


# --- ListMLE tie breaking -----------------------------------------------------------------------

def test_listmle_tie_breaking_is_deterministic_per_generator():
    scores, labels, mask = _lists(8, n=12)

    def draw(seed):
        return label_order(labels, mask, "random", torch.Generator().manual_seed(seed))

    assert torch.equal(draw(3), draw(3)) and not torch.equal(draw(3), draw(4))
    one = listmle(scores, labels, mask, positions="all", generator=torch.Generator().manual_seed(3))
    again = listmle(scores, labels, mask, positions="all", generator=torch.Generator().manual_seed(3))
    other = listmle(scores, labels, mask, positions="all", generator=torch.Generator().manual_seed(4))
    assert torch.equal(one.loss, again.loss) and not torch.equal(one.loss, other.loss)


def test_listmle_ties_are_broken_uniformly():
    labels = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]]).repeat(4000, 1)
    first = label_order(labels, torch.ones_like(labels, dtype=torch.bool), "random", torch.Generator().manual_seed(0))
    counts = torch.bincount(first[:, 0], minlength=5).double() / 4000
    assert counts[4] == 0 and torch.allclose(counts[:4], torch.full((4,), 0.25, dtype=F64), atol=0.03)
    assert (first[:, 4] == 4).all()  # the lower label always last


def test_listmle_positives_only_ignores_the_order_of_the_negatives():
    scores, labels, mask = _lists(9, n=10)
    labels = torch.where(labels > 0, labels, torch.zeros_like(labels))
    labels[:, 0], labels[:, 2] = 4.0, 2.0  # relevant items with distinct grades; the zeros tie
    labels[:, 3:] = labels[:, 3:].clamp(max=0.0)
    a = listmle(scores, labels, mask, generator=torch.Generator().manual_seed(0)).loss
    b = listmle(scores, labels, mask, generator=torch.Generator().manual_seed(1)).loss
    assert torch.allclose(a, b, rtol=1e-14)
    c = listmle(scores, labels, mask, positions="all", generator=torch.Generator().manual_seed(0)).loss
    d = listmle(scores, labels, mask, positions="all", generator=torch.Generator().manual_seed(1)).loss
    assert not torch.allclose(c, d)


# --- the registered losses: identities, masking, edge cases -------------------------------------

def _pair_scores(seed, p=6, n=5):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(p, generator=gen, dtype=F64) * 2 - 1, torch.rand(p, n, generator=gen, dtype=F64) * 2 - 1


def _shared(seed):
    """Shared-draw scores: -inf where neg_valid is False; row 3 has no valid negative."""
    pos, neg = _pair_scores(seed)
    valid = torch.ones_like(neg, dtype=torch.bool)
    valid[0, 1] = valid[2, 0] = valid[2, 4] = False
    valid[3] = False
    return pos, neg.masked_fill(~valid, float("-inf")), valid


def _value_and_grads(loss, pos, neg, valid=None):
    p, n = pos.clone().requires_grad_(True), neg.clone().requires_grad_(True)
    value = loss(LossBatch(pos=p, neg=n, neg_valid=valid))
    value.backward()
    return value.item(), p.grad, n.grad


@pytest.mark.parametrize("name,kwargs", [("listnet", {"target": "linear"}),
                                         ("listmle", {"positions": "positives_only"})])
@pytest.mark.parametrize("shared", [False, True])
def test_softmax_like_losses_equal_sl_with_the_self_term(name, kwargs, shared):
    pos, neg, valid = _shared(10) if shared else (*_pair_scores(10), None)
    got = _value_and_grads(build(name, tau=0.1, **kwargs), pos, neg, valid)
    want = _value_and_grads(build("sl", tau=0.1, self_term=True), pos, neg, valid)
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    assert torch.allclose(got[1], want[1], rtol=1e-10) and torch.allclose(got[2], want[2], rtol=1e-10, atol=1e-15)


def test_ranknet_with_sigma_one_is_bpr():
    pos, neg = _pair_scores(11, n=1)
    assert build("ranknet")(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(bpr_loss(pos, neg).item(), rel=1e-12)
    pos, neg = _pair_scores(12, n=4)
    got = build("ranknet", n_negatives=4)(LossBatch(pos=pos, neg=neg))
    assert got.item() == pytest.approx(bpr_loss(pos, neg).item(), rel=1e-12)


@pytest.mark.parametrize("name", ["listnet", "listmle", "ranknet"])
def test_registered_losses_are_the_functional_form_on_the_sampled_list(name):
    pos, neg, valid = _shared(13)
    batch = LossBatch(pos=pos, neg=neg, neg_valid=valid)
    scores, labels, mask = sampled_list(batch)
    assert labels[:, 0].eq(1).all() and labels[:, 1:].eq(0).all() and mask[:, 0].all()
    fn = {"listnet": lambda: listnet(scores, labels, mask, tau=0.3, target="softmax"),
          "listmle": lambda: listmle(scores, labels, mask, tau=0.3, positions="all", ties="stable"),
          "ranknet": lambda: ranknet(scores, labels, mask, sigma=2.0)}[name]
    kwargs = {"listnet": {"tau": 0.3, "target": "softmax"}, "listmle": {"tau": 0.3, "positions": "all"},
              "ranknet": {"sigma": 2.0, "n_negatives": 5}}[name]
    # the pair mean counts a pair without valid negatives as 0 (rows / P), as every loss of the zoo
    assert build(name, **kwargs)(batch).item() == pytest.approx(fn().loss.sum().item() / 6, rel=1e-12)


LOSS_CASES = [("listnet", {}), ("listnet", {"target": "softmax"}), ("listmle", {}), ("listmle", {"positions": "all"}),
              ("ranknet", {"n_negatives": 5}), ("ranknet", {"sigma": 3.0, "n_negatives": 5})]


@pytest.mark.parametrize("name,kwargs", LOSS_CASES)
def test_shared_negatives_masked_equal_the_rows_without_those_columns(name, kwargs):
    pos, neg, valid = _shared(14)
    loss = build(name, **kwargs)
    value, gpos, gneg = _value_and_grads(loss, pos, neg, valid)
    assert math.isfinite(value) and torch.isfinite(gpos).all() and torch.isfinite(gneg).all()
    assert (gneg[~valid] == 0).all() and gpos[3] == 0
    want = 0.0
    for r in range(pos.numel()):
        keep = valid[r]
        if keep.any():
            v, gp, gn = _value_and_grads(loss, pos[r:r + 1], neg[r:r + 1, keep])
            want += v
            assert gpos[r].item() == pytest.approx(gp.item() / 6, rel=1e-10)
            assert torch.allclose(gneg[r, keep], gn[0] / 6, rtol=1e-10)
    assert value == pytest.approx(want / 6, rel=1e-12)


@pytest.mark.parametrize("name,kwargs", LOSS_CASES + [("listnet", {"tau": 0.001}), ("listmle", {"tau": 0.001})])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_all_negatives_win_gives_finite_values_and_pushes_the_positive_up(name, kwargs, dtype):
    pos = torch.full((3,), -1.0, dtype=dtype, requires_grad=True)
    neg = torch.ones(3, 5, dtype=dtype, requires_grad=True)
    value = build(name, **kwargs)(LossBatch(pos=pos, neg=neg))
    value.backward()
    assert torch.isfinite(value) and value > 0
    assert torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
    assert (pos.grad < 0).all() and (neg.grad.sum(1) > 0).all()
    if kwargs.get("positions") != "all":
        assert (neg.grad > 0).all()
    else:  # ListMLE over all positions also ranks the tied negatives: the first listed is pushed up
        assert (neg.grad[:, 0] < 0).all()


def test_defaults_and_negative_sharing():
    net, mle, rn = build("listnet"), build("listmle"), build("ranknet")
    assert (net.tau, net.target, net.n_negatives) == (0.2, "linear", 1000)
    assert (mle.tau, mle.positions, mle.n_negatives) == (0.2, "positives_only", 1000)
    assert (rn.sigma, rn.n_negatives, rn.shares_negatives) == (1.0, 1, False)
    assert build("ranknet", n_negatives=8).shares_negatives and net.shares_negatives and mle.shares_negatives


@pytest.mark.parametrize("call,message", [
    (lambda: build("listnet", target="uniform"), r"loss.target must be one of linear, softmax, got 'uniform'"),
    (lambda: build("listnet", tau=0), r"loss.tau must be > 0, got 0"),
    (lambda: build("listmle", positions="top"), r"loss.positions must be one of positives_only, all, got 'top'"),
    (lambda: build("listmle", tau=-1.0), r"loss.tau must be > 0, got -1.0"),
    (lambda: build("ranknet", sigma=0.0), r"loss.sigma must be > 0, got 0.0"),
    (lambda: build("ranknet", n_negatives=0), r"loss.n_negatives must be >= 1, got 0"),
    (lambda: listmle(torch.zeros(1, 2), torch.zeros(1, 2), ties="first"), r"ties must be one of random, stable"),
    (lambda: ranknet(torch.zeros(1, 2), torch.zeros(1, 2), chunk=0), r"chunk must be >= 1, got 0"),
])
def test_bad_settings_are_config_errors(call, message):
    with pytest.raises(ConfigError, match=message):
        call()
