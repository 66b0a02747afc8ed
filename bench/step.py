"""The training step, in one place.

A step turns a loader batch into the loss's inputs and the loss value:

1. the backbone encodes the batch into training queries (:meth:`encode`; one propagation
   or one causal pass per step),
2. negatives are drawn for the queries' users (or given),
3. positives and negatives are scored (:meth:`bench.contracts.Queries.score`, the one place
   that chooses between gathering item rows and a full matmul),
4. the :class:`~bench.contracts.LossBatch` is built and the loss called, plus any term
   the backbone adds (XSimGCL's contrastive loss).

After the optimiser step, :func:`after_update` runs the loss's ``after_step`` hook (e.g.
SL@K's threshold refresh, which sees the updated model) and shares the state rows the
loss declares (``synced_rows``) across data-parallel ranks.

The Lightning module calls :func:`train_step` and :func:`after_update`; scripts and
benchmarks that run steps without Lightning call :func:`optimise`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bench.contracts import LossBatch
from bench.distributed import sync_rows

if TYPE_CHECKING:
    from bench.losses.base import RecLoss
    from bench.models.base import EmbeddingModel
    from bench.sampling import UniformNegativeSampler


@dataclass
class StepOutput:
    """What a step produced.

    Attributes:
        loss: the scalar to minimise (the loss plus the backbone's extra term).
        rec_loss: the loss alone (detached).
        extra_loss: the backbone's extra term (detached), or None.
        batch: the loss's inputs, kept for :func:`after_update`.
    """

    loss: Tensor
    rec_loss: Tensor
    extra_loss: Tensor | None
    batch: LossBatch

    @property
    def size(self) -> int:
        """Training pairs in the step."""
        return int(self.batch.pos.numel())


def train_step(model: EmbeddingModel, loss: RecLoss, rows: Tensor, *,
               sampler: UniformNegativeSampler | None = None, generator: torch.Generator | None = None,
               negatives: Tensor | None = None) -> StepOutput:
    """Forward part of one training step.

    Args:
        model: the backbone.
        loss: the loss (its ``n_negatives`` sets N).
        rows: (B, 3) loader rows (user, positive item, pair id); sequential tasks: users.
        sampler, generator: draw N negatives per query (uniform over non-positives) ...
        negatives: ... or these (P, N) item ids, e.g. pre-sampled by a benchmark.
    Returns:
        the :class:`StepOutput`; call ``output.loss.backward()``, step the optimiser,
        then :func:`after_update`.
    """
    queries = model.encode(rows)
    if negatives is None:
        if sampler is None or generator is None:
            raise ValueError("train_step needs negatives, or a sampler and a generator to draw them")
        negatives = sampler.sample(queries.users, loss.n_negatives, generator)
    scores = queries.score(torch.cat([queries.items.unsqueeze(1), negatives], dim=1))
    batch = LossBatch(pos=scores[:, 0], neg=scores[:, 1:], users=queries.users, items=queries.items,
                      negatives=negatives, pair_ids=queries.pair_ids, full_scores=queries.full_rows, scorer=model)
    value = loss(batch)
    extra = model.extra_loss(queries.users, queries.items)
    total = value if extra is None else value + extra
    return StepOutput(total, value.detach(), None if extra is None else extra.detach(), batch)


def after_update(loss: RecLoss, output: StepOutput) -> None:
    """After the optimiser step: the loss's ``after_step`` hook, then its declared state
    rows shared with every data-parallel rank (a no-op in a single process)."""
    loss.after_step(output.batch)
    for buffer, rows in loss.synced_rows(output.batch):
        sync_rows(buffer, rows)


def optimise(model: EmbeddingModel, loss: RecLoss, optimizer: torch.optim.Optimizer, rows: Tensor, *,
             sampler: UniformNegativeSampler | None = None, generator: torch.Generator | None = None,
             negatives: Tensor | None = None) -> StepOutput:
    """A whole step outside Lightning: zero the gradients, :func:`train_step`, backward,
    optimiser step, :func:`after_update`."""
    optimizer.zero_grad(set_to_none=True)
    output = train_step(model, loss, rows, sampler=sampler, generator=generator, negatives=negatives)
    output.loss.backward()
    optimizer.step()
    after_update(loss, output)
    return output
