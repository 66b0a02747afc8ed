"""What a tested model hands the recording callback: one object, so that the record's writer
reads no attribute of a Lightning module by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TestOutcome:
    """A run's test, as ``results.json`` and ``per_user_test.npz`` record it.

    Attributes:
        users: (U,) the evaluated queries (users, nodes or lists), ascending.
        per_user: ``{metric: (U,) float64}`` aligned with ``users`` (``ndcg@20``...).
        means: ``{metric: mean over users}`` of ``per_user``.
        ties: what tied scores did to the means (``RunResult.ties``).
        per_edge: link prediction's per-edge means (``RunResult.per_edge``; {} otherwise).
        sampled: the sampled-negatives protocol's means (``RunResult.sampled``; {} unless asked).
        history: one row per validation, ``{"epoch", "val/<metric>", "diag/<name>"}``.
        train_epoch_seconds: wall seconds of each epoch this process trained.
        device: where the model was tested (``cpu``, ``cuda:0``).
    """

    users: np.ndarray
    per_user: dict[str, np.ndarray]
    means: dict[str, float]
    ties: dict[str, Any] = field(default_factory=dict)
    per_edge: dict[str, Any] = field(default_factory=dict)
    sampled: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    train_epoch_seconds: list[float] = field(default_factory=list)
    device: str = "cpu"
