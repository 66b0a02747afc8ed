"""Lightning modules and data modules, one file per task."""

from bench.tasks.cf import CFDataModule, CFModule, ValidateOnLastEpoch

__all__ = ["CFDataModule", "CFModule", "ValidateOnLastEpoch"]
