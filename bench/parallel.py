"""Placing the jobs of a parallel local sweep (``hydra/launcher=parallel``, joblib), and the CPU
threads of a SLURM job (``hydra/launcher=slurm``: ``cpus_per_task``).

Each joblib worker is a process running one job at a time; without placement every job
would take GPU 0 and all CPU cores. Job k takes GPU k mod #GPUs, or cores / n_jobs threads; with
the deterministic kernels runs use by default, the thread count does not change the numbers.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


def cpu_count() -> int:
    """The cores this process may run on (its affinity: ``taskset`` and cgroups count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _running(task: Path) -> bool:
    stat = (task / "stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "R"  # the state, after the command name (which may hold ")")


def others_running(readings: int = 5, gap_s: float = 0.02) -> int | None:
    """Threads of other processes running or waiting for a core now: the kernel's count
    (``/proc/loadavg``) less this process's own, the least of a few readings (one reading may catch a
    passing process). Not the load average, which lags by a minute: a run started right after another
    finished would see that one. None without ``/proc``, or when this process may use only some of the
    machine's cores (the count is the whole machine's).
    """
    if cpu_count() != (os.cpu_count() or 1):
        return None
    counts = []
    for reading in range(readings):
        if reading:
            time.sleep(gap_s)
        try:
            total = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
            own = sum(_running(task) for task in Path("/proc/self/task").iterdir())
        except (OSError, ValueError, IndexError):
            return None
        counts.append(max(0, total - own))
    return min(counts)


def oversubscription(others: float | None, cores: int, lanes: int, threads: int) -> str | None:
    """What is wrong when ``lanes`` runs of ``threads`` threads each would share ``cores`` with
    ``others`` threads of other work (:func:`others_running`; None: unknown), else None; callers add
    the remedy.

    A torch run's OpenMP threads wait on each other at every parallel op: when other processes hold the
    cores, one descheduled thread stalls the rest. On 2 cores with 3 other runs, an ML-100K SL@20 epoch
    took 25-57 s at 2 threads against 2.3 s at 1 thread pinned beside one other run."""
    if others is None or threads <= 1 or others + lanes * threads <= cores:
        return None
    return (f"the machine is busy ({others:g} other thread{'s' if others != 1 else ''} running on {cores} cores): "
            f"{lanes} run{'s' if lanes != 1 else ''} of {threads} threads would oversubscribe it and run many times "
            "slower")


def parallel_jobs() -> int:
    """Default concurrency: one job per visible GPU, else half the CPU cores (at least 1)."""
    n_gpus = torch.cuda.device_count()
    return n_gpus if n_gpus else max(1, cpu_count() // 2)


def place_job(job_num: int, n_jobs: int, n_gpus: int, n_cpus: int, devices, accelerator: str):
    """(devices for the Trainer, torch CPU threads) of job ``job_num`` of a sweep run ``n_jobs`` at a time.

    Only a single-device run is placed (``trainer.devices=1``): job k gets GPU k mod n_gpus
    when GPUs are used, else cores / n_jobs threads. Anything else is left as configured
    (None for "unchanged").
    """
    if n_jobs <= 1 or devices != 1:
        return None, None
    if n_gpus > 0 and accelerator in ("auto", "gpu", "cuda"):
        return [job_num % n_gpus], None
    return None, max(1, n_cpus // n_jobs)


def place_current_job(cfg: DictConfig) -> None:
    """Apply :func:`place_job` when this process runs a job of a joblib sweep."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    launcher = hc.launcher
    target = str(launcher.get("_target_", ""))
    slurm_cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if target.endswith("SlurmLauncher") and slurm_cpus:
        # torch would start a thread per core of the node, beside other jobs on the same node (15x slower
        # on an oversubscribed 2-core node); the numbers do not depend on the thread count
        torch.set_num_threads(int(slurm_cpus))
        log.info("SLURM job: %s CPU threads (cpus_per_task)", slurm_cpus)
        return
    if not target.endswith("JoblibLauncher"):
        return
    n_jobs = int(launcher.get("n_jobs") or 1)
    n_jobs = cpu_count() if n_jobs < 0 else n_jobs
    devices, threads = place_job(int(hc.job.num), n_jobs, torch.cuda.device_count(), cpu_count(),
                                 cfg.trainer.get("devices"), str(cfg.trainer.get("accelerator")))
    if devices is not None:
        with open_dict(cfg):
            cfg.trainer.devices = devices
        log.info("parallel sweep: job %d runs on GPU %s", hc.job.num, devices[0])
    if threads is not None:
        torch.set_num_threads(threads)
        log.info("parallel sweep: job %d uses %d CPU threads", hc.job.num, threads)
