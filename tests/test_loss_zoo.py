"""PSL, BSL, SL@K, LambdaLoss@K, SONG@K: slow references, gradients, edge cases, estimators."""

import math

import pytest
import torch

from bench.datasets.base import CSR
from bench.losses import LossBatch, TrainData, build
from bench.losses.bsl import bsl_loss
from bench.losses.lambdaloss import exact_ranks, lambda_weights
from bench.losses.psl import psl_loss
from bench.losses.slk import slk_loss
from bench.losses.song import song_g, song_weights
from bench.thresholds import build as build_estimator


def _scores(seed=0, b=5, n=4, lo=-1.0, hi=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, generator=gen, dtype=torch.float64) * (hi - lo) + lo,
            torch.rand(b, n, generator=gen, dtype=torch.float64) * (hi - lo) + lo)


SIGMA = {"tanh": lambda d: math.tanh(d) + 1, "relu": lambda d: max(d + 1, 0.0), "atan": lambda d: math.atan(d) + 1}


# PSL / BSL ---------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["tanh", "relu", "atan"])
def test_psl_matches_the_formula(activation):
    pos, neg = _scores(1)
    tau = 0.1
    want = 0.0
    for i in range(pos.numel()):
        total = sum(SIGMA[activation]((neg[i, j].item() - pos[i].item()) / 2) ** (1 / tau) for j in range(neg.shape[1]))
        want += math.log(total)
    got = build("psl", tau_star=tau, activation=activation)(LossBatch(pos=pos, neg=neg))
    assert got.item() == pytest.approx(want / pos.numel(), rel=1e-9)


def test_bsl_matches_the_formula_and_reduces_to_sl():
    pos, neg = _scores(2)
    want = sum(-pos[i].item() / 0.1 + (0.3 / 0.1) * math.log(sum(math.exp(neg[i, j].item() / 0.3) for j in range(4)))
               for i in range(5)) / 5
    assert bsl_loss(pos, neg, 0.1, 0.3).item() == pytest.approx(want, rel=1e-12)
    sl = build("sl", tau=0.2)(LossBatch(pos=pos, neg=neg))
    assert build("bsl", tau1=0.2, tau2=0.2)(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(sl.item(), rel=1e-12)


# SL@K --------------------------------------------------------------------------------
@pytest.mark.parametrize("self_term", [False, True])
def test_slk_matches_the_formula(self_term):
    pos, neg = _scores(3)
    beta = torch.tensor([0.0, 0.5, -0.3, 0.9, -1.0], dtype=torch.float64)
    want = 0.0
    for i in range(5):
        w = 1 / (1 + math.exp(-(pos[i].item() - beta[i].item()) / 2.5))
        total = sum(math.exp((neg[i, j].item() - pos[i].item()) / 0.2) for j in range(4)) + (1.0 if self_term else 0.0)
        want += w * math.log(total)
    assert slk_loss(pos, neg, beta, 0.2, 2.5, self_term).item() == pytest.approx(want / 5, rel=1e-12)


def test_slk_weight_is_not_detached():
    pos = torch.tensor([0.3], dtype=torch.float64, requires_grad=True)
    neg = torch.tensor([[0.1, 0.2]], dtype=torch.float64)
    beta = torch.tensor([0.3], dtype=torch.float64)
    slk_loss(pos, neg, beta, 0.2, 1.0).backward()
    # d/ds [sigmoid((s-b)/tw) * L(s)] = sigmoid'/tw * L + sigmoid * L'(s)
    lse = math.log(math.exp(-0.2 / 0.2) + math.exp(-0.1 / 0.2))
    p = torch.softmax(torch.tensor([-1.0, -0.5]), 0)
    want = 0.25 * lse + 0.5 * (-1 / 0.2) * float(p.sum())
    assert pos.grad.item() == pytest.approx(want, rel=1e-9)


class _FixedModel:
    """A 'model' with a fixed score matrix (users x items)."""

    def __init__(self, scores):
        self.scores = scores
        self.n_items = scores.shape[1]

    def score_items(self, users, items):
        return self.scores[users.unsqueeze(1), items]

    def score_users(self, users):
        return self.scores[users]


def _train_data(n_users, n_items, positives):
    pairs = torch.tensor([(u, i) for u, items in positives.items() for i in items])
    csr = CSR.from_pairs(pairs, n_users, n_items)
    return TrainData(n_users=n_users, n_items=n_items, train=csr, n_pairs=csr.nnz)


@pytest.mark.parametrize("seed", range(40))
def test_sampled_estimator_never_exceeds_the_exact_kth_score(seed):
    gen = torch.Generator().manual_seed(seed)
    n_users = 6
    n_items = int(torch.randint(8, 60, (1,), generator=gen))  # small catalogues: many duplicates
    scores = torch.randint(0, 6, (n_users, n_items), generator=gen).float()  # ties too
    positives = {u: torch.randperm(n_items, generator=gen)[: int(torch.randint(1, 6, (1,), generator=gen))].tolist()
                 for u in range(n_users)}
    data = _train_data(n_users, n_items, positives)
    model = _FixedModel(scores)
    users = torch.arange(n_users).repeat(3)
    pos_mask = data.train.dense_rows(users)
    negatives = torch.randint(0, n_items, (users.numel(), 200), generator=gen)
    negatives = torch.where(pos_mask.gather(1, negatives), (negatives + 1) % n_items, negatives)  # roughly non-positive
    for k in (1, 3, 5, 20, n_items + 5):
        exact = build_estimator("exact").estimate(model, users, None, k)
        dense = None
        for positives_mode in ("p90", "all"):
            for path in ("dense", "sparse"):
                est = build_estimator("sampled", positives=positives_mode, path=path)
                est.bind(data)
                got = est.estimate(model, users, negatives, k)
                assert (got <= exact).all(), (k, positives_mode, path)
                if path == "dense":
                    dense = got
                else:
                    assert torch.equal(got, dense)  # two computations of the same set statistic
        if k > n_items:
            assert torch.isinf(exact).all() and (exact < 0).all()


def test_sampling_with_replacement_without_dedup_overestimates():
    # one user, catalogue 0..9 with scores 9..0; the K=2 threshold is 8. A sample that
    # holds item 0 (score 9) twice claims a second-best score of 9.
    scores = torch.arange(9, -1, -1).float().unsqueeze(0)
    data = _train_data(1, 10, {0: [9]})
    negatives = torch.tensor([[0, 0, 5]])
    model = _FixedModel(scores)
    exact = build_estimator("exact").estimate(model, torch.tensor([0]), None, 2)
    raw = build_estimator("sampled", dedup=False)
    raw.bind(data)
    assert exact.item() == 8.0
    assert raw.estimate(model, torch.tensor([0]), negatives, 2).item() == 9.0  # overestimates
    for path in ("dense", "sparse"):
        safe = build_estimator("sampled", path=path)
        safe.bind(data)
        assert safe.estimate(model, torch.tensor([0]), negatives, 2).item() == 4.0  # items 0, 5 (score 4)


def test_slk_refreshes_beta_on_schedule_and_equals_sl_when_k_exceeds_the_catalogue():
    loss = build("slk", k=2, t_beta=3, tau_d=0.2, tau_w=1.0, estimator={"name": "exact"}, n_negatives=2,
                 diagnostics_users=0)
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    loss.bind(_train_data(2, 4, {0: [0], 1: [3]}))
    batch = LossBatch(pos=torch.tensor([3.0]), neg=torch.tensor([[2.0, 1.0]]), users=torch.tensor([1]),
                      negatives=torch.tensor([[1, 2]]))
    model = _FixedModel(scores)
    for epoch, refresh in [(0, False), (1, False), (2, True), (3, False)]:
        loss.on_train_epoch_start(epoch)
        loss.beta.zero_()
        loss.after_step(batch, model)
        assert loss.beta.tolist() == ([0.0, 2.0] if refresh else [0.0, 0.0])
    big = build("slk", k=10, estimator={"name": "exact"}, tau_w=1.0, n_negatives=2, diagnostics_users=0)
    big.bind(_train_data(2, 4, {0: [0], 1: [3]}))
    big.on_train_epoch_start(4)
    big.after_step(batch, model)
    assert torch.isinf(big.beta[1]) and big.beta[1] < 0
    pos, neg = torch.tensor([0.2]), torch.tensor([[0.5, -0.1]])
    got = big(LossBatch(pos=pos, neg=neg, users=torch.tensor([1])))
    assert got.item() == pytest.approx(build("sl", tau=0.2)(LossBatch(pos=pos, neg=neg)).item())  # weight 1


# LambdaLoss@K ------------------------------------------------------------------------
def _D(r):
    return 1 / math.log2(1 + r)


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
        rank = lambda s: 1 + sum(1 for x in row if x > s)  # noqa: E731
        for j in range(2):
            pi, pj = rank(pos[b].item()), rank(neg[b, j].item())
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


# SONG@K ------------------------------------------------------------------------------
def test_song_state_updates_and_value_match_the_formulas():
    loss = build("songk", k=2, gamma0=0.5, eta0=0.1, margin=1.0, tau1=0.5, tau2=0.01, n_negatives=2)
    data = _train_data(2, 10, {0: [1, 2, 3], 1: [4]})  # user 1 has a single positive
    loss.bind(data)
    pos = torch.tensor([0.4, 0.1])
    neg = torch.tensor([[0.2, 0.6], [0.0, -0.3]])
    users, pair_ids = torch.tensor([0, 1]), torch.tensor([2, 3])
    got = loss(LossBatch(pos=pos, neg=neg, users=users, pair_ids=pair_ids))
    want, lam_want = 0.0, []
    idcg = {0: 1 + 1 / math.log2(3), 1: 1.0}  # K = 2: min(K, |P_u|) ranks
    for b in range(2):
        listed = [pos[b].item()] + neg[b].tolist()
        g = sum(max(0.0, 1.0 - (pos[b].item() - s)) ** 2 for s in listed) / 3
        u = 0.5 * g
        nabla = 10 / (math.log2(1 + 10 * u) ** 2 * (1 + 10 * u) * math.log(2))
        psi = 1 / (1 + math.exp(-(pos[b].item() - 0.0) / 0.5))
        want += psi * nabla * g / idcg[b]
        lam_want.append(-0.1 * (2 / 10 + 0.0 - sum(1 / (1 + math.exp(-s / 0.5)) for s in listed) / 3))
        assert loss.u[pair_ids[b]].item() == pytest.approx(u, rel=1e-6)
    assert got.item() == pytest.approx(want / 2, rel=1e-5)
    assert loss.lam.tolist() == pytest.approx(lam_want, rel=1e-5)
    assert loss.idcg.tolist() == pytest.approx([idcg[0], idcg[1]], rel=1e-6)


# gradients ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["psl_tanh", "psl_atan", "bsl", "slk", "lambdalossk", "song"])
def test_gradcheck(case):
    pos, neg = _scores(11, lo=-0.9, hi=0.9)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    beta = torch.linspace(-0.5, 0.5, 5, dtype=torch.float64)
    full = torch.rand(5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    frozen = pos.detach().clone()  # gradcheck perturbs the inputs in place
    fns = {
        "psl_tanh": lambda p, n: psl_loss(p, n, 0.25, "tanh"),
        "psl_atan": lambda p, n: psl_loss(p, n, 0.25, "atan"),
        "bsl": lambda p, n: bsl_loss(p, n, 0.2, 0.5),
        "slk": lambda p, n: slk_loss(p, n, beta, 0.2, 1.5, True),
        "lambdalossk": lambda p, n: build("lambdalossk", k=3, n_negatives=4)(
            LossBatch(pos=p, neg=n, users=torch.arange(5), full_scores=lambda r: full[r])),
        # psi and nabla f carry no gradient by design, so they are held fixed here
        "song": lambda p, n: (song_weights(frozen, torch.full((5,), 0.3, dtype=torch.float64),
                                           torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64),
                                           100, 2.0) * song_g(p, n, 1.0)).mean(),
    }
    assert torch.autograd.gradcheck(fns[case], (pos, neg))


def test_every_loss_is_finite_when_all_negatives_beat_the_positive():
    pos = torch.tensor([-1.0, -1.0])
    neg = torch.ones(2, 50)
    data = _train_data(2, 60, {0: [0], 1: [1, 2]})
    full = torch.ones(2, 60)
    for name, kwargs in [("sl", {"tau": 0.01}), ("psl", {"tau_star": 0.005, "activation": "relu"}), ("bsl", {}),
                         ("bpr", {}), ("slk", {"tau_d": 0.01, "diagnostics_users": 0}), ("lambdalossk", {}),
                         ("songk", {})]:
        loss = build(name, n_negatives=50, **kwargs)
        loss.bind(data)
        batch = LossBatch(pos=pos.clone().requires_grad_(True), neg=neg, users=torch.tensor([0, 1]),
                          pair_ids=torch.tensor([0, 1]), negatives=torch.zeros(2, 50, dtype=torch.long),
                          full_scores=lambda r: full[r])
        value = loss(batch)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(batch.pos.grad).all(), name
        assert (batch.pos.grad <= 0).all(), name  # every loss pushes the positive up
