"""What the loop runs next (docs/tune.md "Policy").

After a failing list: the learned combination of measured fixes if the surrogate predicts it passes, else a
new proposal from recommend on the latest measurements — never a list already run or excluded (recommend's
replay search skips their plans and goes on to the next best candidate it predicts to pass), screened by the
surrogate.  After a passing list: the surrogate's trim of an over-fix, then **measured trimming** — the
passing list minus each edit, the most expensive edit first, while budget remains: the final list is
1-minimal by measurement or the summary says it is not — then recommend's performance edits.  A measurement
that contradicts its prediction is a *miss*: recorded, and from then on recommend widens its candidates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..compare.training import scale_text
from ..mixlist import Mixlist
from .edits import edit_key, edits_of, edits_to_json, keeps_of, mixlist_from_edits
from .journal import Iteration, TuneState
from .stages import Proposal, Stages
from .surrogate import Surrogate

MAX_SCREEN = 6               # proposals the surrogate may reject per decision (no run spent)


@dataclass
class Candidate:
    """A list the policy schedules: why, what was predicted for it, and the loss scale it runs with."""

    mixlist: Mixlist | None
    reason: str
    predicted: dict = field(default_factory=dict)
    loss_scale: float | None = None
    keeps: tuple = ()                      # keep_dtype lines (per-op advice) the run adds

    @property
    def edits(self) -> frozenset:
        return edits_of(self.mixlist, self.keeps)

    @classmethod
    def of_edits(cls, edits: frozenset, reason: str, predicted: dict | None = None,
                 loss_scale: float | None = None) -> "Candidate":
        """The candidate running exactly ``edits`` (list edits and keeps)."""
        return cls(mixlist_from_edits(edits), reason, predicted or {}, loss_scale, keeps_of(edits))


class Policy:
    """Decides the next list to run from the journal's state and the measurements."""

    def __init__(self, state: TuneState, stages: Stages, surrogate: Surrogate, learn: bool, perf: bool,
                 load: Callable[[Iteration], Any], calib_steps: Callable[[Iteration], list[int] | None]):
        self.state, self.stages, self.surrogate = state, stages, surrogate
        self.learn, self.perf = learn, perf
        self.load, self.calib_steps = load, calib_steps
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
        does pass -- the fix minus one edit (speculative trimming); else recommend's next untried candidate,
        the run needed if the fix fails."""
        taken = [n.edits for n in scheduled if n.loss_scale == self.scale]
        passing = self.state.passing()
        if passing:
            best = max(passing, key=lambda p: ((p.low_precision_time_share or 0.0), -len(p.edits), -p.index))
            if best.loss_scale != self.scale:
                return None
            return self.measured_trim(best, also=taken)
        src = it if it.measured else self.measured_ancestor(it)
        if src is None:
            return None
        for c in scheduled:
            edits, pred = c.edits, c.predicted
            if c.loss_scale == self.scale and pred.get("ok") and str(pred.get("how") or "") == "replayed" \
                    and len(edits) >= 2:
                trim = self.trim_of(edits, self.load(src), taken, label="of the fix scheduled beside it")
                if trim is not None:
                    return trim
        prop = self.propose(src, d, also=taken)
        if prop is None:
            return None
        return Candidate(prop.mixlist, "fix: recommended on the measurements of " + src.dir + " (next candidate)",
                         {**prop.predicted, "ok": prop.ok}, self.scale, prop.keeps)

    def after_pass(self, it: Iteration, d: Path) -> tuple[Candidate | None, str | None]:
        tol = self.stages.tolerance
        edits = it.edits
        if self.learn and it.measured:
            trimmed = self.surrogate.trim(edits, Surrogate.capped(it.measured["rel_l2"], it.measured["finite"]),
                                          tol.max_rel_l2)
            if trimmed is not None and trimmed not in self.tried() and trimmed not in self.excluded():
                dropped = ", ".join(edit_key(e) for e in sorted(edits - trimmed))
                return Candidate.of_edits(trimmed, f"trim over-fix: drop {dropped} (measured effect negligible)",
                                          {}, self.scale), None
        trim = self.measured_trim(it)
        if trim is not None:
            return trim, None
        if not self.perf:
            return None, "confirmed"
        best_share = max((p.low_precision_time_share or 0.0) for p in self.state.passing())
        prop = self.propose(it, d, want_perf=True)
        if prop is None:
            return None, "confirmed: recommend proposes no further edit"
        ps = prop.predicted.get("low_share")
        if ps is not None and it.low_precision_time_share is not None and ps <= best_share + 1e-9:
            return None, "confirmed: no proposal with more low-precision time"
        return Candidate(prop.mixlist, "performance edits on a passing list", {**prop.predicted, "ok": prop.ok},
                         self.scale, prop.keeps), None

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
        for e in sorted(edits):
            rest = edits - {e}
            if rest in tried or rest in excluded:
                continue
            keeps = keeps_of(rest)
            share = (self.stages.predicted_share(run, mixlist_from_edits(rest), keeps=keeps) if keeps else
                     self.stages.predicted_share(run, mixlist_from_edits(rest)))
            options.append((-(share if share is not None else 0.0), edit_key(e), e, rest, share))
        if not options:
            return None
        _, key, e, rest, share = min(options)
        return Candidate.of_edits(rest, f"trim: measure whether {key} is needed" + (f" ({label})" if label else ""),
                                  {"low_share": share, "how": "estimated (cost model)"} if share is not None else {},
                                  self.scale)

    def after_fail(self, it: Iteration, d: Path) -> tuple[Candidate | None, str | None]:
        passing = self.state.passing()
        if passing:
            # a list already passes (this run was a trim or a performance try): go on trimming the best one
            best = max(passing, key=lambda p: ((p.low_precision_time_share or 0.0), -len(p.edits), -p.index))
            self.scale = best.loss_scale
            trim = self.measured_trim(best)
            if trim is not None:
                return trim, None
            return None, "confirmed: every smaller list was measured"
        if self.learn:
            combo = self.surrogate.combine(self.stages.tolerance.max_rel_l2)
            if combo is not None and combo not in self.tried() and combo not in self.excluded():
                return Candidate.of_edits(combo, "learned: combine the edits measured to remove error "
                                          f"({', '.join(edit_key(e) for e in sorted(combo))})",
                                          {"surrogate_rel_l2": self.surrogate.predict(combo)}, self.scale), None
        src = it if it.measured else self.measured_ancestor(it)
        if src is None:
            return None, "no measured run to recommend from"
        prop = self.propose(src, d)
        if prop is None:
            advice = next((x["loss_scale"] for x in src.proposals[-1]["log"] if x.get("status") == "loss-scale"
                           and x.get("loss_scale")), None)
            if advice is not None:
                return self.scaled(src, advice)
            return None, "recommend found no further untried edit set it predicts to pass"
        return Candidate(prop.mixlist, "fix: recommended on the measurements of " + src.dir,
                         {**prop.predicted, "ok": prop.ok}, self.scale, prop.keeps), None

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
        return Candidate(src.as_mixlist(), f"loss scale {scale_text(scale)}: only the gradients fail, by underflow in low "
                         f"precision ({advice.get('reason', '')}); the same list with the scaled backward",
                         {"underflow": advice.get("predicted_underflow"), "how": "estimated (golden gradient "
                          "magnitudes)"}, float(scale), src.keeps), None

    def measured_ancestor(self, it: Iteration) -> Iteration | None:
        p = it.parent
        while p is not None:
            cand = self.state.iterations[p]
            if cand.measured:
                return cand
            p = cand.parent
        return None

    def propose(self, src: Iteration, d: Path, want_perf: bool = False, also: list | None = None) -> Proposal | None:
        """Recommend on ``src``'s run (starting from the list it used), never a list already run or excluded.
        A proposal the surrogate predicts to fail is excluded without a run and recommend is asked again with
        its new edit types excluded -- at most MAX_SCREEN times."""
        run = self.load(src)
        base = src.as_mixlist()
        base_edits = src.edits
        steps = self.calib_steps(src)
        exclude_types: set[str] = set()
        if self.learn:
            exclude_types |= self.surrogate.useless_types(self.stages.tolerance.max_rel_l2) - {e[2] for e in base_edits}
        log: list[dict] = [{"learned_exclude": sorted(exclude_types)}] if exclude_types else []
        avoid_sets = self.tried() | set(self.excluded()) | set(also or [])
        # what recommend must not propose again: lists, with their keep lines when they have some
        avoid = [(mixlist_from_edits(e), keeps_of(e)) if keeps_of(e) else mixlist_from_edits(e) for e in avoid_sets]
        out = None
        for attempt in range(MAX_SCREEN + 1):
            rec = self.stages.recommend(run, base, sorted(exclude_types), steps, avoid=avoid, widen=self.state.widen)
            if attempt == 0 and not also:
                self.stages.write_recommendation(rec, d / "recommendation")
            prop = (Proposal(rec.perf_mixlist, rec.perf_predicted or rec.predicted, rec.ok, rec.raw)
                    if want_perf and rec.perf_mixlist is not None else rec)
            if src.keeps or prop.keeps:           # the run's own keep lines stay; recommend adds to them
                prop.keeps = tuple(sorted(set(src.keeps) | set(prop.keeps)))
            if prop.edits == base_edits:
                log.append({"attempt": attempt, "result": "no new edit", "status": rec.status,
                            **({"loss_scale": rec.loss_scale} if rec.loss_scale else {})})
                break
            new_types = {e[2] for e in (prop.edits - base_edits) or (base_edits - prop.edits)}
            screened = self.surrogate.screen(prop.edits, self.stages.tolerance.max_rel_l2) if self.learn else (True, None)
            if prop.edits in avoid_sets:
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "already tried"})
            elif not screened[0]:
                self.state.exclude(prop.edits, f"surrogate: measured effects of these edits predict rel_l2 "
                                               f"{screened[1]:.3g}", None, self.scale)
                avoid.append((prop.mixlist, prop.keeps) if prop.keeps else prop.mixlist)
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "surrogate rejected",
                            "predicted_rel_l2": screened[1]})
            else:
                if screened[1] is not None:
                    prop.predicted = {**prop.predicted, "surrogate_rel_l2": screened[1]}
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "proposed"})
                out = prop
                break
            if not new_types - exclude_types and log[-2:-1] and log[-2].get("edits") == log[-1].get("edits"):
                break                     # recommend answers the same even with these types excluded
            exclude_types |= new_types
        src.proposals.append({"from": src.dir, "perf": want_perf, "log": log})
        return out
