"""bench.analysis.self_term: the negatives' log-sum per pair, over the catalogue or over draws (repeats
counted, the positive left out), checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from bench.analysis import self_term as script


def test_log_sums_by_hand():
    scores = torch.tensor([[0.2, 0.0, -0.2], [0.5, 0.9, 0.1]])
    users, items = torch.tensor([0, 1]), torch.tensor([0, 1])
    full = script.normaliser_sums(scores, users, items, 0.2)
    assert full[0].item() == pytest.approx(math.log(math.exp(-1) + math.exp(-2)))
    assert full[1].item() == pytest.approx(math.log(math.exp(-2) + math.exp(-4)))
    draws = torch.tensor([[1, 1, 0], [1, 2, 2]])  # user 0 draws item 1 twice and its positive once
    drawn = script.normaliser_sums(scores, users, items, 0.2, draws)
    assert drawn[0].item() == pytest.approx(math.log(2 * math.exp(-1)))
    assert drawn[1].item() == pytest.approx(math.log(2 * math.exp(-4)))

    summary = script.summarise(drawn)
    # Σ = 2/e (< 1) and 2/e^4: both pairs below 1; the self term shifts log Σ by log(1 + 1/Σ)
    assert summary["share_below_1"] == 1.0
    shifts = [math.log1p(math.e / 2), math.log1p(math.exp(4) / 2)]
    assert summary["mean_shift"] == pytest.approx(sum(shifts) / 2)
