"""split_validation: the paper's per-user validation split of the training pairs."""

import torch

from bench.datasets import Interactions, IRBenchmark, split_validation


def test_validation_split_follows_the_paper_protocol(shared_data):
    data = IRBenchmark("health", data_dir=str(shared_data), download=False).load()
    s0 = split_validation(data, 0.1, seed=0)
    n_train = torch.bincount(data.train[:, 0], minlength=data.n_users)
    expected = torch.clamp((n_train * 0.1).floor().long(), min=1)  # floor(10%), at least one
    assert torch.equal(s0.valid.degrees(), expected)
    assert s0.train.nnz + s0.valid.nnz == data.train.shape[0]
    union = torch.cat([s0.train.to_pairs(), s0.valid.to_pairs()])
    assert torch.equal(torch.unique(union, dim=0), data.train)
    assert torch.equal(split_validation(data, 0.1, seed=0).valid.indices, s0.valid.indices)
    assert not torch.equal(split_validation(data, 0.1, seed=1).valid.indices, s0.valid.indices)


def test_user_with_one_training_item_keeps_it():
    pairs = torch.tensor([[0, 0], [1, 0], [1, 1], [1, 2]])
    data = Interactions("t", 2, 3, pairs, torch.tensor([[0, 1]]))
    s = split_validation(data, 0.1, seed=0)
    assert s.train.degrees().tolist() == [1, 2] and s.valid.degrees().tolist() == [0, 1]
