"""Sequences: leave-one-out by time, and the next-item pairs SASRec trains on."""

import torch

from bench.contracts import TrainData
from bench.datasets import CustomFile
from bench.datasets.sequences import leave_one_out
from bench.models import SASRec


def test_leave_one_out_by_time_on_a_fixture(tmp_path):
    f = tmp_path / "s.tsv"
    f.write_text("user\titem\ttime\na\tx\t3\na\ty\t1\na\tz\t2\na\tw\t9\nb\tx\t5\nb\ty\t4\n")
    data = CustomFile(str(f), k_core=1).load()  # users a=0, b=1; items w=0, x=1, y=2, z=3
    splits, seq = leave_one_out(data)
    # a: y(1) z(2) x(3) w(9) -> train y, z; valid x; test w.  b has 2 interactions: all train
    assert seq.items.tolist() == [2, 3, 2, 1] and seq.indptr.tolist() == [0, 2, 4]
    assert seq.valid_item.tolist() == [1, -1]
    assert splits.test.to_pairs().tolist() == [[0, 0]] and splits.valid.to_pairs().tolist() == [[0, 1]]
    # SASRec trains on the next-item pairs a: y -> z and b: y -> x, nothing else
    model = SASRec(2, 4, dim=8, max_len=3)
    model.bind(TrainData(n_users=2, n_items=4, train=splits.train, n_pairs=0, sequences=seq))
    queries = model.encode(torch.tensor([[0, 0], [1, 0]]))
    assert queries.users.tolist() == [0, 1] and queries.items.tolist() == [3, 1] and queries.pair_ids.tolist() == [1, 3]
    # a user's state at test includes the validation item; at validation it does not (4 = padding)
    assert model._window(seq.indptr[:1], seq.indptr[1:2], seq.valid_item[:1]).tolist() == [[2, 3, 1]]
    assert model._window(seq.indptr[:1], seq.indptr[1:2]).tolist() == [[4, 2, 3]]
