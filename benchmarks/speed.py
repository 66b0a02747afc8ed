"""Pipeline overhead on a real data set (default Gowalla, MF + SL, N = 1000).

(a) training: the Lightning pipeline (seeded batches, negative sampling, loss, Adam) over
    B batches vs the bare forward/backward/step of the same batches on pre-sampled
    tensors; target: ratio <= 1.5.
(b) evaluation (run first, on the initial model): full-ranking test evaluation of all
    users (chunked scoring, -inf masks, tie-exact top-K, all metrics) vs the bare score
    matmul + torch.topk of the same chunks; target: ratio <= 1.5. Peak memory of
    evaluation reported.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed.py [--dataset gowalla] [--batches 100]

``--batches 0`` times a whole epoch (791 batches on Gowalla: minutes on a CPU).
"""

from __future__ import annotations

import argparse
import os
import time

import lightning as L
import torch
import torch.nn.functional as F

from bench.contracts import LossBatch
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
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")

    data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
    dm = RankingDataModule(split_validation(data, 0.1, 0), seed=0)
    n_batches = len(dm.train_dataloader()) if args.batches <= 0 else min(args.batches, len(dm.train_dataloader()))
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
        t0 = time.perf_counter()
        for c in chunks:
            torch.topk(un[c] @ vn.T, 100)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_bare_eval = time.perf_counter() - t0
        t0 = time.perf_counter()
        per_user = ev.evaluate(model.full_scorer(), device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_eval = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() / 2**20) if device.type == "cuda" else _status_mib("VmHWM") - rss_before
    print(f"(b) evaluation of {ev.users.numel()} users x {ev.n_items} items in {len(chunks)} chunks of "
          f"<= {ev.chunk_size}: full pipeline {t_eval:.2f} s, bare matmul+topk {t_bare_eval:.2f} s, "
          f"ratio {t_eval / t_bare_eval:.2f} (target <= 1.5); test NDCG@20 {per_user['ndcg@20'].mean():.4f}")
    if device.type == "cuda":
        print(f"    peak GPU memory during evaluation: {peak:.0f} MiB")
    else:
        print(f"    peak RSS growth during evaluation {peak:.0f} MiB (process before: {rss_before:.0f} MiB; "
              f"one chunk's score matrix = {ev.chunk_size * ev.n_items * 4 / 2**20:.0f} MiB)")

    # (a) bare: the same batches and negatives, sampled beforehand, and the step written out by
    # hand (cosine MF + SL: one matmul, a gather, the loss), the floor the pipeline is held to
    sampler = dm.train_dataloader().sampler
    sampler.set_epoch(0)
    batches = []
    for b, idx in enumerate(sampler):
        if b == n_batches:
            break
        pairs = dm.train_rows[idx].to(device)
        negs = dm.sampler.sample(pairs[:, 0], args.negatives, negatives_generator(device, 0, 0, b))
        batches.append((pairs[:, 0], pairs[:, 1], negs))

    def bare() -> float:
        model, loss = fresh()
        model = model.to(device)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for users, items, negs in batches:
            opt.zero_grad(set_to_none=True)
            user_emb, item_emb = model.embeddings()
            u, table = F.normalize(user_emb[users], dim=1), F.normalize(item_emb, dim=1)
            scores = (u @ table.T).gather(1, torch.cat([items[:, None], negs], 1))
            loss(LossBatch(pos=scores[:, 0], neg=scores[:, 1:], users=users)).backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    t_bare_before = bare()

    # (a) pipeline ---------------------------------------------------------------------
    model, loss = fresh()
    module = RankingModule(model, loss, lambda p: torch.optim.Adam(p, lr=0.1), seed=0)
    trainer = L.Trainer(max_epochs=1, limit_train_batches=n_batches, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        use_distributed_sampler=False, num_sanity_val_steps=0)
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_pipeline = time.perf_counter() - t0

    # timed on both sides of the pipeline run, the faster kept: order effects (allocator,
    # clocks) are then not charged to either side
    t_bare = min(t_bare_before, bare())
    print(f"(a) training, {n_batches} batches: pipeline {t_pipeline:.2f} s "
          f"({1000 * t_pipeline / n_batches:.1f} ms/batch), bare {t_bare:.2f} s ({1000 * t_bare / n_batches:.1f} "
          f"ms/batch), ratio {t_pipeline / t_bare:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
