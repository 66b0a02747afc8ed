"""Paper experiment configs: the values of LOSSES.md, overridable, recorded with the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.app import CONFIG_DIR, compose
from bench.errors import ConfigError
from bench.results import read_json
from tests.helpers import TINY, run_cli

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "LOSSES.md"
EXPERIMENTS = sorted((Path(CONFIG_DIR) / "experiment" / "paper").glob("table2_*.yaml"))


def _losses_md() -> str:
    if not REFERENCE.is_file():
        pytest.skip(f"no {REFERENCE}")
    return REFERENCE.read_text()


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in cell.split("/")]


def test_table2_experiments_hold_the_reference_sheet_values():
    text = _losses_md()
    tuned = re.findall(r"^\| (\w+) \| (MF|LightGCN) \| ([\d./]+) \| ([\d./]+) \| ([\d./]+) \|$", text, re.M)
    results = {(m[0], m[1]): m[2:] for m in re.findall(
        r"^\| (MF|LightGCN) \| (BPR|SL|PSL|SL@20) \| ([\d./]+) \| ([\d./]+) \| ([\d./]+) \| ([\d./]+) \|$", text, re.M)}
    assert len(tuned) == 8 and len(EXPERIMENTS) == 8
    for dataset, backbone, sl, psl, slk in tuned:
        exp = f"paper/table2_{backbone.lower()}_{dataset.lower()}"
        column = ["Health", "Electronic", "Gowalla", "Book"].index(dataset)
        for loss, cell, keys in (("sl", sl, ["optimizer.lr", "optimizer.weight_decay", "loss.tau"]),
                                 ("psl", psl, ["optimizer.lr", "optimizer.weight_decay", "loss.tau_star"]),
                                 ("slk", slk, ["optimizer.lr", "optimizer.weight_decay", "loss.tau_d",
                                               "loss.tau_w", "loss.t_beta"])):
            cfg = compose([f"+experiment={exp}", f"loss={loss}", "output_dir=x"])
            assert (cfg.dataset.name, cfg.model.name) == (dataset.lower(), backbone.lower())
            got = [float(_select(cfg, k)) for k in keys]
            assert got == pytest.approx(_numbers(cell)), (exp, loss)
            assert cfg.loss.n_negatives == 1000 and cfg.trainer.max_epochs == 200
            paper_row = results[(backbone, {"sl": "SL", "psl": "PSL", "slk": "SL@20"}[loss])][column]
            assert [cfg.paper["recall@20"], cfg.paper["ndcg@20"]] == pytest.approx(_numbers(paper_row))
            assert "per_loss" not in cfg
        if backbone == "LightGCN":
            assert cfg.model.layers == 2
    bpr = compose(["+experiment=paper/table2_mf_health", "loss=bpr", "output_dir=x"])
    assert (bpr.optimizer.lr, bpr.optimizer.weight_decay) == (0.001, 0.0001)  # "BPR on Health/MF: lr .001, wd 1e-4"
    assert [bpr.paper["recall@20"], bpr.paper["ndcg@20"]] == pytest.approx(_numbers(results[("MF", "BPR")][0]))


def _select(cfg, key):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def test_command_line_wins_and_unknown_losses_fail_clearly():
    cfg = compose(["+experiment=paper/table2_mf_health", "loss=slk", "loss.tau_w=3.0", "optimizer.lr=0.5",
                   "output_dir=x"])
    assert (cfg.loss.tau_w, cfg.loss.t_beta, cfg.optimizer.lr) == (3.0, 5, 0.5)
    with pytest.raises(ConfigError, match=r"settings for loss=bpr, psl, sl, slk, not for loss=bsl"):
        compose(["+experiment=paper/table2_mf_health", "loss=bsl", "output_dir=x"])


def test_a_run_records_the_applied_settings_and_the_paper_values(tmp_path):
    proc = run_cli(["+experiment=paper/table2_mf_health", "dataset=synthetic", "loss=slk", *TINY,
                    "logger=none", "hydra.run.dir=run"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = read_json(tmp_path / "run" / "results.json")
    assert res["config"]["paper"] == {"recall@20": 0.1823, "ndcg@20": 0.139}
    assert (res["config"]["loss"]["tau_w"], res["config"]["loss"]["t_beta"]) == (2.5, 5)
    assert res["config"]["trainer"]["max_epochs"] == 3 and "per_loss" not in res["config"]
