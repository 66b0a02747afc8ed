r"""SCE: Scalable Cross-Entropy (Mezentsev, Gusak, Oseledets, Frolov, RecSys 2024, arXiv 2409.18721).

A full cross-entropy over a large catalogue, approximated by each position's *hard* negatives,
found without scoring the catalogue for every position: random directions ("buckets") pick the
``bucket_size_x`` positions and the ``bucket_size_y`` items that score highest against them, and a
position meets a bucket's items only if both did:

1. bucket centres :math:`B = d^{-1/4} G`, G Gaussian (n_b, d); with ``mix_x`` random mixtures of the
   batch's query vectors, :math:`B = (d^{-1/4}\Omega)^\top X`, :math:`\Omega` Gaussian (P, n_b);
2. per bucket the top ``bucket_size_x`` positions of :math:`B X^\top` and the top ``bucket_size_y``
   items of :math:`B W^\top` (no gradient in the choice);
3. per bucket and chosen position, cross-entropy of the positive against the bucket's items, the
   positive's own item masked out of them:
   :math:`\log(e^{s^+/\tau} + \sum_{j \in \text{bucket}} e^{s_j/\tau}) - s^+/\tau`;
4. each position keeps its largest loss over the buckets that chose it; the loss is the mean over
   the positions some bucket chose (the others contribute nothing this step).

The loss ignores the step's sampled negatives (set ``n_negatives: 1``, the cheapest draw) and
scores its own candidates from ``LossBatch.queries`` (query vectors and the item table, with
gradient). The bucket directions come from the step's random stream, so a resumed run sees the
same ones.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch, Queries
from bench.errors import ConfigError
from bench.losses.base import RecLoss, positive
from bench.losses.registry import LOSSES


def sce_loss(queries: Queries, pos: Tensor, n_buckets: int, bucket_size_x: int, bucket_size_y: int,
             mix_x: bool = False, tau: float = 1.0, generator: torch.Generator | None = None) -> Tensor:
    """Scalar SCE over the P positions of ``queries`` (see the module).

    Args:
        queries: the encoded batch: ``vectors`` (P, d), ``item_emb`` (I, d), ``items`` (P,) targets.
        pos: (P,) the positives' scores, with gradient.
        n_buckets, bucket_size_x, bucket_size_y: n_b, b_x (positions per bucket), b_y (items per bucket).
        mix_x: bucket centres as random mixtures of the query vectors instead of Gaussian directions.
        tau: temperature on every score (1: the authors' dot products).
        generator: the bucket draws' random stream.
    Returns:
        the mean over the positions that some bucket chose of each one's largest bucket loss.
    """
    x = queries.vectors
    w = F.normalize(queries.item_emb, dim=-1) if queries.cosine else queries.item_emb
    p, d = x.shape
    bx, by = min(bucket_size_x, p), min(bucket_size_y, w.shape[0])
    with torch.no_grad():
        scale = d ** -0.25
        if mix_x:
            omega = torch.randn(p, n_buckets, generator=generator, device=x.device, dtype=x.dtype) * scale
            centres = omega.T @ x.detach()
        else:
            centres = torch.randn(n_buckets, d, generator=generator, device=x.device, dtype=x.dtype) * scale
        top_x = (centres @ x.detach().T).topk(bx, dim=1).indices  # (n_b, b_x) positions
        top_y = (centres @ w.detach().T).topk(by, dim=1).indices  # (n_b, b_y) items
    neg = torch.bmm(x[top_x], w[top_y].transpose(1, 2)) / tau  # (n_b, b_x, b_y)
    neg = neg.masked_fill(top_y[:, None, :] == queries.items[top_x][:, :, None], float("-inf"))
    own = pos[top_x] / tau  # (n_b, b_x)
    per_bucket = torch.logaddexp(own, torch.logsumexp(neg, dim=2)) - own
    worst = torch.full((p,), float("-inf"), device=x.device, dtype=per_bucket.dtype).scatter_reduce(
        0, top_x.reshape(-1), per_bucket.reshape(-1), "amax", include_self=True)
    chosen = torch.isfinite(worst)
    return worst[chosen].mean()


def auto_buckets(positions: int) -> int:
    """The authors' choice n_b = b_x = int(2 sqrt(positions in the batch))."""
    return max(1, int(2 * math.sqrt(positions)))


@LOSSES.register("sce")
class SCE(RecLoss):
    """Scalable Cross-Entropy: cross-entropy against bucketed hard negatives of the whole catalogue.

    Args:
        n_buckets: n_b; null = int(2 sqrt(P)) for a batch of P positions (the authors' rule).
        bucket_size_x: positions per bucket; null = n_b (as in every config of the authors).
        bucket_size_y: items per bucket (256 in most of the authors' configs; grid 64-4096).
        mix_x: bucket centres as random mixtures of the batch's query vectors.
        tau: temperature on the scores (1 for dot products, as the authors; ~0.1-0.2 with cosine scores).
        n_negatives: the step's sampled negatives, unused (1: the cheapest draw).
    """

    shares_negatives = False

    def __init__(self, n_buckets: int | None = None, bucket_size_x: int | None = None, bucket_size_y: int = 256,
                 mix_x: bool = False, tau: float = 1.0, n_negatives: int = 1) -> None:
        super().__init__(n_negatives=n_negatives)
        for name, value in (("n_buckets", n_buckets), ("bucket_size_x", bucket_size_x),
                            ("bucket_size_y", bucket_size_y)):
            # b_y >= 2: a bucket's items are distinct, so a position keeps at least one after its own is masked
            least = 2 if name == "bucket_size_y" else 1
            if value is not None and int(value) < least:
                raise ConfigError(f"loss.{name} must be an integer >= {least} (or null for n_buckets, "
                                  f"bucket_size_x), got {value}")
        self.n_buckets = None if n_buckets is None else int(n_buckets)
        self.bucket_size_x = None if bucket_size_x is None else int(bucket_size_x)
        self.bucket_size_y, self.mix_x, self.tau = int(bucket_size_y), bool(mix_x), positive("loss.tau", tau)

    def forward(self, batch: LossBatch) -> Tensor:
        queries = batch.require("queries")
        n_b = self.n_buckets or auto_buckets(batch.pos.numel())
        return sce_loss(queries, batch.pos, n_b, self.bucket_size_x or n_b, self.bucket_size_y, self.mix_x,
                        self.tau, batch.generator)
