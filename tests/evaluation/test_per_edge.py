"""The per-edge (filtered) ranking of link prediction: a hand-worked graph, brute force under
every tie rule, the per-node identity for single-target nodes, and which evaluators compute it."""

from fractions import Fraction
from itertools import permutations

import pytest
import torch

from bench.datasets import CSR, Synthetic
from bench.datasets.graph import SyntheticGraph
from bench.evaluation import FullRankingEvaluator, edge_metrics, edge_summary, filtered_ranks, mean_metrics
from bench.evaluation.evaluator import split_tie_columns
from bench.evaluation.per_edge import EDGE_PREFIX, edge_columns
from bench.evaluation.ties import TIE_MODES
from bench.tasks import CFTask, LinkPredTask

INF = float("inf")


def undirected(pairs: list[tuple[int, int]], n: int) -> CSR:
    edges = torch.tensor(pairs)
    return CSR.from_pairs(torch.cat([edges, edges.flip(1)]), n, n)


# -- a hand-worked graph ----------------------------------------------------------------------
# 5 nodes; training edges 0-1, 2-3 (masked with each node itself); test edges 0-2, 0-4, 1-3.
# Symmetric integer scores; the diagonal and the training pairs are masked anyway.
HAND_SCORES = torch.tensor([[0, 9, 4, 3, 1],
                            [9, 0, 1, 1, 4],
                            [4, 1, 0, 5, 2],
                            [3, 1, 5, 0, 1],
                            [1, 4, 2, 1, 0]], dtype=torch.float32)
# per directed test pair (G above, Q tied others, L tied others with a lower id), by hand:
#   0->2: candidates {3} (4 is 0's other test neighbour): 4 beats 3          -> (0, 0, 0)
#   0->4: candidates {3} (2 filtered out; unfiltered, 2 would be above too)   -> (1, 0, 0)
#   1->3: candidates {2: 1, 4: 4}: 4 above, 2 tied with a lower id            -> (1, 1, 1)
#   2->0: candidates {1: 1, 4: 2}: none above                                 -> (0, 0, 0)
#   3->1: candidates {0: 3, 4: 1}: 0 above, 4 tied with a higher id           -> (1, 1, 0)
#   4->0: candidates {1: 4, 2: 2, 3: 1}: 1 and 2 above, 3 tied, higher id     -> (2, 1, 0)
HAND_COUNTS = [(0, 0, 0), (1, 0, 0), (1, 1, 1), (0, 0, 0), (1, 1, 0), (2, 1, 0)]
# micro averages over the 6 directed pairs, by hand: reciprocal ranks
#   optimistic 1, 1/2, 1/2, 1, 1/2, 1/3; pessimistic 1, 1/2, 1/3, 1, 1/3, 1/4;
#   lowest_id 1, 1/2, 1/3, 1, 1/2, 1/3; expected 1, 1/2, 5/12, 1, 5/12, 7/24 (mean of 1/r over the places)
HAND_MEANS = {
    "optimistic": {"mrr": 23 / 36, "hit@1": 1 / 3, "hit@2": 5 / 6, "hit@3": 1.0},
    "pessimistic": {"mrr": 41 / 72, "hit@1": 1 / 3, "hit@2": 1 / 2, "hit@3": 5 / 6},
    "lowest_id": {"mrr": 11 / 18, "hit@1": 1 / 3, "hit@2": 2 / 3, "hit@3": 1.0},
    "expected": {"mrr": 29 / 48, "hit@1": 1 / 3, "hit@2": 2 / 3, "hit@3": 11 / 12},
}


def hand_evaluator(ties: str, ks: tuple[int, ...] = (1, 2, 3)) -> FullRankingEvaluator:
    n = 5
    itself = CSR.from_pairs(torch.arange(n).repeat(2, 1).T, n, n)
    return FullRankingEvaluator(undirected([(0, 2), (0, 4), (1, 3)], n), [undirected([(0, 1), (2, 3)], n), itself],
                                ks=ks, ties=ties, per_edge=True)


def test_hand_worked_graph_counts_and_means_under_every_tie_rule():
    ev = hand_evaluator("expected")
    scores = ev.masked_scores(lambda u: HAND_SCORES[u].clone(), ev.users)
    rows, items = ev.target.gather_rows(ev.users)
    assert list(zip(ev.users[rows].tolist(), items.tolist())) == [(0, 2), (0, 4), (1, 3), (2, 0), (3, 1), (4, 0)]
    ranks = filtered_ranks(scores, rows, items)
    assert list(zip(*(c.tolist() for c in ranks))) == HAND_COUNTS
    for rule, want in HAND_MEANS.items():
        got = edge_summary(hand_evaluator(rule).evaluate(lambda u: HAND_SCORES[u].clone()))
        assert got == pytest.approx({"edges": 6, **want}, abs=1e-12), rule
    # node 0 holds two edges: its sums are 1 + 1/2 (the filter keeps 0->4 at rank 2, not 3)
    per_user = hand_evaluator("expected").evaluate(lambda u: HAND_SCORES[u].clone())
    assert per_user["edge:edges"].tolist() == [2, 1, 1, 1, 1]
    assert per_user["edge:mrr"][0].item() == pytest.approx(1.5, abs=1e-15)


def test_the_edge_average_weighs_nodes_by_degree_unlike_the_per_node_mean():
    per_user = hand_evaluator("expected", ks=(1, 5)).evaluate(lambda u: HAND_SCORES[u].clone())
    metrics, _ = split_tie_columns(per_user)
    per_node = mean_metrics(metrics)
    # per node (first held-out neighbour): 1, 5/12, 1, 5/12, 7/24 -> 5/8; per edge: 29/48 (above)
    assert per_node["mrr@5"] == pytest.approx(5 / 8, abs=1e-12)
    assert edge_summary(per_user)["mrr"] == pytest.approx(29 / 48, abs=1e-12)
    # Hit@1: 2 of 5 nodes, but 2 of 6 edges
    assert per_node["hit@1"] == pytest.approx(2 / 5, abs=1e-12)
    assert edge_summary(per_user)["hit@1"] == pytest.approx(1 / 3, abs=1e-12)


# -- brute force -------------------------------------------------------------------------------
def brute_force(scores: torch.Tensor, masked: torch.Tensor, target: CSR, ks: tuple[int, ...], rule: str) -> dict:
    """Per directed pair (u, v), in CSR order: build v's candidate list explicitly, order it
    under the rule (every order of the tied candidates enumerated for ``expected``), read the
    rank. Exact fractions."""
    out: dict[str, list[Fraction]] = {"mrr": [], **{f"hit@{k}": [] for k in ks}}
    for u in range(target.n_users):
        held_out = set(target.indices[target.indptr[u]:target.indptr[u + 1]].tolist())
        for v in sorted(held_out):
            x = scores[u, v].item()
            candidates = [w for w in range(scores.shape[1]) if not masked[u, w] and w not in held_out]
            above = [w for w in candidates if scores[u, w].item() > x]
            tied = [w for w in candidates if scores[u, w].item() == x]
            if rule == "expected":
                ranks = [len(above) + 1 + order.index(v) for order in permutations([*tied, v])]
            else:
                order = {"optimistic": [v, *tied], "pessimistic": [*tied, v], "lowest_id": sorted([*tied, v])}[rule]
                ranks = [len(above) + 1 + order.index(v)]
            out["mrr"].append(sum(Fraction(1, r) for r in ranks) / len(ranks))
            for k in ks:
                out[f"hit@{k}"].append(Fraction(sum(r <= k for r in ranks), len(ranks)))
    return out


def random_graph(seed: int, n: int = 9, levels: int = 4) -> tuple[torch.Tensor, CSR, CSR]:
    """Integer scores (many ties), training edges and held-out edges of a random graph."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (n, n), generator=gen).float()
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), 1).nonzero()
    kind = torch.randint(0, 5, (upper.shape[0],), generator=gen)  # 0, 1: train; 2: held out; else none
    train = undirected([tuple(e) for e in upper[kind < 2].tolist()], n)
    held = undirected([tuple(e) for e in upper[kind == 2].tolist()], n)
    return scores, train, held


@pytest.mark.parametrize("rule", TIE_MODES)
def test_vectorised_ranks_match_brute_force_on_random_graphs_with_ties(rule):
    ks = (1, 2, 4, 20)
    for seed in range(6):
        scores, train, held = random_graph(seed)
        n = scores.shape[0]
        itself = CSR.from_pairs(torch.arange(n).repeat(2, 1).T, n, n)
        # chunks of 2 users and blocks of 2 pairs: the chunk and block loops are exercised
        ev = FullRankingEvaluator(held, [train, itself], ks=ks, max_scores=2 * n, ties=rule, per_edge=True)
        per_user = ev.evaluate(lambda u, s=scores: s[u].clone())
        masked = train.dense_rows(torch.arange(n)) | torch.eye(n, dtype=torch.bool)
        want = brute_force(scores, masked, held, ks, rule)
        assert int(per_user["edge:edges"].sum()) == held.nnz == len(want["mrr"])
        # per pair, through the functional form
        full = scores.masked_fill(masked, -INF)
        rows, items = held.gather_rows(torch.arange(n))
        got = edge_metrics(filtered_ranks(full, rows, items, max_scores=2 * n), ks, rule)
        for key, values in want.items():
            torch.testing.assert_close(got[key], torch.tensor([float(f) for f in values], dtype=torch.float64),
                                       rtol=0, atol=1e-12, msg=f"{rule} {key} seed {seed}")
            # and the evaluator's per-node sums
            sums = torch.zeros(n, dtype=torch.float64).index_add(0, rows, got[key])
            torch.testing.assert_close(per_user[EDGE_PREFIX + key], sums[ev.users], rtol=0, atol=1e-12)


def test_with_one_held_out_neighbour_per_node_both_protocols_agree_under_every_rule():
    # a single relevant item: the per-node ranking has nothing to filter, so MRR@n and Hit@K
    # of each node are its edge's reciprocal rank and hit, whatever the tie rule
    gen = torch.Generator().manual_seed(11)
    n = 30
    scores = torch.randint(0, 5, (n, n), generator=gen).float()
    target = CSR.from_pairs(torch.stack([torch.arange(n), torch.randint(0, n, (n,), generator=gen)], 1), n, n)
    train = CSR.from_pairs(torch.randint(0, n, (60, 2), generator=gen), n, n)
    train = CSR.from_pairs(torch.tensor([p for p in train.to_pairs().tolist() if p not in target.to_pairs().tolist()]),
                           n, n)
    for rule in TIE_MODES:
        per_user = FullRankingEvaluator(target, [train], ks=(1, 3, n), ties=rule, per_edge=True).evaluate(
            lambda u: scores[u].clone())
        assert torch.equal(per_user["edge:edges"], torch.ones(n, dtype=torch.float64))
        torch.testing.assert_close(per_user["edge:mrr"], per_user[f"mrr@{n}"], rtol=0, atol=1e-12, msg=rule)
        for k in (1, 3):
            torch.testing.assert_close(per_user[f"edge:hit@{k}"], per_user[f"hit@{k}"], rtol=0, atol=1e-12, msg=rule)


def test_a_target_scored_minus_infinity_ranks_after_every_candidate_and_without_ties():
    scores = torch.tensor([[-INF, 2.0, -INF, 1.0, -INF]])  # node 0 masked; 2 and 4 scored -inf by the model
    ranks = filtered_ranks(scores, torch.tensor([0, 0]), torch.tensor([2, 3]))
    assert ranks.above.tolist() == [1, 1] and ranks.tied.tolist() == [0, 0] and ranks.tied_lower.tolist() == [0, 0]
    # without ties every rule gives the same values, to the bit
    values = [edge_metrics(ranks, (1, 2), rule) for rule in TIE_MODES]
    assert all(torch.equal(v[key], values[0][key]) for v in values for key in values[0])
    assert values[0]["mrr"].tolist() == [0.5, 0.5] and values[0]["hit@1"].tolist() == [0.0, 0.0]


def test_only_link_prediction_evaluators_emit_edge_columns():
    cf = CFTask().datamodule(Synthetic(n_users=40, n_items=30, seed=0).load(), seed=0, ks=(5,))
    for ev in (cf.val_evaluator, cf.test_evaluator):
        assert not ev.per_edge
        assert not any(k.startswith(EDGE_PREFIX) for k in ev.evaluate(lambda u: torch.randn(u.numel(), 30)))
    graph = SyntheticGraph(n_nodes=60, seed=0).load()
    lp = LinkPredTask(valid_fraction=0.1, test_fraction=0.2).datamodule(graph, seed=0, ks=(5,))
    assert lp.val_evaluator.per_edge and lp.test_evaluator.per_edge
    per_user = lp.test_evaluator.evaluate(lambda u: torch.randn(u.numel(), 60))
    assert {k for k in per_user if k.startswith(EDGE_PREFIX)} == {"edge:edges", "edge:mrr", "edge:hit@5"}
    # every held-out pair counted once; the side columns are neither metrics nor tie columns
    assert int(per_user["edge:edges"].sum()) == lp.splits.test.nnz
    metrics, ties = split_tie_columns(per_user)
    assert not any(k.startswith(EDGE_PREFIX) for k in [*metrics, *ties])
    assert edge_summary(metrics) == {}


def test_edge_columns_sum_each_sources_edges():
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    got = edge_columns(scores, torch.tensor([0, 0, 1]), torch.tensor([1, 3, 0]), ks=(1,), ties="optimistic")
    # row 0: 1 ranks 2nd behind 0 (3 is filtered), 3 ranks 3rd (1 filtered); row 1: 0 ranks 4th
    assert got["edge:edges"].tolist() == [2.0, 1.0]
    assert got["edge:mrr"].tolist() == pytest.approx([1 / 2 + 1 / 3, 1 / 4])
    assert got["edge:hit@1"].tolist() == [0.0, 0.0]


def test_the_console_line_names_the_protocol_and_every_cut_off():
    from bench.evaluation.per_edge import format_per_edge

    line = format_per_edge({"edges": 910, "mrr": 0.048204, "hit@5": 0.06154, "hit@20": 0.147619}, [5, 10, 20])
    assert line == "Per edge (filtered, 910 held-out pairs): MRR 0.0482, Hit@5 0.0615, Hit@20 0.1476"
