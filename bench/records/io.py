"""Files of a run, written so that a crash never leaves a half-written one."""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory + rename.

    Raises:
        BenchError: the folder cannot be made or written (permissions, a full disk), naming the
            path; no temporary file is left behind.
    """
    from bench.errors import storage_error

    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise storage_error(exc, path) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return _jsonable(obj.item())
    return obj


def write_json(path: Path, payload: dict) -> None:
    """``payload`` as indented JSON (non-finite floats as strings, tensors as numbers), atomically."""
    atomic_write_bytes(path, (json.dumps(_jsonable(payload), indent=2, sort_keys=False) + "\n").encode())


def read_json(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def write_per_user(path: Path, users: np.ndarray, metrics: dict[str, np.ndarray]) -> None:
    """Per-user metric vectors (float64), aligned with ``users``, as a compressed npz."""
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items()}
    np.savez_compressed(buf, users=users, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A Lightning checkpoint's contents, unpickled with ``weights_only=True``: tensors and plain
    containers only, so a crafted file cannot run code; one that tries is refused with a
    one-line error."""
    import pickle

    import torch

    from bench.errors import BenchError

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise BenchError(f"{path} is not a plain checkpoint (loading it would run code or build objects: "
                         f"{str(exc).splitlines()[0][:200]}); refusing it") from exc
    except (EOFError, RuntimeError, ValueError, OSError, KeyError, IndexError) as exc:
        # a file cut short (disk full, a copy interrupted) or overwritten with something else
        why = (str(exc).splitlines() or [""])[0].split(". ")[0][:100] or type(exc).__name__
        raise BenchError(f"{path} is truncated or corrupt ({why}); restore it from a copy, or start the run "
                         "over in a new folder") from exc
    if not isinstance(state, dict):
        raise BenchError(f"{path} is not a Lightning checkpoint (it holds a {type(state).__name__}); refusing it")
    return state


def read_per_user(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(users (U,), {metric: (U,) float64}) as written by :func:`write_per_user`."""
    with np.load(path) as z:
        return z["users"], {k: z[k] for k in z.files if k != "users"}
