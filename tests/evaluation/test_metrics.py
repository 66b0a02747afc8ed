"""Ranking metrics: hand-worked cases, a brute-force reference with ties, torchmetrics."""

import math

import pytest
import torch
import torchmetrics.functional.retrieval as tm

from bench.evaluation import metric_names, metrics_from_hits, rank_items, ranking_metrics
from bench.evaluation.metrics import ranks_within

D = [1.0 / math.log2(r + 1) for r in range(1, 200)]  # D[r-1] = discount at rank r


def test_the_registered_metrics_are_the_five_built_ins():
    assert metric_names() == ["recall", "ndcg", "precision", "hit", "mrr"]


def test_hand_worked_user():
    # 6 items, scores give ranking 3,1,5,0,4,2 ; relevant = {1, 4, 2}
    scores = torch.tensor([[0.3, 0.8, 0.0, 0.9, 0.1, 0.5]])
    relevant = torch.zeros(1, 6, dtype=torch.bool)
    relevant[0, [1, 4, 2]] = True
    m = ranking_metrics(scores, relevant, ks=(1, 2, 5))
    # hits by rank: [0, 1, 0, 0, 1, 1]
    assert m["recall@2"].item() == pytest.approx(1 / 3)
    assert m["precision@2"].item() == pytest.approx(1 / 2)
    assert m["hit@1"].item() == 0.0 and m["hit@2"].item() == 1.0
    assert m["mrr@1"].item() == 0.0 and m["mrr@5"].item() == pytest.approx(1 / 2)
    dcg5 = 1 / math.log2(3) + 1 / math.log2(6)
    idcg5 = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert m["ndcg@5"].item() == pytest.approx(dcg5 / idcg5)
    assert m["ndcg@2"].item() == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert m["recall@5"].item() == pytest.approx(2 / 3)


def test_fewer_relevant_than_k_uses_min_k_r_in_idcg():
    # one relevant item ranked first: NDCG@K must be 1 for every K (IDCG over min(K, |R|) = 1 item)
    hits = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    m = metrics_from_hits(hits, torch.tensor([1]), ks=(5, 10))
    assert m["ndcg@5"].item() == pytest.approx(1.0)
    assert m["ndcg@10"].item() == pytest.approx(1.0)
    assert m["precision@10"].item() == pytest.approx(0.1)
    # two relevant, one found at rank 3: DCG = D3, IDCG@10 = D1 + D2 (not only the retrieved hit)
    hits = torch.tensor([[0, 0, 1, 0, 0, 0, 0, 0, 0, 0]])
    m = metrics_from_hits(hits, torch.tensor([2]), ks=(10,))
    assert m["ndcg@10"].item() == pytest.approx(D[2] / (D[0] + D[1]))


def test_ties_are_broken_by_lower_item_index_inside_and_at_the_cutoff():
    scores = torch.tensor([[1.0, 2.0, 2.0, 0.5, 2.0, 2.0]])
    assert rank_items(scores, 3).tolist() == [[1, 2, 4]]  # four-way tie across the cut-off
    assert rank_items(scores, 6).tolist() == [[1, 2, 4, 5, 0, 3]]
    # masked items never precede real ones
    scores = torch.tensor([[float("-inf"), 0.0, float("-inf"), 0.0]])
    assert rank_items(scores, 2).tolist() == [[1, 3]]


def _brute_force(scores: torch.Tensor, relevant: torch.Tensor, ks):
    """One user at a time, straight from docs/evaluation.md, ties by lower index."""
    out = {f"{m}@{k}": [] for m in ("recall", "ndcg", "precision", "hit", "mrr") for k in ks}
    for s, rel in zip(scores.tolist(), relevant.tolist()):
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))
        r_u = {i for i, r in enumerate(rel) if r}
        for k in ks:
            top = order[:k]
            hit_ranks = [rank for rank, i in enumerate(top, start=1) if i in r_u]
            dcg = sum(1 / math.log2(r + 1) for r in hit_ranks)
            idcg = sum(1 / math.log2(r + 1) for r in range(1, min(k, len(r_u)) + 1))
            out[f"recall@{k}"].append(len(hit_ranks) / len(r_u))
            out[f"ndcg@{k}"].append(dcg / idcg)
            out[f"precision@{k}"].append(len(hit_ranks) / k)
            out[f"hit@{k}"].append(1.0 if hit_ranks else 0.0)
            out[f"mrr@{k}"].append(1.0 / hit_ranks[0] if hit_ranks else 0.0)
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force_with_heavy_ties_and_masks(seed):
    gen = torch.Generator().manual_seed(seed)
    n_users, n_items = 40, 30
    scores = torch.randint(0, 5, (n_users, n_items), generator=gen).float()  # many ties
    masked = torch.rand(n_users, n_items, generator=gen) < 0.2
    scores[masked] = float("-inf")
    relevant = (torch.rand(n_users, n_items, generator=gen) < 0.15) & ~masked
    relevant[~relevant.any(1), 0] = True
    scores[relevant[:, 0] & masked[:, 0], 0] = 1.0  # a relevant item is never masked
    ks = (1, 3, 5, 10, 50)  # 50 > n_items
    got = ranking_metrics(scores, relevant, ks, ties="lowest_id")
    want = _brute_force(scores, relevant, ks)
    assert set(got) == set(want)
    for key in want:
        torch.testing.assert_close(got[key], want[key], msg=key)


def test_agrees_with_torchmetrics_on_distinct_scores():
    gen = torch.Generator().manual_seed(7)
    scores = torch.rand(25, 60, generator=gen)
    relevant = torch.rand(25, 60, generator=gen) < 0.1
    relevant[~relevant.any(1), 3] = True
    got = ranking_metrics(scores, relevant, ks=(5, 20))
    reference = {"ndcg": tm.retrieval_normalized_dcg, "recall": tm.retrieval_recall,
                 "precision": tm.retrieval_precision, "hit": tm.retrieval_hit_rate, "mrr": tm.retrieval_reciprocal_rank}
    for u in range(25):
        p, t = scores[u], relevant[u]
        for k in (5, 20):
            for name, fn in reference.items():
                assert got[f"{name}@{k}"][u].item() == pytest.approx(fn(p, t, top_k=k).item(), abs=1e-6), (name, k, u)


@pytest.mark.parametrize("n_scores", [1, 2, 8, 9, 40])  # both sides of the count/sort switch
def test_ranks_within_counts_strictly_higher_entries_with_ties_and_infinities(n_scores):
    gen = torch.Generator().manual_seed(n_scores)
    full = torch.randint(0, 6, (12, 50), generator=gen).double()  # many ties
    full[torch.rand(12, 50, generator=gen) < 0.1] = float("-inf")
    listed = full.gather(1, torch.randint(0, 50, (12, n_scores), generator=gen))
    listed[0, 0] = 100.0  # above every entry: rank 1
    listed[1, -1] = -1e9  # below every finite entry
    want = torch.tensor([[1 + sum(float(f) > float(s) for f in full[b]) for s in listed[b]] for b in range(12)])
    got = ranks_within(full, listed)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert got[0, 0] == 1 and got[1, -1] == 1 + int(torch.isfinite(full[1]).sum())
