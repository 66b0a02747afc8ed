"""The site's figures as inline SVG text, drawn here so a page needs no image file, script library
or font: a forest plot of paired differences, metric@K-vs-K curves and an ours-vs-paper scatter.

Every function returns one ``<svg>`` element (a string) with a fixed ``width``/``height`` in CSS
pixels and a ``viewBox`` of the same size, so it scales with the page; coordinates below are in
those pixels, y growing downwards. All text is HTML-escaped. Marks carry a ``<title>`` (the
browser's tooltip) with their exact values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

#: one colour per series (colour-blind-safe Tableau 10); past ten, dash patterns tell series apart
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#79706e")
DASHES = ("", "6 3", "2 2")
#: a value -> pixel map
Scale = Callable[[float], float]
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


@dataclass(frozen=True)
class Interval:
    """One forest-plot line: ``mean`` and its 95% interval ``[low, high]`` (metric units) over ``n`` pairs."""

    label: str
    mean: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class Series:
    """One curve: ``points`` as (x, y) pairs, x ascending."""

    label: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Point:
    """One scatter point: the paper's value ``x``, ours ``y`` with its 95% half width ``half`` (NaN: none)."""

    label: str
    group: str
    x: float
    y: float
    half: float


def style(index: int) -> tuple[str, str]:
    """(colour, dash pattern) of the series at ``index``."""
    return PALETTE[index % len(PALETTE)], DASHES[(index // len(PALETTE)) % len(DASHES)]


def short(label: str, limit: int = 26) -> str:
    """``label`` cut to ``limit`` characters with an ellipsis (a legend's width is fixed; tooltips keep it whole)."""
    return label if len(label) <= limit else label[:limit - 1] + "…"


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9)
    return [round(i * step, 12) for i in range(first, math.floor(high / step + 1e-9) + 1)]


def tick_text(value: float, values: Sequence[float]) -> str:
    """A tick label with as many decimals as the ticks' spacing needs (``.05``, ``-0.01`` -> ``−.01``)."""
    if value == 0:
        return "0"
    step = min((b - a for a, b in zip(values, values[1:])), default=1.0) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    text = f"{value:.{decimals}f}"
    if text.lstrip("-").startswith("0."):
        text = text.replace("0.", ".", 1)
    return text.replace("-", "−")


def _padded(values: Sequence[float], pad: float = 0.06) -> tuple[float, float]:
    """[min, max] of ``values`` widened by ``pad`` of their range on each side (a point range gets width)."""
    low, high = min(values), max(values)
    span = high - low or abs(high) * 0.1 or 1.0
    return low - pad * span, high + pad * span


def _scale(low: float, high: float, start: float, end: float) -> Scale:
    """The linear map of [low, high] onto pixels [start, end]."""
    return lambda v: start + (v - low) / (high - low) * (end - start)


def _svg(width: int, height: int, title: str, body: list[str], kind: str) -> str:
    return (f'<svg class="plot {kind}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" {FONT}><title>{escape(title)}</title>\n'
            + "\n".join(body) + "\n</svg>")


def _x_axis(values: Sequence[float], x: Scale, y: float, top: float, label: str, texts: Sequence[str] | None = None,
            ) -> list[str]:
    """Ticks, their labels and light grid lines from ``top`` down to the axis at pixel row ``y``."""
    texts = texts or [tick_text(v, values) for v in values]
    out = []
    for v, text in zip(values, texts):
        px = x(v)
        out.append(f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{px:.1f}" y="{y + 14:.1f}" text-anchor="middle" fill="#444">{escape(text)}</text>')
    return out + [f'<text x="{(x(values[0]) + x(values[-1])) / 2 if values else 0:.1f}" y="{y + 30:.1f}" '
                  f'text-anchor="middle" fill="#222">{escape(label)}</text>']


def _y_axis(values: Sequence[float], y: Scale, x0: float, x1: float, label: str, mid: float) -> list[str]:
    out = []
    for v in values:
        py = y(v)
        out.append(f'<line x1="{x0:.1f}" y1="{py:.1f}" x2="{x1:.1f}" y2="{py:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{x0 - 5:.1f}" y="{py + 4:.1f}" text-anchor="end" fill="#444">'
                   f'{escape(tick_text(v, values))}</text>')
    out.append(f'<text transform="translate({x0 - 44:.1f},{mid:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#222">{escape(label)}</text>')
    return out


def forest(rows: Sequence[Interval], axis_label: str, title: str) -> str:
    """A forest plot: one line per row, its mean difference (dot) and 95% interval (bar), with the
    zero line (no difference) drawn vertically; each row is a ``<g class="mark">``.

    Args:
        rows: the differences, top to bottom (metric units, ours minus baseline).
        axis_label: the x axis's name (e.g. ``Δ ndcg@20 vs SL (paired seeds)``).
        title: the figure's accessible title.
    """
    label_w, value_w, row_h, top, bottom, width = 210, 150, 22, 12, 46, 680
    height = top + row_h * max(1, len(rows)) + bottom
    finite = [v for r in rows for v in (r.low, r.high, r.mean) if math.isfinite(v)]
    low, high = _padded([*finite, 0.0])
    x = _scale(low, high, label_w, width - value_w)
    axis_y = top + row_h * len(rows) + 4
    body = _x_axis(ticks(low, high), x, axis_y, top - 4, axis_label)
    body.append(f'<line class="zero" x1="{x(0):.1f}" y1="{top - 4}" x2="{x(0):.1f}" y2="{axis_y:.1f}" '
                'stroke="#222" stroke-width="1.2"/>')
    for i, r in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        # a row whose interval excludes zero is drawn filled: the difference is significant at 5%
        significant = r.low > 0 or r.high < 0
        colour = "#2a6f3a" if r.mean > 0 else "#a3342b"
        tip = f"{r.label}: {r.mean:+.4f} [{r.low:+.4f}, {r.high:+.4f}], {r.n} paired runs"
        body.append(f'<g class="mark"><title>{escape(tip)}</title>'
                    f'<text x="{label_w - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#222">'
                    f'{escape(short(r.label, 34))}</text>'
                    f'<line x1="{x(r.low):.1f}" y1="{cy:.1f}" x2="{x(r.high):.1f}" y2="{cy:.1f}" '
                    f'stroke="{colour}" stroke-width="2"/>'
                    f'<circle cx="{x(r.mean):.1f}" cy="{cy:.1f}" r="4" stroke="{colour}" stroke-width="1.5" '
                    f'fill="{colour if significant else "#fff"}"/>'
                    f'<text x="{width - value_w + 8}" y="{cy + 4:.1f}" fill="#444">'
                    f'{escape(f"{r.mean:+.4f} (n={r.n})".replace("-", "−"))}</text></g>')
    return _svg(width, height, title, body, "forest")


def curves(series: Sequence[Series], x_label: str, y_label: str, title: str, log_x: bool = True) -> str:
    """Lines of y against x, one per series, with a legend on the right.

    Args:
        series: the curves (e.g. a row's mean test NDCG@K at each K; K >= 1 on a log axis).
        log_x: put x on a log scale (K from 5 to 100 spreads evenly); ticks sit at the x values.
    """
    legend_w, left, right, top, bottom = 190, 58, 16, 14, 46
    width, height = 700, max(300, top + 16 * len(series) + bottom)
    xs = sorted({p[0] for s in series for p in s.points})
    ys = [p[1] for s in series for p in s.points]
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x_low, x_high = _padded([fx(v) for v in xs], 0.04)
    y_low, y_high = _padded(ys)
    plot_right = width - legend_w - right
    x = _scale(x_low, x_high, left, plot_right)
    y = _scale(y_low, y_high, height - bottom, top)
    axis_y = height - bottom
    body = _x_axis([fx(v) for v in xs], x, axis_y, top, x_label, texts=[f"{v:g}" for v in xs])
    body += _y_axis(ticks(y_low, y_high), y, left, plot_right, y_label, (top + axis_y) / 2)
    for i, s in enumerate(series):
        colour, dash = style(i)
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        path = " ".join(f"{x(fx(px)):.1f},{y(py):.1f}" for px, py in s.points)
        tip = escape(f"{s.label}: " + ", ".join(f"{px:g}: {py:.4f}" for px, py in s.points))
        dots = "".join(f'<circle cx="{x(fx(px)):.1f}" cy="{y(py):.1f}" r="2.5" fill="{colour}"/>'
                       for px, py in s.points)
        ly = top + 16 * i + 8
        body.append(f'<g class="series"><title>{tip}</title><polyline points="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="1.6"{dashes}/>{dots}'
                    f'<line x1="{plot_right + 12}" y1="{ly}" x2="{plot_right + 34}" y2="{ly}" stroke="{colour}" '
                    f'stroke-width="2"{dashes}/><text x="{plot_right + 40}" y="{ly + 4}" fill="#222">'
                    f'{escape(short(s.label))}</text></g>')
    return _svg(width, height, title, body, "curves")


def scatter(points: Sequence[Point], title: str, x_label: str = "paper", y_label: str = "ours") -> str:
    """Ours (y, with its 95% interval as a vertical bar) against the paper's value (x), on the same
    scale on both axes, with the diagonal y = x (agreement) drawn; one colour per ``group`` (metric)."""
    size, left, bottom, top, legend_h = 380, 58, 46, 14, 0
    groups = list(dict.fromkeys(p.group for p in points))
    legend_h = 16 * len(groups)
    width, height = size, size + legend_h
    values = [v for p in points for v in (p.x, p.y)]
    values += [p.y + s * p.half for p in points if math.isfinite(p.half) for s in (-1, 1)]
    low, high = _padded(values)
    x = _scale(low, high, left, size - 14)
    y = _scale(low, high, height - bottom, top + legend_h)
    axis_y = height - bottom
    grid = ticks(low, high)
    body = _x_axis(grid, x, axis_y, top + legend_h, x_label)
    body += _y_axis(grid, y, left, size - 14, y_label, (top + legend_h + axis_y) / 2)
    body.append(f'<line class="diagonal" x1="{x(low):.1f}" y1="{y(low):.1f}" x2="{x(high):.1f}" y2="{y(high):.1f}" '
                'stroke="#888" stroke-dasharray="4 3"/>')
    for i, group in enumerate(groups):
        colour, _ = style(i)
        body.append(f'<circle cx="{left + 6}" cy="{top + 16 * i + 4}" r="4" fill="{colour}"/>'
                    f'<text x="{left + 16}" y="{top + 16 * i + 8}" fill="#222">{escape(group)}</text>')
    for p in points:
        colour, _ = style(groups.index(p.group))
        bar = ""
        if math.isfinite(p.half):
            bar = (f'<line x1="{x(p.x):.1f}" y1="{y(p.y - p.half):.1f}" x2="{x(p.x):.1f}" y2="{y(p.y + p.half):.1f}" '
                   f'stroke="{colour}"/>')
        tip = f"{p.label}, {p.group}: ours {p.y:.4f}, {x_label} {p.x:.4f} ({(p.y / p.x - 1) * 100:+.1f}%)" \
            if p.x else f"{p.label}, {p.group}: ours {p.y:.4f}, {x_label} {p.x:.4f}"
        body.append(f'<g class="point"><title>{escape(tip)}</title>{bar}<circle cx="{x(p.x):.1f}" cy="{y(p.y):.1f}" '
                    f'r="3.5" fill="{colour}" fill-opacity="0.85"/></g>')
    return _svg(width, height, title, body, "scatter")
