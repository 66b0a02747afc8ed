"""Training-step time of the backbones on the same batches.

(1) LightGCN (2 layers) and XSimGCL vs MF on a CF data set (default Gowalla), SL with
    N = 1000 negatives, the same pre-sampled batches; (2) SASRec's dropout, PyTorch's CPU
    kernel against the uniform-mask one SASRec uses, forward and backward on one attention-sized
    tensor; (3) one SASRec epoch on a sequential data set (default ml100k-seq; games and
    beauty-seq are the short-history Amazon sets), one user a row and packed (``model.pack``).

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_backbones.py [--dataset gowalla] [--steps 10]
        [--skip-cf] [--seq-dataset ml100k-seq | --seq-experiment seq/table6_games]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import lightning as L
import torch
from hydra.utils import instantiate

from bench.allocator import retain_freed_memory
from bench.app import compose
from bench.datasets import IRBenchmark, load_dataset, split_validation
from bench.losses import build as build_loss
from bench.models import MODELS
from bench.models.sasrec import UniformMaskDropout
from bench.sampling import negatives_generator
from bench.step import optimise
from bench.tasks import RankingDataModule, RankingModule
from bench.training import build_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seq-dataset", default="ml100k-seq")
    parser.add_argument("--seq-experiment", default=None,
                        help="time a sequential experiment's setting instead, e.g. seq/table6_games")
    parser.add_argument("--skip-cf", action="store_true", help="only the SASRec epoch")
    parser.add_argument("--allocator", default="retain", choices=["retain", "default"],
                        help="retain: keep freed buffers for reuse, as runs do (retain_freed_memory=true)")
    args = parser.parse_args()
    retain_freed_memory(args.allocator == "retain")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu")

    if not args.skip_cf:
        data = IRBenchmark(args.dataset, data_dir=os.environ.get("BENCH_DATA_DIR")).load()
        dm = RankingDataModule(split_validation(data, 0.1, 0), seed=0)
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(0)
        rows_list = [rows for _, rows in zip(range(args.steps), loader)]
        negs = [dm.sampler.sample(r[:, 0], 1000, negatives_generator("cpu", 0, 0, b)) for b, r in enumerate(rows_list)]
        setups = {}
        for name in ("mf", "lightgcn", "xsimgcl"):
            L.seed_everything(0, verbose=False)
            model = MODELS.build(name, n_users=dm.splits.n_users, n_items=dm.splits.n_items)
            model.bind(dm.train_data)
            setups[name] = (model, build_loss("sl", tau=0.1), torch.optim.Adam(model.parameters(), lr=0.01))

        def run(name: str) -> float:
            model, loss, opt = setups[name]
            t0 = time.perf_counter()
            for rows, neg in zip(rows_list, negs):
                optimise(model, loss, opt, rows, negatives=neg)
            return (time.perf_counter() - t0) / len(rows_list)

        for name in setups:
            run(name)
        times = {name: statistics.median(run(name) for _ in range(args.rounds)) for name in setups}
        steps_per_epoch = len(dm.train_dataloader())
        print(f"\n{args.dataset}: {dm.splits.n_users} users x {dm.splits.n_items} items, "
              f"{steps_per_epoch} batches/epoch")
        print("| backbone | ms / step | relative to MF | projected epoch (s) |\n|---|---|---|---|")
        for name, t in times.items():
            print(f"| {name} | {1000 * t:.0f} | {t / times['mf']:.2f}x | {t * steps_per_epoch:.0f} |")

    # SASRec's dropout: 128 users x 50 positions x 50, as on Amazon Games -----------------------
    x = torch.randn(128, 50, 50, requires_grad=True)
    native, uniform = torch.nn.Dropout(0.5), UniformMaskDropout(0.5)

    def per_call(drop: torch.nn.Module, n: int = 50) -> float:
        drop(x).sum().backward()
        t0 = time.perf_counter()
        for _ in range(n):
            drop(x).sum().backward()
        return 1000 * (time.perf_counter() - t0) / n

    t_native = statistics.median(per_call(native) for _ in range(args.rounds))
    t_uniform = statistics.median(per_call(uniform) for _ in range(args.rounds))
    print(f"\nSASRec dropout on 128 x 50 x 50, forward + backward: nn.Dropout {t_native:.2f} ms, "
          f"UniformMaskDropout {t_uniform:.2f} ms ({t_native / t_uniform:.1f}x)")

    # SASRec: one real epoch through the pipeline, one user a row (padded) and packed ----------
    for pack in (False, True):
        setup = ([f"+experiment={args.seq_experiment}"] if args.seq_experiment
                 else ["task=seq", "model=sasrec", f"dataset={args.seq_dataset}"])
        cfg = compose([*setup, "loss=sl", "logger=none", f"model.pack={str(pack).lower()}",
                       "output_dir=/tmp/bench-speed"])
        seq_data = load_dataset(cfg.dataset)
        note = ""
        if seq_data.train_timestamps is None:
            # e.g. the paper's ML-1M split, which has no timestamps: a seeded random order gives
            # a sequence data set of the same size, good for timing only
            gen = torch.Generator().manual_seed(0)
            seq_data.train_timestamps = torch.randperm(seq_data.train.shape[0], generator=gen).double()
            order = torch.randperm(seq_data.test.shape[0], generator=gen).double()
            seq_data.test_timestamps = seq_data.train.shape[0] + order
            note = " (no timestamps in this data set: random order, timing only)"
        seq_dm = build_task(cfg).datamodule(seq_data, seed=0)
        model = instantiate(cfg.model, n_users=seq_dm.splits.n_users, n_items=seq_dm.splits.n_items)
        module = RankingModule(model, instantiate(cfg.loss), instantiate(cfg.optimizer), seed=0,
                               negatives=str(cfg.train.get("negatives", "per_pair")),
                               shared_groups=int(cfg.train.get("shared_groups", 1)))
        trainer = L.Trainer(max_epochs=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                            use_distributed_sampler=False, num_sanity_val_steps=0)
        t0 = time.perf_counter()
        trainer.fit(module, datamodule=seq_dm)
        print(f"\nSASRec ({'packed' if pack else 'one user a row'}), one epoch on {cfg.dataset.name} "
              f"({seq_dm.splits.n_users} users, {len(seq_dm.train_dataloader())} batches of {seq_dm.batch_size} "
              f"users){note}: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
