"""Where a cheap-loss training step's time goes (issue 48): MF + BPR (or BCE) on a real data set.

A run's step, as ``python -m bench dataset=<d> loss=<loss>`` composes it (the loss's recipe: dot
scores, Adam lr 0.001 with weight decay 1e-4), split into its parts, each timed over the same
``--batches`` batches and summed:

    loader     next batch from the training loader (seeded shuffle, index -> rows)
    generator  the batch's seeded negatives generator
    sample     the negatives (uniform over the user's non-positives, rejection)
    forward    encode + score + the loss (bench.step.train_step on the drawn negatives)
    backward   loss.backward()
    optimizer  zero_grad + Adam.step

against the whole pipeline (an epoch of Lightning's fit over the same batches, with the run's
callbacks that act during training: the checkpoint after every epoch, the time estimate; no
validation; the median of the 2nd to 4th epochs, so without the fit's set-up) and the bare loop
(forward, backward, Adam on pre-drawn tensors, written out by hand). "Lightning and the rest" is
the pipeline minus the sum of the parts. Alternating rounds; the median of each part is printed.

    BENCH_DATA_DIR=../shared/data python benchmarks/profile_cheap_step.py [--dataset gowalla]
        [--loss bpr] [--batches 200] [--rounds 3] [overrides ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict

import lightning as L
import torch
from hydra.utils import instantiate

from bench.allocator import retain_freed_memory, skip_uninitialised_fill
from bench.app import compose
from bench.sampling import negatives_generator
from bench.step import train_step
from bench.tasks import RankingModule
from bench.training import build_callbacks, build_datamodule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--loss", default="bpr")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="more key=value overrides of the run")
    args = parser.parse_args()
    retain_freed_memory(True)
    skip_uninitialised_fill()
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = tempfile.mkdtemp(prefix="bench-profile-")
    cfg = compose([f"dataset={args.dataset}", f"loss={args.loss}", "logger=none", f"output_dir={out}",
                   *args.overrides])
    dm = build_datamodule(cfg, seed=0)
    dm.setup("fit")
    n_epoch = len(dm.train_dataloader())
    n = min(args.batches, n_epoch)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.dataset}: {dm.splits.n_users} users "
          f"x {dm.splits.n_items} items, {n_epoch} batches an epoch; timing {n} batches of {cfg.train.batch_size}, "
          f"loss {args.loss}, lr {cfg.optimizer.lr}, weight decay {cfg.optimizer.weight_decay}")

    def fresh():
        L.seed_everything(0, verbose=False)
        model = instantiate(cfg.model, n_users=dm.splits.n_users, n_items=dm.splits.n_items)
        loss = instantiate(cfg.loss)
        model.bind(dm.train_data)
        loss.bind(dm.train_data)
        return model, loss, instantiate(cfg.optimizer)(model.parameters())

    def parts() -> dict[str, float]:
        model, loss, opt = fresh()
        t: dict[str, float] = defaultdict(float)
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(0)
        it = iter(loader)
        for b in range(n):
            t0 = time.perf_counter()
            rows = next(it)
            t1 = time.perf_counter()
            gen = negatives_generator("cpu", 0, 0, b)
            t2 = time.perf_counter()
            negs = dm.sampler.sample(rows[:, 0], loss.n_negatives, gen)
            t3 = time.perf_counter()
            out = train_step(model, loss, rows, negatives=negs)
            t4 = time.perf_counter()
            out.loss.backward()
            t5 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t6 = time.perf_counter()
            for k, a, z in (("loader", t0, t1), ("generator", t1, t2), ("sample", t2, t3), ("forward", t3, t4),
                            ("backward", t4, t5), ("optimizer", t5, t6)):
                t[k] += z - a
        return dict(t)

    loader = dm.train_dataloader()
    loader.sampler.set_epoch(0)
    drawn = []
    _, loss0, _ = fresh()
    for b, rows in zip(range(n), loader):
        drawn.append((rows[:, 0], rows[:, 1], dm.sampler.sample(rows[:, 0], loss0.n_negatives,
                                                                negatives_generator("cpu", 0, 0, b))))

    def bare() -> float:
        # MF with dot scores and the BPR/BCE objective, written out: the floor of a step
        model, loss, opt = fresh()
        user, item = model.user_emb.weight, model.item_emb.weight
        t0 = time.perf_counter()
        for users, items, negs in drawn:
            u = user[users]
            pos = (u * item[items]).sum(-1)
            neg = torch.bmm(item[negs], u.unsqueeze(-1)).squeeze(-1)
            if args.loss == "bpr":
                value = torch.nn.functional.softplus(neg[:, 0] - pos).mean()
            else:
                value = (torch.nn.functional.softplus(-pos) + torch.nn.functional.softplus(neg).sum(-1)).mean()
            value.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def pipeline() -> float:
        # the median of 3 epochs after a first one: an epoch's time without the fit's set-up
        model, loss, _ = fresh()
        module = RankingModule(model, loss, instantiate(cfg.optimizer), seed=0)
        callbacks = [c for c in build_callbacks(cfg) if type(c).__name__ in ("LastCheckpoint", "TimeEstimate")]
        trainer = L.Trainer(max_epochs=4, limit_train_batches=n, limit_val_batches=0, logger=False,
                            callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
                            accelerator="cpu", devices=1, use_distributed_sampler=False, num_sanity_val_steps=0,
                            deterministic="warn", default_root_dir=out)
        trainer.fit(module, datamodule=dm)
        return statistics.median(module.train_epoch_seconds[1:])

    rounds: dict[str, list[float]] = defaultdict(list)
    parts()  # warm-up
    for _ in range(args.rounds):
        for k, v in parts().items():
            rounds[k].append(v)
        rounds["bare"].append(bare())
        rounds["pipeline"].append(pipeline())
    med = {k: statistics.median(v) for k, v in rounds.items()}
    summed = sum(med[k] for k in ("loader", "generator", "sample", "forward", "backward", "optimizer"))
    med["Lightning and the rest"] = med["pipeline"] - summed
    print("\n| part | ms / step | share of the pipeline |\n|---|---|---|")
    for k in ("loader", "generator", "sample", "forward", "backward", "optimizer", "Lightning and the rest",
              "pipeline", "bare"):
        print(f"| {k} | {1000 * med[k] / n:.2f} | {100 * med[k] / med['pipeline']:.0f}% |")
    print(f"\npipeline / bare: {med['pipeline'] / med['bare']:.2f}; parts summed / bare: {summed / med['bare']:.2f}; "
          f"an epoch ≈ {n_epoch * med['pipeline'] / n:.1f} s (pipeline), {n_epoch * med['bare'] / n:.1f} s (bare)")


if __name__ == "__main__":
    main()
