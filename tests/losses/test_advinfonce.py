"""AdvInfoNCE: the weighted InfoNCE against the formula, masking, the adversary's scores, the
alternation of the two players across epochs (ascent for the adversary), checkpoints."""

import math
from functools import partial

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.advinfonce import advinfonce_loss, advinfonce_terms
from bench.losses.softmax import softmax_terms
from bench.models.mf import MF
from bench.step import optimise, train_step
from bench.tasks.module import RankingModule

ADAM_MODES = [{"foreach": True}, {"fused": True}, {"foreach": False}]


def _loop_terms(pos, neg, hardness, tau, k, valid=None):
    """Per-pair terms written out from the formula over plain floats."""
    out = []
    for i in range(pos.numel()):
        cols = [j for j in range(neg.shape[1]) if valid is None or bool(valid[i, j])]
        z = sum(math.exp(hardness[i, j].item()) for j in cols)
        numerator = math.exp(pos[i].item() / tau)
        weighted = sum(k * len(cols) * math.exp(hardness[i, j].item()) / z * math.exp(neg[i, j].item() / tau)
                       for j in cols)
        out.append(-math.log(numerator / (numerator + weighted)))
    return out


def _scores(seed=0, p=5, n=6, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(p, generator=gen, dtype=dtype) * 2 - 1
    neg = torch.rand(p, n, generator=gen, dtype=dtype) * 2 - 1
    hardness = torch.randn(p, n, generator=gen, dtype=dtype)
    return pos, neg, hardness


@pytest.mark.parametrize("tau,k", [(0.2, 64.0), (1.0, 1.0), (0.05, 8.0)])
def test_terms_match_the_formula(tau, k):
    pos, neg, hardness = _scores()
    got = advinfonce_terms(pos, neg, hardness, tau, k)
    assert got.tolist() == pytest.approx(_loop_terms(pos, neg, hardness, tau, k), rel=1e-12)
    assert advinfonce_loss(pos, neg, hardness, tau, k).item() == pytest.approx(got.mean().item(), rel=1e-12)


def test_a_uniform_adversary_gives_k_weighted_infonce():
    # by hand: s_ui = s_uj = 0, tau = 1, two negatives of weight K = 64: log(1 + 128)
    zero, zeros, threes = torch.zeros(1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64), \
        torch.full((1, 2), 3.0, dtype=torch.float64)
    value = advinfonce_terms(zero, zeros, threes, 1.0, 64.0)
    assert value.item() == pytest.approx(math.log(129.0), rel=1e-12)
    # any constant hardness, K = 1: InfoNCE (SL with the positive in the normaliser)
    pos, neg, _ = _scores(1)
    got = advinfonce_terms(pos, neg, torch.full_like(neg, -2.5), 0.2, 1.0)
    assert torch.allclose(got, softmax_terms(pos, neg, 0.2, self_term=True), rtol=1e-12, atol=0)
    # and with K: log(1 + K sum_j e^{(s_j - s_i)/tau})
    want = torch.log1p(64 * torch.exp((neg - pos[:, None]) / 0.2).sum(1))
    assert torch.allclose(advinfonce_terms(pos, neg, torch.zeros_like(neg), 0.2, 64.0), want, rtol=1e-12, atol=0)


def test_gradcheck():
    pos, neg, hardness = (t.requires_grad_() for t in _scores(2, p=3, n=4))
    assert torch.autograd.gradcheck(lambda p, n, h: advinfonce_terms(p, n, h, 0.3, 4.0), (pos, neg, hardness))


def test_all_negatives_winning_is_finite_and_pushes_the_positive_up():
    pos = torch.full((3,), -1.0, requires_grad=True)
    neg = torch.full((3, 5), 1.0, requires_grad=True)
    hardness = torch.randn(3, 5, requires_grad=True)
    value = advinfonce_loss(pos, neg, hardness, 0.01, 64.0)
    value.backward()
    assert torch.isfinite(value) and value.item() == pytest.approx(200 + math.log(64 * 5), rel=1e-5)
    assert (pos.grad < 0).all() and (neg.grad > 0).all() and torch.isfinite(hardness.grad).all()


def test_masked_shared_negatives_equal_the_rows_without_them():
    pos, neg, hardness = _scores(3, p=4, n=6)
    valid = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) > 0.4
    valid[0] = True
    valid[2] = False  # no valid negative: a zero term
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_()
    wild = hardness.masked_fill(~valid, 1e6).requires_grad_()  # the masked hardness must not count
    got = advinfonce_terms(pos, masked, wild, 0.2, 64.0, valid)
    for i in range(4):
        cols = valid[i]
        want = advinfonce_terms(pos[i:i + 1], neg[i:i + 1, cols], hardness[i:i + 1, cols], 0.2, 64.0) \
            if cols.any() else torch.zeros(1, dtype=torch.float64)
        assert got[i].item() == pytest.approx(want.item(), rel=1e-12, abs=1e-15)
    assert got.tolist() == pytest.approx(_loop_terms(pos, neg, hardness, 0.2, 64.0, valid), rel=1e-12)
    got.sum().backward()
    assert torch.isfinite(masked.grad).all() and (masked.grad[~valid] == 0).all()
    assert torch.isfinite(wild.grad).all() and (wild.grad[~valid] == 0).all()


def _bound(train_data, **kwargs):
    torch.manual_seed(0)
    loss = build("advinfonce", **kwargs)
    loss.bind(train_data(6, 9, {0: [1, 2], 1: [3], 2: [4, 5], 3: [0], 4: [6], 5: [7, 8]}))
    return loss


@pytest.mark.parametrize("adv_score", ["cosine", "dot"])
def test_hardness_is_the_adversary_mf_score(adv_score, train_data):
    loss = _bound(train_data, adv_score=adv_score, adv_dim=5)
    assert loss.adv_user.shape == (6, 5) and loss.adv_item.shape == (9, 5)
    users, negatives = torch.tensor([0, 3, 5]), torch.tensor([[1, 2, 8], [0, 0, 4], [7, 6, 5]])
    got = loss.hardness(users, negatives)
    for r in range(3):
        for c in range(3):
            u, v = loss.adv_user[users[r]], loss.adv_item[negatives[r, c]]
            want = torch.dot(u, v) / (u.norm() * v.norm() if adv_score == "cosine" else 1)
            assert got[r, c].item() == pytest.approx(want.item(), rel=1e-5)
    shared = torch.tensor([2, 8, 0, 1]).expand(3, -1)  # one draw for the batch, as bench.step builds it
    assert torch.allclose(loss.hardness(users, shared), loss.hardness(users, shared.contiguous()), atol=1e-6)


def test_the_loss_weighs_negatives_by_the_adversary(train_data):
    loss = _bound(train_data, tau=0.5, neg_weight=8)
    users, negatives = torch.tensor([0, 2]), torch.tensor([[3, 4, 5], [0, 1, 2]])
    pos, neg = torch.tensor([0.2, -0.1]), torch.tensor([[0.1, 0.5, -0.3], [0.0, 0.9, 0.3]])
    value = loss(LossBatch(pos=pos, neg=neg, users=users, negatives=negatives))
    want = _loop_terms(pos.double(), neg.double(), loss.hardness(users, negatives).detach().double(), 0.5, 8.0)
    assert value.item() == pytest.approx(sum(want) / 2, rel=1e-5)


def _moments(optimizer, p):
    """(step count, first moment, second moment) of ``p`` in Adam (zeros before its first step)."""
    state = optimizer.state.get(p, {})
    if not state:
        return 0, torch.zeros_like(p), torch.zeros_like(p)
    return int(state["step"]), state["exp_avg"].clone(), state["exp_avg_sq"].clone()


@pytest.mark.parametrize("adam", ADAM_MODES)
def test_only_the_adversary_learns_in_adversarial_epochs_by_ascent(adam, train_data):
    data = train_data(6, 9, {0: [1, 2], 1: [3], 2: [4, 5], 3: [0], 4: [6], 5: [7, 8]})
    torch.manual_seed(0)
    model = MF(6, 9, dim=4)
    model.bind(data)
    loss = build("advinfonce", adv_every=3, adv_lr=0.01, tau=0.5, adv_dim=4)
    loss.bind(data)
    module = RankingModule(model, loss, partial(torch.optim.Adam, lr=0.01, **adam), seed=0)
    optimizer = module.configure_optimizers()
    (adv_group,) = [g for g in optimizer.param_groups if g["maximize"]]
    assert adv_group["params"] == [loss.adv_user, loss.adv_item] and adv_group["lr"] == 0.01
    assert optimizer.param_groups[0]["params"] == list(model.parameters())
    rows = torch.tensor([[0, 1, 0], [1, 3, 2], [2, 4, 3], [5, 7, 8]])
    negatives = torch.tensor([[0, 3, 5], [0, 1, 2], [1, 2, 3], [2, 3, 4]])
    adversary = [loss.adv_user, loss.adv_item]
    for epoch in range(6):
        loss.on_train_epoch_start(epoch)
        adversarial = (epoch + 1) % 3 == 0
        assert loss.adversarial == adversarial
        before = [p.detach().clone() for p in module.parameters()]
        moments = [_moments(optimizer, p) for p in module.parameters()]
        value_before = optimise(model, loss, optimizer, rows, negatives=negatives).loss.item()
        for p, old, old_moments in zip(module.parameters(), before, moments):
            learns = any(p is q for q in adversary) == adversarial
            assert (p.grad is not None) == learns
            # the frozen player is not touched at all: no update, no moment or step-count drift
            assert (not torch.equal(p.detach(), old)) == learns
            now = _moments(optimizer, p)
            assert (now[0] == old_moments[0] + 1 if learns else now[0] == old_moments[0])
            if not learns:
                assert all(torch.equal(a, b) for a, b in zip(now[1:], old_moments[1:]))
        with torch.no_grad():
            value_after = train_step(model, loss, rows, negatives=negatives).loss.item()
        # the adversary climbs the loss, the backbone descends it
        assert (value_after > value_before) == adversarial, (epoch, value_before, value_after)


def test_checkpoint_round_trip_of_the_adversary(train_data):
    loss = _bound(train_data, adv_dim=3)
    state = loss.state_dict()
    assert set(state) == {"adv_user", "adv_item"} and state["adv_user"].shape == (6, 3)
    fresh = _bound(train_data, adv_dim=3)
    with torch.no_grad():
        fresh.adv_user.zero_(), fresh.adv_item.zero_()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.adv_user, loss.adv_user) and torch.equal(fresh.adv_item, loss.adv_item)


def test_diagnostics_report_the_kl_of_the_weights_to_uniform(train_data):
    loss = _bound(train_data)
    assert loss.diagnostics(None) == {}
    users, negatives = torch.tensor([0, 1]), torch.tensor([[2, 3], [4, 5]])
    loss(LossBatch(pos=torch.zeros(2), neg=torch.zeros(2, 2), users=users, negatives=negatives))
    p = torch.softmax(loss.hardness(users, negatives).detach().double(), dim=1)
    want = (p * torch.log(p * 2)).sum(1).mean().item()
    assert loss.diagnostics(None)["adv_kl"] == pytest.approx(want, rel=1e-5, abs=1e-7)


def test_an_unbound_adversary_is_a_clear_error():
    loss = build("advinfonce")
    with pytest.raises(RuntimeError, match=r"bind\(data\) sizes the adversary"):
        loss(LossBatch(pos=torch.zeros(1), neg=torch.zeros(1, 2), users=torch.zeros(1, dtype=torch.long),
                       negatives=torch.zeros(1, 2, dtype=torch.long)))


@pytest.mark.parametrize("kwargs,match", [
    ({"tau": 0}, r"loss.tau must be > 0, got 0"),
    ({"neg_weight": 0}, r"loss.neg_weight must be > 0, got 0"),
    ({"adv_lr": -1e-4}, r"loss.adv_lr must be >= 0, got -0.0001"),
    ({"adv_every": 1}, r"loss.adv_every must be an integer >= 2, got 1"),
    ({"adv_dim": 0}, r"loss.adv_dim must be >= 1, got 0"),
    ({"adv_score": "mlp"}, r"loss.adv_score must be one of cosine, dot, got 'mlp'"),
])
def test_bad_config_is_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        build("advinfonce", **kwargs)


def test_adversarial_epochs_also_freeze_the_backbones_own_term(train_data):
    """XSimGCL's contrastive term would otherwise train the backbone while only the adversary should learn."""
    from bench.models import XSimGCL

    data = train_data(6, 9, {0: [1, 2], 1: [3], 2: [4, 5], 3: [0], 4: [6], 5: [7, 8]})
    torch.manual_seed(0)
    model = XSimGCL(6, 9, dim=4, cl_weight=0.5)
    model.bind(data)
    model.train()
    loss = build("advinfonce", adv_every=2, tau=0.5, adv_dim=4)
    loss.bind(data)
    rows, negatives = torch.tensor([[0, 1, 0], [1, 3, 2], [2, 4, 3]]), torch.tensor([[0, 3], [0, 1], [1, 2]])
    for epoch, adversarial in ((0, False), (1, True)):
        loss.on_train_epoch_start(epoch)
        model.zero_grad(set_to_none=True)
        out = train_step(model, loss, rows, negatives=negatives)
        out.loss.backward()
        assert loss.trains_backbone is not adversarial and (out.extra_loss is None) == adversarial
        assert all((p.grad is None) == adversarial for p in model.parameters())


def test_plain_ddp_is_refused_with_the_strategy_that_works(tmp_path, tiny, make_cfg):
    from bench.run import train_and_test

    cfg = make_cfg([*tiny, "loss=advinfonce", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                    "logger=none"], tmp_path)
    with pytest.raises(ConfigError, match=r"loss=advinfonce trains its players in turns.*add "
                                          r"trainer\.strategy=ddp_find_unused_parameters_true"):
        train_and_test(cfg)
    assert not (tmp_path / "results.json").exists()  # refused before the run folder is written
