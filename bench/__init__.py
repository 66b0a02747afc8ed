"""bench: a benchmark suite for top-K recommendation losses (Lightning + Hydra)."""

__version__ = "0.1.0"
