"""recommend(): search + performance edits + findings -> Recommendation (docs/recommend.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

import networkx as nx
import numpy as np
import pandas as pd

from ..errors import InputError
from ..mixlist import Mixlist, compose, effective
from ..oplists import BLACK, OpLists, precision_free
from ..semantics import DEFAULT_MODE, FP32_BY_LIST, Compiled, NodeKind, Plan, compile_graph, mode_info, uses_mixlist
from . import tolerance as tolmod
from ..costmodel import build_time_model
from ..semantics import low_mask
from .model import ErrorModel, Evidence, Prediction, build_evidence
from .search import Edit, Evaluated, Searcher, _pred_dict, edits_mixlist, lists_with

MAX_FLIPS_PER_EDIT = 200


@dataclass
class EditReport:
    edit: Edit
    purpose: str                      # "fix" | "performance"
    explanation: str
    evidence: dict
    flips: list[dict]
    flip_count: int
    time_change_us: float
    final_without: dict | None = None

    def to_dict(self) -> dict:
        return {"edit": str(self.edit), "list": self.edit.list, "action": self.edit.action, "type": self.edit.type,
                "kind": self.edit.kind, "purpose": self.purpose, "explanation": self.explanation,
                "evidence": self.evidence, "predicted_time_change_us": round(self.time_change_us, 3),
                "predicted_flips": self.flips, "predicted_flip_count": self.flip_count,
                **({"predicted_without_this_edit": self.final_without} if self.final_without is not None else {})}


@dataclass
class Recommendation:
    status: str                       # no-change-needed | recommended | no-solution | profile-only | loss-scale
    mixlist: Mixlist                  # relative to the chip defaults, composed with the start mixlist
    edits: list[EditReport]           # accuracy edits (the recommendation)
    perf_edits: list[EditReport]      # performance edits (validated with the model; separate file)
    predicted: dict                   # {"base": {...}, "recommended": {...}}
    ok: bool
    tolerance: dict
    mode: str
    soc: str
    start_mixlist: Mixlist | None
    minimality: dict
    alternative: dict | None
    closest: dict | None
    findings: list[dict]
    calibration: dict
    search: dict
    notes: list[str]
    loss_scale: Any = None
    perf_mixlist: Mixlist | None = None
    snippets: dict = field(default_factory=dict)
    # for the report (not serialised)
    curve: dict = field(default_factory=dict)
    flipped_table: list[dict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "no-solution" else 0

    @property
    def edit_list(self) -> list[Edit]:
        return [e.edit for e in self.edits]

    def to_dict(self) -> dict:
        d = {
            "schema": "advisor.recommendation/1",
            "status": self.status, "ok": self.ok, "confirmed": False,
            "mode": self.mode, "soc": self.soc,
            "tolerance": self.tolerance,
            "modify_mixlist": self.mixlist.to_dict(),
            "start_mixlist": self.start_mixlist.to_dict() if self.start_mixlist is not None else None,
            "edits": [e.to_dict() for e in self.edits],
            "performance_edits": [e.to_dict() for e in self.perf_edits],
            "performance_mixlist": self.perf_mixlist.to_dict() if self.perf_mixlist is not None else None,
            "predicted": self.predicted,
            "minimality": self.minimality,
            "fewest_edit_alternative": self.alternative,
            "closest": self.closest,
            "findings": self.findings,
            "calibration": self.calibration,
            "search": self.search,
            "loss_scale": self.loss_scale,
            "notes": self.notes,
            "snippets": self.snippets,
        }
        return _jsonable(d)


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating, float)):
        f = float(o)
        return f if math.isfinite(f) else None
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, (str, int, bool)) or o is None:
        return o
    to_dict = getattr(o, "to_dict", None)
    if callable(to_dict):
        try:
            return _jsonable(to_dict())
        except Exception:  # noqa: BLE001
            pass
    return str(o)


# ---------------------------------------------------------------------- the main entry
def recommend_graph(g: nx.DiGraph | Compiled, defaults: OpLists, *, mode: str = DEFAULT_MODE,
                    run_mixlist: Mixlist | None = None, base_mixlist: Mixlist | None = None,
                    ops: pd.DataFrame | None = None, local: pd.DataFrame | None = None,
                    tolerance: Any = None, exclude: Iterable[str] = (), max_edits: int = 4,
                    culprit_types: Sequence[str] = (), culprit_nodes: Sequence[Hashable] = (),
                    measured_final: float | None = None,
                    finals: Iterable[Hashable] | None = None, max_candidates: int = 10,
                    max_evals: int = 2000, time_budget_s: float | None = 20.0, perf: bool = True,
                    perf_min_share: float = 0.01, perf_headroom: float = 0.1,
                    findings: list[dict] | None = None, loss_scale: Any = None,
                    mixlist_path: str = "modify_mixlist.json", profile_only_reason: str | None = None,
                    gradient_underflow_only: bool = False) -> Recommendation:
    """Recommend edits for one op graph.  ``defaults`` = chip default lists; ``run_mixlist`` = the
    mixlist the measured run used; ``base_mixlist`` = where the search starts (default: the run's).
    ``ops`` = attribution per-op frame, ``local`` = local_error.csv frame (either may be None)."""
    tol = tolerance if tolerance is not None else tolmod.default_tolerance()
    rel_tol = tolmod.limits(tol)[0]
    try:
        family, low_dtype = mode_info(mode)
    except ValueError as e:          # an unknown precision mode
        raise InputError(None, str(e)) from None
    try:
        c = g if isinstance(g, Compiled) else compile_graph(g)
    except ValueError as e:          # a cyclic graph
        raise InputError(g.graph.get("source") if hasattr(g, "graph") else None, str(e)) from None
    low_dtype = low_dtype or "fp16"
    notes: list[str] = []
    findings = list(findings or [])
    start = base_mixlist if base_mixlist is not None else run_mixlist
    run_lists = effective(defaults, run_mixlist)
    base_lists = effective(defaults, start)
    if not uses_mixlist(mode):
        notes.append(f"precision mode {mode!r} ignores modify_mixlist (GE applies it only in "
                     "mixed_float16/mixed_bfloat16 / allow_mix_precision*); edits below assume mixed_float16.")
        mode = "mixed_bfloat16" if low_dtype == "bf16" else DEFAULT_MODE
    ev = build_evidence(c, ops, local) if (ops is not None or local is not None) else None
    measured_plan = c.plan(run_lists, mode)
    times = build_time_model(c, low_dtype, ran_low=low_mask(measured_plan))
    model = ErrorModel(c, ev, times, low_dtype, measured_plan, finals, measured_final)
    s = Searcher(c, base_lists, mode, model, tol, exclude)
    profile_only = not model.enabled
    if profile_only:
        notes.append(profile_only_reason or "profile-only mode: no precision dumps or local errors, so op "
                     "sensitivity is unknown; only what the profile proves is reported. Run `advisor capture` "
                     "(emulator) or dump with msprobe to get accuracy recommendations.")
    base = s.base
    calibration = {"measured_final_rel_l2": model.measured_final,
                   "model_final_rel_l2_before_scaling": model.base_pred,
                   "global_scale": model.scale,
                   "note": getattr(model, "scale_note", "") or (
                       "the model is scaled so that it reproduces the measured final error of the run"
                       if model.measured_final is not None else
                       "no finite measured final error: the model is not scaled (per-op calibration only)")}
    cand_info: dict[Edit, Any] = {}
    stats: dict = {}
    best = fewest = closest = None
    minimality: dict = {"proved": False}
    if profile_only:
        status = "profile-only"
        chosen = base
    elif gradient_underflow_only:
        status = "loss-scale"
        chosen = base
        perf = False
        ls = (loss_scale or {}).get("loss_scale") if isinstance(loss_scale, dict) else None
        how = ("dynamic loss scaling" if (ls or {}).get("dynamic") else
               f"a static loss scale of {ls.get('static')} (2^{ls.get('log2')})" if ls else "a larger loss scale")
        notes.append("the forward outputs and the loss are within tolerance; only the gradients fail, because "
                     "they underflow in low precision (more than the 1 % rule): the fix is " + how +
                     ", not a list edit (see loss_scale)")
        minimality = {"proved": True, "statement": "no list edit proposed: the failure is gradient underflow, "
                      "fixed by the loss scale", "checks": []}
    elif base.ok:
        status = "no-change-needed"
        chosen = base
        minimality = {"proved": True, "statement": "no edit is needed: the model predicts the run already "
                      "meets the tolerance (the empty set is trivially 1-minimal)", "checks": []}
    else:
        cands = s.fix_candidates(culprit_types, max_candidates=max_candidates, extra_nodes=culprit_nodes)
        cand_info = {cd.edit: cd for cd in cands}
        best, fewest, closest, stats = s.search(cands, max_edits=max_edits, max_evals=max_evals,
                                                time_budget_s=time_budget_s)
        if best is None:
            status = "no-solution"
            chosen = base
        else:
            status = "recommended"
            reduced, proof = s.minimize(best)
            chosen = reduced
            if fewest is not None and fewest.size > reduced.size:
                fewest = reduced
            all_break = all(not p["meets_tolerance_without_it"] for p in proof)
            minimality = {
                "proved": bool(all_break),
                "statement": ("1-minimal under the model: removing any single edit makes the predicted final "
                              "error exceed the tolerance" if all_break else "not 1-minimal"),
                "checks": proof}
    # ---------------------------------------------------------------- performance edits
    fixed_types = {e.type for e in chosen.edits}
    perf_reports: list[EditReport] = []
    perf_set = chosen.edits
    perf_cands = s.perf_candidates(chosen, ev, fixed_types, rel_tol, perf_headroom, perf_min_share) if perf else []
    perf_findings = []
    for pc in perf_cands:
        e = pc["edit"]
        entry = {"kind": "fp32-by-inheritance-or-black", "type": e.type, "list": pc["current_list"],
                 "rules": pc["rules"], "instances": int(len(pc["instances"])),
                 "time_saved_us_if_low": round(pc["saving_us"], 3), "estimated": ["time_saved_us_if_low"],
                 "measured": pc["measured"],
                 "worst_local_rel_l2": pc["worst_local_rel_l2"], "local_nonfinite": pc["local_nonfinite"],
                 "edit": str(e)}
        if profile_only or not pc["measured"]:
            entry["verdict"] = "needs sensitivity data (dumps or an emulator capture) before moving it"
            perf_findings.append(entry)
            continue
        if not pc["headroom"]:
            entry["verdict"] = "no headroom: local error at low precision too large"
            perf_findings.append(entry)
            continue
        prev = s.evaluate(perf_set)
        options = [e] + ([Edit("black-remove", e.type)] if pc["current_list"] == BLACK else [])
        trials = [(s.evaluate(perf_set | {o}), o) for o in options]
        good = [(t, o) for t, o in trials if t.ok and t.pred.time_us < prev.pred.time_us]
        if good:
            trial, e = min(good, key=lambda x: (x[0].pred.time_us, x[1].kind != "black-remove"))
            entry["edit"] = str(e)
            perf_set = trial.edits
            entry["verdict"] = "proposed"
            perf_reports.append(_edit_report(s, e, "performance", prev, trial, ev, cand_info, pc))
        else:
            entry["verdict"] = "model predicts it breaks the tolerance or saves nothing"
        perf_findings.append(entry)
    findings.extend(perf_findings)
    if profile_only:
        findings.extend(_fp32_time_findings(s, chosen))
    findings.extend(_cast_findings(s, chosen))
    # ---------------------------------------------------------------- reports
    edit_reports = []
    for e in sorted(chosen.edits, key=lambda x: (x.kind, x.type)):
        without = s.evaluate(chosen.edits - {e})
        edit_reports.append(_edit_report(s, e, "fix", without, chosen, ev, cand_info, None))
    full = compose(defaults, start, edits_mixlist(base_lists, chosen.edits))
    perf_mixlist = None
    if perf_reports:
        perf_mixlist = compose(defaults, start, edits_mixlist(base_lists, perf_set))
    base_pred = model.evaluate(s.base_plan, keep_arrays=True)
    rec_pred = model.evaluate(chosen.plan, keep_arrays=True)
    predicted = {"base": _pred_dict(base_pred), "recommended": _pred_dict(rec_pred),
                 "base_meets_tolerance": base.ok, "recommended_meets_tolerance": chosen.ok,
                 "time_change_us": round(rec_pred.time_us - base_pred.time_us, 3),
                 "time_model": times.source}
    if perf_reports:
        pp = s.evaluate(perf_set).pred
        predicted["with_performance_edits"] = _pred_dict(pp)
    if profile_only:
        for k in ("base", "recommended"):
            predicted[k]["final_rel_l2"] = None
    alternative = None
    if status == "recommended" and fewest is not None and fewest.edits != chosen.edits:
        alternative = {"edits": sorted(str(e) for e in fewest.edits), "predicted": _pred_dict(fewest.pred),
                       "note": "fewest edits; it keeps less compute in low precision than the recommendation"}
    closest_d = None
    if status == "no-solution" and closest is not None:
        closest_d = {"edits": sorted(str(e) for e in closest.edits), "predicted": _pred_dict(closest.pred),
                     "note": f"no set of at most {max_edits} edits from the candidates meets the tolerance; "
                             "this is the closest the model found"}
    rec = Recommendation(
        status=status, mixlist=full, edits=edit_reports, perf_edits=perf_reports, predicted=predicted,
        ok=(bool(chosen.ok) if status not in ("profile-only", "loss-scale") else False),
        tolerance=tolmod.describe(tol), mode=mode, soc=defaults.soc, start_mixlist=start,
        minimality=minimality, alternative=alternative, closest=closest_d, findings=findings,
        calibration=calibration, search={**stats, "max_edits": max_edits, "evaluations": s.evaluations},
        notes=notes, loss_scale=loss_scale, perf_mixlist=perf_mixlist)
    fp32_types = sorted(e.type for e in chosen.edits if e.kind == "black-add")
    low_types = sorted(e.type for e in chosen.edits if e.kind == "white-add")
    from .snippets import mixlist_snippets
    rec.snippets = mixlist_snippets(mixlist_path, mode, fp32_types, low_types)
    rec.curve = _curve(c, base_pred, rec_pred, ev, s.base_plan, chosen.plan)
    rec.flipped_table = [f for r in edit_reports for f in r.flips]
    return rec


# ---------------------------------------------------------------------- helpers
def _metric(a: np.ndarray | None, i: int) -> float | None:
    if a is None:
        return None
    v = float(a[i])
    return v if math.isfinite(v) else None


def _edit_report(s: Searcher, e: Edit, purpose: str, without: Evaluated, with_: Evaluated,
                 ev: Evidence | None, cand_info: dict, perf_info: dict | None) -> EditReport:
    c = s.c
    nflip, flips = _flips(without.plan, with_.plan, MAX_FLIPS_PER_EDIT)
    # worst instances: the culprits that led to the edit, else the type's own instances
    cd = cand_info.get(e)
    nodes = [i for i in (cd.nodes if cd else []) if i >= 0]
    if not nodes:
        nodes = [i for i, t in enumerate(c.types) if t == e.type]
    contrib = _contrib_cached(s, without) if s.model.enabled else np.zeros(len(c))
    nodes = np.unique(np.asarray(nodes, dtype=np.int64))
    if len(nodes):
        key = np.nan_to_num(contrib[nodes], nan=0.0, posinf=1e300)
        own_type = np.array([c.types[i] == e.type for i in nodes.tolist()], dtype=bool)
        nodes = nodes[np.lexsort((-key, ~own_type))][:5].tolist()   # the edited type's instances first
    else:
        nodes = []
    worst = []
    for i in nodes:
        node = c.order[i]
        w = without.plan.why(node)
        worst.append({
            "node": str(node), "type": c.types[i],
            "precision_before": without.plan.precision_list[i], "precision_after": with_.plan.precision_list[i],
            "why_before": w.to_dict(),
            "local_rel_l2": _metric(ev.local if ev else None, i),
            "local_nonfinite": bool(ev.local_nf[i]) if ev else None,
            "received_rel_l2": _metric(ev.inp if ev else None, i),
            "out_rel_l2": _metric(ev.out if ev else None, i),
            "inrnd_rel_l2": _metric(ev.inrnd if ev else None, i),
            "gain": _metric(s.model.gain, i) if s.model.enabled else None,
            "contribution_to_final": _metric(contrib, i) if s.model.enabled else None,
        })
    # local vs received over the instances of the edited type
    inst = np.flatnonzero(np.asarray(c.types, dtype=object) == e.type)
    lvr = None
    if ev is not None and len(inst):
        def mx(a):
            v = a[inst]
            return float(np.nanmax(v)) if np.isfinite(v).any() else None
        lvr = {"instances": int(len(inst)), "worst_local_rel_l2": mx(ev.local),
               "worst_received_rel_l2": mx(ev.inp), "worst_out_rel_l2": mx(ev.out),
               "any_local_nonfinite": bool(ev.local_nf[inst].any())}
    dt = with_.pred.time_us - without.pred.time_us
    evidence = {"worst_instances": worst, "local_vs_received": lvr,
                "reason": cd.reason if cd else (perf_info and "fp32 by " + "/".join(perf_info["rules"])),
                "predicted_final_with": _pred_dict(with_.pred)}
    expl = _explain(s, e, purpose, worst, lvr, without, with_, nflip, dt)
    return EditReport(e, purpose, expl, evidence, flips, nflip, dt,
                      _pred_dict(without.pred) if purpose == "fix" else None)


def _flips(a: Plan, b: Plan, limit: int) -> tuple[int, list[dict]]:
    """(number of instances whose precision differs, records of the first ``limit`` in topological
    order with semantics' Why for both plans) - flips_between without building every record."""
    pa = np.array(a.precision_list, dtype=object)
    pb = np.array(b.precision_list, dtype=object)
    idx = np.flatnonzero(pa != pb)
    c = a.compiled
    out = []
    for i in idx[:limit].tolist():
        node = c.order[i]
        out.append({"node": str(node), "type": c.types[i], "before": pa[i], "after": pb[i],
                    "why_before": a.why(node).to_dict(), "why_after": b.why(node).to_dict()})
    return int(len(idx)), out


def _contrib_cached(s: Searcher, ev: Evaluated) -> np.ndarray:
    cache = s.__dict__.setdefault("_contrib_cache", {})
    hit = cache.get(ev.edits)
    if hit is None:
        hit = cache[ev.edits] = s.model.contributions(ev.plan)
    return hit


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def _explain(s: Searcher, e: Edit, purpose: str, worst: list[dict], lvr: dict | None, without: Evaluated,
             with_: Evaluated, nflips: int, dt: float) -> str:
    parts = []
    if purpose == "fix":
        if worst:
            w = worst[0]
            src = "produces non-finite values" if w.get("local_nonfinite") else \
                f"introduces a local error of {_fmt(w.get('local_rel_l2'))}"
            chain = ""
            wb = w["why_before"]
            if w["type"] != e.type:
                chain = f" (it runs {w['precision_before']} by {wb['rule']} from {wb['via']}, decided by " \
                        f"{wb['root']}; {e.type} is on that decision chain)"
            elif wb["rule"].startswith("gray"):
                chain = f" (gray, inherits {w['precision_before']} from {wb['via']})"
            parts.append(f"{w['node']} ({w['type']}) {src} in low precision{chain}.")
        wo = without.pred
        parts.append(f"{e}: {nflips} op instance(s) flip; predicted final error "
                     f"{'non-finite' if wo.final_nonfinite else _fmt(wo.final_rel_l2)} without it -> "
                     f"{'non-finite' if with_.pred.final_nonfinite else _fmt(with_.pred.final_rel_l2)} with it; "
                     f"time {dt:+.1f} us.")
    else:
        parts.append(f"{e}: {nflips} op instance(s) move to low precision; worst local error at low precision "
                     f"{_fmt(lvr.get('worst_local_rel_l2') if lvr else None)}; predicted time {dt:+.1f} us; predicted "
                     f"final error {_fmt(with_.pred.final_rel_l2)} (still within tolerance).")
    return " ".join(parts)


def _fp32_time_findings(s: Searcher, at: Evaluated, top: int = 10) -> list[dict]:
    """Profile-only: fp32 kernel time per (type, rule) for ops that run fp32 by black membership or
    gray inheritance - what the profile proves.  Times are the profile's measured kernel times where
    it has them (``time_source``); ``estimated`` names the fields that come from the cost model (the
    saving always does: nobody measured the low-precision kernel).  Op types whose precision means
    nothing (oplists.PRECISION_FREE_TYPES) are left out: no list move is proposed for them."""
    c, p = s.c, at.plan
    tm = s.model.times
    low = at.low if at.low is not None else low_mask(p)
    kind = np.asarray(c.kind)
    rules = np.asarray(p.rules, dtype=object)
    types = np.asarray(c.types, dtype=object)
    free = np.array([precision_free(t) for t in types.tolist()], dtype=bool)
    sel = np.flatnonzero((kind == NodeKind.OP) & ~low & np.isin(rules, list(FP32_BY_LIST)) & ~free)
    if not len(sel):
        return []
    meas = tm.measured_at(low)
    total = tm.kernel_time(low) or 1.0
    step_measured = tm.step_us is not None
    df = pd.DataFrame({"type": types[sel], "rule": rules[sel], "fp32_us": tm.t_fp32[sel],
                       "saving_us": tm.t_fp32[sel] - tm.t_low[sel], "measured": meas[sel]})
    g = df.groupby(["type", "rule"], sort=False).agg(instances=("fp32_us", "size"), fp32_us=("fp32_us", "sum"),
                                                      saving_us=("saving_us", "sum"), measured=("measured", "sum"))
    g = g.sort_values("fp32_us" if meas.any() else "saving_us", ascending=False).head(top)
    out = []
    for (t, r), x in g.iterrows():
        k, n = int(x["measured"]), int(x["instances"])
        source = "measured" if k == n else "cost model" if k == 0 else f"measured for {k} of {n} instances"
        estimated = ["saving_if_low_us"] + ([] if k == n else ["fp32_time_us"]) + \
            ([] if k == n and step_measured else ["share_of_step"])
        out.append({"kind": "fp32-time", "type": t, "rule": r, "instances": n,
                    "fp32_time_us": round(float(x["fp32_us"]), 3), "saving_if_low_us": round(float(x["saving_us"]), 3),
                    "share_of_step": round(float(x["fp32_us"]) / total, 6), "time_source": source,
                    "estimated": estimated,
                    "message": "runs fp32 by " + ("black membership" if r == "black" else "gray inheritance")
                               + "; whether it tolerates low precision needs dumps or a capture"})
    return out


def _cast_findings(s: Searcher, at: Evaluated, top: int = 5, max_tries: int = 4) -> list[dict]:
    """Cast churn: float edges whose ends differ in precision (GE inserts a Cast on each)."""
    tm = s.model.times
    if not len(tm.edge_src):
        return []
    low = at.low if at.low is not None else low_mask(at.plan)
    mism = low[tm.edge_src] != low[tm.edge_dst]
    n = int(mism.sum())
    if n == 0:
        return []
    types = np.asarray(s.c.types, dtype=object)
    df = pd.DataFrame({"src": types[tm.edge_src[mism]], "dst": types[tm.edge_dst[mism]],
                       "us": tm.cast_us[tm.edge_src[mism]]})
    grp = df.groupby(["src", "dst"], sort=False)["us"].agg(["count", "sum"]).sort_values("count", ascending=False)
    out = [{"kind": "cast-churn", "casts": n, "cast_time_us": round(float(df["us"].sum()), 3),
            "time_source": "cost model (the Casts GE inserts on these edges)",
            "top_pairs": [{"producer_type": a, "consumer_type": b, "casts": int(r["count"]),
                           "time_us": round(float(r["sum"]), 3)} for (a, b), r in grp.head(top).iterrows()]}]
    # the single edit (on a type at a cast boundary) that removes most casts while meeting the tolerance
    best = None
    lists = lists_with(s.base_lists, at.edits)
    tried = 0
    for (a, b), _ in grp.head(2).iterrows():
        for t in (a, b):
            if not s.proposable(t) or t == "Cast":
                continue
            for kind in ("white-add", "black-add"):
                tgt = "white" if kind == "white-add" else "black"
                if lists.list_of(t) == tgt or any(x.type == t for x in at.edits) or tried >= max_tries:
                    continue
                tried += 1
                ev = s.evaluate(at.edits | {Edit(kind, t)})
                if ev.pred.casts < at.pred.casts and (ev.ok or not s.model.enabled):
                    if best is None or ev.pred.casts < best[1].pred.casts:
                        best = (Edit(kind, t), ev)
    if best is not None:
        e, ev = best
        out[0]["edit_removing_most"] = {"edit": str(e), "casts_after": ev.pred.casts,
                                        "time_change_us": round(ev.pred.time_us - at.pred.time_us, 3),
                                        "meets_tolerance": ev.ok if s.model.enabled else None}
    return out


def _curve(c: Compiled, before: Prediction, after: Prediction, ev: Evidence | None, pb: Plan, pa: Plan,
           points: int = 600) -> dict:
    """Error along graph order (ops only), bucketed max for plotting."""
    kind = np.asarray(c.kind)
    ops = np.flatnonzero((kind == NodeKind.OP) | (kind == NodeKind.CAST))
    if not len(ops):
        return {}
    def bucket(a: np.ndarray | None) -> list | None:
        if a is None:
            return None
        v = np.asarray(a, dtype=float)[ops]
        if len(v) <= points:
            return [float(x) if not math.isnan(x) else None for x in v]
        edges = np.linspace(0, len(v), points + 1).astype(int)
        r = np.maximum.reduceat(np.nan_to_num(v, nan=-1.0, posinf=np.inf), edges[:-1])
        return [float(x) if x >= 0 else None for x in r]
    def with_nf(p: Prediction) -> np.ndarray | None:
        if p.errors is None:
            return None
        e = np.asarray(p.errors, dtype=float).copy()
        if p.nonfinite is not None:
            e[p.nonfinite] = np.inf
        return e
    return {"n_ops": int(len(ops)), "before": bucket(with_nf(before)), "after": bucket(with_nf(after)),
            "measured": bucket(np.where(ev.out_nf, np.inf, ev.out)) if ev is not None and ev.have_measured else None,
            "low_before": float(low_mask(pb)[ops].mean()), "low_after": float(low_mask(pa)[ops].mean()),
            "share_before": before.low_share, "share_after": after.low_share,
            "time_before": before.time_us, "time_after": after.time_us}
