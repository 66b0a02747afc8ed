"""PSL against its formula for each activation."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.losses import build

SIGMA = {"tanh": lambda d: math.tanh(d) + 1, "relu": lambda d: max(d + 1, 0.0), "atan": lambda d: math.atan(d) + 1}


@pytest.mark.parametrize("activation", ["tanh", "relu", "atan"])
def test_psl_matches_the_formula(activation):
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(5, generator=gen, dtype=torch.float64) * 2 - 1
    neg = torch.rand(5, 4, generator=gen, dtype=torch.float64) * 2 - 1
    tau = 0.1
    want = 0.0
    for i in range(pos.numel()):
        total = sum(SIGMA[activation]((neg[i, j].item() - pos[i].item()) / 2) ** (1 / tau)
                    for j in range(neg.shape[1]))
        want += math.log(total)
    got = build("psl", tau_star=tau, activation=activation)(LossBatch(pos=pos, neg=neg))
    assert got.item() == pytest.approx(want / pos.numel(), rel=1e-9)
