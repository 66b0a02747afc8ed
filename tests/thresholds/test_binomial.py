"""``binomial_safe``: the hypergeometric tail, and overestimates at most delta of the time."""

import pytest
import torch
from scipy import stats

from bench.thresholds import build as build_estimator
from bench.thresholds.binomial import hypergeom_upper_tail


def test_hypergeometric_tail_matches_scipy_and_the_sheets_example():
    M, n = torch.tensor([50.0, 1000.0]), torch.tensor([12.0, 100.0])
    table = hypergeom_upper_tail(M, n, 10)
    for b in range(2):
        for m in range(10):
            for j in range(11):
                want = stats.hypergeom.sf(j - 1, int(M[b]), m, int(n[b])) if j > 0 else 1.0
                assert table[b, m, j].item() == pytest.approx(want, abs=1e-12), (b, m, j)
    # K = 10, s = 0.1, delta = 1e-4: k' = 6 (docs/thresholds.md; binomial ~ hypergeometric on a large catalogue)
    big = hypergeom_upper_tail(torch.tensor([1e6]), torch.tensor([1e5]), 10)[0, 9]
    assert big[5].item() > 1e-4 >= big[6].item()
    assert stats.binom.sf(0, 9, 0.1) == pytest.approx(0.6126, abs=1e-4)  # the naive k' = 1 overestimates 61%


def test_binomial_safe_overestimates_at_most_delta_and_is_tighter_than_sampled(fixed_scorer, train_data):
    """Many independent users with i.i.d. scores: the observed overestimate rate is
    consistent with <= delta (one-sided binomial test), and ranks are much closer to K."""
    gen = torch.Generator().manual_seed(0)
    n_users, n_items, k, n_neg, delta = 3000, 400, 10, 40, 0.05
    scores = torch.rand(n_users, n_items, generator=gen)
    data = train_data(n_users, n_items, {u: [u % n_items] for u in range(n_users)})
    users = torch.arange(n_users)
    negatives = torch.randint(0, n_items, (n_users, n_neg), generator=gen)
    negatives = torch.where(negatives == (users % n_items)[:, None], (negatives + 1) % n_items, negatives)
    model = fixed_scorer(scores)
    exact = build_estimator("exact").estimate(model, users, None, k)
    est = build_estimator("binomial_safe", delta=delta)
    est.bind(data)
    got = est.estimate(model, users, negatives, k)
    over = int((got > exact).sum())
    assert stats.binomtest(over, n_users, delta, alternative="greater").pvalue > 1e-3, over
    plain = build_estimator("sampled", positives="all")
    plain.bind(data)
    base = plain.estimate(model, users, negatives, k)
    rank = lambda b: (scores >= b[:, None]).sum(1).float().median().item()
    assert rank(got) < 0.6 * rank(base)
