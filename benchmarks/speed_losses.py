"""Time per training step of each loss, relative to SL, on the same batches.

Electronic (default), MF, N = 1000 negatives (LambdaLoss@K: its configured N = 1 with
exact full-catalogue ranks, as in the paper; also its sampled-rank variant with N = 1000).
Each step is :func:`bench.step.optimise` (score, loss, backward, Adam step, and the loss's
after-step hook, e.g. SL@K's beta refresh) on pre-sampled negatives. SL@K is timed in a
refresh epoch and in a plain one; its per-epoch average follows the T_beta schedule.
Losses are timed round-robin and the median kept, so a busy machine slows all of them alike.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_losses.py [--dataset electronic] [--steps 10] [--rounds 3]
        [--losses LABEL ...]

Targets (issue 3): SL@K within 1.1x of SL; LambdaLoss@K faster than the paper's 60x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import lightning as L
import torch

from bench.allocator import retain_freed_memory
from bench.datasets import IRBenchmark, split_validation
from bench.losses import build as build_loss
from bench.models import MF
from bench.sampling import negatives_generator
from bench.step import optimise
from bench.tasks import RankingDataModule

LOSSES = {
    "sl": {"tau": 0.2},
    "bsl": {},
    "psl": {"tau_star": 0.1},
    "slk (refresh epoch)": {"name": "slk", "tau_w": 2.25, "t_beta": 20, "refresh": True, "diagnostics_users": 0},
    "slk (plain epoch)": {"name": "slk", "tau_w": 2.25, "t_beta": 20, "refresh": False, "diagnostics_users": 0},
    "songk": {},
    "lambdalossk (exact, N=1)": {"name": "lambdalossk", "n_negatives": 1},
    "lambdalossk (sampled ranks)": {"name": "lambdalossk", "ranks": "sampled", "n_negatives": 1000},
    "bpr": {"n_negatives": 1},
    # the rest of the zoo, each with its configured N (conf/loss/*.yaml) unless said
    "bce": {"n_negatives": 1},
    "ranknet": {"n_negatives": 1},
    "lambdarank (exact, N=1)": {"name": "lambdarank", "n_negatives": 1},
    "lambdaloss (exact, N=1)": {"name": "lambdaloss", "n_negatives": 1},
    "song": {},
    "sogclr": {},
    "listnet": {"tau": 0.2},
    "listmle": {"tau": 0.2},
    "approxndcg": {"alpha": 10.0},
    "neuralndcg (N=100)": {"name": "neuralndcg", "n_negatives": 100},
    "llpauc": {},
    "advinfonce": {},
    "guidedrec (N=9)": {"name": "guidedrec", "n_negatives": 9},
}
DOT = ("bpr", "bce", "ranknet", "lambdarank", "lambdaloss", "lambdalossk")  # as their recipes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="electronic")
    parser.add_argument("--steps", type=int, default=10, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--losses", nargs="+", default=[k for k in LOSSES if not k.startswith("neuralndcg")],
                        choices=list(LOSSES), metavar="LOSS",
                        help="labels to time (default: all but NeuralNDCG, ~6 s a step on 2 CPU cores); "
                             "sl is always timed, as the reference")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--deterministic", default="warn", choices=["warn", "false"],
                        help="deterministic kernels, as runs use them (trainer.deterministic), or PyTorch's default")
    parser.add_argument("--allocator", default="retain", choices=["retain", "default"],
                        help="retain: keep freed buffers for reuse, as runs do (retain_freed_memory=true)")
    args = parser.parse_args()
    retain_freed_memory(args.allocator == "retain")
    torch.use_deterministic_algorithms(args.deterministic == "warn", warn_only=True)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
    dm = RankingDataModule(split_validation(data, 0.1, 0), seed=0)
    splits = dm.splits
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(0)
    batches = []
    for b, rows in enumerate(loader):
        if b == args.steps:
            break
        rows = rows.to(device)
        batches.append((rows, dm.sampler.sample(rows[:, 0], 1000, negatives_generator(device, 0, 0, b))))
    print(f"{args.dataset}: {splits.n_users} users x {splits.n_items} items; {len(batches)} batches of "
          f"{batches[0][0].shape[0]} pairs; device {device}, {torch.get_num_threads()} threads, "
          f"deterministic {args.deterministic}")

    setups = {}
    for label in dict.fromkeys(["sl", *args.losses]):
        spec = dict(LOSSES[label])
        name = spec.pop("name", label)
        refresh = spec.pop("refresh", None)
        L.seed_everything(0, verbose=False)
        score = "dot" if name in DOT else "cosine"
        model = MF(splits.n_users, splits.n_items, score=score).to(device)
        loss = build_loss(name, **spec).to(device)
        loss.bind(dm.train_data)
        if refresh is not None:
            loss.on_train_epoch_start(19 if refresh else 0)  # t_beta = 20: epoch 19 refreshes
        # a loss's own parameters (LLPAUC, AdvInfoNCE, GuidedRec) are trained too, as in runs
        setups[label] = (model, loss, torch.optim.Adam([*model.parameters(), *loss.parameters()], lr=0.01))

    def run(label: str) -> float:
        model, loss, opt = setups[label]
        sync()
        t0 = time.perf_counter()
        for rows, negs in batches:
            optimise(model, loss, opt, rows, negatives=negs[:, : loss.n_negatives])
        sync()
        return (time.perf_counter() - t0) / len(batches)

    for label in setups:  # warm-up
        run(label)
    times: dict[str, list[float]] = {label: [] for label in setups}
    for _ in range(args.rounds):
        for label in setups:
            times[label].append(run(label))
    median = {label: statistics.median(v) for label, v in times.items()}
    base = median["sl"]
    print("\n| loss | ms / step | relative to SL |\n|---|---|---|")
    for label, t in median.items():
        print(f"| {label} | {1000 * t:.1f} | {t / base:.2f}x |")
    t_beta = 20
    if "slk (refresh epoch)" in median and "slk (plain epoch)" in median:
        avg = (median["slk (refresh epoch)"] + (t_beta - 1) * median["slk (plain epoch)"]) / t_beta
        print(f"| slk, epoch average with t_beta={t_beta} | {1000 * avg:.1f} | {avg / base:.2f}x (target <= 1.1x) |")
    print("paper (RTX 4090, Electronic): SL 7.19 s/epoch, SL@20 7.59 s (1.06x), LambdaLoss@20 434.54 s (60.4x)")


if __name__ == "__main__":
    main()
