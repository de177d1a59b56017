"""recommend(): the smallest list edits (and, where they keep more compute low, per-op keep_dtype lines:
granularity.py) that bring a run within tolerance while keeping the most compute in low precision, each
explained (docs/recommend.md).

The order of evidence: what was **measured** decides whether a change is needed at all (the run's own final
outputs, loss and gradients against FP32); a candidate list is **replayed** on the run's recorded FP32 ops
whenever the run has an FP32 tensor dump (replay_search); only where it has none is a candidate **estimated** by
the error model (search).  Every number in recommendation.json says which of the three it is (``how``).
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..analysis import Analysis, analyze
from ..compare.tolerance import Tolerance
from ..compare.training import scale_text
from ..errors import InputError
from ..mixlist import Mixlist, check_op_types, compose
from ..oplists import BLACK, OpLists, precision_free
from ..semantics import DEFAULT_MODE, Plan, low_mask, uses_mixlist
from . import findings as F
from .edits import Edit, edits_mixlist, keep_line_edit, keeps_apply, lists_with, mixed_mode_of, overrides_with
from .explain import EditReport, curve, explain, flips, local_vs_received, worst_instances
from .granularity import (KEEP_DTYPE_NAME, mixed_mode_alternative, per_op_by_default, rec_snippets,
                          type_level_alternative)
from .model import ErrorModel, build_evidence

SCHEMA = "advisor.recommendation/1"
GRANULARITIES = ("auto", "type", "op")


@dataclass
class Recommendation:
    """The result of ``recommend`` (recommendation.json, modify_mixlist.json)."""

    status: str                       # no-change-needed | recommended | no-solution | profile-only | loss-scale
    mixlist: Mixlist                  # relative to the chip defaults, composed with the start mixlist
    edits: list[EditReport]           # accuracy edits (the recommendation)
    perf_edits: list[EditReport]      # performance edits (separate file)
    predicted: dict                   # {"base": {...}, "recommended": {...}, "measured": {...}}: each with "how"
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
    keep_dtype: list[str] = field(default_factory=list)   # keep_dtype.cfg lines (the run's own and the advised)
    type_level_alternative: dict | None = None            # when per-op keeps won: the best type-level advice
    mixed_mode_alternative: dict | None = None            # force_fp16 & co: a mixed mode + mixlist keeping more low
    curve: dict = field(default_factory=dict)     # for the report (not serialised)
    ranks: dict | None = None                     # a multi-rank run's per-rank evidence (recommend/ranks.py)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "no-solution" else 0

    def to_dict(self) -> dict:
        from ..fsutil import json_safe
        return json_safe({
            "schema": SCHEMA, "status": self.status, "ok": self.ok, "confirmed": False,
            "mode": self.mode, "soc": self.soc, "tolerance": self.tolerance,
            "modify_mixlist": self.mixlist.to_dict(),
            "start_mixlist": self.start_mixlist.to_dict() if self.start_mixlist is not None else None,
            "edits": [e.to_dict() for e in self.edits],
            "performance_edits": [e.to_dict() for e in self.perf_edits],
            "performance_mixlist": self.perf_mixlist.to_dict() if self.perf_mixlist is not None else None,
            "predicted": self.predicted, "minimality": self.minimality,
            "fewest_edit_alternative": self.alternative, "closest": self.closest, "findings": self.findings,
            "calibration": self.calibration, "search": self.search, "loss_scale": self.loss_scale,
            "notes": self.notes, "snippets": self.snippets, "keep_dtype": self.keep_dtype,
            "type_level_alternative": self.type_level_alternative,
            "mixed_mode_alternative": self.mixed_mode_alternative,
            **({"ranks": self.ranks} if self.ranks else {})})

    @classmethod
    def from_dict(cls, d: Mapping) -> "Recommendation":
        from ..mixlist import parse_obj

        def ml(x):
            return parse_obj(x, "recommendation.json") if x else None
        return cls(d["status"], ml(d["modify_mixlist"]) or Mixlist(), [EditReport.from_dict(e) for e in d["edits"]],
                   [EditReport.from_dict(e) for e in d.get("performance_edits") or []], dict(d["predicted"]),
                   bool(d["ok"]), dict(d["tolerance"]), d["mode"], d["soc"], ml(d.get("start_mixlist")),
                   dict(d.get("minimality") or {}), d.get("fewest_edit_alternative"), d.get("closest"),
                   list(d.get("findings") or []), dict(d.get("calibration") or {}), dict(d.get("search") or {}),
                   list(d.get("notes") or []), d.get("loss_scale"), ml(d.get("performance_mixlist")),
                   dict(d.get("snippets") or {}), list(d.get("keep_dtype") or []), d.get("type_level_alternative"),
                   d.get("mixed_mode_alternative"), ranks=d.get("ranks"))


@dataclass
class Outcome:
    """What a search concluded, in one shape for the measured, replayed and estimated paths."""

    status: str
    how: str                               # "measured" | "replayed" | "estimated"
    base_plan: Plan
    chosen: frozenset = frozenset()
    chosen_plan: Plan | None = None
    base: dict = field(default_factory=dict)         # final summary of the start list (with "how")
    result: dict = field(default_factory=dict)       # final summary of the chosen list
    without: dict = field(default_factory=dict)      # Edit -> final summary of the chosen list minus it
    minimality: dict = field(default_factory=dict)
    alternative: dict | None = None
    closest: dict | None = None
    search: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)      # Edit -> (culprit node indices, why it was a candidate)
    score: np.ndarray | None = None                  # per node: how much it contributes (worst-instance ranking)
    errors_before: np.ndarray | None = None          # per node errors for the report's curve
    errors_after: np.ndarray | None = None
    judge: Any = None                                # edits -> (ok, summary): the same judge for performance edits
    type_level: dict | None = None                   # the type-level alternative when per-op keeps won


# ---------------------------------------------------------------------- entry points
def recommend(run: Any, tolerance: Tolerance | None = None, base_mixlist: Mixlist | None = None,
              exclude: Iterable[str] = (), max_edits: int = 4, *, steps: Iterable[int] | None = None,
              soc: str | None = None, ops_info: str | None = None, mode: str | None = None,
              rank: int | None = None, step: int | None = None, budget: int = 200, perf: bool = True,
              ops: pd.DataFrame | None = None, measured_final: float | None = None,
              avoid: Iterable[Mixlist | None] = (), widen: bool = False, max_candidates: int = 10, max_evals: int = 2000, time_budget_s: float | None = 20.0,
              mixlist_path: str = "modify_mixlist.json", progress: Any = None, overrides: Any = None,
              granularity: str = "auto") -> Recommendation:
    """Recommend list edits for a run: a run directory, an ``ingest.Run`` or an ``Analysis``.

    ``base_mixlist``: where the search starts (default: the run's own list); the result's ``mixlist`` is
    relative to the chip defaults.  ``steps``: the steps judged (default: all; tune passes its calibration
    steps).  ``budget``: replays the measured search may spend.  ``ops``/``measured_final``: measured per-op
    errors and final error to use instead of comparing the run's dumps (the estimated path).  ``granularity``:
    ``op`` (per-op keep_dtype lines where they beat type-level edits, see replay_search), ``type`` (list
    edits only) or ``auto``: ``op`` where the run's consumer takes keep_dtype files (``per_op_by_default``)."""
    if granularity not in GRANULARITIES:
        raise InputError("--granularity", f"expected one of {', '.join(GRANULARITIES)}, not {granularity!r}")
    a = run if isinstance(run, Analysis) else analyze(run, tolerance=tolerance, soc=soc, ops_info=ops_info,
                                                      mode=mode, rank=rank, step=step, progress=progress,
                                                      overrides=overrides)   # per-op overrides: the base's
    say = progress or (lambda msg: None)
    if base_mixlist is not None:
        check_op_types(base_mixlist, a.defaults, (t for t in a.compiled.types))
    ctx = SearchContext(a, base_mixlist, set(exclude), max_edits, None if steps is None else list(steps), notes=[],
                   avoid=list(avoid), widen=widen,
                   per_op=granularity == "op" or (granularity == "auto" and per_op_by_default(a)))
    say("judging the measured run")
    measured = ctx.measured()
    gradient_only = measured is not None and measured["gradient_only"]
    if not (a.has_dumps or _has_local(a) or ops is not None):
        out = ctx.profile_only()
    elif gradient_only:
        out = ctx.loss_scale(measured)
    elif measured is not None and measured["applies"] and measured["verdict"].ok:
        out = ctx.unchanged(measured)
    elif a.recording is not None and a.recording.replayable_share() > 0 and ops is None:
        say("searching list edits by replay")
        out = ctx.replayed(budget)
    else:
        say("searching list edits with the error model")
        out = ctx.estimated(ops, measured_final, max_candidates, max_evals, time_budget_s)
    say("explaining the edits")
    return ctx.finish(out, measured, perf, mixlist_path)


def recommend_graph(g: Any, defaults: OpLists, *, mode: str = DEFAULT_MODE, run_mixlist: Mixlist | None = None,
                    local: pd.DataFrame | None = None, tolerance: Tolerance | None = None, **kw: Any) -> Recommendation:
    """``recommend`` on a bare op graph (no run directory): its evidence is a local_error.csv frame
    (``local``) and/or measured per-op errors (``ops``); everything else as ``recommend``."""
    from ..ingest.run import Run
    run = Run(path=".", graph=g, kernels=pd.DataFrame(), meta={"mode": mode, "soc": defaults.soc},
              local_errors=local, mixlist=run_mixlist)
    a = analyze(run, tolerance=tolerance, soc=defaults.soc)
    a.defaults, a.lists = defaults, defaults if run_mixlist is None else a.lists_with(run_mixlist)
    a.plan = a.compiled.plan(a.lists, a.mode)
    return recommend(a, **kw)


def _has_local(a: Analysis) -> bool:
    return isinstance(a.run.local_errors, pd.DataFrame) and len(a.run.local_errors) > 0


# ---------------------------------------------------------------------- the search context
@dataclass
class SearchContext:
    """One recommendation in progress: the analysis, where the search starts and what it may touch."""

    a: Analysis
    start: Mixlist | None
    exclude: set
    max_edits: int
    steps: list[int] | None
    notes: list[str]
    avoid: list = field(default_factory=list)
    widen: bool = False
    findings: list[dict] = field(default_factory=list)
    calibration: dict = field(default_factory=dict)
    mode: str = ""
    per_op: bool = True
    mixed_mode: dict | None = None

    def __post_init__(self):
        a = self.a
        if self.start is None:
            self.start = a.run_mixlist
        self.base_lists = a.lists_with(self.start)
        self.mode = a.mode
        if not uses_mixlist(a.mode) and keeps_apply(a.mode) and a.recording is not None and self.per_op:
            self.notes.append(f"precision mode {a.mode!r} ignores modify_mixlist (GE applies it only in the mixed "
                              "modes): the advice is ATC --keep_dtype lines (OpType:: lines for whole types)")
        elif not uses_mixlist(a.mode):
            self.notes.append(f"precision mode {a.mode!r} ignores modify_mixlist (GE applies it only in "
                              "mixed_float16/mixed_bfloat16 / allow_mix_precision*); edits below assume the mixed mode.")
            self.mode = mixed_mode_of(a.mode)
        from ..fusion import notes as fusion_notes
        self.notes.extend(fusion_notes(a.graph, {"the base mixlist": self.start}))
        self.base_plan = a.compiled.plan(self.base_lists, self.mode, a.plan.overrides)
        self.evidence = build_evidence(a.compiled, None, a.run.local_errors) if _has_local(a) else None

    def proposable(self, t: str) -> bool:
        return t not in self.exclude and not precision_free(t)

    def summary(self, plan: Plan, final: Mapping | None, how: str) -> dict:
        """A plan's final error (``final``: rel_l2, nonfinite, cosine or None) with its time and share."""
        low = low_mask(plan)
        t, casts, share, lost = self.a.times.plan_time(low)
        d = {"final_rel_l2": None, "final_nonfinite": None, "final_cosine": None, "time_us": round(t, 3),
             "casts": casts, "low_precision_share": round(share, 6), "fp32_forfeited_us": round(lost, 3), "how": how,
             "time_how": "estimated (cost model anchored to the profile's kernel times)"}
        if final:
            d.update({k: final.get(k) for k in ("final_rel_l2", "final_nonfinite", "final_cosine")})
        return d

    # ------------------------------------------------------------------ measured
    def measured(self) -> dict | None:
        """The run's own verdict on the judged steps: it decides whether a change is needed."""
        a = self.a
        if not a.has_dumps:
            return None
        steps = a.steps if self.steps is None else [s for s in self.steps if s in a.steps]
        items, train, notes = a.judged(steps)
        self.notes.extend(notes)
        verdict = a.tolerance.judge(items)
        forward = a.tolerance.judge([{k: v for k, v in it.items() if k not in ("grad_min_cosine", "grad_worst")}
                                     for it in items])
        train = dict(train or {})
        gradient_only = (not verdict.ok and forward.ok and bool(train.get("underflow_exceeds"))
                         and not train.get("overflow") and bool(train.get("loss_scale")))
        worst = verdict.worst or {}
        final = {"final_rel_l2": worst.get("rel_l2"), "final_nonfinite": worst.get("finite") is False,
                 "final_cosine": worst.get("cosine")}
        return {"verdict": verdict, "items": items, "train": train, "gradient_only": gradient_only, "final": final,
                "steps": steps, "applies": self.start == a.run_mixlist or self.base_plan.precision_list ==
                a.plan.precision_list}

    def unchanged(self, measured: dict) -> Outcome:
        s = self.summary(self.base_plan, measured["final"], "measured")
        return Outcome("no-change-needed", "measured", self.base_plan, base=s, result=s,
                       minimality={"proved": True, "statement": "no edit is needed: the measured run already meets "
                                   "the tolerance on every judged step", "checks": []})

    def loss_scale(self, measured: dict) -> Outcome:
        ls = scaled_advice(measured["train"].get("loss_scale") or {}, self.a.loss_scale)
        measured["train"]["loss_scale"] = ls
        how = ("dynamic loss scaling" if ls.get("dynamic") else
               f"a static loss scale of {scale_text(ls['static'])}" if ls.get("static") else "a larger loss scale")
        self.notes.append("the forward outputs and the loss are within tolerance; only the gradients fail, because "
                          "they underflow in low precision (more than the 1 % rule): the fix is " + how +
                          ", not a list edit (see loss_scale)")
        s = self.summary(self.base_plan, measured["final"], "measured")
        return Outcome("loss-scale", "measured", self.base_plan, base=s, result=s,
                       minimality={"proved": True, "statement": "no list edit proposed: the failure is gradient "
                                   "underflow, fixed by the loss scale", "checks": []})

    def profile_only(self) -> Outcome:
        self.notes.append("profile-only mode: the run has no precision dumps and no local errors, so op sensitivity "
                          "is unknown; only what the profile proves is reported (fp32 time by inheritance, casts, "
                          "saturation). Sensitivity needs msprobe dumps or an emulator capture (`advisor capture`).")
        s = self.summary(self.base_plan, None, "not predicted (no activations)")
        self.findings.extend(F.fp32_time(self.base_plan, self.a.times))
        return Outcome("profile-only", "profile", self.base_plan, base=s, result=s)

    # ------------------------------------------------------------------ replayed
    def replayed(self, budget: int) -> Outcome:
        from .replay_search import ReplaySearch
        skip = {tuple(self.a.compiled.plan(self.a.lists_with(m), self.mode,
                                           overrides_with(self.base_plan.overrides, [keep_line_edit(ln) for ln in keeps])
                                           ).precision_list) for m, keeps in map(_avoided, self.avoid)}
        s = ReplaySearch(self.a, self.base_lists, self.steps, exclude=self.exclude, budget=budget,
                         max_exhaustive=min(3, self.max_edits), proposable=self.proposable, skip=skip,
                         widen=self.widen, per_op=self.per_op, mode=self.mode)
        r = s.run()
        cover = r.base.coverage
        how = "replayed" if cover == 1.0 else "replayed, incomplete"
        base = self.summary(self.base_plan, r.base.final(), how)
        base_err = s.node_errors(r.base)

        def judge(edits: frozenset) -> tuple[bool, dict]:
            t = s.judged(edits)
            return bool(t.ok), self.summary(t.plan, t.final(), how)
        if r.best is None:
            out = Outcome("no-solution", how, self.base_plan, base=base, result=base, search=r.stats,
                          errors_before=base_err, judge=judge,
                          closest={"edits": sorted(str(e) for e in r.closest.edits), "how": how,
                                   "predicted": self.summary(r.closest.plan, r.closest.final(), how),
                                   "note": f"no set of edits found within {budget} replays meets the tolerance; "
                                           "this is the closest replayed"})
            return out
        best = r.best
        checks = r.minimality
        proved = all(not c["meets_tolerance_without_it"] for c in checks)
        minimality = {"proved": proved, "how": "replayed", "checks": checks,
                      "statement": ("1-minimal by replay: removing any single edit fails the tolerance on a replay"
                                    if proved else "not 1-minimal: " + ", ".join(c["edit"] for c in checks
                                                                                 if c["meets_tolerance_without_it"])
                                    + " can be dropped")}
        alt = None
        if r.fewest is not None and r.fewest.edits != best.edits:
            alt = {"edits": sorted(str(e) for e in r.fewest.edits), "how": how,
                   "predicted": self.summary(r.fewest.plan, r.fewest.final(), how),
                   "note": "fewest edits; it keeps less compute in low precision than the recommendation"}
        without = {e: self.summary(s.trial(best.edits - {e}).plan, s.judged(best.edits - {e}).final(), how)
                   for e in best.edits}
        type_level = type_level_alternative(self, r.type_level, how) if r.type_level is not None else None
        if not uses_mixlist(self.mode):
            self.mixed_mode = mixed_mode_alternative(self, best, budget, skip, how)
        return Outcome("recommended", how, self.base_plan, best.edits, best.plan, base,
                       self.summary(best.plan, best.final(), how), without, minimality, alt, None, r.stats,
                       s.reasons(best.edits), score=base_err, errors_before=base_err,
                       errors_after=s.node_errors(best), judge=judge, type_level=type_level)

    # ------------------------------------------------------------------ estimated
    def estimated(self, ops: pd.DataFrame | None, measured_final: float | None, max_candidates: int,
                  max_evals: int, time_budget_s: float | None) -> Outcome:
        from .search import Searcher, pred_dict
        a = self.a
        culprit_types, culprit_nodes = [], []
        if ops is None and a.has_dumps:
            att = a.attribution(self.steps)
            ops = att.ops if att.ops is not None and not att.ops.empty else None
            if att.types is not None and not att.types.empty:
                culprit_types = [str(t) for t in att.types.index]
                culprit_nodes = [str(x) for x in att.types.get("worst_instance", pd.Series(dtype=object)).tolist()
                                 if x is not None]
            measured_final = _worst_final(att.final)
            self.findings.extend(F.saturation(ops))
        ev = build_evidence(a.compiled, ops, a.run.local_errors) if (ops is not None or _has_local(a)) else None
        self.evidence = ev
        model = ErrorModel(a.compiled, ev, a.times, a.low_dtype, a.plan, None, measured_final)
        s = Searcher(a.compiled, self.base_lists, self.mode, model, a.tolerance, self.exclude)

        def summ(e) -> dict:
            d = pred_dict(e.pred)
            return {**self.summary(e.plan, d, "estimated"), "final_cosine": d["final_cosine"]}
        calib = {"measured_final_rel_l2": model.measured_final, "model_final_rel_l2_before_scaling": model.base_pred,
                 "global_scale": model.scale,
                 "note": model.scale_note or ("the model is scaled so that it reproduces the measured final error "
                                              "of the run" if model.measured_final is not None else
                                              "no finite measured final error: the model is not scaled")}
        self.calibration.update(calib)

        def judge(edits: frozenset) -> tuple[bool, dict]:
            e = s.evaluate(edits)
            return e.ok, summ(e)
        base = summ(s.base)
        contrib = s.base_contributions() if model.enabled else np.zeros(len(a.compiled))
        if s.base.ok:
            return Outcome("no-change-needed", "estimated", self.base_plan, base=base, result=base, judge=judge,
                           minimality={"proved": True, "statement": "no edit is needed: the model predicts the run "
                                       "already meets the tolerance", "checks": []})
        cands = s.fix_candidates(culprit_types, max_candidates=max_candidates, extra_nodes=culprit_nodes)
        best, fewest, closest, stats = s.search(cands, max_edits=self.max_edits, max_evals=max_evals,
                                                time_budget_s=time_budget_s)
        stats = {**stats, "method": "error model", "max_edits": self.max_edits}
        err_b = _errors(model.evaluate(s.base_plan, keep_arrays=True))
        if best is None:
            return Outcome("no-solution", "estimated", self.base_plan, base=base, result=base, search=stats,
                           errors_before=err_b, judge=judge,
                           closest={"edits": sorted(str(e) for e in closest.edits), "how": "estimated",
                                    "predicted": summ(closest),
                                    "note": f"no set of at most {self.max_edits} edits from the candidates meets the "
                                            "tolerance; this is the closest the model found"})
        chosen, proof = s.minimize(best)
        if fewest is not None and fewest.size > chosen.size:
            fewest = chosen
        proved = all(not p["meets_tolerance_without_it"] for p in proof)
        minimality = {"proved": proved, "how": "estimated", "checks": proof,
                      "statement": ("1-minimal under the model: removing any single edit makes the predicted final "
                                    "error exceed the tolerance" if proved else "not 1-minimal")}
        alt = None
        if fewest is not None and fewest.edits != chosen.edits:
            alt = {"edits": sorted(str(e) for e in fewest.edits), "predicted": summ(fewest), "how": "estimated",
                   "note": "fewest edits; it keeps less compute in low precision than the recommendation"}
        reasons = {cd.edit: (list(cd.nodes), cd.reason) for cd in cands}
        return Outcome("recommended", "estimated", self.base_plan, chosen.edits, chosen.plan, base, summ(chosen),
                       {e: summ(s.evaluate(chosen.edits - {e})) for e in chosen.edits}, minimality, alt, None,
                       stats, reasons, score=contrib, errors_before=err_b,
                       errors_after=_errors(model.evaluate(chosen.plan, keep_arrays=True)), judge=judge)

    # ------------------------------------------------------------------ the recommendation
    def finish(self, out: Outcome, measured: dict | None, perf: bool, mixlist_path: str) -> Recommendation:
        a = self.a
        chosen_plan = out.chosen_plan or out.base_plan
        reports = [self.report(out, e) for e in sorted(out.chosen, key=lambda x: (x.kind, x.type))]
        perf_reports, perf_set = (self.performance(out, chosen_plan) if perf and out.status in
                                  ("recommended", "no-change-needed", "profile-only") else ([], out.chosen))
        self.findings.extend(F.profile_casts(a.run.kernels))
        self.findings.extend(F.dump_overflow(a.graph, a.run.target_dump))
        self.findings.extend(F.cast_churn(chosen_plan, a.times))
        predicted = {"base": out.base, "recommended": out.result,
                     "base_meets_tolerance": bool(measured["verdict"].ok) if measured and measured["applies"] else
                     None, "recommended_meets_tolerance": out.status in ("recommended", "no-change-needed"),
                     "time_change_us": round(out.result["time_us"] - out.base["time_us"], 3),
                     "time_model": a.times.source, "how": out.how}
        if measured is not None:
            predicted["measured"] = {**self.summary(a.plan, measured["final"], "measured"),
                                     "meets_tolerance": bool(measured["verdict"].ok),
                                     "reasons": list(measured["verdict"].reasons)[:6], "steps": measured["steps"]}
        if perf_reports:
            predicted["with_performance_edits"] = out.judge(frozenset(perf_set))[1]
        full = compose(a.defaults, self.start, edits_mixlist(self.base_lists, out.chosen))
        perf_ml = compose(a.defaults, self.start, edits_mixlist(self.base_lists, perf_set)) if perf_reports else None
        ok = out.status in ("recommended", "no-change-needed")
        rec = Recommendation(out.status, full, reports, perf_reports, predicted, ok, _tolerance_dict(a.tolerance), self.mode,
                             a.defaults.soc, self.start, out.minimality, out.alternative, out.closest, self.findings,
                             self.calibration, {**out.search, "max_edits": self.max_edits},
                             self.notes, measured["train"] if measured and measured["train"] else None, perf_ml)
        keeps = [e for e in out.chosen if e.is_keep]
        if keeps:
            rec.keep_dtype = [ln for ln in overrides_with(self.base_plan.overrides, keeps).keep_dtype_text().splitlines()]
        rec.type_level_alternative = out.type_level
        rec.mixed_mode_alternative = self.mixed_mode
        rec.snippets = rec_snippets(rec, mixlist_path, KEEP_DTYPE_NAME)
        rec.curve = curve(a.compiled, out.errors_before, out.errors_after, None, out.base_plan, chosen_plan, a.times)
        return rec

    def report(self, out: Outcome, e: Edit, purpose: str = "fix", without_plan: Plan | None = None,
               with_plan: Plan | None = None, without: dict | None = None, with_: dict | None = None) -> EditReport:
        """The evidence and explanation of one edit of the chosen set (or a performance edit)."""
        c = self.a.compiled
        with_plan = with_plan or out.chosen_plan
        if without_plan is None:
            rest = out.chosen - {e}
            without_plan = self.a.compiled.what_if(self.base_plan, lists_with(self.base_lists, rest),
                                                   overrides_with(self.base_plan.overrides, rest))
        without = without if without is not None else out.without.get(e, out.base)
        with_ = with_ if with_ is not None else out.result
        nflip, fl = flips(without_plan, with_plan)
        nodes, reason = out.reasons.get(e, ([], None))
        score = out.score if out.score is not None else np.zeros(len(c))
        worst = worst_instances(c, e, nodes, without_plan, with_plan, score, self.evidence)
        dt = with_["time_us"] - without["time_us"]
        evidence = {"worst_instances": worst, "local_vs_received": local_vs_received(c, e, self.evidence),
                    "reason": reason, "predicted_final_with": with_, "how": out.how}
        return EditReport(e, purpose, explain(e, purpose, worst, without, with_, nflip, dt, out.how), evidence, fl,
                          nflip, dt, without if purpose == "fix" else None)

    def performance(self, out: Outcome, plan: Plan, headroom: float = 0.1, min_share: float = 0.01
                    ) -> tuple[list[EditReport], frozenset]:
        """Performance edits: types running fp32 only by black membership or gray inheritance with at least
        ``min_share`` of the kernel time to gain, each tried on top of the chosen set by the outcome's judge
        (a replay, or the error model when the type's local error leaves headroom).  Every candidate is a
        finding with its verdict."""
        cands = perf_candidates(plan, self.a.times, lists_with(self.base_lists, out.chosen), self.evidence,
                                self.proposable, {e.type for e in out.chosen}, min_share)
        cur, reports = frozenset(out.chosen), []
        rel_tol = self.a.tolerance.max_rel_l2
        for pc in cands:
            e = pc["edit"]
            entry = {"kind": "fp32-by-inheritance-or-black", "type": e.type, "list": pc["current_list"],
                     "rules": pc["rules"], "instances": pc["instances"], "time_saved_us_if_low":
                     round(pc["saving_us"], 3), "estimated": ["time_saved_us_if_low"], "measured": pc["measured"],
                     "worst_local_rel_l2": pc["worst_local_rel_l2"], "local_nonfinite": pc["local_nonfinite"],
                     "edit": str(e)}
            self.findings.append(entry)
            if out.judge is None or (out.how == "estimated" and not pc["measured"]):
                entry["verdict"] = "needs sensitivity data (dumps or an emulator capture) before moving it"
                continue
            if out.how == "estimated" and (pc["local_nonfinite"] or pc["worst_local_rel_l2"] > headroom * rel_tol):
                entry["verdict"] = "no headroom: local error at low precision too large"
                continue
            prev_ok, prev = out.judge(cur)
            options = [e] + ([Edit("black-remove", e.type)] if pc["current_list"] == BLACK else [])
            good = []
            for o in options:
                ok, res = out.judge(cur | {o})
                if ok and res["time_us"] < prev["time_us"]:      # faster, Casts GE would insert included
                    good.append((res["time_us"], o.kind != "black-remove", o, res))
            if not good:
                entry["verdict"] = f"{out.how}: it breaks the tolerance or gains nothing"
                continue
            _, _, o, res = min(good, key=lambda g: (g[0], g[1]))
            entry.update(edit=str(o), verdict=f"proposed ({out.how})")
            p_without = self.a.compiled.what_if(self.base_plan, lists_with(self.base_lists, cur))
            cur = cur | {o}
            p_with = self.a.compiled.what_if(self.base_plan, lists_with(self.base_lists, cur))
            reports.append(self.report(out, o, "performance", p_without, p_with, prev, res))
        return reports, cur


def perf_candidates(plan: Plan, times: Any, lists: OpLists, ev: Any, proposable: Any, fixed: set,
                    min_share: float = 0.01) -> list[dict]:
    """Types running fp32 only because of black membership or inheritance whose low-precision kernels would
    save at least ``min_share`` of the kernel time, costliest first, with their measured local errors."""
    from ..semantics import FP32_BY_LIST, NodeKind
    c = plan.compiled
    low = low_mask(plan)
    types = np.asarray(c.types, dtype=object)
    rules = np.asarray(plan.rules, dtype=object)
    sel = np.flatnonzero((np.asarray(c.kind) == NodeKind.OP) & ~low & np.isin(rules, list(FP32_BY_LIST)))
    total = max(times.kernel_time(low), 1e-9)
    out = []
    for t in sorted(set(types[sel].tolist())):
        if not proposable(t) or t in fixed or t == "Cast":
            continue
        inst = sel[types[sel] == t]
        saving = float((times.t_fp32[inst] - times.t_low[inst]).sum())
        if saving < min_share * total:
            continue
        measured = ev is not None and ev.have_local and bool(np.isfinite(ev.local[inst]).any())
        out.append({"edit": Edit("white-add", t), "instances": int(len(inst)), "saving_us": saving,
                    "current_list": lists.list_of(t), "rules": sorted({str(r) for r in rules[inst].tolist()}),
                    "measured": measured,
                    "worst_local_rel_l2": float(np.nanmax(ev.local[inst])) if measured else float("nan"),
                    "local_nonfinite": bool(ev.local_nf[inst].any()) if ev is not None and ev.have_local else False})
    out.sort(key=lambda d: -d["saving_us"])
    return out


def _avoided(item: Any) -> tuple[Mixlist | None, tuple]:
    """An ``avoid`` entry: a mixlist, or a (mixlist, keep_dtype lines) pair."""
    return item if isinstance(item, tuple) else (item, ())


def _tolerance_dict(tol: Tolerance) -> dict:
    """recommendation.json ``tolerance``: the limits the searches judge by, and the whole shared Tolerance."""
    return {"rel_l2_max": tol.max_rel_l2, "cosine_min": tol.min_cosine, "finite": tol.require_finite,
            "shared": tol.to_dict()}


def _errors(pred: Any) -> np.ndarray | None:
    if pred.errors is None:
        return None
    e = np.asarray(pred.errors, dtype=float).copy()
    if pred.nonfinite is not None:
        e[pred.nonfinite] = np.inf
    return e


def _worst_final(final: Iterable[Mapping] | None) -> float | None:
    """The largest finite final relative L2 over the steps of an attribution's ``final`` (None: none finite)."""
    vals = []
    for f in final or []:
        o = f.get("output") or {}
        v = o.get("rel_l2", o.get("norm_rel_diff"))
        if isinstance(v, (int, float)) and np.isfinite(v):
            vals.append(float(v))
    return max(vals) if vals else None


def scaled_advice(advice: dict, current: float) -> dict:
    """compare's loss-scale advice is relative to the gradients it saw (``static`` = 2^k times them); a run that
    already used a loss scale ``current`` needs ``current * 2^k``: ``static`` becomes that absolute scale,
    ``factor`` keeps 2^k and ``current`` the run's scale."""
    if not advice or current == 1.0:
        return {**advice, "current": 1} if advice else advice
    factor = advice.get("static") or 1
    return {**advice, "factor": factor, "current": current, "static": current * factor,
            "log2": (advice.get("log2") or 0) + math.log2(current)}
