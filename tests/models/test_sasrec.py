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


def test_the_cpu_dropout_is_inverted_dropout_with_a_uniform_mask():
    from bench.models.sasrec import UniformMaskDropout

    torch.manual_seed(0)
    x = torch.randn(200, 50, 50, requires_grad=True)
    drop = UniformMaskDropout(0.3)
    y = drop(x)
    kept = y != 0
    n = x.numel()
    # kept share within 5 binomial standard deviations of 0.7; kept entries scaled by 1 / 0.7
    assert abs(kept.float().mean().item() - 0.7) < 5 * (0.7 * 0.3 / n) ** 0.5
    assert torch.allclose(y[kept], x[kept] / 0.7)
    y.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.7)  # the gradient flows through kept entries only
    drop.eval()
    assert torch.equal(drop(x), x)
    assert torch.equal(UniformMaskDropout(0.0)(x), x) and not UniformMaskDropout(1.0)(x).any()
