"""DDP: per-user evaluation gathered across ranks, per-user loss state shared, one writer."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hydra.utils import instantiate
from omegaconf import OmegaConf

from bench.contracts import TrainData
from bench.datasets import load_dataset, split_validation
from bench.distributed import RANK_VARIABLES, apply_rank_updates, gather_per_user, process_rank, sync_rows
from bench.evaluation import FullRankingEvaluator
from bench.records import read_json, read_per_user


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        # rank r evaluated users r, r + 2, ... (as FullRankingEvaluator.user_chunks(r, 2) shares them)
        users = torch.arange(rank, 9, world)
        users, per_user = gather_per_user(users, {"ndcg@20": users.double() / 10})
        # both ranks wrote beta for user 4 in the same step; rank 1 also for user 7
        beta = torch.zeros(10)
        index = torch.tensor([4, 0]) if rank == 0 else torch.tensor([4, 7])
        beta[index] = torch.tensor([1.0, 2.0]) if rank == 0 else torch.tensor([3.0, 5.0])
        sync_rows(beta, index)
        torch.save({"users": users, "ndcg": per_user["ndcg@20"], "beta": beta}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_collectives_give_every_rank_all_users_and_one_state(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for r in (r0, r1):
        assert r["users"].tolist() == list(range(9))  # the union, ordered by user id
        assert r["ndcg"].tolist() == pytest.approx([u / 10 for u in range(9)])
    assert torch.equal(r0["beta"], r1["beta"])
    assert r0["beta"].tolist() == [2.0, 0, 0, 0, 3.0, 0, 0, 5.0, 0, 0]  # user 4: the higher rank's write


def test_process_rank_is_lightnings_and_before_lightning_the_launchers(monkeypatch):
    """A run decides whether it is rank 0 (the one that locks and writes the folder) before it imports
    Lightning: the launcher's variables then, read as Lightning reads them on import; Lightning's once set."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    for key in RANK_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delattr(rank_zero_only, "rank", raising=False)  # as before Lightning's import
    assert process_rank() == 0
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("LOCAL_RANK", "1")  # SLURM_PROCID is set even where SLURM did not start the ranks
    assert process_rank() == 1
    monkeypatch.setenv("RANK", "3")
    assert process_rank() == 3
    monkeypatch.setattr(rank_zero_only, "rank", 2, raising=False)  # Lightning's strategy set it
    assert process_rank() == 2


def test_rank_updates_apply_in_rank_order():
    buf = torch.zeros(5)
    apply_rank_updates(buf, [(torch.tensor([1, 2]), torch.tensor([1.0, 1.0])),
                             (torch.tensor([2]), torch.tensor([9.0]))])
    assert buf.tolist() == [0, 1, 9, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("loss,model", [("sl", "mf"), ("slk", "mf"), ("sl", "lightgcn")])
def test_ddp_run_on_two_cpu_processes_evaluates_every_user_once(tmp_path, loss, model, tiny, run_cli):
    """The DDP run's per-user test metrics equal a single-process evaluation of its best checkpoint
    (LightGCN: its sparse adjacency is built on every rank, not broadcast)."""
    tiny = [o for o in tiny if not o.startswith("trainer.accelerator")]
    proc = run_cli(["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", f"loss={loss}", "loss.t_beta=1"
                    if loss == "slk" else "loss.tau=0.2", f"model={model}", *tiny, "logger=csv", "hydra.run.dir=run"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Test metrics") == 1  # one report, from rank 0
    res = read_json(tmp_path / "run" / "results.json")
    assert res["status"] == "completed" and res["host"]["pid"]
    cfg = OmegaConf.create(res["config"])
    splits = split_validation(load_dataset(cfg.dataset), 0.1, cfg.seed)
    model = instantiate(cfg.model, n_users=splits.n_users, n_items=splits.n_items)
    state = torch.load(tmp_path / "run" / res["best"]["checkpoint"], weights_only=True)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
    model.bind(TrainData(n_users=splits.n_users, n_items=splits.n_items, train=splits.train, n_pairs=splits.train.nnz))
    model.eval()
    single = FullRankingEvaluator(splits.test, [splits.train, splits.valid], tuple(cfg.eval.ks)).evaluate(
        model.full_scorer())
    users, ddp = read_per_user(tmp_path / "run" / "per_user_test.npz")
    assert users.tolist() == sorted(users.tolist()) and len(users) == res["data"]["test_users"]
    for metric in ("ndcg@20", "recall@20", "mrr@100"):
        np.testing.assert_allclose(ddp[metric], single[metric].numpy(), rtol=0, atol=1e-6)
        assert res["test"][metric] == pytest.approx(float(single[metric].mean()))
