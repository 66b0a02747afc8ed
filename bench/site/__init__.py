"""A static leaderboard of the declared studies: ``python -m bench.site results -o site/``.

One self-contained HTML page per study (tables with sortable columns, linked to the ledgers; SVG forest
plots, NDCG@K curves and ours-vs-paper scatters) and an index, readable from ``file://`` without a
network: no script library, font or stylesheet is fetched. See :mod:`bench.site.build`.
"""

from bench.site.build import build_site

__all__ = ["build_site"]
