"""Tuning on current Optuna (bench.tune): search spaces as configs, the validation metric as the only
objective, one study shared by several workers in one storage, a killed tuning that resumes, and
pruning that stops trials on their validation curve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.errors import ConfigError
from bench.tune import load_search

REPO = Path(__file__).resolve().parents[2]
TINY = ["dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14", "trainer.check_val_every_n_epoch=1",
        "loss.n_negatives=50", "train.batch_size=256"]


def test_a_search_extends_another_and_keeps_its_budget():
    slk = load_search("paper_slk")
    assert list(slk.params) == ["optimizer.lr", "optimizer.weight_decay", "loss.tau_w", "loss.t_beta"]
    assert slk.params["optimizer.weight_decay"] == [0.0, 1e-6, 1e-5, 1e-4] and slk.n_trials == 30
    assert slk.params["loss.tau_w"] == [0.5 + 0.25 * i for i in range(11)]
    seq = load_search("seq_slk")
    assert seq.sampler == "grid" and seq.n_trials == len(seq.grid()["loss.tau_w"]) == 6


def test_a_bad_search_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="unknown search 'nope'; known: .*paper_slk"):
        load_search("nope")
    # a parameter given twice would silently keep the second range
    import bench.tune

    (tmp_path / "twice.yaml").write_text("sampler: grid\nparams:\n  loss.tau: [0.1]\n  loss.tau: [0.2]\n")
    monkeypatch.setattr(bench.tune, "SEARCH_DIR", tmp_path)
    with pytest.raises(ConfigError, match=r"search twice: .*: key 'loss.tau' is given twice \(lines 3 and 4\)"):
        load_search("twice")


def _tune(args: list[str], cwd: Path, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BENCH_TUNE_WORKER", None)
    return subprocess.Popen([sys.executable, "-m", "bench.tune", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)  # type: ignore[call-overload]


def _trials(cwd: Path, name: str) -> list[object]:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'tuning' / (name + '.db')}").get_trials()


@pytest.mark.slow
def test_two_workers_share_one_study_whose_objective_is_validation(tmp_path):
    from optuna.trial import TrialState

    # trials long enough (seconds) that the second worker, starting a few seconds later, draws some
    done = _tune(["seq_sl", *TINY, "trainer.max_epochs=25", "--n-trials", "4", "--workers", "2", "--pruner", "none"],
                 tmp_path)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err[-3000:]
    trials = [t for t in _trials(tmp_path, "synthetic-mf-sl-seq_sl") if t.state == TrialState.COMPLETE]
    assert len(trials) >= 4 and len({t.user_attrs["worker"] for t in trials}) == 2  # both drew trials
    for t in trials:  # each trial's value is its run's best validation NDCG@20, never a test value
        result = json.loads((Path(t.user_attrs["run"]) if Path(t.user_attrs["run"]).is_absolute()
                             else tmp_path / t.user_attrs["run"]).joinpath("results.json").read_text())
        assert t.value == pytest.approx(result["best"]["val"]["ndcg@20"])
        assert f"loss.tau={t.params['loss.tau']}" in result["overrides"]
    best = max(trials, key=lambda t: t.value)
    assert f"best validation value {best.value:.4f}" in out


@pytest.mark.slow
def test_a_killed_tuning_resumes_and_retries_the_trial_it_lost(tmp_path):
    from optuna.trial import TrialState

    args = ["seq_sl", *TINY, "trainer.max_epochs=40", "--n-trials", "3", "--pruner", "none", "--stale-after", "3"]
    first = _tune(args, tmp_path, start_new_session=True)
    name = "synthetic-mf-sl-seq_sl"
    for _ in range(600):  # kill it in the middle of its second trial
        time.sleep(0.2)
        if (tmp_path / "tuning" / name / "trial-1").exists():
            break
    time.sleep(1.0)
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()
    time.sleep(4)  # past the heartbeat's grace: the lost trial is stale
    second = _tune(args, tmp_path)
    out, err = second.communicate(timeout=900)
    assert second.returncode == 0, err[-3000:]
    states = [t.state for t in _trials(tmp_path, name)]
    assert states.count(TrialState.COMPLETE) == 3 and states.count(TrialState.FAIL) == 1, states
    failed = next(t for t in _trials(tmp_path, name) if t.state == TrialState.FAIL)
    retried = [t for t in _trials(tmp_path, name) if t.system_attrs.get("failed_trial") == failed.number]
    assert len(retried) == 1 and retried[0].params == failed.params  # the lost setting, run again


@pytest.mark.slow
def test_pruning_stops_hopeless_trials_and_says_what_it_saved(tmp_path):
    from optuna.trial import TrialState

    # the paper's grid over lr and weight decay: the slow learning rates' curves stay below the median
    done = _tune(["paper", *TINY, "trainer.max_epochs=8", "--n-trials", "10", "--pruner", "median"], tmp_path)
    out, err = done.communicate(timeout=900)
    assert done.returncode == 0, err[-3000:]
    trials = _trials(tmp_path, "synthetic-mf-sl-paper")
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned and all(2 <= t.user_attrs["epochs"] < 8 for t in pruned)  # not before a quarter of the epochs
    assert "epochs trained:" in out and "saved)" in out
