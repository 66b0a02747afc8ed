"""W&B offline: grouping by configuration, the per-configuration summary runs' keys."""

from __future__ import annotations

import json

import pytest

from bench.loggers import run_variant


def test_group_suffix_names_the_overrides_that_make_a_configuration():
    assert run_variant(["seed=1", "loss=sl", "dataset=health", "logger=wandb", "+experiment=paper/x"]) == ""
    assert run_variant(["loss.tau=0.1", "seed=2", "model.dim=32", "hydra.run.dir=x", "trainer.accelerator=cpu"]) == \
        "-loss.tau=0.1-model.dim=32"
    long = [f"dataset.n_users={n}" for n in (100, 200)]
    a, b = (run_variant([o, "trainer.max_epochs=3", "dataset.n_items=80", "dataset.mean_per_user=14",
                         "loss.n_negatives=50"]) for o in long)
    assert len(a) == 11 and a.startswith("-") and a != b  # too long for a W&B group: a digest, still distinct


@pytest.mark.slow
def test_sweep_logs_train_runs_grouped_by_configuration_and_a_summary_run_with_ci_fields(tmp_path, tiny, run_cli,
                                                                                         wandb_run_file):
    tiny = [o for o in tiny if not o.startswith("trainer.accelerator")]
    proc = run_cli(["-m", *tiny, "trainer.accelerator=cpu", "loss.tau=0.1", "seed=0,1", "logger=wandb",
                    "logger.wandb.mode=offline", "hydra.sweep.dir=sweep"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [wandb_run_file(p) for p in sorted((tmp_path / "sweep").rglob("offline-run-*/run-*.wandb"))]
    train = [r for r in runs if r["run"]["job_type"] == "train"]
    summary = [r for r in runs if r["run"]["job_type"] == "summary"]
    assert len(train) == 2 and len(summary) == 1
    group = "synthetic-mf-sl" + run_variant([*tiny, "trainer.accelerator=cpu", "loss.tau=0.1"])
    assert {r["run"]["group"] for r in train} == {group}
    assert sorted(r["run"]["name"] for r in train) == [f"{group}-seed0", f"{group}-seed1"]
    s = summary[0]
    assert s["run"]["group"] == group and s["run"]["name"] == f"summary-{group}"
    fields = s["summary"]
    for key in ("ndcg@20/mean", "ndcg@20/ci_low", "ndcg@20/ci_high", "ndcg@20/ci_half", "ndcg@20/n", "recall@20/mean"):
        assert key in fields, key
    # the CI table: one row per metric (5 metrics x 5 cut-offs)
    assert fields["seed_summary/_type"] == "table-file" and fields["seed_summary/nrows"] == 25
    tests = [json.loads((tmp_path / "sweep" / str(i) / "results.json").read_text())["test"]["ndcg@20"] for i in (0, 1)]
    assert fields["ndcg@20/mean"] == pytest.approx(sum(tests) / 2) and fields["ndcg@20/n"] == 2
    assert fields["ndcg@20/ci_low"] < fields["ndcg@20/mean"] < fields["ndcg@20/ci_high"]
    # the per-user vectors travel with each training run (for bench.report --wandb)
    assert len(list((tmp_path / "sweep").rglob("offline-run-*/files/per_user_test.npz"))) == 2


@pytest.mark.slow
def test_mlflow_runs_share_their_group_and_a_sweep_adds_its_summary_run(run_cli, tiny, tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")
    import pandas as pd
    from mlflow.tracking import MlflowClient

    done = run_cli(["-m", "logger=mlflow", *tiny, "trainer.max_epochs=1", "hydra.sweep.dir=sweep", "seed=0,1"],
                   tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # reading the local store bench wrote
    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    experiment = client.get_experiment_by_name("bench")
    runs = client.search_runs([experiment.experiment_id])
    jobs = [r for r in runs if r.data.tags.get("job_type") != "summary"]
    summaries = [r for r in runs if r.data.tags.get("job_type") == "summary"]
    assert len(jobs) == 2 and len({r.data.tags["group"] for r in jobs}) == 1
    assert sorted(r.data.tags["seed"] for r in jobs) == ["0", "1"]
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv").set_index("metric")
    assert len(summaries) == 1
    assert summaries[0].data.metrics["ndcg20/mean"] == pytest.approx(summary.at["ndcg@20", "mean"])
    assert all("test/ndcg20" in r.data.metrics for r in jobs)
    assert summaries[0].data.tags["group"].startswith("synthetic-mf-sl")


@pytest.mark.slow
def test_tensorboard_runs_and_the_sweeps_summary_are_event_files(run_cli, tiny, tmp_path):
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    import pandas as pd
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = run_cli(["-m", "logger=tensorboard", *tiny, "trainer.max_epochs=1", "hydra.sweep.dir=sweep", "seed=0,1"],
                   tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    job_logs = sorted((tmp_path / "sweep").glob("[01]/tensorboard/*-seed[01]"))
    assert len(job_logs) == 2
    summary_dir = next((tmp_path / "sweep" / "tensorboard").glob("summary-*"))
    events = EventAccumulator(str(summary_dir))
    events.Reload()
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv").set_index("metric")
    assert events.Scalars("ndcg@20/mean")[0].value == pytest.approx(summary.at["ndcg@20", "mean"], rel=1e-6)
