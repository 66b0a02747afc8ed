"""bench against RecBole, side by side on this machine (issue 48).

Both tools get the same data: bench's own train / validation / test splits of each data set
(the paper's train and test files, the validation share held out as a run with seed 0 holds it
out) written as RecBole atomic files (``<name>.train.inter``, ``.valid.inter``, ``.test.inter``,
read through ``benchmark_filename``). Both train MF with BPR (one uniform negative a pair, batch
1024, d = 64, Adam with the same lr and weight decay, 2 threads) for ``--epochs`` epochs, then rank
every test user against the whole catalogue and compute Recall, NDCG, Precision, Hit and MRR at 5,
10, 20, 50, 100 (the training and validation items masked). Each tool runs in a process of its
own, in its own environment, alternating (bench, RecBole, bench, ...) for ``--rounds`` rounds; the
medians are printed with the cores that other processes kept busy during each measurement.

Measured, per data set:
- training: seconds an epoch (the median of the epochs after the first). bench: a whole epoch of
  ``python -m bench``'s run (Lightning, its callbacks, the checkpoint written after every epoch;
  validation excluded); RecBole: ``Trainer._train_epoch`` (its training loop, data loader and
  negative sampling; it saves a checkpoint only when validating, which is not timed here);
- evaluation: one full-ranking test pass. bench: the run's test loop (the test loop of Lightning,
  the chunked scoring, the tie-exact top-K and the metrics); RecBole: ``Trainer.evaluate`` with
  its default ``eval_batch_size`` (4,096 scores a batch, so one user a batch on these catalogues)
  and with bench's chunk size (``eval.max_scores`` = 16,777,216 scores a batch);
- the test metrics after the same epochs (the same data, the same settings; the initialisations
  and negatives differ, so equal only within training noise);
- start-up: ``python -m bench --help``, ``python -c "import bench.training"`` (what a run imports) and
  ``python -c "import recbole.quick_start"`` (what RecBole's ``run_recbole`` imports), best of
  ``--rounds``.

RecBole is not a dependency of bench. Its environment (RecBole 1.2.1 imports only with numpy < 2,
pandas < 3, scipy < 1.14 and a setuptools that still has ``pkg_resources``)::

    python3.11 -m venv ../recbole-venv
    ../recbole-venv/bin/pip install torch==2.13.0    # the CPU build; any torch bench runs with
    ../recbole-venv/bin/pip install recbole==1.2.1 "numpy==1.26.*" "pandas==2.2.*" "scipy==1.13.*" "setuptools<81"

Then::

    BENCH_DATA_DIR=../shared/data python benchmarks/peer_recbole.py [--datasets health electronic gowalla]
        [--epochs 4] [--rounds 3] [--weight-decay 0] [--recbole-python ../recbole-venv/bin/python] [--readme]

``--readme`` prints the README's table (machine, settings and the command that made it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KS = (5, 10, 20, 50, 100)
#: bench's chunk size (``eval.max_scores``): scores computed at once in a test pass
BENCH_MAX_SCORES = 16_777_216
RECBOLE_DEFAULT_EVAL_BATCH = 4096
HERE = Path(__file__).resolve()


def process_age() -> float:
    """Seconds since this process started (Linux: /proc), i.e. including the interpreter's start and imports."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def busy_cpu_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (/proc/stat, less idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# bench's side (runs in bench's environment)
# ---------------------------------------------------------------------------------------------
def _bench_overrides(dataset: str, args: argparse.Namespace, out: str) -> list[str]:
    # validation only where a run of this length validates anyway: at its last epoch
    return [f"dataset={dataset}", "model=mf", "loss=bpr", "model.dim=64", "train.batch_size=1024",
            f"optimizer.lr={args.lr}", f"optimizer.weight_decay={args.weight_decay}",
            f"trainer.max_epochs={args.epochs}", f"trainer.check_val_every_n_epoch={args.epochs}",
            f"eval.ks=[{','.join(map(str, KS))}]", "logger=none", f"seed={args.seed}", f"output_dir={out}"]


def export_atomic(dataset: str, folder: Path) -> dict[str, int]:
    """bench's splits of ``dataset`` (seed 0's validation) as RecBole atomic files in ``folder/dataset``."""
    from bench.app import compose
    from bench.training import build_datamodule

    dm = build_datamodule(compose([f"dataset={dataset}"]), seed=0)
    splits = dm.splits
    target = folder / dataset
    target.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name in ("train", "valid", "test"):
        pairs = getattr(splits, name).to_pairs().tolist()
        path = target / f"{dataset}.{name}.inter"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write("user_id:token\titem_id:token\n")
            f.writelines(f"u{u}\ti{i}\n" for u, i in pairs)
        tmp.replace(path)
        counts[name] = len(pairs)
    return {**counts, "users": splits.n_users, "items": splits.n_items}


def bench_side(dataset: str, args: argparse.Namespace) -> dict:
    """One run of ``python -m bench``'s pipeline (``bench.run.train_and_test``), timed by a callback."""
    import lightning as L

    from bench.app import compose
    from bench.run import train_and_test

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.epochs: list[float] = []
            self.test_s = self.startup_s = 0.0
            self._start = self._val_start = 0.0
            self._val = 0.0

        def on_train_epoch_start(self, trainer, module) -> None:
            if not self.epochs:
                self.startup_s = process_age()
            self._start, self._val = time.perf_counter(), 0.0

        def on_validation_start(self, trainer, module) -> None:
            self._val_start = time.perf_counter()

        def on_validation_end(self, trainer, module) -> None:
            self._val += time.perf_counter() - self._val_start

        def on_train_epoch_end(self, trainer, module) -> None:
            # after the run's own callbacks' hooks of this epoch (the checkpoint), less validation
            self.epochs.append(time.perf_counter() - self._start - self._val)

        def on_test_start(self, trainer, module) -> None:
            self._test_start = time.perf_counter()

        def on_test_end(self, trainer, module) -> None:
            self.test_s = time.perf_counter() - self._test_start

    out = tempfile.mkdtemp(prefix="bench-peer-")
    clock = Clock()
    result = train_and_test(compose(_bench_overrides(dataset, args, out)), extra_callbacks=[clock])
    return {"epochs_s": clock.epochs, "eval_s": {"bench": clock.test_s}, "startup_s": clock.startup_s,
            "test": {k: float(result.test[k]) for k in (f"{m}@{k}" for m in ("recall", "ndcg") for k in KS)}}


# ---------------------------------------------------------------------------------------------
# RecBole's side (runs in RecBole's environment; imports nothing of bench)
# ---------------------------------------------------------------------------------------------
def recbole_side(dataset: str, args: argparse.Namespace) -> dict:
    import logging

    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.data.dataloader import FullSortEvalDataLoader
    from recbole.model.general_recommender import BPR
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    folder = Path(args.workdir)
    os.chdir(folder)  # RecBole writes log/ and saved/ into the working directory
    config = Config(model="BPR", dataset=dataset, config_dict={
        "data_path": str(folder), "benchmark_filename": ["train", "valid", "test"],
        "load_col": {"inter": ["user_id", "item_id"]}, "USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id",
        "embedding_size": 64, "train_batch_size": 1024, "learning_rate": args.lr, "weight_decay": args.weight_decay,
        "epochs": args.epochs, "train_neg_sample_args": {"distribution": "uniform", "sample_num": 1},
        "metrics": ["Recall", "MRR", "NDCG", "Hit", "Precision"], "topk": list(KS), "valid_metric": "NDCG@20",
        "eval_batch_size": RECBOLE_DEFAULT_EVAL_BATCH, "seed": args.seed, "reproducibility": True,
        "use_gpu": False, "device": "cpu", "show_progress": False, "state": "WARNING",
        "checkpoint_dir": str(folder / "saved"), "log_wandb": False})
    logging.getLogger().setLevel(logging.WARNING)
    init_seed(config["seed"], config["reproducibility"])
    data = create_dataset(config)
    train_data, _, test_data = data_preparation(config, data)
    model = BPR(config, train_data.dataset).to(config["device"])
    trainer = Trainer(config, model)
    startup_s = process_age()
    epochs = []
    for epoch in range(args.epochs):
        t = time.perf_counter()
        trainer._train_epoch(train_data, epoch, show_progress=False)
        epochs.append(time.perf_counter() - t)
    eval_s, results = {}, {}
    loaders = {"recbole default": test_data}
    config["eval_batch_size"] = BENCH_MAX_SCORES  # the same loader at bench's chunk size
    loaders["recbole, bench's chunk size"] = FullSortEvalDataLoader(config, test_data._dataset, test_data._sampler,
                                                                    shuffle=False)
    for name, loader in loaders.items():
        t = time.perf_counter()
        results = trainer.evaluate(loader, load_best_model=False)
        eval_s[name] = time.perf_counter() - t
    return {"epochs_s": epochs, "eval_s": eval_s, "startup_s": startup_s,
            "test": {f"{m}@{k}": float(results[f"{m}@{k}"]) for m in ("recall", "ndcg") for k in KS}}


# ---------------------------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------------------------
def _child(side: str, dataset: str, args: argparse.Namespace, python: str) -> dict:
    out = Path(args.workdir) / f"{side}-{dataset}.json"
    cmd = [python, str(HERE), "--side", side, "--datasets", dataset, "--epochs", str(args.epochs),
           "--lr", str(args.lr), "--weight-decay", str(args.weight_decay), "--seed", str(args.seed),
           "--workdir", str(args.workdir), "--result", str(out)]
    busy, wall = busy_cpu_seconds(), time.perf_counter()
    before = os.times()
    done = subprocess.run(cmd, capture_output=True, text=True)
    after = os.times()
    wall, busy = time.perf_counter() - wall, busy_cpu_seconds() - busy
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"the {side} side failed on {dataset} (exit {done.returncode}):\n{tail}")
    own = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    # the cores that other processes kept busy while this one ran (0 on an idle machine)
    return {**json.loads(out.read_text()), "others_cores": max(busy - own, 0.0) / wall, "wall_s": wall}


def _startup(cmd: list[str], rounds: int) -> tuple[float, float]:
    """Best wall seconds of ``cmd`` over ``rounds``, and the cores other processes used meanwhile."""
    best, busy, t0, before = float("inf"), busy_cpu_seconds(), time.perf_counter(), os.times()
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t)
    after = os.times()
    own = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return best, max(busy_cpu_seconds() - busy - own, 0.0) / (time.perf_counter() - t0)


def _bench_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE.parent)
    return done.stdout.strip() or "(no git)"


def _recbole_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('recbole'))"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _median_epoch(seconds: list[float]) -> float:
    return statistics.median(seconds[1:] if len(seconds) > 1 else seconds)


def compare(args: argparse.Namespace) -> None:
    python = args.recbole_python
    if not Path(python).exists():
        raise SystemExit(f"no RecBole environment at {python}: create it as this script's docstring says "
                         "(python benchmarks/peer_recbole.py --help), or give --recbole-python")
    folder = Path(args.workdir)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {ds: export_atomic(ds, folder) for ds in args.datasets}
    runs: dict[str, dict[str, list[dict]]] = {ds: {"bench": [], "recbole": []} for ds in args.datasets}
    for r in range(args.rounds):
        for ds in args.datasets:
            for side, py in (("bench", sys.executable), ("recbole", python)):
                runs[ds][side].append(_child(side, ds, args, py))
                last = runs[ds][side][-1]
                print(f"round {r + 1}, {ds}, {side}: epochs {' '.join(f'{s:.2f}' for s in last['epochs_s'])} s, "
                      f"test pass {' '.join(f'{s:.2f}' for s in last['eval_s'].values())} s, start-up "
                      f"{last['startup_s']:.1f} s, other processes {last['others_cores']:.2f} cores", flush=True)
    startup = {
        "python -m bench --help": _startup([sys.executable, "-m", "bench", "--help"], args.rounds),
        "import bench.training": _startup([sys.executable, "-c", "import bench.training"], args.rounds),
        "import recbole.quick_start": _startup([python, "-W", "ignore", "-c", "import recbole.quick_start"],
                                               args.rounds),
    }
    from bench.records.provenance import _cpu_model

    med = statistics.median
    print(f"\nMeasured {time.strftime('%Y-%m-%d')} on {_cpu_model()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, bench {_bench_commit()} against RecBole {_recbole_version(python)}, the same "
          f"torch build; {args.rounds} alternating rounds, medians; MF + BPR, d 64, batch 1024, Adam lr {args.lr}, "
          f"weight decay {args.weight_decay}, {args.epochs} epochs, seed {args.seed}; 'others': the cores other "
          "processes kept busy during the measurements (min-max).\n")
    print("| data set | users x items, training pairs | BPR s / epoch: bench | RecBole | bench / RecBole | others |")
    print("|---|---|---|---|---|---|")
    table: dict[str, dict[str, float]] = {}
    for ds in args.datasets:
        b, rb = runs[ds]["bench"], runs[ds]["recbole"]
        others = [x["others_cores"] for x in b + rb]
        t = table[ds] = {
            "bench_epoch": med(_median_epoch(x["epochs_s"]) for x in b),
            "recbole_epoch": med(_median_epoch(x["epochs_s"]) for x in rb),
            "bench_eval": med(x["eval_s"]["bench"] for x in b),
            "recbole_eval": med(x["eval_s"]["recbole default"] for x in rb),
            "recbole_eval_chunk": med(x["eval_s"]["recbole, bench's chunk size"] for x in rb),
            "bench_startup": med(x["startup_s"] for x in b), "recbole_startup": med(x["startup_s"] for x in rb),
            "others": (min(others), max(others))}
        size = sizes[ds]
        print(f"| {ds} | {size['users']:,} x {size['items']:,}, {size['train']:,} | {t['bench_epoch']:.3f} | "
              f"{t['recbole_epoch']:.3f} | {t['bench_epoch'] / t['recbole_epoch']:.2f} | "
              f"{t['others'][0]:.2f}-{t['others'][1]:.2f} |")
    print("\n| data set | test pass s: bench | RecBole, its default eval_batch_size | RecBole, bench's chunk size "
          "| bench / RecBole (default) | bench / RecBole (same chunk) |\n|---|---|---|---|---|---|")
    for ds, t in table.items():
        print(f"| {ds} | {t['bench_eval']:.3f} | {t['recbole_eval']:.3f} | {t['recbole_eval_chunk']:.3f} | "
              f"{t['bench_eval'] / t['recbole_eval']:.2f} | {t['bench_eval'] / t['recbole_eval_chunk']:.2f} |")
    print("\n| start-up | bench s | RecBole s | bench / RecBole | others |\n|---|---|---|---|---|")
    (help_s, o1), (run_s, o2), (rec_s, o3) = startup.values()
    print(f"| the command line: `python -m bench --help` / `import recbole.quick_start` | {help_s:.2f} | {rec_s:.2f} "
          f"| {help_s / rec_s:.2f} | {max(o1, o3):.2f} |")
    print(f"| what a run imports: `import bench.training` / `import recbole.quick_start` | {run_s:.2f} | {rec_s:.2f} "
          f"| {run_s / rec_s:.2f} | {max(o2, o3):.2f} |")
    for ds, t in table.items():
        print(f"| a run on {ds}, process start to its first training step | {t['bench_startup']:.2f} | "
              f"{t['recbole_startup']:.2f} | {t['bench_startup'] / t['recbole_startup']:.2f} | "
              f"{t['others'][1]:.2f} |")
    print(f"\ntest metrics after {args.epochs} epochs (median of the rounds; initialisations and negatives differ):")
    print("| data set | tool | recall@20 | ndcg@20 | ndcg@100 |\n|---|---|---|---|---|")
    for ds in args.datasets:
        for tool, xs in (("bench", runs[ds]["bench"]), ("RecBole", runs[ds]["recbole"])):
            m = {k: med(x["test"][k] for x in xs) for k in ("recall@20", "ndcg@20", "ndcg@100")}
            print(f"| {ds} | {tool} | {m['recall@20']:.4f} | {m['ndcg@20']:.4f} | {m['ndcg@100']:.4f} |")
    if args.readme:
        print(f"\n(made by `BENCH_DATA_DIR=../shared/data python benchmarks/peer_recbole.py --datasets "
              f"{' '.join(args.datasets)} --epochs {args.epochs} --rounds {args.rounds} --weight-decay "
              f"{args.weight_decay}`)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=["health", "electronic", "gowalla"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--weight-decay", type=float, default=0.0,
                        help="Adam's weight decay on both sides (0: RecBole's BPR default; bench's BPR recipe, the "
                        "paper's, is 1e-4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recbole-python", default=os.environ.get("RECBOLE_PYTHON",
                                                                   str(HERE.parents[2] / "recbole-venv/bin/python")))
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "bench-peer-recbole"))
    parser.add_argument("--readme", action="store_true", help="also print the command that made the tables")
    parser.add_argument("--side", choices=["bench", "recbole"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side is None:
        from bench.errors import BenchError

        try:
            compare(args)
        except BenchError as exc:  # e.g. a data file that is not there: its one line
            raise SystemExit(f"error: {exc}") from None
        return
    result = (bench_side if args.side == "bench" else recbole_side)(args.datasets[0], args)
    Path(args.result).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
