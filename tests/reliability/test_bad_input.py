"""Bad input gets one line naming the problem and the fix (issue 13, defects 4 and 5): out-of-range
settings, a custom file's columns and rating filter, non-UTF-8 files, data without test users,
an output folder that cannot be written, a full disk, W&B online without credentials."""

from __future__ import annotations

import errno
import os
import re

import pytest

from bench.datasets import CustomFile
from bench.errors import BenchError, ConfigError, DataError
from bench.records.io import atomic_write_bytes
from bench.run import train_and_test


@pytest.mark.parametrize("override,message", [
    ("optimizer.lr=-1", "optimizer.lr=-1 is out of range: use a number >= 0 (0 evaluates the untrained model)"),
    ("train.batch_size=0", "train.batch_size=0 is out of range: use an integer >= 1"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch=0 is out of range"),
    ("seed=-1", "seed=-1 is out of range: use an integer in [0, 2^32)"),
    ("eval.ks=[0]", "eval.ks=[0] is out of range: use a non-empty list of integers >= 1"),
    ("model.dim=0", "model.dim=0 is out of range: use an integer >= 1"),
    ("task.valid_fraction=1.5", "task.valid_fraction=1.5 is out of range: use a number in [0, 1)"),
    ("train.early_stopping_patience=0", "train.early_stopping_patience=0 is out of range"),
])
def test_out_of_range_settings_stop_before_anything_is_built(override, message, tiny, make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(message)):
        train_and_test(make_cfg([*tiny, override], tmp_path))
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_the_command_line_says_it_in_one_line(tiny, run_cli, tmp_path):
    proc = run_cli([*tiny, "optimizer.lr=-1", "logger=none", "hydra.run.dir=run"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("error: optimizer.lr=-1 is out of range: "
                                                    "use a number >= 0 (0 evaluates the untrained model)")
    # refused before it started: no record of a run that never was (and no folder's record touched)
    assert not (tmp_path / "run" / "results.json").exists()


def _csv(tmp_path, lines, name="r.csv"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _ratings_file(tmp_path, header=True):
    # 12 users x 12 items; rating 5 on even items, 2 on odd; timestamps 1000 + item
    rows = ["user,item,rating,timestamp"] if header else []
    rows += [f"u{u},i{i},{5 if i % 2 == 0 else 2},{1000 + i}" for u in range(12) for i in range(12)]
    return _csv(tmp_path, rows)


def test_a_rating_column_is_read_as_rating_and_filtered(tmp_path):
    data = CustomFile(str(_ratings_file(tmp_path)), min_rating=4, k_core=2).load()
    assert data.n_items == 6 and data.train.shape[0] + data.test.shape[0] == 72  # odd items (rating 2) dropped
    times = set(data.train_timestamps.tolist()) | set(data.test_timestamps.tolist())
    assert times == {1000.0 + i for i in range(0, 12, 2)}  # the timestamp column, not the rating


def test_unnamed_columns_must_be_named_and_a_rating_filter_needs_a_rating(tmp_path):
    path = _ratings_file(tmp_path, header=False)
    with pytest.raises(DataError, match=r"4 columns and no header naming them; say what they are, e\.g\. "
                                        r"dataset\.columns=\[user,item,rating,timestamp\]"):
        CustomFile(str(path), k_core=2).load()
    data = CustomFile(str(path), columns=["user", "item", "rating", "timestamp"], min_rating=4, k_core=2).load()
    assert data.n_items == 6
    data = CustomFile(str(path), columns=["user", "item", "-", "-"], k_core=2).load()
    assert data.n_items == 12 and data.train_timestamps is None
    two = _csv(tmp_path, ["user,item"] + [f"u{u},i{i}" for u in range(12) for i in range(12)], "two.csv")
    with pytest.raises(DataError, match="dataset.min_rating=4 needs a rating column"):
        CustomFile(str(two), min_rating=4, k_core=2).load()
    with pytest.raises(ConfigError, match=r"dataset\.columns=\['user', 'thing'\]: name each column"):
        CustomFile(str(two), columns=["user", "thing"], k_core=2).load()


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("user\titem\nu1\ti1\nu2\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"{path}:3: not UTF-8 text \(byte \d+\); save the file as UTF-8"):
        CustomFile(str(path), k_core=1).load()


def test_data_without_a_test_user_stops_instead_of_reporting_nan(tiny, make_cfg, tmp_path):
    path = _csv(tmp_path, ["user,item"] + [f"u{u},i{u % 7}" for u in range(40)])  # one interaction per user
    cfg = make_cfg(["dataset=custom", f"dataset.path={path}", "dataset.k_core=1", *tiny[3:]], tmp_path / "run")
    with pytest.raises(DataError, match="leaves no user with a test item"):
        train_and_test(cfg)


def test_an_output_folder_that_cannot_be_made_is_named(tiny, make_cfg, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(BenchError, match=rf"cannot create the output folder {blocker}/run"):
        train_and_test(make_cfg(tiny, blocker / "run"))


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", lambda fd: full(fd, b""))
    with pytest.raises(BenchError, match=rf"cannot write {tmp_path}/results.json: No space left on device"):
        atomic_write_bytes(tmp_path / "results.json", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_storage_errors_anywhere_become_one_line():
    from bench.errors import find_user_error

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/x/checkpoints/last.ckpt")
        except OSError as inner:
            raise RuntimeError("lightning wrapped it") from inner
    except RuntimeError as exc:
        err = find_user_error(exc)
    assert str(err).startswith("cannot write /x/checkpoints/last.ckpt: No space left on device")
    assert find_user_error(RuntimeError("a bug")) is None


def test_wandb_online_without_credentials_is_refused(monkeypatch, tmp_path):
    from bench.loggers import wandb_logger

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="W&B online logging needs credentials: set WANDB_API_KEY"):
        wandb_logger(mode="online", save_dir=str(tmp_path))


# -- issue 42, class 7: inputs that were still unguarded ------------------------------------------

@pytest.mark.parametrize("override,message", [
    ("dataset.n_users=0", "dataset.n_users=0 is out of range: use an integer >= 1"),
    ("dataset.min_per_user=200", "dataset.min_per_user=200 exceeds dataset.n_items=80"),
    ("dataset.test_fraction=0", "dataset.test_fraction=0 is out of range: use a share in (0, 1)"),
    ("dataset.test_fraction=1.5", "dataset.test_fraction=1.5 is out of range: use a share in (0, 1)"),
    ("dataset.test_fraction=-0.5", "dataset.test_fraction=-0.5 is out of range: use a share in (0, 1)"),
    ("train.divergence_factor=0.5", "train.divergence_factor=0.5 is out of range: use null (off) or a number > 1"),
])
def test_data_settings_out_of_range_stop_before_anything_is_built(override, message, tiny, make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(message)):
        train_and_test(make_cfg([*tiny, override], tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_custom_files_settings_are_checked_too(make_cfg, tmp_path):
    for override, message in (("dataset.min_rating=abc", "dataset.min_rating=abc is out of range: use null"),
                              ("dataset.k_core=0", "dataset.k_core=0 is out of range: use an integer >= 1")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            train_and_test(make_cfg(["dataset=custom", "dataset.path=x.tsv", override], tmp_path))


def test_ids_are_read_as_written_blanks_around_them_aside(tmp_path):
    path = _csv(tmp_path, ["user,item"] + [f"u{u},{i}" for u in range(6) for i in range(1, 6)]
                + ["u0, 5", "u1,5 ", "u2,NA", "u3,null", "u4,NA"])
    frame = CustomFile(str(path), k_core=1).read_frame()
    # " 5" and "5 " are item 5, as "5" is: the catalogue does not double
    assert sorted(set(frame["item"])) == ["1", "2", "3", "4", "5", "NA", "null"]
    data = CustomFile(str(path), k_core=1).load()
    assert data.n_items == 7 and data.n_users == 6


def test_a_nan_and_an_empty_field_name_their_line(tmp_path):
    nan = _csv(tmp_path, ["user,item,rating", "u1,i1,4", "u1,i2,nan"], "nan.csv")
    with pytest.raises(DataError, match=r"nan\.csv:3: malformed row 'u1,i2,nan': field 3 \('nan'\) is not a finite"):
        CustomFile(str(nan), k_core=1, min_rating=1).load()
    empty = _csv(tmp_path, ["user,item", "u1,i1", "u2, "], "empty.csv")
    with pytest.raises(DataError, match=r"empty\.csv:3: malformed row 'u2, ': field 2 \(''\) is empty"):
        CustomFile(str(empty), k_core=1).load()


def test_a_file_of_junk_fails_on_its_first_lines_without_reading_the_rest(tmp_path, monkeypatch):
    import time

    from bench.datasets import custom

    junk = tmp_path / "junk.csv"
    with junk.open("w") as f:
        f.write("user,item,rating\nu1,i1,5\nthis line; is junk\n")
        f.write(("x" * 99 + "\n") * 400_000)  # 40 MB more
    read_whole = []
    real = custom.CustomFile._decode
    monkeypatch.setattr(custom.CustomFile, "_decode", lambda self, data: read_whole.append(len(data)) or
                        real(self, data))
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"junk\.csv:3: malformed row 'this line; is junk': expected at least 3 fields"):
        CustomFile(str(junk), k_core=1).load()
    assert max(read_whole) <= custom.HEAD_BYTES  # only the first megabyte was decoded and parsed
    assert time.perf_counter() - start < 10
    one_line = tmp_path / "one_line.tsv"
    one_line.write_bytes(b"x\t" * (1 << 20))
    with pytest.raises(DataError, match="the first line is over 1 MB long; this is no interaction file"):
        CustomFile(str(one_line), k_core=1).load()


@pytest.mark.slow
def test_a_sweep_job_that_would_fail_is_named_before_any_job_starts(tiny, run_cli, tmp_path):
    proc = run_cli(["-m", *tiny, "logger=none", "loss=slk,sl", "loss.k=10", "hydra.sweep.dir=sw"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: 1 of 2 jobs would fail before training; no job was started:" in proc.stderr
    assert "job 1 (loss=sl): Could not override 'loss.k'; To append to your config use +loss.k=10" in proc.stderr
    proc = run_cli(["-m", *tiny, "logger=none", "optimizer.lr=0.01,-1", "hydra.sweep.dir=sw"], tmp_path)
    assert proc.returncode == 2 and "job 1 (optimizer.lr=-1): optimizer.lr=-1 is out of range" in proc.stderr
    assert not (tmp_path / "sw").exists()  # nothing ran, nothing was written


def test_a_byte_order_mark_and_quoted_fields_are_read_as_spreadsheets_write_them(tmp_path):
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeffuser\titem\trating\nu1\ti1\t4\nu1\ti2\t3\n".encode())
    assert list(CustomFile(str(bom), k_core=1).read_frame()["rating"]) == [4.0, 3.0]
    quoted = _csv(tmp_path, ["user,item,rating", '"0","it,24",3', '"1","it,25",x'], "q.csv")
    with pytest.raises(DataError, match=r"q\.csv:3: malformed row .*: field 3 \('x'\) is not a number"):
        CustomFile(str(quoted), k_core=1).load()


def test_a_crafted_ledger_is_refused_in_one_line(tmp_path):
    from bench.records.ledger import read_ledger

    header = "seed,setting,data,test/ndcg@20\n"
    for name, content, message in (
            ("bytes", header.encode() + b"0,loss=sl,\xff,0.1\n", r"line 2: not UTF-8 text"),
            ("long", (header + "0,loss=sl," + "x" * 200_000 + ",0.1\n").encode(), r"line \d+: not a CSV row"),
            ("extra", (header + "0,loss=sl,abc,0.1,surplus\n").encode(), r"line 2: 4 columns in the header")):
        path = tmp_path / name / "runs.csv"
        path.parent.mkdir()
        path.write_bytes(content)
        with pytest.raises(BenchError, match=message):
            read_ledger(path)


@pytest.mark.slow
def test_bad_options_of_the_reading_commands_are_one_line(tmp_path, run_cli, tiny):
    proc = run_cli([*tiny, "logger=none", "trainer.max_epochs=1", "hydra.run.dir=run"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for module, args, text in (  # each: exit 2, at most 3 lines, no traceback
            ("bench.report", ["run", "--confidence", "-1", "--no-plots"], "--confidence -1.0 is out of range"),
            ("bench.report", ["run", "--alpha", "1", "--no-plots"], "--alpha 1.0 is out of range: use a share"),
            ("bench.report", ["run", "--out", "run/results.json", "--no-plots"],
             "is a file; the report writes a folder"),
            ("bench.thresholds", ["run", "--ks", "0"], "argument --ks: 0 is out of range"),
            ("bench.thresholds", ["run", "--ks", "5", "--users", "0"], "argument --users: 0 is out of range"),
            ("bench", [*tiny, "model=nonexist", "hydra.run.dir=x"],
             "model=nonexist is not an option of model; choose one of gnn,"),
            ("bench", [*tiny, "hydra.output_subdir=.hydra", "hydra.run.dir=run"], "bench writes .hydra/ itself"),
            ("bench", [*tiny, "+hydra.job_logging.root.level=DEBUG", "hydra.run.dir=run"], "bench writes bench.log"),
            ("bench", [*tiny, "dataset.n_users=[1"], "is no override Hydra can read"),
            ("bench", [*tiny, "hydra/launcher=nope"], "hydra/launcher=nope is not an option of hydra/launcher"),
            ("bench", [*tiny, "hydra.run.dir=run/results.json"], "hydra.run.dir=run/results.json is a file"),
            ("bench", ["resume="], "resume= needs a run folder"),
            ("bench", [*tiny, "trainer.devices=0", "hydra.run.dir=d0"], "the trainer refused its settings"),
            ("bench.thresholds", ["run", "--ks", "5", "--out", "run/results.json"],
             "is a file; the study writes"),
            ("bench.thresholds", ["run", "--ks", "500"], "--ks 500 exceeds the run's 80 items"),
            ("bench.thresholds", ["run", "--ks", "5", "--tau-w", "-1"], "argument --tau-w: -1.0 is out of range")):
        proc = run_cli(args, tmp_path, module=module)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (module, args, proc.stderr[-1500:])
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) <= 3 and text in proc.stderr, (module, args, proc.stderr[-1500:])
