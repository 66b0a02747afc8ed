"""Tasks: link prediction data and splits; every (task, model, loss) combination trains."""

from pathlib import Path

import pytest
import torch

from bench.datasets import Planetoid, SyntheticGraph, split_edges
from bench.errors import ConfigError
from bench.run import train_and_test
from tests.helpers import TINY, make_cfg

CONF = Path(__file__).resolve().parents[1] / "conf"
LOSSES = sorted(p.stem for p in (CONF / "loss").glob("*.yaml"))
TINY_GRAPH = ["dataset=synthetic-graph", "dataset.n_nodes=120", "trainer.max_epochs=1", "trainer.accelerator=cpu",
              "loss.n_negatives=30", "train.batch_size=128", "+trainer.limit_train_batches=2"]


@pytest.mark.parametrize("name,nodes,edges", [("cora", 2708, 5278), ("citeseer", 3327, 4552)])
def test_planetoid_graphs_load_from_the_local_raw_files(shared_data, tmp_path, name, nodes, edges):
    graph = Planetoid(name, data_dir=str(shared_data), cache_dir=str(tmp_path), download=False).load()
    assert graph.n_nodes == nodes and graph.edges.shape == (edges, 2)
    assert (graph.edges[:, 0] < graph.edges[:, 1]).all()


@pytest.mark.parametrize("graph_seed", [0, 1])
def test_edge_split_has_no_leakage_in_either_direction(graph_seed):
    graph = SyntheticGraph(n_nodes=200, seed=graph_seed).load()
    s = split_edges(graph, valid_fraction=0.1, test_fraction=0.2, seed=3)
    train = set(map(tuple, s.train.to_pairs().tolist()))
    for held in (s.valid, s.test):
        for u, v in held.to_pairs().tolist():
            assert (u, v) not in train and (v, u) not in train
    und = lambda csr: {tuple(sorted(p)) for p in csr.to_pairs().tolist()}  # noqa: E731
    assert und(s.train) | und(s.valid) | und(s.test) == set(map(tuple, graph.edges.tolist()))
    assert len(und(s.test)) == round(0.2 * graph.edges.shape[0]) and s.test.nnz == 2 * len(und(s.test))
    assert torch.equal(split_edges(graph, 0.1, 0.2, seed=3).test.indices, s.test.indices)  # fixed by the seed


COMBOS = [("cf", m, loss) for m in ("mf", "lightgcn", "xsimgcl") for loss in LOSSES] + \
         [("linkpred", m, loss) for m in ("gnn", "mf") for loss in LOSSES]


@pytest.mark.parametrize("task,model,loss", COMBOS)
def test_every_task_model_loss_combination_trains(task, model, loss, tmp_path):
    base = [*TINY, "trainer.max_epochs=1", "+trainer.limit_train_batches=2"] if task == "cf" else TINY_GRAPH
    cfg = make_cfg([*base, f"task={task}", f"model={model}", f"loss={loss}", "logger=none"], tmp_path)
    if loss == "slk":
        cfg.loss.diagnostics_users = 16
        cfg.loss.t_beta = 1
    res = train_and_test(cfg)
    assert res["status"] == "completed" and 0 <= res["test"]["ndcg@20"] <= 1


def test_a_model_that_does_not_fit_the_task_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"model=gnn does not fit task=cf; models for this task: lightgcn, mf, xsimgcl"):
        train_and_test(make_cfg([*TINY, "model=gnn"], tmp_path))
    with pytest.raises(ConfigError, match=r"model=sasrec does not fit task=cf; models for this task: lightgcn, mf, xsimgcl"):
        train_and_test(make_cfg([*TINY, "model=sasrec"], tmp_path))
    with pytest.raises(ConfigError, match=r"task=seq needs timestamps; data set 'synthetic' has none"):
        train_and_test(make_cfg([*TINY, "task=seq", "model=sasrec"], tmp_path))
    with pytest.raises(ConfigError, match=r"task=linkpred needs a graph data set"):
        train_and_test(make_cfg([*TINY, "task=linkpred"], tmp_path))


# sequential recommendation -----------------------------------------------------------
def _write_sequences(path, n_users=40, n_items=30, length=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = ["user\titem\ttime"]
    for u in range(n_users):
        items = torch.randperm(n_items, generator=gen)[:length].tolist()
        times = sorted(torch.randint(0, 10_000, (length,), generator=gen).tolist())
        rows += [f"u{u}\ti{i}\t{t}" for i, t in zip(items, times)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_leave_one_out_by_time_on_a_fixture(tmp_path):
    from bench.datasets import CustomFile
    from bench.datasets.sequences import leave_one_out

    f = tmp_path / "s.tsv"
    f.write_text("user\titem\ttime\na\tx\t3\na\ty\t1\na\tz\t2\na\tw\t9\nb\tx\t5\nb\ty\t4\n")
    data = CustomFile(str(f), k_core=1).load()  # users a=0, b=1; items w=0, x=1, y=2, z=3
    splits, seq = leave_one_out(data)
    # a: y(1) z(2) x(3) w(9) -> train y, z; valid x; test w.  b has 2 interactions: all train
    assert seq.items.tolist() == [2, 3, 2, 1] and seq.indptr.tolist() == [0, 2, 4]
    assert seq.valid_item.tolist() == [1, -1]
    assert splits.test.to_pairs().tolist() == [[0, 0]] and splits.valid.to_pairs().tolist() == [[0, 1]]
    # SASRec trains on the next-item pairs a: y -> z and b: y -> x, nothing else
    from bench.losses import TrainData
    from bench.models import SASRec

    model = SASRec(2, 4, dim=8, max_len=3)
    model.bind(TrainData(n_users=2, n_items=4, train=splits.train, n_pairs=0, sequences=seq))
    no_negatives = lambda users: torch.zeros(users.numel(), 2, dtype=torch.long)  # noqa: E731
    batch = model.training_batch(torch.tensor([[0, 0], [1, 0]]), no_negatives)
    assert batch.users.tolist() == [0, 1] and batch.items.tolist() == [3, 1] and batch.pair_ids.tolist() == [1, 3]
    # a user's state at test includes the validation item; at validation it does not (4 = padding)
    assert model._window(seq.indptr[:1], seq.indptr[1:2], seq.valid_item[:1]).tolist() == [[2, 3, 1]]
    assert model._window(seq.indptr[:1], seq.indptr[1:2]).tolist() == [[4, 2, 3]]


def test_sasrec_is_causal():
    from bench.models import SASRec

    torch.manual_seed(0)
    model = SASRec(5, 20, dim=16, max_len=6, layers=2, heads=2).eval()
    window = torch.tensor([[20, 20, 3, 7, 1, 9]])  # left-padded with the padding id
    changed = window.clone()
    changed[0, 4] = 12
    a, b = model.encode_all(window), model.encode_all(changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])  # positions before the change are untouched
    assert not torch.allclose(a[:, 4:], b[:, 4:])
    assert torch.isfinite(a).all()  # padded positions attend to themselves: no NaN


@pytest.mark.parametrize("loss", LOSSES)
def test_sasrec_trains_with_every_loss(loss, tmp_path):
    f = _write_sequences(tmp_path / "seq.tsv")
    cfg = make_cfg(["task=seq", "model=sasrec", f"loss={loss}", "dataset=custom", f"dataset.path={f}",
                    "dataset.k_core=1", "trainer.max_epochs=1", "trainer.accelerator=cpu", "loss.n_negatives=20",
                    "task.users_per_batch=16", "model.max_len=8", "logger=none"], tmp_path)
    if loss == "slk":
        cfg.loss.diagnostics_users = 8
        cfg.loss.t_beta = 1
    res = train_and_test(cfg)
    assert res["status"] == "completed" and res["data"]["test_users"] == 40
