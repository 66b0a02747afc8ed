"""Learning to rank: each query ranks its own candidate documents, scored from their features.

The data are LETOR folds (``dataset=mq2008 dataset.fold=1``): lists of documents with feature
vectors and graded relevance labels. A backbone of ``bench.models.ltr`` scores a padded batch
of lists, a loss with a list form (:meth:`~bench.losses.base.RecLoss.list_loss`) trains on
them, and evaluation ranks every list's documents with graded gains
(:func:`bench.evaluation.graded.graded_metrics`: NDCG@K, ``2^rel - 1`` by default). Nothing
is sampled: a list is its query's whole candidate set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from bench.datasets.letor import LetorData, LetorSplit
from bench.errors import ConfigError, TrainingDiverged
from bench.evaluation.graded import GAINS, graded_metrics
from bench.evaluation.ties import check_mode
from bench.losses import LOSSES
from bench.losses.base import RecLoss, has_list_form
from bench.sampling import PairBatchSampler, negatives_generator
from bench.tasks.datamodule import EvaluatedDataModule
from bench.tasks.module import RankingModule

log = logging.getLogger(__name__)

EMPTY_QUERIES = ("exclude", "zero")


@dataclass(frozen=True)
class RankingLists:
    """One split's lists, stored flat: query q owns rows ``offsets[q]:offsets[q + 1]``.

    Attributes:
        features: (n_docs, F) float32.
        labels: (n_docs,) int64 relevance grades.
        offsets: (n_queries + 1,) int64.
    """

    features: Tensor
    labels: Tensor
    offsets: Tensor

    @classmethod
    def from_split(cls, split: LetorSplit) -> RankingLists:
        return cls(features=torch.from_numpy(split.features).float(), labels=torch.from_numpy(split.labels).long(),
                   offsets=torch.from_numpy(split.offsets).long())

    @property
    def n_queries(self) -> int:
        return int(self.offsets.numel() - 1)

    @property
    def n_docs(self) -> int:
        return int(self.labels.numel())

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    def lengths(self) -> Tensor:
        """(n_queries,) documents per list."""
        return self.offsets[1:] - self.offsets[:-1]

    def _per_query(self, values: Tensor, reduce: str) -> Tensor:
        query_of = torch.repeat_interleave(torch.arange(self.n_queries), self.lengths())
        fill = float("-inf") if reduce == "amax" else float("inf")
        out = torch.full((self.n_queries,), fill, dtype=torch.float64)
        return out.scatter_reduce(0, query_of, values.double(), reduce=reduce)

    def has_relevant(self) -> Tensor:
        """(n_queries,) bool: the list holds a document with a grade above 0."""
        return self._per_query(self.labels, "amax") > 0

    def has_two_grades(self) -> Tensor:
        """(n_queries,) bool: the list's grades are not all equal (a loss has something to learn)."""
        return self._per_query(self.labels, "amax") > self._per_query(self.labels, "amin")

    def batch(self, queries: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Padded lists of ``queries`` (b,): features (b, L, F) (0 on padding), labels (b, L)
        (0 on padding) and the mask (b, L), True for real documents; L is the longest list."""
        queries = queries.cpu()
        lengths = self.lengths()[queries]
        width = int(lengths.max()) if queries.numel() else 0
        place = torch.arange(width)
        mask = place[None, :] < lengths[:, None]
        rows = (self.offsets[queries][:, None] + place[None, :]).masked_fill(~mask, 0)
        features = self.features[rows].masked_fill(~mask[..., None], 0.0)
        return features, self.labels[rows].masked_fill(~mask, 0), mask

    def summary(self) -> dict[str, int]:
        lengths = self.lengths()
        return {"queries": self.n_queries, "documents": self.n_docs,
                "max_list": int(lengths.max()) if lengths.numel() else 0,
                "without_relevant": int((~self.has_relevant()).sum())}


@dataclass(frozen=True)
class LtrSplits:
    """The three splits of one fold, as the run records them."""

    name: str
    fold: int
    train: RankingLists
    valid: RankingLists
    test: RankingLists

    @property
    def n_features(self) -> int:
        return self.train.n_features

    def summary(self) -> dict[str, Any]:
        return {"dataset": self.name, "fold": self.fold, "n_features": self.n_features,
                **{f"{split}_{key}": value for split in ("train", "valid", "test")
                   for key, value in getattr(self, split).summary().items()}}

    def describe(self) -> str:
        return (f"data {self.name} fold {self.fold}: {self.n_features} features; train / valid / test "
                f"{self.train.n_queries} / {self.valid.n_queries} / {self.test.n_queries} queries, "
                f"{self.train.n_docs} / {self.valid.n_docs} / {self.test.n_docs} documents")


class ListEvaluator:
    """Ranks every document of every evaluated list; graded metrics per query.

    Lists without a relevant document have no ideal ranking (IDCG = 0): with
    ``empty_queries="exclude"`` (default) they are left out of every average and counted in
    ``n_skipped``; ``"zero"`` counts them with NDCG 0, as trec_eval does for a query in its
    qrels.

    Args:
        lists: the split's lists.
        ks: cut-offs.
        ties: how tied documents are ordered (``eval.ties``).
        gain: "exponential" (2^rel - 1) or "linear" (rel).
        empty_queries: "exclude" or "zero".
        max_docs: padded (query, document) entries per chunk (memory bound).
    """

    def __init__(self, lists: RankingLists, ks: Sequence[int], ties: str = "expected", gain: str = "exponential",
                 empty_queries: str = "exclude", max_docs: int = 1 << 16) -> None:
        self.lists = lists
        self.ks = tuple(sorted(int(k) for k in ks))
        self.ties = check_mode(ties)
        self.gain = gain
        keep = lists.has_relevant() if empty_queries == "exclude" else torch.ones(lists.n_queries, dtype=torch.bool)
        self.users = keep.nonzero().squeeze(1)  # "users": the name every task's evaluator shares
        self.n_skipped = lists.n_queries - int(self.users.numel())
        longest = int(lists.lengths().max()) if lists.n_queries else 1
        self.chunk_size = max(1, int(max_docs) // max(longest, 1))

    def user_chunks(self, rank: int = 0, world: int = 1) -> list[Tensor]:
        """The evaluated query ids in chunks; with ``world`` > 1, rank ``rank``'s share."""
        return list(self.users[rank::world].split(self.chunk_size))

    @torch.no_grad()
    def evaluate_chunk(self, model: Callable[[Tensor, Tensor], Tensor], queries: Tensor,
                       device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """Per-query metrics (``{"ndcg@5": (b,) float64, ..., tie columns}``) of ``queries`` (b,)
        scored by ``model(features, mask)``."""
        features, labels, mask = (t.to(device) for t in self.lists.batch(queries))
        # graded_metrics refuses NaN scores on real documents (TrainingDiverged)
        return graded_metrics(model(features, mask).float(), labels, mask, self.ks, self.ties, self.gain)

    def evaluate(self, model: Callable[[Tensor, Tensor], Tensor],
                 device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """Per-query metrics of every evaluated query (see :meth:`evaluate_chunk`)."""
        return {k: v.cpu() for k, v in self.metrics([self.evaluate_chunk(model, chunk, device)
                                                      for chunk in self.user_chunks()]).items()}

    @staticmethod
    def metrics(parts: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """The per-query metrics of chunks (:meth:`evaluate_chunk`), concatenated in order: the
        metrics stage of :meth:`bench.evaluation.FullRankingEvaluator.metrics`, done per chunk here."""
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {}


class _Queries(Dataset):
    """Training query ids, indexed by a whole batch of positions at once."""

    def __init__(self, queries: Tensor) -> None:
        self.queries = queries

    def __len__(self) -> int:
        return int(self.queries.numel())

    def __getitem__(self, idx: Tensor) -> Tensor:
        return self.queries[idx]


class LtrDataModule(EvaluatedDataModule):
    """Seeded shuffled batches of training queries; evaluation chunks of queries.

    Only training lists with two or more grades are batched: the others give every loss
    nothing to learn.

    Args:
        data: one fold.
        seed: run seed (batch order).
        batch_size: lists per training batch.
        ks, ties, gain, empty_queries, max_docs: see :class:`ListEvaluator`.
    """

    def __init__(self, data: LetorData, seed: int, batch_size: int = 64, ks: Sequence[int] = (1, 3, 5, 10),
                 ties: str = "expected", gain: str = "exponential", empty_queries: str = "exclude",
                 max_docs: int = 1 << 16) -> None:
        super().__init__()
        self.splits = LtrSplits(name=data.name, fold=data.fold, train=RankingLists.from_split(data.train),
                                valid=RankingLists.from_split(data.valid), test=RankingLists.from_split(data.test))
        self.seed, self.batch_size = seed, int(batch_size)
        self.train_lists = self.splits.train
        self.train_queries = self.train_lists.has_two_grades().nonzero().squeeze(1)
        if self.train_queries.numel() == 0:
            raise ConfigError(f"{data.name} fold {data.fold}: no training list has two relevance grades, so no "
                              "loss has anything to learn; check the data files")
        self.val_evaluator = ListEvaluator(self.splits.valid, ks, ties, gain, empty_queries, max_docs)
        self.test_evaluator = ListEvaluator(self.splits.test, ks, ties, gain, empty_queries, max_docs)

    def summary(self) -> dict[str, Any]:
        """What results.json records under ``data``."""
        return {**self.splits.summary(), "train_queries_batched": int(self.train_queries.numel())}

    def describe(self) -> str:
        return self.splits.describe()

    def model_kwargs(self) -> dict[str, int]:
        """The sizes a backbone is built with."""
        return {"n_features": self.splits.n_features}

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        return DataLoader(_Queries(self.train_queries),
                          sampler=PairBatchSampler(int(self.train_queries.numel()), self.batch_size, self.seed,
                                                   rank=rank, world=world),
                          batch_size=None)


def list_form_losses() -> list[str]:
    """Registered losses that train on graded lists (``task=ltr``)."""
    return [name for name in LOSSES.names() if has_list_form(cast(type, LOSSES.get(name)))]


class LtrModule(RankingModule):
    """The learning-to-rank Lightning module: a list scorer trained by a loss's list form.

    It keeps :class:`~bench.tasks.module.RankingModule`'s logging, history, checkpoint state
    and test bookkeeping (``test_per_user`` holds per-query metrics); only the training step
    and the scoring of evaluation chunks differ.

    Args:
        model: a list scorer, (Q, L, F) features and (Q, L) mask -> (Q, L) scores.
        loss: a loss with a list form.
        optimizer: a callable params -> torch optimizer.
        seed: run seed (the per-step generator a loss may use).
        divergence_factor: as :class:`~bench.tasks.module.RankingModule`'s.
    """

    progress_metrics = ("ndcg@5", "ndcg@10")

    def __init__(self, model: nn.Module, loss: RecLoss, optimizer: Callable[..., torch.optim.Optimizer],
                 seed: int, divergence_factor: float | None = 1000.0) -> None:
        if not has_list_form(loss):
            name = next((n for n in LOSSES.names() if LOSSES.get(n) is type(loss)), type(loss).__name__)
            raise ConfigError(f"loss={name} has no learning-to-rank form; task=ltr trains with "
                              f"{', '.join(list_form_losses())}")
        super().__init__(model, loss, optimizer, seed,  # type: ignore[arg-type]
                         divergence_factor=divergence_factor)  # a list scorer, not an EmbeddingModel
        self.lists: RankingLists | None = None

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if not isinstance(datamodule, LtrDataModule):
            raise TypeError("LtrModule needs an LtrDataModule: Trainer.fit(module, datamodule=...)")
        self.bind(datamodule)

    def bind(self, datamodule: LtrDataModule) -> None:  # type: ignore[override]
        if not self._bound:
            cast(Any, self.model).bind(datamodule.train_lists)  # a list scorer's hook
            self._bound = True
        self.lists = datamodule.train_lists
        self.val_evaluator, self.test_evaluator = datamodule.val_evaluator, datamodule.test_evaluator

    def training_step(self, queries: Tensor, batch_idx: int) -> Tensor:
        if self.lists is None:
            raise RuntimeError("the module was not set up with a data module")
        global_batch = batch_idx * self.trainer.world_size + self.trainer.global_rank
        generator = negatives_generator(self.device, self.seed, self.current_epoch, global_batch)
        features, labels, mask = (t.to(self.device) for t in self.lists.batch(queries))
        loss = self.loss.list_loss(self.model(features, mask), labels, mask, generator=generator)
        if not torch.isfinite(loss):
            raise TrainingDiverged(f"training loss is {loss.item()} at epoch {self.current_epoch}, batch {batch_idx}; "
                                   "lower optimizer.lr or raise the loss temperature")
        self._note_loss(loss)
        self.step_loss = loss.detach()
        self._epoch_loss_sum = self._epoch_loss_sum + self.step_loss * queries.numel()
        self._epoch_pairs += int(queries.numel())
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Tensor, batch_idx: int) -> None:
        pass  # no per-step loss state in list forms

    def _eval_step(self, evaluator: Any, users: Tensor, stage: str) -> None:
        if evaluator is None:
            raise RuntimeError("the module was not set up with a data module")
        self._parts.append(evaluator.evaluate_chunk(self.model, users, self.device))
        self._users.append(users.cpu())


class LtrTask:
    """``task=ltr``.

    Args:
        queries_per_batch: lists per training batch.
        gain: "exponential" (2^rel - 1, the LETOR convention) or "linear" (rel, trec_eval on raw grades).
        empty_queries: "exclude" (default; reported in results.json) or "zero" (NDCG 0, as trec_eval).
    """

    name = "ltr"

    def __init__(self, queries_per_batch: int = 64, gain: str = "exponential", empty_queries: str = "exclude",
                 name: str = "ltr") -> None:
        if gain not in GAINS:
            raise ConfigError(f"task.gain={gain!r} is not a gain; use {' or '.join(GAINS)}")
        if empty_queries not in EMPTY_QUERIES:
            raise ConfigError(f"task.empty_queries={empty_queries!r}: use {' or '.join(EMPTY_QUERIES)}")
        if int(queries_per_batch) < 1:
            raise ConfigError(f"task.queries_per_batch={queries_per_batch} is out of range: use an integer >= 1")
        self.queries_per_batch, self.gain, self.empty_queries = int(queries_per_batch), gain, empty_queries

    def datamodule(self, data: Any, seed: int, ks: Sequence[int] = (1, 3, 5, 10), max_scores: int = 1 << 24,
                   ties: str = "expected", **kwargs: Any) -> LtrDataModule:
        """The data module; ``kwargs`` (batch_size, test_masks_valid: settings of the other
        tasks) do not apply."""
        if not isinstance(data, LetorData):
            raise ConfigError(f"task=ltr needs a learning-to-rank data set (dataset=mq2008 or ohsumed), "
                              f"got a {type(data).__name__}")
        # an evaluation chunk's (queries, documents, features) block stays within eval.max_scores
        max_docs = max(1, int(max_scores) // max(data.train.n_features, 1))
        return LtrDataModule(data, seed, self.queries_per_batch, ks, ties, self.gain, self.empty_queries, max_docs)
