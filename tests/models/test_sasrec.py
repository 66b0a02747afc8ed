"""SASRec: causal attention, finite states with padding, the user state is the last position's."""

import torch

from bench.contracts import TrainData
from bench.datasets import CustomFile
from bench.datasets.sequences import leave_one_out
from bench.models import SASRec


def test_sasrec_is_causal():
    torch.manual_seed(0)
    model = SASRec(5, 20, dim=16, max_len=6, layers=2, heads=2).eval()
    window = torch.tensor([[20, 20, 3, 7, 1, 9]])  # left-padded with the padding id
    changed = window.clone()
    changed[0, 4] = 12
    a, b = model.encode_all(window), model.encode_all(changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])  # positions before the change are untouched
    assert not torch.allclose(a[:, 4:], b[:, 4:])
    assert torch.isfinite(a).all()  # padded positions attend to themselves: no NaN


def test_evaluation_scores_the_state_after_the_whole_history(tmp_path):
    f = tmp_path / "s.tsv"
    f.write_text("user\titem\ttime\na\tx\t3\na\ty\t1\na\tz\t2\na\tw\t9\nb\tx\t5\nb\ty\t4\nb\tz\t6\n")
    splits, seq = leave_one_out(CustomFile(str(f), k_core=1).load())
    torch.manual_seed(0)
    model = SASRec(2, 4, dim=8, max_len=3).eval()
    model.bind(TrainData(n_users=2, n_items=4, train=splits.train, n_pairs=0, sequences=seq))
    users = torch.arange(2)
    starts, ends = seq.indptr[:-1], seq.indptr[1:]
    items = model.item_emb.weight[:4]
    for stage, extra in (("valid", None), ("test", seq.valid_item)):
        states = model.encode_all(model._window(starts, ends, extra))[:, -1]
        torch.testing.assert_close(model.full_scorer(stage)(users), states @ items.T)  # dot scores
    torch.testing.assert_close(model.score_users(users), model.full_scorer("valid")(users))
