"""The training-over-steps section of an HTML report: both loss curves, the loss-scale trajectory with the skipped
steps, per-parameter weight drift, and compare's departure (inline SVG, no scripts).  Stable hooks: ``#training``,
``#loss-plot``, ``#scale-plot`` (``line.skipped-step[data-step]``), ``#drift-plot``, ``#departure[data-step]``.
Renders the JSON documents of compare (``StepsVerdict.to_dict``) and ``compare.steps.steps_summary``."""
from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

from .svg import line_plot

MAX_DRIFT_SERIES = 6
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def skipped_strip(skipped: Sequence[bool], *, width: int = 760, svg_id: str = "skipped-steps") -> str:
    """A strip under the scale plot: one tick per skipped step, on the plot's x axis."""
    n = len(skipped)
    pad_l, pad_r, h = 56, 12, 18
    w = width - pad_l - pad_r
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}" class="plot" width="{width}" height="{h + 14}" '
             f'viewBox="0 0 {width} {h + 14}" role="img" aria-label="skipped steps">',
             f'<text x="4" y="{h - 4}" font-size="10">skipped</text>',
             f'<rect x="{pad_l}" y="2" width="{w}" height="{h}" fill="none" stroke="#ccc"/>']
    for i, s in enumerate(skipped):
        if s:
            x = pad_l + w * i / max(n - 1, 1)
            parts.append(f'<line class="skipped-step" data-step="{i}" x1="{x:.1f}" x2="{x:.1f}" y1="3" y2="{h + 1}" '
                         f'stroke="#b42318" stroke-width="1.5"/>')
    parts.append(f'<text x="{pad_l + w / 2}" y="{h + 13}" font-size="10" text-anchor="middle">'
                 f'{sum(map(bool, skipped))} of {n} steps skipped</text></svg>')
    return "".join(parts)


def training_section(verdict: Mapping, curves: Mapping) -> str:
    """``<section id="training">``: the summary, the departure and the three plots."""
    dep = verdict.get("departure")
    h = ['<section id="training"><h2>Training over steps</h2>', f'<p>{escape(str(verdict.get("summary", "")))}</p>']
    if dep:
        h.append(f'<p id="departure" data-step="{int(dep["step"])}" data-reason="{escape(str(dep["reason"]))}" '
                 f'data-precision="{str(bool(dep.get("precision"))).lower()}">first departure: step {int(dep["step"])} '
                 f'({escape(str(dep["reason"]))}) &middot; op {escape(str(dep.get("op") or "-"))} &middot; '
                 f'parameter {escape(str(dep.get("param") or "-"))}</p>')
    loss = {"FP32": curves.get("loss_fp32") or [], "mixed": curves.get("loss_mixed") or []}
    h.append(line_plot(loss, {"FP32": PALETTE[0], "mixed": PALETTE[1]}, title="loss (both runs)",
                       svg_id="loss-plot", y_label="loss (log10)", x_label="optimizer steps", floor=1e-12))
    h.append(line_plot({"scale": curves.get("scale") or []}, {"scale": PALETTE[2]}, title="loss scale",
                       svg_id="scale-plot", y_label="scale (log10)", x_label="optimizer steps", floor=1e-30))
    h.append(skipped_strip(curves.get("skipped") or []))
    drift = curves.get("drift") or {}
    worst = sorted(drift, key=lambda k: -max((v for v in drift[k] if v == v), default=0.0))[:MAX_DRIFT_SERIES]
    if worst:
        h.append(line_plot({k: drift[k] for k in worst}, {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(worst)},
                           title=f"weight drift from the FP32 run (the {len(worst)} largest)", svg_id="drift-plot",
                           y_label="drift (log10)", x_label="optimizer steps", floor=1e-9))
    h.append("</section>")
    return "".join(h)


__all__ = ["training_section", "skipped_strip"]
