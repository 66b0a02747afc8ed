"""LightGCN and XSimGCL: propagation against dense references; every scoring path agrees."""

import pytest
import torch
import torch.nn.functional as F

from bench.contracts import TrainData
from bench.datasets import CSR
from bench.models import MF, LightGCN, XSimGCL


def _graph():
    pairs = torch.tensor([[0, 0], [0, 2], [1, 1], [1, 2], [2, 0], [2, 3], [3, 3]])
    train = CSR.from_pairs(pairs, 4, 5)  # item 4 has no interaction
    data = TrainData(n_users=4, n_items=5, train=train, n_pairs=train.nnz)
    dense = torch.zeros(9, 9)
    for u, i in pairs.tolist():
        dense[u, 4 + i] = dense[4 + i, u] = 1.0
    deg = dense.sum(1)
    inv = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    return data, inv[:, None] * dense * inv[None, :]


def test_lightgcn_propagation_equals_a_dense_reference():
    data, norm_adj = _graph()
    model = LightGCN(4, 5, dim=3, layers=2, score="dot")
    model.bind(data)
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach()
    want = (ego + norm_adj @ ego + norm_adj @ norm_adj @ ego) / 3
    users, items = model.embeddings()
    torch.testing.assert_close(torch.cat([users, items]).detach(), want)
    assert torch.equal(items[4].detach(), ego[8] / 3)  # an isolated item keeps only its own share
    # scoring: full rows, training queries, given items and the evaluation scorer agree
    full = model.score_users(torch.arange(4)).detach()
    torch.testing.assert_close(full, (want[:4] @ want[4:].T))
    queries = model.encode(torch.tensor([[1, 1, 0], [2, 0, 1]]))
    scores = queries.score(torch.tensor([[1, 0, 3], [0, 4, 2]])).detach()
    pos, neg = scores[:, 0], scores[:, 1:]
    torch.testing.assert_close(pos, full[[1, 2], [1, 0]])
    torch.testing.assert_close(neg, full[[[1], [2]], [[0, 3], [4, 2]]])
    torch.testing.assert_close(model.score_items(torch.tensor([1, 2]), torch.tensor([[0, 3], [4, 2]])).detach(), neg)
    torch.testing.assert_close(model.full_scorer()(torch.tensor([3])), full[3:])


def test_xavier_uniform_init_fills_each_table_within_its_glorot_bound():
    torch.manual_seed(0)
    model = XSimGCL(300, 500, dim=64, init="xavier_uniform")
    for table in (model.user_emb.weight, model.item_emb.weight):
        bound = (6 / (table.shape[0] + 64)) ** 0.5  # fan_in = dim, fan_out = rows, as torch counts a 2-D weight
        assert table.abs().max() <= bound and table.abs().max() > 0.99 * bound
        assert table.std().item() == pytest.approx(bound / 3**0.5, rel=0.02)  # the uniform's, not a normal's
    known = "auto, normal, xavier_normal, xavier_uniform"
    with pytest.raises(Exception, match=f"unknown model.init 'glorot'; known: {known}"):
        MF(3, 4, init="glorot")


def test_lightgcn_gradients_reach_the_free_embeddings():
    data, _ = _graph()
    model = LightGCN(4, 5, dim=3, layers=2)
    model.bind(data)
    model.score_users(torch.tensor([0])).sum().backward()
    assert model.user_emb.weight.grad.abs().sum() > 0 and model.item_emb.weight.grad.abs().sum() > 0


def test_xsimgcl_eval_has_no_noise_and_training_noise_has_norm_eps():
    data, norm_adj = _graph()
    torch.manual_seed(0)
    model = XSimGCL(4, 5, dim=3, layers=3, noise_eps=0.1, contrast_layer=1)
    model.bind(data)
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach()
    l1 = norm_adj @ ego
    l2 = norm_adj @ l1
    l3 = norm_adj @ l2
    model.eval()
    users, items = model.embeddings()
    torch.testing.assert_close(torch.cat([users, items]).detach(), (l1 + l2 + l3) / 3)  # layer 0 excluded
    model.train()
    layers = model.propagate(ego)
    first = layers[0] - l1
    active = (l1 != 0).all(1)
    torch.testing.assert_close(first[active].norm(dim=1), torch.full((int(active.sum()),), 0.1))


def test_xsimgcl_contrastive_term_is_infonce_of_its_own_forward():
    data, _ = _graph()
    torch.manual_seed(1)
    model = XSimGCL(4, 5, dim=3, layers=2, cl_tau=0.5, cl_weight=0.2)
    model.bind(data)
    model.train()
    model.embeddings()
    final, view = model._views
    users, items = torch.tensor([0, 2]), torch.tensor([1, 3])

    def nce(a, b):
        a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
        logits = a @ b.T / 0.5
        return -(torch.log_softmax(logits, 1).diag()).mean()

    want = 0.2 * (nce(final[users], view[users]) + nce(final[4 + items], view[4 + items]))
    assert model.extra_loss(users, items).item() == pytest.approx(want.item(), rel=1e-6)
    assert model.extra_loss(users, items) is None  # consumed: one term per forward
    assert MF(3, 3).extra_loss(users, items) is None
