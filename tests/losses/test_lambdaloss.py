"""LambdaLoss@K: the formula with exact ranks (both variants), ties, sampled ranks."""

import math

import pytest
import torch

from bench.contracts import LossBatch, TrainData
from bench.losses import build
from bench.losses.lambdaloss import exact_ranks, lambda_weights


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
