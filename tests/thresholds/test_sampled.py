"""``sampled``: never above the exact K-th score (both paths, both positive caps); de-duplication."""

import pytest
import torch

from bench.contracts import draws_per_row
from bench.thresholds import build as build_estimator


@pytest.mark.parametrize("seed", range(40))
def test_sampled_estimator_never_exceeds_the_exact_kth_score(seed, fixed_scorer, train_data):
    gen = torch.Generator().manual_seed(seed)
    n_users = 6
    n_items = int(torch.randint(8, 60, (1,), generator=gen))  # small catalogues: many duplicates
    scores = torch.randint(0, 6, (n_users, n_items), generator=gen).float()  # ties too
    positives = {u: torch.randperm(n_items, generator=gen)[: int(torch.randint(1, 6, (1,), generator=gen))].tolist()
                 for u in range(n_users)}
    data = train_data(n_users, n_items, positives)
    model = fixed_scorer(scores)
    users = torch.arange(n_users).repeat(3)
    pos_mask = data.train.dense_rows(users)
    negatives = torch.randint(0, n_items, (users.numel(), 200), generator=gen)
    negatives = torch.where(pos_mask.gather(1, negatives), (negatives + 1) % n_items, negatives)  # roughly non-positive
    for k in (1, 3, 5, 20, n_items + 5):
        exact = build_estimator("exact").estimate(model, users, None, k)
        dense = None
        for positives_mode in ("p90", "all"):
            for path in ("dense", "sparse"):
                est = build_estimator("sampled", positives=positives_mode, path=path)
                est.bind(data)
                got = est.estimate(model, users, negatives, k)
                assert (got <= exact).all(), (k, positives_mode, path)
                if path == "dense":
                    dense = got
                else:
                    assert torch.equal(got, dense)  # two computations of the same set statistic
        if k > n_items:
            assert torch.isinf(exact).all() and (exact < 0).all()


def test_sampling_with_replacement_without_dedup_overestimates(fixed_scorer, train_data):
    # one user, catalogue 0..9 with scores 9..0; the K=2 threshold is 8. A sample that
    # holds item 0 (score 9) twice claims a second-best score of 9.
    scores = torch.arange(9, -1, -1).float().unsqueeze(0)
    data = train_data(1, 10, {0: [9]})
    negatives = torch.tensor([[0, 0, 5]])
    model = fixed_scorer(scores)
    exact = build_estimator("exact").estimate(model, torch.tensor([0]), None, 2)
    raw = build_estimator("sampled", dedup=False)
    raw.bind(data)
    assert exact.item() == 8.0
    assert raw.estimate(model, torch.tensor([0]), negatives, 2).item() == 9.0  # overestimates
    for path in ("dense", "sparse"):
        safe = build_estimator("sampled", path=path)
        safe.bind(data)
        assert safe.estimate(model, torch.tensor([0]), negatives, 2).item() == 4.0  # items 0, 5 (score 4)


@pytest.mark.parametrize("seed", range(20))
def test_shared_draws_scored_once_per_group_give_the_per_row_estimate(seed, fixed_scorer, train_data):
    # shared negatives: one draw per group of rows, with repeats and with the rows' own
    # positives in it; scoring each draw once must count exactly the same item set per row
    # as the per-row path (positives first, every item once)
    gen = torch.Generator().manual_seed(seed)
    n_users, n_items = 9, int(torch.randint(10, 40, (1,), generator=gen))
    scores = torch.randn(n_users, n_items, generator=gen)
    positives = {u: torch.randperm(n_items, generator=gen)[: int(torch.randint(1, 8, (1,), generator=gen))].tolist()
                 for u in range(n_users)}
    data = train_data(n_users, n_items, positives)
    model = fixed_scorer(scores)
    users = torch.randint(0, n_users, (int(torch.randint(5, 30, (1,), generator=gen)),), generator=gen)
    groups = int(torch.randint(1, 5, (1,), generator=gen))
    draws = torch.randint(0, n_items, (groups, int(torch.randint(3, 25, (1,), generator=gen))), generator=gen)
    for positives_mode in ("p90", "all"):
        est = build_estimator("sampled", positives=positives_mode, path="sparse")
        est.bind(data)
        for k in (1, 4, 12):
            per_row = est.estimate(model, users, draws_per_row(draws, users.numel()), k)
            assert torch.equal(est.estimate_shared(model, users, draws, k), per_row)
            # and the set statistic itself, by brute force over Python sets
            size = -(-users.numel() // groups)
            for r, u in enumerate(users.tolist()):
                listed = set(sorted(positives[u])[: est.cap] if est.cap else positives[u])
                items = sorted(listed | set(draws[r // size].tolist()))
                want = scores[u, items].sort(descending=True).values
                assert per_row[r].item() == (want[k - 1].item() if len(items) >= k else float("-inf"))


def test_shared_estimate_matches_per_row_on_an_mf_model(train_data):
    # the backbone's score_groups (a batched matmul) against score_items (a gather): same
    # numbers up to summation order
    from bench.models.mf import MF

    torch.manual_seed(0)
    n_users, n_items = 50, 300
    positives = {u: torch.randperm(n_items)[:12].tolist() for u in range(n_users)}
    data = train_data(n_users, n_items, positives)
    model = MF(n_users, n_items, dim=16)
    users = torch.randint(0, n_users, (64,))
    draws = torch.randint(0, n_items, (4, 3))
    est = build_estimator("sampled", path="sparse")
    est.bind(data)
    got = est.estimate_shared(model, users, draws, 5)
    want = est.estimate(model, users, draws_per_row(draws, users.numel()), 5)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("path", ["sparse", "dense"])
def test_shared_estimate_encodes_users_once_and_gathers_positives_once(path, train_data, monkeypatch):
    # a refresh step of a graph backbone: one propagation (embeddings()) for positives and draws
    # together on the grouped path, and the positives looked up once on the dense fallback too
    from bench.models.lightgcn import LightGCN

    torch.manual_seed(0)
    n_users, n_items = 40, 200
    positives = {u: torch.randperm(n_items)[:6].tolist() for u in range(n_users)}
    data = train_data(n_users, n_items, positives)
    model = LightGCN(n_users, n_items, dim=8)
    model.bind(data)
    users = torch.randint(0, n_users, (32,))
    draws = torch.randint(0, n_items, (4, 5))
    est = build_estimator("sampled", path=path)
    est.bind(data)
    want = est.estimate(model, users, draws_per_row(draws, users.numel()), 5)
    calls = {"embeddings": 0, "positives": 0}
    embeddings, positive_items = model.embeddings, est.positive_items

    def counted_embeddings():
        calls["embeddings"] += 1
        return embeddings()

    def counted_positives(u):
        calls["positives"] += 1
        return positive_items(u)

    monkeypatch.setattr(model, "embeddings", counted_embeddings)
    monkeypatch.setattr(est, "positive_items", counted_positives)
    got = est.estimate_shared(model, users, draws, 5)
    assert calls == {"embeddings": 1, "positives": 1}
    torch.testing.assert_close(got, want)
