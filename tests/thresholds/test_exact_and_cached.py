"""``exact`` and ``cached``: safe estimators never exceed the exact K-th score, even with a
stale cache; the cache is exact right after a rebuild and rebuilds by epoch."""

import pytest
import torch

from bench.thresholds import build as build_estimator
from bench.thresholds import from_spec


def _problem(seed, train_data, n_users=6, max_items=60):
    gen = torch.Generator().manual_seed(seed)
    n_items = int(torch.randint(8, max_items, (1,), generator=gen))  # small catalogues: duplicates
    scores = torch.randint(0, 6, (n_users, n_items), generator=gen).float()  # ties
    positives = {u: torch.randperm(n_items, generator=gen)[: int(torch.randint(1, 6, (1,), generator=gen))].tolist()
                 for u in range(n_users)}
    data = train_data(n_users, n_items, positives)
    users = torch.arange(n_users).repeat(3)
    pos_mask = data.train.dense_rows(users)
    negatives = torch.randint(0, n_items, (users.numel(), 40), generator=gen)
    negatives = torch.where(pos_mask.gather(1, negatives), (negatives + 1) % n_items, negatives)
    return gen, scores, data, users, negatives


@pytest.mark.parametrize("seed", range(40))
def test_safe_estimators_never_exceed_the_exact_kth_score(seed, fixed_scorer, train_data):
    gen, scores, data, users, negatives = _problem(seed, train_data)
    now = fixed_scorer(scores)
    before = fixed_scorer(torch.randint(0, 6, scores.shape, generator=gen).float())  # the model at the last rebuild
    for k in (1, 3, 5, 20, scores.shape[1] + 5):
        exact = build_estimator("exact").estimate(now, users, None, k)
        for name, opts in (("sampled", {}), ("cached", {"size": 4}), ("cached", {"size": 64, "positives": "p90"})):
            est = build_estimator(name, **opts)
            assert est.safe
            est.bind(data)
            if name == "cached":
                est.rebuild(before)  # stale cache: still safe
            got = est.estimate(now, users, negatives, k)
            assert (got <= exact).all(), (name, opts, k)


def test_cached_is_exact_right_after_a_rebuild_and_rebuilds_by_epoch(fixed_scorer, train_data):
    _, scores, data, users, negatives = _problem(3, train_data)
    model = fixed_scorer(scores)
    est = from_spec({"name": "cached", "size": 8})
    est.bind(data)
    exact = build_estimator("exact").estimate(model, users, None, 5)
    assert torch.equal(est.estimate(model, users, negatives, 5), exact)  # first use rebuilds
    assert not est.stale
    est.on_train_epoch_start(1)
    assert est.stale and "top" in dict(est.named_buffers())
