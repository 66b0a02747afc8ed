"""The estimator-training benchmark's table: rows per estimator, change against `sampled`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.report.runs import RunRecord


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("estimator_training")


def _record(tmp_path: Path, estimator: str | None, seed: int, ndcg: float, fit_s: float, rank: float) -> RunRecord:
    run = tmp_path / f"{estimator}-{seed}"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"timing_s": {"fit": fit_s}}))
    overrides = ["+experiment=paper/table2_mf_health", "loss=slk", f"seed={seed}"]
    if estimator:
        overrides.append(f"loss.estimator={estimator}")
    history = [{"epoch": 4, "diag/beta_effective_rank_median": 99.0},
               {"epoch": 9, "diag/beta_overestimate_rate": 0.25, "diag/beta_effective_rank_median": rank,
                "diag/beta_gap_over_tau_w": 0.01}]
    return RunRecord(source=str(run), task="cf", dataset="health", model="mf", loss="slk", seed=seed,
                     test={"ndcg@20": ndcg, "recall@20": ndcg + 0.05}, history=history, overrides=overrides)


def test_table_compares_each_estimator_with_sampled(script, tmp_path):
    # the sampled runs carry no estimator override (the loss default), as a plain paper sweep
    base = [0.10, 0.12, 0.11]
    records = [_record(tmp_path, None, s, v, 60.0, 28) for s, v in enumerate(base)]
    records += [_record(tmp_path, "cached", s, v * 1.1 + 0.001 * s, 120.0, 20) for s, v in enumerate(base)]
    lines = script.table(records).splitlines()
    assert len(lines) == 4
    sampled, cached = lines[2].split(" | "), lines[3].split(" | ")
    assert sampled[0] == "| estimator=sampled" and cached[0] == "| estimator=cached"
    rel = (np.mean(base) * 1.1 + 0.001 - np.mean(base)) / np.mean(base)
    assert cached[4] == f"{rel:+.1%}"
    assert float(cached[5]) < 0.05  # the same shift on every seed: significant over seeds
    # last validation's diagnostics (not the first's) and fit time in minutes
    assert cached[7:11] == ["0.250", "20", "+0.0100", "2.0 |"]
    assert sampled[8] == "28" and sampled[10] == "1.0 |"


def test_sampled_with_and_without_its_override_is_one_row_newest_seed_wins(script, tmp_path):
    old = [_record(tmp_path, None, s, 0.10, 60.0, 28) for s in range(3)]
    new = _record(tmp_path, "sampled", 0, 0.13, 60.0, 28)
    new.finished = 1.0
    lines = script.table(old + [new]).splitlines()
    assert len(lines) == 3
    row = lines[2].split(" | ")
    assert row[:2] == ["| estimator=sampled", "3"] and row[3].startswith(f"{(0.13 + 0.10 + 0.10) / 3:.4f}")
