"""SL@K: the formula, the weight's gradient, the beta refresh schedule, per-query thresholds on sequences."""

import math

import pytest
import torch
from hydra.utils import instantiate

from bench.contracts import LossBatch, TrainData
from bench.datasets import load_dataset
from bench.datasets.sequences import leave_one_out
from bench.losses import build
from bench.losses.slk import slk_loss
from bench.sampling import UniformNegativeSampler
from bench.step import train_step
from bench.thresholds import kth_largest


def _scores(seed, b=5, n=4):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, generator=gen, dtype=torch.float64) * 2 - 1,
            torch.rand(b, n, generator=gen, dtype=torch.float64) * 2 - 1)


@pytest.mark.parametrize("self_term", [False, True])
def test_slk_matches_the_formula(self_term):
    pos, neg = _scores(3)
    beta = torch.tensor([0.0, 0.5, -0.3, 0.9, -1.0], dtype=torch.float64)
    want = 0.0
    for i in range(5):
        w = 1 / (1 + math.exp(-(pos[i].item() - beta[i].item()) / 2.5))
        total = sum(math.exp((neg[i, j].item() - pos[i].item()) / 0.2) for j in range(4)) + (1.0 if self_term else 0.0)
        want += w * math.log(total)
    assert slk_loss(pos, neg, beta, 0.2, 2.5, self_term).item() == pytest.approx(want / 5, rel=1e-12)


def test_slk_weight_is_not_detached():
    pos = torch.tensor([0.3], dtype=torch.float64, requires_grad=True)
    neg = torch.tensor([[0.1, 0.2]], dtype=torch.float64)
    beta = torch.tensor([0.3], dtype=torch.float64)
    slk_loss(pos, neg, beta, 0.2, 1.0).backward()
    # d/ds [sigmoid((s-b)/tw) * L(s)] = sigmoid'/tw * L + sigmoid * L'(s)
    lse = math.log(math.exp(-0.2 / 0.2) + math.exp(-0.1 / 0.2))
    p = torch.softmax(torch.tensor([-1.0, -0.5]), 0)
    want = 0.25 * lse + 0.5 * (-1 / 0.2) * float(p.sum())
    assert pos.grad.item() == pytest.approx(want, rel=1e-9)


def test_slk_refreshes_beta_on_schedule_and_equals_sl_when_k_exceeds_the_catalogue(fixed_scorer, train_data):
    loss = build("slk", k=2, t_beta=3, tau_d=0.2, tau_w=1.0, estimator={"name": "exact"}, n_negatives=2,
                 diagnostics_users=0)
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    loss.bind(train_data(2, 4, {0: [0], 1: [3]}))
    batch = LossBatch(pos=torch.tensor([3.0]), neg=torch.tensor([[2.0, 1.0]]), users=torch.tensor([1]),
                      negatives=torch.tensor([[1, 2]]), scorer=fixed_scorer(scores))
    for epoch, refresh in [(0, False), (1, False), (2, True), (3, False)]:
        loss.on_train_epoch_start(epoch)
        loss.beta.zero_()
        loss.after_step(batch)
        assert loss.beta.tolist() == ([0.0, 2.0] if refresh else [0.0, 0.0])
    big = build("slk", k=10, estimator={"name": "exact"}, tau_w=1.0, n_negatives=2, diagnostics_users=0)
    big.bind(train_data(2, 4, {0: [0], 1: [3]}))
    big.on_train_epoch_start(4)
    big.after_step(batch)
    assert torch.isinf(big.beta[1]) and big.beta[1] < 0
    pos, neg = torch.tensor([0.2]), torch.tensor([[0.5, -0.1]])
    got = big(LossBatch(pos=pos, neg=neg, users=torch.tensor([1])))
    assert got.item() == pytest.approx(build("sl", tau=0.2)(LossBatch(pos=pos, neg=neg)).item())  # weight 1


def test_slk_on_sequences_takes_each_query_s_exact_threshold(tmp_path, make_cfg, sequences_file):
    """SASRec rows are history prefixes: beta must be the K-th score of the prefix's own
    scores, not of the user's full-history state."""
    f = sequences_file(tmp_path / "seq.tsv")
    cfg = make_cfg(["task=seq", "model=sasrec", "loss=slk", "dataset=custom", f"dataset.path={f}",
                    "dataset.k_core=1", "model.max_len=8"], tmp_path)
    splits, seqs = leave_one_out(load_dataset(cfg.dataset))
    train = TrainData(n_users=splits.n_users, n_items=splits.n_items, train=splits.train, n_pairs=splits.train.nnz,
                      sequences=seqs)
    model = instantiate(cfg.model, n_users=splits.n_users, n_items=splits.n_items)
    model.bind(train)
    loss = build("slk", k=3, n_negatives=5)
    loss.bind(train)
    assert loss.per_query
    users = torch.arange(splits.n_users)
    rows = torch.stack([users, torch.zeros_like(users), torch.zeros_like(users)], 1)
    out = train_step(model, loss, rows, sampler=UniformNegativeSampler(splits.train),
                     generator=torch.Generator().manual_seed(0))
    batch = out.batch
    want = kth_largest(batch.full_scores(torch.arange(batch.pos.shape[0])), 3)
    assert torch.equal(loss.query_thresholds(batch), want)
    with torch.no_grad():
        full_history = kth_largest(model.score_users(batch.users), 3)
    assert not torch.allclose(want, full_history)  # a prefix is not the full history
    out.loss.backward()
    loss.after_step(batch)
    assert torch.equal(loss.beta, torch.zeros_like(loss.beta))  # no per-user state on sequences


@pytest.mark.parametrize("top, holds_without_self", [(10.0, 1.0), (20.0, 0.0)])
def test_theorem_3_2_check_with_and_without_the_self_term(fixed_scorer, train_data, top, holds_without_self):
    # one user, positives 0 and 1 both in its top 2; beta = the 2nd score. The bound with the
    # self term is always >= 0 > -log DCG; without it, a first positive far above everything
    # (top = 20) has log sum_{j != i} e^{(s_j - s_i)} ~ -11, which the second cannot offset.
    loss = build("slk", k=2, tau_d=1.0, tau_w=1.0, n_negatives=2, diagnostics_users=1)
    loss.bind(train_data(1, 4, {0: [0, 1]}))
    scores = [top, 9.0, 0.0, 0.0]
    loss.beta.fill_(9.0)
    got = loss.diagnostics(fixed_scorer(torch.tensor([scores])))
    minus_log_dcg = -math.log(1 + 1 / math.log2(3))
    weight = [1 / (1 + math.exp(-(s - 9.0))) for s in scores[:2]]
    with_self = sum(w * math.log(sum(math.exp(t - s) for t in scores)) for w, s in zip(weight, scores))
    without = sum(w * math.log(sum(math.exp(t - s) for j, t in enumerate(scores) if j != i))
                  for i, (w, s) in enumerate(zip(weight, scores)))
    assert got["thm32_eligible_users"] == 1.0
    assert got["thm32_holds"] == float(minus_log_dcg <= with_self) == 1.0
    assert got["thm32_holds_without_self"] == float(minus_log_dcg <= without) == holds_without_self
