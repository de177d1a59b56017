"""Terminal summaries (rich) for recommend and diff."""
from __future__ import annotations

import math
from typing import Any, Mapping

from rich.console import Console
from rich.table import Table

from ..compare.training import scale_text


def _f(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return f"{x:.3g}"
    return str(x)


def _pred_table(pred: Mapping, keys=("measured", "base", "recommended", "with_performance_edits", "a", "b")) -> Table:
    t = Table(title="prediction (final error: how says measured / replayed / estimated; time and share: cost "
                    "model anchored to the profile)")
    for c in ("plan", "final rel-L2", "non-finite", "how", "time us", "casts", "low-prec share"):
        t.add_column(c)
    for k in keys:
        p = pred.get(k)
        if isinstance(p, Mapping):
            t.add_row(k, _f(p.get("final_rel_l2")), _f(p.get("final_nonfinite")), str(p.get("how") or "estimated"),
                      _f(p.get("time_us")), _f(p.get("casts")), _f(p.get("low_precision_share")))
    return t


def measured_confirms(d: Mapping) -> bool:
    """The advice needs no re-run: nothing is to change and the measured run itself meets the tolerance."""
    m = (d.get("predicted") or {}).get("measured") or {}
    return d.get("status") == "no-change-needed" and m.get("how") == "measured" and m.get("meets_tolerance") is True


def confirmation_text(d: Mapping) -> str:
    """How far a recommendation is confirmed, in words (terminal and report.html)."""
    if d.get("confirmed"):
        return "confirmed by a re-run"
    if measured_confirms(d):
        return "confirmed by the measured run (it meets the tolerance as it is)"
    return "unconfirmed until a re-run"


def print_recommendation(d: Mapping, console: Console | None = None, paths: Mapping | None = None) -> None:
    con = console or Console(stderr=False)
    status = d.get("status")
    style = "green" if d.get("ok") else ("yellow" if status == "profile-only" else "red")
    con.print(f"[bold]advisor recommend[/bold]: [{style}]{status}[/{style}] "
              f"(mode {d.get('mode')}, soc {d.get('soc')}; {confirmation_text(d)})")
    con.print(_pred_table(d.get("predicted") or {}))
    edits = d.get("edits") or []
    if edits:
        t = Table(title="edits")
        for c in ("edit", "flips", "time change us", "why"):
            t.add_column(c, overflow="fold")
        for e in edits:
            t.add_row(e["edit"], str(e.get("predicted_flip_count")), _f(e.get("predicted_time_change_us")),
                      e.get("explanation", ""))
        con.print(t)
    elif status == "no-change-needed":
        con.print("no accuracy edit needed: " + ("the measured run meets the tolerance" if measured_confirms(d)
                                                 else "the model predicts the run meets the tolerance"))
    for e in d.get("performance_edits") or []:
        con.print(f"performance: [cyan]{e['edit']}[/cyan] ({_f(e.get('predicted_time_change_us'))} us)")
    m = d.get("minimality") or {}
    if m.get("statement") and edits:
        con.print(f"minimality: {m['statement']}")
    a = d.get("fewest_edit_alternative")
    if a:
        con.print(f"fewest-edit alternative: {', '.join(a['edits'])}")
    tl = d.get("type_level_alternative")
    if tl:
        con.print(f"type-level alternative (where per-op files are not accepted): {', '.join(tl['edits'])} -> "
                  f"low-precision share {_f(tl['predicted'].get('low_precision_share'))} ({tl.get('how')}; the "
                  f"advice above keeps {_f((d.get('predicted') or {}).get('recommended', {}).get('low_precision_share'))})")
    _print_policy(con, d.get("precision_policy"))
    c = d.get("closest")
    if c:
        con.print(f"[red]no edit set within limits meets the tolerance[/red]; closest: "
                  f"{', '.join(c['edits']) or '(no edit)'} -> rel-L2 {_f(c['predicted'].get('final_rel_l2'))}"
                  f"{' (non-finite)' if c['predicted'].get('final_nonfinite') else ''}")
    for n in d.get("notes") or []:
        con.print(f"[yellow]note[/yellow]: {n}")
    if paths:
        for k, p in paths.items():
            con.print(f"{k}: {p}")


def _print_policy(con: Console, p: Mapping | None) -> None:
    """A torch_npu recommendation's policy edits (recommendation.json ``precision_policy``)."""
    if not p:
        return
    if p.get("edits"):
        t = Table(title=f"policy edits (torch_npu, amp {p.get('amp')})")
        for c in ("edit", "flips", "time change us", "why"):
            t.add_column(c, overflow="fold")
        for e in p["edits"]:
            t.add_row(e["edit"], str(e.get("predicted_flip_count")), _f(e.get("predicted_time_change_us")),
                      e.get("explanation", ""))
        con.print(t)
    else:
        con.print(f"precision policy unchanged (torch_npu, amp {p.get('amp')})")


def print_diff(d: Mapping, console: Console | None = None, paths: Mapping | None = None) -> None:
    con = console or Console()
    con.print(f"[bold]advisor diff[/bold]: {d.get('a')} -> {d.get('b')}")
    ch = d.get("list_changes") or {}
    if ch:
        t = Table(title="effective list changes")
        for c in ("type", "A", "B"):
            t.add_column(c)
        for ty, (x, y) in ch.items():
            t.add_row(ty, x, y)
        con.print(t)
    else:
        con.print("no effective list change")
    fl = d.get("flips") or []
    t = Table(title=f"{d.get('flip_count', len(fl))} flipped instance(s)")
    for c in ("instance", "type", "A", "B", "rule in B", "via", "root"):
        t.add_column(c, overflow="fold")
    for f in fl[:40]:
        wa = f.get("why_after") or {}
        t.add_row(f["node"], f["type"], f["before"], f["after"],
                  *("" if wa.get(k) is None else str(wa[k]) for k in ("rule", "via", "root")))
    con.print(t)
    con.print(_pred_table(d.get("predicted") or {}, keys=("a", "b")))
    for n in d.get("notes") or []:
        con.print(f"[yellow]note[/yellow]: {n}")
    if paths:
        for k, p in paths.items():
            con.print(f"{k}: {p}")


def print_replay(d: Mapping, console: Console | None = None) -> None:
    """``advisor replay``: the predicted verdict per step, how it was obtained, and the coverage."""
    con = console or Console()
    v = d.get("verdict") or {}
    style = "green" if v.get("ok") else "red"
    con.print(f"[bold]advisor replay[/bold]: [{style}]{'WITHIN' if v.get('ok') else 'OUTSIDE'} TOLERANCE[/{style}] "
              f"({d.get('how')}; mode {d.get('mode')})")
    t = Table(title="final outputs per step (replayed)")
    for c in ("step", "cosine", "rel-L2", "finite", "loss rel diff", "grad min cosine"):
        t.add_column(c)
    for s in d.get("steps") or []:
        o = s.get("output") or {}
        t.add_row(str(s.get("step")), _f(o.get("cosine")), _f(o.get("rel_l2")), _f(o.get("finite")),
                  _f((s.get("loss") or {}).get("rel_diff")), _f(s.get("grad_min_cosine")))
    con.print(t)
    cov = d.get("coverage") or {}
    con.print(f"coverage: {cov.get('replayed')} of {cov.get('needed')} ops that had to run again were replayed "
              f"({_f(cov.get('coverage'))}); {cov.get('seconds')} s")
    for e, why in list((cov.get("not_replayed") or {}).items())[:10]:
        con.print(f"  not replayed: {e}: {why}")
    sh = d.get("low_precision_share") or {}
    con.print(f"low-precision share of kernel time: {_f(sh.get('value'))} ({sh.get('how')})")
    for r in v.get("reasons") or []:
        con.print(f"  [red]{r}[/red]")


def print_policy_tune(s: Mapping, out: str, console: Console | None = None) -> None:
    """``advisor tune --engine torch_npu``: one line per run (its policy, measured verdicts), then the verdict."""
    con = console or Console(highlight=False)
    for h in s.get("history") or []:
        mark = "PASS" if h.get("ok") else "fail"
        cal, held = h.get("calibration") or {}, h.get("held_out") or {}
        con.print(f"{h['iteration']} {mark}  {'; '.join(h.get('rules') or []) or '(policy unchanged)'}  calibration "
                  f"rel-L2 {_f(cal.get('final_rel_l2'))}" + (f", held-out rel-L2 {_f(held.get('final_rel_l2'))}"
                                                             if held else "") + f" (run {h.get('status')})")
    if s.get("confirmed"):
        con.print(f"[green]confirmed[/green] by measurement in {s['runs']} run(s): {out}/precision_policy.json")
    else:
        con.print(f"[red]not confirmed[/red] within {s.get('max_runs')} run(s)")


def print_tune_summary(s: Mapping, out: str, console: Console | None = None) -> None:
    """``advisor tune``: one line per run (verdict, measured and predicted error, share), then the verdict,
    the minimality by measurement and how often the predictions were wrong."""
    con = console or Console(highlight=False)
    for h in s["history"]:
        ed = [f"{lst[:5]} {a} {t}" for lst, v in h["edits"].items() for a in ("to-add", "to-remove") for t in v[a]]
        ed += [f"keep_dtype {ln}" for ln in h.get("keep_dtype") or []]
        ed += [f"customize_dtypes {ln}" for ln in h.get("customize_dtypes") or []]
        mark = "PASS" if h["ok"] else ("----" if h["ok"] is None else "fail")
        p = h.get("predicted") or {}
        pred = ""
        if "ok" in p:
            pred = f"  predicted {'pass' if p['ok'] else 'fail'} ({p.get('how') or 'estimated'})"
            pred += " MISS" if h.get("miss") else ""
        scale = f", loss scale {scale_text(h['loss_scale'])}" if h.get("loss_scale") is not None else ""
        con.print(f"  {h['dir']}  {mark}  cos {_f6(h['cosine'])}  relL2 {_f(h['rel_l2'])}  "
                  f"low-prec time {_pct(h['low_precision_time_share'])}{pred}  [{', '.join(ed) or 'default lists'}"
                  f"{scale}]  ({h['reason']})", markup=False)
        if h["ok"] is False and h["reasons"]:
            more = f" (+{len(h['reasons']) - 1} more)" if len(h["reasons"]) > 1 else ""
            con.print(f"      {h['reasons'][0]}{more}", markup=False)
    verdict = "confirmed" if s["confirmed"] else "NOT confirmed"
    con.print(f"{verdict} after {s['runs']} runs (FP32 reference included): {s['stop_reason']}", markup=False)
    if s.get("loss_scale") is not None:
        con.print(f"with the static loss scale {scale_text(s['loss_scale'])} (train with it: the list alone does not pass)",
                  markup=False)
    mn = s.get("minimality") or {}
    if s["confirmed"] and mn.get("statement"):
        con.print(f"minimality: {mn['statement']}", markup=False)
    pr = s.get("predictions") or {}
    if pr.get("runs_with_a_prediction"):
        rate = pr.get("replay_miss_rate")
        con.print(f"predictions: {pr['runs_with_a_prediction']} checked by a run, {pr['misses']} wrong"
                  + (f"; replay miss rate {rate:.0%}" if rate is not None else ""), markup=False)
    keep = f", {out}/keep_dtype.cfg" if s.get("keep_dtype") else ""
    keep += f", {out}/customize_dtypes.cfg" if s.get("customize_dtypes") else ""
    con.print(f"wrote {out}/modify_mixlist.json{keep}, {out}/summary.json, {out}/report.html", markup=False)


def _f6(x: Any) -> str:
    return "-" if x is None else f"{x:.6f}" if isinstance(x, float) else str(x)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.1%}" if isinstance(x, float) else str(x)


def _num(x, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, spec)


WIDE = 120    # terminal columns from which compare prints its tables; narrower: the same rows as two short lines each


def _worst_ops(att: Any, top: int, con: Console) -> None:
    """The worst ops by output error: a table of every figure on a wide terminal; below ``WIDE`` columns each op
    as two lines (its name, type and precision; then its figures), so nothing is folded mid-word."""
    ops = att.ops
    d = ops.copy()
    d["_k"] = (~d["out_finite"]).astype(int)
    d = d.sort_values(["_k", "out_rel_l2"], ascending=False, kind="stable").head(top)
    stats = bool((ops["kind"] == "stats").all())
    title = (f"worst ops (top {len(d)} of {len(ops)} by output error vs FP32)"
             + (": statistics-only dumps, relative differences |t-g|/|g| of Max/Min/Mean/Norm" if stats else ""))
    names = ("Max rel diff", "Min rel diff", "Mean rel diff", "Norm rel diff") if stats else ("cosine", "rel L2",
                                                                                              "max abs")
    wide = con.width >= WIDE
    if wide:
        t = Table(title=title)
        for c in ("op", "type", "prec", *names, "in rel L2", "growth", "introduced", "blamed on"):
            t.add_column(c, overflow="fold")
    else:
        _lines(con, title + " (a narrow terminal: --csv has every column)")
    for i, (n, r) in enumerate(d.iterrows(), 1):
        if stats:
            vals = [_num(r[c]) for c in ("out_max_rel_diff", "out_min_rel_diff", "out_mean_rel_diff", "out_rel_l2")]
        else:
            vals = [_num(r["out_cosine"], ".6f"), _num(r["out_rel_l2"]),
                    _num(r["out_max_abs"]) if r["out_finite"] else "non-finite"]
        growth = _num(r["growth"], ".3g") if r["in_rel_l2"] > 0 else "-"
        blamed = "itself" if r["blamed_on"] == str(n) else str(r["blamed_on"])
        if wide:
            t.add_row(str(n), str(r["type"]), str(r["precision"]), *vals, _num(r["in_rel_l2"]), growth,
                      _num(r["introduced"]), blamed)
            continue
        figs = ", ".join(f"{k} {v}" for k, v in zip(names, vals))
        _lines(con, f"{i:>3}. {n}  ({r['type']}, {r['precision']})")
        _lines(con, f"{figs}, in rel L2 {_num(r['in_rel_l2'])}, growth {growth}, introduced {_num(r['introduced'])}, "
                    f"blamed on {blamed}", first="     ")
    if wide:
        con.print(t)


def _lines(con: Console, text: str, first: str = "") -> None:
    """``text`` wrapped to the terminal, continuation lines indented under its start (five columns)."""
    import textwrap
    con.print(textwrap.fill(text, width=max(40, con.width), initial_indent=first, subsequent_indent="     ",
                            break_on_hyphens=False, break_long_words=False), markup=False, highlight=False,
              soft_wrap=True)


def _culprits(att: Any, con: Console) -> None:
    title = "culprit op types (error introduced by their precision decision)"
    if con.width >= WIDE:
        t = Table(title=title)
        for c in ("rank", "type", "worst introduced", "sum", "instances", "worst instance", "seen at"):
            t.add_column(c, overflow="fold")
        for i, (typ, r) in enumerate(att.types.iterrows(), 1):
            t.add_row(str(i), str(typ), _num(r["introduced_max"]), _num(r["introduced_sum"]), str(r["instances"]),
                      str(r["worst_instance"]), str(r["worst_observed_at"]))
        con.print(t)
        return
    _lines(con, title)
    for i, (typ, r) in enumerate(att.types.iterrows(), 1):
        seen = "" if str(r["worst_observed_at"]) == str(r["worst_instance"]) else f", seen at {r['worst_observed_at']}"
        _lines(con, f"{i:>3}. {typ}: worst introduced {_num(r['introduced_max'])} (sum {_num(r['introduced_sum'])}), "
                    f"{r['instances']} instance{'s' if r['instances'] != 1 else ''}, worst {r['worst_instance']}{seen}")


def print_training_steps(doc: Mapping, console: Console | None = None) -> None:
    """compare over training steps (``StepsVerdict.to_dict``): one summary line, and the departure's lead."""
    con = console or Console()
    con.print(f"training steps: {doc['summary']}", markup=False, highlight=False)
    dep = doc.get("departure")
    if dep and dep.get("op"):
        reads = f"; parameter {dep['param']}" if dep.get("param") else ""
        con.print(f"  first anomaly of step {dep['step']} in execution order: {dep['op']} ({dep['op_type']}, "
                  f"{dep['phase']}){reads}", markup=False, highlight=False)


def print_comparison(att: Any, top: int = 15, console: Console | None = None) -> None:
    """Print the worst ops, the first op over tolerance, the culprit ranking, training signals and
    the verdict with rich; below ``WIDE`` terminal columns the tables become two short lines a row."""
    con = console or Console()
    ops = att.ops
    if ops is not None and not ops.empty:
        _worst_ops(att, top, con)
    else:
        con.print("no aligned op entries with float outputs")
    con.print(f"first op exceeding tolerance (topological order): {att.first_exceeding or 'none'}")
    if att.types is not None and not att.types.empty:
        _culprits(att, con)
    tr = att.training
    if tr:
        uf = tr["underflow_ratio"]
        ufs = f"{100 * uf:.3f} % of elements" if isinstance(uf, float) and math.isfinite(uf) else "n/a (statistics only)"
        con.print(f"gradients: underflow {ufs} (rule: <= {100 * tr['max_underflow']:g} %), "
                  f"overflowing elements {tr['overflow_elems']}")
        if tr.get("all_zero_in_target"):
            con.print(f"gradients entirely zero in the target but not in FP32: {', '.join(tr['all_zero_in_target'])}")
        ls = tr.get("loss_scale")
        if ls:
            if ls.get("dynamic"):
                con.print(f"loss scale: dynamic loss scaling recommended ({ls.get('reason')})")
            else:
                con.print(f"loss scale: static {ls['static']} (2^{ls['log2']}); predicted underflow "
                          f"{100 * ls['predicted_underflow']:.3f} %")
    for f in att.final:
        o = f.get("output") or {}
        extra = ""
        if f.get("loss"):
            extra = f", loss rel diff {_num(f['loss'].get('rel_diff'))}"
        if o.get("kind") == "stats":
            figs = f"statistics only: Norm rel diff {_num(o.get('norm_rel_diff'))}"
        else:
            figs = f"cosine {_num(o.get('cosine'), '.6f')}, rel L2 {_num(o.get('rel_l2'))}, max abs {_num(o.get('max_abs'))}"
        con.print(f"step {f['step']} final ({f['source']}): {figs}, finite {o.get('finite')}{extra}")
    um = att.unmatched or {}
    for label, key in (("only in the target dump", "target_only"), ("only in the golden dump", "golden_only")):
        lst = um.get(key) or []
        if lst:
            more = f" (+{len(lst) - 5} more)" if len(lst) > 5 else ""
            con.print(f"{len(lst)} entries {label}: {', '.join(lst[:5])}{more}")
    for note in att.notes:      # one line each (the terminal wraps it): a note stays whole for grep and copy
        con.print(f"note: {note}", soft_wrap=True, markup=False)
    v = att.verdict
    if v.ok:
        con.print(f"[green]WITHIN TOLERANCE[/green] ({att.tolerance.describe()})")
    else:
        con.print(f"[red]OUTSIDE TOLERANCE[/red] ({att.tolerance.describe()})")
        for r in v.reasons[:10]:
            con.print(f"  - {r}")
