"""The SL@K paper's Figure 3: SL@20's gain over SL as false-positive noise grows.

Reads finished runs (any folders holding them: a run's noise ratio is its
``dataset.noise_ratio=`` override, 0 when absent), groups them by loss and noise ratio,
and writes, for one metric, a table (mean ± 95% CI per loss, SL@20's relative gain over SL and
its paired test over seeds) and a plot of the metric against the ratio with CI bands.

    python benchmarks/noise_study.py RUN_DIRS... [--metric ndcg@20] [--out benchmarks/results/noise/health]

The runs: ``python -m bench +experiment=paper/table2_mf_health loss=sl|slk dataset.noise_ratio=R seed=S``
for R in 0.05 ... 0.20 (R = 0 is the plain Health cell).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.collect import from_directories  # noqa: E402
from bench.report.runs import RunRecord  # noqa: E402
from bench.report.stats import compare, interval  # noqa: E402

LABELS = {"sl": "SL", "slk": "SL@20"}


def noise_ratio(record: RunRecord) -> float:
    """The run's false-positive noise ratio (0 for a run without noise)."""
    given = [o.split("=", 1)[1] for o in record.overrides if o.lstrip("+").startswith("dataset.noise_ratio=")]
    return float(given[-1]) if given else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metric", default="ndcg@20")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/noise/health"))
    args = parser.parse_args()
    records, notes = from_directories(args.runs)
    for note in notes:
        print(note)
    groups: dict[tuple[str, float], list] = defaultdict(list)
    for r in records:
        if r.loss in LABELS:
            groups[(r.loss, noise_ratio(r))].append(r)
    ratios = sorted({ratio for _, ratio in groups})
    lines = [f"| noise ratio | SL {args.metric} | SL@20 {args.metric} | SL@20 vs SL | p (paired seeds) |",
             "|---|---|---|---|---|"]
    bands: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
    for ratio in ratios:
        cells = []
        for loss in LABELS:
            runs = groups.get((loss, ratio), [])
            if runs:
                ci = interval(runs, args.metric)
                bands[loss].append((ratio, ci))
                cells.append(f"{ci['mean']:.4f} ± {ci['ci_half']:.4f} (n={len(runs)})")
            else:
                cells.append("—")
        sl, slk = groups.get(("sl", ratio), []), groups.get(("slk", ratio), [])
        if sl and slk:
            c = compare(slk, sl, args.metric)
            cells += [f"{c.rel_change:+.1%}", f"{c.p_seed_t:.2g}" if c.seeds else "—"]
        else:
            cells += ["—", "—"]
        lines.append(f"| {ratio:.0%} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"figure3_{args.metric.replace('@', '_at_')}.md").write_text(table)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for loss, points in bands.items():
        xs = [100 * p for p, _ in points]
        mean = [ci["mean"] for _, ci in points]
        half = [ci["ci_half"] for _, ci in points]
        ax.plot(xs, mean, marker="o", label=LABELS[loss])
        ax.fill_between(xs, [m - h for m, h in zip(mean, half)], [m + h for m, h in zip(mean, half)], alpha=0.25)
    ax.set_xlabel("false-positive noise ratio (%)")
    ax.set_ylabel(f"test {args.metric}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / f"figure3_{args.metric.replace('@', '_at_')}.png", dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
