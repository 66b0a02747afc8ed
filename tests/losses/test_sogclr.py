"""SogCLR: the moving average by hand, SogCLR's gradient and the logged softmax value against loops,
stability in log space, shared-negative masking, state and config."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.sogclr import sogclr_loss, sogclr_terms


def _batch(pos, neg, users, valid=None):
    return LossBatch(pos=pos, neg=neg, users=torch.tensor(users), neg_valid=valid)


def _bound(train_data, n_users=3, **kwargs):
    loss = build("sogclr", **kwargs)
    loss.bind(train_data(n_users, 40, {u: [u] for u in range(n_users)}))
    return loss


def _slow(pos, neg, users, g_old, tau, gamma, valid=None):
    """Loops from the formulas: (value, d value / d pos, d / d neg, g after the step) with
    g_hat_u pooled over all valid entries of u's rows and g_old[u] = None for a first visit."""
    p, n = len(pos), len(neg[0])
    ok = [[valid is None or valid[r][j] for j in range(n)] for r in range(p)]
    g = dict(g_old)
    for u in set(users):
        e = [math.exp(neg[r][j] / tau) for r in range(p) if users[r] == u for j in range(n) if ok[r][j]]
        if e:
            ghat = sum(e) / len(e)
            g[u] = ghat if g.get(u) is None else (1 - gamma) * g[u] + gamma * ghat
    value, dpos, dneg = 0.0, [0.0] * p, [[0.0] * n for _ in range(p)]
    for r in range(p):
        js = [j for j in range(n) if ok[r][j]]
        if not js:
            continue
        value += math.log(sum(math.exp((neg[r][j] - pos[r]) / tau) for j in js)) / p
        dpos[r] = -1 / (tau * p)
        for j in js:
            dneg[r][j] = math.exp(neg[r][j] / tau) / (tau * len(js) * g[users[r]] * p)
    return value, dpos, dneg, g


def test_moving_average_by_hand_over_two_batches_that_share_a_user(train_data):
    loss = _bound(train_data, tau=1.0, gamma=0.5, n_negatives=2)
    ln = math.log
    # batch 1: user 0 twice (e^s = 2, 4 and 6, 8), user 1 once (1, 3): first visits start at the estimate
    neg1 = torch.tensor([[ln(2), ln(4)], [ln(6), ln(8)], [ln(1), ln(3)]], dtype=torch.float64)
    loss(_batch(torch.zeros(3, dtype=torch.float64), neg1, [0, 0, 1]))
    assert loss.log_g.exp().tolist()[:2] == pytest.approx([5.0, 2.0], rel=1e-6)  # (2+4+6+8)/4, (1+3)/2
    assert math.isinf(loss.log_g[2].item()) and loss.log_g[2].item() < 0  # user 2 not seen yet
    # batch 2: user 0 again (1, 3): g_0 = 0.5 * 5 + 0.5 * 2 = 3.5; user 2 first seen (10, 10)
    neg2 = torch.tensor([[ln(1), ln(3)], [ln(10), ln(10)]], dtype=torch.float64, requires_grad=True)
    loss(_batch(torch.zeros(2, dtype=torch.float64), neg2, [0, 2])).backward()
    assert loss.log_g.exp().tolist() == pytest.approx([3.5, 2.0, 10.0], rel=1e-6)
    # gradient with the updated g_0: e^{s_j} / (tau * N * g_0 * P)
    assert neg2.grad[0].tolist() == pytest.approx([1 / (2 * 3.5 * 2), 3 / (2 * 3.5 * 2)], rel=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_value_is_the_softmax_loss_and_gradient_is_sogclrs(train_data, masked):
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(6, generator=gen, dtype=torch.float64) * 2 - 1
    neg = torch.rand(6, 5, generator=gen, dtype=torch.float64) * 2 - 1
    users = [0, 1, 0, 2, 1, 0]
    valid = torch.rand(6, 5, generator=gen) > 0.3 if masked else None
    if masked:
        valid[3] = False  # user 2's only row: no valid negative, contributes 0 and keeps g_2 unseen
    tau, gamma = 0.2, 0.7
    loss = _bound(train_data, tau=tau, gamma=gamma, n_negatives=5)
    loss.log_g[1] = math.log(3.0)  # user 1 seen before, g_1 = 3
    p = pos.clone().requires_grad_(True)
    n = (neg if valid is None else neg.masked_fill(~valid, float("-inf"))).requires_grad_(True)
    value = loss(_batch(p, n, users, valid))
    value.backward()
    v, dpos, dneg, g = _slow(pos.tolist(), neg.tolist(), users, {1: 3.0}, tau, gamma,
                             None if valid is None else valid.tolist())
    assert value.item() == pytest.approx(v, rel=1e-10)
    assert p.grad.tolist() == pytest.approx(dpos, rel=1e-10)
    # g is stored in float32 (the buffer): the negatives' gradient carries its rounding
    assert torch.allclose(n.grad, torch.tensor(dneg, dtype=torch.float64), rtol=1e-6, atol=0)
    want_g = [g.get(u) for u in range(3)]
    got_g = [None if math.isinf(x) else math.exp(x) for x in loss.log_g.tolist()]
    assert got_g[0] == pytest.approx(want_g[0], rel=1e-6) and got_g[1] == pytest.approx(want_g[1], rel=1e-6)
    assert (got_g[2] is None) == (want_g[2] is None)
    # the logged value is the sampled softmax loss `sl` reports, not the surrogate (whose second term is ~1)
    sl = build("sl", tau=tau)(LossBatch(pos=pos, neg=n.detach(), neg_valid=valid))
    assert value.item() == pytest.approx(sl.item(), rel=1e-10)


def test_gamma_one_gives_the_sampled_softmax_gradient():
    gen = torch.Generator().manual_seed(1)
    pos = (torch.rand(4, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    neg = (torch.rand(4, 6, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    log_g = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)  # history forgotten with gamma = 1
    value, _ = sogclr_loss(pos, neg, torch.arange(4), log_g, 0.1, 1.0)
    got = torch.autograd.grad(value, (pos, neg))
    want = torch.autograd.grad(build("sl", tau=0.1)(LossBatch(pos=pos, neg=neg)), (pos, neg))
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-14) for a, b in zip(got, want))


def test_gradcheck_of_the_surrogate_with_g_held_fixed():
    gen = torch.Generator().manual_seed(2)
    pos = (torch.rand(5, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    neg = (torch.rand(5, 4, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    log_g = torch.tensor([0.5, 1.0, 3.0, -1.0, 2.0], dtype=torch.float64)
    valid = torch.tensor([[True, False, True, True]] * 4 + [[False] * 4])
    assert torch.autograd.gradcheck(lambda p, n: sogclr_terms(p, n, log_g, 0.3)[0].sum(), (pos, neg))
    assert torch.autograd.gradcheck(lambda p, n: sogclr_terms(p, n, log_g, 0.3, valid)[0].sum(), (pos, neg))


def test_finite_and_pushes_the_positive_up_when_every_negative_wins(train_data):
    loss = _bound(train_data, n_users=2, tau=0.01, n_negatives=50)
    pos = torch.full((2,), -1.0, requires_grad=True)
    neg = torch.ones(2, 50, requires_grad=True)
    value = loss(_batch(pos, neg, [0, 1]))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
    assert (pos.grad < 0).all() and (neg.grad > 0).all()
    assert value.item() == pytest.approx(math.log(50) + 200, rel=1e-5)  # log sum_j e^{(1 - (-1))/0.01}


@pytest.mark.parametrize("tau,score", [(0.01, 0.99), (0.1, 60.0)])  # cosine: e^99; dot: e^600 (beyond float64)
def test_no_overflow_in_float32(train_data, tau, score):
    loss = _bound(train_data, n_users=2, tau=tau, n_negatives=8)
    gen = torch.Generator().manual_seed(3)
    neg = (score - 0.01 * torch.rand(2, 8, generator=gen)).requires_grad_(True)
    pos = torch.full((2,), score - 0.02, requires_grad=True)
    value = loss(_batch(pos, neg, [0, 1]))
    value.backward()
    want = torch.logsumexp((neg.detach().double() - pos.detach().double()[:, None]) / tau, 1).mean()
    assert value.item() == pytest.approx(want.item(), rel=1e-4)
    assert torch.isfinite(neg.grad).all() and torch.isfinite(pos.grad).all()
    # the first step's g is the batch mean: each row's negative gradients sum to 1 / (tau * P)
    assert neg.grad.sum(1).tolist() == pytest.approx([1 / (tau * 2)] * 2, rel=1e-4)
    assert torch.isfinite(loss.log_g).all()


def test_masked_shared_columns_count_exactly_as_removed(train_data):
    gen = torch.Generator().manual_seed(4)
    pos = torch.rand(4, generator=gen, dtype=torch.float64)
    neg = torch.rand(4, 5, generator=gen, dtype=torch.float64)
    users = [0, 1, 0, 2]
    keep = torch.tensor([True, False, True, False, True])
    valid = keep.expand(4, 5)
    runs = []
    for scores, v in [(neg.masked_fill(~valid, float("-inf")), valid), (neg[:, keep], None)]:
        loss = _bound(train_data, tau=0.1, gamma=0.5, n_negatives=scores.shape[1])
        loss.log_g[0] = 1.0
        p, n = pos.clone().requires_grad_(True), scores.clone().requires_grad_(True)
        value = loss(_batch(p, n, users, v))
        value.backward()
        runs.append((value.item(), p.grad, n.grad, loss.log_g.clone()))
    (v1, pg1, ng1, g1), (v2, pg2, ng2, g2) = runs
    assert v1 == pytest.approx(v2, rel=1e-15) and torch.equal(pg1, pg2) and torch.equal(g1, g2)
    assert torch.allclose(ng1[:, keep], ng2, rtol=1e-14, atol=0) and (ng1[:, ~keep] == 0).all()


def test_a_row_without_valid_negatives_counts_zero_and_leaves_its_user_unchanged(train_data):
    loss = _bound(train_data, n_users=2, tau=0.1, n_negatives=3)
    loss.log_g[1] = 2.0
    valid = torch.tensor([[True, True, False], [False, False, False]])
    neg = torch.tensor([[0.1, 0.2, 0.0], [0.0, 0.0, 0.0]]).masked_fill(~valid, float("-inf")).requires_grad_(True)
    pos = torch.tensor([0.5, 0.5], requires_grad=True)
    value = loss(_batch(pos, neg, [0, 1], valid))
    value.backward()
    want = torch.logsumexp(torch.tensor([0.1 - 0.5, 0.2 - 0.5]) / 0.1, 0) / 2
    assert value.item() == pytest.approx(want.item(), rel=1e-6)
    assert pos.grad[1].item() == 0 and (neg.grad[1] == 0).all() and torch.isfinite(neg.grad).all()
    assert loss.log_g[1].item() == 2.0


def test_state_is_a_per_user_buffer_declared_for_syncing(train_data):
    loss = build("sogclr")
    assert (loss.tau, loss.gamma, loss.n_negatives) == (0.2, 0.9, 1000)
    with pytest.raises(ValueError, match="call bind"):
        loss(_batch(torch.zeros(1), torch.zeros(1, 2), [0]))
    loss.bind(train_data(4, 10, {0: [1]}))
    assert loss.log_g.shape == (4,) and torch.isneginf(loss.log_g).all()
    assert "log_g" in loss.state_dict()
    batch = _batch(torch.zeros(2), torch.zeros(2, 3), [3, 1])
    [(buffer, rows)] = loss.synced_rows(batch)
    assert buffer is loss.log_g and rows.tolist() == [3, 1]


def test_bad_config_is_refused():
    with pytest.raises(ConfigError, match=r"loss.tau must be > 0, got 0"):
        build("sogclr", tau=0)
    for gamma in (0, 1.5):
        with pytest.raises(ConfigError, match=rf"loss.gamma must be in \(0, 1\], got {gamma}"):
            build("sogclr", gamma=gamma)
