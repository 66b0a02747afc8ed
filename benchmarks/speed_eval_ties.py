"""What tie-aware evaluation costs: full-ranking test evaluation of every user of a data set
(default Gowalla: 29,858 users x 40,988 items) under each ``eval.ties`` rule, timed in turn, against the
evaluation before tie rules existed (top-K with ties by item id, then the metrics: no range
columns, no group bookkeeping). Target: ``expected`` within 10% of that baseline.

Two models: MF with N(0, 1) embeddings (continuous scores: ties are rare, the usual case), and
the same scores rounded to two decimals (heavy ties, groups cut by the top-K's end: the worst
case for the per-group bookkeeping).

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_eval_ties.py [--dataset gowalla] [--repeats 3]
        [--rules expected lowest_id] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
from torch import Tensor

from bench.datasets import IRBenchmark, split_validation
from bench.evaluation import FullRankingEvaluator
from bench.evaluation.metrics import metrics_from_hits, rank_items
from bench.evaluation.ties import TIE_MODES
from bench.tasks import RankingDataModule


def baseline_evaluate(ev: FullRankingEvaluator, score_users: Callable[[Tensor], Tensor]) -> dict[str, Tensor]:
    """The evaluation as it was before tie rules: lowest-id order, metrics only."""
    parts = []
    for users in ev.user_chunks():
        target = ev.target
        scores = score_users(users).float()
        flat = scores.view(-1)
        for csr in ev.exclude:
            rows, items = csr.gather_rows(users)
            flat.index_fill_(0, rows * ev.n_items + items, float("-inf"))
        top = rank_items(scores, max(ev.ks))
        parts.append(metrics_from_hits(ev._hits(target, users, top), target.degrees()[users], ev.ks))
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def interleaved(variants: dict[str, Callable[[], dict[str, Tensor]]], repeats: int,
                ) -> dict[str, tuple[float, dict[str, Tensor]]]:
    """The best time of each variant over ``repeats`` rounds, each round timing every variant
    in turn: a machine whose load drifts (other jobs) then slows all of them alike."""
    best: dict[str, tuple[float, dict[str, Tensor]]] = {}
    for _ in range(repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            out = fn()
            elapsed = time.perf_counter() - t0
            if name not in best or elapsed < best[name][0]:
                best[name] = (elapsed, out)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--repeats", type=int, default=3, help="timings per rule (the best is reported)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    parser.add_argument("--rules", nargs="+", default=list(TIE_MODES), choices=TIE_MODES)
    parser.add_argument("--models", nargs="+", default=["continuous", "rounded"], choices=["continuous", "rounded"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    splits = split_validation(IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load(), 0.1, 0)
    dm = RankingDataModule(splits, seed=0)
    gen = torch.Generator().manual_seed(0)
    user_emb = torch.randn(splits.n_users, 64, generator=gen)
    item_emb = torch.randn(splits.n_items, 64, generator=gen)
    models = {"continuous scores": lambda u: user_emb[u] @ item_emb.T,
              "scores rounded to 0.01": lambda u: torch.round(user_emb[u] @ item_emb.T, decimals=2)}
    models = {name: fn for name, fn in models.items() if name.split()[0] in args.models or
              (name.startswith("scores rounded") and "rounded" in args.models)}
    test = dm.test_evaluator
    print(f"{args.dataset}: test evaluation of {test.users.numel()} users x {test.n_items} items, "
          f"ks {list(test.ks)}, {torch.get_num_threads()} threads, best of {args.repeats}")
    for name, scorer in models.items():
        variants = {"before tie rules": lambda s=scorer: baseline_evaluate(test, s)}
        for rule in args.rules:
            ev = FullRankingEvaluator(test.target, test.exclude, test.ks, ties=rule)
            variants[rule] = lambda ev=ev, s=scorer: ev.evaluate(s)
        timings = interleaved(variants, args.repeats)
        t_base, base = timings.pop("before tie rules")
        print(f"\n{name}: before tie rules {t_base:.2f} s (NDCG@20 {base['ndcg@20'].mean():.5f})")
        for rule, (t, out) in timings.items():
            cut = int(out["ties:cut@20"].sum())
            lo, hi = out["ties:pessimistic/ndcg@20"].mean(), out["ties:optimistic/ndcg@20"].mean()
            print(f"  {rule:<12} {t:6.2f} s  x{t / t_base:.3f}  NDCG@20 {out['ndcg@20'].mean():.5f}  "
                  f"range [{lo:.5f}, {hi:.5f}]  cut-off@20 inside a tie: {cut} users")


if __name__ == "__main__":
    main()
