"""SL (softmax loss): the formula, its cross-entropy form, stability, the gradient's direction."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.losses import build
from bench.losses.softmax import softmax_loss


def _scores(seed=0, b=6, n=5, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, generator=gen, dtype=dtype) * 2 - 1, torch.rand(b, n, generator=gen, dtype=dtype) * 2 - 1)


@pytest.mark.parametrize("self_term", [False, True])
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0])
def test_softmax_loss_matches_the_formula(self_term, tau):
    pos, neg = _scores()
    want = 0.0
    for i in range(pos.numel()):
        total = sum(math.exp((neg[i, j].item() - pos[i].item()) / tau) for j in range(neg.shape[1]))
        want += math.log(total + (1.0 if self_term else 0.0))
    want /= pos.numel()
    got = build("sl", tau=tau, self_term=self_term)(LossBatch(pos=pos, neg=neg))
    assert got.item() == pytest.approx(want, rel=1e-12)


def test_softmax_self_term_is_cross_entropy_of_the_positive():
    pos, neg = _scores(1)
    logits = torch.cat([pos[:, None], neg], 1) / 0.1
    ce = torch.nn.functional.cross_entropy(logits, torch.zeros(pos.numel(), dtype=torch.long))
    assert softmax_loss(pos, neg, 0.1, self_term=True).item() == pytest.approx(ce.item(), rel=1e-12)


def test_softmax_is_stable_for_small_tau():
    pos, neg = torch.tensor([-1.0]), torch.tensor([[1.0, 0.9]])
    value = softmax_loss(pos, neg, 0.001)
    assert torch.isfinite(value) and value.item() == pytest.approx(2000 + math.log(1 + math.exp(-100)), rel=1e-6)


def test_softmax_gradient_pushes_positive_up_and_hardest_negative_most():
    pos = torch.tensor([0.0], requires_grad=True)
    neg = torch.tensor([[0.5, -0.5]], requires_grad=True)
    softmax_loss(pos, neg, 0.2).backward()
    assert pos.grad.item() == pytest.approx(-1 / 0.2)  # d/ds_ui of logsumexp((s_j - s_i)/tau) = -1/tau
    assert neg.grad[0, 0] > neg.grad[0, 1] > 0
