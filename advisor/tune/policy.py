"""What the loop runs next (docs/tune.md "Policy").

After a failing list: the learned combination of measured fixes if the surrogate predicts it passes, else a
new proposal from recommend on the latest measurements -- never a list already run or excluded (recommend's
replay search skips their plans and goes on to the next best candidate it predicts to pass), screened by the
surrogate; when recommend predicts no list to pass, the most promising untried one by its evidence (the
closest it replayed or estimated).  After a passing list: confirmed at once when replay has measured every
one-smaller list failing on the same data (**1-minimal by replay**; ``measure_minimality`` measures them
instead), else the surrogate's trim of an over-fix, then **measured trimming** -- the passing list minus each
edit, the most expensive edit first, while budget remains -- then recommend's performance edits.  A
measurement that contradicts its prediction is a *miss*: recorded, and from then on recommend widens its
candidates (and replay no longer stands in for measured minimality).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..compare.training import scale_text
from ..mixlist import Mixlist
from ..recommend.edits import Edit, customize_lines, edits_of, edits_to_json, keep_lines, mixlist_of, override_edits
from ..recommend.result import Recommendation
from .journal import Iteration, TuneState
from .stages import Stages
from .surrogate import Surrogate

MAX_SCREEN = 6               # proposals the surrogate may reject per decision (no run spent)
CONFIRMED_BY_REPLAY = ("confirmed: 1-minimal by replay (recommend replayed the list without each of its edits on the "
                       "FP32 data of the run it recommended it from, the same batches, and every one fails; "
                       "--measure-minimality runs them)")


@dataclass
class Candidate:
    """A list the policy schedules: its edits (relative to the chip defaults), why, what was predicted for it,
    the loss scale it runs with and the ops whose tensors its run dumps beside the statistics."""

    edits: frozenset
    reason: str
    predicted: dict = field(default_factory=dict)
    loss_scale: float | None = None
    dump_tensors: tuple = ()

    @property
    def mixlist(self) -> Mixlist | None:
        return mixlist_of(self.edits)

    @property
    def keeps(self) -> tuple[str, ...]:
        return keep_lines(self.edits)

    @property
    def customize(self) -> tuple[str, ...]:
        return customize_lines(self.edits)


def avoided(edits: frozenset):
    """What recommend must not propose again (``recommend(avoid=)``): the list, or -- with per-op overrides
    (keep_dtype / customize_dtypes lines) -- the whole edit set."""
    return edits if override_edits(edits) else mixlist_of(edits)


def prediction_of(rec: Recommendation, perf: bool = False, proved: bool = False) -> dict:
    """The journal's ``predicted`` of a list recommend proposed: final error, share, how, whether it passes and
    (``proved``) whether replay showed every one-smaller list failing."""
    p = (rec.predicted.with_performance_edits or rec.predicted.recommended) if perf else rec.predicted.recommended
    if rec.status == "no-solution" and rec.closest is not None:
        p = rec.closest.predicted
    out = {"rel_l2": p.final_rel_l2, "nonfinite": p.final_nonfinite, "cosine": p.final_cosine,
           "low_share": p.low_precision_share, "how": p.how, "ok": bool(rec.ok)}
    if proved:
        out["minimal_by_replay"] = True
    return out


class Policy:
    """Decides the next list to run from the journal's state and the measurements (built once per tune)."""

    def __init__(self, state: TuneState, stages: Stages, surrogate: Surrogate, learn: bool, perf: bool,
                 load: Callable[[Iteration], Any], calib_steps: Callable[[Iteration], list[int] | None],
                 measure_minimality: bool = False, scoped_dumps: bool = False):
        self.state, self.stages, self.surrogate = state, stages, surrogate
        self.learn, self.perf = learn, perf
        self.load, self.calib_steps = load, calib_steps
        self.measure_minimality = measure_minimality
        self.scoped_dumps = scoped_dumps      # the runner can dump tensors for chosen ops beside the statistics
        self.scale: float | None = None      # the loss scale of the list deciding (runs are tried at a scale)

    def tried(self) -> set:
        return self.state.tried(self.scale)

    def excluded(self) -> list:
        return self.state.excluded_sets(self.scale)

    # ------------------------------------------------------------------ misses
    def check_prediction(self, it: Iteration) -> None:
        """Record a miss when the run's calibration verdict contradicts what was predicted for it."""
        pred = it.predicted or {}
        if "ok" not in pred or it.measured is None:
            return
        measured_ok = bool(((it.verdict or {}).get("calibration") or {}).get("ok"))
        if bool(pred["ok"]) == measured_ok:
            return
        it.miss = {"predicted_ok": bool(pred["ok"]), "measured_ok": measured_ok, "how": pred.get("how"),
                   "predicted_rel_l2": pred.get("rel_l2"), "measured_rel_l2": it.measured.get("rel_l2")}
        self.state.misses.append({"iteration": it.index, **it.miss})
        self.state.widen = True

    def minimal_by_replay(self, it: Iteration) -> bool:
        """``it`` passed as predicted, and its prediction says replay measured every one-smaller list failing;
        replay has not been wrong in this tune (no miss)."""
        return (bool((it.predicted or {}).get("minimal_by_replay")) and it.ok and not self.state.misses
                and not self.measure_minimality)

    # ------------------------------------------------------------------ decisions
    def next(self, it: Iteration, d: Path, k: int = 1) -> tuple[list[Candidate], str | None]:
        """Up to ``k`` lists to run next (``--parallel``): the policy's choice first, then the next best ones it
        would choose were the earlier ones already run (another trim, recommend's next untried candidate)."""
        self.scale = it.loss_scale
        first, stop = self.after_pass(it, d) if it.ok else self.after_fail(it, d)
        if first is None:
            return [], stop
        out = [first]
        while len(out) < k:
            extra = self.another(it, d, out)
            if extra is None:
                break
            out.append(extra)
        return out, None

    def another(self, it: Iteration, d: Path, scheduled: list[Candidate]) -> Candidate | None:
        """One more list to run beside ``scheduled`` (chosen, not yet run).  With a passing list: its next
        measured trim.  Otherwise, when a scheduled fix is *replayed* to pass, the run it needs next if it
        does pass -- the fix minus one edit (speculative trimming; not when replay already proved it
        1-minimal); else recommend's next untried candidate, the run needed if the fix fails."""
        taken = [n.edits for n in scheduled if n.loss_scale == self.scale]
        passing = self.state.passing()
        if passing:
            best = max(passing, key=lambda p: ((p.low_precision_time_share or 0.0), -len(p.edits), -p.index))
            if best.loss_scale != self.scale or self.minimal_by_replay(best):
                return None
            return self.measured_trim(best, also=taken)
        src = it if it.measured else self.measured_ancestor(it)
        if src is None:
            return None
        for c in scheduled:
            pred = c.predicted
            if c.loss_scale == self.scale and pred.get("ok") and str(pred.get("how") or "") == "replayed" \
                    and len(c.edits) >= 2 and (self.measure_minimality or not pred.get("minimal_by_replay")):
                trim = self.trim_of(c.edits, self.load(src), taken, label="of the fix scheduled beside it")
                if trim is not None:
                    return trim
        return self.propose(src, d, also=taken, reason=f"fix: recommended on the measurements of {src.dir} "
                                                       "(next candidate)")

    def after_pass(self, it: Iteration, d: Path) -> tuple[Candidate | None, str | None]:
        tol = self.stages.tolerance
        edits = it.edits
        if not self.minimal_by_replay(it):
            if self.learn and it.measured:
                trimmed = self.surrogate.trim(edits, Surrogate.capped(it.measured["rel_l2"], it.measured["finite"]),
                                              tol.max_rel_l2)
                if trimmed is not None and trimmed not in self.tried() and trimmed not in self.excluded():
                    dropped = ", ".join(e.key for e in sorted(edits - trimmed, key=lambda e: e.entry))
                    return Candidate(trimmed, f"trim over-fix: drop {dropped} (measured effect negligible)", {},
                                     self.scale), None
            trim = self.measured_trim(it)
            if trim is not None:
                return trim, None
        if not self.perf:
            return None, CONFIRMED_BY_REPLAY if self.minimal_by_replay(it) else "confirmed"
        best_share = max((p.low_precision_time_share or 0.0) for p in self.state.passing())
        prop = self.propose(it, d, want_perf=True, reason="performance edits on a passing list")
        if prop is None:
            return None, (CONFIRMED_BY_REPLAY if self.minimal_by_replay(it) else
                          "confirmed: recommend proposes no further edit")
        ps = prop.predicted.get("low_share")
        if ps is not None and it.low_precision_time_share is not None and ps <= best_share + 1e-9:
            return None, (CONFIRMED_BY_REPLAY if self.minimal_by_replay(it) else
                          "confirmed: no proposal with more low-precision time")
        return prop, None

    def measured_trim(self, it: Iteration, also: list | None = None) -> Candidate | None:
        """The passing list minus one edit not yet measured, the edit costing the most low-precision time
        first; None when every such subset was measured (the list is then 1-minimal by measurement)."""
        if not it.edits:
            return None
        return self.trim_of(it.edits, self.load(it), also or [])

    def trim_of(self, edits: frozenset, run: Any, also: list, label: str = "") -> Candidate | None:
        """``edits`` minus one edit, not run, scheduled or excluded: the one whose removal gives back the most
        low-precision time (cost model on ``run``)."""
        tried, excluded = self.tried() | set(also), self.excluded()
        options = []
        for e in sorted(edits, key=lambda x: x.entry):
            rest = edits - {e}
            if rest in tried or rest in excluded:
                continue
            keeps, custom = keep_lines(rest), customize_lines(rest)
            share = (self.stages.predicted_share(run, mixlist_of(rest), keeps=keeps, customize=custom)
                     if keeps or custom else self.stages.predicted_share(run, mixlist_of(rest)))
            options.append((-(share if share is not None else 0.0), e.key, rest, share))
        if not options:
            return None
        _, key, rest, share = min(options, key=lambda o: (o[0], o[1]))
        return Candidate(rest, f"trim: measure whether {key} is needed" + (f" ({label})" if label else ""),
                         {"low_share": share, "how": "estimated (cost model)"} if share is not None else {},
                         self.scale)

    def after_fail(self, it: Iteration, d: Path) -> tuple[Candidate | None, str | None]:
        passing = self.state.passing()
        if passing:
            # a list already passes (this run was a trim or a performance try): go on trimming the best one
            best = max(passing, key=lambda p: ((p.low_precision_time_share or 0.0), -len(p.edits), -p.index))
            self.scale = best.loss_scale
            if self.minimal_by_replay(best):
                return None, CONFIRMED_BY_REPLAY
            trim = self.measured_trim(best)
            if trim is not None:
                return trim, None
            return None, "confirmed: every smaller list was measured"
        if self.learn:
            combo = self.surrogate.combine(self.stages.tolerance.max_rel_l2)
            if combo is not None and combo not in self.tried() and combo not in self.excluded():
                return Candidate(combo, "learned: combine the edits measured to remove error "
                                 f"({', '.join(e.key for e in sorted(combo, key=lambda e: e.entry))})",
                                 {"surrogate_rel_l2": self.surrogate.predict(combo)}, self.scale), None
        src = it if it.measured else self.measured_ancestor(it)
        if src is None:
            return None, "no measured run to recommend from"
        prop = self.propose(src, d, reason="fix: recommended on the measurements of " + src.dir)
        if prop is None:
            advice = next((x["loss_scale"] for x in src.proposals[-1]["log"] if x.get("status") == "loss-scale"
                           and x.get("loss_scale")), None)
            if advice is not None:
                return self.scaled(src, advice)
            return None, "recommend found no further untried edit set (none predicted to pass, none closer)"
        return prop, None

    def scaled(self, src: Iteration, advice: dict) -> tuple[Candidate | None, str | None]:
        """Only the gradients fail, by underflow: the same list again with recommend's static loss scale
        (absolute: compare's factor times the scale ``src`` ran with) -- or a stop saying what to do."""
        where = f"{src.dir}/recommendation/recommendation.json: loss_scale"
        scale = advice.get("static")
        current = src.loss_scale or 1.0
        if advice.get("dynamic") or not isinstance(scale, (int, float)):
            return None, ("only the gradients fail (they underflow in low precision) and no static loss scale "
                          f"fits their range: use dynamic loss scaling ({where})")
        if scale <= current:
            return None, (f"only the gradients fail, by underflow, with the loss scale {scale_text(current)} already at or "
                          f"above the one their magnitudes call for ({scale_text(scale)}): see {where}")
        if src.edits in self.state.tried(float(scale)):
            return None, f"the loss scale {scale_text(scale)} was already run with this list ({where})"
        return Candidate(src.edits, f"loss scale {scale_text(scale)}: only the gradients fail, by underflow in low "
                         f"precision ({advice.get('reason', '')}); the same list with the scaled backward",
                         {"underflow": advice.get("predicted_underflow"), "how": "estimated (golden gradient "
                          "magnitudes)"}, float(scale)), None

    def measured_ancestor(self, it: Iteration) -> Iteration | None:
        p = it.parent
        while p is not None:
            cand = self.state.iterations[p]
            if cand.measured:
                return cand
            p = cand.parent
        return None

    def proposal(self, rec: Recommendation, src: Iteration, want_perf: bool) -> tuple[frozenset, dict]:
        """(edits relative to the chip defaults, predicted) of what recommend proposes: its list (with
        ``want_perf`` its performance list), or -- when it predicts no list to pass -- the closest one it
        replayed or estimated.  The run's own keep / customize lines stay; recommend adds to them (an advised
        customize line replaces the run's for the same op)."""
        if want_perf and rec.performance_mixlist is not None:
            m = rec.performance_mixlist
        elif rec.status == "no-solution" and rec.closest is not None and rec.closest.modify_mixlist is not None:
            m = rec.closest.modify_mixlist
        else:
            m = rec.modify_mixlist
        keeps = set(src.keeps) | {e.edit.line for e in rec.edits if e.edit.is_keep}
        advised = {e.edit.op: e.edit.line for e in rec.edits if e.edit.is_customize}
        custom = {e.op: e.line for e in src.edits if e.is_customize and e.op not in advised} | advised
        edits = edits_of(m if m is not None and not m.is_empty() else None, sorted(keeps), sorted(custom.values()))
        perf = want_perf and rec.performance_mixlist is not None
        # replay's checks cover the edits recommend added: a proof for the whole list when it started from none
        proved = not perf and rec.status == "recommended" and rec.minimality.by_replay and not src.edits
        return edits, prediction_of(rec, perf, proved)

    def propose(self, src: Iteration, d: Path, want_perf: bool = False, also: list | None = None,
                reason: str = "") -> Candidate | None:
        """Recommend on ``src``'s run (starting from the list it used), never a list already run or excluded.
        A proposal the surrogate predicts to fail is excluded without a run and recommend is asked again with
        its new edit types excluded -- at most MAX_SCREEN times.  The recommendation acted on is written to
        ``d/recommendation``."""
        run = self.load(src)
        base = src.as_mixlist()
        base_edits = src.edits
        steps = self.calib_steps(src)
        exclude_types: set[str] = set()
        if self.learn:
            exclude_types |= self.surrogate.useless_types(self.stages.tolerance.max_rel_l2) - {
                e.type for e in base_edits}
        log: list[dict] = [{"learned_exclude": sorted(exclude_types)}] if exclude_types else []
        avoid_sets = self.tried() | set(self.excluded()) | set(also or [])
        # what recommend must not propose again: lists, with their per-op lines when they have some
        avoid = [avoided(e) for e in avoid_sets]
        out, rec = None, None
        for attempt in range(MAX_SCREEN + 1):
            rec = self.stages.recommend(run, base, sorted(exclude_types), steps, avoid=avoid, widen=self.state.widen)
            edits, predicted = self.proposal(rec, src, want_perf)
            if edits == base_edits:
                advice = (rec.loss_scale or {}).get("loss_scale") if rec.status == "loss-scale" else None
                log.append({"attempt": attempt, "result": "no new edit", "status": rec.status,
                            **({"loss_scale": advice} if advice else {})})
                break
            new_types = {e.type for e in (edits - base_edits) or (base_edits - edits)}
            screened = self.surrogate.screen(edits, self.stages.tolerance.max_rel_l2) if self.learn else (True, None)
            if edits in avoid_sets:
                log.append({"attempt": attempt, "edits": edits_to_json(edits), "result": "already tried"})
            elif not screened[0]:
                self.state.exclude(edits, f"surrogate: measured effects of these edits predict rel_l2 "
                                          f"{screened[1]:.3g}", None, self.scale)
                avoid.append(avoided(edits))
                log.append({"attempt": attempt, "edits": edits_to_json(edits), "result": "surrogate rejected",
                            "predicted_rel_l2": screened[1]})
            else:
                if screened[1] is not None:
                    predicted = {**predicted, "surrogate_rel_l2": screened[1]}
                closest = rec.status == "no-solution"
                log.append({"attempt": attempt, "edits": edits_to_json(edits),
                            "result": "closest (none predicted to pass)" if closest else "proposed"})
                out = Candidate(edits, reason + ("; the most promising untried list by its evidence (none is "
                                                 "predicted to pass)" if closest else ""), predicted, self.scale,
                                tuple(rec.dump_scope) if self.scoped_dumps else ())
                break
            if not new_types - exclude_types and log[-2:-1] and log[-2].get("edits") == log[-1].get("edits"):
                break                     # recommend answers the same even with these types excluded
            exclude_types |= new_types
        if rec is not None and not also:
            self.stages.write_recommendation(rec, d / "recommendation")
        src.proposals.append({"from": src.dir, "perf": want_perf, "log": log})
        return out


__all__ = ["Policy", "Candidate", "MAX_SCREEN", "prediction_of", "CONFIRMED_BY_REPLAY", "Edit"]
