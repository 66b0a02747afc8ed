"""Learning to rank: seconds per training epoch and per evaluation pass, per scorer and loss.

One LETOR fold (MQ2008 fold 1 by default): an epoch is every training list with two grades, in
batches of ``--batch`` lists (forward, the loss's list form, backward, Adam step); an evaluation
scores and ranks every validation list (graded metrics under ``expected`` ties). Configurations
are timed round-robin and the median of ``--rounds`` kept, so a busy machine slows all alike.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_ltr.py [--dataset mq2008] [--fold 1]
        [--rounds 3] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from bench.datasets.letor import LetorDataset
from bench.losses import build as build_loss
from bench.models import build as build_model
from bench.tasks.ltr import LtrDataModule

#: (label, model settings); the narrowed transformer is +experiment=ltr/mq2008's
SCORERS = [
    ("linear", {"name": "linear"}),
    ("mlp", {"name": "mlp"}),
    ("transformer (allRank's size)", {"name": "transformer"}),
    ("transformer (64 x 2 blocks)", {"name": "transformer", "dim": 64, "layers": 2, "heads": 2, "ffn_dim": 128}),
]
LOSSES = [("sl", {"tau": 1.0}), ("slk", {"k": 5, "tau_d": 1.0, "tau_w": 2.5}), ("lambdalossk", {"k": 5}),
          ("neuralndcg", {})]


def epoch_seconds(model: torch.nn.Module, loss: torch.nn.Module, dm: LtrDataModule, batch: int) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    start = time.perf_counter()
    for queries in dm.train_queries.split(batch):
        features, labels, mask = dm.train_lists.batch(queries)
        value = loss.list_loss(model(features, mask), labels, mask, generator=torch.Generator().manual_seed(0))
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    return time.perf_counter() - start


def eval_seconds(model: torch.nn.Module, dm: LtrDataModule) -> float:
    model.eval()
    start = time.perf_counter()
    dm.val_evaluator.evaluate(model)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="mq2008")
    parser.add_argument("--fold", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = LetorDataset(args.dataset, fold=args.fold, data_dir=os.environ.get("BENCH_DATA_DIR"),
                        standardize=True).load()
    dm = LtrDataModule(data, seed=0, batch_size=args.batch)
    print(f"{args.dataset} fold {args.fold}: {dm.train_queries.numel()} training lists with two grades, "
          f"{dm.val_evaluator.users.numel()} validation lists; {torch.get_num_threads()} thread(s)")
    cells = [(s, loss) for s in SCORERS for loss in LOSSES if s[0].startswith("transformer (64") or loss[0] == "sl"]
    times: dict[tuple[str, str], list[float]] = {(s[0], loss[0]): [] for s, loss in cells}
    evals: dict[str, list[float]] = {s[0]: [] for s in SCORERS}
    for _ in range(args.rounds):
        for (label, spec), (loss_name, kwargs) in cells:
            model = build_model(n_features=dm.splits.n_features, **spec)
            times[(label, loss_name)].append(epoch_seconds(model, build_loss(loss_name, **kwargs), dm, args.batch))
            if loss_name == "sl":
                evals[label].append(eval_seconds(model, dm))
    print("| scorer | loss | s / epoch | s / validation |")
    print("|---|---|---|---|")
    for (label, loss_name), values in times.items():
        ev = f"{statistics.median(evals[label]):.3f}" if loss_name == "sl" else ""
        print(f"| {label} | {loss_name} | {statistics.median(values):.2f} | {ev} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
