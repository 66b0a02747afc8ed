"""Every task x backbone x loss (and each threshold estimator) on small data: a fingerprint of the
code's numbers, to compare two versions of the code after a refactor.

    python benchmarks/identity_grid.py run OUT_DIR [--only SUBSTRING ...]   # ~5 minutes, one thread
    python benchmarks/identity_grid.py compare BEFORE_DIR AFTER_DIR          # Markdown table; exit 1 on a difference

``run`` writes one ``<case>.json`` per case (test metrics and validation history); run it once
per code version (e.g. in a ``git worktree`` of the older commit, with ``PYTHONPATH`` there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

TINY = ["dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14", "trainer.max_epochs=3",
        "trainer.check_val_every_n_epoch=1", "loss.n_negatives=50", "trainer.accelerator=cpu",
        "train.batch_size=256", "logger=none"]
LOSSES = ["bpr", "sl", "bsl", "psl", "slk", "lambdalossk", "songk"]


def cases() -> dict[str, list[str]]:
    out = {}
    for model in ("mf", "lightgcn", "xsimgcl"):
        for loss in LOSSES:
            extra = ["loss.t_beta=1", "loss.diagnostics_users=32"] if loss == "slk" else []
            out[f"cf-{model}-{loss}"] = [*TINY, f"model={model}", f"loss={loss}", *extra]
    for est in ("exact", "cached", "stratified", "binomial_safe", "quantile"):
        out[f"cf-mf-slk-{est}"] = [*TINY, "loss=slk", "loss.t_beta=1", f"loss.estimator={est}"]
    out["cf-mf-songk-exact"] = [*TINY, "loss=songk", "loss.threshold=exact"]
    out["cf-mf-lambdalossk-sampled"] = [*TINY, "loss=lambdalossk", "loss.ranks=sampled"]
    out["cf-mf-sl-n5"] = [*TINY, "loss=sl", "loss.n_negatives=5"]
    out["cf-mf-sl-dot-n5"] = [*TINY, "loss=sl", "loss.n_negatives=5", "model.score=dot"]
    # shared negatives: one draw per batch, and a draw per group of rows (SL@K's refresh scores each draw once)
    for model in ("mf", "lightgcn"):
        for loss in ("sl", "slk", "songk"):
            base = [*TINY, f"model={model}", f"loss={loss}", "train.negatives=shared"]
            extra = ["loss.t_beta=1", "loss.diagnostics_users=32"] if loss == "slk" else []
            out[f"cf-{model}-{loss}-shared"] = [*base, *extra]
            out[f"cf-{model}-{loss}-shared-g4"] = [*base, "train.shared_groups=4", *extra]
    for loss in LOSSES:
        out[f"linkpred-gnn-{loss}"] = [*TINY[3:], "task=linkpred", "dataset=synthetic-graph", "model=gnn",
                                       f"loss={loss}"]
        out[f"seq-sasrec-{loss}"] = ["task=seq", "model=sasrec", "dataset=ml100k-seq", "trainer.max_epochs=2",
                                     "trainer.check_val_every_n_epoch=1", "loss.n_negatives=50", "logger=none",
                                     "trainer.accelerator=cpu", f"loss={loss}"]
    return out


def run(out: Path, only: list[str]) -> None:
    from bench.app import compose
    from bench.run import train_and_test

    torch.set_num_threads(1)  # bit-reproducible on CPU
    out.mkdir(parents=True, exist_ok=True)
    for name, overrides in cases().items():
        if only and not any(o in name for o in only):
            continue
        train_and_test(compose([*overrides, f"output_dir={out / name}"]), overrides=overrides)
        res = json.loads((out / name / "results.json").read_text())
        (out / f"{name}.json").write_text(json.dumps({"test": res["test"], "history": res["history"]}, indent=1))
        print(name, res["test"]["ndcg@20"], flush=True)


def compare(before: Path, after: Path) -> int:
    print("| case | test NDCG@20 before | after | same |\n|---|---|---|---|")
    differ = 0
    for file in sorted(before.glob("*.json")):
        a, b = json.loads(file.read_text()), json.loads((after / file.name).read_text())
        differ += a != b
        print(f"| {file.stem} | {a['test']['ndcg@20']:.6f} | {b['test']['ndcg@20']:.6f} | "
              f"{'yes' if a == b else '**no**'} |")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
