"""The folder lock under contention (issue 42, class 3): four processes that find a stale lock file
and try to take the folder at the same instant, 40 times over, never hold it two at a time
(the earlier pid-file lock let two in on 20 of 40 trials), and a holder killed with -9 frees it at
once, with nothing to clean up."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import time

import pytest

from bench.errors import FolderTaken
from bench.records.lock import LOCK_FILE, RunLock, holder_alive

PROCESSES, TRIALS, HOLD_S = 4, 40, 0.02


def _contender(folder, barrier, intervals, trials):
    for trial in range(trials):
        barrier.wait()
        try:
            lock = RunLock(folder)
        except FolderTaken:
            continue
        start = time.monotonic()
        time.sleep(HOLD_S)
        intervals.put((trial, os.getpid(), start, time.monotonic()))
        lock.release()


def test_four_processes_racing_for_a_stale_lock_never_both_hold_it(tmp_path):
    ctx = mp.get_context("fork")
    barrier, intervals = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(tmp_path, barrier, intervals, TRIALS)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    dead = ctx.Process(target=lambda: None)
    dead.start()
    dead.join()
    held = []
    for _ in range(TRIALS):
        # before each trial: the lock file of a process that died without cleaning up
        (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
        barrier.wait()
        time.sleep(HOLD_S * 6)  # every contender has tried and released
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    while not intervals.empty():
        held.append(intervals.get())
    by_trial = {}
    for trial, pid, start, end in held:
        by_trial.setdefault(trial, []).append((start, end, pid))
    overlaps = 0
    for spans in by_trial.values():
        spans.sort()
        overlaps += sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
    assert overlaps == 0, f"{overlaps} trials had two holders at once"
    assert len(by_trial) == TRIALS  # someone took the stale lock in every trial


def test_a_holder_killed_with_minus_9_frees_the_folder_at_once(tmp_path):
    ready = mp.get_context("fork").Event()

    def hold():
        RunLock(tmp_path)
        ready.set()
        time.sleep(120)

    holder = mp.get_context("fork").Process(target=hold)
    holder.start()
    assert ready.wait(30)
    with pytest.raises(FolderTaken, match=f"in use by process {holder.pid}"):
        RunLock(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert not holder_alive(tmp_path)
    with RunLock(tmp_path) as lock:
        assert lock.held
