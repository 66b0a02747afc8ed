"""The speed scripts' own logic: a cell's extra overrides, and the graph-step profile's table."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cell_takes_extra_overrides_after_a_colon():
    speed_epochs = _load("speed_epochs")
    plain = speed_epochs.overrides_of("table2-mf/gowalla/slk-g16f")
    assert "loss=slk" in plain and "train.shared_groups=16" in plain
    extra = speed_epochs.overrides_of("table2-mf/gowalla/slk-g16f:loss.t_beta=1,eval.ks=[10,20],+x.y=2")
    assert extra == [*plain, "loss.t_beta=1", "eval.ks=[10,20]", "+x.y=2"]  # after the row's own, so they win
    with pytest.raises(SystemExit, match=r"nope:loss.t_beta=1: table2-mf has no row nope"):
        speed_epochs.overrides_of("table2-mf/gowalla/nope:loss.t_beta=1")


@pytest.mark.slow
def test_the_graph_step_profile_splits_a_step_into_its_parts(shared_data):
    env = {**os.environ, "BENCH_DATA_DIR": str(shared_data)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_graph_step.py"), "--dataset", "health",
                           "--batches", "2", "--rounds", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = dict(re.findall(r"^\| \**([a-z ]+?)\** \| \**([\d.]+)\** \| \**[\d.]+\** \|$", done.stdout, re.M))
    parts = ("propagation", "sampling", "loss", "backward", "optimizer", "after step")
    assert set(parts) | {"step"} == set(rows)
    assert float(rows["step"]) == pytest.approx(sum(float(rows[p]) for p in parts), abs=0.35)  # rounded to 0.1
    assert re.search(r"bare limit: [\d.]+ ms / step \(2 products forward and 2 backward", done.stdout)
    # restricting the last layer to the step's rows keeps the full products' digits on those rows
    assert re.search(r"restricted floor: [\d.]+ ms / step of products against 4 full, .* with its structure free "
                     r"[\d.]+ ms; the same gradient, bit for bit: yes\)", done.stdout)
    assert re.search(r"now: an epoch ≈ \d+ s of steps; 200 epochs with 40 validations ≈ [\d.]+ h", done.stdout)
