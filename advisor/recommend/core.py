"""recommend(): the smallest list edits (and, where they keep more compute low, per-op keep_dtype / customize_dtypes
lines) that bring
a run within tolerance while keeping the most compute in low precision, each explained (docs/recommend.md).

The order of evidence: what was **measured** decides whether a change is needed at all (the run's own final
outputs, loss and gradients against FP32); a candidate list is **replayed** on the run's recorded FP32 ops
whenever the run has an FP32 tensor dump (replay_search); only where it has none is a candidate **estimated** by
the error model (search).  Every number in recommendation.json says which of the three it is (``how``).
The result is a typed ``Recommendation`` (result.py), written by outputs.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from ..analysis import Analysis, analyze
from ..compare.tolerance import GRADIENT_KEYS, Tolerance, Verdict
from ..compare.training import scale_text
from ..errors import InputError
from ..mixlist import Mixlist, check_op_types, compose
from ..numerics import hf32_note
from ..oplists import BLACK, table_note
from ..semantics import DEFAULT_MODE, FP32_BY_LIST, NodeKind, Plan, cpu_mask, low_mask, uses_mixlist
from . import findings as F
from .edits import (Edit, edits_mixlist, keep_line_edit, keeps_apply, lists_with, mixed_mode_of, mixlist_of,
                    overrides_with, override_edits, proposable)
from .explain import curve, explain, flips, local_vs_received, worst_instances
from .granularity import CUSTOMIZE_DTYPES_NAME, KEEP_DTYPE_NAME, MIXLIST_NAME, per_op_by_default, rec_snippets
from .replay_search import plan_key
from .result import (Alternative, Calibration, EditEvidence, EditReport, Minimality, MinimalityCheck, PlanSummary,
                     Predicted, Recommendation, SearchStats, ToleranceLimits)

GRANULARITIES = ("auto", "type", "op")

# an edit set -> (meets the tolerance?, its summary): the outcome's own evidence, reused for performance edits
Evaluator = Callable[[frozenset], "tuple[bool, PlanSummary]"]


@dataclass
class MeasuredRun:
    """The run's own verdict on the judged steps (it decides whether a change is needed)."""

    verdict: Verdict
    train: dict[str, Any]
    gradient_only: bool                    # only the gradients fail, by underflow: the loss scale, not the lists
    final: dict[str, Any]                  # final_rel_l2, final_nonfinite, final_cosine of the worst step
    steps: list[int]
    applies: bool                          # the search starts from the list the run used


@dataclass
class Outcome:
    """What a search concluded, in one shape for the measured, replayed and estimated paths."""

    status: str
    how: str                               # "measured" | "replayed" | "replayed, incomplete" | "estimated"
    base_plan: Plan
    base: PlanSummary                      # the start list
    result: PlanSummary                    # the chosen list
    chosen: frozenset = frozenset()
    chosen_plan: Plan | None = None
    without: dict = field(default_factory=dict)      # Edit -> (Plan, PlanSummary) of the chosen list minus it
    minimality: Minimality = field(default_factory=Minimality)
    fewest: Alternative | None = None
    closest: Alternative | None = None
    search: SearchStats = field(default_factory=SearchStats)
    reasons: dict = field(default_factory=dict)      # Edit -> (culprit node indices, why it was a candidate)
    score: np.ndarray | None = None                  # per node: how much it contributes (worst-instance ranking)
    errors_before: np.ndarray | None = None          # per node errors for the report's curve
    errors_after: np.ndarray | None = None
    evaluate: Evaluator | None = None
    type_level: Alternative | None = None            # the type-level alternative when per-op keeps won
    mixed_mode: Alternative | None = None            # force_fp16 & co: the matching mixed mode's list
    dump_scope: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- entry points
def recommend(run: Any, tolerance: Tolerance | None = None, base_mixlist: Mixlist | None = None,
              exclude: Iterable[str] = (), max_edits: int = 4, *, steps: Iterable[int] | None = None,
              soc: str | None = None, ops_info: str | None = None, mode: str | None = None,
              rank: int | None = None, step: int | None = None, budget: int = 200, perf: bool = True,
              ops: pd.DataFrame | None = None, measured_final: float | None = None,
              avoid: Iterable[Mixlist | None] = (), widen: bool = False, max_candidates: int = 10,
              max_evals: int = 2000, time_budget_s: float | None = 20.0, out_dir: str | Path | None = None,
              progress: Any = None, overrides: Any = None, granularity: str = "auto",
              cann: str | None = None, overflow_mode: str | None = None,
              allow_hf32: str | None = None) -> Recommendation:
    """Recommend list edits for a run: a run directory, an ``ingest.Run`` or an ``Analysis``.

    ``base_mixlist``: where the search starts (default: the run's own list); the result's ``modify_mixlist`` is
    relative to the chip defaults.  ``steps``: the steps judged (default: all; tune passes its calibration
    steps).  ``budget``: replays the measured search may spend.  ``ops``/``measured_final``: measured per-op
    errors and final error to use instead of comparing the run's dumps (the estimated path).  ``granularity``:
    ``op`` (per-op keep_dtype lines where they beat type-level edits, see replay_search), ``type`` (list
    edits only) or ``auto``: ``op`` where the run's consumer takes keep_dtype files (``per_op_by_default``).
    ``out_dir``: where the outputs will be written (the deployment snippets name the files there)."""
    if granularity not in GRANULARITIES:
        raise InputError("--granularity", f"expected one of {', '.join(GRANULARITIES)}, not {granularity!r}")
    from ..ingest.run import Run
    from .training import has_training_steps, recommend_training
    path = run.path if isinstance(run, Run) else run          # an Analysis asks for the one-step advice
    if has_training_steps(path):        # trained over optimizer steps: re-run the steps
        return recommend_training(path, tolerance, base_mixlist=base_mixlist, exclude=exclude, soc=soc, mode=mode,
                                  progress=progress, one_step=recommend)
    a = run if isinstance(run, Analysis) else analyze(run, tolerance=tolerance, soc=soc, ops_info=ops_info,
                                                      mode=mode, rank=rank, step=step, progress=progress,
                                                      overrides=overrides, cann=cann,   # per-op overrides: the base's
                                                      overflow_mode=overflow_mode, allow_hf32=allow_hf32)
    say = progress or (lambda msg: None)
    if base_mixlist is not None:
        check_op_types(base_mixlist, a.defaults, (t for t in a.compiled.types))
    ctx = SearchContext(a, base_mixlist, set(exclude), max_edits, None if steps is None else list(steps), notes=[],
                        avoid=list(avoid), widen=widen,
                        per_op=granularity == "op" or (granularity == "auto" and per_op_by_default(a)))
    say("judging the measured run")
    measured = ctx.measured()
    if not (a.has_dumps or _has_local(a) or ops is not None):
        out = ctx.profile_only()
    elif measured is not None and measured.gradient_only:
        out = ctx.loss_scale(measured)
    elif measured is not None and measured.applies and measured.verdict.ok:
        out = ctx.unchanged(measured)
    elif a.recording is not None and a.recording.replayable_share() > 0 and ops is None:
        say("searching list edits by replay")
        out = ctx.replayed(budget)
    else:
        say("searching list edits with the error model")
        out = ctx.estimated(ops, measured_final, max_candidates, max_evals, time_budget_s)
    say("explaining the edits")
    return ctx.finish(out, measured, perf, out_dir)


def recommend_steps(run: str | Path, tolerance: Tolerance | None = None, **kw: Any) -> Recommendation:
    """The training advice of a run trained over optimizer steps (``training.recommend_training``, with the one-step
    advice on its dumps from ``recommend``); ``kw``: ``recommend_training``'s (``workload``, ``batches``, ...)."""
    from .training import recommend_training
    return recommend_training(run, tolerance, one_step=recommend, **kw)


def recommend_graph(g: Any, defaults: Any, *, mode: str = DEFAULT_MODE, run_mixlist: Mixlist | None = None,
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
    calibration: Calibration = field(default_factory=Calibration)
    mode: str = ""
    per_op: bool = True

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
        table = table_note(a.defaults, a.compiled.types)     # the run's types whose default list changed with CANN
        if table:
            self.notes.append(table)
        self.base_plan = a.compiled.plan(self.base_lists, self.mode, a.plan.overrides)
        # per-op measurements the report shows: local_error.csv on the nodes (the estimated path replaces it with
        # the error model's evidence, which adds the measured run's per-op errors)
        self.evidence: Any = a.local_errors

    def proposable(self, t: str) -> bool:
        return proposable(t, self.exclude)

    def plan_summary(self, plan: Plan, final: Mapping | None, how: str) -> PlanSummary:
        """A plan's final error (``final``: final_rel_l2, final_nonfinite, final_cosine, or None) with its
        time and share (the time model, AI CPU placement included)."""
        t, casts, share, lost = self.a.times.plan_time(low_mask(plan), cpu_mask(plan))
        f = final or {}
        return PlanSummary(f.get("final_rel_l2"), f.get("final_nonfinite"), f.get("final_cosine"), round(t, 3),
                           casts, round(share, 6), round(lost, 3), how)

    def alternative(self, edits: frozenset, plan: Plan, final: Mapping | None, how: str, note: str | None = None,
                    **extra: Any) -> Alternative:
        """An edit set shown beside the recommendation (its list relative to the chip defaults when asked)."""
        return Alternative(sorted(edits, key=str), how, self.plan_summary(plan, final, how), note, **extra)

    def full_mixlist(self, edits: Iterable[Edit]) -> Mixlist:
        """The mixlist of ``edits`` on top of the start list, relative to the chip defaults."""
        return compose(self.a.defaults, self.start, edits_mixlist(self.base_lists, edits))

    # ------------------------------------------------------------------ measured
    def measured(self) -> MeasuredRun | None:
        """The run's own verdict on the judged steps: it decides whether a change is needed."""
        a = self.a
        if not a.has_dumps:
            return None
        steps = a.steps if self.steps is None else [s for s in self.steps if s in a.steps]
        items, train, notes = a.judged(steps)
        self.notes.extend(notes)
        verdict = a.tolerance.judge(items)
        forward = a.tolerance.judge([{k: v for k, v in it.items() if k not in GRADIENT_KEYS} for it in items])
        train = dict(train or {})
        gradient_only = (not verdict.ok and forward.ok and bool(train.get("underflow_exceeds"))
                         and not train.get("overflow") and bool(train.get("loss_scale")))
        worst = verdict.worst or {}
        final = {"final_rel_l2": worst.get("rel_l2"), "final_nonfinite": worst.get("finite") is False,
                 "final_cosine": worst.get("cosine")}
        return MeasuredRun(verdict, train, gradient_only, final, steps,
                           self.start == a.run_mixlist or plan_key(self.base_plan) == plan_key(a.plan))

    def unchanged(self, m: MeasuredRun) -> Outcome:
        s = self.plan_summary(self.base_plan, m.final, "measured")
        return Outcome("no-change-needed", "measured", self.base_plan, s, s, minimality=Minimality(
            True, "no edit is needed: the measured run already meets the tolerance on every judged step"))

    def loss_scale(self, m: MeasuredRun) -> Outcome:
        ls = scaled_advice(m.train.get("loss_scale") or {}, self.a.loss_scale)
        m.train["loss_scale"] = ls
        how = ("dynamic loss scaling" if ls.get("dynamic") else
               f"a static loss scale of {scale_text(ls['static'])}" if ls.get("static") else "a larger loss scale")
        self.notes.append("the forward outputs and the loss are within tolerance; only the gradients fail, because "
                          "they underflow in low precision (more than the 1 % rule): the fix is " + how +
                          ", not a list edit (see loss_scale)")
        s = self.plan_summary(self.base_plan, m.final, "measured")
        return Outcome("loss-scale", "measured", self.base_plan, s, s, minimality=Minimality(
            True, "no list edit proposed: the failure is gradient underflow, fixed by the loss scale"))

    def profile_only(self) -> Outcome:
        self.notes.append("profile-only mode: the run has no precision dumps and no local errors, so op sensitivity "
                          "is unknown; only what the profile proves is reported (fp32 time by inheritance, casts, "
                          "saturation). Sensitivity needs msprobe dumps or an emulator capture (`advisor capture`).")
        s = self.plan_summary(self.base_plan, None, "not predicted (no activations)")
        self.findings.extend(F.fp32_time(self.base_plan, self.a.times))
        return Outcome("profile-only", "profile", self.base_plan, s, s)

    # ------------------------------------------------------------------ replayed
    def replayed(self, budget: int) -> Outcome:
        from .replay_search import ReplaySearch
        skip = {plan_key(self.a.compiled.plan(self.a.lists_with(m), self.mode,
                                              overrides_with(self.base_plan.overrides, ov)))
                for m, ov in map(_avoided, self.avoid)}
        s = ReplaySearch(self.a, self.base_lists, self.steps, exclude=self.exclude, budget=budget,
                         max_exhaustive=min(3, self.max_edits), skip=skip, widen=self.widen, per_op=self.per_op,
                         mode=self.mode)
        r = s.run()
        how = "replayed" if r.base.coverage == 1.0 else "replayed, incomplete"
        base = self.plan_summary(self.base_plan, r.base.final(), how)
        base_err = s.node_errors(r.base)
        stats = SearchStats.of(r.stats)

        def evaluate(edits: frozenset) -> tuple[bool, PlanSummary]:
            t = s.replayed(edits)
            return bool(t.ok), self.plan_summary(t.plan, t.final(), t.how)
        if r.best is None:
            c = r.closest
            return Outcome("no-solution", how, self.base_plan, base, base, search=stats, errors_before=base_err,
                           evaluate=evaluate, closest=self.alternative(
                               c.edits, c.plan, c.final(), c.how, f"no set of edits found within {budget} replays "
                               "meets the tolerance; this is the closest replayed",
                               modify_mixlist=self.full_mixlist(c.edits)))
        best = r.best
        proved = all(not c["meets_tolerance_without_it"] for c in r.minimality)
        minimality = Minimality(proved, "1-minimal by replay: removing any single edit fails the tolerance on a "
                                "replay" if proved else "not 1-minimal: " + ", ".join(
                                    c["edit"] for c in r.minimality if c["meets_tolerance_without_it"]) + " can be dropped",
                                [MinimalityCheck(**c) for c in r.minimality], "replayed" if how == "replayed" else how)
        fewest = (self.alternative(r.fewest.edits, r.fewest.plan, r.fewest.final(), how, "fewest edits; it keeps less "
                                   "compute in low precision than the recommendation")
                  if r.fewest is not None and r.fewest.edits != best.edits else None)
        without = {}
        for e in best.edits:                  # the search replayed each of these (minimality): looked up
            w = s.replayed(best.edits - {e})
            without[e] = (w.plan, self.plan_summary(w.plan, w.final(), how))
        tl = r.type_level
        type_level = None if tl is None else self.alternative(
            tl.edits, tl.plan, tl.final(), how, "the best type-level advice (modify_mixlist only): use it where "
            "per-op files are not accepted (torch_npu eager, torchair); it keeps less compute in low precision",
            modify_mixlist=self.full_mixlist(tl.edits),
            fp32_types=sorted(e.type for e in tl.edits if e.kind == "black-add" or e.is_keep),
            keep_dtype=self.keep_lines([e for e in tl.edits if e.is_keep]))
        mixed = None if uses_mixlist(self.mode) else self.mixed_mode_alternative(best, budget, skip, how)
        return Outcome("recommended", how, self.base_plan, base, self.plan_summary(best.plan, best.final(), how),
                       best.edits, best.plan, without, minimality, fewest, search=stats, reasons=s.reasons(best.edits),
                       score=base_err, errors_before=base_err, errors_after=s.node_errors(best), evaluate=evaluate,
                       type_level=type_level, mixed_mode=mixed)

    def mixed_mode_alternative(self, best: Any, budget: int, skip: set, how: str) -> Alternative | None:
        """In a mode without a mixlist (force_fp16, ...): the best type-level list of the matching mixed mode, by
        replay (half the budget); when it keeps more compute low than ``best`` (the keeps found in the run's mode)
        by more than KEEP_MARGIN, a note and recommendation.json's ``mixed_mode_alternative``."""
        from .replay_search import KEEP_MARGIN, ReplaySearch
        mixed = mixed_mode_of(self.mode)
        r = ReplaySearch(self.a, self.base_lists, self.steps, exclude=self.exclude, budget=budget // 2,
                         max_exhaustive=min(3, self.max_edits), skip=skip, mode=mixed).run()
        if r.best is None or r.best.share <= best.share + KEEP_MARGIN:
            return None
        which = ", ".join(sorted(str(e) for e in r.best.edits)) or "the default lists"
        self.notes.append(f"switching to --precision_mode_v2={mixed} with modify_mixlist ({which}) keeps "
                          f"{r.best.share:.1%} of float time in low precision ({how}), more than the {best.share:.1%} of "
                          f"{self.mode} with the keeps above (mixed_mode_alternative)")
        return self.alternative(r.best.edits, r.best.plan, r.best.final(), how, mode=mixed,
                                modify_mixlist=self.full_mixlist(r.best.edits))

    def keep_lines(self, keeps: list[Edit]) -> list[str]:
        """keep_dtype.cfg lines: the run's own and ``keeps``."""
        return overrides_with(self.base_plan.overrides, keeps).keep_dtype_text().splitlines() if keeps else []

    def customize_lines(self, customs: list[Edit]) -> list[str]:
        """customize_dtypes.cfg lines: the run's own and ``customs`` (an advised line replaces the run's for the
        same op; the search never proposes one for an op the run customizes)."""
        return overrides_with(self.base_plan.overrides, customs).customize_text().splitlines() if customs else []

    # ------------------------------------------------------------------ estimated
    def estimated(self, ops: pd.DataFrame | None, measured_final: float | None, max_candidates: int,
                  max_evals: int, time_budget_s: float | None) -> Outcome:
        from .model import ErrorModel, build_evidence
        from .search import Searcher, pred_dict
        a = self.a
        culprit_types, culprit_nodes, scope = [], [], []
        if ops is None and a.has_dumps:
            att = a.attribution(self.steps)
            ops = att.ops if att.ops is not None and not att.ops.empty else None
            if att.types is not None and not att.types.empty:
                culprit_types = [str(t) for t in att.types.index]
                culprit_nodes = [str(x) for x in att.types.get("worst_instance", pd.Series(dtype=object)).tolist()
                                 if x is not None]
            measured_final = _worst_final(att.final)
            self.findings.extend(F.saturation(ops))
            if att.first_exceeding is not None:
                from .replay_search import dump_scope
                scope = dump_scope(a, att.first_exceeding)
        ev = build_evidence(a.compiled, ops, a.run.local_errors) if (ops is not None or _has_local(a)) else None
        self.evidence = ev
        model = ErrorModel(a.compiled, ev, a.times, a.low_dtype, a.plan, None, measured_final)
        s = Searcher(a.compiled, self.base_lists, self.mode, model, a.tolerance, self.exclude, base_plan=self.base_plan)

        def summ(e) -> PlanSummary:
            return self.plan_summary(e.plan, pred_dict(e.pred), "estimated")
        self.calibration = Calibration(
            model.measured_final, model.base_pred, model.scale,
            model.scale_note or ("the model is scaled so that it reproduces the measured final error of the run"
                                 if model.measured_final is not None else
                                 "no finite measured final error: the model is not scaled"))

        def evaluate(edits: frozenset) -> tuple[bool, PlanSummary]:
            e = s.evaluate(edits)
            return e.ok, summ(e)
        base = summ(s.base)
        contrib = s.base_contributions() if model.enabled else np.zeros(len(a.compiled))
        if s.base.ok:
            return Outcome("no-change-needed", "estimated", self.base_plan, base, base, evaluate=evaluate,
                           minimality=Minimality(True, "no edit is needed: the model predicts the run already meets "
                                                 "the tolerance"), dump_scope=scope)
        cands = s.fix_candidates(culprit_types, max_candidates=max_candidates, extra_nodes=culprit_nodes)
        best, fewest, closest, stats = s.search(cands, max_edits=self.max_edits, max_evals=max_evals,
                                                time_budget_s=time_budget_s)
        stats = SearchStats.of({**stats, "method": "error model", "max_edits": self.max_edits})
        err_b = _errors(model.evaluate(s.base_plan, keep_arrays=True))
        if best is None:
            return Outcome("no-solution", "estimated", self.base_plan, base, base, search=stats, errors_before=err_b,
                           evaluate=evaluate, dump_scope=scope, closest=Alternative(
                               sorted(closest.edits, key=str), "estimated", summ(closest),
                               f"no set of at most {self.max_edits} edits from the candidates meets the tolerance; "
                               "this is the closest the model found", modify_mixlist=self.full_mixlist(closest.edits)))
        chosen, proof = s.minimize(best)
        if fewest is not None and fewest.size > chosen.size:
            fewest = chosen
        proved = all(not p["meets_tolerance_without_it"] for p in proof)
        minimality = Minimality(proved, "1-minimal under the model: removing any single edit makes the predicted final "
                                "error exceed the tolerance" if proved else "not 1-minimal",
                                [MinimalityCheck(**p) for p in proof], "estimated")
        alt = (Alternative(sorted(fewest.edits, key=str), "estimated", summ(fewest), "fewest edits; it keeps less "
                           "compute in low precision than the recommendation")
               if fewest is not None and fewest.edits != chosen.edits else None)
        return Outcome("recommended", "estimated", self.base_plan, base, summ(chosen), chosen.edits, chosen.plan,
                       {e: (s.evaluate(chosen.edits - {e}).plan, summ(s.evaluate(chosen.edits - {e})))
                        for e in chosen.edits}, minimality, alt,
                       search=stats, reasons={cd.edit: (list(cd.nodes), cd.reason) for cd in cands}, score=contrib,
                       errors_before=err_b, errors_after=_errors(model.evaluate(chosen.plan, keep_arrays=True)),
                       evaluate=evaluate, dump_scope=scope)

    # ------------------------------------------------------------------ the recommendation
    def finish(self, out: Outcome, measured: MeasuredRun | None, perf: bool, out_dir: str | Path | None
               ) -> Recommendation:
        a = self.a
        chosen_plan = out.chosen_plan or out.base_plan
        reports = [self.report(out, e) for e in sorted(out.chosen, key=lambda x: (x.kind, x.type))]
        perf_reports, perf_set = (performance_edits(self, out, chosen_plan) if perf and out.status in
                                  ("recommended", "no-change-needed", "profile-only") else ([], out.chosen))
        self.findings.extend(F.profile_casts(a.run.kernels))
        self.findings.extend(F.dump_overflow(a.graph, a.run.target_dump))
        self.findings.extend(F.cast_churn(chosen_plan, a.times))
        ok = out.status in ("recommended", "no-change-needed")
        predicted = Predicted(out.base, out.result, bool(measured.verdict.ok) if measured and measured.applies else
                              None, ok, round(out.result.time_us - out.base.time_us, 3), a.times.source, out.how)
        if measured is not None:
            m = self.plan_summary(a.plan, measured.final, "measured")
            m.meets_tolerance, m.reasons, m.steps = (bool(measured.verdict.ok), list(measured.verdict.reasons)[:6],
                                                     measured.steps)
            predicted.measured = m
        if perf_reports:
            predicted.with_performance_edits = out.evaluate(frozenset(perf_set))[1]
        rec = Recommendation(
            out.status, ok, mode=self.mode, soc=a.defaults.soc, tolerance=ToleranceLimits.of(a.tolerance),
            modify_mixlist=self.full_mixlist(out.chosen), start_mixlist=self.start, edits=reports,
            performance_edits=perf_reports, performance_mixlist=self.full_mixlist(perf_set) if perf_reports else None,
            predicted=predicted, minimality=out.minimality, fewest_edit_alternative=out.fewest, closest=out.closest,
            findings=self.findings, calibration=self.calibration,
            search=_with_max_edits(out.search, self.max_edits), loss_scale=(measured.train if measured and
                                                                            measured.train else None),
            notes=self.notes, keep_dtype=self.keep_lines([e for e in out.chosen if e.is_keep]),
            customize_dtypes=self.customize_lines([e for e in out.chosen if e.is_customize]),
            type_level_alternative=out.type_level, mixed_mode_alternative=out.mixed_mode, dump_scope=out.dump_scope,
            curve=curve(a.compiled, out.errors_before, out.errors_after, None, out.base_plan, chosen_plan, a.times))
        rec.out_dir = None if out_dir is None else str(Path(out_dir).resolve())
        base = Path(rec.out_dir) if rec.out_dir else Path()
        rec.snippets = rec_snippets(rec, str(base / MIXLIST_NAME), str(base / KEEP_DTYPE_NAME),
                                    str(base / CUSTOMIZE_DTYPES_NAME))
        return rec

    def report(self, out: Outcome, e: Edit, purpose: str = "fix", without_plan: Plan | None = None,
               with_plan: Plan | None = None, without: PlanSummary | None = None,
               with_: PlanSummary | None = None) -> EditReport:
        """The evidence and explanation of one edit of the chosen set (or a performance edit)."""
        c = self.a.compiled
        with_plan = with_plan or out.chosen_plan
        if without_plan is None:               # the search's own plan of the chosen set without it
            without_plan, without = out.without.get(e, (out.base_plan, out.base))
        with_ = with_ if with_ is not None else out.result
        nflip, fl = flips(without_plan, with_plan)
        nodes, reason = out.reasons.get(e, ([], None))
        score = out.score if out.score is not None else np.zeros(len(c))
        worst = worst_instances(c, e, nodes, without_plan, with_plan, score, self.evidence)
        dt = with_.time_us - without.time_us
        evidence = EditEvidence(worst, local_vs_received(c, e, self.evidence), reason, with_, out.how)
        text = explain(e, purpose, worst, without, with_, nflip, dt, out.how)
        if e.kind == "black-add" or e.is_keep:     # "keep it fp32": on A2/A3 an fp32 Conv is HF32
            text = " ".join(x for x in (text, hf32_note(e.type, self.a.numerics, self.a.defaults.soc)) if x)
        return EditReport(e, purpose, text, evidence, round(dt, 3), fl, nflip, without if purpose == "fix" else None)


def performance_edits(ctx: SearchContext, out: Outcome, plan: Plan, headroom: float = 0.1, min_share: float = 0.01
                      ) -> tuple[list[EditReport], frozenset]:
    """Performance edits: types running fp32 only by black membership or gray inheritance with at least
    ``min_share`` of the kernel time to gain, each tried on top of the chosen set by the outcome's own evaluator
    (a replay, or the error model when the type's local error leaves headroom).  Every candidate is a finding
    with its verdict."""
    a = ctx.a
    cands = perf_candidates(plan, a.times, lists_with(ctx.base_lists, out.chosen), ctx.evidence, ctx.proposable,
                            {e.type for e in out.chosen}, min_share)
    cur, reports = frozenset(out.chosen), []
    rel_tol = a.tolerance.max_rel_l2
    for pc in cands:
        e = pc["edit"]
        entry = {"kind": "fp32-by-inheritance-or-black", "type": e.type, "list": pc["current_list"],
                 "rules": pc["rules"], "instances": pc["instances"], "time_saved_us_if_low":
                 round(pc["saving_us"], 3), "estimated": ["time_saved_us_if_low"], "measured": pc["measured"],
                 "worst_local_rel_l2": pc["worst_local_rel_l2"], "local_nonfinite": pc["local_nonfinite"],
                 "edit": str(e)}
        ctx.findings.append(entry)
        if out.evaluate is None or (out.how == "estimated" and not pc["measured"]):
            entry["verdict"] = "needs sensitivity data (dumps or an emulator capture) before moving it"
            continue
        if out.how == "estimated" and (pc["local_nonfinite"] or pc["worst_local_rel_l2"] > headroom * rel_tol):
            entry["verdict"] = "no headroom: local error at low precision too large"
            continue
        _, prev = out.evaluate(cur)
        options = [e] + ([Edit("black-remove", e.type)] if pc["current_list"] == BLACK else [])
        good = []
        for o in options:
            ok, res = out.evaluate(cur | {o})
            if ok and res.time_us < prev.time_us:      # faster, Casts GE would insert included
                good.append((res.time_us, o.kind != "black-remove", o, res))
        if not good:
            entry["verdict"] = f"{out.how}: it breaks the tolerance or gains nothing"
            continue
        _, _, o, res = min(good, key=lambda g: (g[0], g[1]))
        entry.update(edit=str(o), verdict=f"proposed ({out.how})")
        p_without = a.compiled.what_if(ctx.base_plan, lists_with(ctx.base_lists, cur))
        cur = cur | {o}
        p_with = a.compiled.what_if(ctx.base_plan, lists_with(ctx.base_lists, cur))
        reports.append(ctx.report(out, o, "performance", p_without, p_with, prev, res))
    return reports, cur


def perf_candidates(plan: Plan, times: Any, lists: Any, ev: Any, may_propose: Callable[[str], bool], fixed: set,
                    min_share: float = 0.01) -> list[dict]:
    """Types running fp32 only because of black membership or inheritance whose low-precision kernels would
    save at least ``min_share`` of the kernel time, costliest first, with their measured local errors."""
    c = plan.compiled
    low = low_mask(plan)
    types = np.asarray(c.types, dtype=object)
    rules = np.asarray(plan.rules, dtype=object)
    sel = np.flatnonzero((np.asarray(c.kind) == NodeKind.OP) & ~low & np.isin(rules, list(FP32_BY_LIST)))
    total = max(times.kernel_time(low, cpu_mask(plan)), 1e-9)
    out = []
    for t in sorted(set(types[sel].tolist())):
        if not may_propose(t) or t in fixed:
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


def _with_max_edits(stats: SearchStats, max_edits: int) -> SearchStats:
    stats.max_edits = max_edits
    return stats


def _avoided(item: Any) -> tuple[Mixlist | None, frozenset]:
    """An ``avoid`` entry -- a mixlist, a (mixlist, keep_dtype lines) pair, or an edit set (relative to the chip
    defaults: list edits and per-op overrides) -- as (mixlist, per-op override edits)."""
    if isinstance(item, frozenset):
        return mixlist_of(item), override_edits(item)
    if isinstance(item, tuple):
        return item[0], frozenset(keep_line_edit(ln) for ln in item[1])
    return item, frozenset()


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
