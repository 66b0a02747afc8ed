"""The cost of SL@K's threshold refresh with shared negatives (default Gowalla, MF, N = 1000).

In a refresh epoch ((e + 1) % t_beta == 0) SL@K re-estimates every batch user's threshold
after each optimiser step with the ``sampled`` estimator: the K-th largest score among the
user's training positives (p90 cap) and the batch's negatives, each item once. With shared
negatives the negatives are G draws, one per group of rows. Two ways to compute the same
statistic:

- per row: the draws expanded to (B, N) ids, a (B, P + N, d) gather of item rows, a (B, P + N)
  sort to drop repeats (what every refresh did before ``estimate_shared``);
- per group: each draw scored once for its rows by a batched matmul
  (``Scorer.score_groups``), repeats dropped once per draw, the rows' listed positives
  looked up in the sorted draw.

Prints ms per refresh step of each, the largest difference between the two estimates, and
what the difference means for a 200-epoch run with t_beta = 20 (10 refresh epochs).

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_refresh.py [--dataset gowalla]
        [--groups 16] [--batches 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from bench.contracts import TrainData, draws_per_row
from bench.datasets import IRBenchmark, split_validation
from bench.models import MF
from bench.tasks import RankingDataModule
from bench.thresholds import build as build_estimator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--groups", type=int, default=16, help="train.shared_groups")
    parser.add_argument("--negatives", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (runs in lanes use 1)")
    parser.add_argument("--k", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
    splits = RankingDataModule(split_validation(data, 0.1, 0), seed=0).splits
    torch.manual_seed(0)
    model = MF(splits.n_users, splits.n_items, score="cosine")
    estimator = build_estimator("sampled")
    estimator.bind(TrainData(n_users=splits.n_users, n_items=splits.n_items, train=splits.train,
                             n_pairs=splits.train.nnz))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, splits.n_users, (args.batch_size,), generator=gen),
                torch.randint(0, splits.n_items, (args.groups, args.negatives), generator=gen))
               for _ in range(args.batches + 2)]
    print(f"{args.dataset}: {splits.n_users} users x {splits.n_items} items; batch {args.batch_size}, "
          f"{args.groups} draws of {args.negatives}, p90 cap {estimator.cap} positives, "
          f"{torch.get_num_threads()} thread(s)")

    def timed(fn) -> tuple[float, list[torch.Tensor]]:
        with torch.no_grad():
            for users, draws in batches[:2]:  # warm-up
                fn(users, draws)
            out = []
            start = time.perf_counter()
            for users, draws in batches[2:]:
                out.append(fn(users, draws))
            return (time.perf_counter() - start) / args.batches * 1e3, out

    per_row_ms, per_row = timed(lambda u, d: estimator.estimate(model, u, draws_per_row(d, u.numel()), args.k))
    shared_ms, shared = timed(lambda u, d: estimator.estimate_shared(model, u, d, args.k))
    diff = max(float((a - b).abs().max()) for a, b in zip(per_row, shared))
    steps = -(-splits.train.nnz // args.batch_size)
    print(f"refresh per step: per row {per_row_ms:.1f} ms, per group {shared_ms:.1f} ms "
          f"({per_row_ms / shared_ms:.1f}x); largest |difference| of the estimates {diff:.2e}")
    print(f"per refresh epoch of {steps} steps: {steps * per_row_ms / 1e3:.0f} s vs {steps * shared_ms / 1e3:.0f} s; "
          f"a 200-epoch run with t_beta 20 (10 refresh epochs): "
          f"{10 * steps * per_row_ms / 6e4:.1f} min vs {10 * steps * shared_ms / 6e4:.1f} min")


if __name__ == "__main__":
    main()
