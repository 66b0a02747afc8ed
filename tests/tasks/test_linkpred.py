"""Link prediction as ranking: each node ranks every node, its training neighbours and itself masked."""

import pytest
import torch

from bench.datasets import Synthetic, SyntheticGraph
from bench.errors import ConfigError
from bench.tasks import LinkPredTask


def test_a_node_is_never_its_own_link_and_its_features_reach_the_backbone():
    graph = SyntheticGraph(n_nodes=80, seed=0).load()
    dm = LinkPredTask(valid_fraction=0.1, test_fraction=0.2, split_seed=0).datamodule(graph, seed=0, ks=(100,))
    splits, n = dm.splits, graph.n_nodes
    assert dm.train_data.node_features is graph.x and dm.train_data.n_users == dm.train_data.n_items == n
    assert dm.train_rows.shape == (splits.train.nnz, 2)  # every training edge, in both directions
    # a scorer that prefers the node itself, then its training and validation neighbours:
    # with those masked at test, the test neighbours are all that is left on top
    dense = lambda csr: csr.dense_rows(torch.arange(n)).float()
    scores = 4 * torch.eye(n) + 3 * dense(splits.train) + 2 * dense(splits.valid) + dense(splits.test)
    got = dm.test_evaluator.evaluate(lambda u: scores[u])
    assert torch.equal(got["ndcg@100"], torch.ones_like(got["ndcg@100"]))
    assert torch.equal(got["hit@100"], torch.ones_like(got["hit@100"]))
    # at validation, the test neighbours are not masked, the node itself still is
    scores = 4 * torch.eye(n) + 3 * dense(splits.train) + dense(splits.valid)
    got = dm.val_evaluator.evaluate(lambda u: scores[u])
    assert torch.equal(got["ndcg@100"], torch.ones_like(got["ndcg@100"]))


def test_linkpred_refuses_interaction_data():
    with pytest.raises(ConfigError, match="task=linkpred needs a graph data set"):
        LinkPredTask().datamodule(Synthetic(n_users=20, n_items=10).load(), seed=0)
