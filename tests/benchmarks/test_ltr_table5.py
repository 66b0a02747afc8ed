"""The learning-to-rank benchmark: an equal tuning budget, the choice by validation only, and the report's
numbers on fabricated finished runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.app import compose
from bench.records import COMPLETED, RunResult
from bench.records.io import write_per_user


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("ltr_table5")


def test_every_loss_gets_six_settings_and_each_composes(script, tmp_path):
    runs = tmp_path / "mq2008"
    for i, setting in enumerate(script.grid_settings("sl", runs)):  # SL's tuning, tau = 2.0 best
        _run(runs / f"tune/sl/part0/{i}", "sl", setting, 1, 0, val=0.7 if setting == ["loss.tau=2.0"] else 0.6,
             test=0.0)
    for loss in script.GRIDS:
        settings = script.grid_settings(loss, runs)
        assert len(settings) == (12 if loss == "slk" else 6), loss
        cfg = compose(["+experiment=ltr/mq2008", f"loss={loss}", *script.FIXED.get(loss, []), *settings[-1],
                       "output_dir=x"])
        assert cfg.loss.name == loss and cfg.train.monitor == "ndcg@5"
    # SL@K, the paper's protocol (tau_d is SL's chosen tau, six trials over tau_w), then a tau_d x tau_w grid
    paper, grid = script.grid_settings("slk", runs)[:6], script.grid_settings("slk", runs)[6:]
    assert all(s[0] == "loss.tau_d=2.0" for s in paper)
    assert sorted(s[1] for s in paper) == [f"loss.tau_w={w}" for w in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)]
    assert len({tuple(s) for s in grid}) == 6 and {s[0] for s in grid} == {"loss.tau_d=0.2", "loss.tau_d=0.5",
                                                                            "loss.tau_d=1.0"}


def test_slk_waits_for_sl_and_counts_only_its_current_grid(script, tmp_path):
    runs = tmp_path / "mq2008"
    _run(runs / "tune/sl/part0/0", "sl", ["loss.tau=0.1"], 1, 0, val=0.60, test=0.0)
    with pytest.raises(SystemExit, match="finish sl's tuning first"):
        script.grid_settings("slk", runs)
    for i, tau in enumerate((0.2, 0.5, 1.0, 2.0, 5.0)):
        _run(runs / f"tune/sl/part{i + 1}/0", "sl", [f"loss.tau={tau}"], 1, 0, val=0.65 if tau == 0.5 else 0.6,
             test=0.0)
    # a run outside both grids (tau_w 10) scores best but is not one of the trials
    _run(runs / "tune/slk/old/0", "slk", ["loss.tau_d=0.2", "loss.tau_w=10"], 1, 0, val=0.9, test=0.0)
    _run(runs / "tune/slk/part1/0", "slk", ["loss.tau_d=0.5", "loss.tau_w=1.5"], 1, 0, val=0.61, test=0.0)
    _run(runs / "tune/slk/part2/0", "slk", ["loss.tau_d=0.5", "loss.tau_w=3.0"], 1, 0, val=0.63, test=0.0)
    _run(runs / "tune/slk/part3/0", "slk", ["loss.tau_d=1.0", "loss.tau_w=2.5"], 1, 0, val=0.62, test=0.0)
    setting, table = script.chosen("slk", runs)
    assert setting == ["loss.tau_d=0.5", "loss.tau_w=3.0"] and len(table) == 3


def _run(folder: Path, loss: str, setting: list[str], fold: int, seed: int, val: float, test: float,
         per_query: list[float] | None = None) -> None:
    res = RunResult(status=COMPLETED, config={"loss": {"name": loss}, "dataset": {"fold": fold}, "seed": seed,
                                              "train": {"monitor": "ndcg@5"}},
                    overrides=[f"loss={loss}", *setting, f"dataset.fold={fold}", f"seed={seed}"],
                    best={"epoch": 3, "val": {"ndcg@5": val}}, test={"ndcg@5": test})
    folder.mkdir(parents=True)
    res.write(folder)
    values = per_query if per_query is not None else [test] * 4
    write_per_user(folder / "per_user_test.npz", np.arange(len(values)), {"ndcg@5": np.array(values)})


def test_the_choice_reads_validation_only_and_the_report_pairs_folds_and_seeds(script, tmp_path):
    runs = tmp_path / "mq2008"
    # tuning: the second SL setting wins on validation although its (unread) test value is the worst
    _run(runs / "tune/sl/part0/0", "sl", ["loss.tau=0.1"], 1, 0, val=0.60, test=0.70)
    _run(runs / "tune/sl/part0/1", "sl", ["loss.tau=0.2"], 1, 0, val=0.65, test=0.50)
    assert script.chosen("sl", runs)[0] == ["loss.tau=0.2"]
    sl = {(1, 0): 0.50, (1, 1): 0.52, (2, 0): 0.48}
    slk = {(1, 0): 0.55, (1, 1): 0.56, (2, 0): 0.50}
    queries = {"sl": [0.2, 0.4, 0.6, 0.8], "slk": [0.3, 0.5, 0.9, 0.8]}
    for loss, values in (("sl", sl), ("slk", slk)):
        for (fold, seed), v in values.items():
            _run(runs / f"final/{loss}/{fold}-{seed}", loss, [], fold, seed, 0.6, v, queries[loss])
    for tau in (0.5, 1.0, 2.0, 5.0):  # the rest of SL's grid, so that SL@K's tau_d is known
        _run(runs / f"tune/sl/part{tau}/0", "sl", [f"loss.tau={tau}"], 1, 0, val=0.55, test=0.9)
    _run(runs / "tune/slk/part0/0", "slk", ["loss.tau_d=0.2", "loss.tau_w=2.5"], 1, 0, val=0.62, test=0.6)
    text = script.report(["sl", "slk"], runs, tmp_path / "out")
    table = {r.split("|")[1].strip(): r for r in text.splitlines()[2:]}
    x, y = np.array([slk[p] for p in sorted(slk)]), np.array([sl[p] for p in sorted(sl)])
    mean = x.mean()
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / math.sqrt(3)
    assert f"{mean:.4f} ± {half:.4f}" in table["SL@5"]
    assert f"{x.mean() / y.mean() - 1:+.1%}" in table["SL@5"]
    assert f"{stats.ttest_rel(x, y).pvalue:.2g}" in table["SL@5"]
    # queries: each query's value averaged over seeds, folds kept apart (fold 1 and 2 hold the same ids here)
    diff = np.array(queries["slk"] * 2) - np.array(queries["sl"] * 2)
    p = stats.wilcoxon(diff[diff != 0]).pvalue
    assert f"{p:.2g}" in table["SL@5"]  # one comparison: Holm leaves it as is
    assert (tmp_path / "out" / "summary.csv").is_file() and (tmp_path / "out" / "tuning.csv").is_file()


def test_final_runs_outlive_their_folders_in_the_ledger_and_the_choice_in_tuning_csv(script, tmp_path):
    # a later session has neither the tuning nor the final run folders: the choice comes from the
    # committed tuning.csv, the runs from the ledgers (one per loss and fold); only the per-query test,
    # which needs per-query files, is gone
    import shutil

    runs, out, ledger = tmp_path / "mq2008", tmp_path / "out", tmp_path / "ledger"
    for i, tau in enumerate((0.1, 0.2, 0.5, 1.0, 2.0, 5.0)):
        _run(runs / f"tune/sl/part0/{i}", "sl", [f"loss.tau={tau}"], 1, 0, val=0.65 if tau == 0.5 else 0.6, test=0.0)
    _run(runs / "tune/slk/part1/0", "slk", ["loss.tau_d=0.2", "loss.tau_w=2.5"], 1, 0, val=0.62, test=0.0)
    sl = {(1, 0): 0.50, (1, 1): 0.52, (2, 0): 0.48, (2, 1): 0.47}
    slk = {(1, 0): 0.55, (1, 1): 0.56, (2, 0): 0.50, (2, 1): 0.52}
    for loss, values in (("sl", sl), ("slk", slk)):
        for (fold, seed), v in values.items():
            _run(runs / f"final/{loss}/fold{fold}-seed{seed}", loss, [], fold, seed, 0.6, v, [v, v / 2, 0.1, 0.9])
    first = script.report(["sl", "slk"], runs, out, ledger=ledger)
    assert sorted(p.name for p in (ledger / "mq2008").iterdir()) == [
        "final_sl_fold1.csv", "final_sl_fold2.csv", "final_slk_fold1.csv", "final_slk_fold2.csv"]
    shutil.rmtree(runs)
    assert script.chosen("sl", runs, out / "tuning.csv")[0] == ["loss.tau=0.5"]
    assert script.grid_settings("slk", runs, out / "tuning.csv")[0][0] == "loss.tau_d=0.5"  # SL's tau, inherited
    again = script.report(["sl", "slk"], runs, out, ledger=ledger)
    row = lambda text: {r.split("|")[1].strip(): r.split("|") for r in text.splitlines()[2:]}["SL@5"]
    before, after = row(first), row(again)
    assert before[2:6] == after[2:6]  # mean ± CI, runs, change, p over (fold, seed) pairs
    x, y = np.array([slk[p] for p in sorted(slk)]), np.array([sl[p] for p in sorted(sl)])
    assert f"{stats.ttest_rel(x, y).pvalue:.2g}" in after[5] and f"{x.mean():.4f}" in after[2]
    assert before[6].strip() and not after[6].strip()  # the per-query test needs the run folders
    with pytest.raises(SystemExit, match="run the tune stage"):
        script.chosen("listnet", runs, out / "tuning.csv")


def test_choose_records_each_loss_and_keeps_the_others_rows(script, tmp_path):
    # losses tuned in different sessions: each choose call adds its losses to tuning.csv without dropping
    # the earlier ones, and the record alone gives the same choices once the tuning folders are gone
    import shutil

    runs, out = tmp_path / "ohsumed", tmp_path / "out"
    for i, tau in enumerate((0.1, 0.2, 0.5, 1.0, 2.0, 5.0)):
        _run(runs / f"tune/sl/part0/{i}", "sl", [f"loss.tau={tau}"], 1, 0, val=0.7 if tau == 1.0 else 0.6, test=0.9)
    assert script.choose(["sl"], runs, out)["sl"][0] == ["loss.tau=1.0"]
    _run(runs / "tune/listnet/part1/0", "listnet", ["loss.tau=0.5"], 1, 0, val=0.5, test=0.0)
    _run(runs / "tune/listnet/part2/0", "listnet", ["loss.tau=2.0"], 1, 0, val=0.55, test=0.0)
    script.choose(["listnet"], runs, out)
    record = out / "tuning.csv"
    held = record.read_text().splitlines()
    assert len(held) == 1 + 6 + 2 and sum(line.startswith("sl,") for line in held) == 6
    shutil.rmtree(runs)
    assert script.chosen("sl", runs, record)[0] == ["loss.tau=1.0"]
    assert script.chosen("listnet", runs, record)[0] == ["loss.tau=2.0"]
