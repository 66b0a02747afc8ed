"""BPR against the per-pair formula, with one and with several negatives."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.losses import build
from bench.losses.bpr import bpr_loss


def _scores(seed, b=6, n=5, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, generator=gen, dtype=dtype) * 2 - 1, torch.rand(b, n, generator=gen, dtype=dtype) * 2 - 1)


def test_bpr_matches_the_formula():
    pos, neg = _scores(2, n=1)
    want = sum(-math.log(1 / (1 + math.exp(-(pos[i].item() - neg[i, 0].item())))) for i in range(pos.numel()))
    want /= pos.numel()
    assert build("bpr")(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(want, rel=1e-12)
    pos, neg = _scores(3, n=4)  # several negatives: mean over pairs and negatives
    want = sum(math.log1p(math.exp(neg[i, j].item() - pos[i].item())) for i in range(6) for j in range(4)) / 24
    assert bpr_loss(pos, neg).item() == pytest.approx(want, rel=1e-12)
