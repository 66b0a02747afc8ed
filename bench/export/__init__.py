"""``python -m bench.export``: a finished run's rankings as TREC run and qrels files.

    python -m bench.export outputs/2026-11-30/10-00-00 [--k 100] [--split test|valid]
        [--checkpoint best|last|PATH] [--out DIR] [--device cpu]

Writes ``<split>.run`` (``qid Q0 docid rank score tag``: each evaluated query's top K items
after masking, from the best checkpoint) and ``<split>.qrels`` (``qid 0 docid 1`` per held-out
item) to ``--out`` (default ``RUN_DIR/export``), for trec_eval, pytrec_eval or ranx.
Query and item ids are the data set's internal ids (0-based rows and columns of its splits).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import torch
from torch import Tensor

from bench.errors import BenchError, storage_error
from bench.evaluation import FullRankingEvaluator
from bench.evaluation.metrics.ranking import rank_items
from bench.records import RunResult
from bench.records.folder import check_out_is_a_folder, writing_into
from bench.records.schema import CHECKPOINT_DIR, COMPLETED

__all__ = ["SPLITS", "export_run", "run_tag"]

#: split name -> the data module's evaluator of that split (its held-out items and its masks)
SPLITS = {"test": "test_evaluator", "valid": "val_evaluator"}


def run_tag(res: RunResult) -> str:
    """The run file's tag column, ``<loss>-<model>-<dataset>-seed<seed>`` (no whitespace:
    trec_eval splits lines on it)."""
    return re.sub(r"\s+", "_", f"{res.loss}-{res.model}-{res.dataset}-seed{res.seed}")


def _checkpoint_path(res: RunResult, checkpoint: str | Path) -> Path:
    assert res.run_dir is not None  # read from a folder
    if str(checkpoint) == "best":
        path = res.best_checkpoint
        if path is None:
            raise BenchError(f"{res.run_dir} records no best checkpoint; pass --checkpoint last or a .ckpt path")
    elif str(checkpoint) == "last":
        path = res.run_dir / CHECKPOINT_DIR / "last.ckpt"
    else:
        path = Path(checkpoint)
    if not path.is_file():
        raise BenchError(f"checkpoint {path} does not exist; pass --checkpoint best, last or an existing .ckpt")
    return path


@contextmanager
def _atomic_text(path: Path) -> Iterator[IO[str]]:
    """A text file written under a temporary name and renamed into place when complete, so
    an interrupted export never leaves a truncated file that a tool would read as valid."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as f:
            yield f
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise storage_error(exc, path) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


@torch.no_grad()
def _ranked(evaluator: FullRankingEvaluator, score_users: Callable[[Tensor], Tensor], users: Tensor,
            k: int) -> tuple[Tensor, Tensor]:
    """The top ``k`` items of each user after masking, as the evaluator ranks them.

    Args:
        users: (b,) user ids.
    Returns:
        (items (b, k'), scores (b, k') float32), k' = min(k, n_items); masked entries hold -inf.
    """
    scores = evaluator.masked_scores(score_users, users)
    top = rank_items(scores, k)
    values = scores.gather(1, top)
    if values.numel() and torch.isnan(values[:, 0]).any():  # topk puts NaN first
        raise BenchError("the checkpoint's model produces NaN scores; export another checkpoint")
    return top, values


def export_run(run_dir: str | Path, out_dir: str | Path | None = None, k: int = 100, split: str = "test",
               checkpoint: str | Path = "best", device: str = "cpu") -> tuple[Path, Path]:
    """Write a completed run's top-``k`` rankings and held-out items as TREC files.

    Queries are exactly the evaluator's: users (nodes, for link prediction) with at least one
    held-out item in ``split``, ranked over the whole catalogue with the split's masks (test:
    training and validation items; valid: training items; see docs/evaluation.md#masking).
    Tied items are listed lower id first: a run file holds one order, whereas the run's metrics
    follow its ``eval.ties`` rule. Masked items never appear; a query with fewer than ``k``
    unmasked items lists only those. Users are scored in the evaluator's chunks, so memory
    stays within ``eval.max_scores`` scores.

    Args:
        run_dir: a completed run's output folder (``results.json``, ``checkpoints/``).
        out_dir: where to write (default ``run_dir/export``).
        k: list length per query (>= 1).
        split: "test" or "valid".
        checkpoint: "best", "last" or a checkpoint path.
        device: where to score ("cpu", "cuda", ...).
    Returns:
        (run file ``<split>.run``, qrels file ``<split>.qrels``). Run lines are
        ``qid Q0 docid rank score tag`` (rank 1-based, score the float32 score printed with
        9 significant digits so that it reads back exactly); qrels lines ``qid 0 docid 1``.
    """
    if split not in SPLITS:
        raise BenchError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if out_dir is not None:
        check_out_is_a_folder(out_dir, "export")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise BenchError(f"k={k!r}: the list length must be a whole number >= 1, e.g. --k 100")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:  # unknown device, or CUDA not built / no GPU
        raise BenchError(f"device {device!r} is not usable here ({str(exc).splitlines()[0]}); use --device cpu") \
            from exc
    res = RunResult.read(run_dir)
    if res.status != COMPLETED:
        raise BenchError(f"{res.run_dir} is not a completed run (status {res.live_status()}); "
                         "export a run that finished training and testing")
    ckpt = _checkpoint_path(res, checkpoint)
    assert res.run_dir is not None
    out = Path(out_dir) if out_dir is not None else res.run_dir / "export"

    # the training stack (Lightning, the data modules) only once the arguments and the run passed, so
    # that a mistyped option is answered in a couple of seconds
    from bench.analysis.checkpoints import load_model, run_config
    from bench.tasks.datamodule import RankingDataModule
    from bench.training import build_datamodule

    cfg = run_config(res)
    datamodule = build_datamodule(cfg, res.seed)
    if not isinstance(datamodule, RankingDataModule):
        raise BenchError(f"{res.run_dir} is a task=ltr run; the export writes full-catalogue rankings of "
                         "recommendation and link-prediction runs only")
    evaluator: FullRankingEvaluator = getattr(datamodule, SPLITS[split])
    model = load_model(res, ckpt, datamodule.train_data, cfg).to(device)
    model.eval()
    score_users = model.full_scorer(split)
    tag = run_tag(res)

    run_path, qrels_path = out / f"{split}.run", out / f"{split}.qrels"
    with writing_into(res.run_dir, out):
        _write_files(evaluator, score_users, device, k, tag, run_path, qrels_path)
    return run_path, qrels_path


def _write_files(evaluator: FullRankingEvaluator, score_users: Callable[[Tensor], Tensor], device: str, k: int,
                 tag: str, run_path: Path, qrels_path: Path) -> None:
    with _atomic_text(run_path) as run_file:
        # the evaluator's chunks: the same rows per matrix product as the run's own evaluation
        for chunk in evaluator.user_chunks():
            users = chunk.to(device)
            top, values = _ranked(evaluator, score_users, users, k)
            kept = torch.isfinite(values)
            for user, items, scores, ok in zip(chunk.tolist(), top.cpu().tolist(), values.cpu().tolist(),
                                               kept.cpu().tolist()):
                run_file.writelines(f"{user} Q0 {item} {rank} {score:.9g} {tag}\n"
                                    for rank, (item, score, keep) in enumerate(zip(items, scores, ok), 1) if keep)
    with _atomic_text(qrels_path) as qrels_file:
        users = evaluator.users
        rows, items = evaluator.target.gather_rows(users)
        qrels_file.writelines(f"{user} 0 {item} 1\n" for user, item in zip(users[rows].tolist(), items.tolist()))
