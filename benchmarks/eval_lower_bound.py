"""Does a per-user lower bound on the K-th score speed up full-ranking evaluation?

Per chunk of users (the evaluator's default chunk on this catalogue), times:
(1) the score matmul, (2) plain tie-exact top-K (``rank_items``), (3) filter-then-select
with the tightest safe bound (the exact K-th score, what ``cached`` gives right after a
rebuild) and (4) with a bound at about rank 2K; and, for dot-product scores, the share of
item blocks a norm bound ||u|| * max ||v|| < b could skip (cosine: every norm is 1, none).

    BENCH_DATA_DIR=../shared/data python benchmarks/eval_lower_bound.py [--dataset gowalla] [--run RUN_DIR]

Without ``--run`` the embeddings are random (N(0, 1) cosine / xavier dot, as at init).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from bench.datasets import IRBenchmark, split_validation
from bench.evaluation.metrics import rank_items
from bench.evaluation.shortcut import rank_items_with_bound


def timed(fn, repeat: int = 5):
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return (time.perf_counter() - t0) / repeat * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--chunk-scores", type=int, default=1 << 24)
    parser.add_argument("--block", type=int, default=1024, help="items per block for the norm bound")
    args = parser.parse_args()
    data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
    splits = split_validation(data, 0.1, 0)
    n_users, n_items = splits.n_users, splits.n_items
    b = max(1, args.chunk_scores // n_items)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.dataset}: {n_items} items, "
          f"chunk {b} users, K = {args.k}")
    gen = torch.Generator().manual_seed(0)
    users = torch.randperm(n_users, generator=gen)[:b]
    train_mask = splits.train.dense_rows(users)
    for score in ("cosine", "dot"):
        if score == "cosine":
            u = torch.nn.functional.normalize(torch.randn(b, 64, generator=gen), dim=1)
            v = torch.nn.functional.normalize(torch.randn(n_items, 64, generator=gen), dim=1)
        else:
            bound_x = (6 / (n_users + 64)) ** 0.5
            u = (torch.rand(b, 64, generator=gen) * 2 - 1) * bound_x
            v = (torch.rand(n_items, 64, generator=gen) * 2 - 1) * (6 / (n_items + 64)) ** 0.5
        ms_mm, s = timed(lambda: (u @ v.T).masked_fill(train_mask, float("-inf")))
        ms_plain, top = timed(lambda: rank_items(s, args.k))
        kth = s.gather(1, top[:, -1:]).squeeze(1)
        loose = torch.topk(s, 2 * args.k, dim=1).values[:, -1]
        ms_tight, (got, _) = timed(lambda: rank_items_with_bound(s, args.k, kth))
        ms_loose, (got2, _) = timed(lambda: rank_items_with_bound(s, args.k, loose))
        assert torch.equal(got, top) and torch.equal(got2, top)
        # norm-block bound: items sorted by norm, blocks of --block; skip a block when
        # ||u|| * max_{v in block} ||v|| < b_u
        norms = v.norm(dim=1).sort(descending=True).values
        block_max = norms[:: args.block]
        skip = (u.norm(dim=1)[:, None] * block_max[None, :] < kth[:, None]).float().mean().item()
        print(f"{score:>6}: matmul+mask {ms_mm:6.1f} ms | top-{args.k}: plain {ms_plain:6.1f} ms, "
              f"filter with the exact bound {ms_tight:6.1f} ms, with a rank-2K bound {ms_loose:6.1f} ms | "
              f"item blocks a norm bound skips: {skip:.1%}")


if __name__ == "__main__":
    main()
