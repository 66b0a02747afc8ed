"""The README's claims that code can check: its set-up commands, that every ``python -m bench``
command it shows composes, and its four "Extending" guides, each run as written: the guide's
Python file is dropped into its package (a temporary directory on the package's path, so the
registry's discovery finds it the way it finds a new file in the repository) and its YAML into
its config group (on Hydra's search path)."""

from __future__ import annotations

import importlib
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from bench.app import CONFIG_DIR
from bench.app import compose as bench_compose
from bench.evaluation import metrics_from_hits
from bench.experiments import apply_per_loss
from bench.records import RunResult
from bench.registry import Registry
from bench.run import train_and_test

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _guide(title: str) -> dict[str, str]:
    """The code blocks of a README section: {"python": ..., "yaml": ...} (first of each)."""
    section = README[README.index(f"### {title}"):]
    section = section[: section.index("\n### ", 4) if "\n### " in section[4:] else len(section)]
    blocks = dict(reversed(re.findall(r"```(python|yaml)\n(.*?)```", section, re.S)))
    return blocks


def _file_name(source: str) -> tuple[str, str]:
    """(package path such as ``bench/losses``, file name) from the block's first comment line."""
    first = source.splitlines()[0]
    match = re.match(r"# (bench/[\w/]+|conf/\w+)/(\w+\.(py|yaml))$", first)
    assert match, f"a guide's block starts with its path, got {first!r}"
    return match.group(1), match.group(2)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Install a guide's Python block as a module of its package and its YAML block in its
    config group; returns the overrides that put the YAML's group on Hydra's search path."""
    installed: list[tuple[Registry, str, str]] = []
    conf = tmp_path / "conf"

    def install(blocks: dict[str, str], registry: Registry, name: str) -> list[str]:
        package_dir, file = _file_name(blocks["python"])
        package = importlib.import_module(package_dir.replace("/", "."))
        folder = tmp_path / package_dir.replace("/", "_")
        folder.mkdir()
        (folder / file).write_text(blocks["python"])
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        monkeypatch.setattr(registry, "_discovered", False)  # a new file: discovery runs again
        installed.append((registry, name, f"{package.__name__}.{file[:-3]}"))
        assert name in registry.names()
        if "yaml" not in blocks:
            return []
        group, yaml_file = _file_name(blocks["yaml"])
        (conf / group.split("/", 1)[1]).mkdir(parents=True, exist_ok=True)
        (conf / group.split("/", 1)[1] / yaml_file).write_text(blocks["yaml"])
        return [f"hydra.searchpath=[file://{conf}]"]

    yield install
    for registry, name, module in installed:
        registry.unregister(name)
        sys.modules.pop(module, None)


def test_readme_states_the_two_setup_commands():
    block = re.search(r"## Set up\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ['pip install -e . && python -m bench', 'pip install -e ".[test]" && python -m pytest']


def _readme_bench_commands() -> list[list[str]]:
    """The overrides of each ``python -m bench ...`` line in the README's bash blocks."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].split(" > ")[0].strip()
            if line.startswith("BENCH_DATA_DIR="):
                line = line.split(" ", 1)[1]
            if not line.startswith("python -m bench ") or line.startswith("python -m bench."):
                continue
            args = [a for a in line.split()[3:] if a not in ("-m", "--multirun")]
            if any(a.startswith("--") for a in args):
                continue  # --help, --cfg job
            out.append(args)
    return out


def test_every_bench_command_in_the_readme_composes():
    from hydra import compose, initialize_config_dir

    commands = _readme_bench_commands()
    assert len(commands) >= 15
    for args in commands:
        # a sweep composes as its first value of each swept key
        overrides = [a if "=" not in a or "(" in a else a.split("=", 1)[0] + "=" + a.split("=", 1)[1].split(",")[0]
                     for a in args]
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        apply_per_loss(cfg, overrides)


def test_every_guide_names_its_files_in_their_packages():
    for title, package in (("Adding a loss", "bench/losses"), ("Adding a threshold estimator", "bench/thresholds"),
                           ("Adding a backbone", "bench/models"), ("Adding a metric", "bench/evaluation/metrics")):
        blocks = _guide(title)
        assert _file_name(blocks["python"])[0] == package, title


@pytest.mark.slow
def test_the_loss_guide_trains_through_the_registry_and_its_config(plugin, tiny, tmp_path):
    from bench.losses import LOSSES

    search = plugin(_guide("Adding a loss"), LOSSES, "my_loss")
    res = train_and_test(bench_compose([*tiny, "loss=my_loss", "loss.n_negatives=20", *search,
                                        f"output_dir={tmp_path / 'run'}"]))
    assert res.status == "completed" and res.loss == "my_loss" and 0 < res.test["ndcg@20"] <= 1
    assert res.config["optimizer"]["lr"] == 0.1  # the recipe reached the optimizer


@pytest.mark.slow
def test_the_estimator_guide_is_safe_and_trains_slk(plugin, tiny, tmp_path, fixed_scorer):
    from bench.thresholds import ESTIMATORS
    from bench.thresholds import build as build_estimator

    plugin(_guide("Adding a threshold estimator"), ESTIMATORS, "negatives_only")
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (6, 30), generator=gen).float()  # ties and repeats
    scorer, users = fixed_scorer(scores), torch.arange(6).repeat(2)
    negatives = torch.randint(0, 30, (12, 40), generator=gen)
    for k in (1, 5, 20):
        got = build_estimator("negatives_only").estimate(scorer, users, negatives, k)
        exact = build_estimator("exact").estimate(scorer, users, None, k)
        assert (got <= exact).all()
        # brute force: each row's distinct items, their scores sorted, the K-th (or -inf)
        by_item = [sorted((float(scores[u, i]) for i in set(row.tolist())), reverse=True)
                   for u, row in zip(users.tolist(), negatives)]
        assert got.tolist() == [v[k - 1] if len(v) >= k else -math.inf for v in by_item]
    res = train_and_test(bench_compose([*tiny, "loss=slk", "loss.estimator=negatives_only", "loss.t_beta=1",
                                        f"output_dir={tmp_path / 'run'}"]))
    assert res.status == "completed" and res.config["loss"]["estimator"] == "negatives_only"
    assert res.history[-1]["diag/beta_overestimate_rate"] == 0.0  # safe, as measured on the trained model


@pytest.mark.slow
def test_the_backbone_guide_trains_with_its_config(plugin, tiny, tmp_path):
    from bench.models import MODELS

    search = plugin(_guide("Adding a backbone"), MODELS, "two_tower")
    res = train_and_test(bench_compose([*tiny, "model=two_tower", "model.dim=16", *search,
                                        f"output_dir={tmp_path / 'run'}"]))
    assert res.status == "completed" and res.model == "two_tower" and 0 < res.test["ndcg@20"] <= 1
    state = torch.load(res.best_checkpoint, weights_only=True)["state_dict"]
    assert state["model.user_tower.weight"].shape == (16, 16)


@pytest.mark.slow
def test_the_metric_guide_matches_a_hand_computation_and_reaches_the_results(plugin, tiny, tmp_path):
    from bench.evaluation import METRICS

    plugin(_guide("Adding a metric"), METRICS, "ap")
    # relevant at ranks 1, 3, 4 of 5; |R| = 4: AP@5 = (1/1 + 2/3 + 3/4) / 4, AP@2 = (1/1) / 2
    hits = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0]])
    out = metrics_from_hits(hits, torch.tensor([4, 2]), ks=(2, 5))
    assert out["ap@5"].tolist() == pytest.approx([(1 + 2 / 3 + 3 / 4) / 4, 0.0])
    assert out["ap@2"].tolist() == pytest.approx([0.5, 0.0])
    run = tmp_path / "run"
    train_and_test(bench_compose([*tiny, "train.monitor=ap@20", f"output_dir={run}"]))
    res = RunResult.read(run)
    assert {"ap@5", "ap@20", "ap@100"} <= set(res.test) and 0 < res.test["ap@20"] <= 1
    assert res.best["val"]["ap@20"] == max(h["val/ap@20"] for h in res.history)  # monitored
