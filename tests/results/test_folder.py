"""The run folder's own rules (bench/results/folder.py): which links are refused, which temporary
files a run removes, and the log held until the folder is the run's."""

from __future__ import annotations

import logging

import pytest

from bench.errors import BenchError
from bench.results.folder import HELD_LINES, RunLog, check_no_links, remove_stale_temporaries


def test_links_out_of_the_folder_are_refused_and_links_inside_it_kept(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "wandb" / "run-1").mkdir(parents=True)
    outside.mkdir()
    (run / "wandb" / "latest-run").symlink_to("run-1")  # W&B's own link: stays inside
    check_no_links(run)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").symlink_to(outside / "x.ckpt")
    with pytest.raises(BenchError, match=r"checkpoints/last\.ckpt is a symbolic link out of the run's folder"):
        check_no_links(run)


def test_only_a_runs_own_temporaries_are_removed(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    ours = [tmp_path / "results.json.abc123.tmp", tmp_path / "checkpoints" / "last.ckpt.tmp"]
    theirs = [tmp_path / "notes.tmp", tmp_path / "results.json.tmp.bak"]
    for path in ours + theirs:
        path.write_text("x")
    remove_stale_temporaries(tmp_path)
    assert not any(p.exists() for p in ours) and all(p.exists() for p in theirs)


def test_the_log_is_held_until_the_folder_is_the_runs_then_written_there(tmp_path):
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.INFO)
    log = logging.getLogger("bench.test")
    try:
        run_log = RunLog()
        log.info("before the lock")
        assert not (tmp_path / "bench.log").exists()
        run_log.open(tmp_path)
        log.info("after the lock")
        run_log.close()
        log.info("after the run")
        lines = (tmp_path / "bench.log").read_text().splitlines()
        assert [line.rsplit(" - ", 1)[1] for line in lines] == ["before the lock", "after the lock"]
        # a run refused before its folder was its own holds a bounded number of lines, then drops them
        refused = RunLog()
        for i in range(HELD_LINES + 50):
            log.info("line %d", i)
        assert len(refused._buffer.buffer) <= HELD_LINES
        refused.close()
        assert not any(isinstance(h, logging.handlers.MemoryHandler) for h in root.handlers)
    finally:
        root.setLevel(level)
