"""LightGCN++, SimGCL, SimpleX and NCF against dense computations written from their papers' formulas,
and a short run of each with several losses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.models import MODELS
from bench.models.lightgcn import info_nce
from bench.run import train_and_test

POSITIVES = {0: [0, 2], 1: [1], 2: [0, 1, 3], 3: [3, 4]}


def _dense_adjacency(n_users: int, n_items: int) -> torch.Tensor:
    a = torch.zeros(n_users + n_items, n_users + n_items)
    for u, items in POSITIVES.items():
        for i in items:
            a[u, n_users + i] = a[n_users + i, u] = 1.0
    return a


def _bound(name, train_data, **kwargs):
    torch.manual_seed(0)
    model = MODELS.build(name, n_users=4, n_items=5, dim=6, **kwargs)
    model.bind(train_data(4, 5, POSITIVES))
    return model


def test_lightgcnpp_is_its_formula(train_data):
    model = _bound("lightgcnpp", train_data, layers=3, alpha=0.6, beta=-0.1, gamma=0.2)
    a = _dense_adjacency(4, 5)
    deg = a.sum(1)
    # message v -> w weighs 1 / (deg_w^alpha deg_v^beta)
    scaled = deg.pow(-0.6)[:, None] * a * deg.pow(0.1)[None, :]
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach()
    layers, x = [], ego
    for _ in range(3):
        x = scaled @ (x / x.norm(dim=1, keepdim=True))
        layers.append(x)
    final = 0.2 * ego + 0.8 * torch.stack(layers).mean(0)
    users, items = model.embeddings()
    torch.testing.assert_close(users.detach(), final[:4])
    torch.testing.assert_close(items.detach(), final[4:])


def _symmetric(a: torch.Tensor) -> torch.Tensor:
    deg = a.sum(1)
    return deg.rsqrt()[:, None] * a * deg.rsqrt()[None, :]


def test_simgcl_scores_the_clean_propagation_and_contrasts_two_noisy_views(train_data):
    model = _bound("simgcl", train_data, layers=2, noise_eps=0.1, cl_tau=0.2, cl_weight=0.5)
    adj = _symmetric(_dense_adjacency(4, 5))
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach()
    clean = torch.stack([adj @ ego, adj @ adj @ ego]).mean(0)  # layers 1..L, layer 0 left out
    users, items = model.embeddings()
    torch.testing.assert_close(users.detach(), clean[:4])
    torch.testing.assert_close(items.detach(), clean[4:])

    def view(generator_state):
        torch.set_rng_state(generator_state)
        out, x = [], ego
        for _ in range(2):
            x = adj @ x
            x = x + torch.sign(x) * F.normalize(torch.rand_like(x), dim=1) * 0.1
            out.append(x)
        return torch.stack(out).mean(0), torch.get_rng_state()

    model.train()
    state = torch.get_rng_state()
    batch_users, batch_items = torch.tensor([0, 2, 2]), torch.tensor([1, 3, 3])
    got = model.extra_loss(batch_users, batch_items)
    a, state = view(state)
    b, _ = view(state)
    u, i = torch.tensor([0, 2]), 4 + torch.tensor([1, 3])  # the distinct users and items of the batch
    expected = 0.5 * (info_nce(a[u], b[u], 0.2) + info_nce(a[i], b[i], 0.2))
    torch.testing.assert_close(got.detach(), expected)
    # the noise has norm eps in each row, in the embedding's orthant
    x = adj @ ego
    noisy = x + torch.sign(x) * F.normalize(torch.rand_like(x), dim=1) * 0.1
    torch.testing.assert_close((noisy - x).norm(dim=1), torch.full((9,), 0.1))
    assert bool(((noisy - x) * x >= 0).all())


def test_simplex_user_vector_mixes_in_the_history_mean(train_data):
    model = _bound("simplex", train_data, gamma=0.3, dropout=0.5).eval()  # no dropout outside training
    items = model.item_emb.weight.detach()
    history = torch.stack([items[POSITIVES[u]].mean(0) for u in range(4)])
    expected = 0.3 * model.user_emb.weight.detach() + 0.7 * history @ model.history_map.weight.detach().T
    users, got_items = model.embeddings()
    torch.testing.assert_close(users.detach(), expected)
    torch.testing.assert_close(got_items.detach(), items)


def test_ncf_towers_are_residual_relu_stacks(train_data):
    model = _bound("ncf", train_data, layers=[3, 6])
    e = model.user_emb.weight.detach()
    (l1, _, l2, _) = model.user_tower
    hidden = torch.relu(e @ l1.weight.detach().T + l1.bias.detach())
    expected = e + torch.relu(hidden @ l2.weight.detach().T + l2.bias.detach())
    torch.testing.assert_close(model.embeddings()[0].detach(), expected)
    with pytest.raises(Exception, match=r"model.layers=\[3, 5\]: positive widths ending with model.dim=6"):
        MODELS.build("ncf", n_users=4, n_items=5, dim=6, layers=[3, 5])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["lightgcnpp", "simgcl", "simplex", "ncf"])
@pytest.mark.parametrize("loss", ["slk", "bpr"])  # the softmax family with a threshold, a dot-score pair loss
def test_each_trains_with_losses_of_every_kind(model, loss, make_cfg, tiny, tmp_path, loss_settings):
    cfg = make_cfg([*tiny, f"model={model}", f"loss={loss}", "trainer.max_epochs=1", "+trainer.limit_train_batches=2",
                    "logger=none", *loss_settings(loss)], tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed" and 0 <= res.test["ndcg@20"] <= 1


def test_simplex_drops_out_only_the_loss_s_user_vectors(train_data):
    model = _bound("simplex", train_data, gamma=0.3, dropout=0.5).train()
    rows = torch.tensor([[0, 0, 0], [2, 1, 1]])
    users = torch.tensor([0, 2])
    # scorer calls in training (a threshold refresh, a loss's own scores) see the model without dropout
    torch.testing.assert_close(model.score_items(users, torch.tensor([[0, 1], [3, 4]])),
                               model.eval().score_items(users, torch.tensor([[0, 1], [3, 4]])))
    model.train()
    torch.manual_seed(1)
    dropped = model.encode(rows).vectors
    clean = model.eval().encode(rows).vectors
    assert not torch.allclose(dropped, clean)
