"""Shared test helpers: compose the app's config without running Hydra's CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig

from bench.app import compose

REPO = Path(__file__).resolve().parents[1]

# a small synthetic problem and a short schedule: seconds per run on 2 CPU cores
TINY = [
    "dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14",
    "trainer.max_epochs=3", "trainer.check_val_every_n_epoch=1", "loss.n_negatives=50",
    "trainer.accelerator=cpu", "train.batch_size=256",
]


def make_cfg(overrides: list[str], output_dir: Path) -> DictConfig:
    return compose([*overrides, f"output_dir={output_dir}"])


def run_cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def read_wandb_offline_run(path: Path) -> dict:
    """Summary, config and run fields of an offline ``run-<id>.wandb`` file.

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
