"""tune's report.html: verdict, the final list, every iteration (edits, predicted vs measured, verdicts), the
error and low-precision-share plots.  It links into ``iter_NN/`` and must stay beside those folders."""
from __future__ import annotations

import html
import json
from pathlib import Path

from ..compare.training import scale_text
from .html import CSS
from .svg import line_plot, share_bars


def render_html(s: dict, out: Path | None = None) -> str:
    """HTML with everything inline (verdict, final list, every iteration's edits, verdicts and all
    their reasons, figures, error and low-precision-share plots from advisor.report's SVG) except the
    links to each iteration's files, relative to the page: it stays beside its ``iter_NN/`` folders.
    Hooks: ``#summary``, ``#status[data-status]``, ``table#iterations`` with ``tr.iteration
    [data-iteration][data-ok]``, ``#links-note``, ``#error-plot``, ``#share-plot``, ``#mixlist``, ``#excluded``."""
    e = html.escape
    rows = [_iteration_row(h, out) for h in s["history"]]
    status = "confirmed" if s["confirmed"] else "not-confirmed"
    verdict = "confirmed" if s["confirmed"] else "NOT confirmed"
    ml = json.dumps(s["edits"], indent=2)
    excl = "".join(f"<li>{e(json.dumps(x['edits']))}: {e(x['why'])}</li>" for x in s["excluded"]) or "<li>none</li>"
    eff = s.get("learning", {}).get("edit_effects") or {}
    eff_html = "".join(f"<tr><td><code>{e(k)}</code></td><td>{v:+.4g}</td></tr>" for k, v in sorted(eff.items()))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>advisor tune</title><style>{CSS}
tr.ok td{{background:#eef8ee}}tr.bad td{{background:#fbeeee}}</style></head><body>
<h1>advisor tune: <span id="status" data-status="{status}" class="{'ok' if s['confirmed'] else 'bad'}">{verdict}</span></h1>
{_summary(s)}
<h2>modify_mixlist.json</h2><pre id="mixlist">{e(ml)}</pre>
{_keep_html(s)}
<h2>Iterations</h2><p id="links-note" class="muted">Everything on this page is inline except the links in the
folder column: they point into the <code>iter_NN/</code> folders beside this file (comparison, recommendation,
final metrics, logs), so keep report.html in the tune folder with them.</p>
<table id="iterations">{_HEAD}{''.join(rows)}</table>
{_plots(s)}
<h2>Excluded edit sets</h2><ul id="excluded">{excl}</ul>
<h2>Learned edit effects</h2><p class="muted">ridge regression of the measured final relative L2 on edit
indicators (finite runs only); negative = the edit removed error</p><table id="effects">{eff_html or '<tr><td>none yet</td></tr>'}</table>
</body></html>
"""


def _fmt(x, spec=".4g"):
    """A table cell: "–" for none, yes/no, a float in ``spec``, else the escaped text."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return format(x, spec)
    return html.escape(str(x))


def _keep_html(s: dict) -> str:
    """keep_dtype.cfg and customize_dtypes.cfg of the confirmed list (per-op advice), when it has them."""
    out = ""
    for name in ("keep_dtype", "customize_dtypes"):
        lines = s.get(name) or []
        if lines:
            out += (f'<h2>{name}.cfg</h2><pre id="{name}">' + html.escape("".join(f"{ln}\n" for ln in lines))
                    + "</pre>")
    return out


def _edits_txt(ed: dict, keeps: list | None = None, customs: list | None = None) -> str:
    """An iteration's list edits against the default lists, one per line."""
    parts = []
    for lst, v in ed.items():
        for action in ("to-add", "to-remove"):
            for t in v.get(action, []):
                parts.append(f"{lst} {action} <code>{html.escape(t)}</code>")
    parts += [f"keep_dtype <code>{html.escape(ln)}</code>" for ln in keeps or []]
    parts += [f"customize_dtypes <code>{html.escape(ln)}</code>" for ln in customs or []]
    return "<br>".join(parts) or "<i>default lists</i>"


def _links(h: dict, out: Path | None) -> str:
    """Links to an iteration's files (only those that exist when the tune folder ``out`` is known)."""
    out_l = []
    for rel, label in (("recommendation/report.html", "recommendation"), ("comparison/comparison.json",
                       "comparison"), ("final_metrics.json", "final metrics"), ("stdout.txt", "stdout"),
                       ("stderr.txt", "stderr")):
        p = f"{h['dir']}/{rel}"
        if out is None or (out / p).exists():
            out_l.append(f"<a href='{html.escape(p)}'>{label}</a>")
    return " · ".join(out_l)


def _reasons(h: dict) -> str:
    """An iteration's first three reasons (else its message), the rest folded."""
    rs = [html.escape(r) for r in h["reasons"]] or [html.escape(h["message"])]
    more = f"<details><summary>{len(rs) - 3} more</summary>{'<br>'.join(rs[3:])}</details>" if len(rs) > 3 else ""
    return "<br>".join(rs[:3]) + more


def _prediction(h: dict) -> str:
    """What was predicted for the iteration's run (pass/fail and how), flagged when the run missed it."""
    p = h["predicted"] or {}
    if "ok" not in p:
        return "–"
    txt = f"{'pass' if p['ok'] else 'fail'} ({html.escape(str(p.get('how') or 'estimated'))})"
    return f"<span class='bad' data-miss='true'>{txt}: MISS</span>" if h.get("miss") else txt


_HEAD = ("<tr><th>#</th><th>folder</th><th>why this run</th><th>edits vs default</th><th>run</th><th>pass</th>"
         "<th>calibration</th><th>held-out</th><th>cosine (min)</th><th>rel L2 (max)</th><th>finite</th>"
         "<th>low-precision time</th><th>predicted</th><th>predicted rel L2</th><th>runs so far</th><th>notes</th></tr>")


def _iteration_row(h: dict, out: Path | None) -> str:
    """One ``tr.iteration`` of the iterations table."""
    e = html.escape
    cls = "ok" if h["ok"] else ("pending" if h["ok"] is None else "bad")
    return (
        f"<tr class='iteration {cls}' data-iteration='{h['iteration']}' data-ok='{str(bool(h['ok'])).lower()}'>"
        f"<td>{h['iteration']}</td><td>{e(h['dir'])}<br>{_links(h, out)}</td><td>{e(h['reason'])}</td>"
        f"<td>{_edits_txt(h['edits'], h.get('keep_dtype'), h.get('customize_dtypes'))}</td><td>{e(h['status'])}</td><td class='{cls}'>{_fmt(h['ok'])}</td>"
        f"<td>{_fmt(h['calibration_ok'])}</td><td>{_fmt(h['holdout_ok'])}</td><td>{_fmt(h['cosine'], '.6f')}</td>"
        f"<td>{_fmt(h['rel_l2'])}</td><td>{_fmt(h['finite'])}</td><td>{_fmt(h['low_precision_time_share'], '.1%')}</td>"
        f"<td>{_prediction(h)}</td><td>{_fmt((h['predicted'] or {}).get('rel_l2'))}</td><td>{_fmt(h['runs_after'])}</td>"
        f"<td>{_reasons(h)}</td></tr>")


def _plots(s: dict) -> str:
    """The error plot (measured and predicted final relative L2 per iteration) and the low-precision
    share bars; empty before the first iteration."""
    plots = ""
    if s["history"]:
        tol = (s.get("tolerance") or {}).get("max_rel_l2")
        meas = [h["rel_l2"] if h["finite"] is not False else float("inf") for h in s["history"]]
        pred = [(h["predicted"] or {}).get("rel_l2") for h in s["history"]]
        plots += "<div id='error-plot-wrap'>" + line_plot(
            {"measured": meas, "predicted": pred}, {"measured": "#1f6feb", "predicted": "#d29922"},
            title="final relative L2 per iteration (dot on the top edge: non-finite; gap: not run)", threshold=tol,
            svg_id="error-plot", y_label="rel. L2 (log10)", x_label="iteration") + "</div>"
        bars = [(h["dir"], h["low_precision_time_share"]) for h in s["history"]
                if h["low_precision_time_share"] is not None]
        if bars:
            plots += share_bars(bars, svg_id="share-plot", title="low-precision kernel time share")
    return plots


def _summary(s: dict) -> str:
    """``#summary``: why tuning stopped, the runs it took, the final metrics, minimality and how the
    predictions fared."""
    e = html.escape
    f = s["final"]
    mn = s.get("minimality") or {}
    pr = s.get("predictions") or {}
    ls = (f'\n<p id="loss-scale">with the static loss scale <b>{e(scale_text(s["loss_scale"]))}</b>: train with it '
          '(the list alone does not pass)</p>' if s.get("loss_scale") is not None else "")
    return f"""<div id="summary"><p>{e(s.get('stop_reason', ''))}</p>
<p>runs: <b>{s['runs']}</b> of {s['max_runs']} ({e(s['run_counting'])}); runner calls {s['captures']},
model executions {s['executions']}; mode {e(s['mode'])}; held-out steps {e(str(s.get('holdout_steps')))}</p>
<p>final (iteration {_fmt(s['best_iteration'])}): cosine {_fmt(f['cosine'], '.6f')}, relative L2 {_fmt(f['rel_l2'])},
finite {_fmt(f['finite'])}; low-precision time share {_fmt(s['low_precision_time_share'], '.1%')}</p>{ls}
<p id="minimality" data-proved="{str(bool(mn.get('proved'))).lower()}">{e(mn.get('statement', ''))}</p>
<p id="predictions">predictions checked by a run: {pr.get('runs_with_a_prediction', 0)}; misses {pr.get('misses', 0)};
replayed {pr.get('replayed', 0)} with {pr.get('replay_misses', 0)} misses (miss rate {_fmt(pr.get('replay_miss_rate'), '.0%')})</p></div>"""
