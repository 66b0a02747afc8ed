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


def test_packed_training_encodes_the_same_pairs_and_states_as_the_padded_one():
    """Several users' histories in one row, each seeing only its own past at its own positions:
    with dropout off every pair's state equals the padded encoding's, in the same order."""
    from bench.datasets.sequences import Sequences

    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([2, 7, 3, 12, 1, 5, 9, 2, 4, 6, 3])  # 12 > max_len + 1: the window is cut
    items = torch.randint(0, 30, (int(lengths.sum()),), generator=gen)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    seq = Sequences(items=items, indptr=indptr, valid_item=torch.full((11,), -1))
    torch.manual_seed(0)
    padded = SASRec(11, 30, dim=16, max_len=8, layers=2, heads=2)
    packed = SASRec(11, 30, dim=16, max_len=8, layers=2, heads=2, pack=True)
    packed.load_state_dict(padded.state_dict())
    for model in (padded, packed):
        model.bind(TrainData(n_users=11, n_items=30, train=torch.zeros(0, 2, dtype=torch.long), n_pairs=0,
                             sequences=seq))
    rows = torch.stack([torch.tensor([3, 0, 5, 1, 9, 4, 6, 2, 10, 7]), torch.zeros(10, dtype=torch.long)], 1)
    a = padded.eval().encode(rows)
    starts, ends = indptr[rows[:, 0]], indptr[rows[:, 0] + 1]
    vectors, target_pos = packed.eval()._encode_packed(starts, ends)
    torch.testing.assert_close(target_pos, a.pair_ids)
    torch.testing.assert_close(vectors, a.vectors, atol=1e-5, rtol=1e-5)
    # in training (dropout on) the same pairs in the same order
    b = packed.train().encode(rows)
    assert torch.equal(b.users, a.users) and torch.equal(b.items, a.items) and torch.equal(b.pair_ids, a.pair_ids)
    assert b.vectors.shape == a.vectors.shape and b.vectors.requires_grad


def test_a_separate_output_table_scores_items_and_leaves_the_shared_models_weights_as_they_were(tmp_path):
    """gSASRec's reuse_item_embeddings=False: items are scored with their own table, the input table only
    embeds histories; the shared-table model's initial weights do not move when the option exists."""
    f = tmp_path / "s.tsv"
    f.write_text("user\titem\ttime\na\tx\t3\na\ty\t1\na\tz\t2\na\tw\t9\nb\tx\t5\nb\ty\t4\nb\tz\t6\n")
    splits, seq = leave_one_out(CustomFile(str(f), k_core=1).load())
    data = TrainData(n_users=2, n_items=4, train=splits.train, n_pairs=0, sequences=seq)
    torch.manual_seed(0)
    shared = SASRec(2, 4, dim=8, max_len=3)
    torch.manual_seed(0)
    separate = SASRec(2, 4, dim=8, max_len=3, separate_output=True)
    # every weight but the new table drawn as before (the new table is made last)
    mine = {k: v for k, v in separate.state_dict().items() if not k.startswith("out_emb.")}
    assert mine.keys() == shared.state_dict().keys()
    assert all(torch.equal(v, shared.state_dict()[k]) for k, v in mine.items())
    assert separate.out_emb is not None and not torch.equal(separate.out_emb.weight, separate.item_emb.weight[:4])
    for model in (shared, separate):
        model.bind(data)
    users = torch.arange(2)
    window = separate._window(seq.indptr[:-1], seq.indptr[1:])
    separate.eval()
    states = separate.encode_all(window)[:, -1]
    torch.testing.assert_close(separate.full_scorer("valid")(users), states @ separate.out_emb.weight.T)
    assert not torch.allclose(separate.full_scorer("valid")(users), shared.full_scorer("valid")(users))
    # training scores items with the output table, packed or padded rows alike
    rows = torch.stack([users, users, users], dim=1)
    separate.train()
    for pack in (True, False):
        separate.pack = pack
        assert separate.encode(rows).item_emb is separate.out_emb.weight
    # the input table's gradient comes through the states only: none for items in no history
    in_history = torch.zeros(4, dtype=torch.bool)
    in_history[window[window < 4]] = True
    assert in_history.any() and not in_history.all()
    for model in (shared, separate):
        model.eval()
        model.score_users(users).sum().backward()
    moved = separate.item_emb.weight.grad[:4].abs().sum(1) > 0
    assert torch.equal(moved, in_history)
    assert (shared.item_emb.weight.grad[:4].abs().sum(1) > 0).all()  # shared: every item is also scored
    assert (separate.out_emb.weight.grad.abs().sum(1) > 0).all()
