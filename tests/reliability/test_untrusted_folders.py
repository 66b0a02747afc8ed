"""Nothing from a run folder executes (issue 13, defect 3): a crafted config or checkpoint in a
folder given to ``resume=``, ``python -m bench.thresholds`` or ``python -m bench.report`` is
refused with a one-line error, and its payload never runs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bench.run import train_and_test

pytestmark = pytest.mark.slow


class _Payload:
    """Unpickling this calls os.system: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def run(tmp_path, tiny, make_cfg, crash_at):
    """A completed run (for the study and the report) and a killed one (for resume), both with
    their overrides recorded."""
    overrides = [*tiny, "loss=slk", "loss.t_beta=1", "logger=none"]
    train_and_test(make_cfg(overrides, tmp_path / "done"), overrides=overrides)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_and_test(make_cfg(overrides, tmp_path / "killed"), overrides=overrides, extra_callbacks=[crash_at(2)])
    return tmp_path / "done", tmp_path / "killed"


def _plant_config(folder, marker):
    res = json.loads((folder / "results.json").read_text())
    res["config"]["dataset"] = {"_target_": "os.system", "command": f"touch {marker}", "name": "synthetic"}
    (folder / "results.json").write_text(json.dumps(res))
    (folder / "run_config.yaml").write_text(f"dataset:\n  _target_: os.system\n  command: touch {marker}\n")


def _plant_checkpoint(path, marker):
    torch.save({"state_dict": _Payload(marker)}, path)


def test_a_crafted_config_is_never_instantiated(run, tmp_path, run_cli):
    done, killed = run
    marker = tmp_path / "pwned"
    for folder in (done, killed):
        _plant_config(folder, marker)
    proc = run_cli([f"resume={killed}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "this code rebuilds the run with other values (dataset." in proc.stderr
    proc = run_cli([str(done), "--ks", "5"], tmp_path, module="bench.thresholds")
    assert proc.returncode == 2 and "rebuilds the run with other values" in proc.stderr
    assert not marker.exists()


def test_a_crafted_checkpoint_is_refused_before_it_runs(run, tmp_path, run_cli):
    done, killed = run
    marker = tmp_path / "pwned"
    _plant_checkpoint(killed / "checkpoints" / "last.ckpt", marker)
    proc = run_cli([f"resume={killed}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "last.ckpt is not a plain checkpoint" in proc.stderr
    _plant_checkpoint(done / "checkpoints" / "last.ckpt", marker)
    proc = run_cli([str(done), "--checkpoint", "last", "--ks", "5"], tmp_path, module="bench.thresholds")
    assert proc.returncode == 2 and "last.ckpt is not a plain checkpoint" in proc.stderr
    assert not marker.exists()


def test_the_report_reads_no_pickled_objects(run, tmp_path, run_cli):
    done, _ = run
    np.savez(done / "per_user_test.npz", users=np.arange(3), **{"ndcg@20": np.array([_Payload(tmp_path / "x")] * 3)})
    proc = run_cli([str(done), str(done), "--baseline", "slk", "--no-plots"], tmp_path, module="bench.report")
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()


def _plant_overrides(folder, overrides, config_patch):
    """A results.json whose recorded overrides and saved config agree with each other, as a careful
    attacker would write them (so the comparison of saved and rebuilt values alone would pass): the
    run's own overrides of the attacked node are replaced."""
    res = json.loads((folder / "results.json").read_text())
    attacked = {o.lstrip("+~").split("=")[0].split(".")[0] for o in overrides}
    res["overrides"] = [o for o in res["overrides"] if o.split("=")[0].split(".")[0] not in attacked] + overrides
    for key, value in config_patch.items():
        node = res["config"]
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    (folder / "results.json").write_text(json.dumps(res))


@pytest.mark.parametrize("attack", ["dataset", "callback"])
def test_recorded_overrides_that_name_code_are_never_replayed(attack, run, tmp_path, run_cli):
    """The issue's case: `~dataset +dataset._target_=torch.load +dataset.f=<pickle> +dataset.weights_only=false`
    (or a `+callbacks.X._target_`) in a record would unpickle (run) a file under resume=, export and
    the threshold study. Each refuses in one line, and the payload never runs."""
    done, killed = run
    marker = tmp_path / "pwned"
    pickle_file = tmp_path / "x.pkl"
    torch.save(_Payload(marker), pickle_file)
    if attack == "dataset":
        overrides = ["~dataset", "+dataset._target_=torch.load", f"+dataset.f={pickle_file}",
                     "+dataset.weights_only=false"]
        patch = {"dataset": {"_target_": "torch.load", "f": str(pickle_file), "weights_only": False}}
        refusal = "its recorded override '~dataset' deletes the config group dataset"
    else:
        overrides = ["+callbacks.x._target_=torch.load", f"+callbacks.x.f={pickle_file}",
                     "+callbacks.x.weights_only=false"]
        patch = {"callbacks.x": {"_target_": "torch.load", "f": str(pickle_file), "weights_only": False}}
        refusal = "its recorded override '+callbacks.x._target_=torch.load' builds code (_target_)"
    for folder in (done, killed):
        _plant_overrides(folder, overrides, patch)
    for args, module in (([f"resume={killed}"], "bench"), ([str(done), "--k", "5"], "bench.export"),
                         ([str(done), "--ks", "5"], "bench.thresholds")):
        proc = run_cli(args, tmp_path, module=module)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert refusal in proc.stderr and "a record is data and is never replayed as code" in proc.stderr
    assert not marker.exists()
    # what a person types on the command line is theirs to trust: the record's override, given again,
    # replaces the recorded one (here: drops the callback) and the resume goes on
    if attack == "callback":
        proc = run_cli([f"resume={killed}", "+callbacks.x=null"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not marker.exists()


# -- the property: no accepted override brings code conf/ does not name -----------------------

KEYS = ["loss.tau", "dataset", "model", "+dataset.f", "callbacks.x", "+callbacks.x", "~dataset", "~callbacks.x",
        "trainer.max_epochs", "+evil", "experiment", "+experiment", "dataset.path", "hydra.searchpath"]
VALUES = ["0.1", "health", "mf", "../../tmp/evil", "null", "torch.load", "${oc.env:HOME}", "{_target_: os.system}",
          "[1,2]", "{a: {_args_: [1]}}", "paper/table2_mf_health", "ltr/mq2008", "x,y"]
CODE_PARTS = ["", "._target_", "._partial_", "._args_", "._recursive_"]


def _code_nodes(node, path=""):
    """{(path, key, value)} of every Hydra code key (``_target_``, ``_args_``, ...) in a config."""
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k).startswith("_") and str(k).endswith("_"):
                out.add((path, str(k), json.dumps(v, sort_keys=True, default=str)))
            out |= _code_nodes(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out |= _code_nodes(v, f"{path}[{i}]")
    return out


def _conf_code():
    """Every code key conf/ itself writes, wherever a group puts it."""
    import yaml

    from bench.composition import CONFIG_DIR

    out = set()
    for path in sorted(__import__("pathlib").Path(CONFIG_DIR).rglob("*.yaml")):
        out |= {(k, v) for _, k, v in _code_nodes(yaml.safe_load(path.read_text()) or {})}
    return out


def test_no_override_a_record_may_replay_brings_code_conf_does_not_write():
    """Property (hypothesis): random override strings built from this project's keys and hostile
    parts either are refused, or compose to a config whose every ``_target_``/``_args_``/... entry
    is one that a file of conf/ writes: a record can choose among the project's code, never add any."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from omegaconf import OmegaConf

    from bench.composition import compose, replay_refusal

    allowed = _conf_code()
    override = st.builds(lambda k, c, v: f"{k}{c}={v}" if not k.startswith("~") else f"{k}{c}",
                         st.sampled_from(KEYS), st.sampled_from(CODE_PARTS), st.sampled_from(VALUES))

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(override, min_size=1, max_size=3))
    def check(overrides):
        if any(replay_refusal(o) for o in overrides):
            return
        try:
            cfg = compose([*overrides, "output_dir=unused"])
        except Exception:
            return  # does not compose: nothing runs
        plain = OmegaConf.to_container(cfg, resolve=False)
        assert {(k, v) for _, k, v in _code_nodes(plain)} <= allowed, overrides

    check()


def test_a_record_cannot_send_a_resumes_files_elsewhere(run, tiny, tmp_path, run_cli):
    """A record whose overrides point the results, checkpoint or CSV writers at another folder
    (they are no code, so the code-key rule alone would pass them) is refused; the victim is untouched."""
    _, killed = run
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "results.json").write_text("{}")
    for override in (f"callbacks.results.dirpath={victim}", f"callbacks.last_checkpoint.dirpath={victim}",
                     f"+logger.csv.save_dir={victim}", "callbacks.best_checkpoint.filename=../../victim/best"):
        res = json.loads((killed / "results.json").read_text())
        saved = dict(res)
        res["overrides"] = [*res["overrides"], override]
        (killed / "results.json").write_text(json.dumps(res))
        proc = run_cli([f"resume={killed}"], tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "says where files are written, which only the folder a run is in decides" in proc.stderr
        (killed / "results.json").write_text(json.dumps(saved))
    assert sorted(p.name for p in victim.iterdir()) == ["results.json"]
    # nor can a setting typed for a new run: a place elsewhere, or a name that climbs out
    for setting in (f"callbacks.last_checkpoint.dirpath={victim}", "callbacks.best_checkpoint.filename=../../victim/b",
                    "logger=csv", "logger.csv.name=../../victim"):
        extra = ["logger=csv", setting] if setting.startswith("logger.csv") else [setting]
        if setting == "logger=csv":
            continue
        proc = run_cli([*tiny, *extra, "hydra.run.dir=new/run"], tmp_path)
        assert proc.returncode == 2 and "would write outside the run's folder" in proc.stderr, proc.stderr[-1000:]
    assert sorted(p.name for p in victim.iterdir()) == ["results.json"]
