"""Resume follows the folder it is given (issue 13, defect 2): moved or copied runs resume in
place to the uninterrupted results, write nowhere else, accept only overrides that extend the
run, and a killed run reads "interrupted"."""

from __future__ import annotations

import shutil

import pytest

from bench.collect import from_directories
from bench.records import INTERRUPTED, RunResult
from bench.records.io import load_checkpoint
from bench.run import train_and_test

pytestmark = pytest.mark.slow


@pytest.fixture
def runs(tmp_path, tiny, make_cfg, crash_at):
    """(full, killed): the same 4-epoch run done in one go, and killed at the start of epoch 3."""
    overrides = [*tiny, "trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2", "logger=csv"]
    full = train_and_test(make_cfg(overrides, tmp_path / "full"), overrides=overrides)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_and_test(make_cfg(overrides, tmp_path / "killed"), overrides=overrides, extra_callbacks=[crash_at(3)])
    return full, tmp_path / "killed"


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_killed_run_reads_interrupted(runs, tmp_path):
    _, killed = runs
    res = RunResult.read(killed)
    assert res.status == "running" and res.live_status() == INTERRUPTED
    _, notes = from_directories([killed])
    assert notes == [f"{killed}: interrupted"]


def test_a_moved_run_resumes_in_its_new_folder_to_the_uninterrupted_results(runs, tmp_path, run_cli):
    full, killed = runs
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(killed, moved)
    proc = run_cli([f"resume={moved}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = RunResult.read(moved)
    assert res.status == "completed" and res.test == full.test and res.history == full.history
    assert res.best["epoch"] == full.best["epoch"] and res.best["checkpoint"] == "checkpoints/best.ckpt"
    assert load_checkpoint(res.best_checkpoint)["epoch"] == res.best["epoch"]  # the file is that epoch's
    assert not killed.exists() and not (tmp_path / "outputs").exists()  # nothing written elsewhere
    assert "resuming" in (moved / "bench.log").read_text()  # the resumed part's log continues in place
    assert (moved / "csv" / "resumed" / "metrics.csv").exists()


def test_a_copied_run_resumes_without_touching_the_original(runs, tmp_path, run_cli):
    full, killed = runs
    copy = tmp_path / "copy"
    shutil.copytree(killed, copy)
    before = _snapshot(killed)
    proc = run_cli([f"resume={copy}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert RunResult.read(copy).test == full.test
    assert _snapshot(killed) == before  # the original: not a byte changed, its best.ckpt not deleted


def test_resume_applies_overrides_that_extend_the_run_and_refuses_the_others(runs, tmp_path, run_cli):
    _, killed = runs
    proc = run_cli([f"resume={killed}", "loss=bpr"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: resume continues the same experiment, and loss=bpr would change it" in proc.stderr
    proc = run_cli([f"resume={killed}", "trainer.max_epochs=6"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = RunResult.read(killed)
    assert res.epochs_trained == 6 and res.config["trainer"]["max_epochs"] == 6
    assert "trainer.max_epochs=6" in res.overrides  # recorded: a later resume replays it
    assert "resume applies trainer.max_epochs=6" in (killed / "bench.log").read_text()
