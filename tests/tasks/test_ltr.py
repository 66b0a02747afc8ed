"""task=ltr: padded lists, the list evaluator, and a run on a real MQ2008 fold checked by trec_eval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.datasets.letor import LetorSplit
from bench.errors import ConfigError
from bench.records import RunResult
from bench.records.io import read_per_user
from bench.run import train_and_test
from bench.tasks.ltr import ListEvaluator, LtrTask, RankingLists


def split_of(lengths: list[int], labels: list[int], n_features: int = 2) -> LetorSplit:
    n = sum(lengths)
    features = np.arange(n * n_features, dtype=np.float32).reshape(n, n_features)
    return LetorSplit(features=features, labels=np.asarray(labels, dtype=np.int64),
                      query_ids=np.arange(len(lengths), dtype=np.int64),
                      offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def test_lists_pad_to_the_longest_of_the_batch():
    lists = RankingLists.from_split(split_of([2, 4, 1], [1, 0, 2, 0, 0, 1, 0]))
    features, labels, mask = lists.batch(torch.tensor([2, 0]))
    assert features.shape == (2, 2, 2)
    assert mask.tolist() == [[True, False], [True, True]]
    assert labels.tolist() == [[0, 0], [1, 0]]
    assert features[0].tolist() == [[12.0, 13.0], [0.0, 0.0]]  # query 2's one document, then padding
    assert features[1].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert lists.has_relevant().tolist() == [True, True, False]
    assert lists.has_two_grades().tolist() == [True, True, False]


def test_lists_without_a_relevant_document_are_excluded_or_zero():
    """Query 1 has no relevant document: excluded by default (and counted), NDCG 0 with 'zero'."""
    lists = RankingLists.from_split(split_of([3, 2, 3], [2, 0, 1, 0, 0, 0, 1, 0]))

    def by_first_feature(features, mask):  # scores fall with the position: documents keep their order
        return -features[..., 0]

    excluded = ListEvaluator(lists, ks=[1, 3])
    assert excluded.users.tolist() == [0, 2] and excluded.n_skipped == 1
    got = excluded.evaluate(by_first_feature)
    # query 0 ranks grades 2, 0, 1: DCG@3 = 3 + 1/log2(4) = 3.5; IDCG@3 = 3 + 1/log2(3)
    assert got["ndcg@3"][0].item() == pytest.approx(3.5 / (3 + 1 / math.log2(3)))
    # query 2 ranks grades 0, 1, 0: NDCG@1 = 0, NDCG@3 = (1/log2(3)) / 1
    assert got["ndcg@1"][1].item() == 0.0
    assert got["ndcg@3"][1].item() == pytest.approx(1 / math.log2(3))
    zero = ListEvaluator(lists, ks=[1, 3], empty_queries="zero").evaluate(by_first_feature)
    assert zero["ndcg@3"].tolist() == pytest.approx([got["ndcg@3"][0].item(), 0.0, got["ndcg@3"][1].item()])


def test_task_refuses_bad_settings_in_one_line():
    with pytest.raises(ConfigError, match="task.gain='log' is not a gain; use exponential or linear"):
        LtrTask(gain="log")
    with pytest.raises(ConfigError, match="task.empty_queries"):
        LtrTask(empty_queries="drop")
    with pytest.raises(ConfigError, match="task=ltr needs a learning-to-rank data set"):
        LtrTask().datamodule(object(), seed=0)


@pytest.mark.slow
def test_a_run_on_mq2008_equals_trec_eval_on_its_own_scores(shared_data, make_cfg, tmp_path):
    """Train a linear scorer briefly on MQ2008 fold 1, then score the test lists with the best
    checkpoint and let trec_eval (pytrec_eval) compute NDCG@k per query with gains 2^rel - 1 as
    qrels grades; the run's own per-query numbers must agree. The documents of a list tie often
    (MQ2008 repeats feature vectors), so the run orders ties by position (lowest_id) and the
    document names make trec_eval's tie order (by name, descending) the same."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from bench.datasets.letor import LetorDataset
    from bench.models import build

    overrides = ["task=ltr", "dataset=mq2008", "model=linear", "loss=slk", "loss.k=5", "trainer.max_epochs=2",
                 "trainer.check_val_every_n_epoch=1", "trainer.accelerator=cpu", "eval.ties=lowest_id",
                 f"data_dir={shared_data}", "logger=none"]
    res = train_and_test(make_cfg(overrides, tmp_path / "run"), overrides=overrides)
    assert res.data["test_users"] + res.data["test_users_skipped"] == 156  # fold 1's test queries
    assert res.config["train"]["monitor"] == "ndcg@5" and res.config["eval"]["ks"] == [1, 3, 5, 10, 20]
    queries, per_query = read_per_user(tmp_path / "run" / "per_user_test.npz")

    model = build("linear", n_features=46)
    state = torch.load(RunResult.read(tmp_path / "run").best_checkpoint, weights_only=True)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
    model.eval()
    test = LetorDataset("mq2008", fold=1, data_dir=str(shared_data), download=False).load().test
    lists = RankingLists.from_split(test)
    qrels, run = {}, {}
    for q in queries.tolist():
        features, labels, mask = lists.batch(torch.tensor([q]))
        with torch.no_grad():
            scores = model(features, mask)[0].tolist()
        names = [f"d{9999 - j:05d}" for j in range(len(scores))]  # the first document sorts last by name
        qrels[str(q)] = {n: int(2 ** y - 1) for n, y in zip(names, labels[0].tolist(), strict=True)}
        run[str(q)] = dict(zip(names, scores, strict=True))
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,3,5,10,20"}).evaluate(run)
    for k in (1, 3, 5, 10, 20):
        ours = per_query[f"ndcg@{k}"]
        theirs = np.array([trec[str(q)][f"ndcg_cut_{k}"] for q in queries.tolist()])
        np.testing.assert_allclose(ours, theirs, atol=1e-6, err_msg=f"ndcg@{k}")
    assert float(np.mean(per_query["ndcg@5"])) == pytest.approx(res.test["ndcg@5"])
    # a finished run tested again through the same code path: the same numbers
    from bench.analysis.checkpoints import retest

    again_queries, again, _ = retest(RunResult.read(tmp_path / "run"))
    assert again_queries.tolist() == queries.tolist()
    np.testing.assert_allclose(again["ndcg@10"].numpy(), per_query["ndcg@10"], atol=1e-12)
