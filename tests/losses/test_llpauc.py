"""LLPAUC: the min-max objective against the formula, masking, the ascent/descent groups of the
optimiser (and the RecLoss.optimizer_groups hook), projections, checkpoints."""

import math
from functools import partial

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.llpauc import llpauc_objective
from bench.models.mf import MF
from bench.tasks.module import RankingModule

AUX = ("a", "b", "gamma", "s_neg", "theta_b", "s_pos", "theta_a")
ADAM_MODES = [{"foreach": True}, {"fused": True}, {"foreach": False}]


def _r(x, kappa=5.0):
    return math.log1p(math.exp(kappa * x)) / kappa


def _loop(pos, neg, aux, alpha, beta, kappa=5.0, one_way=False, w=0.0, valid=None):
    """F written out from the formula, over plain floats; pos/neg are squashed scores."""
    a, b, g, sn, tb = (aux[k] for k in ("a", "b", "gamma", "s_neg", "theta_b"))
    negs = [(i, j) for i in range(neg.shape[0]) for j in range(neg.shape[1])
            if valid is None or bool(valid[i, j])]
    neg_mean = sum(_r((neg[i, j].item() - b) ** 2 + 2 * (1 + g) * neg[i, j].item() - sn, kappa)
                   for i, j in negs) / max(len(negs), 1)
    value = sn + neg_mean / beta - (w + 1) * g * g + tb * (g + 1 - b)
    ell_pos = [(f - a) ** 2 - 2 * (1 + g) * f for f in pos.tolist()]
    if one_way:
        return value + sum(ell_pos) / len(ell_pos)
    sp, ta = aux["s_pos"], aux["theta_a"]
    pos_mean = sum(_r(-e - sp, kappa) for e in ell_pos) / len(ell_pos)
    return value - sp - pos_mean / alpha + ta * (a + g)


def _aux(seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    values = {"a": 0.8, "b": 0.15, "gamma": 0.1, "s_neg": 0.6, "theta_b": 0.3, "s_pos": -0.2, "theta_a": 0.4}
    return {k: torch.tensor(v + 0.05 * torch.rand(1, generator=gen).item(), dtype=dtype) for k, v in values.items()}


def _scores(seed=0, p=5, n=7, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(p, generator=gen, dtype=dtype) * 2 - 1, torch.rand(p, n, generator=gen, dtype=dtype) * 2 - 1


def _objective(pos, neg, aux, alpha, beta, one_way=False, **kw):
    extra = {} if one_way else {"s_pos": aux["s_pos"], "theta_a": aux["theta_a"]}
    return llpauc_objective(pos, neg, aux["a"], aux["b"], aux["gamma"], aux["s_neg"], aux["theta_b"], alpha, beta,
                            **kw, **extra)


@pytest.mark.parametrize("one_way", [False, True])
@pytest.mark.parametrize("alpha,beta,w", [(0.7, 0.1, 0.0), (0.3, 0.01, 0.0), (1.0, 1.0, 2.0)])
def test_objective_matches_the_formula(one_way, alpha, beta, w):
    pos, neg = _scores()
    f_pos, f_neg = torch.sigmoid(pos), torch.sigmoid(neg)
    aux = _aux()
    got = _objective(f_pos, f_neg, aux, alpha, beta, one_way=one_way, w=w)
    want = _loop(f_pos, f_neg, {k: v.item() for k, v in aux.items()}, alpha, beta, one_way=one_way, w=w)
    assert got.item() == pytest.approx(want, rel=1e-12)


def test_objective_by_hand_at_the_initial_values():
    # f = 1/2 everywhere, a = 1, b = 0, gamma = 0, s+ = s- = theta = 1/2:
    # -l+(f) - s+ = 1/4, l-(f) - s- = 3/4, penalties 1/2 (a + gamma) + 1/2 (gamma + 1 - b) = 1
    loss = build("llpauc", alpha=0.5, beta=0.25).double()
    value = loss(LossBatch(pos=torch.zeros(3, dtype=torch.float64), neg=torch.zeros(3, 4, dtype=torch.float64)))
    want = -0.5 - _r(0.25) / 0.5 + 0.5 + _r(0.75) / 0.25 + 1.0
    assert value.item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_the_loss_squashes_scores_by_a_sigmoid_with_temperature(tau):
    pos, neg = _scores(1)
    loss = build("llpauc", alpha=0.5, beta=0.1, tau=tau).double()
    aux = {k: getattr(loss, k).item() for k in AUX}
    want = _loop(torch.sigmoid(pos / tau), torch.sigmoid(neg / tau), aux, 0.5, 0.1)
    assert loss(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("one_way", [False, True])
def test_gradcheck(one_way):
    pos, neg = _scores(2, p=3, n=4)
    f_pos, f_neg = torch.sigmoid(pos).requires_grad_(), torch.sigmoid(neg).requires_grad_()
    aux = {k: v.requires_grad_() for k, v in _aux(2).items()}
    names = ("a", "b", "gamma", "s_neg", "theta_b") + (() if one_way else ("s_pos", "theta_a"))

    def f(fp, fn, *values):
        return _objective(fp, fn, dict(zip(names, values)), 0.6, 0.2, one_way=one_way)

    assert torch.autograd.gradcheck(f, (f_pos, f_neg, *(aux[k] for k in names)))


def test_all_negatives_winning_is_finite_and_pushes_the_positive_up():
    pos = torch.full((4,), -1.0, requires_grad=True)
    neg = torch.full((4, 6), 1.0, requires_grad=True)
    loss = build("llpauc", alpha=0.7, beta=0.01)
    value = loss(LossBatch(pos=pos, neg=neg))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
    assert (pos.grad < 0).all() and (neg.grad > 0).all()


def test_masked_shared_negatives_equal_the_rows_without_them():
    pos, neg = _scores(3, p=4, n=6)
    drop = torch.tensor([1, 4, 0, 5])  # one column per row: the rest is a (4, 5) matrix
    valid = torch.ones(4, 6, dtype=torch.bool)
    valid[torch.arange(4), drop] = False
    kept = neg[valid].view(4, 5)
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_()
    loss = build("llpauc", alpha=0.5, beta=0.1).double()
    got = loss(LossBatch(pos=pos, neg=masked, neg_valid=valid))
    want = loss(LossBatch(pos=pos, neg=kept))
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    got.backward()
    assert torch.isfinite(masked.grad).all() and (masked.grad[~valid] == 0).all()


def test_masked_columns_never_reach_the_arithmetic():
    pos, neg = _scores(5, p=3, n=4)
    valid = torch.tensor([[True, False, True, True], [False, True, True, True], [True, True, True, False]])
    f_neg = torch.sigmoid(neg).masked_fill(~valid, float("nan")).requires_grad_()
    value = _objective(torch.sigmoid(pos), f_neg, _aux(), 0.5, 0.1, valid=valid)
    value.backward()
    want = _loop(torch.sigmoid(pos), torch.sigmoid(neg), {k: v.item() for k, v in _aux().items()}, 0.5, 0.1,
                 valid=valid)
    assert value.item() == pytest.approx(want, rel=1e-12)
    assert torch.isfinite(f_neg.grad).all() and (f_neg.grad[~valid] == 0).all()


def test_a_row_without_valid_negatives_is_finite():
    pos, neg = _scores(4, p=3, n=4)
    valid = torch.ones(3, 4, dtype=torch.bool)
    valid[1] = False
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_()
    pos = pos.clone().requires_grad_()
    loss = build("llpauc").double()
    value = loss(LossBatch(pos=pos, neg=masked, neg_valid=valid))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(masked.grad).all() and torch.isfinite(pos.grad).all()
    aux = {k: getattr(loss, k).item() for k in AUX}
    want = _loop(torch.sigmoid(pos.detach()), torch.sigmoid(neg), aux, 0.7, 0.1, valid=valid)
    assert value.item() == pytest.approx(want, rel=1e-12)


def _module(loss, **adam):
    torch.manual_seed(0)
    return RankingModule(MF(5, 7, dim=4), loss, partial(torch.optim.Adam, lr=0.01, **adam), seed=0)


def _groups_by_param(optimizer):
    return {id(p): group for group in optimizer.param_groups for p in group["params"]}


@pytest.mark.parametrize("adam", ADAM_MODES)
def test_paper_variant_groups_ascend_s_pos_and_gamma_at_twice_the_lr(adam):
    loss = build("llpauc")
    module = _module(loss, **adam)
    optimizer = module.configure_optimizers()
    by_param = _groups_by_param(optimizer)
    assert len(optimizer.param_groups) == 3 and len(by_param) == len(list(module.parameters()))
    for name in ("s_pos", "gamma"):
        group = by_param[id(getattr(loss, name))]
        assert group["maximize"] is True and group["lr"] == pytest.approx(0.02)
    assert by_param[id(loss.s_neg)]["maximize"] is False and by_param[id(loss.s_neg)]["lr"] == pytest.approx(0.02)
    # the backbone, a, b and the multipliers: the default group, in their usual order
    first = optimizer.param_groups[0]
    grouped = {id(loss.s_pos), id(loss.gamma), id(loss.s_neg)}
    assert first["params"] == [p for p in module.parameters() if id(p) not in grouped]
    assert first["lr"] == 0.01 and first["maximize"] is False
    assert all(first.get(k) == v for k, v in adam.items())


def test_reference_code_variant_descends_everything():
    loss = build("llpauc", variant="reference_code")
    optimizer = _module(loss).configure_optimizers()
    assert not any(group["maximize"] for group in optimizer.param_groups)
    assert _groups_by_param(optimizer)[id(loss.gamma)]["lr"] == pytest.approx(0.02)


@pytest.mark.parametrize("adam", ADAM_MODES)
def test_a_loss_without_groups_keeps_one_group_of_all_parameters(adam):
    module = _module(build("sl"), **adam)
    optimizer = module.configure_optimizers()
    assert len(optimizer.param_groups) == 1 and optimizer.param_groups[0]["params"] == list(module.parameters())


def _one_step(variant, adam, one_way=False):
    """One optimiser step of the module on a tiny batch; (parameter, gradient, change) by name."""
    loss = build("llpauc", variant=variant, one_way=one_way, alpha=0.5, beta=0.1)
    with torch.no_grad():  # away from zero gradients of the initial values
        loss.a.fill_(0.7), loss.b.fill_(0.2), loss.gamma.fill_(0.1)
    module = _module(loss, **adam)
    optimizer = module.configure_optimizers()
    users, items = torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 4])
    before = {n: p.detach().clone() for n, p in loss.named_parameters()}
    pos = module.model.score_items(users, items[:, None]).squeeze(1)
    neg = module.model.score_items(users, torch.tensor([[0, 5, 6]] * 4))
    value = loss(LossBatch(pos=pos, neg=neg))
    optimizer.zero_grad()
    value.backward()
    grads = {n: p.grad.clone() for n, p in loss.named_parameters()}
    optimizer.step()
    return {n: (grads[n], p.detach() - before[n]) for n, p in loss.named_parameters()}


@pytest.mark.parametrize("adam", ADAM_MODES)
@pytest.mark.parametrize("one_way", [False, True])
def test_one_step_moves_the_max_player_up_the_loss_and_the_rest_down(adam, one_way):
    steps = _one_step("paper", adam, one_way)
    ascent = {"s_pos", "gamma"}
    assert set(steps) == set(AUX) - ({"s_pos", "theta_a"} if one_way else set())
    for name, (grad, change) in steps.items():
        assert grad.abs() > 1e-6, name
        assert (change * grad > 0) == (name in ascent), (name, grad, change)


def test_reference_code_moves_every_variable_down_the_loss():
    for name, (grad, change) in _one_step("reference_code", {"foreach": True}).items():
        assert change * grad < 0, name


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_after_step_projects_onto_the_ranges(variant):
    loss = build("llpauc", variant=variant)
    with torch.no_grad():
        for name, value in {"a": 0.3, "b": 1.7, "gamma": -0.9, "s_pos": 9.0, "s_neg": -1.0,
                            "theta_a": -0.2, "theta_b": -0.3}.items():
            getattr(loss, name).fill_(value)
    loss.after_step(LossBatch(pos=torch.zeros(1), neg=torch.zeros(1, 1)))
    got = {k: getattr(loss, k).item() for k in AUX}
    # b clipped to 1 first, then gamma to [max(-a, b - 1), 1] = [0, 1]
    assert got["a"] == pytest.approx(0.3) and got["b"] == 1.0 and got["gamma"] == 0.0
    assert got["s_pos"] == 4.0 and got["s_neg"] == 0.0
    if variant == "paper":
        assert got["theta_a"] == 0.0 and got["theta_b"] == 0.0
    else:  # IR-Benchmark leaves the multipliers free
        assert got["theta_a"] == pytest.approx(-0.2) and got["theta_b"] == pytest.approx(-0.3)
    with torch.no_grad():
        loss.a.fill_(0.4), loss.b.fill_(0.1), loss.gamma.fill_(-0.8)
    loss.after_step(LossBatch(pos=torch.zeros(1), neg=torch.zeros(1, 1)))
    assert loss.gamma.item() == pytest.approx(-0.4)  # the lower end -a


def test_checkpoint_round_trip_of_the_auxiliary_variables_and_their_optimiser_state():
    module = _module(build("llpauc"))
    optimizer = module.configure_optimizers()
    value = module.loss(LossBatch(pos=torch.tensor([0.1, 0.3]), neg=torch.tensor([[0.2, -0.1], [0.4, 0.0]])))
    value.backward()
    optimizer.step()
    module.loss.after_step(LossBatch(pos=torch.zeros(1), neg=torch.zeros(1, 1)))
    state, opt_state = module.state_dict(), optimizer.state_dict()
    assert {f"loss.{k}" for k in AUX} <= set(state)
    fresh = _module(build("llpauc"))
    fresh.load_state_dict(state)
    fresh_optimizer = fresh.configure_optimizers()
    fresh_optimizer.load_state_dict(opt_state)
    for name in AUX:
        assert getattr(fresh.loss, name).item() == getattr(module.loss, name).item()
    restored = fresh_optimizer.state_dict()
    assert [{k: v for k, v in g.items() if k != "params"} for g in restored["param_groups"]] == \
        [{k: v for k, v in g.items() if k != "params"} for g in opt_state["param_groups"]]
    gamma_id = [id(p) for p in fresh.parameters()].index(id(fresh.loss.gamma))
    assert torch.equal(fresh_optimizer.state[fresh.loss.gamma]["exp_avg"],
                       optimizer.state[list(module.parameters())[gamma_id]]["exp_avg"])


def test_one_way_has_no_positive_threshold():
    loss = build("llpauc", one_way=True)
    assert loss.s_pos is None and loss.theta_a is None
    assert set(dict(loss.named_parameters())) == {"a", "b", "gamma", "s_neg", "theta_b"}
    assert set(loss.diagnostics(None)) == {f"llpauc_{k}" for k in ("a", "b", "gamma", "s_neg", "theta_b")}


@pytest.mark.parametrize("kwargs,match", [
    ({"alpha": 0.0}, r"loss.alpha must be in \(0, 1\], got 0.0"),
    ({"beta": 1.5}, r"loss.beta must be in \(0, 1\], got 1.5"),
    ({"variant": "ascent"}, r"loss.variant must be one of paper, reference_code, got 'ascent'"),
    ({"kappa": 0}, r"loss.kappa must be > 0, got 0"),
    ({"w": -1}, r"loss.w must be >= 0, got -1"),
    ({"tau": 0}, r"loss.tau must be > 0, got 0"),
])
def test_bad_config_is_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        build("llpauc", **kwargs)
