"""How much does SL / SL@K's self term weigh? The size of the negatives' sum it is added to.

SL@K's per-pair term is log Σ_j exp(d_uij / τ_d) over the sampled negatives j; Theorem 3.2 of the
SL@K paper bounds −log DCG@K with the positive's own e^0 = 1 in the sum as well (``self_term=true``).
With Σ = Σ_j exp(d_uij / τ_d), the two differ by log(1 + Σ) − log Σ = log(1 + 1/Σ) in value, and by
the factor Σ / (1 + Σ) in gradient: negligible when Σ ≫ 1, large when Σ < 1 (a positive far above
its negatives). This reads Σ off trained checkpoints, for every training pair of the run:

    python -m bench.analysis.self_term RUN_DIR [RUN_DIR ...] [--negatives 1000] [--out FILE.md]

For each run (a completed SL or SL@K run; τ_d, or SL's τ, from its config), with its best
checkpoint: Σ over the whole catalogue (j ≠ i) and over N uniform draws (the training sample,
N = the run's ``loss.n_negatives``; a draw equal to i is left out), reported as the median and 1st
percentile of Σ, the share of pairs with Σ < 1, and the median and mean of log(1 + 1/Σ).
"""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import torch

from bench.analysis.checkpoints import load_model, run_config, run_datamodule
from bench.records import COMPLETED, RunResult


def normaliser_sums(scores: torch.Tensor, users: torch.Tensor, items: torch.Tensor, tau: float,
                    draws: torch.Tensor | None = None) -> torch.Tensor:
    """log Σ_{j ≠ i} exp((s_uj − s_ui) / τ) per pair.

    Args:
        scores: (n_users, n_items) scores.
        users, items: (P,) the pairs.
        tau: the temperature.
        draws: (P, N) item ids to sum over (repeats count, j = i left out); None: the whole catalogue.
    Returns:
        (P,) float64 log-sums.
    """
    rows = scores[users].double()
    d = (rows - rows.gather(1, items[:, None])) / tau
    if draws is None:
        return torch.logsumexp(d.scatter(1, items[:, None], float("-inf")), 1)
    picked = d.gather(1, draws).masked_fill(draws == items[:, None], float("-inf"))
    return torch.logsumexp(picked, 1)


def summarise(log_sums: torch.Tensor) -> dict[str, float]:
    """Median and 1st percentile of Σ, share of pairs with Σ < 1, median and mean of log(1 + 1/Σ)."""
    shift = torch.log1p(torch.exp(-log_sums))
    return {"median_sum": float(log_sums.exp().median()), "p01_sum": float(log_sums.exp().quantile(0.01)),
            "share_below_1": float((log_sums < 0).double().mean()), "median_shift": float(shift.median()),
            "mean_shift": float(shift.mean()), "median_log_sum": float(log_sums.median())}


def run_rows(run_dir: Path, negatives: int | None, seed: int = 0) -> list[dict[str, object]]:
    res = RunResult.read(run_dir)
    if res.status != COMPLETED or res.best_checkpoint is None:
        raise SystemExit(f"{run_dir}: not a completed run with a best checkpoint")
    cfg = run_config(res)
    tau = float(cfg.loss.get("tau_d", cfg.loss.get("tau", 0)))
    if not tau:
        raise SystemExit(f"{run_dir}: loss {cfg.loss.name} has no softmax temperature (tau_d or tau)")
    datamodule = run_datamodule(res)
    model = load_model(res, res.best_checkpoint, datamodule.train_data, cfg)
    pairs = datamodule.train_data.train.to_pairs()
    users, items = pairs[:, 0], pairs[:, 1]
    with torch.no_grad():
        scores = model.full_scorer("valid")(torch.arange(model.n_users))
    n = negatives or int(cfg.loss.get("n_negatives", 1000))
    draws = torch.randint(0, model.n_items, (len(users), n), generator=torch.Generator().manual_seed(seed))
    label = f"{cfg.dataset.name} {cfg.model.name} {cfg.loss.name} self_term={cfg.loss.get('self_term')} seed {res.seed}"
    return [{"run": label, "sum over": "catalogue", **summarise(normaliser_sums(scores, users, items, tau))},
            {"run": label, "sum over": f"{n} draws", **summarise(normaliser_sums(scores, users, items, tau, draws))}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="completed SL / SL@K run folders")
    parser.add_argument("--negatives", type=int, help="draws per pair (default: the run's loss.n_negatives)")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    rows = [row for run in args.runs for row in run_rows(run, args.negatives)]
    lines = ["| run | sum over | median Σ | 1st percentile Σ | pairs with Σ < 1 | median log(1 + 1/Σ) | "
             "mean log(1 + 1/Σ) | median log Σ |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['sum over']} | {r['median_sum']:.1f} | {r['p01_sum']:.2f} | "
              f"{r['share_below_1']:.2%} | {r['median_shift']:.4f} | {r['mean_shift']:.4f} | "
              f"{r['median_log_sum']:.3f} |" for r in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        runs = " ".join(str(r) for r in args.runs)
        args.out.write_text(f"# The negatives' sum beside SL@K's self term, {date.today()}\n\n"
                            f"`python -m bench.analysis.self_term {runs}`\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
