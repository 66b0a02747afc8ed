"""``hydra/launcher=slurm`` against a real SLURM cluster: Debian's slurmctld, slurmd, slurmdbd (and
munge, MariaDB) started on 127.0.0.1 by ``scripts/slurm-local.sh``. Skipped, with the reason, where
the cluster cannot start (no root, no apt, no packages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from bench.records.ledger import read_ledger

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
TINY = ["dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14", "trainer.check_val_every_n_epoch=1",
        "loss.n_negatives=50", "train.batch_size=256"]
#: what a user sets for a cluster (docs/scale-out.md): here one node of this machine, no GPU
SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=local", "hydra.launcher.gpus_per_node=0",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]


@pytest.fixture
def cluster(tmp_path_factory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "BENCH_SLURM_DIR": str(folder)}
    started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=600)
    if started.returncode != 0:
        reason = (started.stderr.strip().splitlines() or ["no message"])[-1]
        print(f"SLURM cluster not started: {reason}")
        pytest.skip(f"no SLURM cluster here: {reason}")
    env["SLURM_CONF"] = str(folder / "slurm.conf")
    env["PYTHONPATH"] = str(REPO)
    yield env
    subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def _bench(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", "-m", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _tests(sweep: Path) -> dict[int, dict[str, float]]:
    runs = [json.loads(p.read_text()) for p in sweep.glob("*/results.json")]
    return {r["config"]["seed"]: r["test"] for r in runs if r["status"] == "completed"}


@pytest.mark.slow
def test_sweeps_through_a_real_slurm_cluster(cluster, tmp_path):
    """One test, one cluster: the daemons listen on fixed ports, so two workers must not start two."""
    (tmp_path / "digits").mkdir()
    (tmp_path / "cancel").mkdir()
    (tmp_path / "cut").mkdir()
    a_sweep_on_slurm_gives_the_local_sweeps_digits(cluster, tmp_path / "digits")
    a_cancelled_job_leaves_the_others_and_the_summary_names_it(cluster, tmp_path / "cancel")
    a_job_cut_by_its_time_limit_resumes_to_the_uncut_digits(cluster, tmp_path / "cut")
    a_study_runs_its_lanes_as_slurm_tasks(cluster, tmp_path)


def a_sweep_on_slurm_gives_the_local_sweeps_digits(cluster: dict[str, str], tmp_path: Path) -> None:
    seeds = "seed=0,1,2,3"
    slurm = _bench([*SLURM, *TINY, "trainer.max_epochs=2", "hydra.sweep.dir=slurm", seeds], tmp_path, cluster)
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    local = _bench([*TINY, "trainer.max_epochs=2", "hydra.sweep.dir=local", seeds], tmp_path, cluster)
    assert local.returncode == 0, local.stderr[-3000:]
    on_slurm, here = _tests(tmp_path / "slurm"), _tests(tmp_path / "local")
    assert sorted(on_slurm) == [0, 1, 2, 3] and on_slurm == here  # every metric of every seed, to the last digit
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "slurm" / "summary.csv"),
                                  pd.read_csv(tmp_path / "local" / "summary.csv"))
    # they ran as one array job of four tasks
    tasks = {p.name for p in (tmp_path / "slurm" / ".submitit").iterdir() if "_" in p.name and p.is_dir()}
    assert len(tasks) == 4 and len({t.split("_")[0] for t in tasks}) == 1, tasks


def a_cancelled_job_leaves_the_others_and_the_summary_names_it(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "bench", "-m", *SLURM,
                             "hydra.launcher.array_parallelism=1", *TINY, "trainer.max_epochs=40", "hydra.sweep.dir=sw",
                             "seed=0,1,2"], cwd=tmp_path, env=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    running = ""
    for _ in range(120):  # the first task running: cancel it
        running = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], env=cluster, capture_output=True,
                                 text=True).stdout.strip()
        if running:
            break
        time.sleep(0.5)
    assert running, "no task started"
    subprocess.run(["scancel", running.splitlines()[0]], env=cluster, check=True)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1, out[-3000:]  # a sweep with a job that did not complete
    done = _tests(tmp_path / "sw")
    assert len(done) == 2, out[-3000:]
    summary = (tmp_path / "sw" / "summary.md").read_text()
    missing = ({0, 1, 2} - set(done)).pop()
    # cancelled after it made its folder ("did not complete") or before ("did not run"): named either way
    named = [line for line in summary.splitlines() if line.startswith("- ") and
             (f"seed {missing})" in line or f"seed={missing})" in line)]
    assert len(named) == 1 and ("## Runs that did not complete" in summary or "did not run" in summary), summary
    assert "(n=2)" in summary and "Traceback" not in out


#: a run of ~60 s of training on one thread
LONG = ["dataset.n_users=1500", "dataset.n_items=400", "dataset.mean_per_user=20", "trainer.check_val_every_n_epoch=10",
        "loss.n_negatives=200", "train.batch_size=256", "trainer.max_epochs=200", "seed=0"]


def _squeue(env: dict[str, str], state: str) -> list[tuple[str, str]]:
    out = subprocess.run(["squeue", "-h", "-t", state, "-o", "%i %r"], env=env, capture_output=True, text=True).stdout
    return [tuple(line.split(None, 1)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def a_job_cut_by_its_time_limit_resumes_to_the_uncut_digits(cluster: dict[str, str], tmp_path: Path) -> None:
    """Once the run has trained 30 epochs, its limit drops to 1 minute, which it has nearly used: SLURM sends
    the time-limit signal (signal_delay_s before the limit) at its next check, the launcher requeues the job
    as resume=<its folder>, and it continues from last.ckpt. (A limit that short from the start would signal
    the job in its first second, before submitit's handler exists, and kill it: SLURM's signal may come up
    to a minute early.) The requeued job gets its 10 minutes back and is released at once (slurmctld holds a
    requeued job ~2 minutes)."""
    limit = ["hydra.launcher.timeout_min=10", "hydra.launcher.signal_delay_s=30", "hydra.launcher.max_num_timeout=5"]
    slurm = subprocess.Popen([sys.executable, "-m", "bench", "-m", *SLURM, *limit, *LONG, "hydra.sweep.dir=cut"],
                             cwd=tmp_path, env=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # the uncut reference beside it, on the other core
    local = subprocess.Popen([sys.executable, "-m", "bench", "-m", *LONG, "hydra.sweep.dir=uncut"], cwd=tmp_path,
                             env={**cluster, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    log, shortened, released = tmp_path / "cut" / "0" / "bench.log", False, 0
    deadline = time.monotonic() + 600
    while slurm.poll() is None and time.monotonic() < deadline:
        if not shortened and log.is_file() and log.read_text().count("train loss") >= 30:
            for job, _ in _squeue(cluster, "R"):
                subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], env=cluster, check=True)
                shortened = True
        for job, reason in _squeue(cluster, "PD"):
            if reason == "BeginTime":
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now", "TimeLimit=10"], env=cluster,
                               check=True)
                released += 1
        time.sleep(0.5)
    out, _ = slurm.communicate(timeout=30)
    local_out, _ = local.communicate(timeout=600)
    assert slurm.returncode == 0 and local.returncode == 0, out[-3000:] + local_out[-3000:]
    logs = "".join(p.read_text() for p in (tmp_path / "cut" / ".submitit").glob("*/*_log.out"))
    assert shortened and released == 1 and "this job is timed-out" in logs, logs[-3000:]
    assert logs.count("requeued to resume") == 1, logs[-3000:]
    cut, uncut = (json.loads((tmp_path / d / "0" / "results.json").read_text()) for d in ("cut", "uncut"))
    assert cut["status"] == "completed" and cut["resumed_from"].endswith("last.ckpt")
    assert cut["epochs_trained"] == uncut["epochs_trained"] == 200
    assert cut["test"] == uncut["test"] and cut["best"] == uncut["best"]  # to the last digit
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "cut" / "summary.csv"),
                                  pd.read_csv(tmp_path / "uncut" / "summary.csv"))


STUDY = """
title: a tuned tiny study on SLURM
tables:
  synth: [dataset.n_users=120, dataset.n_items=80, dataset.mean_per_user=14, trainer.max_epochs=2,
          trainer.check_val_every_n_epoch=1, loss.n_negatives=50, train.batch_size=256]
rows:
  sl: [loss=sl]
  bpr: [loss=bpr]
placement: [logger=none]
seeds: [0]
baseline: sl
metric: ndcg@20
metrics: [ndcg@20]
tune:
  replicate: {seed: 100}
  metric: ndcg@20
  rows:
    sl: {grid: {loss.tau: [0.1, 0.2]}}
"""


def _ledgers(results: Path) -> dict[tuple[str, str, int], dict]:
    """(ledger, setting, seed) -> the run's validation and test values, from every ledger under ``results``."""
    held = {}
    for ledger in sorted(results.rglob("*.csv")):
        for row in read_ledger(ledger):
            values = {k: v for k, v in row.items() if k.startswith(("val/", "test/"))}
            held[(str(ledger.relative_to(results)), row["setting"], int(row["seed"]))] = values
    return held


def a_study_runs_its_lanes_as_slurm_tasks(cluster: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(STUDY)
    study = [sys.executable, "-m", "bench.study", str(tmp_path / "tiny.yaml"), "run"]
    fields = ["partition=local", "gpus_per_node=0", "cpus_per_task=1", "mem_gb=1", "timeout_min=10"]
    slurm = subprocess.run([*study, "--launcher", "slurm", "--slurm", *fields, "--runs", "runs-slurm", "--results",
                            "on-slurm"], cwd=tmp_path, env=cluster, capture_output=True, text=True, timeout=600)
    assert slurm.returncode == 0, slurm.stdout[-3000:] + slurm.stderr[-3000:]
    # the tuning trials went out first; SL's reported runs only once its grid had chosen (a second array)
    submitted = [line for line in slurm.stdout.splitlines() if line.startswith("submitted ")]
    assert len(submitted) == 4 and all(" tune " in line for line in submitted[:2]), slurm.stdout
    assert "4 done, 0 running, 0 left" in slurm.stdout, slurm.stdout
    here = subprocess.run([*study, "--lanes", "2", "--runs", "runs-here", "--results", "here"], cwd=tmp_path,
                          env=cluster, capture_output=True, text=True, timeout=600)
    assert here.returncode == 0, here.stdout[-3000:] + here.stderr[-3000:]
    on_slurm, local = _ledgers(tmp_path / "on-slurm"), _ledgers(tmp_path / "here")
    assert len(on_slurm) == 4 and on_slurm == local  # the same runs, every value to the last digit
    again = subprocess.run([*study, "--launcher", "slurm", "--slurm", *fields, "--runs", "runs-slurm", "--results",
                            "on-slurm"], cwd=tmp_path, env=cluster, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "submitted" not in again.stdout, again.stdout  # the ledgers hold them all
    # ledgers lost (the submitter died before writing them): the next call finds the runs and records them
    shutil.rmtree(tmp_path / "on-slurm")
    found = subprocess.run([*study, "--launcher", "slurm", "--slurm", *fields, "--runs", "runs-slurm", "--results",
                            "on-slurm"], cwd=tmp_path, env=cluster, capture_output=True, text=True, timeout=600)
    assert found.returncode == 0 and "submitted" not in found.stdout, found.stdout
    assert found.stdout.count("recorded ") == 4 and _ledgers(tmp_path / "on-slurm") == local, found.stdout
