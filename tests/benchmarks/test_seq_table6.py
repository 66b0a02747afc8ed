"""Table 6's benchmark: the sweepers' grids, SL@20 after SL, the choice by validation on a seed the
report never uses, resumable runs, and the report's numbers on fabricated finished runs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench import resumable as ledger_module
from bench.app import compose, resume_in_place
from bench.records import COMPLETED, RunResult
from bench.records.io import write_per_user
from bench.records.ledger import ledger_row, read_ledger, update_ledger
from bench.resumable import finish_recorded, finish_run, override_value


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("seq_table6")


def _run(folder: Path | None, ledger: Path, overrides: list[str], val: float, test: dict[str, float],
         per_user: list[float] | None = None, sampled: dict[str, float] | None = None,
         one_setting: bool = True) -> RunResult:
    """A finished run as its ledger row, and as a run folder too unless ``folder`` is None (gone)."""
    seed = int(overrides[-2].split("=")[1]) if overrides[-1] == "logger=csv" else 0
    loss = next(o.split("=")[1] for o in overrides if o.startswith("loss="))
    res = RunResult(status=COMPLETED,
                    config={"task": {"name": "seq"}, "dataset": {"name": "games"}, "model": {"name": "sasrec"},
                            "loss": {"name": loss}, "seed": seed},
                    overrides=overrides, best={"epoch": 9, "val": {"ndcg@20": val}}, test=test,
                    sampled=sampled or {}, finished_at=f"2026-12-01T00:00:0{seed % 10}")
    update_ledger(ledger, [ledger_row(res)], one_setting)
    if folder is not None:
        folder.mkdir(parents=True)
        res.write(folder)
        values = np.array(per_user if per_user is not None else [test["ndcg@20"]] * 4)
        write_per_user(folder / "per_user_test.npz", np.arange(len(values)),
                       {"ndcg@20": values, "hit@20": (values > 0).astype(float)})
    return res


def _tune_sl(script, runs: Path, ledger: Path, best_tau: str) -> None:
    for setting in script.settings(ledger, "games", "sl"):
        val = 0.3 if setting == [f"loss.tau={best_tau}"] else 0.2
        _run(script.tuned_folder(runs, "games", "sl", setting), script.tune_ledger(ledger, "games", "sl"),
             script.tune_overrides("games", "sl", setting), val,
             {"hit@20": 0.0, "ndcg@20": 1.0}, one_setting=False)  # test values that would win if they were read


def test_the_grids_are_the_sweepers_and_compose(script, tmp_path):
    assert script.grid("sl") == ("loss.tau", ["0.02", "0.05", "0.1", "0.2", "0.5", "1.0"])
    assert script.grid("slk") == ("loss.tau_w", ["0.5", "1.0", "1.5", "2.0", "2.5", "3.0"])
    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    with pytest.raises(SystemExit, match="tuning not finished"):  # SL@20 waits for SL's tau
        script.settings(ledger, "games", "slk")
    _tune_sl(script, runs, ledger, "0.5")
    slk = script.settings(ledger, "games", "slk")
    assert [s[0] for s in slk] == ["loss.tau_d=0.5"] * 6 and len({s[1] for s in slk}) == 6
    cfg = compose([*script.experiment("games", "slk"), *slk[0], f"seed={script.TUNE_SEED}", "output_dir=x"])
    assert cfg.loss.tau_d == 0.5 and cfg.loss.tau_w == 0.5 and cfg.loss.k == 20 and cfg.model.max_len == 50
    assert script.TUNE_SEED not in (0, 1, 2)


def test_the_choice_is_by_validation_and_tune_runs_only_what_the_ledger_lacks(script, tmp_path, monkeypatch):
    import shutil

    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    _tune_sl(script, runs, ledger, "1.0")
    shutil.rmtree(runs)  # another machine: the tuning folders are gone, the committed ledger is not
    assert script.chosen(ledger, "games", "sl")[0] == ["loss.tau=1.0"]
    calls = []
    monkeypatch.setattr(ledger_module, "finish_run",
                        lambda folder, overrides, log=None: calls.append((folder, overrides)))
    script.run_stages(runs, ledger, ["games"], [0, 1, 2], ["tune"])
    # SL's six runs are in the ledger and are not run again; SL@20's six start with SL's tau
    assert all("loss=slk" in o for _, o in calls) and len(calls) == 6
    assert all("loss.tau_d=1.0" in o and f"seed={script.TUNE_SEED}" in o for _, o in calls)


def test_a_run_is_recorded_once_it_completes(script, tmp_path, monkeypatch):
    ledger = tmp_path / "ledger" / "final_sl.csv"
    overrides = [*script.experiment("games", "sl"), "loss.tau=0.2", "seed=1", "logger=csv"]

    def fake_finish(folder, overrides_, log=None):  # what python -m bench leaves behind
        RunResult(status=COMPLETED, config={"seed": 1}, overrides=overrides_, test={"ndcg@20": 0.1},
                  best={"val": {"ndcg@20": 0.2}}).write(folder)
        return "started"

    monkeypatch.setattr(ledger_module, "finish_run", fake_finish)
    assert finish_recorded(tmp_path / "run", overrides, ledger) == "started"
    assert finish_recorded(tmp_path / "elsewhere", overrides, ledger) == "ledger"
    (row,) = read_ledger(ledger)
    assert row["seed"] == 1 and row["val/ndcg@20"] == 0.2 and row["test/ndcg@20"] == 0.1


def test_all_runs_side_by_side_each_run_once_its_inputs_are_chosen(script, tmp_path, monkeypatch, capsys):
    """``all --jobs 4``: SL's grid, then SL@20's with SL's chosen tau, each loss's finals once its
    value is chosen (BCE's at once), every finished run in its ledger; a failing run is tried once."""
    import threading

    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    calls, lock = [], threading.Lock()

    def fake_finish(folder, overrides, log=None):
        assert log == folder.with_name(folder.name + ".log")
        settled = {o.split("=")[0]: o.split("=")[1] for o in overrides}
        with lock:
            calls.append((settled["loss"], settled["seed"], settled.get("loss.tau_d") or settled.get("loss.tau"),
                          {k: read_ledger(script.tune_ledger(ledger, "games", k)) for k in ("sl", "slk")}))
        if settled["loss"] == "bce" and settled["seed"] == "2":
            return "started"  # dies before writing results.json
        val = {"loss.tau=0.1": 0.3, "loss.tau_w=2.0": 0.4}.get(next((o for o in overrides if "tau=" in o
                                                                        or "tau_w=" in o), ""), 0.2)
        RunResult(status=COMPLETED, config={"seed": int(settled["seed"])}, overrides=overrides,
                  test={"ndcg@20": 0.1, "hit@20": 0.2}, best={"val": {"ndcg@20": val}}).write(folder)
        return "started"

    monkeypatch.setattr(ledger_module, "finish_run", fake_finish)
    script.run_stages(runs, ledger, ["games"], [0, 1, 2], ("tune", "final"), jobs=4)
    assert len(calls) == 6 + 6 + 9  # every run once, the failing one too
    for loss, seed, tau, tuned in calls:
        if loss == "slk" or (loss == "sl" and seed != "100"):  # SL@20's tuning and SL's finals wait for SL's grid
            assert len(tuned["sl"]) == 6 and tau == "0.1"
        if loss == "slk" and seed != "100":  # SL@20's finals take its chosen tau_w
            assert len(tuned["slk"]) == 6
    finals = {loss: read_ledger(script.final_ledger(ledger, "games", loss)) for loss in ("bce", "sl", "slk")}
    assert [len(finals[k]) for k in ("bce", "sl", "slk")] == [2, 3, 3]
    assert {r["setting"] for r in finals["slk"]} == {
        "experiment=seq/table6_games loss.tau_d=0.1 loss.tau_w=2.0 loss=slk"}
    script.run_stages(runs, ledger, ["games"], [0, 1, 2], ("tune", "final"), jobs=4)
    assert len(calls) == 22 and calls[-1][:2] == ("bce", "2")  # the next call tries the failed run again


def test_runs_are_offered_one_data_set_at_a_time(script, tmp_path):
    """The first data set's study (its tuning, then its finals seed by seed) before any run of the next."""
    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    _tune_sl(script, runs, ledger, "0.1")
    jobs = script.runnable(runs, ledger, ["games", "beauty"], [0, 1], ("tune", "final"))
    where = [(j.folder.relative_to(runs).parts[0], j.folder.relative_to(runs).parts[1]) for j in jobs]
    # games: SL@20's six tuning runs, then BCE's and SL's finals (SL@20's wait for its tau_w); beauty: SL's
    # tuning, then BCE's finals (nothing to tune)
    assert where == ([("games", "tune")] * 6 + [("games", "final")] * 4 + [("beauty", "tune")] * 6
                     + [("beauty", "final")] * 2)
    assert [j.overrides[1] for j in jobs[6:10]] == ["loss=sl", "loss=bce"] * 2  # the longer run first
    assert [j.overrides[-2] for j in jobs[6:10]] == ["seed=0", "seed=0", "seed=1", "seed=1"]


def test_finish_run_can_send_a_runs_output_to_a_log(tmp_path, capsys):
    log = tmp_path / "sl.log"
    finish_run(tmp_path / "sl", ["loss=nosuchloss"], log=log)
    assert "nosuchloss" in log.read_text()  # the run's own one-line error
    assert f"its error is in {log}" in capsys.readouterr().out


def test_finish_run_keeps_resumes_or_starts(tmp_path, monkeypatch):
    import subprocess

    cmds = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: cmds.append(cmd) or subprocess.CompletedProcess(cmd, 0))
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
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: cmds.append(cmd) or subprocess.CompletedProcess(cmd, 2))
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


def test_the_report_compares_with_sl_per_seed_and_per_user(script, tmp_path):
    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    _tune_sl(script, runs, ledger, "0.2")
    sl = {0: 0.100, 1: 0.104, 2: 0.098}
    slk = {0: 0.106, 1: 0.107, 2: 0.101}
    users = {"sl": [0.1, 0.3, 0.0, 0.2], "slk": [0.2, 0.3, 0.1, 0.4]}
    for loss, values in (("sl", sl), ("slk", slk)):
        setting = ["loss.tau=0.2"] if loss == "sl" else ["loss.tau_d=0.2", "loss.tau_w=1.0"]
        for seed, v in values.items():
            _run(script.final_folder(runs, "games", loss, seed), script.final_ledger(ledger, "games", loss),
                 [*script.experiment("games", loss), *setting, f"seed={seed}", "logger=csv"], 0.5,
                 {"hit@20": 2 * v, "ndcg@20": v}, users[loss], sampled={"hit@10": 0.5 + v, "ndcg@10": 0.3})
    text = script.report(runs, ledger, ["games"], tmp_path / "out")
    rows = {r.split("|")[2].strip(): r for r in text.splitlines()[2:]}
    x, y = np.array([slk[s] for s in range(3)]), np.array([sl[s] for s in range(3)])
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / math.sqrt(3)
    assert f"{x.mean():.4f} ± {half:.4f}" in rows["SL@20"]
    assert f"{x.mean() / y.mean() - 1:+.1%}" in rows["SL@20"]
    assert f"{stats.ttest_rel(x, y).pvalue:.2g}" in rows["SL@20"]
    diff = np.array(users["slk"]) - np.array(users["sl"])
    p_users = f"{stats.wilcoxon(diff[diff != 0]).pvalue:.2g}"
    assert p_users in rows["SL@20"]  # one comparison: Holm keeps it
    assert f"{0.5 + x.mean():.4f} / 0.3000" in rows["SL@20"]  # the biased sampled column
    assert "0.2243 / 0.1024" in rows["SL"]  # the paper's values, from the experiment
    assert "loss.tau=0.2 |" in rows["SL"]  # SL's choice, inside its grid; SL@20's tuning is not finished
    assert rows["SL@20"].rstrip(" |").endswith("?")

    # every run folder is gone (another machine): the per-user values the ledger kept give the same test
    import shutil
    shutil.rmtree(runs)
    assert sorted(p.name for p in (ledger / "games" / "final_slk.per_user").iterdir()) == [
        "seed0.npz", "seed1.npz", "seed2.npz"]
    text = script.report(runs, ledger, ["games"], tmp_path / "out")
    rows = {r.split("|")[2].strip(): r for r in text.splitlines()[2:]}
    assert rows["SL@20"].split("|")[8].strip() == p_users

    # seed 2 of SL@20 was run again elsewhere and its row replaced, without per-user values: the seed
    # still counts, the per-user test (which needs every paired seed's users) is left out rather than
    # computed on fewer seeds or on the old run's users
    (row,) = [r for r in read_ledger(script.final_ledger(ledger, "games", "slk")) if r["seed"] == 2]
    update_ledger(script.final_ledger(ledger, "games", "slk"), [{**row, "finished_at": "2026-12-05T00:00:00"}])
    text = script.report(runs, ledger, ["games"], tmp_path / "out")
    rows = {r.split("|")[2].strip(): r for r in text.splitlines()[2:]}
    assert f"{x.mean():.4f} ± {half:.4f}" in rows["SL@20"] and f"{stats.ttest_rel(x, y).pvalue:.2g}" in rows["SL@20"]
    assert rows["SL@20"].split("|")[8].strip() == ""


def test_a_choice_at_the_edge_of_its_grid_is_flagged(script, tmp_path):
    runs, ledger = tmp_path / "runs", tmp_path / "ledger"
    _tune_sl(script, runs, ledger, "0.02")  # the smallest tau of the grid wins
    _run(None, script.final_ledger(ledger, "games", "sl"),
         [*script.experiment("games", "sl"), "loss.tau=0.02", "seed=0", "logger=csv"], 0.5,
         {"hit@20": 0.2, "ndcg@20": 0.1})
    text = script.report(runs, ledger, ["games"], tmp_path / "out")
    assert "| loss.tau=0.02 (grid edge) |" in text
