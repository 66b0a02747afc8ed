"""kill -9 at each phase of a run, then resume= (issue 13): a run killed in its first epoch has
nothing to resume and says so; killed later (mid-training, during the test, while writing its
final results), it resumes in its folder to the results of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.records import INTERRUPTED, RunResult

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent("""
    import os, signal
    import lightning as L

    class KillAt(L.Callback):
        '''SIGKILL this process at a phase: what `kill -9` does, with no chance to clean up.'''

        def __init__(self, phase, epoch=0):
            self.phase, self.epoch = phase, epoch
            if phase == "results_write":  # the completed record written to its temporary file, not yet renamed
                real = os.replace

                def replace(src, dst):
                    if str(dst).endswith("results.json") and b'"status": "completed"' in open(src, "rb").read():
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(src, dst)

                os.replace = replace

        def _die(self, trainer):
            if trainer.current_epoch == self.epoch:
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, trainer, *args):
            if self.phase == "first_epoch":
                self._die(trainer)

        def on_train_epoch_start(self, trainer, *args):
            if self.phase == "mid_training":
                self._die(trainer)

        def on_test_batch_start(self, trainer, *args):
            if self.phase == "test":
                os.kill(os.getpid(), signal.SIGKILL)
""")


def _bench(args, cwd, extra_path=None):
    env = {**os.environ, "HYDRA_FULL_ERROR": "0",
           "PYTHONPATH": os.pathsep.join(str(p) for p in (REPO, extra_path) if p)}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


SCHEDULE = ["trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2", "logger=csv"]


@pytest.fixture
def schedule(tiny):
    return [*tiny, *SCHEDULE]


@pytest.fixture(scope="module")
def uninterrupted(tiny, tmp_path_factory):
    """The run uninterrupted, once for the module's kill phases."""
    where = tmp_path_factory.mktemp("uninterrupted")
    proc = _bench([*tiny, *SCHEDULE, f"hydra.run.dir={where / 'full'}"], where)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return RunResult.read(where / "full")


def _killed(schedule, tmp_path, phase, epoch=0):
    (tmp_path / "killer.py").write_text(KILLER)
    folder = tmp_path / phase
    proc = _bench([*schedule, f"hydra.run.dir={folder}", "+callbacks.kill._target_=killer.KillAt",
                   f"+callbacks.kill.phase={phase}", f"+callbacks.kill.epoch={epoch}"], tmp_path, tmp_path)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    res = RunResult.read(folder)
    assert res.status == "running" and res.live_status() == INTERRUPTED  # the lock's process is gone
    return folder


def test_killed_in_the_first_epoch_there_is_nothing_to_resume(schedule, tmp_path):
    folder = _killed(schedule, tmp_path, "first_epoch")
    proc = _bench([f"resume={folder}"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no checkpoints/last.ckpt (the run ended before its first epoch); start it again" in proc.stderr


@pytest.mark.parametrize("phase,epoch", [("mid_training", 3), ("test", 0), ("results_write", 0)])
def test_killed_later_it_resumes_to_the_uninterrupted_results(phase, epoch, schedule, uninterrupted, tmp_path):
    folder = _killed(schedule, tmp_path, phase, epoch)
    leftovers = list(folder.glob("*.tmp"))
    assert (phase == "results_write") == bool(leftovers)  # kill -9 leaves the temporary copy
    # the killer is one of the run's recorded overrides: the resume drops it (callbacks may change)
    proc = _bench([f"resume={folder}", "+callbacks.kill=null"], tmp_path, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = RunResult.read(folder)
    assert res.status == "completed" and res.test == uninterrupted.test
    assert res.best["epoch"] == uninterrupted.best["epoch"] and res.history == uninterrupted.history
    assert not (folder / ".lock").exists() and not list(folder.glob("*.tmp"))
