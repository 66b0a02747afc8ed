"""BCE: values against the formula, SASRec's form, stability, shared-negative masking, config."""

import math

import pytest
import torch
import torch.nn.functional as F

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.losses.pointwise import bce_loss


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


def _slow_bce(pos, neg, reduction, valid=None):
    """Mean over rows of -log sigma(s_i) - agg_j log(1 - sigma(s_j)), over each row's valid j."""
    total = 0.0
    for r in range(len(pos)):
        js = [j for j in range(len(neg[r])) if valid is None or valid[r][j]]
        negs = [-math.log(1 - _sigmoid(neg[r][j])) for j in js]
        agg = sum(negs) if reduction == "sum" else (sum(negs) / len(negs) if negs else 0.0)
        total += -math.log(_sigmoid(pos[r])) + agg
    return total / len(pos)


def _scores(seed, p, n, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(p, generator=gen, dtype=torch.float64) * scale,
            torch.randn(p, n, generator=gen, dtype=torch.float64) * scale)


def test_hand_checkable_values():
    pos, neg = torch.zeros(1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
    assert bce_loss(pos, neg, "mean").item() == pytest.approx(2 * math.log(2))  # log 2 + mean(log 2, log 2)
    assert bce_loss(pos, neg, "sum").item() == pytest.approx(3 * math.log(2))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_value_matches_the_formula(reduction):
    pos, neg = _scores(0, 6, 4)
    got = build("bce", reduction=reduction, n_negatives=4)(LossBatch(pos=pos, neg=neg))
    assert got.item() == pytest.approx(_slow_bce(pos.tolist(), neg.tolist(), reduction), rel=1e-12)


def test_the_default_is_sasrecs_mean_of_positive_plus_mean_of_negative_logit_losses():
    pos, neg = _scores(1, 8, 1)
    loss = build("bce")
    assert (loss.reduction, loss.n_negatives) == ("mean", 1)
    sasrec = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos))
              + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg)))
    assert loss(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(sasrec.item(), rel=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradcheck(reduction):
    pos, neg = _scores(2, 5, 3)
    valid = torch.tensor([[True, False, True]] * 4 + [[False, False, False]])
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p, n: bce_loss(p, n, reduction), (pos, neg))
    # masked form: the valid entries only (gradcheck perturbs -inf entries too, so they stay finite here)
    assert torch.autograd.gradcheck(lambda p, n: bce_loss(p, n, reduction, valid), (pos, neg))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_finite_and_pushes_the_positive_up_when_every_negative_wins(reduction):
    for lo, hi in [(-1.0, 1.0), (-1e4, 1e4)]:  # large dot-product logits: log(sigmoid) would give inf
        pos = torch.full((2,), lo, requires_grad=True)
        neg = torch.full((2, 50), hi, requires_grad=True)
        value = build("bce", reduction=reduction, n_negatives=50)(LossBatch(pos=pos, neg=neg))
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
        assert (pos.grad < 0).all() and (neg.grad > 0).all()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_masked_shared_columns_count_exactly_as_removed(reduction):
    pos, neg = _scores(3, 4, 5)
    valid = torch.tensor([[True, False, True, True, False],
                          [True, True, True, True, True],
                          [False, True, False, True, False],
                          [False, False, False, False, False]])  # a row of own positives only
    masked = neg.masked_fill(~valid, float("-inf")).requires_grad_(True)
    p = pos.clone().requires_grad_(True)
    value = build("bce", reduction=reduction, n_negatives=5)(LossBatch(pos=p, neg=masked, neg_valid=valid))
    value.backward()
    assert value.item() == pytest.approx(_slow_bce(pos.tolist(), neg.tolist(), reduction, valid.tolist()), rel=1e-12)
    assert torch.isfinite(masked.grad).all() and (masked.grad[~valid] == 0).all()
    # a column masked in every row gives exactly the value without that column
    common = torch.tensor([True, False, True, True, True]).expand(4, 5)
    m = neg.masked_fill(~common, float("-inf"))
    want = bce_loss(pos, neg[:, [0, 2, 3, 4]], reduction)
    assert bce_loss(pos, m, reduction, common).item() == pytest.approx(want.item(), rel=1e-14)


def test_shares_negatives_only_with_more_than_one():
    assert build("bce").shares_negatives is False
    assert build("bce", n_negatives=1).shares_negatives is False
    assert build("bce", n_negatives=2).shares_negatives is True


def test_bad_config_is_refused():
    with pytest.raises(ConfigError, match=r"loss.reduction must be one of mean, sum, got 'avg'"):
        build("bce", reduction="avg")
    with pytest.raises(ConfigError, match=r"loss.n_negatives must be >= 1, got 0"):
        build("bce", n_negatives=0)
