"""``stratified``: the weighted K-th by hand; unbiased in effective rank, where ``sampled``
follows the order-statistic law."""

import pytest
import torch

from bench.thresholds import build as build_estimator
from bench.thresholds.stratified import weighted_kth


def test_weighted_kth_by_hand():
    s = torch.tensor([[5.0, 4.0, 3.0, 2.0, float("-inf")]])
    w = torch.tensor([[1.0, 2.5, 2.5, 2.5, 0.0]])
    assert weighted_kth(s, w, 1).item() == 5.0
    assert weighted_kth(s, w, 3).item() == 4.0  # 1 + 2.5 = 3.5 >= 3
    assert weighted_kth(s, w, 4).item() == 3.0
    assert weighted_kth(s, w, 9).item() == float("-inf")  # total 8.5 < 9


def test_stratified_is_unbiased_in_effective_rank_and_sampled_follows_the_order_statistic_law(fixed_scorer,
                                                                                              train_data):
    gen = torch.Generator().manual_seed(1)
    n_users, n_items, k, n_neg = 2000, 2000, 20, 200
    scores = torch.rand(n_users, n_items, generator=gen)
    data = train_data(n_users, n_items, {u: [] for u in range(n_users)} | {0: [0]})
    users = torch.arange(1, n_users)  # users without positives: the pure sampling problem
    negatives = torch.randint(0, n_items, (users.numel(), n_neg), generator=gen)
    model = fixed_scorer(scores)
    exact = build_estimator("exact").estimate(model, users, None, k)
    rank = lambda b: (scores[users] >= b[:, None]).sum(1).float()
    st = build_estimator("stratified")
    st.bind(data)
    b = st.estimate(model, users, negatives, k)
    assert rank(b).mean().item() == pytest.approx(k, rel=0.15)
    assert 0.25 < (b > exact).float().mean().item() < 0.75  # tight, hence not safe
    sa = build_estimator("sampled", positives="all")
    sa.bind(data)
    distinct = torch.tensor([row.unique().numel() for row in negatives]).float()
    want = (k * (n_items + 1) / (distinct + 1)).mean().item()  # E[rank of the K-th of n of M] = K(M+1)/(n+1)
    assert rank(sa.estimate(model, users, negatives, k)).mean().item() == pytest.approx(want, rel=0.05)
