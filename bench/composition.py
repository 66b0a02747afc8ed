"""Composing configs: the app's config for overrides, and a saved run's config rebuilt from the
*current* code's config groups plus the run's recorded overrides.

A run folder is data, possibly from someone else: its ``run_config.yaml`` (with ``_target_``
entries) is never instantiated. Resuming or analysing a run composes the config again from
``conf/`` with the overrides recorded in its ``results.json`` and checks that the plain values
agree with the saved ones, so a folder cannot make the code run anything it names. The recorded
overrides themselves are untrusted too (:func:`check_replayable`): only what a person could type
for this project's groups and keys is replayed, never a ``_target_``, an interpolation, or a
config group that ``conf/`` does not define.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from functools import cache
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

import bench.resolvers  # noqa: F401  (the ${bench_...:} resolvers the config uses)
from bench.errors import BenchError
from bench.experiments import apply_per_loss
from bench.records.configuration import (
    MACHINE_KEYS,
    NOT_COMPARED,
    is_extending,
    override_key,
    supersede,
)
from bench.records.schema import RESULTS_FILE, RunResult
from bench.resumable import override_value

log = logging.getLogger(__name__)
_ABSENT = object()

#: the repository's conf/ (absolute: under ``python -m`` a relative path would be read as a package)
CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")

def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The app's config for these overrides, outside the command line (scripts, notebooks,
    tests). Set ``output_dir`` among the overrides: it otherwise refers to Hydra's run dir."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    # inside the app (or a test's Hydra context) Hydra already reads the same conf/
    inside = GlobalHydra.instance().is_initialized()
    with nullcontext() if inside else initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return apply_per_loss(hydra_compose(config_name="config", overrides=list(overrides)), overrides)


#: config keys that make Hydra build or call something: a record may never set them
CODE_KEY = re.compile(r"^_[A-Za-z]+_$")
#: config keys naming where something writes: a run's own folder (``output_dir``) decides, never a record
WRITE_KEYS = frozenset({"dirpath", "save_dir", "default_root_dir", "log_dir", "dir"})


@cache
def config_groups() -> dict[str, frozenset[str]]:
    """Every config group of ``conf/`` (``dataset``, ``experiment``, ``experiment/paper``) with
    the options it defines (``health``, ``paper/health_mf``), Hydra's own left out."""
    root = Path(CONFIG_DIR)
    groups: dict[str, frozenset[str]] = {}
    for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
        name = folder.relative_to(root).as_posix()
        if name == "hydra" or name.startswith("hydra/"):
            continue
        groups[name] = frozenset(f.relative_to(folder).with_suffix("").as_posix() for f in folder.rglob("*.yaml"))
    return groups


@cache
def _top_level_keys() -> frozenset[str]:
    return frozenset(str(k) for k in compose(["output_dir=unused"]).keys())


def _names_code(value: object) -> str | None:
    """Why a parsed override value must not be replayed (a node naming code, an interpolation)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if CODE_KEY.match(str(k)):
                return f"builds code ({k})"
            why = _names_code(v)
            if why:
                return why
    elif isinstance(value, list):
        return next((w for w in map(_names_code, value) if w), None)
    elif isinstance(value, str) and "${" in value:
        return "holds an interpolation (${...}), which resolves to anything"
    return None


def _names_places(value: object) -> str | None:
    """Whether a parsed override value is a node that says where files are written."""
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k) in WRITE_KEYS or str(k) in ("output_dir", "filename"):
                return "says where files are written, which only the folder a run is in decides"
            why = _names_places(v)
            if why:
                return why
    elif isinstance(value, list):
        return next((w for w in map(_names_places, value) if w), None)
    return None


def replay_refusal(override: str) -> str | None:
    """Why a recorded override may not be replayed, or None when a person could have typed it
    for this project: a plain value for a key of ``conf/``, or an option ``conf/`` defines for
    one of its groups. Never ``_target_``/``_partial_``/``_args_`` (a key or a value's key), an
    interpolation, a sweep, a ``@package`` move, a deleted group or one ``conf/`` lacks."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
    except Exception:
        return "does not parse as a Hydra override"
    if parsed.is_sweep_override():
        return "is a sweep, not one run's setting"
    if parsed.package is not None:
        return "moves a config group (@package)"
    key = parsed.key_or_group
    parts = re.split(r"[./]", key)
    if any(CODE_KEY.match(p) for p in parts):
        return f"builds code ({next(p for p in parts if CODE_KEY.match(p))})"
    if parts[-1] in WRITE_KEYS or parts[-1] in ("output_dir", "filename"):
        return "says where files are written, which only the folder a run is in decides"
    value = parsed.value()
    groups = config_groups()
    if key in groups:
        if parsed.type == OverrideType.DEL:
            return f"deletes the config group {key}"
        if not isinstance(value, str) or value not in groups[key]:
            return f"chooses {key}={value}, which conf/{key}/ does not define"
        return None
    if "/" in key:
        return f"names a config group conf/ does not define ({key})"
    if parts[0] not in _top_level_keys() and parts[0] not in groups:
        return f"adds {parts[0]}, which is no key of this project's config"
    return _names_code(value) or _names_places(value)


def check_replayable(overrides: Iterable[str], source: object) -> None:
    """Refuse, in one line, a record whose overrides could not have been typed for this project
    (see :func:`replay_refusal`): a crafted ``results.json`` or ledger must not make the code
    build or call what it names.

    Raises:
        BenchError: naming the record, the override and why.
    """
    for override in overrides:
        why = replay_refusal(override)
        if why:
            raise BenchError(f"{source}: its recorded override {override!r} {why}; a record is data and is never "
                             "replayed as code: start a new run, or pass that override yourself if you trust it")


def _plain(cfg: Any, path: str = "") -> dict[str, Any]:
    """Flatten a resolved config to {dotted key: value}, without the entries of NOT_COMPARED."""
    out: dict[str, Any] = {}
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            key = f"{path}.{k}" if path else str(k)
            if str(k) in NOT_COMPARED or str(k).endswith(("data_dir", "cache_dir")):
                continue
            out.update(_plain(v, key))
    elif isinstance(cfg, list):
        out[path] = [_plain(v) if isinstance(v, (dict, list)) else v for v in cfg]
    else:
        out[path] = cfg
    return out


#: settings whose default changed over time without changing what a run computes beyond the
#: last bits; a resumed run keeps the value it was started with (one of the allowed values)
RECORDED_WINS: dict[str, tuple[Any, ...]] = {
    "trainer.deterministic": (False, True, "warn"),  # default false until deterministic kernels became it
}

#: settings added with a default other than what runs did before them: a run that predates
#: one continues with the earlier behaviour (the value here), not the new default
EARLIER_BEHAVIOUR: dict[str, Any] = {
    "eval.ties": "lowest_id",  # tied items were ordered by id until eval.ties existed
    "train.divergence_factor": None,  # no run stopped for an exploding loss before the check existed
}


def check_writes_inside(cfg: DictConfig, source: object = "the config") -> None:
    """Refuse a config whose callbacks, loggers or trainer could write outside ``output_dir``: any
    of their strings that is an absolute path elsewhere (a ``dirpath``, a ``save_dir``, a
    ``filename`` joined to one) or that climbs out with ``..`` (``filename=../../x``, a CSV logger's
    ``name=../x``). A run writes only inside its own folder.

    Raises:
        BenchError: naming the key, the value and the folder.
    """
    plain = cast(dict, OmegaConf.to_container(cfg, resolve=True))
    # by the names, not through links: a link inside the folder is check_no_links's to refuse
    root = Path(os.path.abspath(Path(str(plain.get("output_dir"))).expanduser()))

    def refuse(key: str, value: str) -> None:
        raise BenchError(f"{source}: {key}={value} would write outside the run's folder {root}; a run writes only "
                         "inside its own folder: drop that setting, or choose the folder with hydra.run.dir")

    def inside(value: str) -> bool:  # a relative place is the working directory's, as Lightning reads it
        return Path(os.path.abspath(Path(value).expanduser())).is_relative_to(root)

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")
        elif isinstance(node, str):
            if ".." in Path(node).parts:
                refuse(path, node)
            if (path.rsplit(".", 1)[-1] in WRITE_KEYS or node.startswith(("/", "~"))) and not inside(node):
                refuse(path, node)

    for part in ("callbacks", "logger", "trainer"):
        walk(plain.get(part), part)


#: overrides that re-evaluate a finished run without changing its training (``retest``)
EVALUATION_PREFIX = "eval."


def recompose_run(res: RunResult, output_dir: str | Path, extra: Iterable[str] = (),
                  evaluation: bool = False) -> DictConfig:
    """The config of a recorded run, rebuilt from ``conf/`` and the run's overrides.

    Args:
        res: the run (its ``overrides`` and saved ``config``).
        output_dir: where the rebuilt run writes (the folder it is in now).
        extra: overrides to add; :func:`is_extending` ones only (e.g. ``trainer.max_epochs=300``),
            or with ``evaluation`` also ``eval.*`` ones (to test the trained run another way).
    Raises:
        BenchError: an override would change the experiment, or the current code composes the
            run's overrides to other values than the saved ones (the code changed since).
    """
    extra = list(extra)
    refused = [o for o in extra if not is_extending(o)
               and not (evaluation and override_key(o).startswith(EVALUATION_PREFIX))]
    if refused:
        raise BenchError(f"resume continues the same experiment, and {' '.join(refused)} would change it; "
                         "start a new run for that (allowed with resume=: trainer.max_epochs, logger, devices)")
    kept = [o for o in res.job_overrides if override_key(o) not in MACHINE_KEYS and not o.startswith("hydra")]
    extra_keys = {override_key(o) for o in extra}
    replayed = supersede(kept, extra)
    # the record's own overrides are untrusted; those typed now (extra) are the user's
    check_replayable(replayed[:len(replayed) - len(extra)], res.run_dir / RESULTS_FILE if res.run_dir else "a record")
    overrides = [*replayed, f"output_dir={override_value(output_dir)}"]
    try:
        cfg = compose(overrides)
    except Exception as exc:
        raise BenchError(f"{res.run_dir}: its overrides ({' '.join(kept) or 'none'}) no longer compose with this "
                         f"code's conf/ ({type(exc).__name__}: {exc}); start a new run") from exc
    check_writes_inside(cfg, res.run_dir / RESULTS_FILE if res.run_dir else "a record")
    rebuilt = _plain(cast(dict, OmegaConf.to_container(cfg, resolve=True)))
    saved = _plain(res.config)
    # values that a resume may change, or that depend on the machine rather than the experiment
    ignore = extra_keys | {"trainer.enable_progress_bar", "trainer.devices", "trainer.accelerator"}
    # a setting the run's code did not have yet is taken at its default (settings are added with
    # the earlier behaviour as default); one it had must agree, and none may have disappeared
    changed = sorted(k for k in saved if k not in ignore and rebuilt.get(k, _ABSENT) != saved[k])
    kept_own = [k for k in changed if k in RECORDED_WINS and saved[k] in RECORDED_WINS[k]]
    for k in kept_own:  # a default that changed since the run started: the run continues as it began
        OmegaConf.update(cfg, k, saved[k])
        log.info("%s continues with its recorded %s=%s (this code's default: %s)", res.run_dir, k, saved[k],
                 rebuilt.get(k))
    changed = [k for k in changed if k not in kept_own]
    added = sorted(k for k in rebuilt if k not in saved and k not in ignore)
    for k in (k for k in added if k in EARLIER_BEHAVIOUR):
        OmegaConf.update(cfg, k, EARLIER_BEHAVIOUR[k])
        log.info("%s predates %s; it continues as runs then did (%s=%s)", res.run_dir, k, k, EARLIER_BEHAVIOUR[k])
    added = [k for k in added if k not in EARLIER_BEHAVIOUR]
    if added:
        log.info("%s predates %s; taking their defaults", res.run_dir, ", ".join(added))
    if changed:
        shown = ", ".join(f"{k}: {saved[k]} -> {rebuilt.get(k, '(absent)')}" for k in changed[:5])
        raise BenchError(f"{res.run_dir}: this code rebuilds the run with other values ({shown}"
                         f"{', ...' if len(changed) > 5 else ''}); resume it with the code that started it, or start "
                         "a new run")
    return cfg
