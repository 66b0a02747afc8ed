"""Measure threshold estimators against the exact beta_u^K on a trained run, the way
top-k retrieval measures its threshold estimators (docs/thresholds.md#measuring-estimators);
the command line is ``python -m bench.thresholds``.

For a trained run: every estimator estimates beta for each (sampled) user from one
draw of N negatives, and is judged on overestimate rate (Clopper-Pearson interval),
MUF, effective rank r(b) = #{items with s >= b} (ideal K), mean gap (beta - b) / tau_w and
time per user.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf
from scipy import stats
from torch import Tensor

from bench.analysis.checkpoints import load_model, run_datamodule
from bench.contracts import Scorer, TrainData
from bench.errors import BenchError
from bench.models.base import EmbeddingModel
from bench.records import CHECKPOINT_DIR, RunResult
from bench.sampling import UniformNegativeSampler, make_generator
from bench.thresholds import ESTIMATORS, kth_largest
from bench.thresholds.cached import CachedEstimator
from bench.thresholds.registry import DEFAULT_ESTIMATORS


@dataclass
class StudySetup:
    """What a study needs: a model, optionally the model the cache was built with, the data."""

    model: Scorer
    cache_model: Scorer
    train_data: TrainData
    users: Tensor
    negatives: Tensor
    tau_w: float
    label: str = ""


def load_setup(run_dir: Path, checkpoint: str = "last", cache_from: str = "same", max_users: int = 4096,
               n_negatives: int | None = None, tau_w: float | None = None, seed: int = 0) -> StudySetup:
    """A trained CF run's model (and the cache's model), its training data, a fixed user
    sample and one draw of N negatives per user (uniform, with replacement, as in training)."""
    run_dir = Path(run_dir)
    res = RunResult.read(run_dir)
    if res.task != "cf":
        raise BenchError("the threshold study supports task=cf runs")
    cfg = OmegaConf.create(res.config)
    datamodule = run_datamodule(res)
    splits, train = datamodule.splits, datamodule.train_data

    def model_from(which: str) -> EmbeddingModel:
        path = Path(which) if which not in ("best", "last") else run_dir / CHECKPOINT_DIR / f"{which}.ckpt"
        model = load_model(res, path, train)
        model.eval()
        return model

    model = model_from(checkpoint)
    cache_model = model if cache_from == "same" else model_from(cache_from)
    users = torch.nonzero(splits.train.degrees() > 0).squeeze(1)
    if users.numel() > max_users:
        gen = torch.Generator().manual_seed(seed)
        users = users[torch.randperm(users.numel(), generator=gen)[:max_users]].sort().values
    n = int(n_negatives or (cfg.get("loss") or {}).get("n_negatives", 1000))
    negatives = UniformNegativeSampler(splits.train).sample(users, n, make_generator("cpu", seed, 0, 0, 7))
    tau = float(tau_w or (cfg.get("loss") or {}).get("tau_w", 1.0))
    label = f"{cfg.dataset.name} {cfg.model.name} {cfg.loss.name} seed {cfg.seed}, {checkpoint} checkpoint, " \
            f"cache from {cache_from}, N {n}, {users.numel()} users"
    return StudySetup(model, cache_model, train, users, negatives, tau, label)


def _estimate_all(setup: StudySetup, name: str, k: int, chunk: int, warmup: int) -> tuple[Tensor, float]:
    est = ESTIMATORS.build(name)
    est.bind(setup.train_data)
    if isinstance(est, CachedEstimator):
        est.rebuild(setup.cache_model)
    if warmup and name == "quantile":  # a learned threshold is judged after it has learned
        gen = torch.Generator().manual_seed(1)
        for _ in range(warmup):
            perm = setup.negatives[:, torch.randint(0, setup.negatives.shape[1], (setup.negatives.shape[1],),
                                                    generator=gen)]
            for part, neg in zip(setup.users.split(chunk), perm.split(chunk)):
                est.estimate(setup.model, part, neg, k)
    t0 = time.perf_counter()
    out = [est.estimate(setup.model, part, neg, k) for part, neg in zip(setup.users.split(chunk),
                                                                         setup.negatives.split(chunk))]
    return torch.cat(out).double(), (time.perf_counter() - t0) / setup.users.numel()


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


@torch.no_grad()
def run_study(setup: StudySetup, ks: Sequence[int] = (5, 20, 50, 100), estimators: Sequence[str] = DEFAULT_ESTIMATORS,
              chunk: int = 512, warmup: int = 50) -> tuple[pd.DataFrame, dict[tuple[int, str], np.ndarray]]:
    """Returns (one row per (K, estimator), effective ranks {(K, estimator): (U,) array})."""
    estimates = {(k, name): _estimate_all(setup, name, k, chunk, warmup) for k in ks for name in estimators}
    exact: dict[int, list[Tensor]] = {k: [] for k in ks}
    ranks: dict[tuple[int, str], list[Tensor]] = {key: [] for key in estimates}
    effective: dict[tuple[int, str], np.ndarray] = {}
    for i, part in enumerate(setup.users.split(chunk)):
        scores = setup.model.score_users(part).double()
        sl = slice(i * chunk, i * chunk + part.numel())
        for k in ks:
            exact[k].append(kth_largest(scores, k))
            for name in estimators:
                b = estimates[(k, name)][0][sl]
                ranks[(k, name)].append((scores >= b[:, None]).sum(1))
    rows = []
    for (k, name), (b, sec) in estimates.items():
        beta = torch.cat(exact[k])
        r = torch.cat(ranks[(k, name)]).double().numpy()
        over = b > beta
        n = int(b.numel())
        low, high = clopper_pearson(int(over.sum()), n)
        ok = (~over) & (beta > 0) & torch.isfinite(b)
        finite = torch.isfinite(b) & torch.isfinite(beta)
        rows.append({
            "k": k, "estimator": name, "safe": bool(getattr(ESTIMATORS.get(name), "safe", False)), "users": n,
            "overestimates": int(over.sum()), "overestimate_rate": float(over.float().mean()),
            "overestimate_ci_low": low, "overestimate_ci_high": high,
            # b / beta clipped at 0: a non-positive bound under a positive beta is simply useless
            "muf": float((b[ok] / beta[ok]).clamp(min=0).mean()) if ok.any() else math.nan, "muf_users": int(ok.sum()),
            "effective_rank_median": float(np.median(r)), "effective_rank_p90": float(np.percentile(r, 90)),
            "gap_over_tau_w": float(((beta[finite] - b[finite]) / setup.tau_w).mean()) if finite.any() else math.nan,
            "ms_per_user": 1e3 * sec,
        })
        effective[(k, name)] = r
    return pd.DataFrame(rows), effective


def to_markdown(table: pd.DataFrame, label: str) -> str:
    lines = [f"Threshold estimators vs the exact beta_u^K ({label}).", "",
             "| K | estimator | safe | overestimate rate [95% CI] | MUF | median r(b) | p90 r(b) | gap / τ_w "
             "| ms / user |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.k} | {r.estimator} | {'yes' if r.safe else 'no'} | {r.overestimate_rate:.4f} "
                     f"[{r.overestimate_ci_low:.4f}, {r.overestimate_ci_high:.4f}] ({r.overestimates}/{r.users}) | "
                     f"{r.muf:.3f} | {r.effective_rank_median:.0f} | {r.effective_rank_p90:.0f} | "
                     f"{r.gap_over_tau_w:.3f} | {r.ms_per_user:.3f} |")
    lines += ["", "r(b) = #{items with s >= b} (ideal K); MUF = mean max(0, b / beta) over users with beta > 0 and "
              "no overestimate (1 is ideal); gap in units of the SL@K weight temperature."]
    return "\n".join(lines) + "\n"


def plot_ranks(ranks: dict, ks, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(name for _, name in ranks))
    fig, axes = plt.subplots(1, len(ks), figsize=(4 * len(ks), 4), squeeze=False)
    for ax, k in zip(axes[0], ks):
        ax.boxplot([np.maximum(ranks[(k, n)], 1) for n in names], showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.axhline(k, color="k", lw=0.8, ls="--")
        ax.set(title=f"K = {k}", ylabel="effective rank r(b)")
    fig.tight_layout()
    paths = [out / "effective_ranks.png", out / "effective_ranks.svg"]
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)
    return paths
