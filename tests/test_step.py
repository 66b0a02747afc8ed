"""The training step (bench/step.py) and the scoring contract it relies on (bench/contracts.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.contracts import GATHER_COST_IN_MACS, prefer_full_rows, score_candidates
from bench.losses import build as build_loss
from bench.models import MF, XSimGCL
from bench.sampling import UniformNegativeSampler, make_generator
from bench.step import after_update, optimise, train_step


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
