"""Are two runs the same, bit for bit? For checking that a change to the code leaves results alone.

    python benchmarks/compare_runs.py RUN_A RUN_B [RUN_A2 RUN_B2 ...]

For each pair of run directories (the same configuration and seed, run by two versions of the
code): the test metrics, every validation row (metrics and the loss's diagnostics), the best
epoch, the per-user test vectors, and every tensor of the best and last checkpoints (backbone
weights and loss state such as SL@K's beta). Prints one Markdown row per pair; exits 1 when
any pair differs. Bit-identical weights on CPU need one thread on both sides
(``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1``): with more, the BLAS may split reductions by load.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench.records import CHECKPOINT_DIR, RunResult


def _same_checkpoint(a: Path, b: Path) -> bool:
    sa = torch.load(a, weights_only=True, map_location="cpu")["state_dict"]
    sb = torch.load(b, weights_only=True, map_location="cpu")["state_dict"]
    return set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def compare(a: Path, b: Path) -> tuple[bool, str]:
    ra, rb = RunResult.read(a), RunResult.read(b)
    ua, ub = ra.load_per_user(), rb.load_per_user()
    checks = {
        "test metrics": ra.test == rb.test,
        "validation rows": ra.history == rb.history,
        "best epoch": ra.best.get("epoch") == rb.best.get("epoch"),
        "per-user vectors": ua is not None and ub is not None and np.array_equal(ua[0], ub[0])
        and all(np.array_equal(ua[1][k], ub[1][k]) for k in ua[1]),
        "checkpoints": all(_same_checkpoint(a / CHECKPOINT_DIR / f, b / CHECKPOINT_DIR / f)
                           for f in ("best.ckpt", "last.ckpt")),
    }
    ok = all(checks.values())
    row = (f"| {ra.dataset} {ra.model} {ra.loss} seed {ra.seed} | {len(ra.test)} | {len(ra.history)} | "
           f"{ra.best.get('epoch')} | {ra.test.get('ndcg@20', float('nan')):.16g} | "
           + " | ".join("yes" if v else "**no**" for v in checks.values()) + " |")
    return ok, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="pairs of run directories: A B [A2 B2 ...]")
    args = parser.parse_args()
    if len(args.runs) % 2:
        print("error: give run directories in pairs (A B [A2 B2 ...])", file=sys.stderr)
        return 2
    print("| run | test metrics | validation rows | best epoch | test NDCG@20 | same test metrics | same "
          "validation rows (val + diag) | same best epoch | same per-user vectors | same checkpoint tensors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    for a, b in zip(args.runs[::2], args.runs[1::2]):
        same, row = compare(a, b)
        ok &= same
        print(row)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
