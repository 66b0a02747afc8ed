"""Studies as data (bench.study): a declaration checked in one line, a plan that tunes before it
reports (inheriting SL@K's tau_d from SL's choice), lanes that record every run in its ledger and
never run it again, and a report whose numbers are the statistics of the ledgers' rows."""

from __future__ import annotations

import math
import os
import textwrap
import time

import numpy as np
import pytest
from scipy import stats

from bench.errors import ConfigError
from bench.records import RunResult
from bench.records.ledger import ledger_row, read_ledger, update_ledger
from bench.study.lanes import run_lanes
from bench.study.plan import FINAL, TUNE, NotChosen, chosen, plan
from bench.study.report import compute, fmt, pct, pval, write_report
from bench.study.spec import load_study
from bench.study.status import status

TINY = ("dataset.n_users=120 dataset.n_items=80 dataset.mean_per_user=14 trainer.max_epochs=2 "
        "trainer.check_val_every_n_epoch=1 loss.n_negatives=50 trainer.accelerator=cpu train.batch_size=256").split()


def _study(tmp_path, body):
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(body))
    return load_study(path, results=tmp_path / "results")


TUNED = """
    title: a tuned tiny study
    tables:
      synth: [dataset.n_users=120]
    rows:
      bce: [loss=bce]
      sl: [loss=sl]
      slk: [loss=slk]
    seeds: [0, 1]
    baseline: sl
    metric: ndcg@20
    metrics: [ndcg@20]
    tune:
      replicate: {seed: 100}
      metric: ndcg@20
      rows:
        sl: {grid: {loss.tau: [0.1, 0.2]}}
        slk: {grid: {loss.tau_w: [0.5, 2.5]}, inherit: {loss.tau_d: [sl, loss.tau]}}
"""


def _record(study, job, val, test=0.1, seed=None):
    res = RunResult(status="completed", overrides=[*job.overrides], config={"seed": job.seed},
                    best={"epoch": 1, "val": {"ndcg@20": val}}, test={"ndcg@20": test}, finished_at="t")
    update_ledger(job.ledger, [ledger_row(res)], one_setting=job.one_setting)


@pytest.mark.parametrize("body,message", [
    ("tables: {a: [x=1]}\nrows: {r: [y=1]}\nseeds: [0]\nmetric: m\nmetrics: [m]\nbogus: 1", "unknown key(s) bogus"),
    ("tables: {a: [x=1]}\nrows:\n  r: [y=1]\n  r: [y=2]\nseeds: [0]\nmetric: m\nmetrics: [m]",
     "key 'r' is given twice (lines 3 and 4); rename one"),
    ("tables: {a: [x=1]}\nrows: {r: [y=1]}\nseeds: [0]\nmetric: m\nmetrics: [m]\nbaseline: q",
     "baseline 'q' is no row"),
    ("tables: {a: [x]}\nrows: {r: [y=1]}\nseeds: [0]\nmetric: m\nmetrics: [m]", "tables.a must be a list of key=value"),
    ("tables: {a: [x=1]}\nrows: {r: [y=1]}\nseeds: [-1]\nmetric: m\nmetrics: [m]", "seeds must be a list of integers"),
    ("tables: {a: [x=1]}\nrows: {r: [y=1]}\nseeds: [0]\nmetric: m\nmetrics: [m]\n"
     "tune: {replicate: {seed: 9}, metric: m, rows: {r: {grid: {k: [1]}, inherit: {j: [zz, k]}}}}",
     "tune.rows.r.inherit.j must be [tuned row, its key]"),
])
def test_a_malformed_study_is_one_line_naming_the_key(tmp_path, body, message):
    (tmp_path / "bad.yaml").write_text(body)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_study(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="unknown study 'nope'; known: .*table6"):
        load_study("nope")


def test_the_plan_tunes_first_inherits_the_choice_and_never_reruns_a_recorded_run(tmp_path):
    study = _study(tmp_path, TUNED)
    runs = tmp_path / "runs"
    blocked: list[str] = []
    first = plan(study, runs, blocked=blocked)
    # SL's two trials, then BCE's reported seeds; SL@K waits for SL's choice, SL's finals for its own
    assert [(j.row, j.stage) for j in first] == [("sl", TUNE), ("sl", TUNE), ("bce", FINAL), ("bce", FINAL)]
    assert any("sl: tuning not finished (2 of 2 trials left)" in b for b in blocked)
    assert all("seed=100" in j.overrides for j in first[:2]) and "seed=0" in first[2].overrides
    with pytest.raises(NotChosen):
        chosen(study, "synth", "sl")
    for job, val in zip(first[:2], (0.30, 0.35)):  # tau 0.2 wins on validation
        _record(study, job, val, test=0.9 if val == 0.30 else 0.1)  # test values never choose
    assert chosen(study, "synth", "sl")[0] == ["loss.tau=0.2"]
    second = plan(study, runs)
    slk = [j for j in second if j.row == "slk"]
    assert [j.stage for j in slk] == [TUNE, TUNE] and all("loss.tau_d=0.2" in j.overrides for j in slk)
    assert [(j.row, j.seed) for j in second if j.stage == FINAL] == [("bce", 0), ("sl", 0), ("bce", 1), ("sl", 1)]
    assert all("loss.tau=0.2" in j.overrides for j in second if j.row == "sl" and j.stage == FINAL)
    _record(study, second[-1], 0.3)  # SL seed 1 recorded: planned no more
    assert not [j for j in plan(study, runs) if j.row == "sl" and j.seed == 1 and j.stage == FINAL]
    # the tuning record stands in for the tune ledgers when they are gone (another machine's runs)
    study.tuning_record.write_text("table,row,setting,val\nsynth,sl,loss.tau=0.1,0.5\nsynth,sl,loss.tau=0.2,0.4\n")
    study.tune_ledger("synth", "sl").unlink()
    assert chosen(study, "synth", "sl")[0] == ["loss.tau=0.1"]
    assert study.tune.rows["slk"].at_edge(["loss.tau_d=0.2", "loss.tau_w=2.5"])


def test_the_report_is_the_statistics_of_the_ledgers(tmp_path):
    study = _study(tmp_path, TUNED)
    values = {"sl": [0.30, 0.32, 0.31], "bce": [0.20, 0.25, 0.21]}
    study = study.__class__(**{**study.__dict__, "seeds": (0, 1, 2), "tune": None})
    for job in plan(study, tmp_path / "runs", (FINAL,)):
        if job.row in values:
            res = RunResult(status="completed", overrides=list(job.overrides), config={"seed": job.seed},
                            best={"epoch": 1, "val": {}}, test={"ndcg@20": values[job.row][job.seed]}, finished_at="t")
            update_ledger(job.ledger, [ledger_row(res)])
    rows = {r.row: r.values for r in compute(study)}
    sl, bce = np.array(values["sl"]), np.array(values["bce"])
    half = stats.t.ppf(0.975, 2) * bce.std(ddof=1) / math.sqrt(3)
    assert rows["bce"]["ndcg@20"] == pytest.approx(bce.mean()) and rows["bce"]["ndcg@20_ci"] == pytest.approx(half)
    assert rows["bce"]["vs_baseline"] == pytest.approx(bce.mean() / sl.mean() - 1)
    assert rows["bce"]["p_seeds"] == pytest.approx(stats.ttest_rel(bce, sl).pvalue)
    assert rows["slk"]["n"] == 0 and math.isnan(rows["slk"]["ndcg@20"])
    _, page = write_report(study, pages=tmp_path / "pages")
    text = page.read_text()
    assert f"| BCE | 3 | {fmt(bce.mean())} ± {fmt(half)} |" in text
    assert pct(bce.mean() / sl.mean() - 1) in text and pval(stats.ttest_rel(bce, sl).pvalue) in text
    assert (study.folder / "summary.csv").is_file()


def test_a_view_pairs_its_rows_with_its_own_baseline(tmp_path):
    """A second baseline beside the study's (every new loss against SL@20 where the tables compare with SL):
    the view's tests are paired t over seeds against that row, Holm-adjusted over the view's rows; rows
    show their declared labels."""
    body = TUNED.replace("    tune:", """    views:
      - {title: "Against BCE", table: synth, rows: [bce, sl, slk], metrics: [ndcg@20], baseline: bce}
    labels: {bce: BCE (one negative)}
    tune:""")
    study = _study(tmp_path, body)
    study = study.__class__(**{**study.__dict__, "seeds": (0, 1, 2), "tune": None})
    values = {"sl": [0.30, 0.32, 0.31], "bce": [0.20, 0.25, 0.21], "slk": [0.33, 0.34, 0.36]}
    for job in plan(study, tmp_path / "runs", (FINAL,)):
        res = RunResult(status="completed", overrides=list(job.overrides), config={"seed": job.seed},
                        best={"epoch": 1, "val": {}}, test={"ndcg@20": values[job.row][job.seed]}, finished_at="t")
        update_ledger(job.ledger, [ledger_row(res)])
    _, page = write_report(study, pages=tmp_path / "pages")
    text = page.read_text()
    view = text[text.index("## Against BCE"):]
    bce = np.array(values["bce"])
    raw = {row: stats.ttest_rel(np.array(values[row]), bce).pvalue for row in ("sl", "slk")}
    ranked = sorted(raw, key=raw.get)  # Holm: the smaller p times 2, the larger times 1, kept monotone
    adjusted = {ranked[0]: min(1.0, 2 * raw[ranked[0]])}
    adjusted[ranked[1]] = max(adjusted[ranked[0]], raw[ranked[1]])
    for row, label in (("sl", "SL"), ("slk", "SL@20")):
        x = np.array(values[row])
        line = next(s for s in view.splitlines() if s.startswith(f"| {label} | 3 |"))
        assert pct(x.mean() / bce.mean() - 1) in line and pval(adjusted[row]) in line
    assert adjusted[ranked[0]] != raw[ranked[0]] and f"(unadjusted {pval(raw[ranked[0]])})" in view
    assert "| ndcg@20 vs BCE (one negative) | p (paired runs, Holm over this table) |" in view
    assert "| BCE (one negative) | 3 |" in text.split("## Against BCE")[0]  # the label in the study's table too
    # a study may correct by Benjamini-Hochberg (false discovery rate) instead
    fdr = _study(tmp_path, body.replace("    views:", "    correction: bh\n    views:"))
    fdr = fdr.__class__(**{**fdr.__dict__, "seeds": (0, 1, 2), "tune": None})
    _, page = write_report(fdr, pages=tmp_path / "pages-bh")
    view = page.read_text()[page.read_text().index("## Against BCE"):]
    bh = dict(zip(raw, stats.false_discovery_control([raw["sl"], raw["slk"]], method="bh")))
    assert "p (paired runs, Benjamini-Hochberg over this table)" in view
    for row, label in (("sl", "SL"), ("slk", "SL@20")):
        line = next(s for s in view.splitlines() if s.startswith(f"| {label} | 3 |"))
        assert pval(bh[row]) in line
    with pytest.raises(ConfigError, match="correction='fdr'; use one of holm, bh, bonferroni, none"):
        _study(tmp_path, body.replace("    views:", "    correction: fdr\n    views:"))
    with pytest.raises(ConfigError, match="baseline 'bsl' is not one of its rows"):
        _study(tmp_path, body.replace("baseline: bce}", "baseline: bsl}"))
    two_tables = body.replace("      synth: [dataset.n_users=120]", """      synth: [dataset.n_users=120]
      small: {overrides: [dataset.n_users=60], rows: [sl, slk]}""").replace("table: synth", "table: small")
    with pytest.raises(ConfigError, match="rows its table lacks"):
        _study(tmp_path, two_tables)
    first = '      - {title: "Against BCE", table: synth, rows: [bce, sl, slk], metrics: [ndcg@20], baseline: bce}'
    twice = body.replace(first, first + '\n      - {title: "Against BCE", table: synth, rows: [bce, sl], '
                                        'metrics: [ndcg@20], baseline: sl}')
    with pytest.raises(ConfigError, match=r"two views share a title \(Against BCE\)"):
        _study(tmp_path, twice)


def test_a_busy_machine_is_named_before_threads_oversubscribe_it():
    from bench.parallel import oversubscription

    assert oversubscription(others=0, cores=2, lanes=1, threads=2) is None  # an idle machine
    assert oversubscription(others=3, cores=2, lanes=2, threads=1) is None  # one thread a run never spins
    assert oversubscription(others=1, cores=2, lanes=1, threads=2) == (
        "the machine is busy (1 other thread running on 2 cores): 1 run of 2 threads would oversubscribe it and "
        "run many times slower")
    assert oversubscription(others=2, cores=4, lanes=1, threads=2) is None  # room for both threads
    assert oversubscription(others=3, cores=4, lanes=1, threads=2) is not None


def test_other_processes_running_threads_are_counted_now():
    import subprocess
    import sys

    from bench.parallel import cpu_count, others_running

    if cpu_count() != os.cpu_count():
        assert others_running() is None  # the count is the machine's, this process sees only some cores
        return
    assert others_running() is not None
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        busy = others_running()
    finally:
        for proc in spin:
            proc.kill()
            proc.wait()
    assert busy is not None and busy >= 2, busy  # the two spinning processes, seen at once


def test_a_second_runner_leaves_a_run_another_process_holds_to_it(tmp_path, monkeypatch):
    import socket

    import bench.study.lanes as lanes
    from bench.records.lock import RunLock

    study = _study(tmp_path, """
        title: two runners
        tables:
          synth: [dataset.n_users=120]
        rows:
          sl: [loss=sl]
          bpr: [loss=bpr]
        seeds: [0]
        baseline: sl
        metric: ndcg@20
        metrics: [ndcg@20]
    """)
    runs = tmp_path / "runs"
    jobs = {j.row: j for j in plan(study, runs)}

    def finish(folder, overrides, ledger, one_setting, *rest):  # the run itself, as its ledger row
        _record(study, next(j for j in jobs.values() if j.folder == folder), 0.3)
        return "started"

    monkeypatch.setattr(lanes, "finish_recorded", finish)
    lines: list[str] = []
    with RunLock(jobs["sl"].folder):  # the other runner's run of SL, still going
        assert run_lanes(study, runs, lanes=1, say=lines.append) == 1
    assert [line.split(":")[0] for line in lines if line.startswith("start ")] == ["start synth bpr final seed 0"]
    assert f"running elsewhere: synth sl final seed 0 (process {os.getpid()} on {socket.gethostname()}, " in lines[-1]
    assert [r["seed"] for r in read_ledger(jobs["bpr"].ledger)] == [0] and not read_ledger(jobs["sl"].ledger)
    lines.clear()  # the other runner died without a result: its run is this one's again
    assert run_lanes(study, runs, lanes=1, say=lines.append) == 1
    assert [line.split(":")[0] for line in lines if line.startswith("start ")] == ["start synth sl final seed 0"]
    assert not any("elsewhere" in line for line in lines)


def test_number_formats():
    assert (fmt(0.16704), fmt(1.5), fmt(math.nan)) == (".1670", "1.5000", "–")
    assert (pct(0.026), pct(-0.0151)) == ("+2.6%", "−1.5%")
    assert (pval(0.087), pval(2.3e-9), pval(0.00024), pval(1.0)) == (".087", "2.3·10⁻⁹", "2.4·10⁻⁴", "1")


@pytest.mark.slow
def test_lanes_run_a_study_end_to_end_and_a_second_call_runs_nothing(tmp_path):
    study = _study(tmp_path, f"""
        title: end to end
        tables:
          synth: {TINY}
        rows:
          sl: [loss=sl]
          bpr: [loss=bpr]
        placement: [logger=none]
        seeds: [0, 1]
        baseline: sl
        metric: ndcg@20
        metrics: [ndcg@20, recall@20]
        per_user: [ndcg@20]
    """)
    lines: list[str] = []
    assert run_lanes(study, tmp_path / "runs", lanes=2, say=lines.append) == 4
    for row in ("sl", "bpr"):
        held = read_ledger(study.ledger("synth", row, {}))
        assert sorted(r["seed"] for r in held) == [0, 1]
        assert (study.ledger("synth", row, {}).with_name(f"{row}.per_user") / "seed1.npz").is_file()
    assert run_lanes(study, tmp_path / "runs", lanes=2, say=lines.append) == 0
    text = status(study, tmp_path / "runs")
    assert "4 done, 0 running, 0 left" in text
    rows = {r.row: r for r in compute(study)}
    assert rows["bpr"].values["users"] > 0  # per-user pairing from the kept files: no run folder needed
    import shutil

    shutil.rmtree(tmp_path / "runs")
    assert {r.row: r.values["p_users"] for r in compute(study)} == {k: v.values["p_users"] for k, v in rows.items()}


def test_curve_columns_are_the_validation_before_each_epoch_and_nan_beyond_the_schedule(tmp_path):
    from bench.study.lanes import extra_columns

    study = _study(tmp_path, """
        tables: {t: [x=1]}
        rows: {r: [y=1]}
        seeds: [0]
        metric: ndcg@20
        metrics: [ndcg@20]
        curve: {metric: ndcg@20, epochs: [5, 10, 30]}
    """)
    history = [{"epoch": e, "val/ndcg@20": e / 100} for e in (4, 9, 14, 19)]
    res = RunResult(config={"trainer": {"max_epochs": 20}}, history=history)
    columns = extra_columns(study)(res)
    assert columns["curve/val_ndcg@20_e5"] == 0.04 and columns["curve/val_ndcg@20_e10"] == 0.09
    assert math.isnan(columns["curve/val_ndcg@20_e30"])  # the run was set to 20 epochs


def test_a_table_may_compare_some_rows_only(tmp_path):
    study = _study(tmp_path, """
        tables:
          short: [trainer.max_epochs=1]
          long: {overrides: [trainer.max_epochs=3], rows: [sl]}
        rows: {sl: [loss=sl], slk: [loss=slk]}
        seeds: [0]
        metric: ndcg@20
        metrics: [ndcg@20]
    """)
    assert [(j.table, j.row) for j in plan(study, tmp_path / "runs")] == [("short", "sl"), ("short", "slk"),
                                                                          ("long", "sl")]


def test_what_the_ledgers_cannot_hold_is_shown_marked(tmp_path):
    """A second compared metric (its own paired t); a row whose runs are another study's ledger under
    another row name; a row kept only as a seed summary (‡) with the paired test recorded then (†),
    printed at the precision it was written with; labels; ``paper: none``."""
    study = _study(tmp_path, """
        title: marks
        tables:
          synth: [dataset.n_users=120]
        rows:
          sl: {overrides: [loss=sl], record: other/plain}
          slk: [loss=slk]
        seeds: [0, 1, 2]
        baseline: sl
        metric: ndcg@20
        compare_also: [recall@20]
        metrics: [ndcg@20, recall@20]
        columns: [fit_min]
        labels: {fit_min: minutes, recall@20: Recall@20}
        paper: none
    """)
    sl = {"ndcg@20": [0.30, 0.32, 0.31], "recall@20": [0.40, 0.43, 0.41]}
    folder = tmp_path / "results" / "other" / "synth"
    folder.mkdir(parents=True)
    for seed in range(3):
        res = RunResult(status="completed", overrides=["loss=sl", f"seed={seed}"], config={"seed": seed},
                        best={"epoch": 1, "val": {}}, test={m: v[seed] for m, v in sl.items()}, finished_at="t")
        update_ledger(folder / "plain.csv", [ledger_row(res)])
    own = study.folder / "synth"
    own.mkdir(parents=True)
    (own / "slk.summary.csv").write_text("metric,n,mean,ci_half,seeds\nndcg@20,3,0.35,0.01,\"0,1,2\"\n"
                                         "recall@20,3,0.44,0.02,\"0,1,2\"\n")
    (own / "recorded.csv").write_text(
        "row,vs_baseline,p_seeds,vs_baseline:recall@20,p_seeds:recall@20,fit_min,recorded\n"
        "sl,,,,,4.25,then\nslk,0.129,0.219,0.073,8.8e-05,5.5,then\n")
    rows = {r.row: r for r in compute(study)}
    assert [x.seed for x in rows["sl"].records] == [0, 1, 2] and rows["sl"].paper == {}
    assert rows["sl"].values["ndcg@20"] == pytest.approx(0.31)
    slk = rows["slk"].values
    assert slk["summary_only"] and (slk["ndcg@20"], slk["ndcg@20_ci"], slk["n"]) == (0.35, 0.01, 3)
    assert (slk["vs_baseline"], slk["p_seeds:recall@20"], slk["fit_min"]) == (0.129, 8.8e-05, 5.5)
    _, page = write_report(study, pages=tmp_path / "pages")
    text = page.read_text()
    assert "| row | runs | ndcg@20 | Recall@20 | minutes | ndcg@20 vs SL |" in text
    assert "| SL | 3 | .3100 ± .0248 | .4133 ± .0379 | 4.2 † |" in text  # no paper column: paper: none
    # the recorded p keeps its three digits (.219, not .22); the e-notation becomes 8.8·10⁻⁵
    assert ("| SL@20 ‡ | 3 | .3500 ± .0100 | .4400 ± .0200 | 5.5 † | +12.9% † | .219 † | – | +7.3% † | 8.8·10⁻⁵ † |"
            in text)
    assert "(paper" not in text
    # the second metric's paired t over seeds, computed where both rows have ledgers
    shifted = {"ndcg@20": [0.33, 0.36, 0.32], "recall@20": [0.42, 0.47, 0.42]}
    for seed in range(3):
        res = RunResult(status="completed", overrides=["loss=slk", f"seed={seed}"], config={"seed": seed},
                        best={"epoch": 1, "val": {}}, test={m: v[seed] for m, v in shifted.items()}, finished_at="t")
        update_ledger(folder / "shifted.csv", [ledger_row(res)])
    both = _study(tmp_path, """
        title: two metrics
        tables:
          synth: [dataset.n_users=120]
        rows:
          sl: {overrides: [loss=sl], record: other/plain}
          slk: {overrides: [loss=slk], record: other/shifted}
        seeds: [0, 1, 2]
        baseline: sl
        metric: ndcg@20
        compare_also: [recall@20]
        metrics: [ndcg@20]
    """)
    v = {r.row: r.values for r in compute(both)}["slk"]
    a, b = np.array(shifted["recall@20"]), np.array(sl["recall@20"])
    assert v["vs_baseline:recall@20"] == pytest.approx(a.mean() / b.mean() - 1)
    assert v["p_seeds:recall@20"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert v["p_seeds"] == pytest.approx(stats.ttest_rel(shifted["ndcg@20"], sl["ndcg@20"]).pvalue)


def test_a_table_whose_rows_have_their_own_baseline_names_it_in_its_header(tmp_path):
    """The study's baseline lives in one table; a second table compares its rows with another row. Its header
    says "vs <that row's label>" and the cells carry no "(vs ...)"; the first table keeps the study's."""
    study = _study(tmp_path, """
        title: two baselines
        tables:
          a: {overrides: [dataset.n_users=120], rows: [sl, slk]}
          b: {overrides: [dataset.n_users=100], rows: [slk, bce]}
        rows:
          sl: {overrides: [loss=sl], record: other/sl}
          slk: {overrides: [loss=slk], record: other/slk}
          bce: {overrides: [loss=bce], record: other/bce, baseline: slk}
        seeds: [0, 1, 2]
        baseline: sl
        metric: ndcg@20
        metrics: [ndcg@20]
        labels: {sl: Soft, slk: Soft at 20, bce: Binary}
        paper: none
    """)
    values = {"sl": [0.30, 0.32, 0.31], "slk": [0.33, 0.36, 0.32], "bce": [0.20, 0.25, 0.21]}
    for table in ("a", "b"):
        folder = tmp_path / "results" / "other" / table
        folder.mkdir(parents=True)
        for name, vs in values.items():
            for seed in range(3):
                res = RunResult(status="completed", overrides=[f"loss={name}", f"seed={seed}"], config={"seed": seed},
                                best={"epoch": 1, "val": {}}, test={"ndcg@20": vs[seed]}, finished_at="t")
                update_ledger(folder / f"{name}.csv", [ledger_row(res)])
    _, page = write_report(study, pages=tmp_path / "pages")
    a_part, b_part = page.read_text().split("## b")
    assert "| row | runs | ndcg@20 | ndcg@20 vs Soft |" in a_part
    assert "| row | runs | ndcg@20 | ndcg@20 vs Soft at 20 |" in b_part
    change = pct(np.mean(values["bce"]) / np.mean(values["slk"]) - 1)
    assert f"| {change} |" in b_part and "(vs " not in b_part
    # SL@20 in table b has no SL to be compared with: its cells stay empty
    assert b_part.split("| Soft at 20 | 3 | .3367 ± ")[1].split("\n")[0].endswith(" |  |  |  | – |")
