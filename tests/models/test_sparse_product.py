"""Graph backbones' CSR products give the COO path's digits, forward and gradient, bit for bit."""

import pytest
import torch
import torch.nn.functional as F

from bench.contracts import TrainData
from bench.datasets import CSR
from bench.models import LightGCN
from bench.models.lightgcn import layer_mean, normalized_adjacency
from bench.models.lightgcnpp import LightGCNpp, scaled_adjacency
from bench.models.simplex import SimpleX
from bench.models.sparse import sparse_product, to_csr, transpose_csr


def _data(n_users=300, n_items=500, n_pairs=6000, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = torch.stack([torch.randint(0, n_users, (n_pairs,), generator=g),
                         torch.randint(0, n_items, (n_pairs,), generator=g)], 1).unique(dim=0)
    train = CSR.from_pairs(pairs, n_users, n_items)
    return TrainData(n_users=n_users, n_items=n_items, train=train, n_pairs=train.nnz)


def _coo_reference(matrix, x, grad):
    x = x.clone().requires_grad_(True)
    out = torch.sparse.mm(matrix, x)
    out.backward(grad)
    return out.detach(), x.grad


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["symmetric", "scaled", "rectangular"])
@pytest.mark.parametrize("dim", [64, 16, 1])
def test_csr_product_equals_torch_sparse_mm_bit_for_bit(kind, threads, dim):
    data = _data()
    if kind == "symmetric":
        matrix, symmetric = normalized_adjacency(data.train, 300, 500), True
    elif kind == "scaled":  # LightGCN++'s D^-a A D^-b: row and column scales differ
        matrix, symmetric = scaled_adjacency(data.train, 300, 500, 0.6, -0.1), False
    else:  # SimpleX's users x items history
        pairs = data.train.to_pairs()
        matrix = torch.sparse_coo_tensor(pairs.T, torch.rand(len(pairs), generator=torch.Generator().manual_seed(1)),
                                         (300, 500), check_invariants=True).coalesce()
        symmetric = False
    g = torch.Generator().manual_seed(2)
    x = torch.randn(matrix.shape[1], dim, generator=g)
    grad = torch.randn(matrix.shape[0], dim, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        want_out, want_grad = _coo_reference(matrix, x, grad)
        csr = to_csr(matrix)
        leaf = x.clone().requires_grad_(True)
        out = sparse_product(csr, leaf, None if symmetric else transpose_csr(csr))
        out.backward(grad)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out.detach(), want_out) and torch.equal(leaf.grad, want_grad)
    # a wrong transpose would be caught: for the asymmetric matrices, A @ grad is not Aᵀ @ grad
    if not symmetric and kind == "scaled":
        assert not torch.allclose(csr @ grad, want_grad)


def test_lightgcn_step_gradients_equal_the_coo_propagation():
    data = _data()
    torch.manual_seed(0)
    model = LightGCN(300, 500, dim=64, layers=3)
    model.bind(data)
    assert model.adjacency.layout == torch.sparse_csr and model.adjacency_t.numel() == 0  # symmetric: no copy
    users, items = model.embeddings()
    (users[:50] @ items[:80].T).pow(2).sum().backward()
    coo = normalized_adjacency(data.train, 300, 500)
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach().requires_grad_(True)
    layers, x = [ego], ego
    for _ in range(3):
        x = torch.sparse.mm(coo, x)
        layers.append(x)
    final = torch.stack(layers).mean(0)
    (final[:50] @ final[300:380].T).pow(2).sum().backward()
    assert torch.equal(torch.cat([users, items]).detach(), final.detach())
    assert torch.equal(torch.cat([model.user_emb.weight.grad, model.item_emb.weight.grad]), ego.grad)


@pytest.mark.parametrize("alpha,beta", [(0.6, -0.1), (0.5, 0.5)])
def test_lightgcnpp_gradients_equal_the_coo_propagation(alpha, beta):
    data = _data()
    torch.manual_seed(0)
    model = LightGCNpp(300, 500, dim=64, layers=2, alpha=alpha, beta=beta, gamma=0.2)
    model.bind(data)
    assert (model.adjacency_t.numel() == 0) == (alpha == beta)  # only the symmetric one keeps no transpose
    users, items = model.embeddings()
    (users[:50] @ items[:80].T).pow(2).sum().backward()
    coo = scaled_adjacency(data.train, 300, 500, alpha, beta)
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach().requires_grad_(True)
    x, layers = ego, []
    for _ in range(2):
        x = torch.sparse.mm(coo, F.normalize(x, dim=1, eps=1e-12))
        layers.append(x)
    final = 0.2 * ego + 0.8 * torch.stack(layers).mean(0)
    (final[:50] @ final[300:380].T).pow(2).sum().backward()
    assert torch.equal(torch.cat([users, items]).detach(), final.detach())
    assert torch.equal(torch.cat([model.user_emb.weight.grad, model.item_emb.weight.grad]), ego.grad)


def test_an_adjacency_called_symmetric_must_be():
    data = _data(n_users=20, n_items=30, n_pairs=60)
    model = LightGCN(20, 30, dim=4, layers=1)
    with pytest.raises(ValueError, match="given as symmetric is not; pass symmetric=False"):
        model.set_adjacency(scaled_adjacency(data.train, 20, 30, 0.6, -0.1), symmetric=True)
    model.set_adjacency(scaled_adjacency(data.train, 20, 30, 0.6, -0.1), symmetric=False)
    assert model.adjacency_t.layout == torch.sparse_csr


def test_simplex_history_gradient_reaches_the_history_items():
    data = _data(n_users=20, n_items=30, n_pairs=60)
    model = SimpleX(20, 30, dim=8, gamma=0.0, dropout=0.0)
    model.bind(data)
    users, _ = model.embeddings()
    users[3].sum().backward()
    touched = set(model.item_emb.weight.grad.abs().sum(1).nonzero().flatten().tolist())
    history = set(data.train.to_pairs()[data.train.to_pairs()[:, 0] == 3, 1].tolist())
    assert history and touched == history


def test_an_unbound_graph_backbone_says_to_bind():
    with pytest.raises(RuntimeError, match="bind"):
        LightGCN(3, 4, dim=2, layers=1).embeddings()


@pytest.mark.parametrize("n_layers", [1, 2, 3, 4, 5])
def test_layer_mean_has_the_digits_of_a_stacked_mean(n_layers):
    g = torch.Generator().manual_seed(n_layers)
    layers = [torch.randn(500, 64, generator=g, requires_grad=True) for _ in range(n_layers)]
    grad = torch.randn(500, 64, generator=g)
    want = torch.stack(layers).mean(0)
    want_grads = torch.autograd.grad(want, layers, grad)
    got = layer_mean(layers)
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(got, layers, grad), want_grads))
