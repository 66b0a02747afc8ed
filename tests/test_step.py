"""The training step (bench/step.py) and the scoring contract it relies on (bench/contracts.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench.app import CONFIG_DIR
from bench.contracts import GATHER_COST_IN_MACS, prefer_full_rows, score_candidates, take_rows
from bench.errors import ConfigError
from bench.losses import build as build_loss
from bench.losses.base import logsumexp_negatives, mean_over_negatives, row_mean
from bench.models import MF, XSimGCL
from bench.run import train_and_test
from bench.sampling import UniformNegativeSampler, make_generator
from bench.step import after_update, optimise, train_step

LOSS_NAMES = sorted(p.stem for p in (Path(CONFIG_DIR) / "loss").glob("*.yaml"))


def _rows(train_data, seed=0, n=24):
    pairs = train_data.train.to_pairs()
    pick = torch.randperm(pairs.shape[0], generator=torch.Generator().manual_seed(seed))[:n]
    return torch.cat([pairs[pick], pick[:, None]], 1)


@pytest.fixture
def data(train_data):
    gen = torch.Generator().manual_seed(0)
    positives = {u: torch.randperm(40, generator=gen)[:5].tolist() for u in range(30)}
    return train_data(30, 40, positives)


@pytest.mark.parametrize("cosine", [True, False])
@pytest.mark.parametrize("m", [2, 39])  # below and above the gather/matmul break-even of 40 items
def test_both_scoring_paths_equal_the_formula(cosine, m):
    assert prefer_full_rows(m, 40) == (m * GATHER_COST_IN_MACS >= 40)
    gen = torch.Generator().manual_seed(1)
    queries, items_emb = torch.randn(7, 8, generator=gen), torch.randn(40, 8, generator=gen)
    items = torch.randint(0, 40, (7, m), generator=gen)
    q = F.normalize(queries, dim=1) if cosine else queries
    table = F.normalize(items_emb, dim=1) if cosine else items_emb
    want = torch.stack([table[items[r]] @ q[r] for r in range(7)])
    assert torch.allclose(score_candidates(q, items_emb, items, cosine), want, atol=1e-6)


def _row_gather_gradient(gather, threads: int, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    try:
        gen = torch.Generator().manual_seed(3)
        table = torch.randn(500, 16, generator=gen, requires_grad=True)
        ids = torch.randint(0, 500, (64, 300), generator=gen)  # ~38 repeats of each id
        rows = gather(table, ids)
        (grad,) = torch.autograd.grad((rows * torch.randn(64, 300, 16, generator=gen)).sum(), table)
        return rows.detach(), grad
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=True)


def test_take_rows_is_advanced_indexing_to_the_last_bit_and_thread_independent():
    # the step gathers item rows with index_select (faster on CPU); runs must not change: with
    # the runs' deterministic kernels its rows and accumulated gradient equal table[ids]'s
    # exactly, at one thread and at two
    index = lambda table, ids: table[ids]
    for threads in (1, 2):
        rows, grad = _row_gather_gradient(take_rows, threads, deterministic=True)
        want_rows, want_grad = _row_gather_gradient(index, threads, deterministic=True)
        assert rows.shape == (64, 300, 16) and torch.equal(rows, want_rows)
        assert torch.equal(grad, want_grad)
    # and without them it still accumulates in id order (advanced indexing's backward does not
    # at two threads, which is why runs default to deterministic kernels)
    assert torch.equal(_row_gather_gradient(take_rows, 2, deterministic=False)[1], want_grad)


def test_train_step_scores_the_drawn_negatives_and_builds_the_loss_inputs(data):
    torch.manual_seed(0)
    model, loss = MF(30, 40, dim=8), build_loss("sl", tau=0.5, n_negatives=6)
    rows = _rows(data)
    sampler = UniformNegativeSampler(data.train)
    out = train_step(model, loss, rows, sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2))
    batch = out.batch
    negatives = sampler.sample(rows[:, 0], 6, make_generator("cpu", 0, 0, 0, 2))
    assert torch.equal(batch.negatives, negatives)  # the loss's N, drawn from the generator given
    assert torch.equal(batch.users, rows[:, 0]) and torch.equal(batch.items, rows[:, 1])
    assert torch.equal(batch.pair_ids, rows[:, 2]) and batch.scorer is model
    full = model.score_users(rows[:, 0]).detach()
    assert torch.allclose(batch.pos, full.gather(1, rows[:, 1:2]).squeeze(1), atol=1e-6)
    assert torch.allclose(batch.neg, full.gather(1, negatives), atol=1e-6)
    assert torch.allclose(batch.full_scores(torch.tensor([3, 0])), full[[3, 0]], atol=1e-6)
    want = torch.logsumexp((batch.neg - batch.pos[:, None]) / 0.5, dim=1).mean()
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-6) and out.extra_loss is None
    assert out.size == 24 and out.loss.requires_grad


def test_given_negatives_are_used_as_they_are_and_a_step_needs_some(data):
    model, loss = MF(30, 40, dim=8), build_loss("bpr")
    rows = _rows(data)
    negatives = torch.zeros(24, 1, dtype=torch.long) + 7
    out = train_step(model, loss, rows, negatives=negatives)
    assert torch.equal(out.batch.negatives, negatives)
    with pytest.raises(ValueError, match="needs negatives, or a sampler and a generator"):
        train_step(model, loss, rows)


def test_the_backbone_extra_term_joins_the_loss(data):
    torch.manual_seed(0)
    model, loss = XSimGCL(30, 40, dim=8, cl_weight=0.5), build_loss("sl", n_negatives=5)
    model.bind(data)
    model.train()
    out = train_step(model, loss, _rows(data), negatives=torch.randint(0, 40, (24, 5)))
    assert out.extra_loss is not None and out.extra_loss.item() > 0
    assert out.loss.item() == pytest.approx(out.rec_loss.item() + out.extra_loss.item(), rel=1e-6)


def test_after_update_refreshes_slk_thresholds_with_the_updated_model(data):
    torch.manual_seed(0)
    model = MF(30, 40, dim=8)
    loss = build_loss("slk", k=3, t_beta=1, estimator="exact", n_negatives=5, diagnostics_users=0)
    loss.bind(data)
    loss.on_train_epoch_start(0)  # t_beta = 1: every epoch refreshes
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    rows = _rows(data)
    before = [p.detach().clone() for p in model.parameters()]
    out = optimise(model, loss, opt, rows, negatives=torch.randint(0, 40, (24, 5)))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the optimiser stepped
    users = rows[:, 0].unique()
    exact = torch.topk(model.score_users(users).detach(), 3, dim=1).values[:, -1]
    assert torch.allclose(loss.beta[users], exact)  # beta from the model after the step
    untouched = torch.ones(30, dtype=torch.bool)
    untouched[users] = False
    assert (loss.beta[untouched] == 0).all()
    loss.beta.zero_()
    after_update(loss, out)  # the hook alone does the same
    assert torch.allclose(loss.beta[users], exact)
    assert [t.data_ptr() for t, _ in loss.synced_rows(out.batch)] == [loss.beta.data_ptr()]


# shared negatives ---------------------------------------------------------------------
def test_shared_negatives_are_one_draw_with_each_row_s_own_positives_masked(data):
    torch.manual_seed(0)
    model, loss = MF(30, 40, dim=8), build_loss("sl", tau=0.5, n_negatives=60)
    rows = _rows(data)
    sampler = UniformNegativeSampler(data.train)
    out = train_step(model, loss, rows, sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2), mode="shared")
    batch = out.batch
    draw = sampler.sample_shared(60, make_generator("cpu", 0, 0, 0, 2))
    assert torch.equal(batch.negatives, draw.expand(24, -1))  # one draw, every row
    positives = data.train.dense_rows(rows[:, 0])
    assert torch.equal(batch.neg_valid, ~positives[:, draw])
    assert (~batch.neg_valid).any()  # the draw does hit positives (5 of 40 items per user)
    for r in range(24):  # a row's own positive, wherever it sits in the draw, is never its negative
        assert not batch.neg_valid[r, draw == rows[r, 1]].any()
    full = model.score_users(rows[:, 0]).detach()
    assert torch.allclose(batch.pos, full.gather(1, rows[:, 1:2]).squeeze(1), atol=1e-6)
    want = torch.where(batch.neg_valid, full[:, draw], torch.full_like(full[:, draw], float("-inf")))
    assert torch.equal(torch.isinf(batch.neg), torch.isinf(want))
    assert torch.allclose(batch.neg[batch.neg_valid], want[batch.neg_valid], atol=1e-6)
    # SL over each row's valid columns only
    terms = [torch.logsumexp((full[r, draw][batch.neg_valid[r]] - batch.pos[r]) / 0.5, 0) for r in range(24)]
    assert out.loss.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("groups, size", [(4, 6), (5, 5), (24, 1), (100, 1)])  # 24 rows; 5 -> 5 groups of 5
@pytest.mark.parametrize("n", [1, 3, 60])  # bmm (padded rows with n = 1) or one full matmul (score_groups)
def test_shared_groups_give_each_group_of_rows_its_own_draw(data, groups, size, n):
    torch.manual_seed(0)
    model, loss = MF(30, 40, dim=8), build_loss("sl", tau=0.5, n_negatives=n)
    rows = _rows(data)
    sampler = UniformNegativeSampler(data.train)
    gen = make_generator("cpu", 0, 0, 0, 2)
    out = train_step(model, loss, rows, sampler=sampler, generator=gen, mode="shared", groups=groups)
    batch = out.batch
    n_groups = -(-24 // size)
    draws = sampler.sample_shared(n, make_generator("cpu", 0, 0, 0, 2), groups=n_groups)
    for r in range(24):  # row r takes draw r // size, its own positives masked
        assert torch.equal(batch.negatives[r], draws[r // size])
        own = torch.tensor([int(i) in set(data.train.indices[data.train.indptr[rows[r, 0]]:
                                                             data.train.indptr[rows[r, 0] + 1]].tolist())
                            for i in draws[r // size]])
        assert torch.equal(batch.neg_valid[r], ~own)
    full = model.score_users(rows[:, 0]).detach()
    want = full.gather(1, batch.negatives)
    assert torch.allclose(batch.pos, full.gather(1, rows[:, 1:2]).squeeze(1), atol=1e-6)
    assert torch.isinf(batch.neg[~batch.neg_valid]).all()
    assert torch.allclose(batch.neg[batch.neg_valid], want[batch.neg_valid], atol=1e-6)
    terms = [torch.logsumexp((want[r][batch.neg_valid[r]] - batch.pos[r]) / 0.5, 0) if batch.neg_valid[r].any()
             else torch.tensor(0.0) for r in range(24)]
    assert out.loss.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_one_group_is_the_one_shared_draw_and_groups_must_be_positive(data):
    model, loss = MF(30, 40, dim=8), build_loss("sl", tau=0.5, n_negatives=60)
    sampler = UniformNegativeSampler(data.train)
    one = train_step(model, loss, _rows(data), sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2),
                     mode="shared", groups=1)
    assert torch.equal(one.batch.negatives, sampler.sample_shared(60, make_generator("cpu", 0, 0, 0, 2)).expand(24, -1))
    with pytest.raises(ConfigError, match=r"train.shared_groups=0 is out of range: use an integer >= 1"):
        train_step(model, loss, _rows(data), sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2),
                   mode="shared", groups=0)


def test_bpr_keeps_per_pair_negatives_in_shared_mode(data):
    model, loss = MF(30, 40, dim=8), build_loss("bpr", n_negatives=1)
    out = train_step(model, loss, _rows(data), sampler=UniformNegativeSampler(data.train),
                     generator=make_generator("cpu", 0, 0, 0, 2), mode="shared")
    assert out.batch.neg_valid is None and out.batch.negatives.shape == (24, 1)
    assert out.batch.negatives.unique().numel() > 1  # not one negative for the whole batch
    with pytest.raises(ConfigError, match="unknown train.negatives 'both'; use per_pair or shared"):
        train_step(model, loss, _rows(data), negatives=torch.zeros(24, 1, dtype=torch.long), mode="both")


def test_masked_reductions_skip_masked_columns_and_empty_rows():
    x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3], requires_grad=True)
    valid = torch.tensor([[True, True, False], [False, False, False]])
    out = logsumexp_negatives(x, valid)
    assert out.tolist() == pytest.approx([math.log(math.exp(1) + math.exp(2)), 0.0])
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad[1].abs().sum() == 0  # an empty row gives no gradient
    y = torch.tensor([[1.0, 3.0, 100.0], [5.0, 7.0, 9.0]])
    assert row_mean(y, valid).tolist() == [2.0, 0.0] and row_mean(y, None).tolist() == pytest.approx([104 / 3, 7.0])
    assert mean_over_negatives(y, valid).item() == 2.0 and mean_over_negatives(y, None).item() == pytest.approx(125 / 6)


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_every_loss_trains_with_shared_negatives(loss, tiny, make_cfg, tmp_path, loss_settings):
    # sampled ranks: exact ones would score full rows, the path shared draws exist to avoid
    extra = ["loss.ranks=sampled", "loss.n_negatives=50"] if loss.startswith("lambda") else loss_settings(loss)
    res = train_and_test(make_cfg([*tiny, "train.negatives=shared", f"loss={loss}", "logger=none", *extra], tmp_path))
    assert res.status == "completed" and 0 < res.test["ndcg@20"] <= 1
    assert res.config["train"]["negatives"] == "shared"


def test_distinct_negatives_reach_the_step_and_a_run(data, tiny, make_cfg, tmp_path):
    model, loss = MF(30, 40, dim=8), build_loss("sl", n_negatives=30)
    sampler = UniformNegativeSampler(data.train)
    rows = _rows(data)
    out = train_step(model, loss, rows, sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2), distinct=True)
    assert all(len(set(row)) == 30 for row in out.batch.negatives.tolist())  # 30 of each user's 35 non-positives
    assert not data.train.dense_rows(rows[:, 0]).gather(1, out.batch.negatives).any()
    shared = train_step(model, loss, rows, sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2),
                        mode="shared", groups=4, distinct=True)
    assert all(len(set(row)) == 30 for row in shared.batch.negatives.tolist())
    runs = [train_and_test(make_cfg([*tiny, "logger=none", f"train.distinct_negatives={d}"], tmp_path / str(d)))
            for d in (False, True)]
    assert runs[1].config["train"]["distinct_negatives"] is True and runs[0].test != runs[1].test
    with pytest.raises(ConfigError, match=r"train\.distinct_negatives=1 is out of range: use true or false"):
        train_and_test(make_cfg([*tiny, "train.distinct_negatives=1"], tmp_path / "bad"))


@pytest.mark.parametrize("mode", ["per_pair", "shared"])
def test_logq_with_the_uniform_sampler_is_infonce_in_a_real_step(data, mode):
    # the step's own log Q (global, the same for positive and negatives): a constant under uniform draws
    rows = _rows(data)
    sampler = UniformNegativeSampler(data.train)
    values = []
    for loss in (build_loss("logq", tau=0.5, n_negatives=6), build_loss("sl", tau=0.5, self_term=True, n_negatives=6)):
        torch.manual_seed(0)
        out = train_step(MF(30, 40, dim=8), loss, rows, sampler=sampler, generator=make_generator("cpu", 0, 0, 0, 2),
                         mode=mode)
        values.append(out.loss.item())
    assert values[0] == pytest.approx(values[1], rel=1e-6)
    torch.manual_seed(0)
    batch = train_step(MF(30, 40, dim=8), build_loss("logq_corrected", n_negatives=6), rows, sampler=sampler,
                       generator=make_generator("cpu", 0, 0, 0, 2), mode=mode).batch
    # per pair: each negative's proposal is uniform over the user's I - |P_u| non-positives
    kept = torch.log(torch.tensor(35 / 40)) if mode == "per_pair" else torch.tensor(0.0)
    torch.testing.assert_close(batch.log_q_kept, kept.expand(rows.shape[0]))


def test_the_embedding_regulariser_is_half_the_squared_rows_of_the_batch_over_its_pairs(data):
    torch.manual_seed(0)
    model, loss = MF(30, 40, score="dot"), build_loss("bpr")
    model.bind(data)
    rows = _rows(data, n=6)
    negatives = torch.randint(0, 40, (6, 1), generator=torch.Generator().manual_seed(2))
    plain = train_step(model, loss, rows, negatives=negatives)
    out = train_step(model, loss, rows, negatives=negatives, embedding_reg=0.01)
    u, i = model.user_emb.weight.detach(), model.item_emb.weight.detach()
    # written out by hand: each use of a row counts (a user or item twice in the batch counts twice)
    by_hand = sum(float(u[a] @ u[a] + i[b] @ i[b] + i[c] @ i[c])
                  for a, b, c in zip(rows[:, 0].tolist(), rows[:, 1].tolist(), negatives[:, 0].tolist())) / 2 / 6
    assert math.isclose(float(out.extra_loss), 0.01 * by_hand, rel_tol=1e-5)
    assert float(out.rec_loss) == float(plain.rec_loss)
    assert math.isclose(float(out.loss.detach()), float(plain.loss.detach()) + 0.01 * by_hand, rel_tol=1e-6)
    # its gradient touches the batch's rows only: λ e / B per use
    model.zero_grad()
    (out.loss - plain.loss).backward()
    used_users, used_items = set(rows[:, 0].tolist()), set(rows[:, 1].tolist()) | set(negatives[:, 0].tolist())
    for table, used in ((model.user_emb.weight, used_users), (model.item_emb.weight, used_items)):
        touched = set((table.grad.abs().sum(1) > 0).nonzero().squeeze(1).tolist())
        assert touched == used
    user = int(rows[0, 0])
    uses = int((rows[:, 0] == user).sum())
    assert torch.allclose(model.user_emb.weight.grad[user], 0.01 * uses * u[user] / 6, atol=1e-7)


def test_the_embedding_regulariser_needs_embedding_tables():
    from bench.models.base import EmbeddingModel

    class Encoder(EmbeddingModel):  # vectors from a network of features, no per-user rows
        def __init__(self) -> None:
            super().__init__(3, 4)
            self.net = torch.nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="Encoder does not have; set train.embedding_reg=0"):
        Encoder().embedding_penalty(torch.tensor([0]), torch.tensor([0]), torch.tensor([[1]]))
