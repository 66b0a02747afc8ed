"""LambdaLoss@K, LambdaLoss (NDCG-Loss2) and LambdaRank: the formulas with exact and sampled ranks, ties,
masked shared negatives, gradients and bad switches."""

import dataclasses
import math

import pytest
import torch

from bench.contracts import LossBatch, TrainData
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.lambdaloss import exact_ranks, lambda_weights, lambdarank_weights


def _D(r):
    return 1 / math.log2(1 + r)


def _rank(row, s):
    """1 + #{items scoring strictly higher than s}."""
    return 1 + sum(1 for x in row if x > s)


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_lambdaloss_matches_the_formula_with_exact_ranks(variant):
    gen = torch.Generator().manual_seed(5)
    full = torch.randn(3, 30, generator=gen, dtype=torch.float64)
    users = torch.tensor([0, 1, 2, 1])
    items = torch.tensor([4, 7, 29, 0])
    negs = torch.tensor([[1, 2], [3, 8], [0, 5], [9, 11]])
    pos, neg = full[users, items], full[users.unsqueeze(1), negs]
    k = 5
    want = 0.0
    for b in range(4):
        row = full[users[b]].tolist()
        for j in range(2):
            pi, pj = _rank(row, pos[b].item()), _rank(row, neg[b, j].item())
            gap = max(abs(pi - pj), 1)
            top = max(pi, pj)
            if variant == "paper":
                delta, mu = abs(_D(gap) - _D(gap + 1)), 1 / (1 - _D(top))
            else:
                delta, mu = _D(gap), 1 / (1 - 1 / top)
            w = delta * mu if top > k else delta
            want += w * math.log1p(math.exp(neg[b, j].item() - pos[b].item()))
    loss = build("lambdalossk", k=k, variant=variant, n_negatives=2, chunk=2)
    got = loss(LossBatch(pos=pos, neg=neg, users=users, full_scores=lambda r: full[users[r]]))
    assert got.item() == pytest.approx(want / 8, rel=1e-9)


def test_lambdaloss_ranks_ties_and_k_beyond_the_catalogue():
    full = torch.tensor([[1.0, 1.0, 0.5, 0.0]])
    assert exact_ranks(full, torch.tensor([[1.0, 0.5, 0.0, 2.0]])).tolist() == [[1.0, 3.0, 4.0, 1.0]]
    # tied ranks: the gap counts as 1 (finite weight); K >= every rank: mu never applies
    w = lambda_weights(torch.tensor([[1.0]]), torch.tensor([[1.0, 3.0]]), k=100)
    assert torch.isfinite(w).all()
    assert w[0, 1].item() == pytest.approx(abs(_D(2) - _D(3)))


def test_lambdaloss_sampled_ranks_scale_to_the_catalogue():
    loss = build("lambdalossk", k=1, ranks="sampled", n_negatives=3)
    loss.bind(TrainData(n_users=1, n_items=400, train=None, n_pairs=0))
    pos, neg = torch.tensor([0.5], dtype=torch.float64), torch.tensor([[0.9, 0.1, 0.7]], dtype=torch.float64)
    got = loss(LossBatch(pos=pos, neg=neg))
    assert loss(LossBatch(pos=pos.float(), neg=neg.float())).item() == pytest.approx(got.item(), rel=1e-5)
    # within-sample ranks: pos 3, negs 1, 4, 2; scaled by 400 / 4 = 100
    want = 0.0
    for rj, s in [(100, 0.9), (400, 0.1), (200, 0.7)]:
        gap, top = abs(300 - rj), max(300, rj)
        want += abs(_D(gap) - _D(gap + 1)) / (1 - _D(top)) * math.log1p(math.exp(s - 0.5))
    assert got.item() == pytest.approx(want / 3, rel=1e-6)


# LambdaLoss (NDCG-Loss2, no K) and LambdaRank ----------------------------------------------

def _weight(name, pi, pj, variant="paper"):
    """The pair weight, straight from the formulas (ranks 1 = best, ties as a gap of 1)."""
    if name == "lambdarank":  # |D(pi_i) - D(pi_j)|; tied items still hold two adjacent places
        lo = min(pi, pj)
        return abs(_D(lo) - _D(max(pi, pj, lo + 1)))
    gap = max(abs(pi - pj), 1)
    return abs(_D(gap) - _D(gap + 1)) if variant == "paper" else _D(gap)


def _loop(name, pos, neg, *, full=None, users=None, valid=None, n_items=None, variant="paper", idcg=None):
    """Mean over the valid (pair, negative) entries of weight * softplus(s_uj - s_ui), with
    exact ranks from ``full[users[b]]`` or, when ``full`` is None, ranks within the valid list
    scaled by n_items / (1 + #valid)."""
    total, count = 0.0, 0
    for b in range(pos.numel()):
        keep = [j for j in range(neg.shape[1]) if valid is None or valid[b, j]]
        s_i, s_js = pos[b].item(), [neg[b, j].item() for j in keep]
        if full is not None:
            row = full[users[b]].tolist()
            scale = 1
        else:
            row = [s_i, *s_js]
            scale = n_items / len(row)
        for s_j in s_js:
            w = _weight(name, _rank(row, s_i) * scale, _rank(row, s_j) * scale, variant)
            if idcg is not None:
                w /= idcg[int(users[b])]
            total += w * math.log1p(math.exp(s_j - s_i))
            count += 1
    return total / max(count, 1)


def _exact_case(seed=5):
    gen = torch.Generator().manual_seed(seed)
    full = torch.randn(3, 30, generator=gen, dtype=torch.float64)
    users = torch.tensor([0, 1, 2, 1, 0])
    items = torch.tensor([4, 7, 29, 0, 13])
    negs = torch.tensor([[1, 2, 3], [3, 8, 20], [0, 5, 6], [9, 11, 7], [4, 12, 28]])
    return full, users, full[users, items], full[users.unsqueeze(1), negs]


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_untruncated_lambdaloss_matches_the_formula_with_exact_ranks(variant):
    full, users, pos, neg = _exact_case()
    batch = LossBatch(pos=pos, neg=neg, users=users, full_scores=lambda r: full[users[r]])
    got = build("lambdaloss", variant=variant, n_negatives=3, chunk=2)(batch)
    assert got.item() == pytest.approx(_loop("lambdaloss", pos, neg, full=full, users=users, variant=variant),
                                       rel=1e-12)
    # no mu: LambdaLoss@K with K beyond every rank is the same loss; with a small K it is not
    assert build("lambdalossk", k=31, variant=variant, n_negatives=3)(batch).item() == pytest.approx(got.item())
    assert build("lambdalossk", k=2, variant=variant, n_negatives=3)(batch).item() > got.item() * 1.01


@pytest.mark.parametrize("idcg", [False, True])
def test_lambdarank_matches_the_formula_with_exact_ranks(idcg, train_data):
    full, users, pos, neg = _exact_case(7)
    loss = build("lambdarank", idcg=idcg, n_negatives=3, chunk=3)
    loss.bind(train_data(3, 30, {0: [4, 13], 1: [0, 7, 9, 10, 11], 2: [29]}))
    ideal = {0: _D(1) + _D(2), 1: sum(_D(r) for r in range(1, 6)), 2: 1.0} if idcg else None
    got = loss(LossBatch(pos=pos, neg=neg, users=users, full_scores=lambda r: full[users[r]]))
    assert got.item() == pytest.approx(_loop("lambdarank", pos, neg, full=full, users=users, idcg=ideal), rel=1e-12)


def test_lambdarank_idcg_of_a_sequential_prefix_is_one(train_data):
    # SASRec rows are history prefixes with one relevant item each (the next), whatever the
    # user's history length: idcg=true divides by 1
    full, users, pos, neg = _exact_case(7)
    data = train_data(3, 30, {0: [4, 13], 1: [0, 7, 9, 10, 11], 2: [29]})
    batch = LossBatch(pos=pos, neg=neg, users=users, full_scores=lambda r: full[users[r]])
    values = []
    for idcg, sequences in [(False, None), (True, object()), (True, None)]:
        loss = build("lambdarank", idcg=idcg, n_negatives=3)
        loss.bind(dataclasses.replace(data, sequences=sequences))
        values.append(loss(batch).item())
    assert values[1] == values[0] and values[2] < values[0] * 0.9


def test_lambdarank_by_hand():
    # ranks in [3, 2, 1, 0]: the positive (score 1) is 3rd, the negative (score 2) 2nd
    full = torch.tensor([[3.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    batch = LossBatch(pos=torch.tensor([1.0], dtype=torch.float64), neg=torch.tensor([[2.0]], dtype=torch.float64),
                      users=torch.tensor([0]), full_scores=lambda r: full[r])
    want = (1 / math.log2(3) - 1 / 2) * math.log1p(math.e)
    assert build("lambdarank")(batch).item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("name,options", [("lambdaloss", {"variant": "paper"}),
                                          ("lambdaloss", {"variant": "reference_code"}),
                                          ("lambdarank", {})])
def test_sampled_ranks_are_ranks_within_the_list_scaled_to_the_catalogue(name, options):
    gen = torch.Generator().manual_seed(3)
    pos, neg = torch.randn(4, generator=gen, dtype=torch.float64), torch.randn(4, 6, generator=gen, dtype=torch.float64)
    loss = build(name, ranks="sampled", n_negatives=6, **options)
    loss.bind(TrainData(n_users=4, n_items=350, train=None, n_pairs=0))
    got = loss(LossBatch(pos=pos, neg=neg))  # no full rows needed
    assert got.item() == pytest.approx(_loop(name, pos, neg, n_items=350, **options), rel=1e-12)


def test_lambdarank_sampled_ranks_by_hand():
    # within-list ranks: pos 3, negs 1, 4, 2; scaled by 400 / 4 = 100
    loss = build("lambdarank", ranks="sampled", n_negatives=3)
    loss.bind(TrainData(n_users=1, n_items=400, train=None, n_pairs=0))
    pos, neg = torch.tensor([0.5], dtype=torch.float64), torch.tensor([[0.9, 0.1, 0.7]], dtype=torch.float64)
    want = sum(abs(_D(300) - _D(rj)) * math.log1p(math.exp(s - 0.5)) for rj, s in [(100, 0.9), (400, 0.1), (200, 0.7)])
    assert loss(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(want / 3, rel=1e-12)


@pytest.mark.parametrize("name", ["lambdaloss", "lambdarank"])
@pytest.mark.parametrize("ranks", ["exact", "sampled"])
def test_gradcheck_with_ranks_held_as_constants(name, ranks):
    gen = torch.Generator().manual_seed(11)
    full = torch.linspace(-1.0, 1.0, 9, dtype=torch.float64).repeat(5, 1)  # spaced 0.25: perturbations keep ranks
    pos = (torch.rand(5, generator=gen, dtype=torch.float64) * 1.6 - 0.8).requires_grad_(True)
    neg = (torch.rand(5, 4, generator=gen, dtype=torch.float64) * 1.6 - 0.8).requires_grad_(True)
    loss = build(name, ranks=ranks, n_negatives=4)
    loss.bind(TrainData(n_users=5, n_items=9, train=None, n_pairs=0))
    fn = lambda p, n: loss(LossBatch(pos=p, neg=n, users=torch.arange(5), full_scores=lambda r: full[r]))  # noqa: E731
    assert torch.autograd.gradcheck(fn, (pos, neg))


def test_ties_give_finite_weights_of_adjacent_places():
    rank = torch.tensor([[4.0]], dtype=torch.float64)
    tied = torch.tensor([[4.0, 4.5, 1.0]], dtype=torch.float64)
    w = lambdarank_weights(rank, tied)
    assert torch.isfinite(w).all() and (w > 0).all()
    assert w[0].tolist() == pytest.approx([_D(4) - _D(5), _D(4) - _D(5), _D(1) - _D(4)], rel=1e-12)
    for variant in ("paper", "reference_code"):  # the reference code's D(0) = inf is avoided
        w = lambda_weights(rank, tied, None, variant)
        assert torch.isfinite(w).all() and w[0, 0] == w[0, 1]
        assert w[0, 0].item() == pytest.approx(_weight("lambdaloss", 4, 5, variant), rel=1e-12)
    # equal scores share the better rank: both the positive and the negative are 1st
    full = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    batch = LossBatch(pos=torch.tensor([1.0], dtype=torch.float64), neg=torch.tensor([[1.0]], dtype=torch.float64),
                      users=torch.tensor([0]), full_scores=lambda r: full[r])
    assert build("lambdarank")(batch).item() == pytest.approx((_D(1) - _D(2)) * math.log(2), rel=1e-12)


def test_deep_rank_weights_keep_their_digits_in_float32():
    lo, hi = torch.tensor([40000.0]), torch.tensor([40003.0])
    want = _D(40000) - _D(40003)
    assert lambdarank_weights(lo, hi).item() == pytest.approx(want, rel=1e-5)  # the plain difference: ~10% off


@pytest.mark.parametrize("name", ["lambdaloss", "lambdarank"])
@pytest.mark.parametrize("ranks", ["exact", "sampled"])
def test_all_negatives_win(name, ranks, train_data):
    full = torch.ones(2, 60)
    pos = torch.tensor([-1.0, -1.0], requires_grad=True)
    options = {"idcg": True} if name == "lambdarank" else {"variant": "reference_code"}
    loss = build(name, ranks=ranks, n_negatives=50, **options)
    loss.bind(train_data(2, 60, {0: [0], 1: [1, 2]}))
    value = loss(LossBatch(pos=pos, neg=torch.ones(2, 50), users=torch.tensor([0, 1]), full_scores=lambda r: full[r]))
    value.backward()
    assert torch.isfinite(value) and value.item() > 0
    assert torch.isfinite(pos.grad).all() and (pos.grad < 0).all()


@pytest.mark.parametrize("name,options", [("lambdaloss", {"variant": "paper"}),
                                          ("lambdaloss", {"variant": "reference_code"}),
                                          ("lambdalossk", {"k": 3}),
                                          ("lambdarank", {}), ("lambdarank", {"idcg": True})])
@pytest.mark.parametrize("ranks", ["exact", "sampled"])
def test_masked_shared_columns_count_as_removed(name, options, ranks, train_data):
    gen = torch.Generator().manual_seed(2)
    full = torch.randn(4, 40, generator=gen, dtype=torch.float64)
    users = torch.tensor([0, 1, 2, 3])
    pos = full[users, torch.tensor([0, 1, 2, 3])]
    kept = full[users.unsqueeze(1), torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13], [14, 15, 16]])]
    # each row gets one masked column (one of its own positives in a shared draw), in different places
    where = [0, 3, 1, 2]
    neg = torch.stack([torch.cat([k[:c], torch.tensor([float("-inf")], dtype=torch.float64), k[c:]])
                       for k, c in zip(kept, where, strict=True)]).requires_grad_(True)
    valid = torch.isfinite(neg)
    data = train_data(4, 40, {0: [0, 30], 1: [1], 2: [2, 31, 32], 3: [3]})

    def value(n, v, rows=users):
        loss = build(name, ranks=ranks, n_negatives=n.shape[1], **options)
        loss.bind(data)
        return loss(LossBatch(pos=pos[rows], neg=n, users=users[rows], full_scores=lambda r: full[users[rows][r]],
                              neg_valid=v))

    masked = value(neg, valid)
    assert masked.item() == pytest.approx(value(kept, None).item(), rel=1e-12)
    masked.backward()
    assert torch.isfinite(neg.grad).all() and (neg.grad[~valid] == 0).all()
    # a row with no true negative at all adds nothing, and no NaN
    empty = neg.detach().clone()
    empty[1] = float("-inf")
    empty.requires_grad_(True)
    got = value(empty, torch.isfinite(empty))
    got.backward()
    assert torch.isfinite(empty.grad).all() and (empty.grad[1] == 0).all()
    rest = torch.tensor([0, 2, 3])
    assert got.item() == pytest.approx(value(kept[rest], None, rest).item(), rel=1e-12)


@pytest.mark.parametrize("name,options,message", [
    ("lambdaloss", {"variant": "cod"}, r"loss.variant='cod' is not a LambdaLoss variant; use paper or reference_code"),
    ("lambdalossk", {"variant": "x"}, r"loss.variant='x' is not a LambdaLoss@K variant"),
    ("lambdaloss", {"ranks": "full"}, r"loss.ranks='full' is not a LambdaLoss rank source; use exact or sampled"),
    ("lambdarank", {"ranks": "approx"}, r"loss.ranks='approx' is not a LambdaRank rank source"),
    ("lambdarank", {"idcg": "yes"}, r"loss.idcg must be true or false, got 'yes'"),
    ("lambdarank", {"chunk": 0}, r"loss.chunk must be >= 1, got 0"),
    ("lambdalossk", {"k": 0}, r"loss.k must be >= 1 for LambdaLoss@K, got 0"),
    ("lambdaloss", {"n_negatives": 0}, r"loss.n_negatives must be >= 1"),
])
def test_bad_switches_are_refused(name, options, message):
    with pytest.raises(ConfigError, match=message):
        build(name, **options)


def test_exact_ranks_need_full_rows_and_idcg_needs_the_training_data():
    pos, neg = torch.zeros(1), torch.zeros(1, 1)
    with pytest.raises(ConfigError, match=r"LambdaRank with loss.ranks=exact needs full score rows"):
        build("lambdarank")(LossBatch(pos=pos, neg=neg))
    with pytest.raises(ValueError, match=r"needs bind\(data\) first"):
        build("lambdarank", idcg=True, ranks="sampled")(LossBatch(pos=pos, neg=neg, users=torch.tensor([0])))
