"""SONG@K: state updates and value against the formulas; a threshold from an estimator."""

import math

import pytest
import torch

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import build
from bench.models import MF
from bench.step import train_step
from bench.thresholds import kth_largest


def test_song_state_updates_and_value_match_the_formulas(train_data):
    loss = build("songk", k=2, gamma0=0.5, eta0=0.1, margin=1.0, tau1=0.5, tau2=0.01, n_negatives=2)
    data = train_data(2, 10, {0: [1, 2, 3], 1: [4]})  # user 1 has a single positive
    loss.bind(data)
    pos = torch.tensor([0.4, 0.1])
    neg = torch.tensor([[0.2, 0.6], [0.0, -0.3]])
    users, pair_ids = torch.tensor([0, 1]), torch.tensor([2, 3])
    got = loss(LossBatch(pos=pos, neg=neg, users=users, pair_ids=pair_ids))
    want, lam_want = 0.0, []
    idcg = {0: 1 + 1 / math.log2(3), 1: 1.0}  # K = 2: min(K, |P_u|) ranks
    for b in range(2):
        listed = [pos[b].item()] + neg[b].tolist()
        g = sum(max(0.0, 1.0 - (pos[b].item() - s)) ** 2 for s in listed) / 3
        u = 0.5 * g
        nabla = 10 / (math.log2(1 + 10 * u) ** 2 * (1 + 10 * u) * math.log(2))
        psi = 1 / (1 + math.exp(-(pos[b].item() - 0.0) / 0.5))
        want += psi * nabla * g / idcg[b]
        lam_want.append(-0.1 * (2 / 10 + 0.0 - sum(1 / (1 + math.exp(-s / 0.5)) for s in listed) / 3))
        assert loss.u[pair_ids[b]].item() == pytest.approx(u, rel=1e-6)
    assert got.item() == pytest.approx(want / 2, rel=1e-5)
    assert loss.lam.tolist() == pytest.approx(lam_want, rel=1e-5)
    assert loss.idcg.tolist() == pytest.approx([idcg[0], idcg[1]], rel=1e-6)


def test_song_takes_its_threshold_from_an_estimator(train_data):
    torch.manual_seed(0)
    n_users, n_items, k = 5, 30, 3
    data = train_data(n_users, n_items, {u: [u, u + 5] for u in range(n_users)})
    model = MF(n_users, n_items, dim=8)
    loss = build("songk", k=k, threshold="exact", n_negatives=6)
    loss.bind(data)
    rows = torch.tensor([[u, u, 2 * u] for u in range(n_users)])
    out = train_step(model, loss, rows, negatives=torch.randint(10, n_items, (n_users, 6)))
    out.loss.backward()
    with torch.no_grad():
        want = kth_largest(model.score_users(torch.arange(n_users)), k)
    assert torch.allclose(loss.lam, want)  # lambda is the exact K-th score, not a learned value
    learned = build("songk", k=k, n_negatives=6)
    learned.bind(data)
    learned(out.batch)
    assert not torch.allclose(learned.lam, want)


def test_song_is_songk_with_k0_and_its_idcg_runs_over_all_positives(train_data):
    data = train_data(3, 40, {0: list(range(25)), 1: [30], 2: [31, 32]})  # user 0: more positives than K = 20
    song, songk = build("song"), build("songk", k=0)
    assert (song.k, song.gamma0, song.margin, song.n_negatives, song.estimator) == (0, 0.9, 1.0, 1000, None)
    for loss in (song, songk):
        loss.bind(data)
    idcg0 = sum(1 / math.log2(r + 1) for r in range(1, 26))
    assert song.idcg.tolist() == pytest.approx([idcg0, 1.0, 1 + 1 / math.log2(3)], rel=1e-6)
    truncated = build("songk", k=20)
    truncated.bind(data)
    assert truncated.idcg[0].item() == pytest.approx(sum(1 / math.log2(r + 1) for r in range(1, 21)), rel=1e-6)
    gen = torch.Generator().manual_seed(0)
    pos, neg = torch.rand(4, generator=gen), torch.rand(4, 6, generator=gen)
    users, pair_ids = torch.tensor([0, 1, 2, 0]), torch.tensor([3, 25, 26, 10])
    grads, values = [], []
    for loss in (song, songk):
        for _ in range(2):  # the second step sees the moving averages of the first
            p, n = pos.clone().requires_grad_(True), neg.clone().requires_grad_(True)
            value = loss(LossBatch(pos=p, neg=n, users=users, pair_ids=pair_ids))
            value.backward()
        values.append(value.item())
        grads.append((p.grad, n.grad))
    assert values[0] == values[1] and all(torch.equal(a, b) for a, b in zip(*grads))
    assert torch.equal(song.u, songk.u) and song.u[pair_ids].gt(0).all()
    assert (song.lam == 0).all()  # no top-K threshold
    batch = LossBatch(pos=pos, neg=neg, users=users, pair_ids=pair_ids)
    [(buffer, rows)] = song.synced_rows(batch)
    assert buffer is song.u and torch.equal(rows, pair_ids)


def test_song_refuses_a_bad_gamma0():
    with pytest.raises(ConfigError, match=r"loss.gamma0 must be in \(0, 1\], got 0"):
        build("song", gamma0=0)
