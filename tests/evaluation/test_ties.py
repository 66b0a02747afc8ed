"""Tie rules against brute force over every order of the tied items, hand-worked cases, and
the evaluator's tie columns and summary."""

import itertools
import math

import pytest
import torch

from bench.datasets import CSR
from bench.errors import ConfigError
from bench.evaluation import FullRankingEvaluator, ranking_metrics
from bench.evaluation.evaluator import split_tie_columns, tie_summary, tie_warning

NAMES = ("recall", "ndcg", "precision", "hit", "mrr")


def _metrics_of_order(order: list[int], rel: set[int], k: int) -> dict[str, float]:
    """One ranked list's metrics, straight from the definitions (docs/evaluation.md)."""
    hit_ranks = [r for r, i in enumerate(order[:k], start=1) if i in rel]
    idcg = sum(1 / math.log2(r + 1) for r in range(1, min(k, len(rel)) + 1))
    return {"recall": len(hit_ranks) / len(rel), "ndcg": sum(1 / math.log2(r + 1) for r in hit_ranks) / idcg,
            "precision": len(hit_ranks) / k, "hit": float(bool(hit_ranks)),
            "mrr": 1 / hit_ranks[0] if hit_ranks else 0.0}


def _every_order(scores: list[float]) -> list[list[int]]:
    """Every ranking of the items that sorts the scores descending (each tie group permuted)."""
    groups = [[i for i, s in enumerate(scores) if s == v] for v in sorted(set(scores), reverse=True)]
    return [[i for part in parts for i in part] for parts in itertools.product(*map(itertools.permutations, groups))]


def _brute(scores: torch.Tensor, relevant: torch.Tensor, ks) -> dict[str, dict[str, list[float]]]:
    """Mean, min and max of every metric over all orders of tied items, one user at a time."""
    out: dict[str, dict[str, list[float]]] = {rule: {} for rule in ("expected", "pessimistic", "optimistic")}
    for s, r in zip(scores.tolist(), relevant.tolist()):
        rel = {i for i, x in enumerate(r) if x}
        orders = _every_order(s)
        for k in ks:
            values = [_metrics_of_order(o, rel, k) for o in orders]
            for name in NAMES:
                column = [v[name] for v in values]
                for rule, value in (("expected", sum(column) / len(column)), ("pessimistic", min(column)),
                                    ("optimistic", max(column))):
                    out[rule].setdefault(f"{name}@{k}", []).append(value)
    return out


def _tied_case(seed: int, n_users: int = 30, n_items: int = 7):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 3, (n_users, n_items), generator=gen).float()  # tie groups of up to 7
    masked = torch.rand(n_users, n_items, generator=gen) < 0.15
    scores[masked] = float("-inf")
    relevant = (torch.rand(n_users, n_items, generator=gen) < 0.3) & ~masked
    free = (~masked).nonzero()
    first_free = free[torch.unique_consecutive(free[:, 0], return_counts=True)[1].cumsum(0) - 1]
    none = ~relevant.any(1)
    relevant[first_free[:, 0][none[first_free[:, 0]]], first_free[:, 1][none[first_free[:, 0]]]] = True
    keep = relevant.any(1)
    return scores[keep], relevant[keep]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rule", ["expected", "pessimistic", "optimistic"])
def test_each_rule_equals_brute_force_over_every_order_of_tied_items(seed, rule):
    scores, relevant = _tied_case(seed)
    ks = (1, 2, 3, 5, 7, 10)  # cut-offs inside groups, at the list's end (L = 10 > 7 items) and beyond it
    want = _brute(scores, relevant, ks)[rule]
    got = ranking_metrics(scores, relevant, ks, ties=rule)
    for key, values in want.items():
        torch.testing.assert_close(got[key], torch.tensor(values, dtype=torch.float64), msg=f"{rule} {key}")


def test_a_group_that_continues_past_the_list_counts_all_its_items():
    # lists of 3 (max K) cut groups of 5 tied items: the items past the list still share the chances
    scores, relevant = _tied_case(11, n_users=40)
    ks = (1, 2, 3)
    brute = _brute(scores, relevant, ks)
    for rule in ("expected", "pessimistic", "optimistic"):
        got = ranking_metrics(scores, relevant, ks, ties=rule)
        for key, values in brute[rule].items():
            torch.testing.assert_close(got[key], torch.tensor(values, dtype=torch.float64), msg=f"{rule} {key}")


def test_hand_worked_four_way_tie_with_one_relevant_item():
    scores = torch.tensor([[5.0, 1.0, 1.0, 1.0, 1.0, 0.0]])  # item 0 first, then items 1-4 tied
    relevant = torch.tensor([[False, False, False, True, False, False]])
    m = ranking_metrics(scores, relevant, ks=(1, 2, 3, 5), ties="expected")
    assert m["hit@1"].item() == 0.0
    assert m["hit@2"].item() == pytest.approx(1 / 4)  # one of the group's 4 places inside the top 2
    assert m["hit@3"].item() == pytest.approx(1 / 2)
    assert m["recall@3"].item() == pytest.approx(1 / 2) and m["precision@3"].item() == pytest.approx(1 / 6)
    assert m["mrr@5"].item() == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4)
    assert m["mrr@3"].item() == pytest.approx((1 / 2 + 1 / 3) / 4)
    assert m["ndcg@5"].item() == pytest.approx(sum(1 / math.log2(r + 1) for r in (2, 3, 4, 5)) / 4)
    low = ranking_metrics(scores, relevant, ks=(5,), ties="lowest_id")
    assert low["mrr@5"].item() == pytest.approx(1 / 4)  # item 3 is third of the group by id
    assert ranking_metrics(scores, relevant, ks=(5,), ties="optimistic")["mrr@5"].item() == pytest.approx(1 / 2)
    assert ranking_metrics(scores, relevant, ks=(5,), ties="pessimistic")["mrr@5"].item() == pytest.approx(1 / 5)


def test_every_rule_is_bit_identical_to_the_id_order_without_ties():
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(50, 80, generator=gen)
    scores[torch.rand(50, 80, generator=gen) < 0.1] = float("-inf")  # masks tie only among themselves
    relevant = (torch.rand(50, 80, generator=gen) < 0.1) & torch.isfinite(scores)
    relevant[~relevant.any(1), 0] = True
    scores[:, 0] = scores[:, 0].clamp(min=-3.0)
    base = ranking_metrics(scores, relevant, ks=(5, 20), ties="lowest_id")
    for rule in ("expected", "pessimistic", "optimistic"):
        got = ranking_metrics(scores, relevant, ks=(5, 20), ties=rule)
        assert all(torch.equal(got[k], base[k]) for k in base), rule


def _evaluator_case():
    # user 0: 3 items tied at the top, 1 relevant, cut-off at 2 splits them; user 1: no ties
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0, -1.0], [0.9, 0.1, 0.5, 0.3, 0.7]])
    target = CSR.from_pairs(torch.tensor([[0, 2], [1, 1]]), 2, 5)
    return scores, target


def test_the_evaluator_reports_each_rule_and_the_range_of_every_metric():
    scores, target = _evaluator_case()
    ev = FullRankingEvaluator(target, [], ks=(2, 5), ties="expected")
    metrics, columns = split_tie_columns(ev.evaluate(lambda u: scores[u]))
    assert metrics["hit@2"].tolist() == pytest.approx([2 / 3, 0.0])
    assert columns["pessimistic/hit@2"].tolist() == [0.0, 0.0] and columns["optimistic/hit@2"].tolist() == [1.0, 0.0]
    assert columns["cut@2"].tolist() == [1.0, 0.0] and columns["cut@5"].tolist() == [0.0, 0.0]
    summary = tie_summary(metrics, columns, "expected")
    assert summary["queries"] == 2 and summary["cut_in_tie"] == {"2": 1, "5": 0}
    assert summary["range"]["hit@2"] == pytest.approx([0.0, 0.5])
    assert summary["range"]["recall@5"] == pytest.approx([1.0, 1.0])  # all of user 0's group is inside the top 5
    means = {k: float(v.mean()) for k, v in metrics.items()}
    warning = tie_warning(summary, means)
    assert warning is not None and "eval.ties=expected" in warning and "1 of 2 queries" in warning
    lowest = FullRankingEvaluator(target, [], ks=(2, 5), ties="lowest_id").evaluate(lambda u: scores[u])
    assert lowest["hit@2"].tolist() == [0.0, 0.0]  # item 2 is third by id


def test_no_warning_when_ties_do_not_move_a_metric_and_unknown_rules_fail():
    scores, target = _evaluator_case()
    scores = scores.clone()
    scores[0] = torch.tensor([0.5, 0.5, 1.0, 0.5, 0.5])  # the tied items are all irrelevant
    ev = FullRankingEvaluator(target, [], ks=(2, 5))
    metrics, columns = split_tie_columns(ev.evaluate(lambda u: scores[u]))
    summary = tie_summary(metrics, columns, "expected")
    assert tie_warning(summary, {k: float(v.mean()) for k, v in metrics.items()}) is None
    with pytest.raises(ConfigError, match="eval.ties=random is not a tie rule; use one of expected, optimistic"):
        FullRankingEvaluator(target, [], ks=(5,), ties="random")
