"""One run never damages another's record (issue 42, classes 2 and 4): a refused run changes no
byte of the folder it was refused (a bad setting, a completed or live folder, a resume that cannot
continue), ``force=true`` leaves no file of the run it replaces for a later resume to pick up, and a
run writes only inside its own folder, never through a link placed in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.records import RunResult
from bench.run import train_and_test

pytestmark = pytest.mark.slow


def snapshot(root):
    """Every file and link under ``root`` (hidden ones too): {path: bytes or link target}."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[path.relative_to(root)] = ("link", os.readlink(path))
        elif path.is_file():
            out[path.relative_to(root)] = path.read_bytes()
    return out


def one_line_error(proc, text):
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and text in errors[0], proc.stderr[-2000:]


@pytest.fixture(scope="module")
def completed(tiny, tmp_path_factory):
    """A completed 3-epoch run written by the command line (with its .hydra/ and bench.log)."""
    where = tmp_path_factory.mktemp("completed") / "run"
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    done = subprocess.run([sys.executable, "-m", "bench", *tiny, "logger=csv", f"hydra.run.dir={where}"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=where.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return where


@pytest.fixture
def run_dir(completed, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(completed, copy)
    return copy


def test_refused_runs_change_no_byte_of_a_completed_folder(run_dir, tiny, run_cli, tmp_path):
    before = snapshot(run_dir)
    assert {".hydra/overrides.yaml", "bench.log", "results.json", "checkpoints/last.ckpt"} <= {
        str(p) for p in before}
    # a bad setting: refused before the folder is looked at
    one_line_error(run_cli([*tiny, "optimizer.lr=-1", f"hydra.run.dir={run_dir}"], tmp_path),
                   "optimizer.lr=-1 is out of range")
    # a good one without force: the folder is another run's; Hydra's .hydra/ and log are not written either
    one_line_error(run_cli([*tiny, "loss=bpr", f"hydra.run.dir={run_dir}"], tmp_path),
                   f"{run_dir} already holds a completed run")
    # a resume that would shorten it, or of a damaged checkpoint
    one_line_error(run_cli([f"resume={run_dir}", "trainer.max_epochs=2"], tmp_path),
                   "trainer.max_epochs=2 would shorten")
    assert snapshot(run_dir) == before and RunResult.read(run_dir).status == "completed"
    # a resume with nothing to do says so and leaves it as it is
    proc = run_cli([f"resume={run_dir}"], tmp_path)
    assert proc.returncode == 0 and "holds a completed run of 3 epochs; nothing to resume" in proc.stdout
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:4000])  # cut short, as by a full disk
    before = snapshot(run_dir)
    one_line_error(run_cli([f"resume={run_dir}", "trainer.max_epochs=5"], tmp_path),
                   "last.ckpt is truncated or corrupt")
    assert snapshot(run_dir) == before and RunResult.read(run_dir).status == "completed"


def test_a_refused_run_leaves_a_live_run_alone(run_dir, tiny, run_cli, tmp_path, folder_holder):
    record = RunResult.read(run_dir)
    record.status = "running"
    record.write()
    with folder_holder(run_dir, resuming=True) as holder:
        before = snapshot(run_dir)
        for args, text in (([*tiny, "optimizer.lr=-1"], "optimizer.lr=-1 is out of range"),
                           ([*tiny, "force=true"], f"is in use by process {holder.pid}"),
                           ([*tiny], f"is in use by process {holder.pid}")):
            one_line_error(run_cli([*args, f"hydra.run.dir={run_dir}"], tmp_path), text)
        assert snapshot(run_dir) == before and RunResult.read(run_dir).live_status() == "running"
    assert RunResult.read(run_dir).live_status() == "interrupted"


def test_force_clears_the_old_run_so_a_resume_never_reports_its_model(run_dir, tiny, make_cfg, crash_at):
    old_best = (run_dir / "checkpoints" / "best.ckpt").read_bytes()
    (run_dir / "notes.txt").write_text("mine")  # not a run's file: kept
    overrides = [*tiny, "loss=bpr", "force=true", "logger=none"]
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # killed before its first epoch ends
        train_and_test(make_cfg(overrides, run_dir), overrides=overrides, extra_callbacks=[crash_at(0)])
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()  # the old run's is gone with it
    assert not (run_dir / "per_user_test.npz").exists() and not (run_dir / ".hydra").exists()
    assert (run_dir / "notes.txt").read_text() == "mine"
    res = RunResult.read(run_dir)
    assert res.status == "running" and res.loss == "bpr" and res.live_status() == "interrupted"
    # a later run completes with its own checkpoints, never the replaced run's
    train_and_test(make_cfg(overrides, run_dir), overrides=overrides)
    assert RunResult.read(run_dir).loss == "bpr"
    assert (run_dir / "checkpoints" / "best.ckpt").read_bytes() != old_best


@pytest.mark.parametrize("status,what", [("running", "an interrupted"), ("failed", "a failed")])
def test_a_run_that_can_continue_is_kept_unless_resumed_or_forced(status, what, run_dir, tiny, run_cli, tmp_path):
    record = RunResult.read(run_dir)
    record.status = status  # killed (no process holds the folder), or failed late (a full disk): last.ckpt is work
    record.write()
    before = snapshot(run_dir)
    one_line_error(run_cli([*tiny, f"hydra.run.dir={run_dir}"], tmp_path),
                   f"{run_dir} holds {what} run that can continue from its last checkpoint; continue it with "
                   f"resume={run_dir}")
    assert snapshot(run_dir) == before
    (run_dir / "my-notes.tmp").write_text("mine")  # a refusal removes no file, not even a *.tmp one
    one_line_error(run_cli([*tiny, f"hydra.run.dir={run_dir}"], tmp_path), "can continue from its last checkpoint")
    assert (run_dir / "my-notes.tmp").read_text() == "mine"


@pytest.mark.parametrize("link", ["checkpoints", "bench.log", "results.json", ".lock", "csv"])
def test_a_link_in_the_folder_is_refused_and_nothing_is_written_through_it(link, tiny, run_cli, tmp_path):
    folder, outside = tmp_path / "run", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    target = outside / "target"
    if link in ("checkpoints", "csv"):
        target.mkdir()
    else:
        target.write_text("precious\n")
    (folder / link).symlink_to(target)
    before = snapshot(outside)
    proc = run_cli([*tiny, "logger=csv", f"hydra.run.dir={folder}"], tmp_path)
    one_line_error(proc, "is a symbolic link")
    assert snapshot(outside) == before


def test_a_run_its_resume_export_and_study_write_only_inside_its_folder(tiny, run_cli, tmp_path):
    """Everything but the run folder (and the data cache) is byte for byte as before."""
    work = tmp_path / "work"
    work.mkdir()
    folder = work / "runs" / "one"
    (work / "elsewhere.txt").write_text("x")
    proc = run_cli([*tiny, "logger=csv", "trainer.max_epochs=2", f"hydra.run.dir={folder}"], work)
    assert proc.returncode == 0, proc.stderr[-2000:]

    def outside():
        return {p: b for p, b in snapshot(work).items() if not str(p).startswith("runs/one")}

    before = outside()
    steps = [(["bench", f"resume={folder}", "trainer.max_epochs=3"], "bench"),
             ([str(folder), "--k", "5"], "bench.export"),
             ([str(folder), "--ks", "5", "--estimators", "sampled"], "bench.thresholds"),
             ([str(folder), "--no-plots"], "bench.report")]
    for args, module in steps:
        proc = run_cli(args[1:] if module == "bench" else args, work, module=module)
        assert proc.returncode == 0, (module, proc.stderr[-2000:])
    assert outside() == before
    assert json.loads((folder / "results.json").read_text())["epochs_trained"] == 3


def test_a_resume_refused_on_changed_data_leaves_the_completed_run_completed(tmp_path, run_cli, sequences_file):
    data = sequences_file(tmp_path / "inter.tsv")
    args = ["dataset=custom", f"dataset.path={data}", "dataset.k_core=1", "trainer.max_epochs=2", "logger=none",
            "loss.n_negatives=10", "trainer.accelerator=cpu"]
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before = snapshot(tmp_path / "run")
    data.write_text(data.read_text().replace("u0\t", "u1\t", 3))  # the file changed since
    one_line_error(run_cli(["resume=run", "trainer.max_epochs=3"], tmp_path), "the data changed since the run started")
    after = snapshot(tmp_path / "run")
    log = Path("bench.log")
    # the run's own log tells of the refused attempt; nothing else changed
    assert after[log].startswith(before.pop(log)) and b"the data changed since" in after.pop(log)
    assert after == before and RunResult.read(tmp_path / "run").status == "completed"


def test_a_checkpoint_that_is_not_the_runs_is_refused_before_the_record_changes(run_dir, tiny, run_cli, tmp_path):
    import torch

    last = run_dir / "checkpoints" / "last.ckpt"
    other = {k: v for k, v in torch.load(last, weights_only=True).items()}
    other["state_dict"] = {k: torch.zeros(3, 5) if k.endswith("user_emb.weight") else v
                           for k, v in other["state_dict"].items()}  # another model.dim's
    for content, text in (({"a": 1}, "is not a checkpoint of a run (it has no state_dict"),
                          (other, "is not this run's: it holds a (3, 5) model.user_emb.weight")):
        torch.save(content, last)
        before = snapshot(run_dir)
        one_line_error(run_cli([f"resume={run_dir}", "trainer.max_epochs=5"], tmp_path), text)
        after = snapshot(run_dir)
        # the refused attempt is a line in the run's own log; its record and files are as they were
        assert {k: v for k, v in after.items() if str(k) != "bench.log"} == \
            {k: v for k, v in before.items() if str(k) != "bench.log"}
        assert RunResult.read(run_dir).status == "completed"


def test_force_takes_true_or_false_only(run_dir, tiny, run_cli, tmp_path):
    before = snapshot(run_dir)
    for value in ("no", "off", "'false'"):  # strings that would read as true and wipe the run
        one_line_error(run_cli([*tiny, f"force={value}", f"hydra.run.dir={run_dir}"], tmp_path),
                       "is out of range: use true or false")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("module,folder,args", [("bench.export", "export", ["--k", "5"]),
                                                ("bench.thresholds", "threshold_study", ["--ks", "5"])])
def test_commands_that_write_into_a_run_folder_respect_its_links_and_its_lock(module, folder, args, run_dir, run_cli,
                                                                              tmp_path, folder_holder):
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / folder).symlink_to(outside)
    proc = run_cli([str(run_dir), *args], tmp_path, module=module)
    one_line_error(proc, "is a symbolic link out of the run's folder")
    assert list(outside.iterdir()) == []
    (run_dir / folder).unlink()
    with folder_holder(run_dir, resuming=True) as holder:  # a live process holds the run
        one_line_error(run_cli([str(run_dir), *args], tmp_path, module=module), f"in use by process {holder.pid}")
    assert not (run_dir / folder).exists()


def test_a_refusal_keeps_a_dead_runs_lock_file_and_a_missing_resume_makes_no_folder(run_dir, tiny, run_cli, tmp_path):
    (run_dir / ".lock").write_text('{"pid": 999999, "host": "gone"}')
    before = snapshot(run_dir)
    one_line_error(run_cli([*tiny, f"hydra.run.dir={run_dir}"], tmp_path), "already holds a completed run")
    assert snapshot(run_dir) == before
    one_line_error(run_cli(["resume=nowhere", "trainer.max_epochs=5"], tmp_path), "resume=nowhere: no such run folder")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(not __import__("bench.determinism").determinism.portable_possible(),
                    reason="the kernel pins apply to x86-64 CPUs with AVX2")
def test_a_run_is_not_resumed_under_other_kernels(run_dir, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CPU_DIGITS", "native")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    before = snapshot(run_dir)
    proc = run_cli([f"resume={run_dir}", "trainer.max_epochs=5"], tmp_path)
    if "AVX512" not in proc.stderr and proc.returncode == 0:
        pytest.skip("native kernels are the portable ones on this CPU")
    one_line_error(proc, "under other kernels (cpu_capability AVX2 then, AVX512 now")
    assert {k: v for k, v in snapshot(run_dir).items() if str(k) != "bench.log"} == \
        {k: v for k, v in before.items() if str(k) != "bench.log"}


def test_a_refused_resume_keeps_the_record_the_lock_file_and_the_earlier_logs(run_dir, run_cli, tmp_path):
    (run_dir / ".lock").write_text('{"pid": 999999, "host": "gone"}')  # a killed holder's
    before = snapshot(run_dir)
    for args, text in ((["trainer.max_epochs=4", "trainer.devices=0"], "the trainer refused its settings"),
                       (["trainer.max_epochs=2"], "would shorten")):
        proc = run_cli([f"resume={run_dir}", *args], tmp_path)
        one_line_error(proc, text)
        after = {k: v for k, v in snapshot(run_dir).items() if str(k) != "bench.log"}
        assert after == {k: v for k, v in before.items() if str(k) != "bench.log"}
    assert RunResult.read(run_dir).status == "completed"
    # two resumes that extend it: each part's CSV log is kept
    for epochs in (4, 5):
        assert run_cli([f"resume={run_dir}", f"trainer.max_epochs={epochs}"], tmp_path).returncode == 0
    assert sorted(p.name for p in (run_dir / "csv").iterdir() if p.is_dir()) == ["resumed", "resumed-2"]


def test_runs_are_never_nested_and_a_sweep_is_never_put_into_a_run(run_dir, tiny, run_cli, tmp_path):
    before = snapshot(run_dir)
    one_line_error(run_cli([*tiny, f"hydra.run.dir={run_dir / 'checkpoints'}"], tmp_path),
                   "lies inside the run folder")
    one_line_error(run_cli(["-m", *tiny, "seed=0", f"hydra.sweep.dir={run_dir}"], tmp_path), "is a run's folder")
    assert snapshot(run_dir) == before
    outer = tmp_path / "outer"
    shutil.copytree(run_dir, outer / "checkpoints")
    one_line_error(run_cli([*tiny, f"hydra.run.dir={outer}"], tmp_path), "holds another run's folder")
    assert (outer / "checkpoints" / "results.json").is_file()


def test_writes_through_relative_places_and_into_other_runs_are_refused(run_dir, tiny, run_cli, tmp_path,
                                                                       folder_holder):
    work = tmp_path / "work"
    work.mkdir()
    for setting in ("callbacks.last_checkpoint.dirpath=relck", "callbacks.results.dirpath=relres"):
        one_line_error(run_cli([*tiny, setting, f"hydra.run.dir={tmp_path / 'new'}"], work), "would write outside")
    assert list(work.iterdir()) == []
    # a record's block value naming a place is refused like the key itself
    crafted = tmp_path / "crafted"
    shutil.copytree(run_dir, crafted)
    res = json.loads((crafted / "results.json").read_text())
    res["overrides"].append("callbacks.last_checkpoint={dirpath:relck}")
    (crafted / "results.json").write_text(json.dumps(res))
    one_line_error(run_cli([f"resume={crafted}", "trainer.max_epochs=4"], work), "says where files are written")
    assert list(work.iterdir()) == []
    # --out into another run's folder, live: refused under that run's lock
    live = tmp_path / "live"
    shutil.copytree(run_dir, live)
    with folder_holder(live, resuming=True) as holder:
        proc = run_cli([str(run_dir), "--out", str(live / "export2")], tmp_path, module="bench.export")
        one_line_error(proc, f"in use by process {holder.pid}")
    assert not (live / "export2").exists()
