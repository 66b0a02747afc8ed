"""Tasks: how data becomes training pairs and evaluation queries; Lightning modules; callbacks."""

from bench.tasks.callbacks import LastCheckpoint, ValidateOnLastEpoch
from bench.tasks.cf import CFDataModule, CFModule, CFTask
from bench.tasks.linkpred import LinkPredTask
from bench.tasks.seq import SeqTask

__all__ = ["CFDataModule", "CFModule", "CFTask", "LastCheckpoint", "LinkPredTask", "SeqTask",
           "ValidateOnLastEpoch"]
