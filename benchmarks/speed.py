"""Pipeline overhead on a real data set (default Gowalla, MF + SL, N = 1000).

(a) training, per negative mode (``--modes per_pair shared``): the Lightning pipeline
    (seeded batches, negative sampling, the shared step, Adam) over B batches vs the bare
    forward/backward/step of the same batches on pre-drawn tensors; target: ratio <= 1.5;
    and the shared-mode step against the per-pair one.
(b) evaluation (run first, on the initial model): full-ranking test evaluation of all
    users (chunked scoring, -inf masks, tie-exact top-K, all metrics) vs the bare score
    matmul + torch.topk of the same chunks, best of ``--eval-rounds`` alternating passes;
    target: ratio <= 1.05. Peak memory of evaluation reported.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed.py [--dataset gowalla] [--batches 100]
        [--deterministic warn|false] [--adam foreach|fused] [--eval-only] [--eval-rounds 5]

Both sides use the kernels runs use (``trainer.deterministic``, default ``warn``); ``false`` times
PyTorch's default kernels, to see what determinism costs.

``--batches 0`` times a whole epoch (791 batches on Gowalla: minutes on a CPU).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F

from bench.allocator import retain_freed_memory, skip_uninitialised_fill
from bench.contracts import LossBatch, group_layout
from bench.datasets import IRBenchmark, split_validation
from bench.losses import build as build_loss
from bench.models import MF
from bench.sampling import negatives_generator
from bench.tasks import RankingDataModule, RankingModule


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (Linux: write 5 to clear_refs); current RSS in MiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_mib("VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--batches", type=int, default=100, help="training batches to time (0 = one full epoch)")
    parser.add_argument("--negatives", type=int, default=1000)
    parser.add_argument("--eval-only", action="store_true", help="time the evaluation only")
    parser.add_argument("--eval-rounds", type=int, default=5, help="evaluation passes timed (alternating with the bare "
                        "matmul + top-100; the best of each is compared)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", nargs="+", default=["per_pair", "shared"], choices=["per_pair", "shared"],
                        help="train.negatives modes to time")
    parser.add_argument("--shared-groups", type=int, default=1,
                        help="shared mode: one draw per this many groups of rows (train.shared_groups)")
    parser.add_argument("--adam", default="foreach", choices=["foreach", "fused"],
                        help="Adam's implementation on both sides (the runs' default: foreach)")
    parser.add_argument("--deterministic", default="warn", choices=["warn", "false"],
                        help="trainer.deterministic of the timed runs (both sides)")
    parser.add_argument("--allocator", default="retain", choices=["retain", "default"],
                        help="retain: keep freed buffers for reuse, as runs do (retain_freed_memory=true)")
    args = parser.parse_args()
    retain_freed_memory(args.allocator == "retain")
    deterministic: Literal["warn"] | bool = "warn" if args.deterministic == "warn" else False
    torch.use_deterministic_algorithms(deterministic == "warn", warn_only=True)
    skip_uninitialised_fill()  # as runs do (their module does it at fit start): the bare side alike
    adam = {"foreach": True} if args.adam == "foreach" else {"fused": True}
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results: dict[str, float] = {}
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"deterministic {args.deterministic}, Adam {args.adam}")

    data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
    dm = RankingDataModule(split_validation(data, 0.1, 0), seed=0)
    n_epoch = len(dm.train_dataloader())
    n_batches = n_epoch if args.batches <= 0 else min(args.batches, n_epoch)
    print(f"{args.dataset}: {dm.splits.n_users} users x {dm.splits.n_items} items, "
          f"{dm.splits.train.nnz} training pairs; timing {n_batches} batches of 1024 x {args.negatives} negatives")

    def fresh():
        L.seed_everything(0, verbose=False)
        model = MF(dm.splits.n_users, dm.splits.n_items, score="cosine")
        loss = build_loss("sl", tau=0.1, n_negatives=args.negatives)
        return model, loss

    # (b) evaluation ---------------------------------------------------------------------
    model, _ = fresh()
    model = model.to(device).eval()
    ev = dm.test_evaluator
    chunks = [c.to(device) for c in ev.user_chunks()]
    rss_before = _reset_peak_rss()
    with torch.no_grad():
        user_emb, item_emb = model.embeddings()
        un, vn = torch.nn.functional.normalize(user_emb, dim=1), torch.nn.functional.normalize(item_emb, dim=1)
        for c in chunks[:2]:  # warm-up
            torch.topk(un[c] @ vn.T, 100)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

        def timed(fn) -> float:
            t0 = time.perf_counter()
            fn()
            sync()
            return time.perf_counter() - t0

        # alternating rounds, best of each: single passes on a shared machine vary by 10-15%
        bare_times, eval_times = [], []
        for _ in range(args.eval_rounds):
            bare_times.append(timed(lambda: [torch.topk(un[c] @ vn.T, 100) for c in chunks]))
            eval_times.append(timed(lambda: ev.evaluate(model.full_scorer(), device=device)))
        t_bare_eval, t_eval = min(bare_times), min(eval_times)
        per_user = ev.evaluate(model.full_scorer(), device=device)
    peak = (torch.cuda.max_memory_allocated() / 2**20) if device.type == "cuda" else _status_mib("VmHWM") - rss_before
    print(f"(b) evaluation of {ev.users.numel()} users x {ev.n_items} items in {len(chunks)} chunks of "
          f"<= {ev.chunk_size}: full pipeline {t_eval:.2f} s, bare matmul+topk {t_bare_eval:.2f} s, "
          f"ratio {t_eval / t_bare_eval:.3f} (best of {args.eval_rounds} alternating rounds; each round: "
          f"{', '.join(f'{e:.2f}/{b:.2f}' for e, b in zip(eval_times, bare_times))}); "
          f"test NDCG@20 {per_user['ndcg@20'].mean():.4f}")
    if device.type == "cuda":
        print(f"    peak GPU memory during evaluation: {peak:.0f} MiB")
    else:
        print(f"    peak RSS growth during evaluation {peak:.0f} MiB (process before: {rss_before:.0f} MiB; "
              f"one chunk's score matrix = {ev.chunk_size * ev.n_items * 4 / 2**20:.0f} MiB)")

    # (a) training, per mode: the pipeline (Lightning, seeded batches, sampling, the shared step)
    # against the same step written out by hand on the same pre-drawn batches (cosine MF + SL):
    # the floor the pipeline is held to
    for mode in [] if args.eval_only else args.modes:
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(0)
        batches = []
        for b, rows in enumerate(loader):
            if b == n_batches:
                break
            rows = rows.to(device)
            gen = negatives_generator(device, 0, 0, b)
            if mode == "shared":
                n_groups = group_layout(rows.shape[0], args.shared_groups)[1]
                draw = dm.sampler.sample_shared(args.negatives, gen, device, groups=n_groups if n_groups > 1 else None)
                hits = dm.sampler.shared_hits(rows[:, 0], draw)
                valid = torch.ones(rows.shape[0], args.negatives, dtype=torch.bool, device=device)
                valid[hits] = False
                batches.append((rows[:, 0], rows[:, 1], draw, (valid, hits)))
            else:
                batches.append((rows[:, 0], rows[:, 1], dm.sampler.sample(rows[:, 0], args.negatives, gen), None))

        def bare(batches: list = batches) -> float:
            model, loss = fresh()
            model = model.to(device)
            opt = torch.optim.Adam(model.parameters(), lr=0.1, **adam)
            sync()
            t0 = time.perf_counter()
            for users, items, negs, mask in batches:
                valid, hits = mask if mask is not None else (None, None)
                opt.zero_grad(set_to_none=True)
                user_emb, item_emb = model.embeddings()
                u = F.normalize(user_emb[users], dim=1)
                if valid is None:  # per pair: the full (B, I) matmul, then a gather
                    scores = (u @ F.normalize(item_emb, dim=1).T).gather(1, torch.cat([items[:, None], negs], 1))
                    pos, neg = scores[:, 0], scores[:, 1:]
                elif negs.dim() == 1:  # shared: (B, d) x (d, N) over the draw's rows only
                    pos = (u * F.normalize(item_emb[items], dim=1)).sum(1)
                    neg = (u @ F.normalize(item_emb[negs], dim=1).T).index_put_(hits, torch.tensor(float("-inf")))
                else:  # a draw per group of rows: a batched (s, d) x (d, N) matmul per group
                    pos = (u * F.normalize(item_emb[items], dim=1)).sum(1)
                    g, m = negs.shape
                    size = -(-u.shape[0] // g)
                    drawn = F.normalize(item_emb[negs.reshape(-1)], dim=1).view(g, m, -1)
                    padded = F.pad(u, (0, 0, 0, g * size - u.shape[0])).view(g, size, -1)
                    neg = torch.bmm(padded, drawn.transpose(1, 2)).reshape(-1, m)[:u.shape[0]]
                    neg = neg.index_put_(hits, torch.tensor(float("-inf")))
                loss(LossBatch(pos=pos, neg=neg, users=users, neg_valid=valid)).backward()
                opt.step()
            sync()
            return time.perf_counter() - t0

        t_bare_before = bare()
        model, loss = fresh()
        module = RankingModule(model, loss, lambda p: torch.optim.Adam(p, lr=0.1, **adam), seed=0, negatives=mode,
                               shared_groups=args.shared_groups)
        trainer = L.Trainer(max_epochs=1, limit_train_batches=n_batches, limit_val_batches=0, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                            use_distributed_sampler=False, num_sanity_val_steps=0, deterministic=deterministic)
        t0 = time.perf_counter()
        trainer.fit(module, datamodule=dm)
        sync()
        t_pipeline = time.perf_counter() - t0
        # timed on both sides of the pipeline run, the faster kept: order effects (allocator,
        # clocks) are then not charged to either side
        t_bare = min(t_bare_before, bare())
        results[mode] = t_pipeline / n_batches
        label = f"shared/{args.shared_groups}" if mode == "shared" and args.shared_groups > 1 else mode
        print(f"(a) training, {label}, {n_batches} batches: pipeline {t_pipeline:.2f} s "
              f"({1000 * t_pipeline / n_batches:.1f} ms/batch), bare {t_bare:.2f} s "
              f"({1000 * t_bare / n_batches:.1f} ms/batch), ratio {t_pipeline / t_bare:.2f} (target <= 1.5); "
              f"an epoch of {n_epoch} batches ≈ {n_epoch * t_pipeline / n_batches:.0f} s")
    if len(results) == 2:
        print(f"shared / per-pair pipeline step: {results['shared'] / results['per_pair']:.3f} "
              f"({1 / (results['shared'] / results['per_pair']):.1f}x faster)")


if __name__ == "__main__":
    main()
