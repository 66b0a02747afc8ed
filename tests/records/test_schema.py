"""results.json through RunResult: round trip, unknown keys kept, and which overrides make a configuration."""

import json

import numpy as np
import pytest

from bench.errors import BenchError
from bench.records import (
    PER_USER_FILE,
    RESULTS_FILE,
    RunResult,
    find_runs,
    override_key,
    read_json,
    variant_overrides,
    variant_suffix,
    write_per_user,
)


def _result() -> RunResult:
    config = {"seed": 3, "task": {"name": "cf"}, "dataset": {"name": "health"}, "model": {"name": "mf"},
              "loss": {"name": "slk", "k": 50}, "train": {"monitor": "ndcg@50"},
              "paper": {"recall@20": 0.1823, "ndcg@20": 0.139}}
    return RunResult(status="completed", config=config, overrides=["loss=slk", "loss.tau_w=3.0", "seed=3",
                                                                   "hydra.run.dir=x"],
                     best={"epoch": 4, "checkpoint": "checkpoints/best.ckpt", "val": {"ndcg@50": 0.2}},
                     test={"ndcg@20": 0.13, "ndcg@50": 0.17}, history=[{"epoch": 4, "val/ndcg@50": 0.2}],
                     epochs_trained=5, per_user_test=PER_USER_FILE, timing_s={"fit": 1.5})


def test_round_trip_keeps_every_field_and_writes_the_optional_ones_as_null(tmp_path):
    res = _result()
    assert res.write(tmp_path) == tmp_path / RESULTS_FILE
    back = RunResult.read(tmp_path)
    assert back == res and back.run_dir == tmp_path
    assert RunResult.read(tmp_path / RESULTS_FILE) == res  # the file itself works too
    on_disk = read_json(tmp_path / RESULTS_FILE)
    assert on_disk["test"] == {"ndcg@20": 0.13, "ndcg@50": 0.17} and on_disk["best"]["epoch"] == 4
    for key in ("resumed_from", "error", "traceback", "started_at", "finished_at", "device"):
        assert key in on_disk and on_disk[key] is None, key
    assert "extra" not in on_disk and "run_dir" not in on_disk


def test_properties_name_the_run(tmp_path):
    res = _result()
    assert (res.task, res.dataset, res.model, res.loss, res.seed) == ("cf", "health", "mf", "slk", 3)
    assert res.paper == {"recall@20": 0.1823, "ndcg@20": 0.139}
    assert res.monitor == "ndcg@50" and res.best_val == 0.2
    assert res.variant == ["loss.tau_w=3.0"] and res.job_overrides == ["loss=slk", "loss.tau_w=3.0", "seed=3"]
    empty = RunResult()
    assert (empty.task, empty.dataset, empty.seed, empty.monitor, empty.best_val) == ("cf", "?", 0, "ndcg@20", None)


def test_unknown_keys_are_kept_when_a_result_is_rewritten(tmp_path):
    payload = {"status": "completed", "test": {"ndcg@20": 0.1}, "written_by_a_newer_version": {"a": [1, 2]}}
    (tmp_path / RESULTS_FILE).write_text(json.dumps(payload))
    res = RunResult.read(tmp_path)
    assert res.extra == {"written_by_a_newer_version": {"a": [1, 2]}}
    res.status = "failed"
    res.write()
    again = read_json(tmp_path / RESULTS_FILE)
    assert again["written_by_a_newer_version"] == {"a": [1, 2]} and again["status"] == "failed"


def test_per_user_vectors_load_beside_the_result(tmp_path):
    res = _result()
    res.write(tmp_path)
    assert RunResult.read(tmp_path).load_per_user() is None  # not saved
    write_per_user(tmp_path / PER_USER_FILE, np.array([5, 2]), {"ndcg@20": np.array([0.5, 0.25])})
    users, per_user = RunResult.read(tmp_path).load_per_user()
    assert users.tolist() == [5, 2] and per_user["ndcg@20"].tolist() == [0.5, 0.25]


def test_unreadable_and_missing_results_are_named(tmp_path):
    with pytest.raises(BenchError, match="holds no results.json"):
        RunResult.read(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / RESULTS_FILE).write_text("{not json")
    with pytest.raises(BenchError, match=r"is not a readable results file"):
        RunResult.read(bad)
    _result().write(tmp_path / "good")
    runs, notes = find_runs([tmp_path])
    assert [r.run_dir for r in runs] == [tmp_path / "good"] and len(notes) == 1 and "bad" in notes[0]
    with pytest.raises(BenchError, match="does not exist"):
        find_runs([tmp_path / "nowhere"])


def test_variant_overrides_ignore_identity_seed_and_placement():
    # the seed tells runs of one configuration apart; task, data, backbone and loss name its table and row
    assert variant_overrides(["loss=sl", "seed=3", "dataset=health"]) == []
    assert variant_overrides(["seed=1"]) == []
    assert variant_overrides(["+seed_offset=1", "seed=1"]) == ["seed_offset=1"]
    assert variant_overrides(["model.dim=32", "+experiment=paper/x", "hydra.run.dir=x", "trainer.accelerator=cpu",
                              "logger=wandb", "logger.wandb.mode=offline", "output_dir=o", "loss.tau=0.1",
                              "trainer.devices=2"]) == ["loss.tau=0.1", "model.dim=32"]
    assert override_key("+loss.tau=0.1") == "loss.tau" and override_key("~trainer.max_epochs") == "trainer.max_epochs"


def test_variant_suffix_names_the_overrides_or_a_digest_when_long():
    assert variant_suffix(["seed=1", "loss=sl"]) == ""
    assert variant_suffix(["model.dim=32", "loss.tau=0.1"]) == "-loss.tau=0.1-model.dim=32"
    long = [f"dataset.n_users={n}" for n in (100, 200)]
    a, b = (variant_suffix([o, "trainer.max_epochs=3", "dataset.n_items=80", "loss.n_negatives=50"]) for o in long)
    assert len(a) == 11 and a.startswith("-") and a != b
    assert len(variant_suffix(long[:1], max_chars=10)) == 11  # the cap is a parameter
