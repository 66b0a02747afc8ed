"""Graded NDCG / Precision of padded candidate lists: a hand-worked list, every tie rule against
brute force over the orders of tied documents, and trec_eval (pytrec_eval) on MQ2008 Fold 1."""

import itertools
import math

import numpy as np
import pytest
import torch

from bench.datasets import read_letor
from bench.errors import ConfigError, DataError, TrainingDiverged
from bench.evaluation.evaluator import split_tie_columns, tie_summary
from bench.evaluation.graded import graded_metrics, has_relevant

pytrec_eval = pytest.importorskip("pytrec_eval")

D2, D3, D4, D5 = (1 / math.log2(r + 1) for r in (2, 3, 4, 5))  # the discount at ranks 2..5 (rank 1: 1)
RULES = ("expected", "optimistic", "pessimistic", "lowest_id")
TREC_KS = (1, 3, 5, 10)


# ---------------------------------------------------------------------------------------- by hand


def _hand_case():
    # row 0: four documents, columns 1 and 2 tied at 0.5; row 1: the same documents with two padding
    # columns (top score, top grade, a NaN) that must change nothing; row 2: no relevant document
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.1, 0.0, 0.0],
                           [0.9, 7.0, 0.5, 0.5, float("nan"), 0.1],
                           [0.3, 0.2, 0.1, 0.0, 0.0, 0.0]])
    labels = torch.tensor([[0, 2, 1, 2, 0, 0], [0, 2, 2, 1, -1, 2], [0, 0, 0, 0, 0, 0]])
    mask = torch.tensor([[True] * 4 + [False] * 2, [True, False, True, True, False, True],
                         [True] * 4 + [False] * 2])
    return scores, labels, mask


def test_hand_worked_list_under_each_rule_and_gain():
    scores, labels, mask = _hand_case()
    ks = (1, 2, 3, 4, 5)
    # ranked: doc0 (grade 0), then docs 1, 2 tied (grades 2, 1), then doc3 (grade 2)
    # exponential gains 0, {3, 1}, 3; the ideal order 3, 3, 1, 0
    ideal = {1: 3, 2: 3 + 3 * D2, 3: 3 + 3 * D2 + D3, 4: 3 + 3 * D2 + D3, 5: 3 + 3 * D2 + D3}
    dcg = {
        "lowest_id": [0, 3 * D2, 3 * D2 + D3, 3 * D2 + D3 + 3 * D4],  # doc1 before doc2
        "optimistic": [0, 3 * D2, 3 * D2 + D3, 3 * D2 + D3 + 3 * D4],
        "pessimistic": [0, D2, D2 + 3 * D3, D2 + 3 * D3 + 3 * D4],
        "expected": [0, 2 * D2, 2 * D2 + 2 * D3, 2 * D2 + 2 * D3 + 3 * D4],  # each tied place holds (3 + 1) / 2
    }
    for rule in RULES:
        m = graded_metrics(scores, labels, mask, ks, ties=rule)
        for k in ks:
            want = dcg[rule][min(k, 4) - 1] / ideal[k]
            assert m[f"ndcg@{k}"][:2].tolist() == pytest.approx([want, want], abs=1e-12), (rule, k)
        assert m["ndcg@2"][2].item() == 0.0  # no relevant document: 0, and has_relevant says so
        # precision counts grade > 0 over K, K = 5 even though the list holds 4
        assert m["precision@2"][:2].tolist() == pytest.approx([1 / 2, 1 / 2])  # both tied docs are relevant
        assert m["precision@5"][:2].tolist() == pytest.approx([3 / 5, 3 / 5])
        assert m["ties:cut@1"].tolist() == [0, 0, 0] and m["ties:cut@2"].tolist() == [1, 1, 0]
        assert m["ties:cut@3"].tolist() == [0, 0, 0] and m["ties:cut@5"].tolist() == [0, 0, 0]
    assert has_relevant(labels, mask).tolist() == [True, True, False]
    e = graded_metrics(scores, labels, mask, ks)  # defaults: expected, exponential
    assert e["ndcg@2"][0].item() == pytest.approx(2 * D2 / (3 + 3 * D2))  # 0.2611
    assert e["ties:optimistic/ndcg@2"][0].item() == pytest.approx(3 * D2 / (3 + 3 * D2))  # 0.3869
    assert e["ties:pessimistic/ndcg@2"][0].item() == pytest.approx(D2 / (3 + 3 * D2))  # 0.1290
    # linear gains 0, {2, 1}, 2: at K = 3 the tie group is wholly inside, every order gives 2·D2 + D3 or D2 + 2·D3
    lin = graded_metrics(scores, labels, mask, (3,), gain="linear")
    ideal3 = 2 + 2 * D2 + D3
    assert lin["ndcg@3"][0].item() == pytest.approx(1.5 * (D2 + D3) / ideal3)  # 0.4859
    assert lin["ties:optimistic/ndcg@3"][0].item() == pytest.approx((2 * D2 + D3) / ideal3)
    assert lin["ties:pessimistic/ndcg@3"][0].item() == pytest.approx((D2 + 2 * D3) / ideal3)
    low = graded_metrics(scores, labels, mask, (4,), ties="lowest_id", gain="linear")
    assert low["ndcg@4"][0].item() == pytest.approx((2 * D2 + D3 + 2 * D4) / ideal3)


def test_the_evaluators_tie_summary_reads_the_columns_unchanged():
    scores, labels, mask = _hand_case()
    metrics, columns = split_tie_columns(graded_metrics(scores, labels, mask, (2, 5)))
    assert set(metrics) == {"ndcg@2", "precision@2", "ndcg@5", "precision@5"}
    summary = tie_summary(metrics, columns, "expected")
    assert summary["queries"] == 3 and summary["cut_in_tie"] == {"2": 2, "5": 0}
    lo, hi = D2 / (3 + 3 * D2), 3 * D2 / (3 + 3 * D2)
    assert summary["range"]["ndcg@2"] == pytest.approx([2 * lo / 3, 2 * hi / 3])  # row 2 counts 0 in the means


# ---------------------------------------------------------------------------------------- brute force


def _dcg_of_order(gains: list[float], ks) -> dict[int, float]:
    return {k: sum(g / math.log2(r + 2) for r, g in enumerate(gains[:k])) for k in ks}


def _brute(scores, labels, mask, ks, gain):
    """Per query: every order of its tied real documents; NDCG / Precision mean, min and max over
    them, and whether the K-th and (K+1)-th documents tie."""
    out: dict[str, dict[str, list[float]]] = {r: {} for r in ("expected", "optimistic", "pessimistic", "cut")}
    for s, y, m in zip(scores.tolist(), labels.tolist(), mask.tolist()):
        docs = [(s_, y_) for s_, y_, m_ in zip(s, y, m) if m_]
        g = [(2.0**y_ - 1) if gain == "exponential" else float(y_) for _, y_ in docs]
        groups = [[i for i, d in enumerate(docs) if d[0] == v] for v in sorted({d[0] for d in docs}, reverse=True)]
        orders = [[i for part in parts for i in part]
                  for parts in itertools.product(*map(itertools.permutations, groups))]
        ideal = _dcg_of_order(sorted(g, reverse=True), ks)
        ranked_scores = sorted((d[0] for d in docs), reverse=True)
        for k in ks:
            ndcg = [_dcg_of_order([g[i] for i in o], ks)[k] / ideal[k] if ideal[k] > 0 else 0.0 for o in orders]
            prec = [sum(docs[i][1] > 0 for i in o[:k]) / k for o in orders]
            for name, values in (("ndcg", ndcg), ("precision", prec)):
                for rule, v in (("expected", sum(values) / len(values)), ("optimistic", max(values)),
                                ("pessimistic", min(values))):
                    out[rule].setdefault(f"{name}@{k}", []).append(v)
            cut = k < len(ranked_scores) and ranked_scores[k - 1] == ranked_scores[k]
            out["cut"].setdefault(f"cut@{k}", []).append(float(cut))
    return out


def _padded_case(seed: int, n_queries: int = 30, length: int = 7):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 3, (n_queries, length), generator=gen).float()  # groups of up to 7 documents
    scores[:, -1] = float("-inf")  # a real document may score -inf; padding must still sort after it
    labels = torch.randint(0, 3, (n_queries, length), generator=gen)
    mask = torch.rand(n_queries, length, generator=gen) < 0.8
    # padding holds scores that tie with real ones, high grades and NaN: none of it may count
    pad = ~mask
    labels[pad] = torch.randint(-1, 5, (int(pad.sum()),), generator=gen)
    scores[pad & (torch.rand(n_queries, length, generator=gen) < 0.3)] = float("nan")
    return scores, labels, mask


@pytest.mark.parametrize("gain", ["exponential", "linear"])
@pytest.mark.parametrize("seed", range(2))
def test_each_rule_equals_brute_force_over_every_order_of_tied_documents(seed, gain):
    scores, labels, mask = _padded_case(seed)
    ks = (1, 2, 3, 4, 6, 7, 9)  # inside groups, at the padded length (7) and beyond it
    brute = _brute(scores, labels, mask, ks, gain)
    assert sum(brute["cut"]["cut@2"]) > 3  # cut-offs do split groups here
    for rule in ("expected", "optimistic", "pessimistic"):
        got = graded_metrics(scores, labels, mask, ks, ties=rule, gain=gain)
        for key, values in brute[rule].items():
            torch.testing.assert_close(got[key], torch.tensor(values, dtype=torch.float64), msg=f"{rule} {key}")
            bound = f"ties:{rule}/{key}" if rule != "expected" else None
            if bound:
                torch.testing.assert_close(got[bound], got[key], rtol=0, atol=0)
        for key, values in brute["cut"].items():
            assert got[f"ties:{key}"].tolist() == values, (rule, key)


def test_every_rule_is_bit_identical_to_lowest_id_without_ties():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(40, 60, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 5, (40, 60), generator=gen)
    mask = torch.rand(40, 60, generator=gen) < 0.7
    scores[~mask] = 0.0  # padding may tie with itself and with anything: it forms no tie
    base = graded_metrics(scores, labels, mask, (1, 5, 10, 100), ties="lowest_id")
    assert all(not v.any() for k, v in base.items() if k.startswith("ties:cut@"))
    for rule in ("expected", "optimistic", "pessimistic"):
        got = graded_metrics(scores, labels, mask, (1, 5, 10, 100), ties=rule)
        assert got.keys() == base.keys() and all(torch.equal(got[k], base[k]) for k in base), rule


# ---------------------------------------------------------------------------------------- trec_eval on MQ2008


@pytest.fixture
def mq2008_test(shared_data):
    path = shared_data / "ltr" / "MQ2008" / "Fold1" / "test.txt"
    if not path.is_file():
        pytest.skip(f"no {path}")
    split = read_letor(path, n_features=46)
    assert (split.n_docs, split.n_queries) == (2874, 156)  # the pinned file (tests/datasets/test_letor.py)
    return split


def _padded(split, doc_scores: np.ndarray):
    """(scores, labels, mask) of the split's queries padded to the longest list."""
    sizes = split.group_sizes()
    rows = np.repeat(np.arange(split.n_queries), sizes)
    cols = np.arange(split.n_docs) - np.repeat(split.offsets[:-1], sizes)
    shape = (split.n_queries, int(sizes.max()))
    scores, labels, mask = np.full(shape, 1e9), np.full(shape, 7, dtype=np.int64), np.zeros(shape, dtype=bool)
    scores[rows, cols], labels[rows, cols], mask[rows, cols] = doc_scores, split.labels, True
    return torch.from_numpy(scores), torch.from_numpy(labels), torch.from_numpy(mask), cols


def _trec_ndcg(split, doc_scores: np.ndarray, cols: np.ndarray, width: int, relevance) -> dict[str, np.ndarray]:
    """Per-query ``ndcg_cut_K`` and ``P_K`` from pytrec_eval. trec_eval breaks ties by docno in
    descending string order (form_res_rels.c, comp_sim_docno: strcmp(docno2, docno1)), so the
    docno of column j is the zero-padded width - j: ties fall to the lower column first, as in
    ``lowest_id``."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(split.n_queries):
        qid = f"q{q:03d}"
        lo, hi = split.offsets[q], split.offsets[q + 1]
        docnos = [f"d{width - c:04d}" for c in cols[lo:hi]]
        qrels[qid] = {d: int(relevance(y)) for d, y in zip(docnos, split.labels[lo:hi])}
        run[qid] = {d: float(s) for d, s in zip(docnos, doc_scores[lo:hi])}
    measures = {f"ndcg_cut.{k}" for k in TREC_KS} | {f"P.{k}" for k in TREC_KS}
    scored = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    assert len(scored) == split.n_queries  # queries with no relevant document are scored too (0)
    order = sorted(scored)
    return {f"{m}@{k}": np.array([scored[q][f"{t}_{k}"] for q in order])
            for k in TREC_KS for m, t in (("ndcg", "ndcg_cut"), ("precision", "P"))}


def _projection(split) -> np.ndarray:
    w = np.random.default_rng(0).standard_normal(split.n_features)
    return split.features.astype(np.float64) @ w


@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_ndcg_equals_trec_eval_on_mq2008_fold1_without_ties(mq2008_test, gain):
    # MQ2008 repeats feature vectors inside a query: a distinct jitter per document breaks those ties
    doc_scores = _projection(mq2008_test) + 1e-6 * np.arange(mq2008_test.n_docs)
    scores, labels, mask, cols = _padded(mq2008_test, doc_scores)
    got = graded_metrics(scores, labels, mask, TREC_KS, ties="lowest_id", gain=gain)
    assert np.unique(doc_scores).size == mq2008_test.n_docs  # no ties at all
    # trec_eval's ndcg_cut takes the qrels grade as the gain: 2^rel - 1 there is the exponential gain here
    relevance = (lambda y: 2**y - 1) if gain == "exponential" else (lambda y: y)
    want = _trec_ndcg(mq2008_test, doc_scores, cols, scores.shape[1], relevance)
    assert int((~has_relevant(labels, mask)).sum()) == 51  # 51 of the 156 queries have no relevant document
    for key, values in want.items():
        np.testing.assert_allclose(got[key].numpy(), values, rtol=0, atol=1e-6, err_msg=key)
    assert 0.2 < got["ndcg@10"].mean() < 0.9  # not all zeros: the comparison means something


def test_lowest_id_equals_trec_eval_with_ties_on_mq2008_fold1(mq2008_test):
    doc_scores = np.round(_projection(mq2008_test))  # coarse scores: large tie groups in most queries
    scores, labels, mask, cols = _padded(mq2008_test, doc_scores)
    got = graded_metrics(scores, labels, mask, TREC_KS, ties="lowest_id")
    assert sum(int(got[f"ties:cut@{k}"].sum()) for k in TREC_KS) > 100  # many cut-offs split a group
    want = _trec_ndcg(mq2008_test, doc_scores, cols, scores.shape[1], lambda y: 2**y - 1)
    for key, values in want.items():
        np.testing.assert_allclose(got[key].numpy(), values, rtol=0, atol=1e-6, err_msg=key)
    # the bounds hold every order, trec_eval's included, and the ties move NDCG here
    lo, hi = got["ties:pessimistic/ndcg@5"], got["ties:optimistic/ndcg@5"]
    expected = graded_metrics(scores, labels, mask, (5,))["ndcg@5"]
    assert bool(((lo <= got["ndcg@5"] + 1e-12) & (got["ndcg@5"] <= hi + 1e-12)).all())
    assert bool(((lo <= expected + 1e-12) & (expected <= hi + 1e-12)).all()) and float((hi - lo).max()) > 0.1


# ---------------------------------------------------------------------------------------- bad input


def test_bad_input_fails_in_one_line_naming_the_fix():
    scores, labels, mask = _hand_case()
    cases = [
        (lambda: graded_metrics(scores, labels[:, :4], mask, (5,)), ValueError, r"must all be \(queries, list length"),
        (lambda: graded_metrics(scores[0], labels[0], mask[0], (5,)), ValueError, r"pad every query's list"),
        (lambda: graded_metrics(scores, labels, mask.int(), (5,)), ValueError, r"pass a bool tensor"),
        (lambda: graded_metrics(scores, labels.float(), mask, (5,)), ValueError, r"pass labels\.long\(\)"),
        (lambda: graded_metrics(scores, labels, mask, (5,), gain="log"), ConfigError,
         r"task.gain=log is not a gain; use one of exponential, linear"),
        (lambda: graded_metrics(scores, labels, mask, (5,), ties="random"), ConfigError,
         r"eval.ties=random is not a tie rule; use one of expected"),
        (lambda: graded_metrics(scores, labels, mask, (0, 5)), ConfigError, r"eval.ks holds 0; every cut-off"),
        (lambda: graded_metrics(scores, labels, mask, ()), ConfigError, r"eval.ks is empty"),
        (lambda: graded_metrics(scores, labels.clone().fill_(-1), mask, (5,)), DataError,
         r"12 real documents have a negative relevance grade"),
        (lambda: graded_metrics(scores, labels * 1000, mask, (5,)), DataError, r"grades up to 2000 overflow the gain"),
        (lambda: graded_metrics(scores.clone().fill_(float("nan")), labels, mask, (5,)), TrainingDiverged,
         r"NaN scores; lower the learning rate"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)


def test_empty_lists_give_zeros():
    out = graded_metrics(torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.bool),
                         (1, 3))
    assert all(v.tolist() == [0.0, 0.0] and v.dtype == torch.float64 for v in out.values())
