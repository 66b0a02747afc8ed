"""BSL against its formula; with equal temperatures it is SL."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.losses import build
from bench.losses.bsl import bsl_loss


def test_bsl_matches_the_formula_and_reduces_to_sl():
    gen = torch.Generator().manual_seed(2)
    pos = torch.rand(5, generator=gen, dtype=torch.float64) * 2 - 1
    neg = torch.rand(5, 4, generator=gen, dtype=torch.float64) * 2 - 1
    want = sum(-pos[i].item() / 0.1 + (0.3 / 0.1) * math.log(sum(math.exp(neg[i, j].item() / 0.3) for j in range(4)))
               for i in range(5)) / 5
    assert bsl_loss(pos, neg, 0.1, 0.3).item() == pytest.approx(want, rel=1e-12)
    sl = build("sl", tau=0.2)(LossBatch(pos=pos, neg=neg))
    assert build("bsl", tau1=0.2, tau2=0.2)(LossBatch(pos=pos, neg=neg)).item() == pytest.approx(sl.item(), rel=1e-12)
