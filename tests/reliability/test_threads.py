"""Defect 6: training gave different weights at 1 and 2 CPU threads (and from run to run at 2
threads on a busy machine), so a sweep job of the parallel launcher (cores / jobs threads) was not
comparable with a single run. Runs now use deterministic kernels (``trainer.deterministic=warn``)
and SASRec's blocks avoid the thread-split CPU softmax and LayerNorm backward kernels.
"""

from __future__ import annotations

import pytest
import torch

from bench.run import train_and_test

# big enough that the CPU kernels split their work between 2 threads (index_put accumulation over
# ~200k indices, attention over 50 positions), small enough for a few seconds per run
CF = ["dataset.n_users=1500", "dataset.n_items=2000", "dataset.mean_per_user=20", "trainer.max_epochs=1",
      "trainer.check_val_every_n_epoch=1", "loss.n_negatives=100", "trainer.accelerator=cpu",
      "train.batch_size=512", "logger=none"]
# MF + SL per-pair is the parallel-launcher case below
COMBOS = {
    "mf-slk-shared": [*CF, "model=mf", "loss=slk", "train.negatives=shared"],
    "lightgcn-bsl": [*CF, "model=lightgcn", "loss=bsl", "dataset.n_users=500", "dataset.n_items=700"],
    "sasrec-sl": ["task=seq", "dataset=ml100k-seq", "model=sasrec", "loss=sl", "loss.n_negatives=100",
                  "trainer.max_epochs=1", "trainer.accelerator=cpu", "logger=none"],
}


def _weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def _train(overrides: list[str], threads: int, out, make_cfg):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        res = train_and_test(make_cfg(overrides, out))
    finally:
        torch.set_num_threads(before)
    return res, _weights(out / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_training_is_bit_identical_at_one_and_two_threads(combo, tmp_path, make_cfg, shared_data):
    overrides = COMBOS[combo]
    one, w1 = _train(overrides, 1, tmp_path / "1", make_cfg)
    two, w2 = _train(overrides, 2, tmp_path / "2", make_cfg)
    assert w1.keys() == w2.keys()
    differ = [k for k in w1 if not torch.equal(w1[k], w2[k])]
    assert not differ, f"weights differ between 1 and 2 threads: {differ}"
    assert one.test == two.test


def test_a_parallel_sweep_job_equals_the_single_run(tmp_path, run_cli):
    # two jobs at a time on 2 cores: each job gets 1 thread; the single run uses the default (all cores)
    args = [*CF, "model=mf", "loss=sl", "dataset.n_users=600"]
    sweep = run_cli(["-m", *args, "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "seed=0",
                     "hydra.sweep.dir=sweep"], cwd=tmp_path, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert "uses 1 CPU threads" in (tmp_path / "sweep" / "0" / "bench.log").read_text()
    single = run_cli([*args, "seed=0", "hydra.run.dir=single"], cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    a, b = _weights(tmp_path / "sweep" / "0" / "checkpoints" / "last.ckpt"), \
        _weights(tmp_path / "single" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
