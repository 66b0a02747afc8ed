"""Custom interaction files: k-core filtering, de-duplication, split, errors, RecBole .inter files."""

import pytest
import torch

from bench.datasets import CustomFile
from bench.errors import DataError


def test_custom_tsv_kcore_dedup_and_split(tmp_path):
    rows = ["user\titem\ttime"]
    # users a, b, c each rate items 1..3 (3-core); user d rates only item 1 and item 9 once
    for u in "abc":
        for i in (1, 2, 3):
            rows.append(f"{u}\t{i}\t{ord(u) * 10 + i}")
    rows += ["a\t1\t5", "d\t1\t7", "d\t9\t8"]  # a duplicate (earlier time) and a sparse user
    path = tmp_path / "my.tsv"
    path.write_text("\n".join(rows) + "\n")
    data = CustomFile(str(path), k_core=3, test_fraction=0.34, split_seed=0).load()
    assert (data.n_users, data.n_items) == (3, 3)  # d and item 9 filtered, repeatedly
    assert data.train.shape[0] + data.test.shape[0] == 9
    assert torch.bincount(data.test[:, 0]).tolist() == [1, 1, 1]
    # the duplicate (a, 1) keeps its earliest timestamp, 5
    all_pairs = torch.cat([data.train, data.test])
    all_times = torch.cat([data.train_timestamps, data.test_timestamps])
    assert all_times[(all_pairs[:, 0] == 0) & (all_pairs[:, 1] == 0)].item() == 5.0


def test_custom_errors(tmp_path):
    with pytest.raises(DataError, match="dataset.path"):
        CustomFile(None)
    with pytest.raises(DataError, match="not found"):
        CustomFile(str(tmp_path / "nope.csv")).load()
    bad = tmp_path / "bad.csv"
    bad.write_text("u1,i1,100\nu2,i2,yesterday\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: malformed row 'u2,i2,yesterday': "
                                        r"field 3 \('yesterday'\) is not a number"):
        CustomFile(str(bad), k_core=1).load()


def test_recbole_inter_file(shared_data):
    data = CustomFile(str(shared_data / "ml-100k" / "ml-100k.inter"), k_core=1, test_fraction=0.2).load()
    assert (data.n_users, data.n_items) == (943, 1682)
    assert data.train.shape[0] + data.test.shape[0] == 100_000
    assert data.train_timestamps is not None and data.train_timestamps.min() > 8e8
