"""What spans every loss: the registry, the paper's defaults, gradients, finiteness."""

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import BenchError
from bench.losses import LOSSES, build
from bench.losses.bsl import bsl_loss
from bench.losses.psl import psl_loss
from bench.losses.slk import slk_loss
from bench.losses.song import song_g, song_weights


def test_registry_lists_known_losses_on_a_typo():
    assert {"bpr", "sl"} <= set(LOSSES.names())
    with pytest.raises(BenchError, match=r"unknown loss 'sll' \(did you mean 'sl'\?\); known: .*bpr.*sl"):
        build("sll")


def test_class_defaults_match_the_paper():
    sl = build("sl")
    assert (sl.tau, sl.self_term, sl.n_negatives) == (0.2, False, 1000)
    assert build("bpr").n_negatives == 1


def _scores(seed, b, n, lo, hi):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, generator=gen, dtype=torch.float64) * (hi - lo) + lo,
            torch.rand(b, n, generator=gen, dtype=torch.float64) * (hi - lo) + lo)


def _through(name, **kwargs):
    loss = build(name, **kwargs)
    return lambda p, n: loss(LossBatch(pos=p, neg=n))


def _gradcheck_case(case):
    """(function of (pos, neg), pos, neg) for one case."""
    if case in ("sl_tau0.2", "sl_self_term", "bpr"):  # (6, 5) scores in [-1, 1)
        pos, neg = _scores(4, 6, 5, -1.0, 1.0)
        kwargs = {"sl_tau0.2": ("sl", {"tau": 0.2}), "sl_self_term": ("sl", {"tau": 0.1, "self_term": True}),
                  "bpr": ("bpr", {})}[case]
        return _through(kwargs[0], **kwargs[1]), pos, neg
    pos, neg = _scores(11, 5, 4, -0.9, 0.9)
    beta = torch.linspace(-0.5, 0.5, 5, dtype=torch.float64)
    full = torch.rand(5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    frozen = pos.detach().clone()  # gradcheck perturbs the inputs in place
    fns = {
        "psl_tanh": lambda p, n: psl_loss(p, n, 0.25, "tanh"),
        "psl_atan": lambda p, n: psl_loss(p, n, 0.25, "atan"),
        "bsl": lambda p, n: bsl_loss(p, n, 0.2, 0.5),
        "slk": lambda p, n: slk_loss(p, n, beta, 0.2, 1.5, True),
        "lambdalossk": lambda p, n: build("lambdalossk", k=3, n_negatives=4)(
            LossBatch(pos=p, neg=n, users=torch.arange(5), full_scores=lambda r: full[r])),
        # psi and nabla f carry no gradient by design, so they are held fixed here
        "song": lambda p, n: (song_weights(frozen, torch.full((5,), 0.3, dtype=torch.float64),
                                           torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64),
                                           100, 2.0) * song_g(p, n, 1.0)).mean(),
    }
    return fns[case], pos, neg


@pytest.mark.parametrize("case", ["sl_tau0.2", "sl_self_term", "bpr", "psl_tanh", "psl_atan", "bsl", "slk",
                                  "lambdalossk", "song"])
def test_gradcheck(case):
    fn, pos, neg = _gradcheck_case(case)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (pos, neg))


def test_every_loss_is_finite_when_all_negatives_beat_the_positive(train_data):
    pos = torch.tensor([-1.0, -1.0])
    neg = torch.ones(2, 50)
    data = train_data(2, 60, {0: [0], 1: [1, 2]})
    full = torch.ones(2, 60)
    for name, kwargs in [("sl", {"tau": 0.01}), ("psl", {"tau_star": 0.005, "activation": "relu"}), ("bsl", {}),
                         ("bpr", {}), ("slk", {"tau_d": 0.01, "diagnostics_users": 0}), ("lambdalossk", {}),
                         ("songk", {})]:
        loss = build(name, n_negatives=50, **kwargs)
        loss.bind(data)
        batch = LossBatch(pos=pos.clone().requires_grad_(True), neg=neg, users=torch.tensor([0, 1]),
                          pair_ids=torch.tensor([0, 1]), negatives=torch.zeros(2, 50, dtype=torch.long),
                          full_scores=lambda r: full[r])
        value = loss(batch)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(batch.pos.grad).all(), name
        assert (batch.pos.grad <= 0).all(), name  # every loss pushes the positive up
