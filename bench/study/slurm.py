"""A study's lanes on a SLURM cluster (``python -m bench.study <name> run --launcher slurm``).

Each run of the plan becomes one SLURM task that does what a local lane does with it
(:func:`bench.resumable.finish_run`): keep a completed run, resume an interrupted one from its
``last.ckpt``, or start it. The submitting process writes every completed run into its row's ledger
(one writer: a ledger's lock need not work across the nodes' shared file system), including runs that
completed while no submitter was waiting (a rerun finds them in their folders and submits nothing for
them). The runs that can start are submitted together as one array job; each that ends may settle more
(a tuning grid's last trial lets the row's reported runs start), which go out as the next array. A task
that reaches its time limit is requeued (up to ``max_num_timeout`` times) and resumes from its checkpoint.

The cluster fields are those of a sweep's ``hydra/launcher=slurm`` (``conf/hydra/launcher/slurm.yaml``:
``partition``, ``account``, ``timeout_min``, ``cpus_per_task``, ``gpus_per_node``, ``mem_gb``,
``setup``...), given as ``--slurm KEY=VALUE ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.records.lock import holder_alive
from bench.resumable import finish_run, holds_completed
from bench.study.lanes import record_finished, say_elsewhere
from bench.study.plan import FINAL, Job, plan
from bench.study.spec import Study

#: fields that are the executor's, not sbatch's
_EXECUTOR_KEYS = ("max_num_timeout",)


def launcher_settings(given: Sequence[str]) -> dict[str, Any]:
    """The ``hydra/launcher=slurm`` config with ``given`` (``KEY=VALUE`` or ``hydra.launcher.KEY=VALUE``)
    applied: the fields and defaults a sweep on SLURM has, ``_target_`` and the sweep's folder left out."""
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf  # noqa: F401
    except ImportError as exc:
        raise BenchError('--launcher slurm needs the SLURM plugin: pip install -e ".[slurm]"') from exc
    from omegaconf import OmegaConf

    from bench.composition import CONFIG_DIR

    def launcher(overrides: list[str]) -> dict[str, Any]:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
                cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", *overrides],
                              return_hydra_config=True)
        finally:
            GlobalHydra.instance().clear()
        fields = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
        assert isinstance(fields, dict)
        # the job name is the sweep's (${hydra.job.name}); run_slurm names its tasks after the study
        return {str(k): v for k, v in fields.items() if k not in ("_target_", "submitit_folder")
                and not (isinstance(v, str) and v.startswith("${"))}

    defaults = launcher([])
    overrides = []
    for item in given:
        key, sep, value = item.partition("=")
        key = key.removeprefix("hydra.launcher.")
        if not sep or key not in defaults:
            raise BenchError(f"--slurm {item}: give KEY=VALUE with a field of conf/hydra/launcher/slurm.yaml "
                             f"({', '.join(defaults)})")
        overrides.append(f"hydra.launcher.{key}={value}")
    try:
        return launcher(overrides)
    except Exception as exc:  # a value of the wrong type: Hydra's reason is the cause's
        reason = str(exc.__cause__ or exc).strip().splitlines()[0].rstrip(".")
        raise BenchError(f"--slurm {' '.join(given)}: {reason}") from exc


def slurm_executor(folder: Path, settings: Mapping[str, Any]) -> Any:
    """A submitit executor for SLURM with ``settings`` (from :func:`launcher_settings`), mapped to
    submitit's names as Hydra's submitit launcher maps them (sbatch fields other than the common ones
    take a ``slurm_`` prefix)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    common = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm",
                                     **{f"slurm_{k}": settings[k] for k in _EXECUTOR_KEYS if k in settings})
    executor.update_parameters(**{(k if k in common else f"slurm_{k}"): v for k, v in settings.items()
                                  if k not in _EXECUTOR_KEYS})
    return executor


@dataclass
class StudyTask:
    """One run of a study as a SLURM task: its folder made to hold a completed run. Requeued at the time
    limit (``checkpoint``), it is called again and resumes the run from its ``last.ckpt``."""

    folder: Path
    overrides: tuple[str, ...]
    env: dict[str, str]

    def __call__(self) -> str:
        return finish_run(self.folder, list(self.overrides), None, self.env)

    def checkpoint(self) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self)


def run_slurm(study: Study, runs: Path, settings: Sequence[str] = (), stages: tuple[str, ...] = ("tune", FINAL),
              tables: list[str] | None = None, rows: list[str] | None = None,
              say: Callable[[str], None] = print, poll_s: float = 2.0) -> int:
    """Run what the plan offers as SLURM tasks until nothing is left that can start (see the module).
    ``settings``: ``KEY=VALUE`` fields of ``conf/hydra/launcher/slurm.yaml``. Returns the runs submitted."""
    fields = {"name": f"study-{study.name}", **launcher_settings(settings)}
    executor = slurm_executor(runs / ".submitit" / "%j", fields)
    env = {"OMP_NUM_THREADS": str(fields.get("cpus_per_task") or 1)}

    def record(job: Job) -> bool:
        """Write the job's completed run into its ledger, here; False when its folder holds none."""
        if not holds_completed(job.folder, job.overrides):
            return False
        record_finished(study, job.folder, job.ledger, job.one_setting)
        return True

    submitted: set[Path] = set()
    elsewhere: dict[Path, Job] = {}
    running: dict[Any, Job] = {}
    while True:
        blocked: list[str] = []
        new, recorded = [], False
        for job in plan(study, runs, stages, tables, rows, blocked):
            if job.folder in submitted:
                continue
            if holder_alive(job.folder):  # another runner's
                elsewhere[job.folder] = job
                continue
            submitted.add(job.folder)
            if record(job):  # completed while no submitter waited for it
                say(f"recorded {job.table} {job.row} {job.stage} seed {job.seed}: {job.folder}")
                recorded = True
            else:
                new.append(job)
        if new:
            with executor.batch():  # one array job
                tasks = [executor.submit(StudyTask(j.folder, j.overrides, env)) for j in new]
            for task, job in zip(tasks, new, strict=True):
                running[task] = job
                say(f"submitted {job.table} {job.row} {job.stage} seed {job.seed}: SLURM job {task.job_id}, "
                    f"{job.folder}")
        if recorded and not new:
            continue  # what was recorded may let more runs start
        if not running:
            say_elsewhere(elsewhere, say)
            for why in dict.fromkeys(blocked):
                say(f"waiting: {why}")
            return len(submitted)
        while not any(task.done() for task in running):
            time.sleep(poll_s)
        for task in [t for t in running if t.done()]:
            job = running.pop(task)
            try:
                what = task.result()
            except Exception as exc:  # cancelled, killed, out of requeues: the others go on
                what = f"ended without a result ({str(exc).strip().splitlines()[0][:200]})"
            what += ", recorded" if record(job) else ", not completed"
            say(f"{what} {job.table} {job.row} {job.stage} seed {job.seed}: SLURM job {task.job_id}")
