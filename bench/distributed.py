"""Data-parallel (DDP) helpers: every rank ends an evaluation with every user's metrics,
and per-user loss state written on one rank reaches all of them (:func:`sync_rows`,
called by the training step for what a loss declares in ``synced_rows``).

All collectives are no-ops in a single process, so single-device runs are unchanged.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import Tensor

#: where launchers put a process's global rank, in the order Lightning reads them (LOCAL_RANK before
#: SLURM_PROCID: SLURM sets that one even where it does not start the processes)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def process_rank() -> int:
    """This process's global rank as Lightning's ``rank_zero_only.rank`` holds it, read without
    importing Lightning (seconds, which a refused command should not pay): the value Lightning set,
    once it is imported, else the launcher's environment as Lightning reads it on import; 0 alone."""
    held = sys.modules.get("lightning_utilities.core.rank_zero")
    rank = getattr(getattr(held, "rank_zero_only", None), "rank", None)
    if rank is not None:
        return int(rank)
    for key in RANK_VARIABLES:
        if os.environ.get(key) is not None:
            return int(os.environ[key])
    return 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_gather(obj):
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_per_user(users: Tensor, per_user: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """Concatenate the ranks' (users (U_r,), {metric: (U_r,)}) into every user's, ordered by user id.

    Each rank evaluates a disjoint share of the users, so the union is the whole set;
    means are taken after this, over users, never as a mean of rank means.
    """
    if world_size() == 1:
        return users, per_user
    parts = _all_gather((users.cpu(), {k: v.cpu() for k, v in per_user.items()}))
    all_users = torch.cat([u for u, _ in parts])
    order = torch.argsort(all_users)
    keys = next((p.keys() for _, p in parts if p), per_user.keys())
    return all_users[order], {k: torch.cat([p[k] for u, p in parts if u.numel()])[order] for k in keys}


def apply_rank_updates(buffer: Tensor, updates: list[tuple[Tensor, Tensor]]) -> None:
    """Write each rank's (index, values) into ``buffer`` in rank order: where two ranks
    wrote the same row in one step, the higher rank's value is kept, on every rank alike."""
    for index, values in updates:
        buffer[index.to(buffer.device)] = values.to(buffer.device, buffer.dtype)


def sync_rows(buffer: Tensor, index: Tensor) -> None:
    """Share the rows ``index`` that this rank just wrote in ``buffer`` with every rank."""
    if world_size() == 1 or index is None:
        return
    apply_rank_updates(buffer, _all_gather((index.cpu(), buffer[index].detach().cpu())))
