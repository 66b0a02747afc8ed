"""A new user's first hour: a quiet console that still says what matters, a task that brings its
backbone, optional plugins that name their extra, and docs, ``--help`` and configs that agree."""

from __future__ import annotations

import io
import itertools
import logging
import re
from pathlib import Path

import pytest
import yaml

from bench.app import check_extras
from bench.composition import CONFIG_DIR
from bench.console import ConsoleHandler, wants_verbose
from bench.errors import BenchError
from bench.sweep import jobs_from_command_line
from bench.tasks.callbacks import Heartbeat

REPO = Path(__file__).resolve().parents[1]
CONF = Path(CONFIG_DIR)
#: lines the libraries print on every run that a user cannot act on (issue 44's list)
NOISE = ("GPU available", "TPU available", "litlogger", "LeafSpec", "anonymous setting", "Processing...",
         "`Trainer.fit` stopped", "Restoring states", " 1 epochs", "[ERROR]")


def test_a_default_run_prints_bench_lines_only_and_every_line_with_v(run_cli, tiny, tmp_path):
    quiet = run_cli([*tiny, "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=1"], tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    out = quiet.stdout + quiet.stderr
    assert [n for n in NOISE if n in out] == []
    assert "time estimate:" in out and "2 epochs ≈" in out and "Test metrics" in out
    # each epoch's training line before its validation's (Lightning validates before the epoch's end hook)
    said = [m.group(0) for m in re.finditer(r"epoch \d: (train loss|validation)", out)]
    assert said == ["epoch 0: train loss", "epoch 0: validation", "epoch 1: train loss", "epoch 1: validation"], said
    loud = run_cli(["-v", *tiny, "trainer.max_epochs=1"], tmp_path)
    assert loud.returncode == 0, loud.stderr
    # once: Lightning, imported after the run's logging is set up, would also print it on its own handler
    assert (loud.stdout + loud.stderr).count("GPU available") == 1, loud.stdout + loud.stderr


def test_a_run_error_is_said_once(run_cli, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("u1\ti1\nu2\n")
    done = run_cli(["dataset=custom", f"dataset.path={bad}", "trainer.max_epochs=1"], tmp_path)
    assert done.returncode == 2
    said = (done.stdout + done.stderr).splitlines()
    errors = [line for line in said if "bad.tsv" in line]
    assert len(errors) == 1 and errors[0].startswith("error: "), said


def test_minus_v_is_log_verbose():
    assert wants_verbose(["bench", "-v", "loss=sl"]) == ["bench", "loss=sl", "log.verbose=true"]
    assert wants_verbose(["bench", "loss=sl"]) == ["bench", "loss=sl"]


def test_a_long_epoch_says_where_it_is_every_30_seconds(monkeypatch, caplog):
    clock = iter([0.0, 10.0, 31.0, 45.0, 62.0])
    monkeypatch.setattr("bench.tasks.callbacks.time.perf_counter", lambda: next(clock))

    class Trainer:
        num_training_batches, current_epoch = 100, 3

    beat = Heartbeat(every_s=30)
    beat.on_train_epoch_start(Trainer(), None)
    with caplog.at_level(logging.INFO, logger="bench.tasks.callbacks"):
        for step in (9, 30, 44, 61):
            beat.on_train_batch_end(Trainer(), None, None, None, step)
    lines = [r.getMessage() for r in caplog.records]
    # at 31 s, 31 of 100 steps done: 69 steps at 1 s each left; at 62 s, 62 done
    assert lines == ["epoch 3: step 31 of 100 (31%), about 69 s left in the epoch",
                     "epoch 3: step 62 of 100 (62%), about 38 s left in the epoch"]


def test_log_lines_go_around_an_open_bar():
    from tqdm import tqdm

    stream = io.StringIO()
    handler = ConsoleHandler(stream)
    record = logging.LogRecord("bench", logging.INFO, __file__, 1, "epoch 0: train loss 1.0", None, None)
    with tqdm(total=10, file=stream) as bar:
        bar.update(3)
        handler.emit(record)
    assert "epoch 0: train loss 1.0\n" in stream.getvalue()
    hidden = logging.LogRecord("bench", logging.ERROR, __file__, 1, "said elsewhere", None, None)
    hidden.console = False
    handler.emit(hidden)
    assert "said elsewhere" not in stream.getvalue()


@pytest.mark.parametrize("arg,extra", [("hydra/launcher=slurm", "slurm")])
def test_a_plugin_without_its_extra_names_the_extra(monkeypatch, arg, extra):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_") else real(name, *a))
    with pytest.raises(BenchError, match=rf'needs the .* plugin: pip install -e "\.\[{extra}\]"'):
        check_extras(arg)
    check_extras("hydra/launcher=parallel")  # core


@pytest.mark.parametrize("task,model", [("cf", "mf"), ("seq", "sasrec"), ("linkpred", "gnn"), ("ltr", "transformer")])
def test_a_task_brings_its_backbone_and_model_still_wins(make_cfg, tmp_path, task, model):
    assert make_cfg([f"task={task}"], tmp_path).model.name == model
    assert make_cfg([f"task={task}", "model=mlp"], tmp_path).model.name == "mlp"


def _training(cfg) -> dict:
    """What decides how a run trains, beside the loss."""
    return {"negatives": cfg.train.negatives, "groups": cfg.train.shared_groups, "patience":
            cfg.train.early_stopping_patience, "val_every": cfg.trainer.check_val_every_n_epoch,
            "fused": cfg.optimizer.fused, "foreach": cfg.optimizer.foreach, "epochs": cfg.trainer.max_epochs,
            "dim": cfg.model.dim, "dropout": cfg.model.dropout, "pack": cfg.model.pack,
            "users": cfg.task.users_per_batch}


@pytest.mark.parametrize("dataset,table6", [("games", "games"), ("beauty-seq", "beauty")])
def test_task_seq_trains_with_table6s_recipe_unless_told_otherwise(make_cfg, tmp_path, dataset, table6):
    plain = make_cfg(["task=seq", f"dataset={dataset}", "loss=slk"], tmp_path)
    paper = make_cfg([f"+experiment=seq/table6_{table6}", "loss=slk"], tmp_path)
    assert _training(plain) == _training(paper) == {
        "negatives": "shared", "groups": 16, "patience": 5, "val_every": 10, "fused": True, "foreach": False,
        "epochs": 200, "dim": 50, "dropout": 0.5, "pack": True, "users": 128}
    told = make_cfg(["task=seq", f"dataset={dataset}", "train.negatives=per_pair", "optimizer.fused=false",
                     "trainer.check_val_every_n_epoch=5", "model.dropout=0.2"], tmp_path)
    assert (told.train.negatives, told.optimizer.foreach, told.trainer.check_val_every_n_epoch,
            told.model.dropout) == ("per_pair", True, 5, 0.2)
    # the recipe is the seq task's: collaborative filtering keeps its own defaults
    cf = make_cfg(["dataset=health"], tmp_path)
    assert (cf.train.negatives, cf.train.shared_groups, cf.train.early_stopping_patience,
            cf.trainer.check_val_every_n_epoch, cf.optimizer.fused) == ("per_pair", 1, None, 5, False)
    assert make_cfg(["task=seq", "dataset=ml100k-seq"], tmp_path).model.dropout == 0.2  # SASRec's on MovieLens


def _options(group: str) -> set[str]:
    return {p.stem for p in (CONF / group).glob("*.yaml")}


def _expand(text: str) -> set[str]:
    """The backticked names of a docs cell, ``a_{x,y}`` expanded to ``a_x``, ``a_y``."""
    names: set[str] = set()
    for token in re.findall(r"`([^`]+)`", text):
        parts = re.split(r"\{([^}]*)\}", token)
        choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
        names |= {"".join(c) for c in itertools.product(*choices)}
    return names


def test_every_config_option_is_in_the_docs_table():
    table = {}
    for line in (REPO / "docs" / "configuration.md").read_text().splitlines():
        cells = re.split(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", line)  # not at a | inside backticks
        if len(cells) > 3 and cells[1].strip().startswith("`"):
            for group in re.findall(r"`\+?([\w/]+)`", cells[1]):
                table[group] = _expand(cells[2])
    groups = {"task": "task", "dataset": "dataset", "model": "model", "loss": None, "trainer": "trainer",
              "logger": "logger", "callbacks": "callbacks", "hydra/launcher": "hydra/launcher",
              }
    missing = {}
    for group, row in groups.items():
        if row is None:  # the losses have their own table
            continue
        lacking = _options(group) - table.get(row, set())
        if lacking:
            missing[group] = sorted(lacking)
    experiments = {str(p.relative_to(CONF / "experiment").with_suffix(""))
                   for p in (CONF / "experiment").rglob("*.yaml")}
    if experiments - table["experiment"]:
        missing["experiment"] = sorted(experiments - table["experiment"])
    assert not missing, f"docs/configuration.md's table lacks {missing}"


def test_the_readme_peer_table_is_the_benchmarks_output():
    """The README's comparison with RecBole is the newest ``benchmarks/peer_recbole.py`` output, unedited."""
    readme = (REPO / "README.md").read_text()
    begin, end = "<!-- peer table: benchmarks/peer_recbole.py --readme -->", "<!-- end of the peer table -->"
    quoted = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    newest = sorted((REPO / "results" / "speed").glob("*-peer-recbole.md"))[-1].read_text()
    assert quoted and quoted in newest
    assert "BPR s / epoch: bench | RecBole | bench / RecBole" in quoted
    assert "`import recbole.quick_start`" in quoted


def _help_examples() -> list[list[str]]:
    template = yaml.safe_load((CONF / "hydra" / "help" / "bench.yaml").read_text())["template"]
    return [line.split("#")[0].split()[3:] for line in template.splitlines()
            if line.strip().startswith("python -m bench ") and "<" not in line]


@pytest.mark.parametrize("args", _help_examples(), ids=" ".join)
def test_every_help_example_composes(args):
    jobs = jobs_from_command_line(["bench", *[a for a in args if a not in ("-v",)]])
    assert jobs, args


def test_help_names_what_a_user_needs(run_cli, tmp_path):
    shown = run_cli(["--help"], tmp_path)
    assert shown.returncode == 0
    for needed in ("Usage: python -m bench", "Examples:", "experiment/paper: table18_mf_food",
                   "task: cf, linkpred, ltr, seq", "python -m bench.study list", "python -m bench.site results"):
        assert needed in shown.stdout, needed
    assert len(_help_examples()) >= 10


def test_help_does_not_import_the_training_stack(tmp_path):
    """--help answers from the configs alone (no Lightning, no PyTorch: a second, not five)."""
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", "--help"], cwd=tmp_path,
                           capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0 and "Examples:" in shown.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in shown.stderr.splitlines() if "|" in line}
    assert "bench" in imported and not imported & {"lightning", "torch", "torch_geometric", "wandb"}


def test_the_readme_timings_are_the_benchmarks_table():
    """The README quotes timings once, as the newest ``benchmarks/speed_first_hour.py`` measured them."""
    readme = (REPO / "README.md").read_text()
    begin = "<!-- first-hour table: benchmarks/speed_first_hour.py --readme -->"
    end = "<!-- end of the first-hour table -->"
    quoted = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    newest = sorted((REPO / "results" / "speed").glob("*-first-hour.md"))[-1].read_text()
    assert quoted and quoted in newest
    assert "| `python -m bench` | the default run" in quoted
    default_wall = float(next(line for line in quoted.splitlines() if line.startswith("| `python -m bench` |"))
                         .split("|")[3])
    assert default_wall < 60, "the default run must finish well under a minute on an idle machine"


def test_durations_read_as_a_person_says_them():
    from bench.console import duration

    assert [duration(s) for s in (0.24, 9.9, 9.96, 45, 119, 720, 12240)] == \
        ["0.2 s", "9.9 s", "10 s", "45 s", "119 s", "12 min", "3.4 h"]


def test_a_cpu_run_on_a_busy_machine_says_why_it_will_be_slow(monkeypatch, caplog):
    import torch

    import bench.training as training

    monkeypatch.setattr(training, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    def said(others: int | None, **env: str) -> list[str]:
        monkeypatch.setattr(training, "others_running", lambda: others)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="bench.training"):
            training.warn_if_busy()
        return [r.getMessage() for r in caplog.records]

    assert said(0) == [] and said(None) == []  # idle; or no count to go by
    assert said(1) == ["the machine is busy (1 other thread running on 2 cores): 1 run of 2 threads would "
                       "oversubscribe it and run many times slower; pin it to free cores (taskset -c ...) or give "
                       "it fewer threads (OMP_NUM_THREADS=1)"]
    # threads someone chose (a lane's, a sweep's share, a SLURM task's): placed on purpose, nothing said
    assert said(3, OMP_NUM_THREADS="2") == []
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert said(3, SLURM_JOB_ID="7") == []
