"""The paper's real splits (ir-benchmark proc.zip): counts, checksums, missing files, malformed rows."""

import shutil
import zipfile

import pytest
import torch

from bench.datasets import IRBenchmark, ir_benchmark
from bench.datasets.ir_benchmark import read_proc_zip
from bench.errors import DataError


def test_health_zip_has_the_published_counts(shared_data):
    data = IRBenchmark("health", data_dir=str(shared_data), download=False).load()
    assert (data.n_users, data.n_items) == (1974, 1200)
    assert data.train.shape == (37784, 2) and data.test.shape == (10405, 2)
    assert len(torch.unique(data.train[:, 0])) == 1974 and len(torch.unique(data.test[:, 1])) == 1187
    # the split is the paper's: no test pair is a training pair
    keys = lambda p: p[:, 0] * data.n_items + p[:, 1]
    assert not torch.isin(keys(data.test), keys(data.train)).any()


def test_checksum_mismatch_is_reported(shared_data, tmp_path):
    local = tmp_path / "data" / "ir-benchmark" / "amazon2014-health"
    local.mkdir(parents=True)
    shutil.copy(shared_data / "ir-benchmark" / "amazon2014-health" / "proc.zip", local / "proc.zip")
    with open(local / "proc.zip", "ab") as f:
        f.write(b"tampered")
    with pytest.raises(DataError, match=r"checksum mismatch for .*proc\.zip: expected 56f9e4b3.*"
                                        r"download it again from https://"):
        IRBenchmark("health", data_dir=str(tmp_path / "data"), download=False).load()


def test_missing_file_offline_names_the_file_url_and_destination(tmp_path, monkeypatch):
    monkeypatch.setattr(ir_benchmark, "URL", "http://127.0.0.1:9/{commit}/{source}/proc.zip")  # refused at once
    with pytest.raises(DataError) as err:
        IRBenchmark("electronic", data_dir=str(tmp_path / "empty"), cache_dir=str(tmp_path / "cache")).load()
    msg = str(err.value)
    assert "ir-benchmark/amazon2014-electronic/proc.zip not found" in msg
    assert "download failed" in msg and "http://127.0.0.1:9/" in msg
    assert f"put it at {tmp_path / 'empty' / 'ir-benchmark' / 'amazon2014-electronic' / 'proc.zip'}" in msg
    assert "\n" not in msg


def _zip(path, train, test, summary=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("train.tsv", "user_procid\titem_procid\n" + train)
        z.writestr("test.tsv", "user_procid\titem_procid\n" + test)
        if summary:
            z.writestr("summary.txt", summary)
    return path


def test_malformed_row_points_at_file_and_line(tmp_path):
    path = _zip(tmp_path / "proc.zip", "0\t1\n0\t2\n1\tx\n", "0\t0\n")
    with pytest.raises(DataError, match=r"proc\.zip:train\.tsv:4: malformed row '1\\tx': "
                                        r"field 2 \('x'\) is not an integer"):
        read_proc_zip(path, "fixture")
    path = _zip(tmp_path / "p2.zip", "0\t1\n0\n", "0\t0\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: malformed row '0'"):
        read_proc_zip(path, "fixture")


def test_summary_mismatch_is_reported(tmp_path):
    summary = "Number of users: 2\nNumber of train interactions: 3\n"
    path = _zip(tmp_path / "proc.zip", "0\t1\n1\t0\n", "0\t0\n", summary)
    with pytest.raises(DataError, match="n_train is 2 but summary.txt says 3"):
        read_proc_zip(path, "fixture")
