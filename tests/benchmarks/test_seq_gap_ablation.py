"""The ML-100K sequential gap ablation: runs go into per-cell ledgers with points of their
validation curve, and the report (read from the ledgers alone) compares each cell with SL."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench import resumable as ledger_module
from bench.records import COMPLETED, RunResult


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("seq_gap_ablation")


def _result(seed: int, epochs: int, ndcg: float, curve: list[float]) -> RunResult:
    """A finished run whose validation (every 5 epochs from epoch 4) reads ``curve[i]`` at epoch 5i + 4."""
    history = [{"epoch": 5 * i + 4, "val/ndcg@20": v} for i, v in enumerate(curve)]
    return RunResult(status=COMPLETED, config={"trainer": {"max_epochs": epochs}, "seed": seed},
                     overrides=[], best={"epoch": 5 * int(np.argmax(curve)) + 4, "val": {"ndcg@20": max(curve)}},
                     test={"hit@20": 2 * ndcg, "ndcg@20": ndcg}, history=history, epochs_trained=epochs)


def test_runs_are_recorded_with_their_curve_and_the_report_reads_only_the_ledgers(script, tmp_path, monkeypatch):
    ledger, runs = tmp_path / "ledger", tmp_path / "runs"
    made = {}
    sl = {0: 0.110, 1: 0.120, 2: 0.115}
    slk = {0: 0.080, 1: 0.090, 2: 0.070}

    def fake_finish(folder, overrides, log=None, env=None):  # stands in for the training subprocess
        cell, seed = folder.parent.name, int(folder.name.removeprefix("seed"))
        epochs = int(next(o.split("=")[1] for o in overrides if o.startswith("trainer.max_epochs=")))
        ndcg = (sl if cell.startswith("sl-") or cell == "sl" else slk)[seed] + (0.01 if "long" in cell else 0)
        curve = [0.01 * (i + 1) for i in range(epochs // 5)]  # still rising: the last is the best
        res = _result(seed, epochs, ndcg, curve)
        res.overrides = list(overrides)
        res.write(folder)
        made[(cell, seed)] = overrides
        return "started"

    monkeypatch.setattr(ledger_module, "finish_run", fake_finish)
    script.run(["sl", "slk", "slk-long", "sl-long"], [0, 1, 2], 100, runs, ledger)
    assert made[("slk-long", 0)][-2:] == ["trainer.max_epochs=300", "seed=0"]
    made.clear()
    script.run(["sl", "slk"], [0, 1, 2], 100, runs, ledger)  # the ledgers hold them: nothing reruns
    assert made == {}
    (row,) = [r for r in ledger_module.read_ledger(ledger / "slk.csv") if r["seed"] == 1]
    # validation at epochs 49 and 99 (the 10th and 20th), none at 300 for a 100-epoch run
    assert row["curve/val_ndcg@20_e50"] == pytest.approx(0.10) and row["curve/val_ndcg@20_e100"] == pytest.approx(0.20)
    assert math.isnan(row["curve/val_ndcg@20_e300"])
    long_row = ledger_module.read_ledger(ledger / "slk-long.csv")[0]
    assert long_row["curve/val_ndcg@20_e300"] == pytest.approx(0.60)

    import shutil

    shutil.rmtree(runs)  # the report needs no run folder
    text = script.report(ledger, tmp_path / "out")
    x, y = np.array([slk[s] for s in range(3)]), np.array([sl[s] for s in range(3)])
    p = stats.ttest_rel(x, y).pvalue
    assert "| slk | - | 3 | " in text
    assert f"{x.mean() / y.mean() - 1:+.1%} ({p:.2g})" in text
    # the long SL@20 cell is compared with the long SL cell, not with the 100-epoch one
    xl, yl = x + 0.01, y + 0.01
    assert f"{xl.mean() / yl.mean() - 1:+.1%} ({stats.ttest_rel(xl, yl).pvalue:.2g})" in text
    assert "| 0.1000 / 0.2000 / - |" in text and "/ 0.6000 |" in text
