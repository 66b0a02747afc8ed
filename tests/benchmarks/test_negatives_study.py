"""The negatives benchmark's table: each loss in both modes, the paired difference and its CI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from bench.errors import ConfigError
from bench.report.runs import RunRecord
from bench.step import negatives_overrides


@pytest.fixture
def script(benchmark_script):
    return benchmark_script("negatives_study")


def _record(tmp_path: Path, loss: str, mode: str | None, seed: int, ndcg: float, fit_s: float,
            groups: int | None = None) -> RunRecord:
    run = tmp_path / f"{loss}-{mode}-{groups}-{seed}"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"timing_s": {"fit": fit_s}}))
    overrides = ["+experiment=paper/table2_mf_health", f"loss={loss}", f"seed={seed}"]
    if mode:
        overrides.append(f"train.negatives={mode}")
    if groups is not None:
        overrides.append(f"train.shared_groups={groups}")
    return RunRecord(source=str(run), task="cf", dataset="health", model="mf", loss=loss, seed=seed,
                     test={"ndcg@20": ndcg, "recall@20": ndcg + 0.05}, overrides=overrides)


def test_table_pairs_the_modes_by_seed(script, tmp_path):
    per_pair = [0.120, 0.125, 0.130]
    shared = [0.121, 0.127, 0.130]  # differences +0.001, +0.002, 0
    records = [_record(tmp_path, "sl", None if s == 0 else "per_pair", s, v, 600.0) for s, v in enumerate(per_pair)]
    records += [_record(tmp_path, "sl", "shared", s, v, 60.0) for s, v in enumerate(shared)]
    lines = script.table(records).splitlines()
    assert len(lines) == 4
    pp, sh = lines[2].split(" | "), lines[3].split(" | ")
    assert pp[:3] == ["| sl", "per_pair", "3"] and sh[:3] == ["| sl", "shared", "3"]
    half = stats.t.ppf(0.975, 2) * stats.tstd([0.001, 0.002, 0.0]) / math.sqrt(3)
    assert sh[5] == f"+0.0010 [{0.001 - half:+.4f}, {0.001 + half:+.4f}] (3 seeds)"
    assert sh[6] == f"{(sum(shared) - sum(per_pair)) / sum(per_pair):+.1%}"
    assert float(sh[7]) == pytest.approx(stats.ttest_rel(shared, per_pair).pvalue, abs=5e-4)
    assert pp[9] == "10.0 |" and sh[9] == "1.0 |"  # fit minutes per run


def test_grouped_draws_are_arms_of_their_own_paired_with_per_pair(script, tmp_path):
    per_pair, shared, grouped = [0.120, 0.125, 0.130], [0.110, 0.115, 0.120], [0.121, 0.124, 0.131]
    records = [_record(tmp_path, "slk", "per_pair", s, v, 60.0) for s, v in enumerate(per_pair)]
    records += [_record(tmp_path, "slk", "shared", s, v, 60.0, groups=1) for s, v in enumerate(shared)]
    records += [_record(tmp_path, "slk", "shared", s, v, 60.0, groups=g) for g in (1024, 8)
                for s, v in enumerate(grouped)]
    lines = script.table(records).splitlines()
    assert [line.split(" | ")[1] for line in lines[2:]] == ["per_pair", "shared", "shared/8", "shared/1024"]
    assert lines[3].split(" | ")[5].startswith("-0.0100 [")  # groups=1 is plain shared
    assert lines[5].split(" | ")[5].startswith("+0.0003 [")  # mean of +0.001, -0.001, +0.001
    assert negatives_overrides("shared/1024") == ["train.negatives=shared", "train.shared_groups=1024"]
    assert negatives_overrides("per_pair") == ["train.negatives=per_pair"]
    for bad in ("per_pair/4", "shared/0", "shared/x", "both"):
        with pytest.raises(ConfigError, match=f"unknown negatives mode '{bad}'; use per_pair, shared or shared/G"):
            negatives_overrides(bad)
    assert script.sweep_dir(tmp_path, "health", "slk", "shared/1024") == tmp_path / "health" / "slk-shared-g1024"
