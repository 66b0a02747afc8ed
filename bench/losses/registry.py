"""The loss registry, apart from the package so that the modules that register losses into it
import it without importing the package (whose ``__init__`` imports them)."""

from bench.registry import Registry

LOSSES: Registry = Registry("loss", package="bench.losses")
