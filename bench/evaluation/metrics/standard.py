"""The five standard metrics (binary relevance, ranks from 1; docs/evaluation.md#metrics).

For user u with held-out set R_u and hits h@K = |top-K ∩ R_u|:
Recall@K = h@K / |R_u|; Precision@K = h@K / K; HitRate@K = [h@K > 0];
MRR@K = 1 / rank of the first hit within K (0 if none);
NDCG@K = DCG@K / IDCG@K, DCG@K = sum over hits at rank r <= K of 1 / log2(r + 1),
IDCG@K = sum_{r=1}^{min(K, |R_u|)} 1 / log2(r + 1).

Under ``eval.ties=expected`` the hits are probabilities; Recall, Precision and NDCG are linear
in them, HitRate and MRR take their closed forms (bench/evaluation/ties.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.evaluation.metrics.ranking import HitStats, ideal_dcg
from bench.evaluation.metrics.registry import METRICS
from bench.evaluation.ties import expected_hit, expected_mrr


@METRICS.register("recall")
def recall(stats: HitStats, k: int) -> Tensor:
    return stats.hits_at(k) / stats.n_relevant


@METRICS.register("ndcg")
def ndcg(stats: HitStats, k: int) -> Tensor:
    return stats.dcg_at(k) / ideal_dcg(stats.n_relevant, k)


@METRICS.register("precision")
def precision(stats: HitStats, k: int) -> Tensor:
    return stats.hits_at(k) / k


@METRICS.register("hit")
def hit(stats: HitStats, k: int) -> Tensor:
    if stats.ties is not None and stats.length:
        return expected_hit(stats.cum_hits, stats.ties, k)
    return (stats.hits_at(k) > 0).to(torch.float64)


@METRICS.register("mrr")
def mrr(stats: HitStats, k: int) -> Tensor:
    if stats.ties is not None and stats.length:
        return expected_mrr(stats.ties, k)
    first = stats.first_hit
    return torch.where(first <= min(k, stats.length), 1.0 / first, torch.zeros_like(first))
