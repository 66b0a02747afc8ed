"""A link-prediction run reports the per-edge protocol beside the per-node one: in results.json,
the logs, the validation history and the report's run records, from the same scores."""

import csv

import numpy as np
import pytest

from bench.analysis.checkpoints import load_model, run_datamodule
from bench.collect import from_directories
from bench.evaluation import edge_summary
from bench.records import RunResult
from bench.run import train_and_test

pytestmark = pytest.mark.slow

TINY_GRAPH = ["task=linkpred", "model=gnn", "dataset=synthetic-graph", "dataset.n_nodes=120", "trainer.max_epochs=2",
              "trainer.check_val_every_n_epoch=1", "trainer.accelerator=cpu", "loss.n_negatives=30",
              "train.batch_size=128", "+trainer.limit_train_batches=2", "eval.ks=[5,20]"]


def test_a_linkpred_run_reports_per_edge_metrics_that_its_checkpoint_reproduces(tmp_path, make_cfg):
    res = train_and_test(make_cfg(TINY_GRAPH, tmp_path / "run"), overrides=TINY_GRAPH)  # so that it can be rebuilt
    assert res.status == "completed"
    stored = RunResult.read(tmp_path / "run")
    assert set(stored.per_edge) == {"edges", "mrr", "hit@5", "hit@20"} and "per_edge" not in stored.extra
    assert 0 < stored.per_edge["mrr"] <= 1 and stored.per_edge["hit@5"] <= stored.per_edge["hit@20"]

    # the best checkpoint, evaluated again outside the trainer, gives the same edge means
    dm = run_datamodule(stored)
    assert stored.per_edge["edges"] == dm.splits.test.nnz == stored.data["n_test"]  # each edge from both ends
    model = load_model(stored, stored.best_checkpoint, dm.train_data).eval()  # the GCN has dropout
    again = edge_summary(dm.test_evaluator.evaluate(model.full_scorer("test")))
    assert again == pytest.approx(stored.per_edge, abs=1e-12)

    # logged at test and at every validation; the per-user file keeps per-node metrics only
    rows = list(csv.DictReader(open(tmp_path / "run" / "csv" / "metrics.csv")))
    assert float(next(r for r in rows if r.get("test/edge_mrr"))["test/edge_mrr"]) == pytest.approx(
        stored.per_edge["mrr"], rel=1e-6)
    assert all("val/edge_mrr" in row and "val/edge_hit@20" in row for row in stored.history)
    assert "edge_mrr" not in stored.test and "ndcg@20" in stored.test
    with np.load(tmp_path / "run" / stored.per_user_test) as per_user:
        assert not any(key.startswith("edge") for key in per_user.files)

    # the report's run record carries them
    records, _ = from_directories([tmp_path / "run"])
    assert records[0].per_edge == pytest.approx(stored.per_edge) and "edge_mrr" not in records[0].test
