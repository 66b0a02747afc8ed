"""Paper experiment configs: the tuned values of docs/losses.md, overridable, recorded with the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.app import CONFIG_DIR, compose
from bench.errors import ConfigError
from bench.records import read_json

LOSSES_MD = Path(CONFIG_DIR).parent / "docs" / "losses.md"
EXPERIMENTS = sorted((Path(CONFIG_DIR) / "experiment" / "paper").glob("table2_*.yaml"))
DATASETS = ["Health", "Electronic", "Gowalla", "Book"]
BACKBONES = ["MF", "LightGCN", "XSimGCL"]
NAMES = {"BPR": "bpr", "BSL": "bsl", "SL": "sl", "PSL": "psl", "SL@20": "slk"}

# Some of the paper's Table 2 test values (Recall@20 / NDCG@20) per backbone, loss and data set
# (columns as DATASETS), transcribed a second time, independently of docs/losses.md's full table,
# against which the experiments are checked.
PAPER = {
    ("MF", "BPR"): [".1627/.1234", ".0816/.0527", ".1355/.1111", ".0665/.0453"],
    ("MF", "BSL"): [".1719/.1261", ".0834/.0530", ".2071/.1630", ".1563/.1212"],
    ("MF", "SL"): [".1719/.1261", ".0821/.0529", ".2064/.1624", ".1559/.1210"],
    ("MF", "PSL"): [".1718/.1268", ".0838/.0541", ".2089/.1647", ".1569/.1227"],
    ("MF", "SL@20"): [".1823/.1390", ".0901/.0590", ".2121/.1709", ".1612/.1269"],
    ("LightGCN", "BPR"): [".1618/.1203", ".0813/.0524", ".1745/.1402", ".0984/.0678"],
    ("LightGCN", "SL"): [".1691/.1235", ".0823/.0526", ".2068/.1628", ".1567/.1220"],
    ("LightGCN", "PSL"): [".1701/.1270", ".0830/.0536", ".2086/.1648", ".1575/.1233"],
    ("LightGCN", "SL@20"): [".1783/.1371", ".0903/.0591", ".2128/.1729", ".1625/.1280"],
}


def _tuned_section() -> str:
    text = LOSSES_MD.read_text()
    start = text.index("## Tuned settings from the paper")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in cell.split("/")]


def _select(cfg, key):
    return OmegaConf.select(cfg, key)


def _documented() -> tuple[dict, dict]:
    """({(data, backbone, loss): (keys, values)}, {(backbone, loss): [Table 2 cell per data set]}) from the docs."""
    section = _tuned_section()
    tuned = {}
    for dataset, body in re.findall(r"^\*\*(\w+)\*\*\n\n(\| loss \|.*?)\n\n", section, re.M | re.S):
        rows = re.findall(r"^\| `(\w+)` \| ([\w /]+) \| (.+) \|$", body, re.M)
        for loss, keys, cells in rows:
            for backbone, cell in zip(BACKBONES, cells.split(" | ")):
                tuned[(dataset, backbone, loss)] = (keys.split(" / "), _numbers(cell))
    table2 = {(b, loss): cells.split(" | ") for b, loss, cells in
              re.findall(r"^\| (MF|LightGCN|XSimGCL) \| `(\w+)` \| (.+) \|$", section, re.M)}
    return tuned, table2


KEY = {"lr": "optimizer.lr", "wd": "optimizer.weight_decay"}


def test_table2_experiments_hold_the_documented_values():
    tuned, table2 = _documented()
    assert len(EXPERIMENTS) == 12 and len(tuned) == 4 * 3 * 9 and len(table2) == 3 * 9
    for (backbone, paper_name), cells in PAPER.items():  # the docs' Table 2 against a second transcription
        assert [_numbers(c) for c in table2[(backbone, NAMES[paper_name])]] == [_numbers(c) for c in cells]
    losses = sorted({loss for _, _, loss in tuned})
    for n, ((dataset, backbone, loss), (keys, values)) in enumerate(sorted(tuned.items())):
        exp = f"paper/table2_{backbone.lower()}_{dataset.lower()}"
        entry = OmegaConf.load(Path(CONFIG_DIR) / "experiment" / f"{exp}.yaml").per_loss[loss]
        got = [float(entry.set[KEY.get(k, f"loss.{k}")]) for k in keys]
        assert got == pytest.approx(values), (exp, loss)
        assert entry.set.get("loss.n_negatives") == (None if loss in ("bpr", "guidedrec") else 1000), (exp, loss)
        assert entry.set.get("loss.k") == (20 if loss in ("slk", "songk") else None), (exp, loss)
        paper = _numbers(table2[(backbone, loss)][DATASETS.index(dataset)])
        assert [entry.paper["recall@20"], entry.paper["ndcg@20"]] == pytest.approx(paper), (exp, loss)
        if n % len(losses) == 0 or backbone == "XSimGCL" and dataset == "Book":  # composing all 108 takes 20 s
            cfg = compose([f"+experiment={exp}", f"loss={loss}", "output_dir=x"])
            assert (cfg.dataset.name, cfg.model.name, cfg.loss.name) == (dataset.lower(), backbone.lower(), loss)
            assert [float(_select(cfg, KEY.get(k, f"loss.{k}"))) for k in keys] == pytest.approx(values)
            assert cfg.trainer.max_epochs == 200 and cfg.trainer.check_val_every_n_epoch == 5, exp
            assert cfg.paper["ndcg@20"] == pytest.approx(paper[1]) and "per_loss" not in cfg
            if backbone != "MF":
                assert cfg.model.layers == {"LightGCN": 2, "XSimGCL": 3}[backbone]
            if backbone == "XSimGCL":  # IR-Benchmark's XSimGCL as its run script launches it
                init = "xavier_normal" if loss == "bpr" else "xavier_uniform"
                assert (cfg.model.cl_weight, cfg.model.cl_tau, cfg.model.noise_eps, cfg.model.contrast_layer,
                        cfg.model.init) == (0.2, 0.1, 0.1, 1, init), exp
    assert compose(["+experiment=paper/table2_mf_health", "loss=bpr", "output_dir=x"]).loss.n_negatives == 1


def test_lambda_experiments_hold_the_documented_values_and_their_sampled_variants():
    section = _tuned_section()
    rows = re.findall(r"^\| `(\w+)`( `ranks=sampled`)? \| ([\w /]+) \| ([\de. /-]+) \| ([\de. /-]+) \| "
                      r"([\d./]+) \| ([\d./]+) \|$", section, re.M)
    assert len(rows) == 6
    for loss, sampled, keys, *cells in rows:
        for dataset, values, paper in (("ml100k", cells[0], cells[2]), ("food", cells[1], cells[3])):
            cfg = compose(["+experiment=paper/table18_mf_" + dataset, f"loss={loss}", "output_dir=x",
                           *(["loss.ranks=sampled"] if sampled else [])])
            got = [float(_select(cfg, KEY.get(k, f"loss.{k}"))) for k in keys.split(" / ")]
            assert got == pytest.approx(_numbers(values)), (dataset, loss, sampled)
            assert [cfg.paper["recall@20"], cfg.paper["ndcg@20"]] == pytest.approx(_numbers(paper))
            assert cfg.dataset.name == dataset and cfg.model.name == "mf"
            # the reference code's N(0, 1) embeddings (model.init=auto gives them to cosine scores)
            assert (cfg.model.init, cfg.model.init_std) == ("normal" if loss.startswith("lambda") else "auto", 1.0)
            if loss.startswith("lambda"):
                assert cfg.loss.n_negatives == 1 and cfg.loss.ranks == ("sampled" if sampled else "exact")
                assert loss == "lambdarank" or cfg.loss.variant == "reference_code"
            else:
                assert cfg.loss.n_negatives == (200 if dataset == "ml100k" else 1000) and cfg.loss.k == 20


def test_health_mf_holds_tables_3_and_4():
    section = _tuned_section()
    rows = re.findall(r"^\| `(\w+)`(?: `k=(\d+)`)? \| ([\w /–]+) \| ([\w\de.' /-]+) \| ([\d. ]+) \|$", section, re.M)
    assert len(rows) == 10 + 5  # Table 2's nine losses and SONG (Table 3); SL@K at five other K (Table 4)
    for loss, k, keys, values, paper in rows:
        at_k = [f"loss.k={k}"] if k else []
        cfg = compose(["+experiment=paper/table2_mf_health", f"loss={loss}", "output_dir=x", *at_k])
        assert list(cfg.eval.ks) == [5, 10, 20, 50, 75, 100]
        assert [cfg.paper[f"ndcg@{c}"] for c in cfg.eval.ks] == pytest.approx([float(v) for v in paper.split()])
        if keys != "–":
            got = [float(_select(cfg, KEY.get(name, f"loss.{name}"))) for name in keys.split(" / ")]
            assert got == pytest.approx(_numbers(values)), (loss, k)
        if k:
            assert cfg.loss.k == int(k) and cfg.train.monitor == f"ndcg@{k}"


def test_a_variant_applies_over_its_entry_and_must_be_unambiguous():
    from bench.experiments import apply_per_loss

    base = {"loss": {"name": "x", "ranks": "sampled", "tau": 1.0}, "optimizer": {"lr": 0.1, "weight_decay": 0.0}}
    entry = {"set": {"optimizer.lr": 0.5, "loss.tau": 2.0}, "paper": {"ndcg@20": 0.1},
             "variants": [{"when": {"loss.ranks": "sampled"}, "set": {"optimizer.lr": 0.7}, "paper": {"ndcg@20": 0.2}}]}
    cfg = apply_per_loss(OmegaConf.create({**base, "per_loss": {"x": entry}}), ["loss.tau=1.0"])
    assert (cfg.optimizer.lr, cfg.loss.tau, cfg.paper["ndcg@20"]) == (0.7, 1.0, 0.2)  # the command line still wins
    plain = {**base, "loss": {**base["loss"], "ranks": "exact"}, "per_loss": {"x": entry}}
    exact = apply_per_loss(OmegaConf.create(plain))
    assert (exact.optimizer.lr, exact.paper["ndcg@20"]) == (0.5, 0.1)  # no variant matches: the entry alone
    bare = {**entry, "variants": [{"when": {"loss.ranks": "sampled"}, "set": {"optimizer.lr": 0.7}}]}
    assert apply_per_loss(OmegaConf.create({**base, "per_loss": {"x": bare}})).paper["ndcg@20"] == 0.1  # the entry's
    twice = {**entry, "variants": entry["variants"] * 2}
    with pytest.raises(ConfigError, match=r"per_loss\.x: 2 variants match this run"):
        apply_per_loss(OmegaConf.create({**base, "per_loss": {"x": twice}}))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_llpauc_as_the_reference_code_runs_it_keeps_the_tuned_values_and_reports_against_the_same_row(path):
    # the paper's LLPAUC row was produced by IR-Benchmark (every variable descends, embeddings N(0, .01^2)):
    # that form is a variant with the entry's tuned values and the entry's paper numbers
    plain = compose([f"+experiment=paper/{path.stem}", "loss=llpauc", "output_dir=x"])
    ref = compose([f"+experiment=paper/{path.stem}", "loss=llpauc", "loss.variant=reference_code", "output_dir=x"])
    own_init = "xavier_uniform" if "xsimgcl" in path.stem else "auto"  # the backbone's, as the reference code's
    assert (plain.loss.variant, plain.model.init, plain.model.init_std) == ("paper", own_init, 1.0)
    assert (ref.model.init, ref.model.init_std) == ("normal", 0.01)
    assert (ref.loss.alpha, ref.loss.beta, ref.optimizer.lr) == (plain.loss.alpha, plain.loss.beta, plain.optimizer.lr)
    assert dict(ref.paper) == dict(plain.paper) and plain.paper["ndcg@20"] > 0


def test_command_line_wins_and_unknown_losses_fail_clearly():
    cfg = compose(["+experiment=paper/table2_mf_health", "loss=slk", "loss.tau_w=3.0", "optimizer.lr=0.5",
                   "output_dir=x"])
    assert (cfg.loss.tau_w, cfg.loss.t_beta, cfg.optimizer.lr) == (3.0, 5, 0.5)
    known = "advinfonce, bpr, bsl, guidedrec, llpauc, psl, sl, slk, song, songk"
    with pytest.raises(ConfigError, match=rf"settings for loss={known}, not for loss=lambdalossk"):
        compose(["+experiment=paper/table2_mf_health", "loss=lambdalossk", "output_dir=x"])


@pytest.mark.slow
def test_a_run_records_the_applied_settings_and_the_paper_values(tmp_path, tiny, run_cli):
    proc = run_cli(["+experiment=paper/table2_mf_health", "dataset=synthetic", "loss=slk", *tiny,
                    "logger=none", "hydra.run.dir=run"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = read_json(tmp_path / "run" / "results.json")
    assert res["config"]["paper"] == {"recall@20": 0.1823, "ndcg@5": 0.1076, "ndcg@10": 0.1188, "ndcg@20": 0.139,
                                      "ndcg@50": 0.1733, "ndcg@75": 0.1909, "ndcg@100": 0.2029}
    assert (res["config"]["loss"]["tau_w"], res["config"]["loss"]["t_beta"]) == (2.5, 5)
    assert res["config"]["trainer"]["max_epochs"] == 3 and "per_loss" not in res["config"]


@pytest.mark.parametrize("loss", ["bce", "sl", "slk"])
def test_table6_experiments_hold_sasrecs_published_settings(loss):
    for experiment, dataset in (("seq/table6_games", "games"), ("seq/table6_beauty", "beauty-seq")):
        cfg = compose([f"+experiment={experiment}", f"loss={loss}", "output_dir=x"])
        assert (cfg.task.name, cfg.dataset.name, cfg.model.name) == ("seq", dataset, "sasrec")
        m = cfg.model
        assert (m.dim, m.layers, m.heads, m.max_len, m.dropout) == (50, 2, 1, 50, 0.5)
        assert (cfg.optimizer.lr, cfg.task.users_per_batch, cfg.train.monitor) == (0.001, 128, "ndcg@20")
        assert set(cfg.paper) == {"hit@20", "ndcg@20"} and cfg.eval.sampled_negatives == 100
    assert compose(["+experiment=seq/table6_games", f"loss={loss}", "output_dir=x"]).loss.n_negatives == \
        (1 if loss == "bce" else 1000)  # SASRec's one negative per position for its own loss


@pytest.mark.parametrize("loss", ["sl", "slk", "listnet", "listmle", "ranknet", "lambdalossk", "neuralndcg",
                                  "approxndcg"])
def test_the_ltr_experiments_train_a_transformer_on_lists_and_pick_by_ndcg_at_5(loss):
    for dataset in ("mq2008", "ohsumed"):
        cfg = compose([f"+experiment=ltr/{dataset}", f"loss={loss}", "output_dir=x"])
        assert (cfg.task.name, cfg.dataset.name, cfg.model.name) == ("ltr", dataset, "transformer")
        assert list(cfg.eval.ks) == [1, 3, 5, 10, 20] and cfg.train.monitor == "ndcg@5"
        assert cfg.get("loss", {}).get("k", 5) == 5 and cfg.model.dim == 64
