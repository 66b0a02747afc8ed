"""The ``python -m bench`` command line (a Hydra app)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench.composition import CONFIG_DIR, compose, recompose_run, supersede
from bench.console import configure as configure_console
from bench.distributed import process_rank
from bench.errors import BenchError, find_user_error
from bench.evaluation.per_edge import format_per_edge
from bench.evaluation.sampled import format_sampled
from bench.experiments import apply_per_loss
from bench.records import CHECKPOINT_DIR, RESULTS_FILE, RunResult, override_key
from bench.records.folder import RunLog, log_other_rank, write_command_record
from bench.resumable import override_value
from bench.run import NothingToResume, format_metrics_table, train_and_test

log = logging.getLogger("bench")

__all__ = ["CONFIG_DIR", "compose", "main", "run_job"]


def _resume_target(run_dir: str, extra: list[str]) -> tuple[DictConfig, Path, list[str]]:
    """The config of the run in ``run_dir``, rebuilt for that folder (wherever it is now), its
    last checkpoint, and the overrides to record (the run's own plus the extending ones)."""
    path = Path(run_dir).expanduser().resolve()
    last = path / CHECKPOINT_DIR / "last.ckpt"
    if not (path / RESULTS_FILE).is_file():
        raise BenchError(f"cannot resume {path}: no {RESULTS_FILE} there; pass the output directory of a run")
    if not last.is_file():
        raise BenchError(f"cannot resume {path}: no {CHECKPOINT_DIR}/last.ckpt (the run ended before its first "
                         "epoch); start it again instead")
    res = RunResult.read(path)
    cfg = recompose_run(res, path, extra)
    if extra:
        log.info("resume applies %s", " ".join(extra))
    return cfg, last, supersede(res.overrides, extra)


def run_job(cfg: DictConfig) -> RunResult | None:
    """Run one job; user errors become one-line messages, failures are recorded in the run's own
    ``results.json`` (never in a folder the job was refused).

    In a multirun, a failed job is recorded and the sweep goes on (the seed summary lists it); in
    a single run, a user error exits with status 2.
    """
    configure_console(bool(OmegaConf.select(cfg, "log.verbose", default=False)))
    hydra_on = HydraConfig.initialized()
    multirun = hydra_on and HydraConfig.get().mode == RunMode.MULTIRUN
    overrides = list(HydraConfig.get().overrides.task) if hydra_on else []
    rank_zero = process_rank() == 0
    run_log = RunLog() if hydra_on and rank_zero else None
    if hydra_on and not rank_zero:  # DDP: a rank > 0 logs beside rank 0's bench.log, as Lightning names it
        log_other_rank(Path(cfg.output_dir), HydraConfig.get().job.name)
    resuming = bool(cfg.get("resume"))
    task_cfg = cfg

    def on_owned(folder: Path) -> None:
        if run_log is not None:
            run_log.open(folder)
        if hydra_on and not resuming:  # a resumed run keeps the record of the command that started it
            write_command_record(folder, task_cfg, HydraConfig.get(), overrides)

    try:
        resume_ckpt = None
        if resuming:
            extra = [o for o in overrides if override_key(o) != "resume" and not o.startswith("hydra")]
            cfg, resume_ckpt, overrides = _resume_target(cfg.resume, extra)
            log.info("resuming %s from %s", cfg.output_dir, resume_ckpt)
        else:
            apply_per_loss(cfg, overrides)
        results = train_and_test(cfg, overrides=overrides, resume_checkpoint=resume_ckpt, on_owned=on_owned)
    except NothingToResume as done:
        print(str(done))
        return RunResult.read(Path(cfg.output_dir))
    except Exception as exc:
        user_error = find_user_error(exc)
        if user_error is not None:
            # once on the console: the sweep's job line, or a single run's `error:` (its bench.log keeps it too)
            log.error("%s", user_error, extra={"console": multirun})
            if multirun:
                return None
            print(f"error: {user_error}", file=sys.stderr)
            sys.exit(2)
        if multirun:
            log.exception("job failed: %s", exc)
            return None
        raise
    finally:
        if run_log is not None:
            run_log.close()
    if process_rank() != 0:  # DDP: one report, from rank 0
        return results
    ks = list(cfg.eval.ks)
    queries = "lists" if "fold" in results.data else "users"  # task=ltr evaluates ranked lists
    print(f"\nTest metrics ({results.data['test_users']} {queries}; best validation epoch {results.best['epoch']}):")
    print(format_metrics_table(results.test, ks))
    if results.per_edge:  # link prediction's second protocol
        print(format_per_edge(results.per_edge, ks))
    if results.sampled:  # the biased sampled protocol, after and apart from the full ranking
        print(format_sampled(results.sampled, ks))
    print(f"results: {Path(cfg.output_dir).resolve() / RESULTS_FILE}")
    return results


def resume_in_place(argv: list[str]) -> list[str]:
    """``argv`` with a ``resume=DIR`` run's Hydra job in DIR itself, instead of a new
    ``outputs/<date>/<time>-<µs>/`` folder that Hydra would create; DIR's ``.hydra/`` record of the
    original command is kept (``hydra.output_subdir=null``). ``resume=DIR/results.json`` means DIR.

    Raises:
        BenchError: DIR is no folder (nothing is created for it).
    """
    at = next((i for i, a in enumerate(argv) if i and a.startswith("resume=")), None)
    if at is None or argv[at] == "resume=null":
        return list(argv)
    target = _override_value_text(argv[at])
    if target is None:  # a sweep of folders: each job resumes its own, in its own folder
        return list(argv)
    if not target:
        raise BenchError("resume= needs a run folder (resume=outputs/<date>/<time>-<µs>), or resume=null for none")
    path = Path(target).expanduser()
    if path.name == RESULTS_FILE and path.is_file():
        path = path.parent
    if not path.is_dir():
        raise BenchError(f"resume={target}: no such run folder; pass the output folder of a run (the one that holds "
                         f"{RESULTS_FILE})")
    argv = [*argv[:at], f"resume={override_value(path)}", *argv[at + 1:]]
    if any(a.startswith(("hydra.run.dir=", "hydra.output_subdir=")) for a in argv):
        return argv
    return [*argv, f"hydra.run.dir={override_value(path)}", "hydra.output_subdir=null"]


def _override_value_text(override: str) -> str | None:
    """The value of ``key=value`` as Hydra reads it (quotes of a folder named like an override removed)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(override)
    except Exception:
        return override.split("=", 1)[1]
    if parsed.is_sweep_override():
        return None
    value = parsed.value()
    return "" if value is None else str(value)


#: Hydra settings that would write into the run folder before the run knows it is its own
#: (bench writes .hydra/ and bench.log itself once it is: bench/records/folder.py)
EARLY_WRITERS = {"hydra.output_subdir": "bench writes .hydra/ itself once the folder is the run's",
                 "hydra/job_logging": "bench writes bench.log itself once the folder is the run's"}


#: Hydra plugins that come with an extra (not every user tunes or has a cluster): group -> (plugin module, extra)
PLUGIN_EXTRAS = {"hydra/launcher=slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm")}


def check_extras(arg: str) -> None:
    """Refuse a sweeper or launcher whose plugin is not installed, naming the extra that brings it."""
    import importlib.util

    key, _, value = arg.lstrip("+~").partition("=")
    for setting, (module, extra) in PLUGIN_EXTRAS.items():
        if setting not in (key, f"{key}={value}") or value in ("basic", "null"):
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # not even the hydra_plugins namespace
            found = False
        if not found:
            raise BenchError(f"{arg} needs the {module.rsplit('.', 1)[-1].replace('_', '-')} plugin: "
                             f"pip install -e \".[{extra}]\" (or pip install \"bench[{extra}]\")")


def check_hydra_settings(argv: list[str]) -> None:
    """Refuse Hydra settings that would write into a run folder before the run has locked it, and
    sweepers or launchers whose optional plugin is missing.

    Raises:
        BenchError: naming the setting.
    """
    multirun = any(a in ("-m", "--multirun") for a in argv[1:])
    for arg in argv[1:]:
        check_extras(arg)
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "hydra/sweeper":  # Hydra's Optuna sweeper pinned Optuna 2.10: tuning has its own command
            raise BenchError(f"{arg}: tuning is python -m bench.tune <search> [overrides] (searches in conf/search/, "
                             f"e.g. python -m bench.tune paper_{value.rsplit('_', 1)[-1] if '_' in value else 'sl'} "
                             "dataset=health); pip install -e \".[tune]\" for Optuna")
        if key == "hydra.output_subdir" and value not in ("null", ""):
            raise BenchError(f"{arg}: {EARLY_WRITERS[key]}, after checking the folder is free; drop this setting")
        if (key == "hydra/job_logging" and value not in ("bench", "disabled", "none", "stdout")) or \
                key.startswith("hydra.job_logging"):
            raise BenchError(f"{arg}: a log file would be opened before the run knows the folder is its own; "
                             f"{EARLY_WRITERS['hydra/job_logging']} (hydra/job_logging=stdout or disabled change the "
                             "console only)")
        if key == "hydra.run.dir" and not multirun:
            _check_folder_can_be(value, "hydra.run.dir")
        if key == "hydra.sweep.dir" and multirun:
            _check_folder_can_be(value, "hydra.sweep.dir")
            if (Path(value).expanduser() / RESULTS_FILE).is_file():
                raise BenchError(f"hydra.sweep.dir={value} is a run's folder; a sweep writes its jobs' folders and "
                                 "summary into its own: choose another hydra.sweep.dir")
        if key == "hydra.sweep.subdir" and value.strip(" /.'\"") == "":
            raise BenchError(f"{arg}: every job would write into the sweep's own folder; keep a subfolder per job "
                             "(the default: hydra.sweep.subdir='${hydra.job.num}')")


def _check_folder_can_be(value: str, key: str) -> None:
    """A folder Hydra is about to make: not an existing file, and under a folder that can be written."""
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise BenchError(f"{key}={value} is a file; choose a folder")
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    try:  # a folder made and removed at once where Hydra will make it: a failure is one line here
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".bench-check-"))
    except OSError as exc:
        raise BenchError(f"{key}={value}: cannot make a folder under {existing} ({exc.strerror or exc}); choose a "
                         "place you can write") from None


def multirun_flag_first(argv: list[str]) -> list[str]:
    """``argv`` with ``-m``/``--multirun`` moved before the overrides.

    Hydra's argument parser takes the overrides as one positional list, so a flag between
    two overrides (``loss=slk -m seed=0,1``) would otherwise be an error.
    """
    flags = [a for a in argv[1:] if a in ("-m", "--multirun")]
    if not flags:
        return list(argv)
    return [argv[0], flags[0], *[a for a in argv[1:] if a not in ("-m", "--multirun")]]


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> float | None:
    """One job; returns its best validation score (``train.monitor``), the objective of
    sweepers such as Optuna; test metrics never leave ``results.json``."""
    results = run_job(cfg)
    return results.best_val if results else None
