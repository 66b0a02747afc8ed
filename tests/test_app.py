"""The command line: a seed sweep with its summary, a failed job, one-line errors, W&B offline, resume."""

import json

import pandas as pd
import pytest

from bench.app import multirun_flag_first
from bench.loggers import run_variant
from bench.run import train_and_test


@pytest.fixture
def tiny_cli(tiny):
    return [*tiny, "trainer.max_epochs=2", "logger=none"]


@pytest.mark.slow
def test_seed_sweep_writes_summary_and_reports_a_failed_job(tmp_path, tiny_cli, run_cli):
    proc = run_cli(["-m", *tiny_cli, "hydra.sweep.dir=sweep", "seed=0,1", "loss.tau=0.2,-1"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]  # one configuration fails at construction
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    ndcg = summary[summary.metric == "ndcg@20"]
    assert ndcg.row.tolist() == ["sl"] and ndcg.n.tolist() == [2]  # the completed configuration, loss.tau=0.2
    jobs = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/results.json"))]
    assert [j["status"] for j in jobs].count("completed") == 2 and [j["status"] for j in jobs].count("failed") == 2
    means = [j["test"]["ndcg@20"] for j in jobs if j["status"] == "completed"]
    assert ndcg["mean"].iloc[0] == pytest.approx(sum(means) / 2)
    md = (tmp_path / "sweep" / "summary.md").read_text()
    assert "loss.tau must be > 0, got -1" in md and "loss.tau=-1" in md
    assert "Seed summary" in proc.stdout
    # each job estimates its own time and its configuration's seeds' (2, one at a time); the other
    # configuration's jobs cost what they cost, so they say theirs when they start
    log = (tmp_path / "sweep" / "0" / "bench.log").read_text()
    assert "time estimate:" in log and "its 2 seeds, 1 at a time" in log
    assert "(the sweep's other configuration says its own as it starts)" in log


@pytest.mark.slow
def test_unknown_option_lists_the_available_ones(tmp_path, run_cli):
    proc = run_cli(["loss=nope"], cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1  # one line, not Hydra's page
    assert "error: loss=nope is not an option of loss; choose one of advinfonce, approxndcg, bce, bpr" in \
        proc.stderr


@pytest.mark.slow
def test_user_errors_are_one_line(tmp_path, tiny_cli, run_cli):
    proc = run_cli([*tiny_cli, "loss.name=sll"], cwd=tmp_path)
    assert proc.returncode == 2
    known = ("advinfonce, approxndcg, bce, bpr, bsl, ccl, gbce, guidedrec, lambdaloss, lambdalossk, lambdarank, "
             "listmle, listnet, llpauc, logq, logq_corrected, neuralndcg, psl, ranknet, sce, simce, sl, slk, sogclr, "
             "song, songk, talos")
    assert f"error: unknown loss 'sll' (did you mean 'sl'?); known: {known}" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli(["dataset=custom", "logger=none"], cwd=tmp_path)
    assert proc.returncode == 2 and "error: dataset=custom needs a file: add dataset.path=" in proc.stderr


@pytest.mark.slow
def test_default_run_prints_metrics_and_where_results_went_and_wandb_stays_offline(tmp_path, monkeypatch, tiny_cli,
                                                                                   run_cli, wandb_run_file):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no credentials
    proc = run_cli([*tiny_cli, "logger=wandb", "hydra.run.dir=run"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test metrics" in proc.stdout and "ndcg" in proc.stdout
    assert f"results: {tmp_path / 'run' / 'results.json'}" in proc.stdout
    assert "wandb sync" in proc.stderr + proc.stdout
    logs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 1
    wandb_run = wandb_run_file(logs[0])
    group = "synthetic-mf-sl" + run_variant(tiny_cli)  # the overrides make a configuration of their own
    assert wandb_run["run"] == {"group": group, "job_type": "train", "name": f"{group}-seed0",
                                "tags": ["synthetic", "mf", "sl", "seed0"]}
    summary = wandb_run["summary"]
    assert {"test/ndcg@20", "test/recall@20", "best_epoch", "val/ndcg@20"} <= set(summary)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert summary["test/ndcg@20"] == pytest.approx(results["test"]["ndcg@20"])
    assert summary["best_epoch"] == results["best"]["epoch"]


@pytest.mark.slow
def test_resume_command_continues_a_killed_run(tmp_path, tiny, make_cfg, run_cli, crash_at):
    overrides = [*tiny, "trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2", "logger=csv"]
    full = train_and_test(make_cfg(overrides, tmp_path / "full"))
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # Lightning exits after a graceful shutdown
        train_and_test(make_cfg(overrides, tmp_path / "killed"), overrides=overrides, extra_callbacks=[crash_at(3)])
    proc = run_cli([f"resume={tmp_path / 'killed'}", "hydra.run.dir=resume-log"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads((tmp_path / "killed" / "results.json").read_text())
    assert resumed["status"] == "completed" and resumed["test"] == full.test
    assert resumed["resumed_from"].endswith("last.ckpt")
    assert (tmp_path / "killed" / "csv" / "resumed" / "metrics.csv").exists()
    proc = run_cli([f"resume={tmp_path / 'nowhere'}"], cwd=tmp_path)
    assert proc.returncode == 2 and "nowhere: no such run folder" in proc.stderr
    assert not (tmp_path / "nowhere").exists()


def test_the_multirun_flag_may_follow_overrides():
    assert multirun_flag_first(["bench", "loss=slk", "-m", "seed=0,1"]) == ["bench", "-m", "loss=slk", "seed=0,1"]
    assert multirun_flag_first(["bench", "loss=slk"]) == ["bench", "loss=slk"]
    assert multirun_flag_first(["bench", "--multirun", "a=1"]) == ["bench", "--multirun", "a=1"]


def test_an_unknown_option_names_the_nearest_one():
    from bench.sweep import _why

    hydra_says = "In 'config': Could not find 'loss/slkk'\n\nAvailable options in 'loss':\n\tbpr\n\tsl\n\tslk\n\tsong\n"
    assert _why(Exception(hydra_says)) == \
        "loss=slkk is not an option of loss (did you mean loss=slk?); choose one of bpr, sl, slk, song"
    assert "(did you mean loss=song?)" in _why(Exception(hydra_says.replace("slkk", "SONG")))
    far = hydra_says.replace("slkk", "xyz")
    assert _why(Exception(far)) == "loss=xyz is not an option of loss; choose one of bpr, sl, slk, song"
