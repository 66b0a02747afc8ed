"""Provenance in results.json: the code's commit and dirty flag, the SHA-256 of every data file
read (hashed once per process), the hardware, the library versions and the time per phase,
summed over the parts of a resumed run."""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from bench.datasets import IRBenchmark, provenance
from bench.datasets.provenance import record_data_file, recording
from bench.errors import DataError
from bench.records import RunResult, read_json
from bench.records import provenance as result_callbacks
from bench.records.io import load_checkpoint
from bench.records.provenance import code_version, hardware_info
from bench.run import train_and_test
from bench.tasks.recording import WriteResults

REPO = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def _custom_run(path: Path, epochs: int = 2) -> list[str]:
    return ["dataset=custom", f"dataset.path={path}", "dataset.k_core=1", f"trainer.max_epochs={epochs}",
            "trainer.check_val_every_n_epoch=1", "trainer.accelerator=cpu", "loss.n_negatives=10",
            "train.batch_size=128"]


# -- the code --------------------------------------------------------------------------------
def test_a_checkout_gives_its_commit_and_dirty_flag(tmp_path, monkeypatch):
    repo = tmp_path / "checkout"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    monkeypatch.setattr(result_callbacks, "CODE_ROOT", repo)
    assert code_version() == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False}
    # what studies write into the checkout as runs finish is not code: the next run stays clean
    for path in ("results/study/table/row.csv", "docs/results/study.md", "README.md", "conf/notes.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("a ledger row or a page\n")
    assert code_version()["dirty"] is False
    (repo / "new_module.py").write_text("x = 1\n")  # an untracked file the run could import
    assert code_version()["dirty"] is True
    (repo / "new_module.py").unlink()
    (repo / "conf").joinpath("loss.yaml").write_text("k: 5\n")  # a config is code too
    assert code_version()["dirty"] is True


def test_no_repository_an_installed_copy_and_no_git_say_not_a_repository(tmp_path, monkeypatch):
    not_repo = {"commit": None, "dirty": None, "note": "not a repository"}
    monkeypatch.setattr(result_callbacks, "CODE_ROOT", tmp_path)
    assert code_version() == not_repo
    # a copy installed under some other repository (a virtual environment inside a project)
    _git(tmp_path, "init", "-q")
    (tmp_path / "site-packages").mkdir()
    monkeypatch.setattr(result_callbacks, "CODE_ROOT", tmp_path / "site-packages")
    assert code_version() == not_repo
    monkeypatch.setattr(result_callbacks, "CODE_ROOT", REPO)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert code_version() == not_repo


def test_hardware_names_the_cpu_and_no_gpu_for_a_cpu_run():
    hw = hardware_info("cpu")
    assert isinstance(hw["cpu"], str) and hw["cpu"].strip()
    assert hw["cpu_count"] == os.cpu_count() and hw["gpu"] is None
    assert hw["memory_gb"] is None or hw["memory_gb"] > 0
    assert hardware_info()["gpu"] is None


def test_a_cuda_run_names_the_gpu_it_trains_on(monkeypatch):
    import torch
    from omegaconf import OmegaConf

    from bench.determinism import run_device

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: asked.append(d) or f"GPU {d.index}")
    assert hardware_info("cuda:1")["gpu"] == "GPU 1" and asked == [torch.device("cuda:1")]
    trainer = lambda **kw: OmegaConf.create({"trainer": kw})  # noqa: E731
    assert run_device(trainer(accelerator="gpu", devices=[2])) == "cuda:2"
    assert run_device(trainer(accelerator="auto", devices=1)) == "cuda"
    assert run_device(trainer(accelerator="cpu", devices=1)) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_device(trainer(accelerator="auto", devices=1)) is None and hardware_info("cuda")["gpu"] is None


# -- the data --------------------------------------------------------------------------------
def test_recorded_files_carry_their_sha256_and_are_hashed_once(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_DIGESTS", {})
    path = tmp_path / "interactions.tsv"
    path.write_bytes(b"u1\ti1\nu2\ti2\n")
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    record_data_file(path)  # outside a recording: hashed, noted nowhere
    with recording() as outer:
        with recording() as inner:
            assert record_data_file(path, "data/interactions.tsv") == expected
        record_data_file(path)
    assert inner == {"data/interactions.tsv": expected}
    assert outer == {"data/interactions.tsv": expected, "interactions.tsv": expected}
    # the cache is keyed by path, size and mtime: same bytes count and time -> not read again
    stat = path.stat()
    path.write_bytes(b"u1\ti1\nu3\ti3\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert record_data_file(path) == expected
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: hashed again
    assert record_data_file(path) == hashlib.sha256(b"u1\ti1\nu3\ti3\n").hexdigest()


def test_a_downloaded_file_is_hashed_once_for_verification_and_provenance(shared_data, monkeypatch):
    monkeypatch.setattr(provenance, "_DIGESTS", {})
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(provenance.hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    with recording() as files:
        IRBenchmark("health", data_dir=str(shared_data), download=False).load()
    pinned = "56f9e4b317903b99669b7f8b9ac527a71d30f59e736138a1ae9b8aca4c7e1779"
    assert files == {"ir-benchmark/amazon2014-health/proc.zip": pinned} and len(calls) == 1


# -- a run -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_run_records_code_data_hardware_versions_and_phases(tmp_path, make_cfg, sequences_file):
    data = sequences_file(tmp_path / "histories.tsv")
    res = train_and_test(make_cfg(_custom_run(data), tmp_path / "run"))
    on_disk = read_json(tmp_path / "run" / "results.json")
    prov = on_disk["provenance"]
    assert prov["data_files"] == {"histories.tsv": hashlib.sha256(data.read_bytes()).hexdigest()}
    assert res.data_files == prov["data_files"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        assert prov["code"] == {"commit": None, "dirty": None, "note": "not a repository"}
    else:
        assert prov["code"]["commit"] == head.stdout.strip() and isinstance(prov["code"]["dirty"], bool)
    assert prov["hardware"]["cpu"].strip() and prov["hardware"]["gpu"] is None
    for lib in ("numpy", "scipy", "pandas"):
        assert on_disk["versions"][lib] == metadata.version(lib)
    timing = on_disk["timing_s"]
    assert set(timing) == {"data", "fit", "test", "total", "train_epoch_median"} and min(timing.values()) > 0
    assert timing["total"] >= timing["fit"] + timing["test"]
    assert timing["train_epoch_median"] * res.epochs_trained <= timing["fit"]


@pytest.mark.slow
def test_a_resumed_run_sums_its_phases_and_refuses_changed_data(tmp_path, make_cfg, sequences_file, crash_at):
    data = sequences_file(tmp_path / "histories.tsv")
    cfg = make_cfg(_custom_run(data, epochs=4), tmp_path / "run")
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_and_test(cfg, extra_callbacks=[crash_at(2)])
    first = RunResult.read(tmp_path / "run")
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    fit_before = next(s["fit_s"] for k, s in load_checkpoint(last)["callbacks"].items() if "WriteResults" in k)
    assert fit_before > 0

    original = data.read_bytes()
    data.write_bytes(original + b"u0\ti29\t99999\n")
    with pytest.raises(DataError, match=r"cannot resume .*: the data changed since the run started "
                                        r"\(histories\.tsv: sha256 [0-9a-f]{12} then, [0-9a-f]{12} now\)") as err:
        train_and_test(cfg, resume_checkpoint=last)
    assert "\n" not in str(err.value)
    assert RunResult.read(tmp_path / "run").data_files == first.data_files  # kept for the next try

    data.write_bytes(original)
    done = train_and_test(cfg, resume_checkpoint=last)
    assert done.status == "completed" and done.data_files == first.data_files
    assert done.timing_s["data"] > first.timing_s["data"]  # both parts loaded the data
    assert done.timing_s["fit"] > fit_before  # the killed part's fit counts


def test_fit_time_continues_from_the_checkpointed_value():
    cb = WriteResults("unused", "ndcg@20")
    cb.load_state_dict({"fit_s": 5.0})
    cb.on_fit_start(None, None)  # type: ignore[arg-type]
    assert 5.0 <= cb.state_dict()["fit_s"] < 6.0
    cb.on_fit_end(None, None)  # type: ignore[arg-type]
    assert 5.0 <= cb.timing["fit"] < 6.0 and cb.state_dict() == {"fit_s": cb.timing["fit"]}
