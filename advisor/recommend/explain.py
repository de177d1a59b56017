"""Why each edit: the op instances it flips (with semantics' Why before and after), the worst instances that led
to it with their errors, one sentence, and the error along the graph before/after for the report."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..semantics import Compiled, NodeKind, Plan, cpu_mask, low_mask
from .edits import Edit
from .result import Flip, LocalVsReceived, PlanSummary, WorstInstance

MAX_FLIPS_PER_EDIT = 200


def flips(a: Plan, b: Plan, limit: int = MAX_FLIPS_PER_EDIT) -> tuple[int, list[Flip]]:
    """(number of instances whose precision or output dtype differs -- an op given fp16 inputs and an fp32 output
    flips by its output --, records of the first ``limit`` in topological order with semantics' Why for both
    plans) - flips_between without building every record.  A precision reads ``fp16 (fp32 output)`` where the
    op's output dtype is not its compute dtype."""
    pa = np.array(a.precision_list, dtype=object)
    pb = np.array(b.precision_list, dtype=object)
    ea = np.array(a.emit_list, dtype=object)
    eb = np.array(b.emit_list, dtype=object)
    idx = np.flatnonzero((pa != pb) | (ea != eb))
    c = a.compiled
    out = []
    for i in idx[:limit].tolist():
        node = c.order[i]
        out.append(Flip(str(node), c.types[i], _prec(pa[i], ea[i]), _prec(pb[i], eb[i]), a.why(node).to_dict(),
                        b.why(node).to_dict()))
    return int(len(idx)), out


def _prec(p: str, e: str) -> str:
    return p if p == e else f"{p} ({e} output)"


def _num(a: np.ndarray | None, i: int) -> float | None:
    if a is None:
        return None
    v = float(a[i])
    return v if math.isfinite(v) else None


def worst_instances(c: Compiled, e: Edit, nodes: Sequence[int], without: Plan, with_: Plan,
                    score: np.ndarray, ev: Any = None, limit: int = 5) -> list[WorstInstance]:
    """The instances that led to edit ``e`` (``nodes``; else the edited type's own instances), worst first by
    ``score`` (the replayed error, or the error model's contribution to the final error), with their errors."""
    cand = [i for i in nodes if i >= 0] or [i for i, t in enumerate(c.types) if t == e.type]
    cand = np.unique(np.asarray(cand, dtype=np.int64))
    if not len(cand):
        return []
    key = np.nan_to_num(score[cand], nan=0.0, posinf=1e300)
    own = np.array([c.types[i] == e.type for i in cand.tolist()], dtype=bool)
    cand = cand[np.lexsort((-key, ~own))][:limit]             # the edited type's instances first
    from ..fusion import describe_node
    out = []
    for i in cand.tolist():
        node = c.order[i]
        out.append(WorstInstance(
            str(node), c.types[i], without.precision_list[i], with_.precision_list[i], without.why(node).to_dict(),
            error=_num(score, i) if not np.isinf(score[i]) else None, non_finite=bool(np.isinf(score[i])),
            local_rel_l2=_num(ev.local if ev is not None else None, i),
            local_nonfinite=bool(ev.local_nf[i]) if ev is not None else None,
            received_rel_l2=_num(ev.inp if ev is not None else None, i),
            inrnd_rel_l2=_num(ev.inrnd if ev is not None else None, i), fused=describe_node(c.graph, node)))
    return out


def local_vs_received(c: Compiled, e: Edit, ev: Any) -> LocalVsReceived | None:
    """Over the edited type's instances: worst local error (the op alone in low precision) vs worst received."""
    inst = np.flatnonzero(np.asarray(c.types, dtype=object) == e.type)
    if ev is None or not len(inst):
        return None

    def worst(a):
        if a is None:
            return None
        v = a[inst]
        return float(np.nanmax(v)) if np.isfinite(v).any() else None
    return LocalVsReceived(int(len(inst)), worst(ev.local), worst(ev.inp), worst(ev.out), bool(ev.local_nf[inst].any()))


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def _final(s: PlanSummary) -> str:
    return "non-finite" if s.final_nonfinite else _fmt(s.final_rel_l2)


def explain(e: Edit, purpose: str, worst: list[WorstInstance], without: PlanSummary, with_: PlanSummary,
            nflips: int, dt: float, how: str) -> str:
    """One paragraph: what the worst instance does in low precision and how it is decided, then the flips and
    the final error without/with the edit (``how``: replayed / estimated)."""
    parts = []
    if purpose == "fix":
        if worst:
            w = worst[0]
            if w.non_finite or w.local_nonfinite:
                src = "produces non-finite values"
            elif w.local_rel_l2 is not None:
                src = f"introduces a local error of {_fmt(w.local_rel_l2)}"
            else:
                src = f"carries an error of {_fmt(w.error)}"
            chain = ""
            wb = w.why_before
            if w.type != e.type:
                chain = (f" (it runs {w.precision_before} by {wb['rule']} from {wb['via']}, decided by "
                         f"{wb['root']}; {e.type} is on that decision chain)")
            elif str(wb["rule"]).startswith("gray"):
                chain = f" (gray, inherits {w.precision_before} from {wb['via']})"
            fused = f" [{w.fused}]" if w.fused else ""
            parts.append(f"{w.node} ({w.type}){fused} {src} in low precision{chain}.")
        parts.append(f"{e}: {nflips} op instance(s) flip; {how} final error {_final(without)} without it -> "
                     f"{_final(with_)} with it; time {dt:+.1f} us.")
        if e.is_customize:
            parts.append(f"{e.op} keeps fp16 inputs, so its compute stays in low precision, and writes an fp32 "
                         "output (the per-op form of precision mode cube_fp16in_fp32out).")
    else:
        parts.append(f"{e}: {nflips} op instance(s) move to low precision; {how} final error {_final(with_)} "
                     f"(still within tolerance); time {dt:+.1f} us.")
    return " ".join(parts)


def curve(c: Compiled, before: np.ndarray | None, after: np.ndarray | None, measured: np.ndarray | None,
          pb: Plan, pa: Plan, times: Any, points: int = 600) -> dict:
    """Error along graph order (ops only; +inf = non-finite), bucketed max for plotting, with the
    low-precision share and time of both plans."""
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
    lb, la = low_mask(pb), low_mask(pa)
    return {"n_ops": int(len(ops)), "before": bucket(before), "after": bucket(after), "measured": bucket(measured),
            "low_before": float(lb[ops].mean()), "low_after": float(la[ops].mean()),
            "share_before": times.share(lb, cpu_mask(pb)), "share_after": times.share(la, cpu_mask(pa)),
            "time_before": times.plan_time(lb, cpu_mask(pb))[0], "time_after": times.plan_time(la, cpu_mask(pa))[0]}
