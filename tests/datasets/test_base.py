"""CSR: per-user item lists, gathered without Python loops; per-device copies."""

import torch

from bench.datasets import CSR


def test_csr_gather_rows_matches_python():
    pairs = torch.tensor([[0, 3], [0, 1], [2, 0], [2, 2], [2, 4], [3, 1]])
    csr = CSR.from_pairs(pairs, 4, 5)
    rows, items = csr.gather_rows(torch.tensor([2, 1, 0]))
    assert rows.tolist() == [0, 0, 0, 2, 2] and items.tolist() == [0, 2, 4, 1, 3]


def test_csr_on_its_own_device_is_itself():
    csr = CSR.from_pairs(torch.tensor([[0, 1], [1, 0]]), 2, 2)
    assert csr.on("cpu") is csr and csr.on(torch.device("cpu")) is csr
