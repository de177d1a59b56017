"""Self-contained HTML reports for ``advisor recommend`` and ``advisor diff``.

No scripts, no external resources: inline CSS and SVG.  Stable hooks for tests and headless
browsers: ``#summary``, ``#status[data-status]``, ``#edits`` with one ``.edit[data-type][data-kind]``
per edit (``.explanation``, ``table.flips``), ``#perf-edits``, ``#flipped`` (``table#flips-table``,
rows ``tr.flip[data-node]``), ``#error-plot`` (svg), ``#share-plot`` (svg, ``rect.share-bar``),
``#minimality``, ``#alternative``, ``#findings``, ``#snippets`` (``pre.snippet[data-target]``),
``#notes``, ``#list-changes`` (diff), ``#training`` (training over steps: ``report.training``).
"""
from __future__ import annotations

import json
import math
from html import escape
from typing import Any, Iterable, Mapping

from .svg import line_plot, share_bars
from .terminal import confirmation_text, measured_confirms
from .training import training_section

CSS = """dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:4px 0 8px 12px}
dl.kv dt{color:#555}dl.kv dd{margin:0}

body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
th{background:#f4f4f4}.ok{color:#1a7f37;font-weight:bold}.bad{color:#b42318;font-weight:bold}
.edit{border:1px solid #ccc;border-radius:6px;padding:8px 12px;margin:10px 0}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}code{font-size:12px}
.muted{color:#666;font-size:12px}
"""


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int,)):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        if math.isinf(x):
            return "inf"
        return f"{x:.{digits}g}"
    return escape(str(x))


def _table(rows: list[Mapping], cols: list[tuple[str, str]], table_id: str = "", cls: str = "",
           row_cls: str = "", row_key: str | None = None, limit: int = 500) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    h = [f'<table{f" id={chr(34)}{table_id}{chr(34)}" if table_id else ""}{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>',
         "<tr>" + "".join(f"<th>{escape(t)}</th>" for _, t in cols) + "</tr>"]
    for r in rows[:limit]:
        attrs = f' class="{row_cls}"' if row_cls else ""
        if row_key:
            attrs += f' data-{row_key}="{escape(str(r.get(row_key, "")))}"'
        h.append(f"<tr{attrs}>" + "".join(f"<td>{_cell(r, k)}</td>" for k, _ in cols) + "</tr>")
    if len(rows) > limit:
        h.append(f'<tr><td colspan="{len(cols)}" class="muted">... {len(rows) - limit} more</td></tr>')
    h.append("</table>")
    return "".join(h)


def _cell(r: Mapping, k: str) -> str:
    cur: Any = r
    for part in k.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return _f(cur)


FLIP_COLS = [("node", "op instance"), ("type", "type"), ("before", "before"), ("after", "after"),
             ("why_before.rule", "rule before"), ("why_after.rule", "rule after"), ("why_after.via", "decided via"),
             ("why_after.root", "root")]


def _pred_rows(pred: Mapping) -> list[dict]:
    rows = []
    for k in ("base", "recommended", "with_performance_edits", "a", "b"):
        p = pred.get(k)
        if isinstance(p, Mapping):
            rows.append({"plan": k, **p})
    return rows


PRED_COLS = [("plan", "plan"), ("final_rel_l2", "final rel-L2"), ("final_nonfinite", "non-finite"),
             ("final_cosine", "cosine"), ("time_us", "time (us)"), ("casts", "casts"),
             ("low_precision_share", "low-precision share")]


def _plots(curve: Mapping | None, tol: float | None, names: tuple[str, str] = ("before", "after")) -> str:
    if not curve:
        return '<p class="muted">no per-op data to plot</p>'
    series = {}
    if curve.get("measured"):
        series["measured"] = curve["measured"]
    if curve.get("before"):
        series[f"predicted {names[0]}"] = curve["before"]
    if curve.get("after"):
        series[f"predicted {names[1]}"] = curve["after"]
    colors = {"measured": "#888", f"predicted {names[0]}": "#b42318", f"predicted {names[1]}": "#1a7f37"}
    out = []
    if series:
        out.append(line_plot(series, colors, title="error along graph order", threshold=tol, svg_id="error-plot"))
    else:
        out.append('<p class="muted" id="error-plot-missing">no activations: error along the graph cannot be '
                   'predicted (flips and time only)</p>')
    out.append(share_bars([(f"{names[0]}", curve.get("share_before")), (f"{names[1]}", curve.get("share_after"))],
                          svg_id="share-plot", title="low-precision share of compute (time-weighted)"))
    out.append(f'<p class="muted">predicted time: {_f(curve.get("time_before"))} us &rarr; '
               f'{_f(curve.get("time_after"))} us</p>')
    return "".join(out)


def _snippets(sn: Mapping) -> str:
    if not sn:
        return ""
    out = []
    for k, v in sn.items():
        out.append(f'<h3>{escape(k)}</h3><pre class="snippet" data-target="{escape(k)}">{escape(str(v))}</pre>')
    return "".join(out)


def _edit_block(e: Mapping, cls: str) -> str:
    ev = e.get("evidence") or {}
    worst = ev.get("worst_instances") or []
    lvr = ev.get("local_vs_received") or {}
    h = [f'<div class="edit {cls}" data-type="{escape(e["type"])}" data-kind="{escape(e["kind"])}">',
         f'<h3><code>{escape(e["edit"])}</code></h3>',
         f'<p class="explanation">{escape(e.get("explanation", ""))}</p>',
         f'<p>predicted time change: {_f(e.get("predicted_time_change_us"))} us; '
         f'instances flipped: {_f(e.get("predicted_flip_count"))}</p>']
    if lvr:
        h.append(f'<p class="local-vs-received">{escape(e["type"])} instances: {lvr.get("instances")}; worst local '
                 f'error (op alone in low precision) {_f(lvr.get("worst_local_rel_l2"))}; worst received '
                 f'{_f(lvr.get("worst_received_rel_l2"))}; worst output {_f(lvr.get("worst_out_rel_l2"))}'
                 f'{"; non-finite when run alone in low precision" if lvr.get("any_local_nonfinite") else ""}</p>')
    if worst:
        h.append("<h4>worst instances</h4>")
        h.append(_table(worst, [("node", "instance"), ("type", "type"), ("precision_before", "before"),
                                ("precision_after", "after"), ("why_before.rule", "rule"), ("why_before.root", "root"),
                                ("local_rel_l2", "local"), ("local_nonfinite", "local non-finite"),
                                ("received_rel_l2", "received"), ("out_rel_l2", "output"),
                                ("inrnd_rel_l2", "inrnd"), ("contribution_to_final", "contribution")],
                        cls="worst"))
    wo = e.get("predicted_without_this_edit")
    if wo:
        h.append(f'<p class="without">without this edit: final rel-L2 {_f(wo.get("final_rel_l2"))}, '
                 f'non-finite {_f(wo.get("final_nonfinite"))}</p>')
    h.append("<h4>flipped instances</h4>")
    h.append(_table(e.get("predicted_flips") or [], FLIP_COLS, cls="flips", row_cls="flip", row_key="node"))
    h.append("</div>")
    return "".join(h)


def render_recommendation(d: Mapping, curve: Mapping | None = None, title: str = "advisor recommend") -> str:
    status = d.get("status", "")
    ok = d.get("ok")
    tol = (d.get("tolerance") or {}).get("rel_l2_max")
    flips = [f for e in d.get("edits", []) for f in (e.get("predicted_flips") or [])]
    body = [
        f"<h1>{escape(title)}</h1>",
        '<section id="summary">',
        f'<p id="status" data-status="{escape(status)}">status: <span class="{"ok" if ok else "bad"}">'
        f'{escape(status)}</span> &middot; model predicts tolerance {"met" if ok else "not met"} &middot; '
        f'<span id="confirmed" data-confirmed="{str(bool(d.get("confirmed")) or measured_confirms(d)).lower()}">'
        f'{escape(confirmation_text(d))}</span></p>',
        f'<p>mode {escape(str(d.get("mode")))}, soc {escape(str(d.get("soc")))}; tolerance: rel-L2 &le; '
        f'{_f(tol)}, cosine &ge; {_f((d.get("tolerance") or {}).get("cosine_min"))}, finite outputs</p>',
        _table(_pred_rows(d.get("predicted") or {}), PRED_COLS, table_id="prediction"),
        "<h3>modify_mixlist.json</h3>",
        f'<pre id="mixlist">{escape(json.dumps(d.get("modify_mixlist"), indent=2))}</pre>',
        "</section>",
        '<section id="edits"><h2>Edits</h2>',
        "".join(_edit_block(e, "fix") for e in d.get("edits", [])) or '<p class="muted">no accuracy edit</p>',
        "</section>",
        '<section id="perf-edits"><h2>Performance edits</h2>',
        "".join(_edit_block(e, "perf") for e in d.get("performance_edits", [])) or
        '<p class="muted">none proposed</p>',
        "</section>",
        '<section id="flipped"><h2>Flipped op instances</h2>',
        _table(flips, FLIP_COLS, table_id="flips-table", row_cls="flip", row_key="node"),
        "</section>",
        '<section id="plots"><h2>Error and precision share</h2>', _plots(curve, tol), "</section>",
        '<section id="minimality"><h2>Minimality</h2>',
        f'<p data-proved="{str(bool((d.get("minimality") or {}).get("proved"))).lower()}">'
        f'{escape(str((d.get("minimality") or {}).get("statement", "not applicable")))}</p>',
        _table(minimality_rows(d), [("edit", "edit removed"), ("rel_l2", "rel-L2 without it"),
                                    ("nonfinite", "non-finite"), ("how", "how"),
                                    ("meets_tolerance_without_it", "meets tolerance")]),
        "</section>",
        '<section id="alternative"><h2>Alternatives</h2>',
        _alt(d), "</section>",
        '<section id="findings"><h2>Findings</h2>', _findings(d.get("findings") or []), "</section>",
        '<section id="loss-scale"><h2>Loss scale</h2>',
        f'<pre>{escape(json.dumps(d.get("loss_scale"), indent=2))}</pre>' if d.get("loss_scale") else
        '<p class="muted">no gradients analysed</p>', "</section>",
        '<section id="snippets"><h2>Deployment</h2>', _snippets(d.get("snippets") or {}), "</section>",
        training_section(d["training_steps"], d["training_curves"]) if d.get("training_curves") else "",
        '<section id="notes"><h2>Notes</h2>',
        "".join(f"<p>{escape(str(n))}</p>" for n in d.get("notes") or []) or '<p class="muted">none</p>',
        f'<p class="muted">calibration: {escape(_fields_text(d["calibration"]))}</p>' if d.get("calibration") else "",
        f'<p class="muted" id="search">search: {escape(search_text(d.get("search") or {}))}</p>',
        "</section>",
    ]
    return _page(title, body)


def minimality_rows(d: Mapping) -> list[dict]:
    """One row per minimality check: the final error without the edit, from the check itself (its replay says
    ``worst_rel_l2`` / ``non_finite``, the error model ``final_rel_l2`` / ``final_nonfinite``) or else from the
    edit's own ``predicted_without_this_edit`` -- the number the edit's section shows."""
    without = {e.get("edit"): e.get("predicted_without_this_edit") or {} for e in d.get("edits") or []}
    rows = []
    for c in (d.get("minimality") or {}).get("checks") or []:
        w = c.get("without_it") or {}
        nonfinite = next((x for x in (w.get("final_nonfinite"), w.get("non_finite")) if x is not None), None)
        rel = next((x for x in (w.get("final_rel_l2"), w.get("worst_rel_l2")) if x is not None), None)
        if rel is None and nonfinite is None:     # the check carries no figure: the edit's own section's
            own = without.get(c.get("edit")) or {}
            rel, nonfinite = own.get("final_rel_l2"), own.get("final_nonfinite")
        rows.append({"edit": c.get("edit"), "rel_l2": "inf" if rel is None and nonfinite else rel,
                     "nonfinite": nonfinite, "how": c.get("how") or w.get("how"),
                     "meets_tolerance_without_it": c.get("meets_tolerance_without_it")})
    return rows


_SEARCH_WORDS = (("method", "{} search"), ("phase", "{} phase"), ("enumerated", "{} edit sets enumerated"),
                 ("candidates", "{} candidate types"), ("replays", "{} replays"), ("evaluations", "{} evaluations"),
                 ("max_edits", "at most {} edits per set"), ("budget", "budget {}"))


def search_text(search: Mapping) -> str:
    """The search's figures as a sentence, without its timing (``fsutil.TIMING_KEYS``: the same inputs give the
    same report)."""
    from ..fsutil import TIMING_KEYS
    parts = [fmt.format(search[k]) for k, fmt in _SEARCH_WORDS if search.get(k) is not None]
    if search.get("truncated"):
        parts.append("stopped at its budget")
    known = {k for k, _ in _SEARCH_WORDS} | {"truncated"} | TIMING_KEYS
    parts += [f"{k.replace('_', ' ')} {v}" for k, v in search.items() if k not in known and v is not None]
    return ", ".join(parts) or "none"


def _fields_text(fields: Mapping) -> str:
    from ..fsutil import without_timing
    return "; ".join(f"{k.replace('_', ' ')}: {json.dumps(v) if isinstance(v, (dict, list)) else v}"
                     for k, v in without_timing(dict(fields)).items())


def _alt(d: Mapping) -> str:
    out = []
    a = d.get("fewest_edit_alternative")
    if a:
        out.append(f'<p class="fewest">fewest-edit alternative: <code>{escape(", ".join(a["edits"]))}</code> '
                   f'(predicted rel-L2 {_f(a["predicted"].get("final_rel_l2"))}, low-precision share '
                   f'{_f(a["predicted"].get("low_precision_share"))}) &mdash; {escape(a.get("note", ""))}</p>')
    tl = d.get("type_level_alternative")
    if tl:
        out.append(f'<p class="fewest">type-level alternative: <code>{escape(", ".join(tl["edits"]))}</code> '
                   f'(low-precision share {_f(tl["predicted"].get("low_precision_share"))}) &mdash; '
                   f'{escape(tl.get("note", ""))}</p>')
    c = d.get("closest")
    if c:
        out.append(f'<p class="closest">closest: <code>{escape(", ".join(c["edits"]) or "(no edit)")}</code> '
                   f'predicted rel-L2 {_f(c["predicted"].get("final_rel_l2"))}, non-finite '
                   f'{_f(c["predicted"].get("final_nonfinite"))} &mdash; {escape(c.get("note", ""))}</p>')
    return "".join(out) or '<p class="muted">the recommendation is also the fewest-edit solution</p>'


def _findings(fs: list[Mapping]) -> str:
    if not fs:
        return '<p class="muted">none</p>'
    out = ["<ul>"]
    for f in fs:
        kind = f.get("kind", "")
        rest = {k: v for k, v in f.items() if k != "kind"}
        out.append(f'<li class="finding" data-kind="{escape(str(kind))}"><b>{escape(str(kind))}</b>'
                   f'{_kv(rest)}</li>')
    out.append("</ul>")
    return "".join(out)


def _kv(d: Mapping) -> str:
    """A finding's fields as a small definition list; lists of records as tables."""
    parts = ['<dl class="kv">']
    for k, v in d.items():
        if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            cols = list(dict.fromkeys(c for x in v for c in x))
            body = _table(list(v), [(c, c.replace("_", " ")) for c in cols])
        elif isinstance(v, Mapping):
            body = _kv(v)
        elif isinstance(v, float):
            body = escape(f"{v:.4g}")
        else:
            body = escape(json.dumps(v, default=str) if isinstance(v, (list, tuple)) else str(v))
        parts.append(f"<dt>{escape(str(k).replace('_', ' '))}</dt><dd>{body}</dd>")
    parts.append("</dl>")
    return "".join(parts)


def _page(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def render_training(verdict: Mapping, curves: Mapping, title: str = "advisor compare: training steps") -> str:
    """A page of its own for compare over training steps (``advisor compare --html``)."""
    return _page(title, [f"<h1>{escape(title)}</h1>", training_section(verdict, curves)])


def render_diff(d: Mapping, curve: Mapping | None = None, title: str = "advisor diff") -> str:
    changes = [{"type": t, "a": v[0], "b": v[1]} for t, v in (d.get("list_changes") or {}).items()]
    tol = (d.get("tolerance") or {}).get("rel_l2_max")
    body = [
        f"<h1>{escape(title)}</h1>",
        '<section id="summary">',
        f'<p>A: <code>{escape(str(d.get("a")))}</code> &nbsp; B: <code>{escape(str(d.get("b")))}</code></p>',
        _table(_pred_rows(d.get("predicted") or {}), PRED_COLS, table_id="prediction"),
        "</section>",
        '<section id="list-changes"><h2>Effective list changes</h2>',
        _table(changes, [("type", "type"), ("a", "list in A"), ("b", "list in B")], table_id="changes-table",
               row_cls="change", row_key="type"),
        "</section>",
        '<section id="flipped"><h2>Flipped op instances</h2>',
        f'<p>{_f(d.get("flip_count"))} instance(s) flip</p>',
        _table(d.get("flips") or [], FLIP_COLS, table_id="flips-table", row_cls="flip", row_key="node"),
        "</section>",
        '<section id="plots"><h2>Error and precision share</h2>', _plots(curve, tol, ("A", "B")), "</section>",
        '<section id="notes"><h2>Notes</h2>',
        "".join(f"<p>{escape(str(n))}</p>" for n in d.get("notes") or []) or '<p class="muted">none</p>',
        "</section>",
    ]
    return _page(title, body)
