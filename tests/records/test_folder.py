"""The run folder's own rules (bench/records/folder.py): which links are refused, which temporary
files a run removes, and the log held until the folder is the run's."""

from __future__ import annotations

import logging

import pytest

from bench.errors import BenchError
from bench.records.folder import HELD_LINES, RunLog, check_no_links, remove_stale_temporaries


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


def test_wandbs_own_links_are_its_own_but_wandb_itself_may_not_lead_out(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "wandb" / "offline-run-1" / "logs").mkdir(parents=True)
    outside.mkdir()
    # W&B links its cache's log in, and a saved file back to the run's: neither is written through by the run
    (run / "wandb" / "offline-run-1" / "logs" / "debug-core.log").symlink_to(outside / "core.log")
    check_no_links(run)
    elsewhere = tmp_path / "run2"
    elsewhere.mkdir()
    (elsewhere / "wandb").symlink_to(outside)
    with pytest.raises(BenchError, match=r"run2/wandb is a symbolic link out of the run's folder"):
        check_no_links(elsewhere)


def test_nested_run_folders_are_refused_both_ways(tmp_path):
    from bench.errors import FolderTaken
    from bench.records import RunResult
    from bench.records.folder import check_holds_no_other_run, check_not_inside_a_run

    RunResult(status="completed", run_dir=tmp_path / "outer").write()
    with pytest.raises(FolderTaken, match=r"outer/checkpoints lies inside the run folder .*outer"):
        check_not_inside_a_run(tmp_path / "outer" / "checkpoints")
    RunResult(status="completed", run_dir=tmp_path / "P" / "checkpoints").write()
    with pytest.raises(FolderTaken, match=r"P holds another run's folder \(.*P/checkpoints\)"):
        check_holds_no_other_run(tmp_path / "P")
    check_not_inside_a_run(tmp_path / "fresh" / "run")
    check_holds_no_other_run(tmp_path / "outer")  # its own results.json is no other run's
