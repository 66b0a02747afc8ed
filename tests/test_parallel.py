"""Launchers: parallel joblib sweeps, submitit (local, SLURM config); tuning is tests/tune."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest
from hydra import compose, initialize_config_dir

from bench.app import CONFIG_DIR
from bench.parallel import place_job


def _results(sweep, n):
    return [json.loads((sweep / str(i) / "results.json").read_text()) for i in range(n)]


@pytest.mark.slow
def test_joblib_sweep_runs_two_jobs_at_once_with_split_cpu_threads(tmp_path, tiny, run_cli):
    # runs long enough (~seconds) that the workers' start-up skew cannot hide their overlap
    proc = run_cli(["-m", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", *tiny, "logger=none",
                    "trainer.max_epochs=150", "trainer.check_val_every_n_epoch=150", "seed=0,1",
                    "hydra.sweep.dir=sweep"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = _results(tmp_path / "sweep", 2)
    assert a["status"] == b["status"] == "completed"
    assert a["host"]["pid"] != b["host"]["pid"]  # two worker processes ...
    start = [datetime.fromisoformat(r["started_at"]) for r in (a, b)]
    end = [datetime.fromisoformat(r["finished_at"]) for r in (a, b)]
    assert start[0] < end[1] and start[1] < end[0]  # ... whose runs overlap in time
    cores = len(os.sched_getaffinity(0))
    assert a["host"]["torch_threads"] == b["host"]["torch_threads"] == max(1, cores // 2)
    assert (tmp_path / "sweep" / "summary.md").is_file()


def test_job_placement():
    assert place_job(0, 4, 2, 16, 1, "auto") == ([0], None)
    assert place_job(3, 4, 2, 16, 1, "gpu") == ([1], None)  # job k -> GPU k mod #GPUs
    assert place_job(3, 4, 0, 16, 1, "auto") == (None, 4)  # CPU only: cores / jobs threads
    assert place_job(1, 4, 2, 16, 1, "cpu") == (None, 4)
    assert place_job(1, 4, 2, 16, 2, "gpu") == (None, None)  # multi-device runs are left alone
    assert place_job(0, 1, 2, 16, 1, "auto") == (None, None)


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_sweep(tmp_path, tiny, run_cli):
    proc = run_cli(["-m", "hydra/launcher=submitit_local", *tiny, "logger=none", "trainer.max_epochs=2", "seed=0,1",
                    "hydra.sweep.dir=sweep"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["status"] for r in _results(tmp_path / "sweep", 2)] == ["completed", "completed"]


def test_slurm_launcher_config_composes_with_documented_fields():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.bench_slurm_launcher.TolerantSlurmLauncher"
    assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min, launcher.array_parallelism) == \
        ("gpu", 1, 240, 64)
    assert launcher.submitit_folder.endswith("/.submitit/%j")
