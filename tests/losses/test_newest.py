"""The newest losses (issue 46): gBCE, sampled softmax with logQ and its 2025 correction, CCL, SimCE.
Hand-worked values, brute-force references written from the papers' formulas, gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bench.contracts import LossBatch, TrainData
from bench.datasets.base import CSR
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.gbce import gbce_beta, gbce_terms
from bench.losses.logq import logq_corrected_terms, logq_terms
from bench.losses.margin import ccl_terms, simce_terms
from bench.losses.softmax import softmax_terms


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _data(n_items: int) -> TrainData:
    train = CSR.from_pairs(torch.tensor([[0, 0]]), 1, n_items)
    return TrainData(n_users=1, n_items=n_items, train=train, n_pairs=1)


def test_gbce_by_hand():
    # k = 2 negatives of |I| = 5 items: alpha = 2/4, beta = 1 - 0.75 (1 - 0.5) = 0.625
    assert gbce_beta(0.75, 2, 5) == pytest.approx(0.625)
    assert gbce_beta(0.0, 2, 5) == pytest.approx(1.0) and gbce_beta(1.0, 2, 5) == pytest.approx(0.5)
    loss = build("gbce", t=0.75, n_negatives=2)
    loss.bind(_data(5))
    got = loss(LossBatch(pos=torch.tensor([0.5]), neg=torch.tensor([[0.1, -0.2]])))
    assert float(got) == pytest.approx((0.625 * _softplus(-0.5) + _softplus(0.1) + _softplus(-0.2)) / 3, rel=1e-6)


def test_gbce_is_the_authors_transformed_logit_bce():
    """gSASRec's code: BCE over [gamma(s+), s-] with gamma = log(1 / (sigmoid(s+)^-beta - 1)), mean over k+1."""
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(64, generator=g, dtype=torch.float64), torch.randn(64, 8, generator=g, dtype=torch.float64)
    beta = gbce_beta(0.75, 8, 1000)
    gamma = torch.log(1.0 / (torch.sigmoid(pos).pow(-beta) - 1.0))
    logits = torch.cat([gamma[:, None], neg], 1)
    target = torch.zeros_like(logits)
    target[:, 0] = 1.0
    theirs = F.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(1)
    torch.testing.assert_close(gbce_terms(pos, neg, beta), theirs)
    # t = 0: plain BCE with k negatives, every column weighted alike
    torch.testing.assert_close(gbce_terms(pos, neg, 1.0), (F.softplus(-pos) + F.softplus(neg).sum(1)) / 9)


def test_gbce_masked_columns_count_as_absent():
    pos, neg = torch.tensor([0.3, -0.4]), torch.tensor([[0.2, -1.0, 0.5], [0.1, 0.7, -0.3]])
    valid = torch.tensor([[True, False, True], [True, True, True]])
    masked = gbce_terms(pos, neg.masked_fill(~valid, float("-inf")), 0.5, valid)
    torch.testing.assert_close(masked[0], gbce_terms(pos[:1], neg[:1, [0, 2]], 0.5)[0])
    torch.testing.assert_close(masked[1], gbce_terms(pos[1:], neg[1:], 0.5)[0])


def _logq_reference(pos, neg, lq_pos, lq_neg, tau, correct_positive):
    out = []
    for b in range(pos.numel()):
        positive = pos[b] / tau - (lq_pos[b] if correct_positive else 0.0)
        logits = torch.cat([positive.view(1), neg[b] / tau - lq_neg[b]])
        out.append(-torch.log_softmax(logits, 0)[0])
    return torch.stack(out)


@pytest.mark.parametrize("correct_positive", [True, False])
def test_logq_is_the_corrected_softmax(correct_positive):
    g = torch.Generator().manual_seed(1)
    pos, neg = torch.rand(6, generator=g, dtype=torch.float64), torch.rand(6, 10, generator=g, dtype=torch.float64)
    lq_pos, lq_neg = -5 * torch.rand(6, generator=g, dtype=torch.float64), -5 * torch.rand(6, 10, generator=g,
                                                                                          dtype=torch.float64)
    got = logq_terms(pos, neg, lq_pos, lq_neg, 0.2, correct_positive)
    torch.testing.assert_close(got, _logq_reference(pos, neg, lq_pos, lq_neg, 0.2, correct_positive))


def test_logq_with_uniform_draws_is_infonce():
    g = torch.Generator().manual_seed(2)
    pos, neg = torch.rand(5, generator=g), torch.rand(5, 7, generator=g)
    constant = torch.full((5,), -math.log(300.0))
    got = logq_terms(pos, neg, constant, constant[:, None].expand(5, 7), 0.1)
    torch.testing.assert_close(got, softmax_terms(pos, neg, 0.1, self_term=True))


def test_corrected_logq_by_the_formula_and_its_weight_carries_no_gradient():
    g = torch.Generator().manual_seed(3)
    pos = torch.rand(4, generator=g, dtype=torch.float64, requires_grad=True)
    neg = torch.rand(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    lq = -4 * torch.rand(4, 6, generator=g, dtype=torch.float64)
    tau = 0.5
    zi, zj = pos / tau, neg / tau - lq
    bracket = torch.logsumexp(zj, 1) - zi
    p_hat = torch.exp(zi) / (torch.exp(zi) + torch.exp(zj).sum(1) / 6)
    got = logq_corrected_terms(pos, neg, lq, tau)
    torch.testing.assert_close(got, (1 - p_hat) * bracket)
    (grad_pos,) = torch.autograd.grad(got.sum(), pos)
    (bracket_grad,) = torch.autograd.grad(bracket.sum(), pos)
    torch.testing.assert_close(grad_pos, (1 - p_hat.detach()) * bracket_grad)


def test_corrected_logq_weight_is_the_full_softmax_probability_when_the_draw_is_every_other_item_once():
    # n negatives, each of the n other items once, with Q'(j) = 1/n: the importance-sampled sum is exact
    scores = torch.tensor([0.4, 0.1, -0.3, 0.9])  # item 0 the positive
    n = 3
    lq = torch.full((1, n), -math.log(n))
    got = logq_corrected_terms(scores[:1], scores[None, 1:], lq, 1.0)
    p = torch.softmax(scores, 0)[0]
    bracket = torch.logsumexp(scores[1:] + math.log(n), 0) - scores[0]
    torch.testing.assert_close(got[0], (1 - p) * bracket)


def test_ccl_and_simce_by_hand():
    pos, neg = torch.tensor([0.8]), torch.tensor([[0.95, 0.5, 0.92]])
    # relu(1 - 0.8) + 2 * mean(0.05, 0, 0.02); without a weight the sum
    assert float(ccl_terms(pos, neg, 0.9, 2.0)[0]) == pytest.approx(0.2 + 2 * 0.07 / 3)
    assert float(ccl_terms(pos, neg, 0.9, None)[0]) == pytest.approx(0.2 + 0.07)
    assert float(simce_terms(torch.tensor([2.0]), torch.tensor([[1.5, 2.5, 0.0]]), 1.0)[0]) == pytest.approx(1.5)
    assert float(simce_terms(torch.tensor([2.0]), torch.tensor([[1.0, 0.5]]), 0.0)[0]) == 0.0
    # a masked column (shared draws) is neither the hardest negative nor above the margin
    masked = torch.tensor([[float("-inf"), 0.95]])
    valid = torch.tensor([[False, True]])
    assert float(ccl_terms(pos, masked, 0.9, 2.0, valid)[0]) == pytest.approx(0.2 + 2 * 0.05)
    assert float(simce_terms(pos, masked, 0.1)[0]) == pytest.approx(0.1 - 0.8 + 0.95)


@pytest.mark.parametrize("name,kwargs", [("gbce", {"n_negatives": 5}), ("ccl", {"n_negatives": 5, "margin": 0.1}),
                                         ("simce", {"n_negatives": 5}), ("logq", {"n_negatives": 5})])
def test_gradcheck(name, kwargs):
    # logq_corrected's weight is a stop-gradient, so its gradient is not its value's derivative on purpose;
    # test_corrected_logq_by_the_formula_and_its_weight_carries_no_gradient checks it instead
    loss = build(name, **kwargs)
    loss.bind(_data(50))
    g = torch.Generator().manual_seed(4)
    pos = (0.5 * torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_(True)
    # scores apart from each other and from the margins, where the hinges are differentiable
    neg = (torch.linspace(-0.9, 0.6, 15, dtype=torch.float64).view(3, 5) + 0.013).requires_grad_(True)
    lq = -3 * torch.rand(3, 5, generator=g, dtype=torch.float64)

    def value(p, n):
        return loss(LossBatch(pos=p, neg=n, pos_log_q=-torch.ones(3, dtype=torch.float64), neg_log_q=lq))

    assert torch.autograd.gradcheck(value, (pos, neg))


def test_settings_out_of_range_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"loss.t must be in \[0, 1\]"):
        build("gbce", t=1.5)
    with pytest.raises(ConfigError, match=r"loss.margin must be in \[-1, 1\]"):
        build("ccl", margin=2)
    with pytest.raises(ConfigError, match="loss.tau must be > 0"):
        build("logq_corrected", tau=0)
    with pytest.raises(ValueError, match="needs LossBatch.neg_log_q"):
        build("logq")(LossBatch(pos=torch.zeros(1), neg=torch.zeros(1, 2), pos_log_q=torch.zeros(1)))


@pytest.mark.parametrize("loss,negatives", [("logq_corrected", "per_pair"), ("logq", "shared"), ("gbce", "per_pair"),
                                            ("ccl", "shared"), ("simce", "per_pair")])
def test_a_run_trains_each_with_popularity_negatives(make_cfg, tiny, tmp_path, loss, negatives):
    from bench.run import train_and_test

    cfg = make_cfg([*tiny, f"loss={loss}", "loss.n_negatives=20", "train.sampler=popularity",
                    "train.popularity_power=0.75", f"train.negatives={negatives}", "trainer.max_epochs=2"], tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed" and res.test["ndcg@20"] > 0
    assert all(math.isfinite(h["train/loss"]) for h in res.history if "train/loss" in h)


def test_talos_ranking_term_by_the_formula():
    from bench.losses.talos import talos_terms

    pos, neg, beta, tau = torch.tensor([0.5]), torch.tensor([[0.2, -0.1]]), torch.tensor([0.1]), 0.5

    def s_tau(x: float) -> float:  # sigmoid(x)^(1/tau)
        return (1 / (1 + math.exp(-x))) ** (1 / tau)

    expected = -math.log(s_tau(0.4) / (s_tau(0.1) + s_tau(-0.2)))
    assert float(talos_terms(pos, neg, beta, tau)[0]) == pytest.approx(expected, rel=1e-6)


def test_talos_quantile_regression_is_the_full_pinball_loss_when_the_sample_is_every_non_positive():
    from bench.losses.talos import pinball, quantile_terms

    scores = torch.linspace(-1, 1, 12, dtype=torch.float64)  # 12 items, positives 3 and 7
    positives = torch.tensor([3, 7])
    others = torch.tensor([i for i in range(12) if i not in (3, 7)])
    beta = torch.tensor([0.15], dtype=torch.float64)
    got = quantile_terms(scores[positives][None], torch.ones(1, 2, dtype=torch.bool), scores[others][None], beta, 3, 12)
    # w_u = (12 - 2) / 10 = 1: the sum of the pinball loss over all items, over |I|
    torch.testing.assert_close(got[0], pinball(scores - 0.15, 3 / 12).sum() / 12)


def test_talos_threshold_learns_the_rank_k_score_and_only_from_the_quantile_term():
    from bench.losses.talos import Talos

    n_items, k = 40, 5
    train = CSR.from_pairs(torch.tensor([[0, 0], [0, 1]]), 1, n_items)
    loss = Talos(k=k, tau=0.2, beta_lr=0.05, n_negatives=n_items - 2)
    loss.bind(TrainData(n_users=1, n_items=n_items, train=train, n_pairs=2))
    scores = torch.linspace(1.0, -1.0, n_items)  # item r has the (r+1)-th largest score

    class Fixed:  # a scorer with fixed scores
        def score_items(self, users, items):
            return scores[items]

    (group,) = loss.optimizer_groups({"lr": 0.1})
    assert group["params"] == [loss.beta] and group["lr"] == 0.05 and group["weight_decay"] == 0.0
    opt = torch.optim.Adam([loss.beta], lr=0.05)
    pos = scores[:1].clone().requires_grad_(True)
    neg = scores[2:][None].clone().requires_grad_(True)
    for _ in range(400):
        opt.zero_grad()
        value = loss(LossBatch(pos=pos, neg=neg, users=torch.tensor([0]), scorer=Fixed()))
        value.backward()
        opt.step()
    # the minimiser of the pinball loss for the (1 - K/|I|) quantile lies between the K-th and (K+1)-th scores
    assert float(scores[k]) - 0.02 <= float(loss.beta.detach()[0]) <= float(scores[k - 1]) + 0.02
    # the model's scores get the ranking term's gradient only (the threshold detached there)
    from bench.losses.talos import talos_terms

    (expected,) = torch.autograd.grad(talos_terms(pos, neg, loss.beta[[0]].detach(), 0.2).mean(), pos)
    (got,) = torch.autograd.grad(loss(LossBatch(pos=pos, neg=neg, users=torch.tensor([0]), scorer=Fixed())), pos)
    torch.testing.assert_close(got, expected)


def test_talos_refuses_sequences(train_data):
    from bench.losses.talos import Talos

    data = train_data(2, 10, {0: [0], 1: [1]})
    seq = TrainData(n_users=2, n_items=10, train=data.train, n_pairs=2, sequences=object())
    with pytest.raises(ConfigError, match="loss=talos learns one threshold per user"):
        Talos().bind(seq)


def test_a_talos_run_trains(make_cfg, tiny, tmp_path):
    from bench.run import train_and_test

    cfg = make_cfg([*tiny, "loss=talos", "loss.n_negatives=20", "trainer.max_epochs=2"], tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed" and res.test["ndcg@20"] > 0


def _queries(p=6, n_items=9, d=4, cosine=False, seed=5):
    from bench.contracts import Queries

    g = torch.Generator().manual_seed(seed)
    vectors = torch.randn(p, d, generator=g, dtype=torch.float64, requires_grad=True)
    table = torch.randn(n_items, d, generator=g, dtype=torch.float64, requires_grad=True)
    items = torch.randint(0, n_items, (p,), generator=g)
    queries = Queries(users=torch.arange(p), items=items, pair_ids=torch.arange(p), vectors=vectors, item_emb=table,
                      cosine=cosine)
    return queries, queries.score(items[:, None])[:, 0]


def test_sce_with_one_bucket_holding_everything_is_the_full_cross_entropy():
    from bench.losses.sce import sce_loss

    queries, pos = _queries()
    got = sce_loss(queries, pos, n_buckets=1, bucket_size_x=6, bucket_size_y=9, generator=torch.Generator())
    full = queries.vectors @ queries.item_emb.T
    torch.testing.assert_close(got, F.cross_entropy(full, queries.items))


def _sce_reference(queries, pos, n_b, bx, by, tau, generator):
    """The four steps written out, one bucket and one position at a time."""
    x, w, d = queries.vectors, queries.item_emb, queries.vectors.shape[1]
    centres = torch.randn(n_b, d, generator=generator, dtype=x.dtype) * d ** -0.25
    worst = {}
    for b in range(n_b):
        rows = sorted(range(x.shape[0]), key=lambda r: -float(centres[b] @ x[r]))[:bx]
        cands = sorted(range(w.shape[0]), key=lambda j: -float(centres[b] @ w[j]))[:by]
        for r in rows:
            logits = [float(pos[r]) / tau] + [float(x[r] @ w[j]) / tau for j in cands if j != int(queries.items[r])]
            value = float(torch.logsumexp(torch.tensor(logits), 0)) - float(pos[r]) / tau
            worst[r] = max(worst.get(r, -math.inf), value)
    return sum(worst.values()) / len(worst)


def test_sce_equals_its_steps_written_out():
    from bench.losses.sce import sce_loss

    queries, pos = _queries(p=10, n_items=15, d=5)
    got = sce_loss(queries, pos, 3, 4, 5, tau=0.7, generator=torch.Generator().manual_seed(9))
    assert float(got) == pytest.approx(_sce_reference(queries, pos, 3, 4, 5, 0.7, torch.Generator().manual_seed(9)))
    got.backward()  # the gradient reaches the query vectors and the chosen items' rows only
    assert queries.vectors.grad is not None and torch.isfinite(queries.item_emb.grad).all()


def test_a_sce_run_trains(make_cfg, tiny, tmp_path):
    from bench.run import train_and_test

    cfg = make_cfg([*tiny, "loss=sce", "loss.bucket_size_y=16", "trainer.max_epochs=2"], tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed" and res.test["ndcg@20"] > 0


def test_a_row_without_a_valid_negative_contributes_nothing():
    from bench.losses.talos import talos_terms

    pos, neg = torch.tensor([0.3, 0.2]), torch.tensor([[float("-inf"), float("-inf")], [0.1, float("-inf")]])
    valid = torch.tensor([[False, False], [True, False]])
    lq = torch.zeros(2, 2)
    assert float(logq_terms(pos, neg, torch.zeros(2), lq, 0.5, valid=valid)[0]) == 0.0
    assert float(talos_terms(pos, neg, torch.zeros(2), 0.5, valid)[0]) == 0.0
    assert float(logq_corrected_terms(pos, neg, lq, 0.5, valid)[0]) == 0.0
    assert float(logq_terms(pos, neg, torch.zeros(2), lq, 0.5, valid=valid)[1]) > 0


def test_sce_needs_two_items_a_bucket():
    with pytest.raises(ConfigError, match="loss.bucket_size_y must be an integer >= 2"):
        build("sce", bucket_size_y=1)
