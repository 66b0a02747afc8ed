"""``quantile``: starts safe and loose, learns toward the top-K quantile."""

import pytest
import torch

from bench.thresholds import build as build_estimator


def test_quantile_learns_toward_the_top_k_quantile(fixed_scorer, train_data):
    gen = torch.Generator().manual_seed(2)
    n_users, n_items, k = 50, 1000, 20
    scores = torch.rand(n_users, n_items, generator=gen)
    data = train_data(n_users, n_items, {u: [u] for u in range(n_users)})
    model = fixed_scorer(scores)
    est = build_estimator("quantile", lr=0.01, steps=5)
    est.bind(data)
    users = torch.arange(n_users)
    first = None
    for _ in range(100):
        negatives = torch.randint(0, n_items, (n_users, 100), generator=gen)
        b = est.estimate(model, users, negatives, k)
        first = b if first is None else first
    rank = lambda x: (scores >= x[:, None]).sum(1).float().median().item()
    assert rank(first) > 3 * k  # the safe start is loose ...
    assert rank(b) == pytest.approx(k, rel=0.5)  # ... the learned threshold is near rank K
    assert "lam" in dict(est.named_buffers())
