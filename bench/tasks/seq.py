"""Sequential recommendation: predict each user's next item from their history."""

from __future__ import annotations

from typing import Any

import torch

from bench.datasets.base import Interactions
from bench.datasets.sequences import leave_one_out
from bench.errors import ConfigError
from bench.tasks.datamodule import RankingDataModule


class SeqTask:
    """Leave-one-out by time (last item test, second-to-last validation, the rest train);
    training pairs are (history up to t, item t + 1) with sampled negatives, batched by
    user (``users_per_batch``); evaluation ranks every item for each user, the history
    masked (docs/evaluation.md#splits); a pair's id is its target's position in the
    sequences (for per-pair state)."""

    name = "seq"

    def __init__(self, users_per_batch: int = 128, name: str = "seq") -> None:
        self.users_per_batch = int(users_per_batch)

    def datamodule(self, data: Any, seed: int, **kwargs: Any) -> RankingDataModule:
        if not isinstance(data, Interactions):
            raise ConfigError(f"task=seq needs timestamped interactions, got a {type(data).__name__}")
        splits, sequences = leave_one_out(data)
        # a training batch is users (each brings its window of next-item pairs)
        users = torch.nonzero(sequences.indptr[1:] - sequences.indptr[:-1] >= 2).squeeze(1)
        rows = torch.stack([users, torch.zeros_like(users)], 1)
        kwargs["batch_size"] = self.users_per_batch
        return RankingDataModule(splits, seed=seed, train_rows=rows, n_pairs=int(sequences.items.numel()),
                                 sequences=sequences, **kwargs)
