"""A sweep: its jobs, checked before any of them starts, and its summary after.

Hydra composes a job's config only when the launcher reaches it, so a job whose overrides do not
compose (``-m loss=slk,sl loss.k=10``: SL has no ``k``) would abort the sweep half-way with an
error that names no job. :func:`check_jobs` composes every job of a basic sweep up front and runs
the checks a run makes before touching its folder (:func:`bench.run.check_settings`), and the
sweep stops before its first job, naming each bad one.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.composition import compose
from bench.loggers import resolve_wandb_mode
from bench.records import COMPLETED, RunResult, find_runs, variant_overrides
from bench.records.layout import SWEEP_ID_ENV
from bench.run import check_settings

log = logging.getLogger(__name__)

#: the sweeper whose jobs are the product of comma lists and ranges (others choose as they go)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: jobs composed up front at most (a bigger grid is checked as it runs)
MAX_CHECKED = 2000


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in launch order, of the multirun ``config`` (the sweep's own config,
    as a Hydra callback gets it); None for a sweeper that picks jobs as it goes (Optuna)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if str(config.hydra.sweeper.get("_target_")) != BASIC_SWEEPER:
        return None
    # the sweeper's own params (a sweeper config's grid) come first, as the basic sweeper puts them
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def jobs_from_command_line(argv: list[str]) -> list[list[str]] | None:
    """The jobs of a ``python -m bench [-m] ...`` command line (one for a single run), each with the
    command's Hydra settings, or None when it names another sweeper or Hydra flags this check does
    not follow (Hydra then reports alone).

    Raises:
        BenchError: an override does not parse (one line, instead of Hydra's grammar page).
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bench.errors import BenchError

    args = argv[1:]
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    if any(a.startswith("-") for a in overrides) or any(a.lstrip("+~").startswith("hydra/sweeper") for a in overrides):
        return None
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception as exc:
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise BenchError(f"{override!r} is no override Hydra can read ({first}); write key=value, quoting "
                             "a value with spaces or brackets ('key=[1,2]', key='a b')") from None
    if not any(a in ("-m", "--multirun") for a in args):
        return [overrides]
    hydra = [a for a in overrides if a.lstrip("+~").startswith("hydra")]
    parsed = parser.parse_overrides([a for a in overrides if a not in hydra])
    return [[*job, *hydra] for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _why(exc: BaseException) -> str:
    """One line for a job's error: a missing option names the options its group has."""
    import re

    from bench.errors import find_user_error

    error = find_user_error(exc) or exc
    text = str(error)
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    options = re.search(r"Available options in '([\w/]+)':\n((?:\t[^\n]*\n?)+)", text)
    if missing and options:
        known = [o.strip() for o in options.group(2).splitlines() if o.strip()]
        group, given = missing.group(1), missing.group(2)
        by_lower = {k.lower(): k for k in known}  # model=LightGCN means lightgcn
        close = difflib.get_close_matches(given.lower(), list(by_lower), n=1)
        hint = f" (did you mean {group}={by_lower[close[0]]}?)" if close else ""
        return f"{group}={given} is not an option of {group}{hint}; choose one of {', '.join(known)}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(line.rstrip(".") for line in lines[:2]) or type(error).__name__


def check_jobs(jobs: list[list[str]]) -> list[str]:
    """One line per job that would fail before training: its overrides do not compose, or a
    setting is out of range. [] when every job may start."""
    from contextlib import nullcontext

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from bench.composition import CONFIG_DIR

    problems = []
    # a job is named by what sets it apart (the swept values), not by the overrides all jobs share
    shared = set.intersection(*(set(j) for j in jobs)) if len(jobs) > 1 else set()
    inside = GlobalHydra.instance().is_initialized()
    with nullcontext() if inside else initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for number, job in enumerate(jobs[:MAX_CHECKED]):
            try:
                cfg: Any = compose([*job, "output_dir=unused"])
                if not cfg.get("resume"):
                    check_settings(cfg, writes=False)  # where a job writes is checked where it runs
            except Exception as exc:
                own = [o for o in job if o not in shared] or job
                problems.append(f"job {number} ({' '.join(own)}): {_why(exc)}")
    return problems


#: set once the command line has checked the sweep's jobs, so the sweep's callback does not again
CHECKED_ENV = "BENCH_SWEEP_CHECKED"


def refuse_bad_jobs(jobs: list[list[str]] | None) -> None:
    """Exit with status 2, naming each bad job, when any job of the sweep would fail before training."""
    import os
    import sys

    if jobs and os.environ.get(CHECKED_ENV) == str(len(jobs)):
        return  # the same jobs, checked by `python -m bench` before Hydra started
    problems = check_jobs(jobs) if jobs else []
    if problems and len(jobs or []) == 1:  # a single run: its error, in one line
        print(f"error: {problems[0].split(': ', 1)[1]}", file=sys.stderr)
        sys.exit(2)
    if problems:
        print(f"error: {len(problems)} of {len(jobs or [])} jobs would fail before training; no job was started:",
              file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)


class SweepCallback(Callback):
    """Hydra callback: before a multirun, check every job (:mod:`bench.sweep`: a job that would not
    compose or has a bad setting stops the sweep before any starts, each one named); after it,
    summarise the runs this sweep ran.

    Runs an earlier sweep left in the folder (a rerun into the same ``hydra.sweep.dir``: their
    jobs were refused) are not summarised as this sweep's: they are named as jobs that did not run.
    Failed jobs are listed (they do not stop the sweep: the task function records them); the
    process then exits with status 1 so that scripts notice.
    """

    def __init__(self) -> None:
        self.sweep_id: str | None = None
        self.jobs: list[list[str]] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.jobs = sweep_jobs(config)
        refuse_bad_jobs(self.jobs)
        # every job records it (os.environ reaches the launcher's worker processes and SLURM jobs)
        self.sweep_id = uuid.uuid4().hex
        os.environ[SWEEP_ID_ENV] = self.sweep_id

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from bench.report.summary import jobs_not_run, write_summary  # pandas and plots: after the runs

        root = Path(config.hydra.sweep.dir)
        runs, notes = find_runs([root])
        for note in notes:
            log.warning("%s", note)
        mine = [r for r in runs if self.sweep_id is None or r.sweep_id == self.sweep_id]
        others = [r for r in runs if r not in mine]
        not_run = jobs_not_run(mine, others, self.jobs)
        # a rerun into a folder an earlier sweep summarised keeps that summary and writes its own beside it
        name = "summary" if not others or not (root / "summary.md").exists() else f"summary-{self.sweep_id or 'rerun'}"
        _, summary, markdown = write_summary(root, runs=mine, not_run=not_run, name=name[:16])
        print(markdown)
        print(f"seed summary: {root / name[:16]}.md and .csv")
        if "wandb" in (config.get("logger") or {}) and len(summary):
            _log_summary_to_wandb(config, mine, summary)
        if "mlflow" in (config.get("logger") or {}) and len(summary):
            _log_summary_to_mlflow(config, summary)
        if "tensorboard" in (config.get("logger") or {}) and len(summary):
            _log_summary_to_tensorboard(config, summary)
        bad = [r for r in mine if r.status != COMPLETED]
        if bad or not_run:
            print(f"{len(bad) + len(not_run)} jobs did not complete or did not run; see the lists above",
                  file=sys.stderr)
            sys.exit(1)


def _configurations(summary: Any) -> Any:
    """(dataset, model, row) and that configuration's rows of the seed summary."""
    return summary.groupby(["dataset", "model", "row"], sort=False)


def _log_summary_to_mlflow(config: DictConfig, summary: Any) -> None:
    """One MLflow run per configuration, tagged ``job_type=summary`` and with its seeds' ``group``:
    the seed summary's fields as metrics (``ndcg20/mean``, ``ndcg20/ci_low``, ...; MLflow's names have
    no ``@``)."""
    from bench.report.summary import wandb_summary_fields

    try:
        import mlflow

        spec = config.logger.mlflow
        uri = spec.get("tracking_uri") or f"file:{Path('mlruns').resolve()}"
        client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(spec.experiment_name)
        experiment = found.experiment_id if found else client.create_experiment(spec.experiment_name)
        for (dataset, model, row), part in _configurations(summary):
            group = f"{dataset}-{model}-{row}"
            run = client.create_run(experiment, run_name=f"summary-{group}",
                                    tags={"job_type": "summary", "group": group, "dataset": str(dataset),
                                          "model": str(model), "sweep_dir": str(config.hydra.sweep.dir)})
            for key, value in wandb_summary_fields(part).items():
                client.log_metric(run.info.run_id, key.replace("@", ""), float(value))
            client.set_terminated(run.info.run_id)
    except Exception as exc:  # the summary files are written already; MLflow is a bonus
        log.warning("could not log the seed summary to MLflow: %s", exc)


def _log_summary_to_tensorboard(config: DictConfig, summary: Any) -> None:
    """The seed summary as TensorBoard scalars under ``<sweep>/tensorboard/summary-<configuration>``
    (``ndcg@20/mean``, ``ndcg@20/ci_low``, ...)."""
    from bench.report.summary import wandb_summary_fields

    try:
        from torch.utils.tensorboard import SummaryWriter

        for (dataset, model, row), part in _configurations(summary):
            folder = Path(str(config.hydra.sweep.dir)) / "tensorboard" / f"summary-{dataset}-{model}-{row}"
            with SummaryWriter(str(folder)) as writer:
                for key, value in wandb_summary_fields(part).items():
                    writer.add_scalar(key, float(value), 0)
    except Exception as exc:
        log.warning("could not log the seed summary to TensorBoard: %s", exc)


def _log_summary_to_wandb(config: DictConfig, runs: list[RunResult], summary: Any) -> None:
    """One ``job_type=summary`` run per configuration, in the W&B group of its seeds: the CI
    table (``seed_summary``) and per-metric fields (``ndcg@20/mean``, ``ndcg@20/ci_low``, ...)."""
    from bench.report.summary import summarize, wandb_summary_fields

    try:
        import wandb

        spec = config.logger.wandb
        mode: Any = resolve_wandb_mode(spec.get("mode", "auto"))[0]
        _, records = summarize(runs)
        by_source = {str(r.run_dir): r for r in runs}
        for (task, dataset, model, row), group in summary.groupby(["task", "dataset", "model", "row"], sort=False):
            members = [by_source[rec.source] for rec in records
                       if (rec.task, rec.dataset, rec.model, rec.label) == (task, dataset, model, row)]
            first = members[0].config
            wb = (first.get("logger") or {}).get("wandb") or {}
            configuration = " ".join([f"{dataset}-{model}-{members[0].loss}", *variant_overrides(members[0].overrides)])
            run_group = wb.get("group") or configuration
            table = group.drop(columns=["row"]).assign(configuration=configuration, group=run_group)
            run = wandb.init(project=spec.project, entity=spec.get("entity"), job_type="summary", group=run_group,
                             name=f"summary-{run_group}", mode=mode, dir=str(config.hydra.sweep.dir), reinit=True,
                             tags=["summary", *[t for t in wb.get("tags", []) if not str(t).startswith("seed")]],
                             config={"configuration": configuration, "dataset": dataset, "model": model,
                                     "loss": members[0].loss, "seeds": sorted(m.seed for m in members),
                                     "sweep_dir": str(config.hydra.sweep.dir)})
            run.log({"seed_summary": wandb.Table(dataframe=table)})
            run.summary.update(wandb_summary_fields(group))
            run.finish()
        if mode == "offline":  # each job named its own run; the summaries (the intervals) are here
            sweep = config.hydra.sweep.dir
            log.warning("W&B logged offline; upload the jobs' runs and the seed summaries (mean, 95%% CI) with: "
                        "wandb sync %s/*/wandb/offline-run-* %s/wandb/offline-run-*", sweep, sweep)
    except Exception as exc:  # the summary files are written already; W&B is a bonus
        log.warning("could not log the seed summary to W&B: %s", exc)
