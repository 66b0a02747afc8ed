"""YAML declarations read strictly: a key given twice in one mapping is an error, not the last one winning.

PyYAML's ``safe_load`` keeps the last of two equal keys silently; in a study or a search that replaces a
row or a parameter without a word (a second ``talos-g16f`` row once replaced the first, so Gowalla's cell
would have trained on ML-100K). Hydra's own configs go through OmegaConf, which already refuses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (lines {seen[key]} and {line}); rename one",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_strict(path: Path, what: str) -> Any:
    """The YAML document in ``path``; ``what`` names it in the error ("study table6").

    Raises:
        ConfigError: one line naming the file and the problem (a repeated key with both lines, or the
            parser's first line).
    """
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.constructor.ConstructorError as exc:
        raise ConfigError(f"{what}: {path}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what}: {path} is not YAML ({str(exc).splitlines()[0]})") from None
