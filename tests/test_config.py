"""Every config group option composes and instantiates; overrides reach the objects."""

import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate

from bench.app import CONFIG_DIR
from bench.datasets import load_dataset
from bench.errors import BenchError, ConfigError
from bench.losses import LOSSES
from bench.models import MODELS
from bench.registry import Registry
from bench.run import train_and_test

CONF = Path(CONFIG_DIR)


def _options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_every_loss_config_names_a_registered_loss(tmp_path, make_cfg):
    for name in _options("loss"):
        cfg = make_cfg([f"loss={name}"], tmp_path)
        assert cfg.loss.name in LOSSES, name
        loss = instantiate(cfg.loss)
        assert loss.registry_name == cfg.loss.name


@pytest.mark.parametrize("dataset", _options("dataset"))
def test_every_dataset_config_composes(dataset, tmp_path, make_cfg):
    cfg = make_cfg([f"dataset={dataset}", "data_dir=/some/where"], tmp_path)
    assert cfg.dataset.name == dataset
    if dataset == "synthetic":
        assert load_dataset(cfg.dataset).n_users == cfg.dataset.n_users
    elif dataset == "synthetic-graph":
        assert load_dataset(cfg.dataset).n_nodes == cfg.dataset.n_nodes
    elif dataset != "custom":
        assert cfg.dataset.data_dir == "/some/where"


def test_overrides_reach_the_objects(tmp_path, make_cfg):
    cfg = make_cfg(["loss=sl", "dataset=health", "model.dim=128", "trainer.max_epochs=50", "loss.tau=0.1"], tmp_path)
    model = instantiate(cfg.model, n_users=3, n_items=4)
    assert model.user_emb.weight.shape == (3, 128) and model.score == "cosine"
    assert instantiate(cfg.loss).tau == 0.1
    assert cfg.trainer.max_epochs == 50
    bpr = make_cfg(["loss=bpr"], tmp_path)
    assert instantiate(bpr.model, n_users=3, n_items=4).score == "dot"  # the loss's recipe picks the score
    assert (bpr.optimizer.lr, bpr.optimizer.weight_decay) == (0.001, 1e-4)
    assert make_cfg(["loss=bpr", "optimizer.lr=0.02"], tmp_path).optimizer.lr == 0.02
    assert (cfg.optimizer.lr, cfg.optimizer.weight_decay) == (0.1, 0.0)
    cosine = make_cfg(["loss=bpr", "model.score=cosine"], tmp_path)
    assert instantiate(cosine.model, n_users=3, n_items=4).score == "cosine"


def test_the_slk_estimator_is_a_name_or_a_dict_of_options(tmp_path, make_cfg):
    assert make_cfg(["loss=slk"], tmp_path).loss.estimator == "sampled"
    cfg = make_cfg(["loss=slk", "loss.estimator={name: cached, size: 128}"], tmp_path)
    estimator = instantiate(cfg.loss).estimator
    assert estimator.registry_name == "cached" and estimator.size == 128


def test_models_and_loggers_compose(tmp_path, make_cfg):
    for model in _options("model"):
        assert make_cfg([f"model={model}"], tmp_path).model.name in MODELS
    assert set(make_cfg(["logger=wandb"], tmp_path).logger) == {"csv", "wandb"}
    assert not make_cfg(["logger=none"], tmp_path).logger
    for trainer in _options("trainer"):  # 200 epochs, or the data set's suggested schedule
        assert make_cfg([f"trainer={trainer}", "dataset=health"], tmp_path).trainer.max_epochs == 200
        assert make_cfg([f"trainer={trainer}"], tmp_path).trainer.max_epochs == 20  # synthetic's recipe
        assert make_cfg([f"trainer={trainer}", "trainer.max_epochs=7"], tmp_path).trainer.max_epochs == 7


def test_the_monitored_metric_follows_the_loss_k(tmp_path, make_cfg):
    assert make_cfg(["loss=slk"], tmp_path).train.monitor == "ndcg@20"
    assert make_cfg(["loss=slk", "loss.k=50"], tmp_path).train.monitor == "ndcg@50"
    assert make_cfg(["loss=sl"], tmp_path).train.monitor == "ndcg@20"


@pytest.mark.slow
def test_a_monitor_outside_eval_ks_is_refused(tmp_path, make_cfg):
    with pytest.raises(ConfigError, match=r"train.monitor=ndcg@30 is not a computed metric"):
        train_and_test(make_cfg(["loss=slk", "loss.k=30", "trainer.max_epochs=1"], tmp_path))


def test_a_broken_plugin_module_is_named_instead_of_hiding_the_others(tmp_path, monkeypatch):
    pkg = tmp_path / "plugins_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from bench.registry import Registry\n"
                                     "REG = Registry('widget', package='plugins_pkg')\n")
    (pkg / "a_good.py").write_text("from plugins_pkg import REG\n@REG.register('good')\nclass Good: pass\n")
    (pkg / "b_broken.py").write_text("from plugins_pkg import REG\nraise ImportError('no such thing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import plugins_pkg

    with pytest.raises(BenchError, match=r"cannot load the widget module plugins_pkg.b_broken: ImportError: no such"):
        plugins_pkg.REG.get("good")
    (pkg / "b_broken.py").write_text("")
    sys.modules.pop("plugins_pkg.b_broken", None)
    assert plugins_pkg.REG.get("good").__name__ == "Good"  # a later lookup retries the discovery
    assert isinstance(plugins_pkg.REG, Registry)
