"""benchmarks/peer_recbole.py's parts that need no RecBole: the atomic files both tools read, and its refusals."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bench.app import compose
from bench.training import build_datamodule

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "peer_recbole.py"


def _script():
    spec = importlib.util.spec_from_file_location("peer_recbole", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recbole_gets_exactly_the_splits_a_bench_run_trains_validates_and_tests_on(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATA_DIR", str(shared_data))
    sizes = _script().export_atomic("health", tmp_path)
    splits = build_datamodule(compose(["dataset=health", "seed=0"]), seed=0).splits
    assert sizes == {"train": splits.train.nnz, "valid": splits.valid.nnz, "test": splits.test.nnz,
                     "users": splits.n_users, "items": splits.n_items}
    for name in ("train", "valid", "test"):
        lines = (tmp_path / "health" / f"health.{name}.inter").read_text().splitlines()
        assert lines[0] == "user_id:token\titem_id:token"
        pairs = {(int(u[1:]), int(i[1:])) for u, i in (line.split("\t") for line in lines[1:])}
        assert pairs == {tuple(p) for p in getattr(splits, name).to_pairs().tolist()}
    # no pair in two splits: the same leak-free protocol on both sides
    train = set((tmp_path / "health" / "health.train.inter").read_text().splitlines()[1:])
    test = set((tmp_path / "health" / "health.test.inter").read_text().splitlines()[1:])
    assert not train & test


@pytest.mark.slow
def test_without_recboles_environment_the_benchmark_says_how_to_make_it(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--recbole-python", str(tmp_path / "none" / "python"),
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("no RecBole environment at ")
    assert "Traceback" not in done.stderr
