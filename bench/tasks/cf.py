"""Collaborative filtering: training on (user, item) pairs, full-ranking evaluation."""

from __future__ import annotations

import logging
from operator import attrgetter
from typing import Any, Callable

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.utils.data import DataLoader

from bench.datasets.base import CFSplits, CSR, Interactions, split_validation
from bench.errors import ConfigError, TrainingDiverged
from bench.evaluation import FullRankingEvaluator, mean_metrics
from bench.losses.base import LossBatch, RecLoss, TrainData
from bench.models.base import EmbeddingModel
from bench.sampling import IndexedPairs, PairBatchSampler, UniformNegativeSampler, negatives_generator
from bench.tasks.distributed import gather_per_user, sync_rows

log = logging.getLogger(__name__)


class CFDataModule(L.LightningDataModule):
    """Train pairs in seeded shuffled batches; users in chunks for evaluation.

    Args:
        splits: train / valid / test item lists per user (or per source node).
        seed: run seed (batch order).
        batch_size: (u, i) pairs per training batch.
        ks: metric cut-offs.
        max_scores: score-matrix entries per evaluation chunk.
        exclude: item sets masked at validation and test besides the training items
            (link prediction masks each node itself).
        node_features: optional (n_users, f) features handed to the backbone.
        train_pairs: the (E, 2) training pairs, if not every (user, training item) pair.
        sequences: ordered histories handed to sequential backbones.
    """

    def __init__(self, splits: CFSplits, seed: int, batch_size: int = 1024, ks: tuple[int, ...] = (5, 10, 20, 50, 100),
                 max_scores: int = 1 << 24, exclude: tuple[CSR, ...] = (), node_features: Tensor | None = None,
                 train_pairs: Tensor | None = None, sequences: Any = None) -> None:
        super().__init__()
        self.splits = splits
        self.seed = seed
        self.batch_size = batch_size
        self.node_features = node_features
        self.sequences = sequences
        self.train_pairs = self.splits.train.to_pairs() if train_pairs is None else train_pairs
        self.val_evaluator = FullRankingEvaluator(splits.valid, [splits.train, *exclude], ks, max_scores)
        self.test_evaluator = FullRankingEvaluator(splits.test, [splits.train, splits.valid, *exclude], ks, max_scores)
        self.sampler = UniformNegativeSampler(self.splits.train)

    def train_data(self) -> TrainData:
        """What losses and backbones are told about the training data."""
        return TrainData(n_users=self.splits.n_users, n_items=self.splits.n_items, train=self.splits.train,
                         n_pairs=len(self.train_pairs), node_features=self.node_features,
                         sequences=self.sequences)

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        return DataLoader(IndexedPairs(self.train_pairs),
                          sampler=PairBatchSampler(len(self.train_pairs), self.batch_size, self.seed, rank=rank,
                                                   world=world),
                          batch_size=None)

    def _eval_loader(self, evaluator: FullRankingEvaluator) -> DataLoader:
        rank, world = self._rank_world()  # under DDP each rank ranks a share of the users
        return DataLoader(evaluator.user_chunks(rank, world), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_evaluator)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_evaluator)


class CFTask:
    """Collaborative filtering on user-item interactions (the SL@K paper's protocol).

    Args:
        valid_fraction: share of each user's training items held out for validation
            (``max(1, floor(.))``, seeded by the run seed).
    """

    name = "cf"

    def __init__(self, valid_fraction: float = 0.1, name: str = "cf") -> None:
        self.valid_fraction = float(valid_fraction)

    def datamodule(self, data, seed: int, **kwargs) -> CFDataModule:
        if not isinstance(data, Interactions):
            raise ConfigError(f"task=cf needs user-item interactions, got a {type(data).__name__}; "
                              "use a recommendation data set (synthetic, health, ..., custom)")
        return CFDataModule(split_validation(data, self.valid_fraction, seed), seed=seed, **kwargs)


class CFModule(L.LightningModule):
    """Trains an embedding backbone with a registered loss; evaluates by full ranking.

    Validation logs ``val/<metric>@<K>``; test keeps per-user metric vectors in
    :attr:`test_per_user`. The validation history is saved in checkpoints so that a
    resumed run reports the whole curve.

    Args:
        model: the backbone.
        loss: the loss.
        optimizer: a callable params -> torch optimizer (a Hydra partial).
        datamodule: provides the negative sampler and the evaluators.
        seed: run seed (negative sampling).
    """

    def __init__(self, model: EmbeddingModel, loss: RecLoss, optimizer: Callable[..., torch.optim.Optimizer],
                 datamodule: CFDataModule, seed: int) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        self.optimizer_factory = optimizer
        self.sampler = datamodule.sampler
        self.val_evaluator = datamodule.val_evaluator
        self.test_evaluator = datamodule.test_evaluator
        self.seed = seed
        train_data = datamodule.train_data()
        self.model.bind(train_data)
        self.loss.bind(train_data)
        self._last_batch: LossBatch | None = None
        self.history: list[dict[str, float]] = []
        self.test_per_user: dict[str, Tensor] = {}
        self._parts: list[dict[str, Tensor]] = []
        self._users: list[Tensor] = []
        self.test_users: Tensor | None = None
        self._scorer: Callable[[Tensor], Tensor] | None = None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.parameters())

    def on_train_epoch_start(self) -> None:
        self.loss.on_train_epoch_start(self.current_epoch)

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        # the epoch's global batch number: under DDP rank r's i-th batch is batch i * world + r
        global_batch = batch_idx * self.trainer.world_size + self.trainer.global_rank
        gen = negatives_generator(self.device, self.seed, self.current_epoch, global_batch)
        loss_batch = self.model.training_batch(batch, lambda users: self.sampler.sample(users, self.loss.n_negatives, gen))
        users, items = loss_batch.users, loss_batch.items
        loss = self.loss(loss_batch)
        extra = self.model.extra_loss(users, items)  # e.g. XSimGCL's contrastive term
        if extra is not None:
            self.log("train/extra_loss", extra, on_step=False, on_epoch=True, batch_size=users.numel())
            loss = loss + extra
        self._last_batch = loss_batch
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"training loss is {loss.item()} at epoch {self.current_epoch}, batch {batch_idx}; "
                "lower optimizer.lr or raise the loss temperature"
            )
        self.log("train/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=users.numel())
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Tensor, batch_idx: int) -> None:
        # after the optimiser step: the loss sees the updated model
        if self._last_batch is not None:
            self.loss.after_step(self._last_batch, self.model)
            for name, field in getattr(self.loss, "synced_state", {}).items():  # DDP: one state for all ranks
                sync_rows(attrgetter(name)(self.loss), getattr(self._last_batch, field))
            self._last_batch = None

    # evaluation ---------------------------------------------------------------------
    def _eval_step(self, evaluator: FullRankingEvaluator, users: Tensor, stage: str) -> None:
        if self._scorer is None:  # embeddings once per evaluation pass, not per chunk
            self._scorer = self.model.full_scorer(stage)
        self._parts.append(evaluator.evaluate_chunk(self._scorer, users))
        self._users.append(users.cpu())

    def _gather(self) -> tuple[Tensor, dict[str, Tensor]]:
        """Every evaluated user's metrics (from all ranks under DDP)."""
        parts, users = self._parts, self._users
        self._parts, self._users, self._scorer = [], [], None
        per_user = {k: torch.cat([p[k] for p in parts]).cpu() for k in parts[0]} if parts else {}
        users = torch.cat(users) if users else torch.zeros(0, dtype=torch.int64)
        return gather_per_user(users, per_user)

    def validation_step(self, users: Tensor, batch_idx: int) -> None:
        self._eval_step(self.val_evaluator, users, "valid")

    def on_validation_epoch_end(self) -> None:
        _, per_user = self._gather()
        if not per_user:
            return
        means = mean_metrics(per_user)
        self.log_dict({f"val/{k}": v for k, v in means.items()}, prog_bar=False)
        diagnostics = {f"diag/{k}": float(v) for k, v in self.loss.diagnostics(self.model).items()}
        if diagnostics:
            self.log_dict(diagnostics)
        if not self.trainer.sanity_checking:
            self.history.append({"epoch": self.current_epoch, **{f"val/{k}": v for k, v in means.items()},
                                 **diagnostics})
            log.info("epoch %d: validation %s", self.current_epoch,
                     " ".join(f"{k}={means[k]:.4f}" for k in ("recall@20", "ndcg@20") if k in means))

    def test_step(self, users: Tensor, batch_idx: int) -> None:
        self._eval_step(self.test_evaluator, users, "test")

    def on_test_epoch_end(self) -> None:
        self.test_users, self.test_per_user = self._gather()
        self.log_dict({f"test/{k}": v for k, v in mean_metrics(self.test_per_user).items()})

    # checkpoint state ------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["bench_history"] = list(self.history)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # only a resumed fit takes the saved curve; loading the best checkpoint for
        # testing must not truncate the history to the best epoch
        if self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING:
            self.history = list(checkpoint.get("bench_history", []))
