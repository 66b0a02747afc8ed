"""The training step, in one place.

A step turns a loader batch into the loss's inputs and the loss value:

1. the backbone encodes the batch into training queries (:meth:`encode`; one propagation
   or one causal pass per step),
2. negatives are drawn for the queries' users (or given): ``per_pair``, N fresh negatives per
   pair, uniform over the user's non-positives; or ``shared``, one uniform draw of N items for
   the whole batch (or one per group of rows), each row's own training positives in it masked
   out of its denominator,
3. positives and negatives are scored (:meth:`bench.contracts.Queries.score`, the one place
   that chooses between gathering item rows and a full matmul; shared negatives are one
   (P, d) x (d, N) matmul, :meth:`~bench.contracts.Queries.score_shared`, or one per group,
   :meth:`~bench.contracts.Queries.score_groups`),
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

from bench.contracts import LossBatch, draws_per_row, group_layout
from bench.distributed import sync_rows
from bench.errors import ConfigError

NEGATIVE_MODES = ("per_pair", "shared")

if TYPE_CHECKING:
    from bench.losses.base import RecLoss
    from bench.models.base import EmbeddingModel
    from bench.sampling import UniformNegativeSampler


def negatives_overrides(mode: str) -> list[str]:
    """A mode as benchmarks name it -> the run's overrides: ``per_pair``, ``shared`` or
    ``shared/G`` (``train.shared_groups=G``: one draw per group of ceil(B / G) rows)."""
    base, _, groups = mode.partition("/")
    if base not in NEGATIVE_MODES or (groups and (base != "shared" or not groups.isdigit() or int(groups) < 1)):
        raise ConfigError(f"unknown negatives mode '{mode}'; use per_pair, shared or shared/G with G >= 1")
    return [f"train.negatives={base}", *([f"train.shared_groups={groups}"] if groups else [])]


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
               negatives: Tensor | None = None, mode: str = "per_pair", groups: int = 1,
               distinct: bool = False, embedding_reg: float = 0.0) -> StepOutput:
    """Forward part of one training step.

    Args:
        model: the backbone.
        loss: the loss (its ``n_negatives`` sets N).
        rows: (B, 3) loader rows (user, positive item, pair id); sequential tasks: users.
        sampler, generator: draw the negatives ...
        negatives: ... or use these (P, N) item ids (per-pair), e.g. pre-sampled by a benchmark.
        mode: "per_pair" (N fresh negatives per pair) or "shared" (one draw of N items for the
            batch; losses that keep one negative per pair, ``loss.shares_negatives = False``
            such as BPR, stay per-pair).
        groups: shared mode only: split the rows into this many groups (consecutive rows,
            ceil(P / groups) each), each with its own draw of N items; 1 = one draw for the batch.
        distinct: draw N different items (per pair, or per shared draw) instead of N with
            replacement (``train.distinct_negatives``; the SL@K reference code's per-pair sample).
        embedding_reg: λ >= 0 of the embedding regulariser (``train.embedding_reg``): the step's
            loss gains λ/2 (‖e_u‖² + ‖e_i‖² + Σ_j ‖e_j‖²) / B over the rows of the backbone's
            embedding tables that its B rows use (users, positives, and every negative: a pair's N
            per-pair negatives, or the shared draw's items once), as LightGCN's and RecBole's
            regulariser (:meth:`~bench.models.base.EmbeddingModel.embedding_penalty`). Counted in
            the extra term (``train/extra_loss``), not in the loss's own value. 0 = off.
    Returns:
        the :class:`StepOutput`; call ``output.loss.backward()``, step the optimiser,
        then :func:`after_update`.
    """
    if mode not in NEGATIVE_MODES:
        raise ConfigError(f"unknown train.negatives '{mode}'; use {' or '.join(NEGATIVE_MODES)}")
    if groups < 1:
        raise ConfigError(f"train.shared_groups={groups} is out of range: use an integer >= 1")
    queries = model.encode(rows)
    valid = draws = hits = None
    if negatives is None:
        if sampler is None or generator is None:
            raise ValueError("train_step needs negatives, or a sampler and a generator to draw them")
        n_rows = queries.users.numel()
        if mode == "shared" and loss.shares_negatives:
            _, n_groups = group_layout(n_rows, groups)
            draws = sampler.sample_shared(loss.n_negatives, generator, queries.users.device,
                                          groups=None if n_groups == 1 else n_groups, distinct=distinct)
            hits = sampler.shared_hits(queries.users, draws)
            valid = torch.ones(n_rows, loss.n_negatives, dtype=torch.bool, device=draws.device)
            valid[hits] = False
            negatives = draws_per_row(draws, n_rows)
        else:
            negatives = sampler.sample(queries.users, loss.n_negatives, generator, distinct=distinct)
    if draws is not None and hits is not None:  # shared draws: a row's own positives masked
        pos, neg = queries.score_shared(draws) if draws.dim() == 1 else queries.score_groups(draws)
        # the few hits written in place: a dense masked_fill is one more pass over (P, N) scores,
        # forward and backward (the matmuls' backward does not need their output)
        neg = neg.index_put_(hits, torch.tensor(float("-inf"), device=neg.device))
    else:
        scores = queries.score(torch.cat([queries.items.unsqueeze(1), negatives], dim=1))
        pos, neg = scores[:, 0], scores[:, 1:]
    pos_log_q = neg_log_q = log_q_kept = None
    if getattr(loss, "uses_log_q", False):
        if sampler is None:
            raise ValueError(f"{type(loss).__name__} corrects by the sampler's probabilities: "
                             "give train_step the sampler")
        log_q = sampler.log_prob(pos.device)
        pos_log_q, neg_log_q = log_q[queries.items], log_q[negatives]
        log_q_kept = sampler.log_kept(queries.users) if draws is None else torch.zeros_like(pos_log_q)
    batch = LossBatch(pos=pos, neg=neg, users=queries.users, items=queries.items, negatives=negatives,
                      pair_ids=queries.pair_ids, full_scores=queries.full_rows, scorer=model, neg_valid=valid,
                      draws=draws, pos_log_q=pos_log_q, neg_log_q=neg_log_q, log_q_kept=log_q_kept,
                      queries=queries, generator=generator)
    value = loss(batch)
    # a loss that freezes the backbone for this step (an adversary's epoch) freezes it entirely
    extra = model.extra_loss(queries.users, queries.items) if loss.trains_backbone else None
    if embedding_reg and loss.trains_backbone:
        drawn = negatives if draws is None else draws
        penalty = embedding_reg * model.embedding_penalty(queries.users, queries.items, drawn)
        extra = penalty if extra is None else extra + penalty
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
             negatives: Tensor | None = None, mode: str = "per_pair", groups: int = 1) -> StepOutput:
    """A whole step outside Lightning: zero the gradients, :func:`train_step`, backward,
    optimiser step, :func:`after_update`."""
    optimizer.zero_grad(set_to_none=True)
    output = train_step(model, loss, rows, sampler=sampler, generator=generator, negatives=negatives, mode=mode,
                         groups=groups)
    output.loss.backward()
    optimizer.step()
    after_update(loss, output)
    return output
