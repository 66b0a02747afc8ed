"""One run per output folder: the lock, stale locks, completed folders, and two runs at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from bench.errors import BenchError, FolderTaken
from bench.records import RunResult
from bench.records.lock import LOCK_FILE, RunLock, holder_alive
from bench.run import train_and_test


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_in_use_is_refused_and_freed_after(tmp_path):
    with RunLock(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text()) == {"pid": os.getpid(), "host": socket.gethostname()}
        with pytest.raises(BenchError, match=rf"{tmp_path} is in use by process {os.getpid()} on "):
            RunLock(tmp_path)
    assert not (tmp_path / LOCK_FILE).exists()
    RunLock(tmp_path).release()  # free again


def test_a_lock_file_nobody_holds_is_taken_whatever_it_says(tmp_path):
    # the kernel's lock, not the file's words, says who holds a folder: a dead process's file, or
    # one naming a process on another host, is free when no live process holds the lock
    for owner in ({"pid": _dead_pid(), "host": socket.gethostname()}, {"pid": 1, "host": "another-host"}):
        (tmp_path / LOCK_FILE).write_text(json.dumps(owner))
        with RunLock(tmp_path) as lock:
            assert lock.held and json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_live_holder_in_another_process_is_named_and_its_death_frees_the_folder(tmp_path, folder_holder):
    with folder_holder(tmp_path) as holder:
        assert holder_alive(tmp_path)
        with pytest.raises(FolderTaken, match=rf"is in use by process {holder.pid} on "):
            RunLock(tmp_path)
    # killed with -9: no clean-up ran, the kernel dropped its lock
    assert not holder_alive(tmp_path)
    RunLock(tmp_path).release()


def test_a_completed_run_is_kept_unless_forced_or_resumed(tmp_path):
    RunResult(status="completed", run_dir=tmp_path).write()
    with pytest.raises(BenchError, match="already holds a completed run; choose another output folder or pass "
                                         "force=true"):
        RunLock(tmp_path)
    RunLock(tmp_path, force=True).release()
    RunLock(tmp_path, resuming=True).release()
    RunResult(status="failed", run_dir=tmp_path).write()
    RunLock(tmp_path).release()  # a failed run's folder may be reused
    # a killed run with a checkpoint to continue from is kept, unless resumed or forced
    RunResult(status="running", run_dir=tmp_path).write()
    RunLock(tmp_path).release()  # nothing to resume yet
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(BenchError, match=rf"holds an interrupted run that can continue from its last checkpoint; "
                                         rf"continue it with resume={tmp_path}"):
        RunLock(tmp_path)
    RunLock(tmp_path, resuming=True).release()
    RunLock(tmp_path, force=True).release()


@pytest.mark.slow
def test_a_second_run_into_a_used_folder_stops_before_touching_it(tiny, make_cfg, tmp_path, run_cli):
    first = train_and_test(make_cfg([*tiny, "logger=none"], tmp_path))
    before = (tmp_path / "results.json").read_text()
    proc = run_cli([*tiny, "logger=none", "loss=bpr", f"hydra.run.dir={tmp_path}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: {tmp_path} already holds a completed run" in proc.stderr
    assert (tmp_path / "results.json").read_text() == before and first.loss == "sl"
    proc = run_cli([*tiny, "logger=none", "loss=bpr", f"hydra.run.dir={tmp_path}", "force=true"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert RunResult.read(tmp_path).loss == "bpr" and not (tmp_path / LOCK_FILE).exists()


@pytest.mark.slow
def test_two_runs_started_together_get_folders_of_their_own(tiny, tmp_path):
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    args = [sys.executable, "-m", "bench", *tiny, "trainer.max_epochs=1", "logger=none"]
    procs = [subprocess.Popen([*args, f"loss={loss}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for loss in ("sl", "bpr")]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    runs = sorted(tmp_path.glob("outputs/*/*/results.json"))
    assert len(runs) == 2
    assert sorted(RunResult.read(r).loss for r in runs) == ["bpr", "sl"]
    for r in runs:  # each folder holds one run's config and metrics, not a mix
        res = RunResult.read(r)
        assert any(o == f"loss={res.loss}" for o in res.overrides)
