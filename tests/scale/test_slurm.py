"""``hydra/launcher=slurm`` against a real SLURM cluster: Debian's slurmctld, slurmd, slurmdbd (and
munge, MariaDB) started on 127.0.0.1 by ``scripts/slurm-local.sh``. Skipped, with the reason, where
the cluster cannot start (no root, no apt, no packages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

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
    a_sweep_on_slurm_gives_the_local_sweeps_digits(cluster, tmp_path / "digits")
    a_cancelled_job_leaves_the_others_and_the_summary_names_it(cluster, tmp_path / "cancel")


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
