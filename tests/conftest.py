import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("BENCH_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")


@pytest.fixture
def shared_data() -> Path:
    """The local copies of the public data (``BENCH_DATA_DIR`` or ``../shared/data``)."""
    if not (SHARED_DATA / "ir-benchmark").is_dir():
        pytest.skip(f"no local data at {SHARED_DATA}; set BENCH_DATA_DIR")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Downloads (there should be none) land in a per-test cache; W&B stays offline."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
