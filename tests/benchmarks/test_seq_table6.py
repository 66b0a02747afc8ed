"""Table 6's benchmark: the sweepers' grids, SL@20 after SL, the choice by validation on a seed the
report never uses, resumable runs, and the report's numbers on fabricated finished runs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.app import compose
from bench.results import COMPLETED, RunResult, finish_run
from bench.results.io import write_per_user


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("seq_table6")


def _run(folder: Path, dataset: str, loss: str, setting: list[str], seed: int, val: float, test: dict[str, float],
         per_user: list[float] | None = None, sampled: dict[str, float] | None = None) -> None:
    res = RunResult(status=COMPLETED,
                    config={"task": {"name": "seq"}, "dataset": {"name": dataset}, "model": {"name": "sasrec"},
                            "loss": {"name": loss}, "seed": seed, "paper": {"hit@20": 0.2, "ndcg@20": 0.1}},
                    overrides=[f"loss={loss}", *setting, f"seed={seed}"],
                    best={"epoch": 9, "val": {"ndcg@20": val}}, test=test, sampled=sampled or {})
    folder.mkdir(parents=True)
    res.write(folder)
    values = per_user if per_user is not None else [test["ndcg@20"]] * 4
    write_per_user(folder / "per_user_test.npz", np.arange(len(values)), {"ndcg@20": np.array(values)})


def _tune_sl(script, runs: Path, best_tau: str) -> None:
    for setting in script.settings(runs, "games", "sl"):
        val = 0.3 if setting == [f"loss.tau={best_tau}"] else 0.2
        _run(script.tuned_folder(runs, "games", "sl", setting), "games", "sl", setting, script.TUNE_SEED, val,
             {"hit@20": 0.0, "ndcg@20": 1.0})  # test values that would win if they were read


def test_the_grids_are_the_sweepers_and_compose(script, tmp_path):
    assert script.grid("sl") == ("loss.tau", ["0.05", "0.1", "0.2", "0.5", "1.0", "2.0"])
    assert script.grid("slk") == ("loss.tau_w", ["0.5", "1.0", "1.5", "2.0", "2.5", "3.0"])
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit, match="tuning not finished"):  # SL@20 waits for SL's tau
        script.settings(runs, "games", "slk")
    _tune_sl(script, runs, "0.5")
    slk = script.settings(runs, "games", "slk")
    assert [s[0] for s in slk] == ["loss.tau_d=0.5"] * 6 and len({s[1] for s in slk}) == 6
    cfg = compose([*script.experiment("games", "slk"), *slk[0], f"seed={script.TUNE_SEED}", "output_dir=x"])
    assert cfg.loss.tau_d == 0.5 and cfg.loss.tau_w == 0.5 and cfg.loss.k == 20 and cfg.model.max_len == 50
    assert script.TUNE_SEED not in (0, 1, 2)


def test_the_choice_is_by_validation_and_tune_runs_only_what_is_missing(script, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _tune_sl(script, runs, "1.0")
    assert script.chosen(runs, "games", "sl")[0] == ["loss.tau=1.0"]
    calls = []
    monkeypatch.setattr(script, "finish_run", lambda folder, overrides: calls.append((folder, overrides)))
    script.tune(runs, ["games"])
    # SL's six runs are complete and are still handed to finish_run (it keeps them); SL@20's six start
    slk = [c for c in calls if "loss=slk" in c[1]]
    assert len(slk) == 6 and all("loss.tau_d=1.0" in o and f"seed={script.TUNE_SEED}" in o for _, o in slk)


def test_finish_run_keeps_resumes_or_starts(tmp_path, monkeypatch):
    import subprocess

    cmds = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: cmds.append(cmd))
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


def test_the_report_compares_with_sl_per_seed_and_per_user(script, tmp_path):
    runs = tmp_path / "runs"
    _tune_sl(script, runs, "0.2")
    sl = {0: 0.100, 1: 0.104, 2: 0.098}
    slk = {0: 0.106, 1: 0.107, 2: 0.101}
    users = {"sl": [0.1, 0.3, 0.0, 0.2], "slk": [0.2, 0.3, 0.1, 0.4]}
    for loss, values in (("sl", sl), ("slk", slk)):
        for seed, v in values.items():
            _run(runs / "games" / "final" / loss / f"seed{seed}", "games", loss, [], seed, 0.5,
                 {"hit@20": 2 * v, "ndcg@20": v}, users[loss], sampled={"hit@10": 0.5 + v, "ndcg@10": 0.3})
    text = script.report(runs, ["games"], tmp_path / "out")
    rows = {r.split("|")[2].strip(): r for r in text.splitlines()[2:]}
    x, y = np.array([slk[s] for s in range(3)]), np.array([sl[s] for s in range(3)])
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / math.sqrt(3)
    assert f"{x.mean():.4f} ± {half:.4f}" in rows["SL@20"]
    assert f"{x.mean() / y.mean() - 1:+.1%}" in rows["SL@20"]
    assert f"{stats.ttest_rel(x, y).pvalue:.2g}" in rows["SL@20"]
    diff = np.array(users["slk"]) - np.array(users["sl"])
    assert f"{stats.wilcoxon(diff[diff != 0]).pvalue:.2g}" in rows["SL@20"]  # one comparison: Holm keeps it
    assert f"{0.5 + x.mean():.4f} / 0.3000" in rows["SL@20"]  # the biased sampled column
    assert "0.2000 / 0.1000" in rows["SL"]  # the paper's values
    assert "loss.tau=0.2" in rows["SL"]  # SL's choice; SL@20's tuning is not finished
    assert rows["SL@20"].rstrip(" |").endswith("?")
