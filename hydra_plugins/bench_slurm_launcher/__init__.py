"""``hydra/launcher=slurm``: Hydra's submitit launcher, with two changes.

- A job that reaches its time limit (``timeout_min``; SLURM signals it ``signal_delay_s`` before)
  or is preempted is requeued as a *resume* of its own run folder from ``last.ckpt`` (written after
  every epoch), so it ends with the digits of an uncut run; Hydra's plugin would requeue it to start
  over. Up to ``max_num_timeout`` times.
- One job ending without a result (cancelled with ``scancel``, killed by the node, out of requeues)
  no longer aborts the sweep with a traceback while the others' results sit on disk: that job returns
  as failed, the sweep finishes and its seed summary names what is missing (``bench.sweep``).

It lives here, not in ``bench/``, because Hydra instantiates launchers only from ``hydra_plugins``.
Without the ``[slurm]`` extra this module defines nothing (``python -m bench`` names the extra).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from hydra.core.utils import JobReturn, JobStatus

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:  # pragma: no cover - the [slurm] extra is not installed
    SlurmLauncher = None

log = logging.getLogger(__name__)

if SlurmLauncher is not None:

    class TolerantSlurmLauncher(SlurmLauncher):
        """The submitit SLURM launcher whose jobs without a result come back as failed ``JobReturn`` s."""

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            import submitit
            from submitit.core.utils import UncompletedJobError

            original = submitit.core.core.Job.results

            def results(job: Any) -> list[Any]:
                try:
                    return list(original(job))
                except UncompletedJobError as exc:
                    reason = str(exc).splitlines()[0]
                    log.error("SLURM job %s ended without a result: %s", job.job_id, reason)
                    # as bench's own jobs do in a sweep: the failure is on record (the log, the job's
                    # folder, the seed summary) and the sweep goes on; Hydra's sweeper would raise on FAILED
                    ended = JobReturn()
                    ended.status = JobStatus.COMPLETED
                    ended._return_value = None
                    return [ended]

            # the plugin waits with `[j.results()[0] for j in jobs]`: each job's wait goes through ours
            with mock.patch.object(submitit.core.core.Job, "results", results):
                return super().launch(job_overrides, initial_job_idx)

        def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
            """What submitit requeues when SLURM signals the time limit or a preemption (called in the
            job, while it runs): this job again as ``resume=<its run folder>``, which continues from the
            folder's ``last.ckpt`` with the run's recorded overrides; before its first epoch has ended
            (no ``last.ckpt`` yet), this job as it was, which starts the run over in the same folder."""
            import submitit
            from hydra.core.hydra_config import HydraConfig

            from bench.records.layout import CHECKPOINT_DIR
            from bench.resumable import override_value

            # a signal before the job has set up its run (no Hydra config yet, or the submitter's, without
            # this job's output folder) requeues it as it was
            try:
                folder: Path | None = Path(HydraConfig.get().runtime.output_dir)
            except Exception:  # noqa: BLE001 - any state of a half-set-up job: start it again
                folder = None
            if folder is not None and (folder / CHECKPOINT_DIR / "last.ckpt").is_file():
                log.warning("time limit or preemption: requeued to resume %s from its last checkpoint", folder)
                sweep_overrides = [f"resume={override_value(folder)}"]
            else:
                log.warning("time limit or preemption before a first checkpoint: requeued to start again")
            return submitit.helpers.DelayedSubmission(self, sweep_overrides, *args, **kwargs)
