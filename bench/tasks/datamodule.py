"""The data module every task builds: seeded training batches, evaluation chunks, and the
frozen :class:`~bench.contracts.TrainData` that backbones and losses bind to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import lightning as L
from torch import Tensor
from torch.utils.data import DataLoader

from bench.contracts import TrainData
from bench.datasets.base import CSR
from bench.datasets.splits import RankingSplits
from bench.evaluation import DEFAULT_KS, FullRankingEvaluator
from bench.sampling import IndexedPairs, PairBatchSampler, make_sampler

if TYPE_CHECKING:
    from bench.datasets.sequences import Sequences


class EvaluatedDataModule(L.LightningDataModule):
    """What every task's data module shares: validation and test loaders over the chunks of
    queries its two evaluators (``val_evaluator``, ``test_evaluator``: anything with
    ``user_chunks(rank, world)``) rank, each rank taking its share under DDP."""

    val_evaluator: Any
    test_evaluator: Any
    #: the data's identity (:func:`bench.records.identity.data_identity`), set by whoever built it
    identity: str = ""

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _eval_loader(self, evaluator: Any) -> DataLoader:
        rank, world = self._rank_world()  # under DDP each rank ranks a share of the queries
        chunks: Any = evaluator.user_chunks(rank, world)  # a list is a map-style dataset
        return DataLoader(chunks, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_evaluator)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_evaluator)


class RankingDataModule(EvaluatedDataModule):
    """Training rows in seeded shuffled batches; query chunks for full-ranking evaluation.

    Args:
        splits: train / valid / test item lists per query (user or node).
        seed: run seed (batch order).
        batch_size: training rows per batch.
        ks: metric cut-offs.
        max_scores: score-matrix entries per evaluation chunk.
        exclude: item sets masked at validation and test besides the training items
            (link prediction masks each node itself).
        train_rows: (E, 2) rows the loader batches (user, item), if not every
            (user, training item) pair (sequential recommendation batches users).
        n_pairs: training pairs that per-pair state is indexed by, if not one per row.
        node_features: optional (n_users, f) features handed to the backbone.
        sequences: ordered histories handed to sequential backbones.
        ties: how evaluation orders items with tied scores (``eval.ties``).
        test_masks_valid: mask the validation items at test time (``eval.test_masks_valid``);
            False ranks them as non-relevant items, as the SL@K reference code's test does.
        per_edge: the evaluators also rank each held-out (query, item) pair on its own
            (link prediction's per-edge protocol, :mod:`bench.evaluation.per_edge`).
        sampled_negatives: N, to also rank each test item among N sampled items the query never
            interacted with (``eval.sampled_negatives``; the biased protocol of older papers,
            :mod:`bench.evaluation.sampled`); test only, None = off.
        sampled_seed: the seed of that draw (``eval.sampled_seed``).
        sampler, popularity_power: the negative sampler (``train.sampler``: uniform or popularity,
            :func:`bench.sampling.make_sampler`).
    """

    def __init__(self, splits: RankingSplits, seed: int, batch_size: int = 1024, ks: Sequence[int] = DEFAULT_KS,
                 max_scores: int = 1 << 24, exclude: tuple[CSR, ...] = (), train_rows: Tensor | None = None,
                 n_pairs: int | None = None, node_features: Tensor | None = None,
                 sequences: Sequences | None = None, ties: str = "expected", test_masks_valid: bool = True,
                 per_edge: bool = False, sampled_negatives: int | None = None, sampled_seed: int = 0,
                 sampler: str = "uniform", popularity_power: float = 1.0) -> None:
        super().__init__()
        self.splits = splits
        self.graph = per_edge  # link prediction: users and items are the same nodes
        self.seed = seed
        self.batch_size = batch_size
        self.train_rows = splits.train.to_pairs() if train_rows is None else train_rows
        self.train_data = TrainData(n_users=splits.n_users, n_items=splits.n_items, train=splits.train,
                                    n_pairs=len(self.train_rows) if n_pairs is None else int(n_pairs),
                                    node_features=node_features, sequences=sequences)
        self.val_evaluator = FullRankingEvaluator(splits.valid, [splits.train, *exclude], ks, max_scores, ties,
                                                  per_edge=per_edge)
        test_masks = [splits.train, splits.valid, *exclude] if test_masks_valid else [splits.train, *exclude]
        # validation (and so model selection) stays full-ranking only; the sample leaves out the
        # validation items whether or not the test masks them
        self.test_evaluator = FullRankingEvaluator(splits.test, test_masks, ks, max_scores, ties, per_edge=per_edge,
                                                   sampled_negatives=sampled_negatives, sampled_seed=sampled_seed,
                                                   seen=(splits.valid,))
        self.sampler = make_sampler(splits.train, sampler, popularity_power)

    def summary(self) -> dict:
        """What results.json records under ``data``."""
        return self.splits.summary()

    def describe(self) -> str:
        s = self.splits
        if self.graph:
            return (f"data {s.name}: {s.n_users} nodes, {s.train.nnz} train / {s.valid.nnz} valid / {s.test.nnz} test "
                    "links (each edge in both directions)")
        return (f"data {s.name}: {s.n_users} users, {s.n_items} items, {s.train.nnz} train / {s.valid.nnz} valid / "
                f"{s.test.nnz} test interactions")

    def model_kwargs(self) -> dict[str, int]:
        """The sizes a backbone is built with."""
        return {"n_users": self.splits.n_users, "n_items": self.splits.n_items}

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        return DataLoader(IndexedPairs(self.train_rows),
                          sampler=PairBatchSampler(len(self.train_rows), self.batch_size, self.seed, rank=rank,
                                                   world=world),
                          batch_size=None)
