"""Lightning modules and data modules, one file per task, and shared callbacks."""

from bench.tasks.callbacks import LastCheckpoint, ValidateOnLastEpoch
from bench.tasks.cf import CFDataModule, CFModule

__all__ = ["CFDataModule", "CFModule", "LastCheckpoint", "ValidateOnLastEpoch"]
