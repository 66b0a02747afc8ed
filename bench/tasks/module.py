"""The Lightning module of every task: trains a backbone with a loss through
:mod:`bench.step` and evaluates by full ranking."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from bench.allocator import skip_uninitialised_fill
from bench.distributed import gather_per_user
from bench.errors import ConfigError, TrainingDiverged
from bench.evaluation import FullRankingEvaluator, mean_metrics
from bench.evaluation.evaluator import RankedChunk, split_tie_columns, tie_summary, tie_warning
from bench.evaluation.per_edge import EDGE_COUNT, edge_summary
from bench.evaluation.sampled import sampled_metrics, sampled_summary
from bench.losses.base import RecLoss
from bench.models.base import EmbeddingModel
from bench.records.outcome import TestOutcome
from bench.sampling import UniformNegativeSampler, negatives_generator
from bench.step import NEGATIVE_MODES, StepOutput, after_update, train_step
from bench.tasks.datamodule import RankingDataModule

log = logging.getLogger(__name__)


class RankingModule(L.LightningModule):
    """Trains an embedding backbone with a registered loss; evaluates by full ranking.

    The data module (given to ``Trainer.fit``) provides, in :meth:`setup`, the training
    data that the backbone and the loss bind to, the negative sampler and the evaluators.
    Validation logs ``val/<metric>@<K>`` and the loss's ``diag/...``; test keeps per-user
    metric vectors in :attr:`test_per_user`. The validation history is saved in
    checkpoints so that a resumed run reports the whole curve.

    Args:
        model: the backbone.
        loss: the loss.
        optimizer: a callable params -> torch optimizer (a Hydra partial).
        seed: run seed (negative sampling).
        negatives: "per_pair" or "shared" (``train.negatives``; see :mod:`bench.step`).
        shared_groups: shared mode: one draw per this many groups of a batch's rows
            (``train.shared_groups``; 1 = one draw for the batch).
        distinct_negatives: draw N different items rather than N with replacement
            (``train.distinct_negatives``).
        divergence_factor: the run stops as diverged when an epoch's mean training loss is over
            this many times the first batch's (at least 1 in absolute value), as a loss that
            exploded without yet overflowing (``train.divergence_factor``; None: off). A
            non-finite loss stops it at any step.
        embedding_reg: λ of the embedding regulariser (``train.embedding_reg``; see
            :func:`bench.step.train_step`); 0 = off.
    """

    #: the validation metrics the log shows at every validation
    progress_metrics: tuple[str, ...] = ("recall@20", "ndcg@20")

    def __init__(self, model: EmbeddingModel, loss: RecLoss, optimizer: Callable[..., torch.optim.Optimizer],
                 seed: int, negatives: str = "per_pair", shared_groups: int = 1,
                 distinct_negatives: bool = False, divergence_factor: float | None = 1000.0,
                 embedding_reg: float = 0.0) -> None:
        super().__init__()
        if negatives not in NEGATIVE_MODES:
            raise ConfigError(f"unknown train.negatives '{negatives}'; use {' or '.join(NEGATIVE_MODES)}")
        if negatives == "shared" and not loss.shares_negatives:
            log.info("train.negatives=shared: this loss keeps one negative per pair, so it draws them per pair")
        if shared_groups < 1:
            raise ConfigError(f"train.shared_groups={shared_groups} is out of range: use an integer >= 1")
        if shared_groups > 1 and negatives != "shared":
            log.info("train.shared_groups=%d applies to train.negatives=shared only; ignored", shared_groups)
        self.model = model
        # what bind() builds is the same on every rank; DDP would try to broadcast it and fails on sparse tensors
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            self, [f"model.{name}" for name in getattr(model, "bound_buffers", ())])
        self.loss = loss
        self.optimizer_factory = optimizer
        self.seed = seed
        self.negatives = negatives
        self.shared_groups = int(shared_groups)
        self.distinct_negatives = bool(distinct_negatives)
        self.divergence_factor = None if divergence_factor is None else float(divergence_factor)
        if not embedding_reg >= 0:
            raise ConfigError(f"train.embedding_reg={embedding_reg} is out of range: use a number >= 0 (0: off)")
        self.embedding_reg = float(embedding_reg)
        #: the training loss of the first batch, before any update: the scale divergence is judged by
        self.initial_loss: float | None = None
        self.sampler: UniformNegativeSampler | None = None
        self.val_evaluator: FullRankingEvaluator | None = None
        self.test_evaluator: FullRankingEvaluator | None = None
        self._bound = False
        self._pending: StepOutput | None = None
        self.step_loss: Tensor | None = None  # the last step's loss (progress bar)
        self._epoch_loss_sum: Tensor | float = 0.0  # pairs-weighted, as the logged train/loss
        self._epoch_extra_sum: Tensor | float | None = None  # the same for the backbone's extra term
        self._epoch_pairs = 0
        self._epoch_start = 0.0
        self._epoch_said = False  # the epoch's train-loss line printed (before its validation's)
        #: wall seconds of each epoch this process trained; Lightning validates before this hook, so an
        #: epoch that validates includes its validation (the median skips those when n >= 3)
        self.train_epoch_seconds: list[float] = []
        self.history: list[dict[str, float]] = []
        self.test_per_user: dict[str, Tensor] = {}
        self.test_users: Tensor | None = None
        #: what tied scores did to the test metrics (:func:`~bench.evaluation.evaluator.tie_summary`)
        self.test_ties: dict[str, Any] = {}
        #: the per-edge link-prediction metrics of the test (``{"edges": E, "mrr": ..., "hit@20": ...}``;
        #: empty for tasks without them)
        self.test_per_edge: dict[str, float | int] = {}
        self._edge_means: dict[str, float | int] = {}  # the same, of the latest evaluation pass
        #: the biased sampled-negatives metrics of the test (:func:`~bench.evaluation.sampled.sampled_summary`;
        #: empty unless ``eval.sampled_negatives`` is set)
        self.test_sampled: dict[str, Any] = {}
        self._sampled_means: dict[str, Any] = {}  # the same, of the latest evaluation pass
        self._warned_val_ties = False
        self._parts: list[RankedChunk] = []
        self._users: list[Tensor] = []
        self._scorer: Callable[[Tensor], Tensor] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets its bookkeeping attributes (_current_fx_name, ...) ~45 times a step and this module
        # its step state ~5 (cProfile of a Health BPR fit), each through nn.Module's checks for parameters,
        # buffers and submodules. A name already in __dict__ is none of those (nn.Module keeps them out of
        # it), so a value that is no Parameter or Module is stored as nn.Module would
        if name in self.__dict__ and not isinstance(value, torch.nn.Parameter | torch.nn.Module):
            self.__dict__[name] = value
        else:
            super().__setattr__(name, value)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if not isinstance(datamodule, RankingDataModule):
            raise TypeError("RankingModule needs a RankingDataModule: Trainer.fit(module, datamodule=...)")
        self.bind(datamodule)

    def on_fit_start(self) -> None:
        skip_uninitialised_fill()

    def on_test_start(self) -> None:
        skip_uninitialised_fill()

    def bind(self, datamodule: RankingDataModule) -> None:
        """Bind the backbone and the loss to the training data (once; before a checkpoint
        restores their state) and take the sampler and the evaluators."""
        if not self._bound:
            self.model.bind(datamodule.train_data)
            self.loss.bind(datamodule.train_data)
            self._bound = True
        self.sampler = datamodule.sampler
        self.val_evaluator, self.test_evaluator = datamodule.val_evaluator, datamodule.test_evaluator

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = self.optimizer_factory(self.parameters())
        groups = self.loss.optimizer_groups(dict(optimizer.defaults))
        if not groups:
            return optimizer
        # the loss's own groups (e.g. a min-max loss's ascent variables): the other parameters
        # keep one default group, in their usual order, and each extra group takes the defaults
        # for the options it leaves out
        grouped = {id(p) for group in groups for p in group["params"]}
        optimizer = self.optimizer_factory([p for p in self.parameters() if id(p) not in grouped])
        for group in groups:
            optimizer.add_param_group(dict(group))
        return optimizer

    # training ---------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self.loss.on_train_epoch_start(self.current_epoch)
        self._epoch_loss_sum, self._epoch_pairs, self._epoch_start = 0.0, 0, time.perf_counter()
        self._epoch_extra_sum = None
        self._epoch_said = False

    def _say_epoch(self) -> None:
        """The console's ``epoch N: train loss L (S s)``, S the epoch's training seconds."""
        if self._epoch_pairs and not self._epoch_said:
            log.info("epoch %d: train loss %.4f (%.1f s)", self.current_epoch,
                     float(self._epoch_loss_sum) / self._epoch_pairs, time.perf_counter() - self._epoch_start)
            self._epoch_said = True

    def on_validation_epoch_start(self) -> None:
        # Lightning validates at an epoch's end before on_train_epoch_end: say the epoch's training
        # first, or its validation line reads as if it came before the training
        trainer = self.trainer
        at_epoch_end = isinstance(trainer.val_check_interval, float) and trainer.val_check_interval == 1.0
        if at_epoch_end and not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING:
            self._say_epoch()

    def on_train_epoch_end(self) -> None:
        # logged once from the module's own sums: a per-step self.log(on_epoch=True) costs ~2 ms a
        # step in Lightning's result collection, a tenth of a shared-negatives step
        seconds = time.perf_counter() - self._epoch_start
        self.train_epoch_seconds.append(seconds)
        if self._epoch_pairs:
            mean = float(self._epoch_loss_sum) / self._epoch_pairs
            self.log("train/loss", mean, prog_bar=True)
            if self._epoch_extra_sum is not None:  # e.g. XSimGCL's contrastive term
                self.log("train/extra_loss", float(self._epoch_extra_sum) / self._epoch_pairs)
            self._say_epoch()
            self._check_divergence(mean, self.current_epoch)

    def _note_loss(self, loss: Tensor) -> None:
        if self.initial_loss is None:
            self.initial_loss = float(loss.detach())  # one host sync, at the first step

    def _check_divergence(self, mean: float, epoch: int) -> None:
        """Stop a run whose loss exploded (finite, so no step noticed): before this epoch's
        checkpoint is saved, so a resume never continues from the blown-up model."""
        if self.divergence_factor is None or self.initial_loss is None:
            return
        limit = self.divergence_factor * max(abs(self.initial_loss), 1.0)
        diverged = bool(abs(mean) > limit or mean != mean)
        trainer = getattr(self, "_trainer", None)
        if trainer is not None and trainer.world_size > 1:  # DDP: every rank stops, or none
            diverged = bool(trainer.strategy.reduce_boolean_decision(diverged, all=False))
        if diverged:
            raise TrainingDiverged(
                f"training diverged: epoch {epoch}'s mean training loss is {mean:.3g}, over "
                f"{self.divergence_factor:g} times the first batch's {self.initial_loss:.3g}; lower optimizer.lr or "
                "raise the loss temperature (train.divergence_factor=null turns this check off)")

    def training_step(self, rows: Tensor, batch_idx: int) -> Tensor:
        # the epoch's global batch number: under DDP rank r's i-th batch is batch i * world + r
        global_batch = batch_idx * self.trainer.world_size + self.trainer.global_rank
        generator = negatives_generator(self.device, self.seed, self.current_epoch, global_batch)
        output = train_step(self.model, self.loss, rows, sampler=self.sampler, generator=generator,
                            mode=self.negatives, groups=self.shared_groups, distinct=self.distinct_negatives,
                            embedding_reg=self.embedding_reg)
        if not torch.isfinite(output.loss):
            raise TrainingDiverged(
                f"training loss is {output.loss.item()} at epoch {self.current_epoch}, batch {batch_idx}; "
                "lower optimizer.lr or raise the loss temperature"
            )
        self._note_loss(output.loss)
        self._pending = output
        self.step_loss = output.loss.detach()
        self._epoch_loss_sum = self._epoch_loss_sum + self.step_loss * output.size
        self._epoch_pairs += output.size
        if output.extra_loss is not None:
            previous = 0.0 if self._epoch_extra_sum is None else self._epoch_extra_sum
            self._epoch_extra_sum = previous + output.extra_loss * output.size
        return output.loss

    def on_train_batch_end(self, outputs: Any, batch: Tensor, batch_idx: int) -> None:
        # after the optimiser step: the loss sees the updated model
        if self._pending is not None:
            after_update(self.loss, self._pending)
            self._pending = None

    # evaluation ---------------------------------------------------------------------
    def _eval_step(self, evaluator: FullRankingEvaluator | None, users: Tensor, stage: str) -> None:
        if evaluator is None:
            raise RuntimeError("the module was not set up with a data module")
        if self._scorer is None:  # embeddings once per evaluation pass, not per chunk
            self._scorer = self.model.full_scorer(stage)
        # each step ranks its chunk; the metrics run once over all of them (_gather)
        self._parts.append(evaluator.rank_chunk(self._scorer, users))
        self._users.append(users.cpu())

    def _gather(self, evaluator: FullRankingEvaluator | None) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """Every evaluated user's metrics (from all ranks under DDP) and the ties' summary; the
        per-edge means and the sampled protocol's summary, when the evaluator computes them, are
        left in ``_edge_means`` and ``_sampled_means``."""
        parts, users = self._parts, self._users
        self._parts, self._users, self._scorer = [], [], None
        per_user = ({k: v.cpu() for k, v in evaluator.metrics(parts).items()}
                    if parts and evaluator is not None else {})
        all_users = torch.cat(users) if users else torch.zeros(0, dtype=torch.int64)
        all_users, per_user = gather_per_user(all_users, per_user)
        self._edge_means = edge_summary(per_user)  # summed over all ranks' users, then divided
        self._sampled_means = sampled_summary(per_user, getattr(evaluator, "sampled_negatives", None),
                                              getattr(evaluator, "sampled_seed", 0))
        metrics, tie_columns = split_tie_columns(per_user)
        ties = tie_summary(metrics, tie_columns, evaluator.ties) if evaluator is not None and metrics else {}
        return all_users, metrics, ties

    def validation_step(self, users: Tensor, batch_idx: int) -> None:
        self._eval_step(self.val_evaluator, users, "valid")

    def on_validation_epoch_end(self) -> None:
        _, per_user, ties = self._gather(self.val_evaluator)
        if not per_user:
            return
        means = mean_metrics(per_user)
        warning = tie_warning(ties, means) if not self.trainer.sanity_checking else None
        if warning and not self._warned_val_ties:  # once a run: the test's summary goes to results.json
            log.warning("validation at epoch %d: %s", self.current_epoch, warning)
            self._warned_val_ties = True
        edges = {f"edge_{k}": float(v) for k, v in self._edge_means.items() if k != EDGE_COUNT}
        means = {**means, **edges}
        self.log_dict({f"val/{k}": v for k, v in means.items()}, prog_bar=False)
        diagnostics = {f"diag/{k}": float(v) for k, v in self.loss.diagnostics(self.model).items()}
        if diagnostics:
            self.log_dict(diagnostics)
        if not self.trainer.sanity_checking:
            self.history.append({"epoch": self.current_epoch, **{f"val/{k}": v for k, v in means.items()},
                                 **diagnostics})
            log.info("epoch %d: validation %s", self.current_epoch,
                     " ".join(f"{k}={means[k]:.4f}" for k in self.progress_metrics if k in means))

    def test_step(self, users: Tensor, batch_idx: int) -> None:
        self._eval_step(self.test_evaluator, users, "test")

    def on_test_epoch_end(self) -> None:
        self.test_users, self.test_per_user, self.test_ties = self._gather(self.test_evaluator)
        self.test_per_edge = dict(self._edge_means)
        self.test_sampled = dict(self._sampled_means)
        means = mean_metrics(self.test_per_user)
        edges = {f"test/edge_{k}": float(v) for k, v in self.test_per_edge.items() if k != EDGE_COUNT}
        # a prefix of their own, so that no reader takes them for full-ranking metrics
        sampled = {f"test/sampled_{k}": v for k, v in sampled_metrics(self.test_sampled).items()}
        self.log_dict({**{f"test/{k}": v for k, v in means.items()}, **edges, **sampled})
        warning = tie_warning(self.test_ties, means)
        if warning:
            log.warning("test: %s", warning)

    def test_outcome(self) -> TestOutcome:
        """The test this module ran, for the recording callback (:class:`bench.tasks.recording.WriteResults`)."""
        if self.test_users is None:
            raise RuntimeError("test_outcome() before the test ran")
        per_user = {k: v.numpy() for k, v in self.test_per_user.items()}
        return TestOutcome(users=self.test_users.numpy(), per_user=per_user, means=mean_metrics(self.test_per_user),
                           ties=dict(self.test_ties), per_edge=dict(self.test_per_edge),
                           sampled=dict(self.test_sampled), history=list(self.history),
                           train_epoch_seconds=list(self.train_epoch_seconds), device=str(self.device))

    # checkpoint state ------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["bench_history"] = list(self.history)
        checkpoint["bench_initial_loss"] = self.initial_loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # only a resumed fit takes the saved curve; loading the best checkpoint for
        # testing must not truncate the history to the best epoch
        if self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING:
            self.history = list(checkpoint.get("bench_history", []))
            saved = checkpoint.get("bench_initial_loss")
            self.initial_loss = float(saved) if isinstance(saved, int | float) else self.initial_loss
