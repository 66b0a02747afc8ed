"""The biased "1 positive + N sampled negatives" test protocol: a hand-worked list, brute force
under every tie rule, the sample (uniform, unseen items only, the same whatever the chunks),
the full-ranking metrics untouched, the settings' checks and one end-to-end sequential run."""

import json
import math
from collections import Counter
from fractions import Fraction
from itertools import permutations

import pytest
import torch

from bench.app import compose, run_job
from bench.datasets import CSR, Synthetic
from bench.datasets.graph import SyntheticGraph
from bench.errors import ConfigError
from bench.evaluation import FullRankingEvaluator, draw_negatives, sampled_summary
from bench.evaluation.evaluator import split_tie_columns
from bench.evaluation.sampled import SAMPLED_PREFIX, check_sampled, format_sampled
from bench.evaluation.ties import TIE_MODES
from bench.records import COMPLETED, RunResult, variant_overrides
from bench.report.runs import from_results, from_wandb
from bench.tasks import CFTask, LinkPredTask
from bench.validation import validate

INF = float("inf")


def csr(pairs: list[tuple[int, int]], n_users: int, n_items: int) -> CSR:
    return CSR.from_pairs(torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2), n_users, n_items)


# -- a hand-worked list ------------------------------------------------------------------------
# one user, 6 items: item 0 trains, item 5 is the test item, so items 1-4 are the only unseen
# ones and N = 4 draws all of them; the test item scores 0.5
HAND_SCORES = torch.tensor([[3.0, 0.9, 0.7, 0.1, 0.2, 0.5]])


def hand_evaluator(ties: str = "expected", n: int = 4) -> FullRankingEvaluator:
    return FullRankingEvaluator(csr([(0, 5)], 1, 6), [csr([(0, 0)], 1, 6)], ks=(1, 2, 3, 5), ties=ties,
                                sampled_negatives=n)


def test_hand_worked_one_positive_among_four_negatives():
    ev = hand_evaluator()
    assert ev.negatives is not None and ev.negatives.tolist() == [[1, 2, 3, 4]]
    got = ev.evaluate(lambda u: HAND_SCORES[u].clone())
    # 0.9 and 0.7 above 0.5: rank 3, NDCG@K = 1 / log2(1 + 3) = 1/2 for K >= 3
    want = {"drawn": 4, "mrr": 1 / 3, "hit@1": 0, "hit@2": 0, "hit@3": 1, "hit@5": 1,
            "ndcg@1": 0, "ndcg@2": 0, "ndcg@3": 0.5, "ndcg@5": 0.5}
    assert {k: v.item() for k, v in got.items() if k.startswith(SAMPLED_PREFIX)} == pytest.approx(
        {SAMPLED_PREFIX + k: v for k, v in want.items()}, abs=1e-15)
    summary = sampled_summary(got, 4, 0)
    assert summary["negatives"] == 4 and summary["users"] == 1 and summary["short_users"] == 0
    assert summary["protocol"] == "1 positive + 4 sampled negatives (biased: Krichene & Rendle, KDD 2020)"
    assert summary["ndcg@3"] == 0.5 and summary["mrr"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(("rule", "rank_places"), [("optimistic", [3]), ("pessimistic", [4]), ("lowest_id", [4]),
                                                   ("expected", [3, 4])])
def test_hand_worked_tie_with_a_negative_under_every_rule(rule, rank_places):
    scores = HAND_SCORES.clone()
    scores[0, 3] = 0.5  # negative 3 ties with the test item 5 (a lower id: lowest_id puts it first)
    got = hand_evaluator(rule).evaluate(lambda u: scores[u].clone())
    n = len(rank_places)  # the places equally likely under the rule
    assert got["sampled:mrr"].item() == pytest.approx(sum(1 / r for r in rank_places) / n, abs=1e-15)
    for k in (1, 2, 3, 5):
        hit = sum(r <= k for r in rank_places) / n
        ndcg = sum((r <= k) / math.log2(1 + r) for r in rank_places) / n
        assert got[f"sampled:hit@{k}"].item() == pytest.approx(hit, abs=1e-15)
        assert got[f"sampled:ndcg@{k}"].item() == pytest.approx(ndcg, abs=1e-15)


def test_a_user_with_fewer_unseen_items_than_n_ranks_among_all_of_them():
    ev = hand_evaluator(n=10)
    assert ev.negatives is not None and ev.negatives.tolist() == [[1, 2, 3, 4] + [-1] * 6]
    per_user = ev.evaluate(lambda u: HAND_SCORES[u].clone())
    summary = sampled_summary(per_user, 10, 0)
    assert summary["short_users"] == 1 and summary["mrr"] == pytest.approx(1 / 3)
    assert "1 users had fewer unseen items" in format_sampled(summary)


# -- brute force -------------------------------------------------------------------------------
def brute_force(scores: torch.Tensor, negatives: list[int], targets: list[int], ks: tuple[int, ...],
                rule: str) -> dict[str, float]:
    """One user: each target's explicit candidate list (the negatives and itself), every order of
    its tied candidates enumerated for ``expected``; the metrics' means over the targets."""
    out: dict[str, list[Fraction | float]] = {"mrr": [], **{f"{m}@{k}": [] for m in ("hit", "ndcg") for k in ks}}
    for v in targets:
        x = scores[v].item()
        above = [w for w in negatives if scores[w].item() > x]
        tied = [w for w in negatives if scores[w].item() == x] if x > -INF else []
        if rule == "expected":
            ranks = [len(above) + 1 + order.index(v) for order in permutations([*tied, v])]
        else:
            order = {"optimistic": [v, *tied], "pessimistic": [*tied, v], "lowest_id": sorted([*tied, v])}[rule]
            ranks = [len(above) + 1 + order.index(v)]
        out["mrr"].append(sum(Fraction(1, r) for r in ranks) / len(ranks))
        for k in ks:
            out[f"hit@{k}"].append(Fraction(sum(r <= k for r in ranks), len(ranks)))
            out[f"ndcg@{k}"].append(sum((r <= k) / math.log2(1 + r) for r in ranks) / len(ranks))
    return {key: float(sum(values)) / len(values) for key, values in out.items()}


def random_problem(seed: int, n_users: int = 9, n_items: int = 16, levels: int = 3):
    """Integer scores (many ties, some -inf) and disjoint train / valid / test sets."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (n_users, n_items), generator=gen).float()
    scores[torch.rand(n_users, n_items, generator=gen) < 0.15] = -INF
    kind = torch.randint(0, 8, (n_users, n_items), generator=gen)  # 0, 1: train; 2: valid; 3: test; else unseen
    train, valid, test = (csr([tuple(p) for p in where.nonzero().tolist()], n_users, n_items)
                          for where in (kind < 2, kind == 2, kind == 3))
    return scores, train, valid, test


@pytest.mark.parametrize("rule", TIE_MODES)
def test_vectorised_metrics_match_brute_force_on_random_data_with_ties(rule):
    ks = (1, 2, 4, 10)
    for seed in range(5):
        scores, train, valid, test = random_problem(seed)
        n_items = scores.shape[1]
        # chunks of 2 users; N = 5 leaves some users short of unseen items
        ev = FullRankingEvaluator(test, [train, valid], ks=ks, max_scores=2 * n_items, ties=rule,
                                  sampled_negatives=5, sampled_seed=seed)
        per_user = ev.evaluate(lambda u, s=scores: s[u].clone())
        assert ev.negatives is not None
        for row, u in enumerate(ev.users.tolist()):
            negatives = [w for w in ev.negatives[row].tolist() if w >= 0]
            targets = test.indices[test.indptr[u]:test.indptr[u + 1]].tolist()
            want = brute_force(scores[u], negatives, targets, ks, rule)
            assert per_user["sampled:drawn"][row].item() == len(negatives)
            for key, value in want.items():
                assert per_user[SAMPLED_PREFIX + key][row].item() == pytest.approx(value, abs=1e-12), \
                    f"{rule} seed {seed} user {u} {key}"


@pytest.mark.parametrize("rule", TIE_MODES)
def test_sampling_only_lifts_a_single_targets_rank(rule):
    # a subset of the full ranking's candidates, in the order the full ranking induces on it
    scores, train, valid, several = random_problem(7, n_users=30, n_items=40)
    test = csr([(u, int(several.indices[several.indptr[u]])) for u in range(30) if several.degrees()[u] > 0], 30, 40)
    per_user = FullRankingEvaluator(test, [train, valid], ks=(1, 5, 10), ties=rule, sampled_negatives=8).evaluate(
        lambda u: scores[u].clone())
    for key in ("hit@1", "hit@5", "hit@10", "ndcg@5", "ndcg@10"):
        assert (per_user[SAMPLED_PREFIX + key] >= per_user[key] - 1e-12).all(), key
    assert (per_user["sampled:mrr"] >= per_user["mrr@10"] - 1e-12).all()


# -- the sample --------------------------------------------------------------------------------
def test_the_sample_holds_unseen_items_only_and_is_the_same_whatever_the_chunks():
    data = Synthetic(n_users=60, n_items=50, mean_per_user=12, seed=0).load()
    scores = torch.randn(60, 50, generator=torch.Generator().manual_seed(1))
    for masks_valid in (True, False):
        dm = CFTask().datamodule(data, seed=0, ks=(5, 10), sampled_negatives=20, sampled_seed=3,
                                 test_masks_valid=masks_valid)
        ev = dm.test_evaluator
        assert dm.val_evaluator.negatives is None  # validation (model selection) stays full-ranking only
        negatives = ev.negatives
        assert negatives is not None and negatives.shape == (ev.users.numel(), 20)
        seen = (dm.splits.train.dense_rows(ev.users) | dm.splits.valid.dense_rows(ev.users)
                | dm.splits.test.dense_rows(ev.users))
        drawn = negatives >= 0
        assert not seen.gather(1, negatives.clamp(min=0))[drawn].any()  # no train, valid or test item
        assert torch.equal(drawn.sum(1), (~seen).sum(1).clamp(max=20))  # N, or every unseen item
        rows_sorted = negatives[:, 1:] > negatives[:, :-1]
        assert rows_sorted[drawn[:, 1:]].all()  # distinct (each row ascending)
        # evaluated in one chunk, in chunks of 3 users, or as 3 ranks' shares: the same numbers
        one = ev.evaluate(lambda u: scores[u].clone())
        for max_scores, world in ((3 * 50, 1), (1 << 24, 3)):
            other = FullRankingEvaluator(dm.splits.test, ev.exclude, ev.ks, max_scores, sampled_negatives=20,
                                         sampled_seed=3, seen=(dm.splits.valid,))
            assert torch.equal(other.negatives, negatives)
            parts = [other.evaluate_chunk(lambda u: scores[u].clone(), chunk) for r in range(world)
                     for chunk in other.user_chunks(r, world)]
            users = torch.cat([c for r in range(world) for c in other.user_chunks(r, world)])
            order = torch.argsort(users)
            for key in one:
                if key.startswith(SAMPLED_PREFIX):
                    assert torch.equal(torch.cat([p[key] for p in parts])[order], one[key]), key
    # another seed, another sample
    other_seed = CFTask().datamodule(data, seed=0, sampled_negatives=20, sampled_seed=4).test_evaluator.negatives
    assert not torch.equal(other_seed, negatives)


def test_link_prediction_samples_neither_the_node_itself_nor_any_neighbour():
    graph = SyntheticGraph(n_nodes=60, seed=0).load()
    dm = LinkPredTask(valid_fraction=0.1, test_fraction=0.2).datamodule(graph, seed=0, ks=(5,), sampled_negatives=30)
    ev = dm.test_evaluator
    negatives = ev.negatives
    assert negatives is not None
    drawn = negatives >= 0
    neighbours = sum(c.dense_rows(ev.users).int() for c in (dm.splits.train, dm.splits.valid, dm.splits.test)) > 0
    assert not neighbours.gather(1, negatives.clamp(min=0))[drawn].any()
    assert not (negatives == ev.users.unsqueeze(1)).any()
    assert torch.equal(drawn.sum(1), (60 - 1 - neighbours.sum(1)).clamp(max=30))
    per_user = ev.evaluate(lambda u: torch.randn(u.numel(), 60, generator=torch.Generator().manual_seed(0)))
    assert {"edge:mrr", "sampled:mrr", "sampled:hit@5", "sampled:ndcg@5"} <= set(per_user)


@pytest.mark.parametrize(("allowed", "n"), [(10, 3), (5, 3), (80, 40)])
def test_every_subset_of_unseen_items_is_equally_likely(allowed, n):
    # one seen set shared by many users: each user's draw is one sample of the same distribution;
    # (10, 3) takes distinct draws, (5, 3) random keys, (80, 40) both
    n_items, n_users = allowed + 4, 6000
    seen = csr([(u, i) for u in range(n_users) for i in (0, 3, 7, allowed + 3)], n_users, n_items)
    negatives = draw_negatives(torch.arange(n_users), [seen], n, seed=1)
    assert not torch.isin(negatives, torch.tensor([0, 3, 7, allowed + 3, -1])).any()
    if math.comb(allowed, n) <= 200:
        counts = Counter(map(tuple, negatives.tolist()))
        assert len(counts) == math.comb(allowed, n)
        expected = n_users / math.comb(allowed, n)
        chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
        assert chi2 < len(counts) + 6 * math.sqrt(2 * len(counts))  # ~6 standard deviations
    else:  # each item's share n / allowed
        share = torch.bincount(negatives.flatten(), minlength=n_items).double() / n_users
        unseen = share[share > 0]
        assert unseen.numel() == allowed
        sd = math.sqrt(n / allowed * (1 - n / allowed) / n_users)
        assert (unseen - n / allowed).abs().max() < 6 * sd


# -- the full ranking is untouched ---------------------------------------------------------------
@pytest.mark.parametrize("rule", TIE_MODES)
def test_full_ranking_columns_are_bit_identical_with_the_protocol_on_and_off(rule):
    scores, train, valid, test = random_problem(2, n_users=20, n_items=30)
    off = FullRankingEvaluator(test, [train, valid], ks=(1, 5, 10), ties=rule, per_edge=True)
    on = FullRankingEvaluator(test, [train, valid], ks=(1, 5, 10), ties=rule, per_edge=True, sampled_negatives=6)
    a, b = (ev.evaluate(lambda u: scores[u].clone()) for ev in (off, on))
    assert set(b) - set(a) == {k for k in b if k.startswith(SAMPLED_PREFIX)} != set()
    assert all(torch.equal(a[k], b[k]) for k in a)
    metrics, ties = split_tie_columns(b)
    assert not any(k.startswith(SAMPLED_PREFIX) for k in [*metrics, *ties])
    assert sampled_summary(a, None) == {} and sampled_summary(metrics, 6) == {}


# -- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_count_below_one_is_a_one_line_config_error(value):
    with pytest.raises(ConfigError) as info:
        validate(compose([f"eval.sampled_negatives={value}"]))
    assert str(info.value) == (f"eval.sampled_negatives={value} is out of range: use null (off) or an integer >= 1, "
                               "e.g. 100")
    with pytest.raises(ConfigError, match=r"^eval.sampled_negatives=.* is out of range: use null \(off\)"):
        check_sampled(int(value))
    validate(compose(["eval.sampled_negatives=100"]))  # and the default, null, passes
    assert compose([]).eval.sampled_negatives is None


# -- reports ----------------------------------------------------------------------------------------
class _WandbRun:
    id, group, heartbeat_at = "r1", "", None
    config = {"task": {"name": "seq"}, "dataset": {"name": "d"}, "model": {"name": "sasrec"}, "loss": {"name": "sl"}}
    summary = {"test/ndcg@10": 0.1, "test/sampled_ndcg@10": 0.4, "test/sampled_mrr": 0.3, "test/edge_mrr": 0.2}

    def scan_history(self):
        return []


class _WandbApi:
    def runs(self, path, filters):
        return [_WandbRun()]


def test_report_records_keep_the_sampled_metrics_apart_from_the_test_metrics():
    (record,), _ = from_wandb("me/bench", api=_WandbApi())
    assert record.test == {"ndcg@10": 0.1} and record.sampled == {"ndcg@10": 0.4, "mrr": 0.3}
    summary = {"negatives": 100, "seed": 0, "protocol": "1 positive + 100 ...", "users": 3, "short_users": 0,
               "hit@10": 0.5}
    (record,), _ = from_results([RunResult(status=COMPLETED, config=_WandbRun.config, test={"hit@10": 0.2},
                                           sampled=summary)])
    assert record.test == {"hit@10": 0.2}
    assert record.sampled == {"negatives": 100, "seed": 0, "users": 3, "short_users": 0, "hit@10": 0.5}
    # the settings add a side output only: runs that differ in them are one configuration
    assert variant_overrides(["eval.sampled_negatives=100", "eval.sampled_seed=2", "eval.ties=optimistic"]) == [
        "eval.ties=optimistic"]


# -- end to end ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sequential_run_reports_the_sampled_protocol_apart(tmp_path, make_cfg, sequences_file, capsys):
    f = sequences_file(tmp_path / "seq.tsv", n_users=40, n_items=150, length=10)
    cfg = make_cfg(["task=seq", "model=sasrec", "loss=sl", "dataset=custom", f"dataset.path={f}",
                    "dataset.k_core=1", "trainer.max_epochs=1", "trainer.accelerator=cpu", "loss.n_negatives=20",
                    "task.users_per_batch=16", "model.max_len=8", "logger=none", "eval.sampled_negatives=30",
                    "eval.sampled_seed=5"], tmp_path / "run")
    res = run_job(cfg)
    assert res is not None and res.status == "completed"
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    sampled = saved["sampled"]
    assert sampled["negatives"] == 30 and sampled["seed"] == 5 and sampled["users"] == 40
    assert "biased" in sampled["protocol"] and sampled["short_users"] == 0
    # the sample is a subset of the full ranking's candidates: it can only lift the test item
    for k in (5, 10, 20):
        assert sampled[f"hit@{k}"] >= saved["test"][f"hit@{k}"]
        assert sampled[f"ndcg@{k}"] >= saved["test"][f"ndcg@{k}"]
    assert not any("sampled" in k for k in saved["test"])  # never mixed in with the full ranking
    assert RunResult.read(tmp_path / "run").sampled == sampled
    out = capsys.readouterr().out.splitlines()
    line = next(i for i, text in enumerate(out) if text.startswith("Sampled metrics"))
    assert "biased" in out[line] and f"hit@10={sampled['hit@10']:.4f}" in out[line]
    assert any(text.startswith("Test metrics") for text in out[:line])  # after the full-ranking table
