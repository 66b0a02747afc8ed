"""Threshold estimators: safety (property tests), calibration (binomial test), bias, learning."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from bench.thresholds import build as build_estimator
from bench.thresholds.binomial import hypergeom_upper_tail
from bench.thresholds.stratified import weighted_kth
from tests.test_loss_zoo import _FixedModel, _train_data


def _problem(seed: int, n_users: int = 6, max_items: int = 60):
    gen = torch.Generator().manual_seed(seed)
    n_items = int(torch.randint(8, max_items, (1,), generator=gen))  # small catalogues: duplicates
    scores = torch.randint(0, 6, (n_users, n_items), generator=gen).float()  # ties
    positives = {u: torch.randperm(n_items, generator=gen)[: int(torch.randint(1, 6, (1,), generator=gen))].tolist()
                 for u in range(n_users)}
    data = _train_data(n_users, n_items, positives)
    users = torch.arange(n_users).repeat(3)
    pos_mask = data.train.dense_rows(users)
    negatives = torch.randint(0, n_items, (users.numel(), 40), generator=gen)
    negatives = torch.where(pos_mask.gather(1, negatives), (negatives + 1) % n_items, negatives)
    return gen, scores, data, users, negatives


@pytest.mark.parametrize("seed", range(40))
def test_safe_estimators_never_exceed_the_exact_kth_score(seed):
    gen, scores, data, users, negatives = _problem(seed)
    now = _FixedModel(scores)
    before = _FixedModel(torch.randint(0, 6, scores.shape, generator=gen).float())  # the model at the last rebuild
    for k in (1, 3, 5, 20, scores.shape[1] + 5):
        exact = build_estimator("exact").estimate(now, users, None, k)
        for name, opts in (("sampled", {}), ("cached", {"size": 4}), ("cached", {"size": 64, "positives": "p90"})):
            est = build_estimator(name, **opts)
            assert est.safe
            est.bind(data)
            if name == "cached":
                est.rebuild(before)  # stale cache: still safe
            got = est.estimate(now, users, negatives, k)
            assert (got <= exact).all(), (name, opts, k)


def test_cached_is_exact_right_after_a_rebuild_and_rebuilds_by_epoch():
    _, scores, data, users, negatives = _problem(3)
    model = _FixedModel(scores)
    est = build_estimator("cached", size=8)
    est.bind(data)
    exact = build_estimator("exact").estimate(model, users, None, 5)
    assert torch.equal(est.estimate(model, users, negatives, 5), exact)  # first use rebuilds
    assert not est.stale
    est.on_train_epoch_start(1)
    assert est.stale and "top" in dict(est.named_buffers())


def test_hypergeometric_tail_matches_scipy_and_the_sheets_example():
    M, n = torch.tensor([50.0, 1000.0]), torch.tensor([12.0, 100.0])
    table = hypergeom_upper_tail(M, n, 10)
    for b in range(2):
        for m in range(10):
            for j in range(11):
                want = stats.hypergeom.sf(j - 1, int(M[b]), m, int(n[b])) if j > 0 else 1.0
                assert table[b, m, j].item() == pytest.approx(want, abs=1e-12), (b, m, j)
    # K = 10, s = 0.1, delta = 1e-4: k' = 6 (THRESHOLDS.md; binomial ~ hypergeometric on a large catalogue)
    big = hypergeom_upper_tail(torch.tensor([1e6]), torch.tensor([1e5]), 10)[0, 9]
    assert big[5].item() > 1e-4 >= big[6].item()
    assert stats.binom.sf(0, 9, 0.1) == pytest.approx(0.6126, abs=1e-4)  # the naive k' = 1 overestimates 61%


def test_binomial_safe_overestimates_at_most_delta_and_is_tighter_than_sampled():
    """Many independent users with i.i.d. scores: the observed overestimate rate is
    consistent with <= delta (one-sided binomial test), and ranks are much closer to K."""
    gen = torch.Generator().manual_seed(0)
    n_users, n_items, k, n_neg, delta = 3000, 400, 10, 40, 0.05
    scores = torch.rand(n_users, n_items, generator=gen)
    data = _train_data(n_users, n_items, {u: [u % n_items] for u in range(n_users)})
    users = torch.arange(n_users)
    negatives = torch.randint(0, n_items, (n_users, n_neg), generator=gen)
    negatives = torch.where(negatives == (users % n_items)[:, None], (negatives + 1) % n_items, negatives)
    model = _FixedModel(scores)
    exact = build_estimator("exact").estimate(model, users, None, k)
    est = build_estimator("binomial_safe", delta=delta)
    est.bind(data)
    got = est.estimate(model, users, negatives, k)
    over = int((got > exact).sum())
    assert stats.binomtest(over, n_users, delta, alternative="greater").pvalue > 1e-3, over
    plain = build_estimator("sampled", positives="all")
    plain.bind(data)
    base = plain.estimate(model, users, negatives, k)
    rank = lambda b: (scores >= b[:, None]).sum(1).float().median().item()  # noqa: E731
    assert rank(got) < 0.6 * rank(base)


def test_weighted_kth_by_hand():
    s = torch.tensor([[5.0, 4.0, 3.0, 2.0, float("-inf")]])
    w = torch.tensor([[1.0, 2.5, 2.5, 2.5, 0.0]])
    assert weighted_kth(s, w, 1).item() == 5.0
    assert weighted_kth(s, w, 3).item() == 4.0  # 1 + 2.5 = 3.5 >= 3
    assert weighted_kth(s, w, 4).item() == 3.0
    assert weighted_kth(s, w, 9).item() == float("-inf")  # total 8.5 < 9


def test_stratified_is_unbiased_in_effective_rank_and_sampled_follows_the_order_statistic_law():
    gen = torch.Generator().manual_seed(1)
    n_users, n_items, k, n_neg = 2000, 2000, 20, 200
    scores = torch.rand(n_users, n_items, generator=gen)
    data = _train_data(n_users, n_items, {u: [] for u in range(n_users)} | {0: [0]})
    users = torch.arange(1, n_users)  # users without positives: the pure sampling problem
    negatives = torch.randint(0, n_items, (users.numel(), n_neg), generator=gen)
    model = _FixedModel(scores)
    exact = build_estimator("exact").estimate(model, users, None, k)
    rank = lambda b: (scores[users] >= b[:, None]).sum(1).float()  # noqa: E731
    st = build_estimator("stratified")
    st.bind(data)
    b = st.estimate(model, users, negatives, k)
    assert rank(b).mean().item() == pytest.approx(k, rel=0.15)
    assert 0.25 < (b > exact).float().mean().item() < 0.75  # tight, hence not safe
    sa = build_estimator("sampled", positives="all")
    sa.bind(data)
    distinct = torch.tensor([row.unique().numel() for row in negatives]).float()
    want = (k * (n_items + 1) / (distinct + 1)).mean().item()  # E[rank of the K-th of n of M] = K(M+1)/(n+1)
    assert rank(sa.estimate(model, users, negatives, k)).mean().item() == pytest.approx(want, rel=0.05)


def test_quantile_learns_toward_the_top_k_quantile():
    gen = torch.Generator().manual_seed(2)
    n_users, n_items, k = 50, 1000, 20
    scores = torch.rand(n_users, n_items, generator=gen)
    data = _train_data(n_users, n_items, {u: [u] for u in range(n_users)})
    model = _FixedModel(scores)
    est = build_estimator("quantile", lr=0.01, steps=5)
    est.bind(data)
    users = torch.arange(n_users)
    first = None
    for _ in range(100):
        negatives = torch.randint(0, n_items, (n_users, 100), generator=gen)
        b = est.estimate(model, users, negatives, k)
        first = b if first is None else first
    rank = lambda x: (scores >= x[:, None]).sum(1).float().median().item()  # noqa: E731
    assert rank(first) > 3 * k  # the safe start is loose ...
    assert rank(b) == pytest.approx(k, rel=0.5)  # ... the learned threshold is near rank K
    assert "lam" in dict(est.named_buffers())


@pytest.mark.parametrize("estimator", ["sampled", "exact", "cached", "stratified", "binomial_safe", "quantile"])
def test_slk_trains_with_every_estimator_and_checkpoints_its_state(tmp_path, estimator):
    from bench.run import train_and_test
    from tests.helpers import TINY, make_cfg

    cfg = make_cfg([*TINY, "loss=slk", "loss.t_beta=1", f"loss.estimator={estimator}", "logger=none"], tmp_path)
    res = train_and_test(cfg)
    assert res["status"] == "completed"
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    if estimator == "cached":
        assert state["loss.estimator.top"].shape == (120, 64)
    if estimator == "quantile":
        assert torch.isfinite(state["loss.estimator.lam"]).any()
    beta = state["loss.beta"]
    assert torch.isfinite(beta).all() and (beta != 0).any()


def test_study_on_a_trained_run_measures_every_estimator_against_exact(tmp_path):
    import pandas as pd

    from bench.run import train_and_test
    from bench.thresholds.__main__ import main as study_main
    from tests.helpers import TINY, make_cfg

    run = tmp_path / "run"
    train_and_test(make_cfg([*TINY, "loss=slk", "loss.t_beta=1", "logger=none"], run))
    assert study_main([str(run), "--ks", "5", "20", "--cache-from", "best", "--out", str(tmp_path / "s")]) == 0
    table = pd.read_csv(tmp_path / "s" / "threshold_study.csv")
    assert len(table) == 2 * 5 and set(table["k"]) == {5, 20}
    safe = table[table["estimator"].isin(["sampled", "cached"])]
    assert (safe["overestimates"] == 0).all()  # safe estimators, even with a stale cache
    cp = table.iloc[0]
    assert cp["overestimate_ci_high"] == pytest.approx(1 - 0.025 ** (1 / cp["users"]), rel=1e-6)  # CP for 0 of n
    assert (table["effective_rank_median"] >= 1).all()
    assert (tmp_path / "s" / "effective_ranks.png").is_file()
    assert study_main([str(tmp_path / "nowhere")]) == 2


@pytest.mark.parametrize("seed", range(10))
def test_lower_bound_shortcut_gives_the_plain_top_k_lists_exactly(seed):
    from bench.evaluation.metrics import rank_items
    from bench.evaluation.shortcut import rank_items_with_bound

    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 30, (50, 300), generator=gen).float()  # many ties, also at the cut-off
    scores[torch.rand(50, 300, generator=gen) < 0.1] = float("-inf")  # masked items
    k = 20
    exact_kth = torch.topk(scores, k, dim=1).values[:, -1]
    safe = exact_kth - torch.randint(0, 4, (50,), generator=gen).float()  # at or below the k-th score
    unsafe = exact_kth + torch.randint(-2, 3, (50,), generator=gen).float()  # sometimes above: must fall back
    for bound in (safe, unsafe, torch.full((50,), float("-inf"))):
        got, fell_back = rank_items_with_bound(scores, k, bound)
        assert torch.equal(got, rank_items(scores, k))
        assert torch.equal(fell_back, (scores >= bound[:, None]).sum(1) < k)
    assert not rank_items_with_bound(scores, k, safe)[1].any()


def test_song_takes_its_threshold_from_an_estimator():
    from bench.losses import build as build_loss
    from bench.models.mf import MF
    from bench.thresholds import kth_largest

    torch.manual_seed(0)
    n_users, n_items, k = 5, 30, 3
    data = _train_data(n_users, n_items, {u: [u, u + 5] for u in range(n_users)})
    model = MF(n_users, n_items, dim=8)
    loss = build_loss("songk", k=k, threshold="exact", n_negatives=6)
    loss.bind(data)
    rows = torch.tensor([[u, u, 2 * u] for u in range(n_users)])
    batch = model.training_batch(rows, lambda users: torch.randint(10, n_items, (users.numel(), 6)))
    loss(batch).backward()
    with torch.no_grad():
        want = kth_largest(model.score_users(torch.arange(n_users)), k)
    assert torch.allclose(loss.lam, want)  # lambda is the exact K-th score, not a learned value
    learned = build_loss("songk", k=k, n_negatives=6)
    learned.bind(data)
    learned(batch)
    assert not torch.allclose(learned.lam, want)


def test_song_trains_with_a_cached_threshold(tmp_path):
    from bench.run import train_and_test
    from tests.helpers import TINY, make_cfg

    res = train_and_test(make_cfg([*TINY, "loss=songk", "loss.threshold=cached", "logger=none"], tmp_path))
    assert res["status"] == "completed"


def test_slk_on_sequences_takes_each_query_s_exact_threshold(tmp_path):
    """SASRec rows are history prefixes: beta must be the K-th score of the prefix's own
    scores, not of the user's full-history state."""
    from hydra.utils import instantiate

    from bench.datasets.sequences import leave_one_out
    from bench.losses import build as build_loss
    from bench.losses.base import TrainData
    from bench.thresholds import kth_largest
    from tests.helpers import make_cfg
    from tests.test_tasks import _write_sequences

    f = _write_sequences(tmp_path / "seq.tsv")
    cfg = make_cfg(["task=seq", "model=sasrec", "loss=slk", "dataset=custom", f"dataset.path={f}",
                    "dataset.k_core=1", "model.max_len=8"], tmp_path)
    splits, seqs = leave_one_out(instantiate(cfg.dataset).load())
    train = TrainData(n_users=splits.n_users, n_items=splits.n_items, train=splits.train, n_pairs=splits.train.nnz,
                      sequences=seqs)
    model = instantiate(cfg.model, n_users=splits.n_users, n_items=splits.n_items)
    model.bind(train)
    loss = build_loss("slk", k=3, n_negatives=5)
    loss.bind(train)
    assert loss.per_query
    users = torch.arange(splits.n_users)
    rows = torch.stack([users, torch.zeros_like(users), torch.zeros_like(users)], 1)
    batch = model.training_batch(rows, lambda u: torch.randint(0, splits.n_items, (u.numel(), 5)))
    want = kth_largest(batch.full_scores(torch.arange(batch.pos.shape[0])), 3)
    assert torch.equal(loss.query_thresholds(batch), want)
    with torch.no_grad():
        full_history = kth_largest(model.score_users(batch.users), 3)
    assert not torch.allclose(want, full_history)  # a prefix is not the full history
    loss(batch).backward()
    loss.after_step(batch, model)
    assert torch.equal(loss.beta, torch.zeros_like(loss.beta))  # no per-user state on sequences
