"""Name -> class registries, so a new component is one file plus one config."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from bench.errors import BenchError

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from config names to classes (or factories) of one kind.

    Args:
        kind: what the entries are ("loss", ...), used in error messages.
        package: dotted name of the package whose modules register entries; they are
            imported on first lookup, so dropping a file there is enough to add one.
    """

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, Callable[..., T]] = {}
        self._discovered = package is None

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Class decorator: ``@LOSSES.register("sl")``."""

        def decorator(obj: Callable[..., T]) -> Callable[..., T]:
            existing = self._entries.get(name)
            if existing is not None and existing is not obj:
                raise BenchError(
                    f"{self.kind} name '{name}' is registered twice ({_qualname(existing)} and "
                    f"{_qualname(obj)}); rename one of them"
                )
            self._entries[name] = obj
            obj.registry_name = name  # type: ignore[attr-defined]
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        """Remove an entry (plugins registered for a while, e.g. by a test)."""
        self._entries.pop(name, None)

    def _discover(self) -> None:
        if self._discovered:
            return
        pkg = importlib.import_module(self.package)  # type: ignore[arg-type]
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                module = f"{self.package}.{info.name}"
                try:
                    importlib.import_module(module)
                except Exception as exc:
                    # a half-filled registry would later claim that entries from other
                    # modules do not exist; name the module that broke instead
                    raise BenchError(f"cannot load the {self.kind} module {module}: {type(exc).__name__}: {exc}; "
                                     "fix or remove that file") from exc
        self._discovered = True

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._discover()
        return sorted(self._entries)

    def get(self, name: str) -> Callable[..., T]:
        """The entry called ``name``; a clear error listing the known ones otherwise."""
        self._discover()
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise BenchError(
                f"unknown {self.kind} '{name}'{hint}; known: {', '.join(self.names())}"
            )
        return self._entries[name]

    def items(self) -> list[tuple[str, Callable[..., T]]]:
        """(name, entry) pairs in registration order (built-ins first, then discovered ones)."""
        self._discover()
        return list(self._entries.items())

    def build(self, name: str, **kwargs: Any) -> T:
        """Instantiate the entry called ``name`` with ``kwargs``."""
        return self.get(name)(**kwargs)

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"
