"""Fixtures shared by the whole suite (no test module imports another).

- ``shared_data``: the local copies of the public data (``BENCH_DATA_DIR``); tests that
  need them are skipped only when they are absent (CI has them).
- ``tiny``: overrides of a small synthetic problem and a short schedule (seconds per run).
- ``make_cfg``: compose the app's config for overrides, writing into a given directory.
- ``run_cli``: run ``python -m bench`` in a subprocess.
- ``fixed_scorer``, ``train_data``: a "model" with a fixed score matrix and the training
  data of given positives, for unit tests of losses and threshold estimators.
- ``wandb_run_file``: the summary and run fields of an offline W&B run file.
- ``crash_at``: a callback that kills a run at an epoch (SIGINT handling restored after).
- ``sequences_file``: a small timestamped interaction file for sequential tests.
- ``folder_holder``: another live process holding a run folder's lock (killed with -9 after).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import DictConfig
from torch import Tensor

from bench.app import compose
from bench.contracts import TrainData, draws_per_row
from bench.datasets.base import CSR

REPO = Path(__file__).resolve().parents[1]

# `pytest -n N` (pytest-xdist): each worker, and every run it starts in a subprocess, gets its
# share of the cores; N workers with all cores each would oversubscribe them
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
SHARED_DATA = Path(os.environ.get("BENCH_DATA_DIR") or REPO.parent / "shared" / "data")

# a small synthetic problem and a short schedule: seconds per run on 2 CPU cores
TINY = [
    "dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14",
    "trainer.max_epochs=3", "trainer.check_val_every_n_epoch=1", "loss.n_negatives=50",
    "trainer.accelerator=cpu", "train.batch_size=256",
]


#: settings that keep a loss's end-to-end tests short and meaningful: SL@K refreshes beta every
#: epoch on a small diagnostic sample, AdvInfoNCE's adversary gets an epoch of its own within 2-3
#: epochs, NeuralNDCG's (P, N+1, N+1) Sinkhorn runs on short lists with few iterations
LOSS_TEST_SETTINGS = {
    "slk": ["loss.t_beta=1", "loss.diagnostics_users=16"],
    "advinfonce": ["loss.adv_every=2"],
    "neuralndcg": ["loss.n_negatives=10", "loss.sinkhorn_iters=5"],
}


@pytest.fixture(scope="session")
def loss_settings() -> Callable[[str], list[str]]:
    """``loss_settings(name)``: the overrides of :data:`LOSS_TEST_SETTINGS` for that loss, if any."""
    return lambda name: list(LOSS_TEST_SETTINGS.get(name, []))


@pytest.fixture
def shared_data() -> Path:
    """The local copies of the public data (``BENCH_DATA_DIR`` or ``../shared/data``)."""
    if not (SHARED_DATA / "ir-benchmark").is_dir():
        if os.environ.get("BENCH_DATA_DIR"):  # asked for and absent: a broken setup, not a reason to skip
            pytest.fail(f"BENCH_DATA_DIR={SHARED_DATA} holds no ir-benchmark/; point it at the data copies")
        pytest.skip(f"no local data at {SHARED_DATA}; set BENCH_DATA_DIR")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Downloads (there should be none) land in a per-test cache; W&B stays offline."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def tiny() -> tuple[str, ...]:
    """Overrides of a small synthetic problem: 120 users, 80 items, 3 epochs, N = 50."""
    return tuple(TINY)


@pytest.fixture
def make_cfg() -> Callable[[list[str], Path], DictConfig]:
    """``make_cfg(overrides, output_dir)``: the composed config of a run writing there."""

    def make(overrides: list[str], output_dir: Path) -> DictConfig:
        return compose([*overrides, f"output_dir={output_dir}"])

    return make


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """``run_cli(args, cwd, timeout=300, module="bench")``: ``python -m <module> *args`` in ``cwd``."""

    def run(args: list[str], cwd: Path, timeout: int = 300, module: str = "bench") -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO), "HYDRA_FULL_ERROR": "0"}
        return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run


class FixedScorer:
    """A "model" with a fixed (users x items) score matrix: the Scorer protocol, nothing else."""

    def __init__(self, scores: Tensor) -> None:
        self.scores = scores
        self.n_users, self.n_items = scores.shape

    def score_items(self, users: Tensor, items: Tensor) -> Tensor:
        return self.scores[users.unsqueeze(1), items]

    def score_users(self, users: Tensor) -> Tensor:
        return self.scores[users]

    def score_groups(self, users: Tensor, items: Tensor, draws: Tensor) -> tuple[Tensor, Tensor]:
        return self.score_items(users, items), self.score_items(users, draws_per_row(draws, users.numel()))


@pytest.fixture
def fixed_scorer() -> Callable[[Tensor], FixedScorer]:
    """``fixed_scorer(scores)``: a scorer answering from the (users, items) matrix ``scores``."""
    return FixedScorer


@pytest.fixture
def train_data() -> Callable[[int, int, dict[int, list[int]]], TrainData]:
    """``train_data(n_users, n_items, {user: [items]})``: training data with those positives."""

    def make(n_users: int, n_items: int, positives: dict[int, list[int]]) -> TrainData:
        pairs = torch.tensor([(u, i) for u, items in positives.items() for i in items])
        csr = CSR.from_pairs(pairs, n_users, n_items)
        return TrainData(n_users=n_users, n_items=n_items, train=csr, n_pairs=csr.nnz)

    return make


@pytest.fixture
def wandb_run_file() -> Callable[[Path], dict]:
    """``wandb_run_file(path)``: summary and run fields of an offline ``run-<id>.wandb``."""
    return read_wandb_offline_run


def read_wandb_offline_run(path: Path) -> dict:
    """Summary and run fields of an offline ``run-<id>.wandb`` file.

    The file is a 7-byte header then a LevelDB-style log (32 KiB blocks; records with a
    4-byte CRC, 2-byte length, 1-byte type: 1 full, 2 first, 3 middle, 4 last) of W&B
    protobuf ``Record``s. Read here because offline runs write no wandb-summary.json.
    """
    import json

    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, pos, chunks, records = 32768, 7, [], []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            records.append(b"".join(chunks))
            chunks = []
    out: dict = {"summary": {}, "run": {}}
    for raw in records:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "summary":
            for item in rec.summary.update:
                out["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "run":
            out["run"] = {"group": rec.run.run_group, "job_type": rec.run.job_type, "tags": list(rec.run.tags),
                          "name": rec.run.display_name}
    return out


class CrashAt(L.Callback):
    """Raise KeyboardInterrupt at the start of epoch ``at_epoch``: a kill, seen from inside the loop."""

    def __init__(self, at_epoch: int) -> None:
        self.at_epoch = at_epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.at_epoch:
            raise KeyboardInterrupt


@pytest.fixture
def crash_at():
    """``crash_at(epoch)``: a :class:`CrashAt` callback. Lightning's graceful shutdown after a
    KeyboardInterrupt ignores SIGINT from then on; the handler is restored after the test."""
    handler = signal.getsignal(signal.SIGINT)
    yield CrashAt
    signal.signal(signal.SIGINT, handler)


@pytest.fixture
def sequences_file() -> Callable[..., Path]:
    """``sequences_file(path, n_users=40, n_items=30, length=12, seed=0)``: a TSV with header
    ``user item time`` of random histories (string ids, increasing times), written to ``path``."""

    def write(path: Path, n_users: int = 40, n_items: int = 30, length: int = 12, seed: int = 0) -> Path:
        gen = torch.Generator().manual_seed(seed)
        rows = ["user\titem\ttime"]
        for u in range(n_users):
            items = torch.randperm(n_items, generator=gen)[:length].tolist()
            times = sorted(torch.randint(0, 10_000, (length,), generator=gen).tolist())
            rows += [f"u{u}\ti{i}\t{t}" for i, t in zip(items, times)]
        path.write_text("\n".join(rows) + "\n")
        return path

    return write


@pytest.fixture
def folder_holder() -> Callable[..., contextmanager]:
    """``with folder_holder(folder, resuming=False) as proc:``: a separate process holds the folder's
    lock (:class:`bench.records.lock.RunLock`) for the block, then is killed with -9, as a run would be."""

    @contextmanager
    def hold(folder: Path, resuming: bool = False) -> Iterator[subprocess.Popen]:
        code = ("import time\nfrom bench.records.lock import RunLock\n"
                f"lock = RunLock({str(folder)!r}, resuming={resuming})\nprint('held', flush=True)\ntime.sleep(300)")
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            yield proc
        finally:
            proc.kill()
            proc.wait()

    return hold
