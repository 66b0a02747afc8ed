"""The chunked full-ranking evaluator: masks, chunks, users without targets, NaN scores."""

import pytest
import torch

from bench.datasets import CSR
from bench.errors import TrainingDiverged
from bench.evaluation import FullRankingEvaluator, ranking_metrics


def test_evaluator_masks_excluded_items_chunks_and_skips_users_without_targets():
    gen = torch.Generator().manual_seed(3)
    n_users, n_items = 50, 40
    emb_u, emb_i = torch.randn(n_users, 8, generator=gen), torch.randn(n_items, 8, generator=gen)
    full = emb_u @ emb_i.T
    pairs = torch.stack(torch.meshgrid(torch.arange(n_users), torch.arange(n_items), indexing="ij"), -1).reshape(-1, 2)
    kind = torch.randint(0, 10, (pairs.shape[0],), generator=gen)
    kind[pairs[:, 0] < 5] = 9  # users 0..4: no target items at all
    train = CSR.from_pairs(pairs[kind == 0], n_users, n_items)
    target = CSR.from_pairs(pairs[kind == 1], n_users, n_items)
    ev = FullRankingEvaluator(target, [train], ks=(5, 20), max_scores=7 * n_items)  # chunks of 7 users
    assert ev.n_skipped == int((target.degrees() == 0).sum()) >= 5
    got = ev.evaluate(lambda u: full[u])
    users = ev.users
    masked = full[users].clone()
    masked[train.dense_rows(users)] = float("-inf")
    want = ranking_metrics(masked, target.dense_rows(users), ks=(5, 20))
    for key in want:
        torch.testing.assert_close(got[key], want[key])
    # a zero mask instead of -inf would change the result for negative scores
    zeroed = full[users].clone()
    zeroed[train.dense_rows(users)] = 0.0
    assert not torch.equal(ranking_metrics(zeroed, target.dense_rows(users), ks=(20,))["ndcg@20"], got["ndcg@20"])


def test_nan_scores_stop_evaluation_with_a_clear_message():
    target = CSR.from_pairs(torch.tensor([[0, 1], [1, 2]]), 2, 4)
    ev = FullRankingEvaluator(target, [], ks=(2,))

    def scores(users):
        out = torch.zeros(users.numel(), 4)
        out[1, 3] = float("nan")
        return out

    with pytest.raises(TrainingDiverged, match="NaN scores"):
        ev.evaluate(scores)


def test_evaluation_does_not_depend_on_the_thread_count():
    # the same model's metrics with 1 and 2 threads, to the last bit (training is another matter:
    # the BLAS may split the backward's reductions by thread, README "Reproducibility")
    from bench.models import MF

    gen = torch.Generator().manual_seed(0)
    n_users, n_items = 700, 3000
    pairs = torch.unique(torch.stack([torch.randint(0, n_users, (30000,), generator=gen),
                                      torch.randint(0, n_items, (30000,), generator=gen)], 1), dim=0)
    kind = torch.randint(0, 5, (pairs.shape[0],), generator=gen)
    train = CSR.from_pairs(pairs[kind > 0], n_users, n_items)
    target = CSR.from_pairs(pairs[kind == 0], n_users, n_items)
    torch.manual_seed(0)
    model = MF(n_users, n_items, dim=64).eval()
    ev = FullRankingEvaluator(target, [train], ks=(10, 50), max_scores=97 * n_items)
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append(ev.evaluate(model.full_scorer()))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])


def test_metrics_of_many_chunks_at_once_equal_each_chunk_alone_and_the_dense_reference(monkeypatch):
    # scores on a grid of 0.25, so lists hold ties and many end inside one (the tail counts come
    # from the score rows, which the metrics stage no longer has); both side protocols on
    import bench.evaluation.evaluator as evaluator_module

    gen = torch.Generator().manual_seed(5)
    n_users, n_items = 60, 30
    full = (torch.randn(n_users, n_items, generator=gen) * 2).round() / 4
    pairs = torch.stack(torch.meshgrid(torch.arange(n_users), torch.arange(n_items), indexing="ij"), -1).reshape(-1, 2)
    kind = torch.randint(0, 6, (pairs.shape[0],), generator=gen)
    train = CSR.from_pairs(pairs[kind == 0], n_users, n_items)
    target = CSR.from_pairs(pairs[kind == 1], n_users, n_items)
    ev = FullRankingEvaluator(target, [train], ks=(3, 10), max_scores=7 * n_items, per_edge=True,
                              sampled_negatives=5, sampled_seed=1)
    alone = [ev.evaluate_chunk(lambda u: full[u].clone(), chunk) for chunk in ev.user_chunks()]
    monkeypatch.setattr(evaluator_module, "METRIC_ROWS", 20)  # groups of two chunks and a last one alone
    together = ev.evaluate(lambda u: full[u].clone())
    assert set(together) == set(alone[0])
    for key in together:
        assert torch.equal(together[key], torch.cat([part[key] for part in alone])), key
    assert together["ties:cut@3"].sum() >= 5  # the case has lists that end inside a tie
    masked = full[ev.users].clone()
    masked[train.dense_rows(ev.users)] = float("-inf")
    want = ranking_metrics(masked, target.dense_rows(ev.users), ks=(3, 10))
    for key in want:
        torch.testing.assert_close(together[key], want[key])



def test_hits_are_the_targets_of_each_listed_item():
    gen = torch.Generator().manual_seed(6)
    n_users, n_items = 50, 400
    pairs = torch.stack(torch.meshgrid(torch.arange(n_users), torch.arange(n_items), indexing="ij"), -1).reshape(-1, 2)
    kind = torch.randint(0, 10, (pairs.shape[0],), generator=gen)
    train = CSR.from_pairs(pairs[kind == 0], n_users, n_items)
    target = CSR.from_pairs(pairs[kind == 1], n_users, n_items)
    ev = FullRankingEvaluator(target, [train], ks=(1, 5, 20), max_scores=16 * n_items)
    users = ev.users[:9]
    top = torch.randint(0, n_items, (9, 21), generator=gen)  # repeats and every kind of item
    hits = ev._hits(target, users, top)
    assert torch.equal(hits, target.dense_rows(users).gather(1, top))
    assert 0 < int(hits.sum()) < hits.numel()
