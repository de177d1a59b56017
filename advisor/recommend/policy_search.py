"""The torch_npu advice: the smallest set of policy edits (``policy_edits.PolicyEdit``) that brings a torch_npu run
within tolerance, found by replay (``replay_torch_npu.TorchNpuReplay``: semantics.torch_npu re-plans the run's
trace under each candidate policy, the FP32 dump is re-executed under that plan).

Candidates come from the replay of the run's own policy: the low-precision kernels ranked by where the error starts
(an op whose output is non-finite or far off while its inputs are not, then by its output's error), and for each
of the first ``MAX_OPS``: keep its aten op in fp32 everywhere and within its module, keep its module (and that
module's parent; for an op of the model's own forward the whole model, module "") in fp32, under Apex O1 register the patched function that cast it as a float function; under
autocast on a chip with bf16, the other autocast dtype.  A candidate that changes no op's dtype is dropped.

Search: sets by size (1 .. ``max_edits``); within a size, by the low-precision share they keep (the time model),
most first (at equal share: the fewest ops flipped, then the narrowest edits); the first set whose replay meets the
tolerance is the recommendation -- fewest edits, then most low-precision time kept -- and every one-smaller set is
replayed for its minimality.  A set with an edit that changes
nothing beside the others is skipped.  Every number says how it was obtained (replayed, or replayed with some ops
estimated from their FP32 outputs).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable

from ..precision_policy import PrecisionPolicy
from ..replay_torch_npu import INCOMPLETE, REPLAYED, TIME_HOW, TorchNpuReplay
from ..semantics import torch_npu as S
from .policy_edits import (DTYPE, KEEP_MODULE, KEEP_OP, POLICY_NAME, REGISTER_FLOAT, PolicyEdit, apply_snippet,
                           plain_pytorch, with_edits)
from .result import (Flip, Minimality, MinimalityCheck, PlanSummary, PolicyAdvice, PolicyEditReport, Predicted,
                     Recommendation, SearchStats, ToleranceLimits)

MAX_OPS = 6
DEFAULT_BUDGET = 200


@dataclass
class PolicyTrial:
    edits: frozenset
    policy: PrecisionPolicy
    plan: S.TorchPlan
    share: float
    ok: bool | None = None
    final: dict | None = None
    reasons: tuple = ()
    complete: bool = True

    @property
    def how(self) -> str:
        return REPLAYED if self.complete else INCOMPLETE

    def badness(self) -> tuple:
        f = self.final or {}
        rel = f.get("final_rel_l2")
        return (bool(f.get("final_nonfinite")), math.inf if rel is None else float(rel))


def _rel(a, b) -> tuple[bool, float]:
    """(non-finite, rel-L2) of replayed tensor ``a`` against golden ``b``."""
    import torch
    a, b = a.detach().double(), b.detach().double()
    if not bool(torch.isfinite(a).all()):
        return True, math.inf
    n = float(torch.linalg.vector_norm(b))
    d = float(torch.linalg.vector_norm(a - b))
    return False, d / n if n > 0 else d


def op_errors(rec: Any, res: Any) -> dict[str, tuple[int, float]]:
    """node -> (onset score, output rel-L2) from a replay: 2 an output non-finite while every input was finite,
    1 non-finite, 0 finite; the worst over the steps."""
    out: dict[str, tuple[int, float]] = {}
    for s, prog in rec.programs.items():
        ents = res.targets[s].entries if s in res.targets else {}
        err: dict[int, tuple[bool, float]] = {}
        for i, op in enumerate(prog.ops):
            recs = (ents.get(op.entry) or {}).get("_outputs") or []
            new = [r.get("tensor") for _, r in recs if isinstance(r, dict)]
            gold = op.golden_outputs
            worst = (False, 0.0)
            for a, b in zip(new, gold):
                if a is None or b is None or not a.is_floating_point() or a.shape != b.shape:
                    continue
                worst = max(worst, _rel(a, b))
            err[i] = worst
            if op.node is None:
                continue
            ins_nf = any(err.get(src[0], (False, 0.0))[0] for src in op.inputs if src is not None)
            score = (2 if not ins_nf else 1) if worst[0] else 0
            prev = out.get(str(op.node), (0, 0.0))
            out[str(op.node)] = max(prev, (score, worst[1]))
    return out


def _apex_function(trace: S.Trace, c: S.Call) -> str | None:
    fid = c.frame
    while 0 <= fid < len(trace.frames):
        f = trace.frames[fid]
        if f.kind == "apex":
            return f.op
        fid = f.parent
    return None


def candidates(r: TorchNpuReplay, base: PrecisionPolicy, errors: dict[str, tuple[int, float]],
               exclude: Iterable[str] = ()) -> list[PolicyEdit]:
    """The candidate edits, most promising first (module docstring); ``exclude``: aten ops, modules or functions
    never to edit ("dtype": never change the autocast dtype)."""
    skip = set(exclude)
    tp = r.plan(base)
    low = [(i, c) for i, (c, d) in enumerate(zip(r.trace.calls, tp.decisions)) if d.kernel and d.low and
           not c.backward]
    low.sort(key=lambda ic: (-errors.get(ic[1].name, (0, 0.0))[0], -errors.get(ic[1].name, (0, 0.0))[1], ic[0]))
    out: list[PolicyEdit] = []
    for _, c in low[:MAX_OPS]:
        # its module and that module's parent; an op of the model's own forward: the whole model ("")
        mods = [c.module, c.module.rpartition(".")[0]] if c.module else [""]
        cand = [PolicyEdit(KEEP_OP, op=c.op)]
        if c.module:
            cand.append(PolicyEdit(KEEP_OP, module=c.module, op=c.op))
        cand += [PolicyEdit(KEEP_MODULE, module=m) for m in dict.fromkeys(mods) if m or not c.module]
        fn = _apex_function(r.trace, c) if base.amp == "apex-o1" else None
        if fn:
            cand.append(PolicyEdit(REGISTER_FLOAT, function=fn))
        for e in cand:
            if e not in out and not ({e.op, e.module, e.function} & skip):
                out.append(e)
    if base.amp == "autocast" and S.has_bf16(r.config.soc) and DTYPE not in skip:
        out.append(PolicyEdit(DTYPE, dtype="bf16" if base.dtype == "fp16" else "fp16"))
    key0 = _plan_key(tp)
    return [e for e in out if _plan_key(r.plan(with_edits(base, [e]))) != key0]


_SCOPE = {"op-in-module": 0, KEEP_MODULE: 1, REGISTER_FLOAT: 2, KEEP_OP: 3, DTYPE: 4}


def _scope(e: PolicyEdit) -> str:
    return "op-in-module" if e.kind == KEEP_OP and e.module else e.kind


def _plan_key(tp: S.TorchPlan) -> tuple:
    return tuple((d.compute, d.out) for d in tp.decisions)


class PolicySearch:
    """The replay-measured smallest-change search over policy edits for one torch_npu run."""

    def __init__(self, r: TorchNpuReplay, tolerance: Any, base: PrecisionPolicy | None = None,
                 budget: int = DEFAULT_BUDGET, steps: Iterable[int] | None = None):
        self.r, self.tol = r, tolerance
        self.base = base if base is not None else r.policy
        self.budget, self.steps = budget, list(steps) if steps is not None else None
        self.trials: dict[tuple, PolicyTrial] = {}
        self.replays = 0
        self.truncated = False

    def trial(self, edits: Iterable[PolicyEdit], replay: bool = True) -> PolicyTrial:
        edits = frozenset(edits)
        pol = with_edits(self.base, edits)
        tp = self.r.plan(pol)
        key = _plan_key(tp)
        t = self.trials.get(key)
        if t is None:
            t = self.trials[key] = PolicyTrial(edits, pol, tp, self.r.low_share(tp))
        if replay and t.ok is None:
            res = self.r.replay(pol, self.steps)
            self.replays += 1
            v = self.tol.judge(res.final_metrics(tolerance=self.tol))
            w = v.worst or {}
            t.ok, t.reasons, t.complete = bool(v.ok), tuple(v.reasons), res.complete
            t.final = {"final_rel_l2": w.get("rel_l2"), "final_nonfinite": w.get("finite") is False,
                       "final_cosine": w.get("cosine")}
        return t

    def sets(self, cands: list[PolicyEdit], k: int) -> list[PolicyTrial]:
        """Size-``k`` sets (one edit per slot, none redundant beside the others), most low-precision share first."""
        out = []
        # narrowest first: of two sets with the same plan the first enumerated stands for both
        for combo in combinations(sorted(cands, key=lambda e: _SCOPE[_scope(e)]), k):
            if len({e.slot for e in combo}) < k or (k > 1 and sum(e.kind == DTYPE for e in combo) > 1):
                continue
            t = self.trial(combo, replay=False)
            if t.edits != frozenset(combo):
                continue                               # the same plan as a set tried before
            if k > 1 and any(_plan_key(self.trial(set(combo) - {e}, replay=False).plan) == _plan_key(t.plan)
                             for e in combo):
                continue                               # an edit that changes nothing beside the others
            out.append(t)
        out.sort(key=self.order)
        return out

    def order(self, t: PolicyTrial) -> tuple:
        """Most low-precision share first; at equal share the fewest ops flipped, then the narrowest edits (an op
        within its module, a module, a function, an op everywhere, the autocast dtype)."""
        flips = sum(a.compute != b.compute for a, b in zip(self.r.plan(self.base).decisions, t.plan.decisions))
        return (-round(t.share, 9), flips, sorted(_SCOPE[_scope(e)] for e in t.edits), sorted(map(str, t.edits)))

    def run(self, cands: list[PolicyEdit], max_edits: int) -> PolicyTrial | None:
        for k in range(1, max_edits + 1):
            for t in self.sets(cands, k):
                if self.replays >= self.budget:
                    self.truncated = True
                    return None
                if self.trial(t.edits).ok:
                    return t
        return None


# ---------------------------------------------------------------------- the Recommendation
def _summary(s: PolicySearch, t: PolicyTrial, how: str | None = None) -> PlanSummary:
    f = t.final or {}
    return PlanSummary(f.get("final_rel_l2"), f.get("final_nonfinite"), f.get("final_cosine"),
                       round(s.r.time_us(t.plan), 3), 0, round(t.share, 6), 0.0, how or t.how, TIME_HOW,
                       meets_tolerance=t.ok, reasons=list(t.reasons)[:4] or None)


def _flips(r: TorchNpuReplay, pol: PrecisionPolicy, base: PrecisionPolicy) -> list[Flip]:
    return [Flip(c.node, c.type, c.before, c.after, {"rule": c.why_before, "module": c.module},
                 {"rule": c.why_after, "module": c.module}) for c in r.changes(pol, base)]


def _edit_report(s: PolicySearch, best: PolicyTrial, e: PolicyEdit) -> PolicyEditReport:
    alone = s.trial({e})
    flips = _flips(s.r, alone.policy, s.base)
    without = s.trial(best.edits - {e}) if len(best.edits) > 1 else None
    t0 = s.r.time_us(s.r.plan(s.base))
    names = ", ".join(sorted({f.node for f in flips})[:4])
    return PolicyEditReport(str(e), e.kind, e.module, e.op, e.function, e.dtype, "fix",
                            f"{str(e)[:1].upper()}{str(e)[1:]}: {len(flips)} op(s) change dtype ({names}); "
                            f"replayed with it alone: {'meets' if alone.ok else 'fails'} the tolerance",
                            round(s.r.time_us(alone.plan) - t0, 3), flips[:50], len(flips), _summary(s, alone),
                            _summary(s, without) if without is not None else None)


def _minimality(s: PolicySearch, best: PolicyTrial) -> Minimality:
    checks = []
    for e in sorted(best.edits):
        t = s.trial(best.edits - {e})
        checks.append(MinimalityCheck(str(e), t.ok, t.how, {"final_rel_l2": (t.final or {}).get("final_rel_l2"),
                                                              "final_nonfinite": (t.final or {}).get("final_nonfinite")}))
    proved = all(c.meets_tolerance_without_it is False for c in checks)
    how = REPLAYED if all(c.how == REPLAYED for c in checks) else INCOMPLETE
    return Minimality(proved, f"1-minimal: without any one of its {len(checks)} edit(s) the replay fails the tolerance"
                      if proved else "not proved minimal: a smaller set passes", checks, how)


def recommend_policy(analysis: Any, tolerance: Any = None, *, max_edits: int = 3, exclude: Iterable[str] = (),
                     budget: int = DEFAULT_BUDGET, out_dir: str | Path | None = None,
                     steps: Iterable[int] | None = None, base: PrecisionPolicy | None = None,
                     amp: str | None = None) -> Recommendation:
    """The policy recommendation of a torch_npu run (an ``analysis.Analysis``): the measured verdict first (a run
    within tolerance needs no change), else the search; ``base``: start from this policy instead of the run's;
    ``amp``: how a real run's program cast (its dump cannot say; default autocast)."""
    t0 = time.perf_counter()
    a = analysis
    tol = tolerance if tolerance is not None else a.tolerance
    r = TorchNpuReplay(a, amp=amp)
    s = PolicySearch(r, tol, base, budget, steps)
    pol0 = s.base
    out = Path(out_dir).resolve() / POLICY_NAME if out_dir is not None else Path(POLICY_NAME)
    measured = tol.judge(a.final_metrics(s.steps))
    w = measured.worst or {}
    m_time, m_share = r.measured_time() or (r.time_us(r.plan()), r.low_share(r.plan()))   # a real run: its dtypes
    m_sum = PlanSummary(w.get("rel_l2"), w.get("finite") is False, w.get("cosine"), round(m_time, 3), 0,
                        round(m_share, 6), 0.0, "measured", TIME_HOW, meets_tolerance=bool(measured.ok),
                        reasons=list(measured.reasons)[:4] or None)
    mode = a.mode if (a.run.meta or {}).get("mode") or not r.notes else \
        (r.config.acl_precision_mode if r.config.amp == "none" else      # a real run: its dump's dtype
         {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[r.config.dtype])
    rec = Recommendation("no-change-needed", mode=str(mode), soc=str(r.config.soc),
                         tolerance=ToleranceLimits.of(tol), engine="torch_npu")
    rec.out_dir = str(Path(out_dir).resolve()) if out_dir is not None else None
    cands: list[PolicyEdit] = []
    best = None
    base_t = None
    if measured.ok and base is None:
        rec.ok = True
        rec.predicted = Predicted(m_sum, m_sum, True, True, 0.0, TIME_HOW, "measured", measured=m_sum)
        rec.minimality = Minimality(True, "no edit is needed: the measured run already meets the tolerance")
    else:
        base_t = s.trial(())
        res0 = r.replay(pol0, s.steps)
        cands = candidates(r, pol0, op_errors(a.recording, res0), exclude)
        best = None if base_t.ok else s.run(cands, max_edits)
        chosen = best if best is not None else base_t if base_t.ok else None
        if chosen is not None:
            rec.status, rec.ok = ("recommended" if chosen.edits else "no-change-needed"), True
        else:
            rec.status = "no-solution"
            rec.notes.append(f"no set of at most {max_edits} policy edits among {len(cands)} candidates meets the "
                             "tolerance on replay" + (" (search budget spent)" if s.truncated else ""))
        show = chosen if chosen is not None else min(s.trials.values(), key=lambda t: (t.ok is None, t.badness()))
        rec.predicted = Predicted(_summary(s, base_t), _summary(s, show), bool(base_t.ok), bool(show.ok),
                                  round(r.time_us(show.plan) - r.time_us(base_t.plan), 3), TIME_HOW, show.how,
                                  measured=m_sum)
        if chosen is not None and chosen.edits:
            rec.minimality = _minimality(s, chosen)
        best = show
    final = best.policy if best is not None and best.ok else pol0
    edits = sorted(best.edits) if best is not None and best.ok else []
    rec.precision_policy = PolicyAdvice(final.amp, final.dtype, pol0.to_dict(), final.to_dict(),
                                        [_edit_report(s, best, e) for e in edits] if best is not None else [],
                                        [str(e) for e in cands], apply_snippet(final, str(out)),
                                        plain_pytorch(final, edits) if edits else None)
    rec.snippets = {"apply_policy": rec.precision_policy.snippet}
    if rec.precision_policy.plain_pytorch:
        rec.snippets["pytorch"] = rec.precision_policy.plain_pytorch
    rec.search = SearchStats(method="replay (policy edits)", budget=budget, replays=s.replays,
                             candidates=len(cands), largest_set=len(edits), truncated=s.truncated or None,
                             seconds=round(time.perf_counter() - t0, 3), max_edits=max_edits)
    rec.notes.extend(r.notes + r.plan(final).notes)
    return rec


def recommend_cli(profile: str, tolerance: Any, policy: str | None, ge_file: str | None, soc: str | None,
                  exclude: Iterable[str], max_edits: int, step: int | None, out_dir: Path, log: Any,
                  amp: str | None = None) -> tuple[Recommendation, dict]:
    """``advisor recommend`` on a torch_npu run: the Recommendation and the files written (``--policy``: start from
    that policy instead of the run's; a GE file is refused; a real run without the tensors a replay needs is one
    line saying what to dump, ``replay_torch_npu.missing_for_policy``)."""
    from ..analysis import analyze
    from ..errors import InputError
    from ..precision_policy import read_policy
    from ..replay_torch_npu import policy_run
    from .policy_edits import write_policy_outputs
    if ge_file:
        raise InputError(ge_file, "is a GE file (mixlist / keep_dtype / customize_dtypes); a torch_npu run's advice "
                                  "starts from --policy precision_policy.json")
    base = read_policy(policy) if policy else None
    log("reading the run")
    a = analyze(policy_run(profile, step), tolerance=tolerance, soc=soc, step=step)
    log("searching policy edits (replay)")
    rec = recommend_policy(a, tolerance, max_edits=max_edits, exclude=exclude, out_dir=out_dir, base=base,
                           amp=amp or (base.amp if base is not None else None))     # a real run: the policy's amp
    log("writing outputs")
    return rec, write_policy_outputs(rec, out_dir)


__all__ = ["recommend_cli", "PolicySearch", "PolicyTrial", "candidates", "op_errors", "recommend_policy", "MAX_OPS",
           "DEFAULT_BUDGET"]
