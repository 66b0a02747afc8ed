"""Bringing a run folder to a completed run across sittings (bench.resumable): a completed run is
kept, a killed one resumed, anything else started over; folders named like overrides survive Hydra's
grammar; a run's output can go to a log."""

from __future__ import annotations

import sys

from bench.app import resume_in_place
from bench.records import COMPLETED, RunResult
from bench.resumable import finish_run, override_value


def test_finish_run_can_send_a_runs_output_to_a_log(tmp_path, capsys):
    log = tmp_path / "sl.log"
    finish_run(tmp_path / "sl", ["loss=nosuchloss"], log=log)
    assert "nosuchloss" in log.read_text()  # the run's own one-line error
    assert f"its error is in {log}" in capsys.readouterr().out


def test_finish_run_keeps_resumes_or_starts(tmp_path, monkeypatch):
    import subprocess

    cmds = []
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, check, **kw: cmds.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    done = tmp_path / "done"
    recorded = ["loss=sl", "seed=1", f"hydra.run.dir={done}", "force=true"]
    RunResult(status=COMPLETED, config={}, overrides=recorded).write(done)
    assert finish_run(done, ["seed=1", "loss=sl"]) == "kept" and cmds == []
    stopped = tmp_path / "stopped"
    RunResult(status="running", config={}, overrides=["loss=sl", "seed=1"]).write(stopped)
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert finish_run(stopped, ["loss=sl", "seed=1"]) == "resumed"
    assert cmds[-1] == [sys.executable, "-m", "bench", f"resume={stopped}"]
    # a folder holding a run of other overrides (a changed grid): replaced, not resumed or kept
    assert finish_run(stopped, ["loss=sl", "seed=2"]) == "started"
    assert finish_run(done, ["loss=sl", "seed=2"]) == "started"
    assert finish_run(tmp_path / "new", ["loss=sl", "seed=1"]) == "started"
    assert cmds[-1][3:] == ["loss=sl", "seed=1", f"hydra.run.dir={tmp_path / 'new'}", "force=true"]


def test_finish_run_passes_folders_named_like_overrides_to_hydra(tmp_path, monkeypatch, capsys):
    """The tune stage's folders are named after their settings (``sl/tau=0.05``): Hydra's override
    grammar must read them back as the same path, when starting and when resuming."""
    import subprocess

    from hydra.core.override_parser.overrides_parser import OverridesParser

    cmds = []
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, check, **kw: cmds.append(cmd) or subprocess.CompletedProcess(cmd, 2))
    parse = OverridesParser.create().parse_override
    folder = tmp_path / "tune" / "sl" / "tau=0.05, x[1]"
    finish_run(folder, ["loss=sl", "loss.tau=0.05"])
    assert parse(cmds[-1][-2]).value() == str(folder)
    assert f"{folder}: the run exited with status 2 before writing results.json" in capsys.readouterr().out
    RunResult(status="running", config={}, overrides=["loss=sl", "loss.tau=0.05"]).write(folder)
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert finish_run(folder, ["loss=sl", "loss.tau=0.05"]) == "resumed"
    assert parse(cmds[-1][-1]).value() == str(folder)
    assert parse(resume_in_place(["bench", cmds[-1][-1]])[-2]).value() == str(folder)
    assert override_value("/runs/plain-name_1.5") == "/runs/plain-name_1.5"
