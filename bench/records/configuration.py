"""The one rule for what makes a configuration: which command-line overrides say *what* a run is
(its table, its row, its variant, its seed) and which only say *where* or *how* it runs.

Every consumer reads it here: the report and the seed summary group runs into rows
(:func:`variant_overrides`), ledgers key rows by setting (:func:`setting_of`), W&B groups seeds
(:func:`variant_suffix`), and ``resume=`` decides what it may drop or add (:data:`MACHINE_KEYS`,
:func:`is_extending`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

#: overrides that name the table and row of a run (task, data, backbone, loss) or bring an
#: experiment's settings (which are then in the config itself)
IDENTITY_KEYS = frozenset({"task", "dataset", "model", "loss", "experiment"})
#: overrides that tell seeds of one configuration apart
SEED_KEYS = frozenset({"seed"})
#: overrides that only choose where a run reads, writes, logs or which devices it uses
PLACEMENT_KEYS = frozenset({"output_dir", "data_dir", "cache_dir", "resume", "force", "logger", "trainer.accelerator",
                            "trainer.devices", "trainer.strategy", "trainer.num_nodes"})
PLACEMENT_PREFIXES = ("hydra", "logger.", "log.")
#: overrides that only add a side output: training and the full-ranking metrics are the same to the
#: bit with or without them (the biased sampled-negatives test numbers, ``sampled``)
SIDE_OUTPUT_KEYS = frozenset({"eval.sampled_negatives", "eval.sampled_seed"})
#: the placement a record names of the machine and folder it ran in: a resume drops them
MACHINE_KEYS = frozenset({"output_dir", "data_dir", "cache_dir", "resume", "force", "logger"})
#: what a resume may add: it extends the same experiment (longer, elsewhere, logged otherwise)
EXTENDING_KEYS = frozenset({"trainer.max_epochs", "trainer.enable_progress_bar", "trainer.accelerator",
                            "trainer.devices", "eval.max_scores"}) | MACHINE_KEYS
EXTENDING_PREFIXES = ("hydra", "logger.", "callbacks.", "log.")
#: config entries that may differ between a run and its rebuilt config (where files go, how
#: progress shows): never compared
NOT_COMPARED = ("output_dir", "data_dir", "cache_dir", "resume", "force", "callbacks", "logger", "hydra", "log")


def override_key(override: str) -> str:
    """``+loss.tau=0.1`` -> ``loss.tau``."""
    return override.split("=", 1)[0].lstrip("+~")


def is_placement(override: str) -> bool:
    """Does this override only say where or how a run runs (never part of a configuration)?"""
    key = override_key(override)
    return key in PLACEMENT_KEYS or key.startswith(PLACEMENT_PREFIXES)


def is_variant_override(override: str) -> bool:
    """Does this command-line override make a configuration of its own (``loss.tau=0.1``),
    beyond the run's task, data set, backbone, loss and seed?"""
    key = override_key(override)
    return ("=" in override and key not in IDENTITY_KEYS | SEED_KEYS | SIDE_OUTPUT_KEYS
            and not is_placement(override))


def variant_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides that make a configuration of its own, sorted, without ``+``/``~``."""
    return sorted(o.lstrip("+~") for o in overrides if is_variant_override(o))


def variant_suffix(overrides: Iterable[str], max_chars: int = 64) -> str:
    """``-key=value`` per variant override (``""`` when none); a 10-hex digest of them when
    longer than ``max_chars`` (W&B caps group names; the config keeps every value)."""
    suffix = "".join(f"-{o}" for o in variant_overrides(overrides))
    if len(suffix) > max_chars:
        suffix = "-" + hashlib.sha1(suffix.encode()).hexdigest()[:10]
    return suffix


def setting_of(overrides: Iterable[str]) -> str:
    """The overrides that make a run's configuration, seed and placement left out, sorted and
    joined by spaces: two runs with the same setting differ only in their seed."""
    kept = [o.lstrip("+~") for o in overrides
            if override_key(o) not in SEED_KEYS | SIDE_OUTPUT_KEYS and not is_placement(o)]
    return " ".join(sorted(kept))


def is_extending(override: str) -> bool:
    """May a resume add this override (it changes where or how long, not what is learned)?"""
    key = override_key(override)
    return key in EXTENDING_KEYS or key.startswith(EXTENDING_PREFIXES)


def supersede(recorded: Iterable[str], extra: Sequence[str]) -> list[str]:
    """``recorded`` overrides without those an ``extra`` one replaces (of its key or a key below
    it: ``+callbacks.x=null`` drops every recorded ``callbacks.x...``), then ``extra``."""
    keys = {override_key(o) for o in extra}
    return [o for o in recorded
            if not any(override_key(o) == k or override_key(o).startswith(k + ".") for k in keys)] + list(extra)


#: spellings of one value: Hydra records a sweep's booleans as Python writes them (``True``)
_SPELLINGS = {"true": "true", "false": "false", "null": "null", "none": "null"}


def canonical_setting(setting: str) -> str:
    """A setting with its values spelled one way (``loss.self_term=True`` -> ``=true``), for comparing
    settings that ledgers recorded from different command lines."""
    out = []
    for token in setting.split():
        key, eq, value = token.partition("=")
        out.append(f"{key}{eq}{_SPELLINGS.get(value.lower(), value)}" if eq else token)
    return " ".join(sorted(out))
