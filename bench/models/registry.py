"""The model registry, apart from the package so that the modules that register backbones into it
import it without importing the package (whose ``__init__`` imports them)."""

from bench.registry import Registry

MODELS: Registry = Registry("model", package="bench.models")
