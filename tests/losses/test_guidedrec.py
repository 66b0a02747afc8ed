"""GuidedRec: the DCG target, the BCE, which term trains what, the surrogate's fit, masking,
initialisation under the run seed, checkpoints, config errors."""

import io
import math
from functools import partial

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.guidedrec import bce_terms, guidedrec_terms, list_dcg, pick_list
from bench.models import MF
from bench.tasks.module import RankingModule


def _loss(seed=0, **kwargs):
    torch.manual_seed(seed)
    return build("guidedrec", **kwargs).double()


def _scores(seed=0, p=6, n=9):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(p, generator=gen, dtype=torch.float64) * 2 - 1,
            torch.rand(p, n, generator=gen, dtype=torch.float64) * 2 - 1)


def _dcg_loop(pos, listed, member=None):
    out = []
    for r in range(pos.numel()):
        higher = sum(1 for j in range(listed.shape[1])
                     if (member is None or member[r, j]) and listed[r, j].item() > pos[r].item())
        out.append(1 / math.log2(1 + (1 + higher)))
    return torch.tensor(out, dtype=torch.float64)


def test_true_dcg_is_the_positive_rank_discount():
    pos, listed = torch.tensor([0.5, 0.9, -0.2]), torch.tensor([[0.9, 0.1, 0.7], [0.1, 0.2, 0.3], [0.0, 0.1, 0.2]])
    # ranks 3, 1, 4 -> 1/log2(4), 1, 1/log2(5); the third row's first entry is no member: rank 3
    member = torch.tensor([[True, True, True], [True, True, True], [False, True, True]])
    assert list_dcg(pos, listed, member).tolist() == pytest.approx([0.5, 1.0, 1 / math.log2(4)])
    assert list_dcg(pos, listed, None)[2].item() == pytest.approx(1 / math.log2(5))
    # a tie counts for the positive: rank 1 + #strictly higher
    tie = list_dcg(torch.tensor([0.5]), torch.tensor([[0.5, 0.7, 0.5]]), None)
    assert tie.item() == pytest.approx(1 / math.log2(3))
    pos, neg = _scores(3, p=8, n=9)
    assert torch.allclose(list_dcg(pos, neg, None), _dcg_loop(pos, neg), rtol=0, atol=1e-15)
    member = torch.rand(8, 9, generator=torch.Generator().manual_seed(4)) > 0.3
    assert torch.allclose(list_dcg(pos, neg, member), _dcg_loop(pos, neg, member), rtol=0, atol=1e-15)


@pytest.mark.parametrize("pos_weight", ["balanced", "none"])
def test_bce_matches_the_formula(pos_weight):
    pos, neg = _scores(1, p=5, n=7)
    valid = torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) > 0.3
    for mask in (None, valid):
        want = []
        for r in range(5):
            cols = [j for j in range(7) if mask is None or mask[r, j]]
            w = len(cols) if pos_weight == "balanced" else 1
            sig = 1 / (1 + math.exp(-pos[r].item()))
            want.append(-(w * math.log(sig) + sum(math.log(1 - 1 / (1 + math.exp(-neg[r, j].item()))) for j in cols)))
        scores = neg if mask is None else neg.masked_fill(~mask, float("-inf"))
        got = bce_terms(pos, scores, mask, pos_weight)
        assert got.tolist() == pytest.approx(want, rel=1e-12)


def test_the_loss_combines_the_terms_with_their_weights():
    pos, neg = _scores(5, p=6, n=12)
    loss = _loss(list_negatives=4, n_negatives=12, bce_weight=0.5, surrogate_weight=2.0, dcg_weight=3.0)
    bce, mse, edcg, dcg = guidedrec_terms(pos, neg, None, loss.surrogate, 4)
    assert torch.allclose(dcg, _dcg_loop(pos, neg[:, :4]))  # the list: the first 4 negatives
    want = (0.5 * bce + 2.0 * mse - 3.0 * edcg).mean()
    assert loss(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(want.item(), rel=1e-12)
    diag = loss.diagnostics(None)
    assert diag == pytest.approx({"bce": bce.mean().item(), "surrogate_mse": mse.mean().item(),
                                  "edcg": edcg.mean().item(), "list_dcg": dcg.mean().item()}, rel=1e-6)
    loss(LossBatch(pos=pos, neg=neg))  # means over the epoch's steps, restarted each epoch
    assert loss.diagnostics(None)["bce"] == pytest.approx(bce.mean().item(), rel=1e-6)
    loss.on_train_epoch_start(1)
    assert loss.diagnostics(None) == {}


def test_the_surrogate_learns_only_from_its_fit_and_the_model_only_from_bce_and_edcg():
    pos, neg = _scores(6, p=6, n=9)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    loss = _loss()
    params = list(loss.parameters())
    bce, mse, edcg, _ = guidedrec_terms(pos, neg, None, loss.surrogate, 9)
    fit = torch.autograd.grad(mse.sum(), [*params, pos, neg], allow_unused=True)
    assert all(g is not None and torch.isfinite(g).all() for g in fit[:-2]) and fit[-2] is None and fit[-1] is None
    assert any(g.abs().sum() > 0 for g in fit[:-2])
    guide = torch.autograd.grad(edcg.sum(), [*params, pos, neg], allow_unused=True)
    assert all(g is None for g in guide[:-2]) and guide[-2].abs().sum() > 0 and guide[-1].abs().sum() > 0
    assert all(g is None for g in torch.autograd.grad(bce.sum(), [*params, pos], allow_unused=True)[:-1])
    # the total: the surrogate's gradient is the fit's alone, the scores' that of BCE - EDCG
    total = torch.autograd.grad(loss(LossBatch(pos=pos, neg=neg)), [*params, pos, neg])
    for got, want in zip(total[:-2], fit[:-2], strict=True):
        assert torch.allclose(got, want / 6, rtol=1e-12, atol=0)
    bce, _, edcg, _ = guidedrec_terms(pos, neg, None, loss.surrogate, 9)
    want_scores = torch.autograd.grad((bce - edcg).mean(), [pos, neg])
    assert torch.allclose(total[-2], want_scores[0], rtol=1e-12)
    assert torch.allclose(total[-1], want_scores[1], rtol=1e-12)


def test_gradcheck():
    # the terms that reach the scores: BCE and EDCG (the fit's stop-gradient input and the
    # piecewise-constant DCG move numerically but carry no gradient by design)
    loss = _loss(list_negatives=4, n_negatives=6)
    pos, neg = _scores(7, p=5, n=6)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    valid = torch.ones(5, 6, dtype=torch.bool)
    valid[1, 2] = valid[3, 0] = False

    def terms(p, n):
        bce, _, edcg, _ = guidedrec_terms(p, n.masked_fill(~valid, float("-inf")), valid, loss.surrogate, 4)
        return bce, edcg

    assert torch.autograd.gradcheck(terms, (pos, neg))
    # and the surrogate's fit as a function of its first layer
    weight = loss.surrogate.mlp1.weight.detach().clone().requires_grad_(True)

    def fit(w):
        out = torch.func.functional_call(loss.surrogate, {"mlp1.weight": w}, (x,))
        return (out - dcg).pow(2)

    x = torch.rand(5, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
    dcg = torch.rand(5, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    assert torch.autograd.gradcheck(fit, (weight,))


def test_fitting_the_surrogate_through_the_loss_reduces_its_error():
    gen = torch.Generator().manual_seed(8)
    pos = torch.randn(128, generator=gen, dtype=torch.float64) * 0.5 + 0.3  # a fixed list distribution
    neg = torch.randn(128, 9, generator=gen, dtype=torch.float64) * 0.5
    loss = _loss()
    opt = torch.optim.Adam(loss.parameters(), lr=0.02)

    def error():
        return guidedrec_terms(pos, neg, None, loss.surrogate, 9)[1].mean().item()

    before, spread = error(), list_dcg(pos, neg, None).var(unbiased=False).item()
    for _ in range(60):  # the whole loss: only its squared error reaches the surrogate
        opt.zero_grad()
        loss(LossBatch(pos=pos, neg=neg)).backward()
        opt.step()
    # far below the start, and below half the error of the best constant (the DCGs' variance):
    # the surrogate reads the lists, not just their mean DCG
    assert error() < 0.25 * before and error() < 0.5 * spread


def test_pick_list_takes_the_first_valid_columns():
    neg = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]])
    valid = torch.tensor([[True, False, True, True], [False, False, True, False]])
    listed, member = pick_list(neg, valid, 2)
    assert listed[0].tolist() == pytest.approx([0.1, 0.3]) and listed[1, 0].item() == pytest.approx(0.7)
    assert member.tolist() == [[True, True], [True, False]]
    assert pick_list(neg, None, 3)[0].tolist() == neg[:, :3].tolist() and pick_list(neg, None, 3)[1] is None


def test_shared_negatives_masked_columns_count_as_removed():
    # rows with two masked columns each, N = 8 > L - 1 = 4: the same as the compacted rows
    pos, neg = _scores(9, p=4, n=8)
    valid = torch.ones(4, 8, dtype=torch.bool)
    for r, cols in enumerate([(0, 5), (2, 3), (6, 7), (1, 4)]):
        valid[r, list(cols)] = False
    loss = _loss(list_negatives=4, n_negatives=8)
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_(True)
    got = loss(LossBatch(pos=pos, neg=masked, neg_valid=valid))
    compact = neg[valid].view(4, 6)
    want = _loss(list_negatives=4, n_negatives=6)(LossBatch(pos=pos, neg=compact))
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    got.backward()
    assert torch.isfinite(masked.grad).all() and (masked.grad[~valid] == 0).all()


def test_short_lists_pad_with_zero_entries_and_empty_rows_give_zero():
    pos, neg = _scores(10, p=3, n=4)
    valid = torch.tensor([[True, True, True, True], [True, False, True, False], [False, False, False, False]])
    loss = _loss(list_negatives=4, n_negatives=4)
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_(True)
    pos = pos.clone().requires_grad_(True)
    got = loss(LossBatch(pos=pos, neg=masked, neg_valid=valid))
    # row 1 by hand: its masked slots enter the surrogate as (score 0, label 0) and never outrank the positive
    x = torch.zeros(1, 5, 2, dtype=torch.float64)
    x[0, 0] = torch.tensor([torch.sigmoid(pos[1]).item(), 1.0])
    x[0, 1, 0], x[0, 3, 0] = torch.sigmoid(neg[1, 0]), torch.sigmoid(neg[1, 2])
    phi = loss.surrogate(x).item()
    dcg = 1 / math.log2(2 + int(neg[1, 0] > pos[1]) + int(neg[1, 2] > pos[1]))
    bce = -(2 * math.log(torch.sigmoid(pos[1]).item()) + math.log(1 - torch.sigmoid(neg[1, 0]).item())
            + math.log(1 - torch.sigmoid(neg[1, 2]).item()))
    full = _loss(list_negatives=4, n_negatives=4)(LossBatch(pos=pos[:1].detach(), neg=neg[:1]))
    assert got.item() == pytest.approx((full.item() + bce + (phi - dcg) ** 2 - phi + 0.0) / 3, rel=1e-10)
    got.backward()
    assert torch.isfinite(masked.grad).all() and (masked.grad[~valid] == 0).all() and pos.grad[2].item() == 0


def test_all_negatives_winning_is_finite_and_pushes_the_positive_up():
    loss = _loss(n_negatives=50)
    pos = torch.full((2,), -1.0, dtype=torch.float64, requires_grad=True)
    neg = torch.ones(2, 50, dtype=torch.float64, requires_grad=True)
    value = loss(LossBatch(pos=pos, neg=neg))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
    assert (pos.grad <= 0).all() and (neg.grad >= 0).all()


def test_the_run_seed_fixes_the_surrogate_and_a_checkpoint_restores_it():
    a, b, c = _loss(0), _loss(0), _loss(1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values(), strict=True))
    pos, neg = _scores(11)
    opt = torch.optim.Adam(a.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        a(LossBatch(pos=pos, neg=neg)).backward()
        opt.step()
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert {k.split(".")[0] for k in state} == {"surrogate"} and len(state) == 12
    c.load_state_dict(state)
    assert c(LossBatch(pos=pos, neg=neg)).item() == a(LossBatch(pos=pos, neg=neg)).item()


def test_the_training_optimiser_covers_the_surrogate_with_its_own_options_if_set():
    torch.manual_seed(0)
    loss = build("guidedrec")
    module = RankingModule(MF(5, 7, dim=4), loss, partial(torch.optim.Adam, lr=0.01, weight_decay=1e-4), seed=0)
    groups = module.configure_optimizers().param_groups
    assert len(groups) == 1 and {id(p) for p in loss.parameters()} <= {id(p) for p in groups[0]["params"]}
    loss = build("guidedrec", surrogate_lr=0.002)
    module = RankingModule(MF(5, 7, dim=4), loss, partial(torch.optim.Adam, lr=0.01, weight_decay=1e-4), seed=0)
    groups = module.configure_optimizers().param_groups
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(0.01, 1e-4), (0.002, 1e-4)]
    assert [id(p) for p in groups[1]["params"]] == [id(p) for p in loss.parameters()]
    assert {id(p) for p in groups[0]["params"]} == {id(p) for p in module.model.parameters()}


@pytest.mark.parametrize("kwargs,message", [
    ({"list_negatives": 10}, r"loss.list_negatives must be in \[1, loss.n_negatives=9\], got 10"),
    ({"list_negatives": 0}, r"loss.list_negatives must be in \[1, loss.n_negatives=9\], got 0"),
    ({"pos_weight": "half"}, r"loss.pos_weight must be one of balanced, none, got 'half'"),
    ({"surrogate": "cnn"}, r"loss.surrogate must be one of mlp_nfm, mlp, got 'cnn'"),
    ({"width": 0}, r"loss.width must be >= 1 or null \(2 x list length\), got 0"),
    ({"dcg_weight": -1.0}, r"loss.dcg_weight must be >= 0, got -1.0"),
    ({"surrogate_lr": -0.1}, r"loss.surrogate_lr must be >= 0 or null \(the optimiser's\), got -0.1"),
])
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build("guidedrec", **kwargs)


def test_the_mlp_surrogate_and_width_switches():
    loss = _loss(surrogate="mlp", width=5)
    names = [n for n, _ in loss.named_parameters()]
    assert not any("nfm" in n for n in names) and loss.surrogate.mlp1.weight.shape == (5, 20)
    pos, neg = _scores(12)
    assert torch.isfinite(loss(LossBatch(pos=pos, neg=neg)))
    assert _loss().surrogate.mlp1.weight.shape == (20, 20)  # null: 2L as the reference
