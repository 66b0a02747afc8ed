"""Products with a fixed sparse matrix (a graph backbone's adjacency), forward and backward in CSR.

``torch.sparse.mm`` on a COO matrix is what graph backbones used first. On CPU its backward with
respect to the dense operand builds and coalesces Aᵀ on every call; on Gowalla (70,846 nodes,
1.47 M entries, d = 64, 2 cores) a 2-layer LightGCN step spent 132 ms in the propagation and 163 ms
in the backward. Here A and Aᵀ are converted to CSR once, at ``bind``, and the backward is the
product with the stored Aᵀ (A itself for a symmetric adjacency): 37.5 and 54 ms, the step 317 -> 112 ms
(``benchmarks/profile_graph_step.py``). On CPU the product is torch's row-parallel CSR kernel
(``torch.sparse.mm(..., reduce="sum")``, 12% faster than MKL's ``@`` on Gowalla), whose digits are the
COO path's, bit for bit, forward and gradient, at every width: each output row is the same ordered
sum over the row's stored entries (MKL's ``@`` differs in the last bits at d of 4 to 24;
tests/models/test_sparse_product.py checks it). Other devices use ``@`` (cuSPARSE), whose digits are not
checked against the COO path here.

A bound model's CSR buffers cannot be deep-copied (torch has no storage access for CSR tensors):
``copy.deepcopy`` of a graph backbone fails after ``bind``, so weight-averaging callbacks that copy the
module (SWA, EMA) need the copy made before ``bind`` or ``bind`` called again on the copy.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

# torch announces CSR's beta status once per process; a user can do nothing about it
_BETA = "Sparse CSR tensor support is in beta state"


def to_csr(matrix: Tensor) -> Tensor:
    """A sparse COO (coalesced or not) or CSR matrix -> CSR, entries of a row in column order."""
    if matrix.layout == torch.sparse_csr:
        return matrix
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_BETA)
        return matrix.coalesce().to_sparse_csr()


def transpose_csr(matrix: Tensor) -> Tensor:
    """(n, m) CSR -> its (m, n) transpose, in CSR (entries of a row in column order)."""
    return to_csr(matrix.to_sparse_coo().t())


def _product(matrix: Tensor, x: Tensor) -> Tensor:
    # reduce= selects torch's own CSR kernel, which only CPU has
    return torch.sparse.mm(matrix, x, reduce="sum") if matrix.device.type == "cpu" else matrix @ x


class _FixedSparseProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix: Tensor, transposed: Tensor, x: Tensor) -> Tensor:
        ctx.transposed = transposed
        return _product(matrix, x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, None, Tensor | None]:
        return None, None, _product(ctx.transposed, grad.contiguous()) if ctx.needs_input_grad[2] else None


def sparse_product(matrix: Tensor, x: Tensor, transposed: Tensor | None = None) -> Tensor:
    """A @ x for a fixed sparse A (no gradient to A's entries), with x's gradient Aᵀ @ grad.

    Args:
        matrix: A, (n, m) sparse CSR (:func:`to_csr`).
        x: (m, d) dense.
        transposed: Aᵀ, (m, n) CSR (:func:`transpose_csr`); None when A is symmetric.
    Returns:
        (n, d) dense, with gradient with respect to ``x``.
    """
    return _FixedSparseProduct.apply(matrix, matrix if transposed is None else transposed, x)
