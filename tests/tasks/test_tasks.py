"""Every (task, model, loss) combination trains; a model that does not fit the task is refused."""

from pathlib import Path

import pytest

from bench.app import CONFIG_DIR
from bench.errors import ConfigError
from bench.run import train_and_test

pytestmark = pytest.mark.slow

LOSSES = sorted(p.stem for p in (Path(CONFIG_DIR) / "loss").glob("*.yaml"))
TINY_GRAPH = ["dataset=synthetic-graph", "dataset.n_nodes=120", "trainer.max_epochs=1", "trainer.accelerator=cpu",
              "loss.n_negatives=30", "train.batch_size=128", "+trainer.limit_train_batches=2"]
COMBOS = [("cf", m, loss) for m in ("mf", "lightgcn", "xsimgcl") for loss in LOSSES] + \
         [("linkpred", m, loss) for m in ("gnn", "mf") for loss in LOSSES]


@pytest.mark.parametrize("task,model,loss", COMBOS)
def test_every_task_model_loss_combination_trains(task, model, loss, tmp_path, tiny, make_cfg, loss_settings):
    base = [*tiny, "trainer.max_epochs=1", "+trainer.limit_train_batches=2"] if task == "cf" else TINY_GRAPH
    cfg = make_cfg([*base, f"task={task}", f"model={model}", f"loss={loss}", "logger=none", *loss_settings(loss)],
                   tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed" and 0 <= res.test["ndcg@20"] <= 1


def test_a_model_that_does_not_fit_the_task_is_refused(tmp_path, tiny, make_cfg):
    models = "models for this task: lightgcn, lightgcnpp, mf, ncf, simgcl, simplex, xsimgcl"
    with pytest.raises(ConfigError, match=rf"model=gnn does not fit task=cf; {models}"):
        train_and_test(make_cfg([*tiny, "model=gnn"], tmp_path))
    with pytest.raises(ConfigError, match=rf"model=sasrec does not fit task=cf; {models}"):
        train_and_test(make_cfg([*tiny, "model=sasrec"], tmp_path))
    with pytest.raises(ConfigError, match=r"task=seq needs timestamps; data set 'synthetic' has none"):
        train_and_test(make_cfg([*tiny, "task=seq", "model=sasrec"], tmp_path))
    with pytest.raises(ConfigError, match=r"task=linkpred needs a graph data set"):
        train_and_test(make_cfg([*tiny, "task=linkpred"], tmp_path))
