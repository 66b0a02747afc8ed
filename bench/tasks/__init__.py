"""Tasks (how data becomes training rows and evaluation queries), the data module and the
Lightning module they share, and the training-loop callbacks."""

from bench.tasks.callbacks import LastCheckpoint, ValidateOnLastEpoch
from bench.tasks.cf import CFTask
from bench.tasks.datamodule import RankingDataModule
from bench.tasks.linkpred import LinkPredTask
from bench.tasks.ltr import LtrDataModule, LtrModule, LtrTask
from bench.tasks.module import RankingModule
from bench.tasks.seq import SeqTask

__all__ = ["CFTask", "LastCheckpoint", "LinkPredTask", "LtrDataModule", "LtrModule", "LtrTask", "RankingDataModule",
           "RankingModule", "SeqTask", "ValidateOnLastEpoch"]
