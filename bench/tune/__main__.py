"""``python -m bench.tune <search> [overrides] [options]``: see :mod:`bench.tune`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.errors import BenchError, one_line_usage_errors


def main(argv: list[str] | None = None) -> int:
    from bench import tune

    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.tune", description=tune.__doc__,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("search", help="a search of conf/search/ (" + ", ".join(tune.known_searches()) + ")")
    parser.add_argument("overrides", nargs="*", help="the runs' overrides (dataset=health loss=slk ...)")
    parser.add_argument("--n-trials", type=int, help="finished trials wanted (default: the search's)")
    parser.add_argument("--workers", type=int, default=1, help="processes drawing trials here (default 1)")
    parser.add_argument("--storage", help="sqlite:///FILE, journal:FILE or an RDB URL (default sqlite:///tuning/"
                                          "<study>.db)")
    parser.add_argument("--study-name", help="default: <dataset>-<model>-<loss>-<search>")
    parser.add_argument("--pruner", default="median", help="median (default) or none")
    parser.add_argument("--root", type=Path, default=Path("tuning"), help="where trial runs go (default tuning/)")
    parser.add_argument("--stale-after", type=int, default=60, metavar="S",
                        help="a trial whose worker sent no heartbeat for S seconds is failed and retried (RDB storage)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each trial's own log lines too")
    args = parser.parse_args(argv)
    import logging

    from bench.console import configure

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="[%(asctime)s] %(message)s",
                        datefmt="%H:%M:%S")
    configure(args.verbose)
    import warnings

    from optuna.exceptions import ExperimentalWarning

    warnings.filterwarnings("ignore", category=ExperimentalWarning)  # heartbeats and the retry callback
    worker = bool(os.environ.get("BENCH_TUNE_WORKER"))
    try:
        from bench.composition import compose
        from bench.tune.run import spawn_workers, work

        search = tune.load_search(args.search)
        if args.n_trials:
            search = tune.Search(search.name, search.sampler, args.n_trials, search.params)
        if args.workers < 1:
            raise BenchError(f"--workers {args.workers}: use 1 or more")
        base = compose([*args.overrides, "output_dir=unused"])
        name = args.study_name or f"{base.dataset.name}-{base.model.name}-{base.loss.name}-{search.name}"
        url = args.storage or f"sqlite:///{args.root / (name + '.db')}"
        root = args.root / name
        others = []
        if args.workers > 1 and not worker:
            worker_argv = list(argv if argv is not None else sys.argv[1:])
            others = spawn_workers([*_without_workers(worker_argv), "--storage", url, "--study-name", name],
                                   args.workers - 1)
        study = work(name, url, search, args.overrides, int(base.seed), args.pruner, root, args.stale_after,
                     int(base.trainer.max_epochs))
        failed = [p.wait() for p in others]
        if any(failed):
            raise BenchError(f"{sum(1 for f in failed if f)} worker(s) failed; rerun the same command to go on")
        if not worker:
            print(summary(study, url))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _without_workers(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--workers":
            skip = True
            continue
        if not a.startswith("--workers="):
            out.append(a)
    return out


def summary(study: object, url: str) -> str:
    """Best value and setting, trials by state, epochs the pruner saved."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)  # type: ignore[attr-defined]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    lines = [f"study {study.study_name} ({url}): {len(done)} completed, {len(pruned)} pruned"]  # type: ignore[attr-defined]
    if done:
        best = study.best_trial  # type: ignore[attr-defined]
        lines.append(f"best validation value {best.value:.4f} (trial {best.number}): "
                     + " ".join(f"{k}={v}" for k, v in best.params.items()))
    epochs = [t.user_attrs.get("epochs") for t in done + pruned]
    if pruned and done and all(isinstance(e, int) for e in epochs):
        full = max(t.user_attrs["epochs"] for t in done)
        lines.append(f"epochs trained: {sum(epochs)} of {full * len(epochs)} without pruning "
                     f"({1 - sum(epochs) / (full * len(epochs)):.0%} saved)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
