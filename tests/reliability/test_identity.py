"""Comparisons of unlike things (issue 42, class 5): every run records the identity of the exact data
it used, the report never pairs runs across identities (synthetic data of other generator settings,
a user's file filtered or split otherwise), and a sweep rerun into a folder that holds an earlier
sweep's runs names each job that did not run and exits non-zero instead of summarising the old runs
as its own."""

from __future__ import annotations

import shutil

import pytest
import torch

from bench.collect import from_directories
from bench.datasets import CustomFile, Synthetic
from bench.records import RunResult
from bench.records.identity import data_identity
from bench.report.__main__ import main as report_main
from bench.report.runs import assign_labels
from bench.run import train_and_test


def _interactions(tmp_path, name="a.tsv"):
    gen = torch.Generator().manual_seed(0)
    rows = ["user\titem"] + [f"u{u}\ti{i}" for u in range(40) for i in torch.randperm(30, generator=gen)[:8].tolist()]
    rows.append("u0\trare")  # the one item a 2-core filter drops
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return path


def test_identity_is_the_content_whatever_the_name_or_place(tmp_path):
    path = _interactions(tmp_path)
    copy = tmp_path / "elsewhere" / "b.tsv"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    a = data_identity(CustomFile(str(path), k_core=1, name="mine").load())
    assert a == data_identity(CustomFile(str(copy), k_core=1, name="yours").load())
    assert a.startswith("sha256:") and len(a) == 7 + 64
    # the same file filtered or split otherwise is other data
    assert a != data_identity(CustomFile(str(path), k_core=2).load())
    assert a != data_identity(CustomFile(str(path), k_core=1, split_seed=1).load())
    # a generator's settings; and the noise a task applies at training time
    other = Synthetic(n_users=51, n_items=40).load()
    assert data_identity(Synthetic(n_users=50, n_items=40).load()) != data_identity(other)
    data = Synthetic(n_users=50, n_items=40).load()
    assert data_identity(data) != data_identity(data, settings={"noise_ratio": 0.1, "noise_seed": 0})
    assert data_identity(data) == data_identity(Synthetic(n_users=50, n_items=40).load())


@pytest.mark.slow
def test_the_report_never_pairs_runs_across_data_identities(tiny, make_cfg, tmp_path, capsys):
    base = [*tiny, "logger=none", "trainer.max_epochs=2"]
    for loss in ("sl", "bpr"):
        for seed in (0, 1):
            for n_users, where in ((120, "a"), (130, "b")):  # same name, other generator settings
                overrides = [*base, f"loss={loss}", f"seed={seed}", f"dataset.n_users={n_users}"]
                train_and_test(make_cfg(overrides, tmp_path / where / f"{loss}{seed}"), overrides=overrides)
    res = RunResult.read(tmp_path / "a" / "sl0")
    assert res.data_identity and res.data_identity != RunResult.read(tmp_path / "b" / "sl0").data_identity
    records, _ = from_directories([tmp_path])
    notes = assign_labels(records)
    tables = {r.table for r in records}
    assert len(tables) == 2 and all(t[1].startswith("synthetic [data ") for t in tables)
    assert any("was run on 2 different data" in n for n in notes)
    # the paired comparison of BPR with SL stays inside each identity: two tables, four seeds each
    assert report_main([str(tmp_path), "--baseline", "sl", "--no-plots", "--out", str(tmp_path / "rep")]) in (0, None)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert text.count("synthetic [data ") >= 2
    # a data set name whose runs share one identity keeps its name
    records, _ = from_directories([tmp_path / "a"])
    assign_labels(records)
    assert {r.dataset for r in records} == {"synthetic"}


@pytest.mark.slow
def test_a_sweep_rerun_into_its_folder_names_the_jobs_that_did_not_run(tiny, run_cli, tmp_path):
    args = ["-m", *tiny, "logger=none", "trainer.max_epochs=2", "loss=sl,bpr", f"hydra.sweep.dir={tmp_path / 'sw'}"]
    first = run_cli(args, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    before = {p: p.read_bytes() for p in (tmp_path / "sw").rglob("results.json")}
    first_summary = (tmp_path / "sw" / "summary.md").read_text()
    again = run_cli(args, tmp_path)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    # the earlier sweep's summary is kept; this one's is written beside it
    assert (tmp_path / "sw" / "summary.md").read_text() == first_summary and "| synthetic" in first_summary
    rerun, = [p for p in (tmp_path / "sw").glob("summary-*.md")]
    summary = rerun.read_text()
    assert "## Jobs of this sweep that did not run" in summary
    assert summary.count("not run by this sweep; the folder holds a completed run") == 2
    assert "| synthetic" not in summary  # the earlier sweep's runs are not summarised as this one's
    assert {p: p.read_bytes() for p in before} == before  # and not touched


def test_a_run_without_an_identity_is_checked_by_its_files_against_those_with_one():
    from bench.errors import BenchError
    from bench.report.runs import RunRecord

    def record(source, identity, digest):
        return RunRecord(source=source, task="cf", dataset="custom", model="mf", loss="sl", seed=int(source[-1]),
                         test={"ndcg@20": 0.1}, data_identity=identity, data_files={"inter.tsv": digest})

    same = [record("a0", "1" * 16, "aa"), record("a1", "1" * 16, "aa"), record("old2", "", "aa")]
    assert assign_labels(same) == []  # the older run read the same file: pooled
    other = [record("a0", "1" * 16, "aa"), record("a1", "1" * 16, "aa"), record("old2", "", "bb")]
    with pytest.raises(BenchError, match="data set 'custom' was read from different files"):
        assign_labels(other)
