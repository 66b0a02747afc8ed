"""bench.report: numbers against hand computations and scipy, outputs that parse."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.collect import from_directories
from bench.records import write_json, write_per_user
from bench.report import from_wandb, make_report
from bench.report.__main__ import main as report_main
from bench.report.stats import adjust, holm

# test NDCG@20 per seed; per-user vectors built so that their mean is this value
SEEDS = {"sl": [0.10, 0.12, 0.11], "slk": [0.13, 0.14, 0.15], "bpr": [0.09, 0.115, 0.10]}
N_USERS = 40


def _per_user(loss: str, seed: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(hash((loss, seed)) % 2**32)
    v = rng.uniform(0, 2 * mean, N_USERS)
    v += mean - v.mean()
    users = np.arange(N_USERS) * 3 + 7  # user ids are not 0..U-1
    perm = rng.permutation(N_USERS)  # nor stored in the same order by every run
    return users[perm], v[perm]


def write_run(root: Path, loss: str, seed: int, ndcg: float, status: str = "completed",
              paper: dict | None = None, overrides: tuple[str, ...] = ()) -> Path:
    d = root / f"{loss}-{seed}-{'-'.join(overrides)}"
    d.mkdir(parents=True)
    users, v = _per_user(loss, seed, ndcg)
    write_per_user(d / "per_user_test.npz", users, {"ndcg@20": v, "recall@20": 2 * v})
    cfg = {"seed": seed, "task": {"name": "cf"}, "dataset": {"name": "toy"}, "model": {"name": "mf"},
           "loss": {"name": loss, **({"k": 20} if loss == "slk" else {})}, **({"paper": paper} if paper else {})}
    history = [{"epoch": e, "val/ndcg@20": ndcg * (1 - 0.5 ** (e + 1))} for e in range(0, 20, 5)]
    test = {"ndcg@20": float(v.mean()), "recall@20": float(2 * v.mean()), "ndcg@5": ndcg / 2, "ndcg@10": ndcg * 0.8}
    write_json(d / "results.json", {"status": status, "overrides": [f"loss={loss}", f"seed={seed}", *overrides],
                                    "config": cfg, "test": test, "history": history,
                                    "per_user_test": "per_user_test.npz"})
    return d


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    for loss, values in SEEDS.items():
        for seed, v in enumerate(values):
            write_run(tmp_path / "sweep", loss, seed, v, paper={"ndcg@20": 0.14} if loss == "slk" else None)
    write_run(tmp_path / "sweep", "psl", 0, 0.2, status="failed")
    return tmp_path / "sweep"


def _row(table: pd.DataFrame, row: str, metric: str = "ndcg@20") -> pd.Series:
    return table[(table["row"] == row) & (table["metric"] == metric)].iloc[0]


def test_seed_statistics_and_paired_tests_match_hand_computations_and_scipy(runs_dir):
    records, notes = from_directories([runs_dir])
    assert len(records) == 9 and any("failed" in n for n in notes)
    rep = make_report(records, ["ndcg@20", "recall@20"], baseline="sl")
    t = rep.table
    sl = _row(t, "sl")
    # [.10, .12, .11]: mean .11, s = .01, half = t(.975, 2) * .01 / sqrt(3) = 4.302653 * .0057735
    assert sl["mean"] == pytest.approx(0.11) and sl["std"] == pytest.approx(0.01)
    assert sl["ci_half"] == pytest.approx(0.0248414, abs=1e-7)
    assert sl["n"] == 3 and sl["seeds"] == "0,1,2"
    slk = _row(t, "slk")
    assert slk["rel_change"] == pytest.approx((0.14 - 0.11) / 0.11)
    assert slk["p_seed_t"] == pytest.approx(stats.ttest_rel(SEEDS["slk"], SEEDS["sl"]).pvalue)
    # per-user: each user's value averaged over the 3 seeds, matched by user id
    def averaged(loss):
        acc = {}
        for s, m in enumerate(SEEDS[loss]):
            for u, v in zip(*_per_user(loss, s, m)):
                acc.setdefault(u, []).append(v)
        return np.array([np.mean(acc[u]) for u in sorted(acc)])
    x, y = averaged("slk"), averaged("sl")
    assert slk["n_users"] == N_USERS
    assert slk["mean_user_diff"] == pytest.approx(np.mean(x - y))
    assert slk["p_user_t"] == pytest.approx(stats.ttest_rel(x, y).pvalue)
    assert slk["p_user_wilcoxon"] == pytest.approx(stats.wilcoxon(x, y).pvalue)
    # Holm over the two non-baseline rows of the table
    bpr = _row(t, "bpr")
    assert [bpr["p_seed_t_adj"], slk["p_seed_t_adj"]] == pytest.approx(holm([bpr["p_seed_t"], slk["p_seed_t"]]))
    assert slk["best"] and not sl["best"] and not bpr["best"]
    assert slk["paper"] == 0.14 and slk["paper_gap"] == pytest.approx(0.0)
    assert math.isnan(sl["rel_change"]) and sl["baseline"] == "sl"


def test_holm_by_hand():
    # sorted .01 .03 .04 -> 3*.01 = .03, 2*.03 = .06, max(.06, 1*.04) = .06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, math.nan, 0.01])[2] == pytest.approx(0.02) and math.isnan(holm([0.5, math.nan])[1])


def test_bh_and_bonferroni_by_hand():
    p = [0.01, 0.04, 0.03, 0.20]
    # BH: sorted .01 .03 .04 .20 -> 4/1*.01 = .04, 4/2*.03 = .06, 4/3*.04 = .0533, 4/4*.2 = .2; then the
    # running minimum from the largest down: .04, .0533, .0533, .2
    assert adjust(p, "bh") == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert adjust(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.80])
    assert adjust([0.4, 0.5], "bonferroni") == [0.8, 1.0]  # capped at 1
    assert adjust(p, "holm") == holm(p) and adjust(p, "none") == p
    mixed = adjust([0.02, math.nan, 0.01], "bh")
    assert mixed[0] == pytest.approx(0.02) and mixed[2] == pytest.approx(0.02) and math.isnan(mixed[1])
    with pytest.raises(ValueError, match="holm, bh, bonferroni, none"):
        adjust(p, "fdr")


def test_markdown_latex_and_csv_outputs_parse(runs_dir, tmp_path):
    from markdown_it import MarkdownIt
    from pylatexenc.latexwalker import LatexEnvironmentNode, LatexWalker

    make_report(from_directories([runs_dir])[0], ["recall@20", "ndcg@20"], baseline="sl",
                out_dir=tmp_path / "out")
    tokens = MarkdownIt("commonmark").enable("table").parse((tmp_path / "out" / "report.md").read_text())
    headers = [tokens[i + 1].content for i, tok in enumerate(tokens) if tok.type == "th_open"]
    assert headers == ["loss", "recall@20", "ndcg@20", "paper recall@20", "paper ndcg@20", "vs sl: recall@20",
                       "vs sl: ndcg@20"]
    cells = [tokens[i + 1].content for i, tok in enumerate(tokens) if tok.type == "td_open"]
    # the paper's families and names: BPR (pairwise), SL (softmax family, the baseline), SL@K (top-K)
    assert len(cells) == 3 * len(headers) and cells[::len(headers)] == ["BPR", "SL (baseline)", "SL@20"]
    slk = cells[cells.index("SL@20"):cells.index("SL@20") + len(headers)]
    assert slk[2].startswith("**0.1400 ± ") and slk[2].endswith("(3)**") and slk[4] == "0.1400 (+0.0%)"
    assert slk[6].startswith("+27.3%")

    walker = LatexWalker((tmp_path / "out" / "report.tex").read_text(), tolerant_parsing=False)
    nodes, _, _ = walker.get_latex_nodes()
    table = next(n for n in nodes if isinstance(n, LatexEnvironmentNode))
    tabular = next(n for n in table.nodelist if isinstance(n, LatexEnvironmentNode))
    assert tabular.environmentname == "tabular"
    body = tabular.latex_verbatim()
    rows = [r for r in body.split(r"\\") if "&" in r]
    assert len(rows) == 4 and all(r.count("&") == len(headers) - 1 for r in rows)

    csv = pd.read_csv(tmp_path / "out" / "report.csv")
    assert len(csv) == 6 and set(csv["row"]) == {"sl", "slk", "bpr"}
    assert csv.loc[(csv.row == "slk") & (csv.metric == "ndcg@20"), "mean"].item() == pytest.approx(0.14)
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["test_ndcg_at_k_toy_mf.png", "val_ndcg@20_toy_mf.png"]


def test_rows_split_by_variant_and_the_newest_of_repeated_seeds_wins(tmp_path):
    import os

    dup = write_run(tmp_path / "again", "sl", 0, 0.5)
    os.utime(dup / "results.json", (1e9, 1e9))  # older than the runs below
    for seed, v in enumerate([0.1, 0.11]):
        write_run(tmp_path, "sl", seed, v)
        write_run(tmp_path, "sl", seed, v + 0.02, overrides=("loss.tau=0.1",))
    rep = make_report(from_directories([tmp_path])[0], ["ndcg@20"], baseline="sl")
    assert sorted(rep.table["row"]) == ["sl", "sl loss.tau=0.1"]
    assert _row(rep.table, "sl")["mean"] == pytest.approx(0.105)  # the older seed-0 run (0.5) was left out
    assert any(str(dup) in n and "left out" in n for n in rep.notes)


def test_cli_writes_files_and_errors_in_one_line(runs_dir, tmp_path, capsys):
    assert report_main([str(runs_dir), "--baseline", "slk", "--metrics", "ndcg@20", "--no-plots"]) == 0
    out = capsys.readouterr()
    assert "| SL@20 (baseline) |" in out.out and (runs_dir / "report.md").is_file()
    assert report_main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report_main([str(empty)]) == 2
    assert "no completed runs" in capsys.readouterr().err
    assert report_main([str(runs_dir), "--baseline", "lambdalossk", "--no-plots"]) == 0
    assert "baseline 'lambdalossk' has no runs here" in capsys.readouterr().err


class _FakeFile:
    def __init__(self, src: Path):
        self.src = src

    def download(self, root: str, replace: bool = False):
        import shutil

        shutil.copy(self.src, Path(root) / self.src.name)


class _FakeRun:
    def __init__(self, d: Path):
        import json

        res = json.loads((d / "results.json").read_text())
        self.id, self.dir = d.name, d
        self.config, self.summary = res["config"], {f"test/{k}": v for k, v in res["test"].items()}
        cfg = res["config"]
        variant = "".join(f"-{o}" for o in res["overrides"] if o.startswith("loss."))
        self.group = f"{cfg['dataset']['name']}-{cfg['model']['name']}-{cfg['loss']['name']}{variant}"
        self._history = [{**h, "_step": i} for i, h in enumerate(res["history"])]

    def scan_history(self):
        return iter(self._history)

    def file(self, name):
        return _FakeFile(self.dir / name)


class _FakeApi:
    def __init__(self, root: Path):
        self.root, self.queries = root, []

    def runs(self, path, filters=None):
        self.queries.append((path, filters))
        return [_FakeRun(p.parent) for p in sorted(self.root.rglob("results.json")) if "failed" not in p.read_text()]


def test_wandb_source_gives_the_same_table_as_the_directories(runs_dir):
    api = _FakeApi(runs_dir)
    records, _ = from_wandb("me/bench", {"config.dataset.name": "toy"}, api=api)
    assert api.queries == [("me/bench", {"jobType": "train", "state": "finished", "config.dataset.name": "toy"})]
    via_wandb = make_report(records, ["ndcg@20"], baseline="sl").table
    via_dirs = make_report(from_directories([runs_dir])[0], ["ndcg@20"], baseline="sl").table
    cols = ["row", "mean", "ci_half", "p_seed_t", "p_user_t", "p_user_wilcoxon"]
    pd.testing.assert_frame_equal(via_wandb[cols], via_dirs[cols])


def test_wandb_rows_take_their_variant_from_the_group(tmp_path):
    for seed, v in enumerate([0.1, 0.11]):
        write_run(tmp_path, "sl", seed, v)
        write_run(tmp_path, "sl", seed, v + 0.02, overrides=("loss.tau=-0.1",))
    records, _ = from_wandb("me/bench", api=_FakeApi(tmp_path))
    table = make_report(records, ["ndcg@20"]).table
    assert sorted(table["row"]) == ["sl", "sl loss.tau=-0.1"]
    assert _row(table, "sl loss.tau=-0.1")["mean"] == pytest.approx(0.125)


def test_per_edge_and_sampled_metrics_are_reported_by_prefix(tmp_path):
    edge_mrr = {"sl": [0.20, 0.22, 0.21], "slk": [0.23, 0.26, 0.24]}
    for loss, values in edge_mrr.items():
        for seed, v in enumerate(values):
            d = write_run(tmp_path / "sweep", loss, seed, SEEDS[loss][seed])
            res = pd.read_json(d / "results.json", typ="series").to_dict()
            res["per_edge"] = {"mrr": v, "hit@20": 2 * v, "edges": 500}
            res["sampled"] = {"negatives": 100, "hit@10": 3 * v}
            write_json(d / "results.json", res)
    records, _ = from_directories([tmp_path / "sweep"])
    t = make_report(records, ["ndcg@20", "edge:mrr", "sampled:hit@10"], baseline="sl").table
    slk = _row(t, "slk", "edge:mrr")
    assert slk["mean"] == pytest.approx(0.73 / 3) and _row(t, "sl", "edge:mrr")["mean"] == pytest.approx(0.21)
    assert slk["rel_change"] == pytest.approx(0.73 / 3 / 0.21 - 1)
    assert slk["p_seed_t"] == pytest.approx(stats.ttest_rel(edge_mrr["slk"], edge_mrr["sl"]).pvalue)
    assert slk["n_users"] == 0 and math.isnan(slk["p_user_t"])  # no per-user vector for per-edge metrics
    assert _row(t, "slk", "sampled:hit@10")["mean"] == pytest.approx(0.73)
    assert _row(t, "slk", "ndcg@20")["mean"] == pytest.approx(0.14)  # the plain metric is unchanged


def test_a_one_seed_cell_says_it_has_no_interval(tmp_path):
    write_run(tmp_path / "one", "sl", 0, 0.1)
    one = make_report(from_directories([tmp_path / "one"])[0], ["ndcg@20"])
    cell = one.markdown.split("| SL |")[1].split("|")[0]
    assert "±" not in cell and "(1)" in cell and "(1) is one seed's value: no interval" in one.markdown
    for seed, v in enumerate([0.1, 0.12]):
        write_run(tmp_path / "two", "sl", seed, v)
    two = make_report(from_directories([tmp_path / "two"])[0], ["ndcg@20"])
    assert "±" in two.markdown.split("| SL |")[1].split("|")[0] and "one seed's value" not in two.markdown
