"""The synthetic interaction data: deterministic per seed, sized as asked."""

import torch

from bench.datasets import Synthetic


def test_synthetic_is_deterministic_and_sized():
    a, b = Synthetic(n_users=50, n_items=40, seed=1).load(), Synthetic(n_users=50, n_items=40, seed=1).load()
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)
    per_user = torch.bincount(torch.cat([a.train, a.test])[:, 0], minlength=50)
    assert per_user.min() >= 10
    assert not torch.equal(a.train, Synthetic(n_users=50, n_items=40, seed=2).load().train)
