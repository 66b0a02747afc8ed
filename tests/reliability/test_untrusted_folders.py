"""Nothing from a run folder executes (issue 13, defect 3): a crafted config or checkpoint in a
folder given to ``resume=``, ``python -m bench.thresholds`` or ``python -m bench.report`` is
refused with a one-line error, and its payload never runs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bench.run import train_and_test

pytestmark = pytest.mark.slow


class _Payload:
    """Unpickling this calls os.system: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def run(tmp_path, tiny, make_cfg, crash_at):
    """A completed run (for the study and the report) and a killed one (for resume), both with
    their overrides recorded."""
    overrides = [*tiny, "loss=slk", "loss.t_beta=1", "logger=none"]
    train_and_test(make_cfg(overrides, tmp_path / "done"), overrides=overrides)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_and_test(make_cfg(overrides, tmp_path / "killed"), overrides=overrides, extra_callbacks=[crash_at(2)])
    return tmp_path / "done", tmp_path / "killed"


def _plant_config(folder, marker):
    res = json.loads((folder / "results.json").read_text())
    res["config"]["dataset"] = {"_target_": "os.system", "command": f"touch {marker}", "name": "synthetic"}
    (folder / "results.json").write_text(json.dumps(res))
    (folder / "run_config.yaml").write_text(f"dataset:\n  _target_: os.system\n  command: touch {marker}\n")


def _plant_checkpoint(path, marker):
    torch.save({"state_dict": _Payload(marker)}, path)


def test_a_crafted_config_is_never_instantiated(run, tmp_path, run_cli):
    done, killed = run
    marker = tmp_path / "pwned"
    for folder in (done, killed):
        _plant_config(folder, marker)
    proc = run_cli([f"resume={killed}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "this code rebuilds the run with other values (dataset." in proc.stderr
    proc = run_cli([str(done), "--ks", "5"], tmp_path, module="bench.thresholds")
    assert proc.returncode == 2 and "rebuilds the run with other values" in proc.stderr
    assert not marker.exists()


def test_a_crafted_checkpoint_is_refused_before_it_runs(run, tmp_path, run_cli):
    done, killed = run
    marker = tmp_path / "pwned"
    _plant_checkpoint(killed / "checkpoints" / "last.ckpt", marker)
    proc = run_cli([f"resume={killed}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "last.ckpt is not a plain checkpoint" in proc.stderr
    _plant_checkpoint(done / "checkpoints" / "last.ckpt", marker)
    proc = run_cli([str(done), "--checkpoint", "last", "--ks", "5"], tmp_path, module="bench.thresholds")
    assert proc.returncode == 2 and "last.ckpt is not a plain checkpoint" in proc.stderr
    assert not marker.exists()


def test_the_report_reads_no_pickled_objects(run, tmp_path, run_cli):
    done, _ = run
    np.savez(done / "per_user_test.npz", users=np.arange(3), **{"ndcg@20": np.array([_Payload(tmp_path / "x")] * 3)})
    proc = run_cli([str(done), str(done), "--baseline", "slk", "--no-plots"], tmp_path, module="bench.report")
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()
