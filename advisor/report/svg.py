"""Tiny inline-SVG plots (no JavaScript, no network)."""
from __future__ import annotations

import math
from html import escape
from typing import Sequence


def _log(v: float | None, floor: float) -> float | None:
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    if math.isinf(v):
        return None
    return math.log10(max(v, floor))


def _nonfinite(v: object) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("inf", "+inf", "-inf", "nan", "infinity")
    return isinstance(v, float) and (math.isinf(v) or math.isnan(v))


def line_plot(series: dict[str, Sequence[float | None]], colors: dict[str, str], *, width: int = 760,
              height: int = 240, title: str = "", threshold: float | None = None, svg_id: str = "",
              y_label: str = "rel. L2 (log10)", floor: float = 1e-8, x_label: str = "ops in graph order",
              markers: bool | None = None) -> str:
    """Log-scale line plot of several series against their index (graph order by default).  Non-finite
    values (inf, or the strings "inf"/"nan" of a JSON round trip) are drawn as a dot on the top edge;
    None is a gap.  ``markers`` (default: when there are at most 40 points) draws every point."""
    n = max((len(s) for s in series.values() if s), default=0)
    if markers is None:
        markers = n <= 40
    pad_l, pad_r, pad_t, pad_b = 56, 12, 24, 30
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    vals = [_log(v, floor) for s in series.values() if s for v in s]
    vals = [v for v in vals if v is not None]
    if threshold:
        vals.append(math.log10(threshold))
    lo = min(vals) if vals else -8.0
    hi = max(vals) if vals else 0.0
    lo, hi = math.floor(lo), math.ceil(hi + 1e-9)
    if hi <= lo:
        hi = lo + 1

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad_l + (w * i / max(n - 1, 1))
        y = pad_t + h - (v - lo) / (hi - lo) * h
        return x, y

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(svg_id)}" class="plot" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="{pad_l}" y="14" font-size="12" font-weight="bold">{escape(title)}</text>',
             f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for k in range(lo, hi + 1):
        _, y = xy(0, k)
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{pad_l - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">1e{k}</text>')
    if threshold:
        _, y = xy(0, math.log10(threshold))
        parts.append(f'<line class="threshold" x1="{pad_l}" x2="{pad_l + w}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#c00" stroke-dasharray="4 3"/>')
    for name, s in series.items():
        if not s:
            continue
        pts, segs = [], []
        for i, v in enumerate(s):
            lv = _log(v, floor)
            if lv is None:
                if pts:
                    segs.append(pts)
                    pts = []
                if _nonfinite(v):
                    x, _ = xy(i, hi)
                    parts.append(f'<circle class="nonfinite" cx="{x:.1f}" cy="{pad_t + 3}" r="3" '
                                 f'fill="{colors.get(name, "#000")}"/>')
                continue
            pts.append(xy(i, lv))
        if pts:
            segs.append(pts)
        for seg in segs:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
            parts.append(f'<polyline class="series series-{escape(name)}" points="{d}" fill="none" '
                         f'stroke="{colors.get(name, "#000")}" stroke-width="1.5"/>')
            if markers or len(seg) == 1:
                parts.extend(f'<circle class="point series-{escape(name)}" cx="{x:.1f}" cy="{y:.1f}" r="3" '
                             f'fill="{colors.get(name, "#000")}"/>' for x, y in seg)
    lx = pad_l + 8
    for name in series:
        parts.append(f'<rect x="{lx}" y="{pad_t + 6}" width="10" height="3" fill="{colors.get(name, "#000")}"/>')
        parts.append(f'<text x="{lx + 14}" y="{pad_t + 11}" font-size="10">{escape(name)}</text>')
        lx += 14 + 7 * len(name) + 12
    parts.append(f'<text x="{pad_l + w / 2}" y="{height - 6}" font-size="10" text-anchor="middle">'
                 f'{escape(x_label)} ({n} points)</text>')
    parts.append(f'<text x="12" y="{pad_t + h / 2}" font-size="10" transform="rotate(-90 12 {pad_t + h / 2})" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def share_bars(rows: list[tuple[str, float]], *, width: int = 420, svg_id: str = "", title: str = "") -> str:
    """Horizontal bars of low-precision share (0..1), one per row label."""
    bar_h, gap, pad_l = 18, 8, 110
    height = 24 + len(rows) * (bar_h + gap)
    w = width - pad_l - 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(svg_id)}" class="plot" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="14" font-size="12" font-weight="bold">{escape(title)}</text>']
    for k, (label, v) in enumerate(rows):
        y = 24 + k * (bar_h + gap)
        v = 0.0 if v is None or not math.isfinite(v) else max(0.0, min(1.0, v))
        parts.append(f'<text x="{pad_l - 6}" y="{y + 13}" font-size="11" text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect x="{pad_l}" y="{y}" width="{w}" height="{bar_h}" fill="#f3d2cf"/>')
        parts.append(f'<rect class="share-bar" data-label="{escape(label)}" data-share="{v:.6f}" x="{pad_l}" '
                     f'y="{y}" width="{w * v:.1f}" height="{bar_h}" fill="#4a8f4a"/>')
        parts.append(f'<text x="{pad_l + w + 4}" y="{y + 13}" font-size="11">{100 * v:.1f}%</text>')
    parts.append("</svg>")
    return "".join(parts)
