"""Why each edit: the op instances it flips (with semantics' Why before and after), the worst instances that led
to it with their errors, one sentence, and the error along the graph before/after for the report."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..semantics import Compiled, NodeKind, Plan, low_mask
from .edits import Edit

MAX_FLIPS_PER_EDIT = 200


@dataclass
class EditReport:
    """One edit of a recommendation and its evidence (recommendation.json ``edits[]``)."""

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
                "kind": self.edit.kind, **({"op": self.edit.op, "line": self.edit.line} if self.edit.is_keep else {}),
                "purpose": self.purpose, "explanation": self.explanation,
                "evidence": self.evidence, "predicted_time_change_us": round(self.time_change_us, 3),
                "predicted_flips": self.flips, "predicted_flip_count": self.flip_count,
                **({"predicted_without_this_edit": self.final_without} if self.final_without is not None else {})}

    @classmethod
    def from_dict(cls, d: Mapping) -> "EditReport":
        return cls(Edit(d["kind"], d["type"], d.get("op") or ""), d["purpose"], d["explanation"],
                   dict(d.get("evidence") or {}),
                   list(d.get("predicted_flips") or []), int(d.get("predicted_flip_count") or 0),
                   float(d.get("predicted_time_change_us") or 0.0), d.get("predicted_without_this_edit"))


def flips(a: Plan, b: Plan, limit: int = MAX_FLIPS_PER_EDIT) -> tuple[int, list[dict]]:
    """(number of instances whose precision differs, records of the first ``limit`` in topological order with
    semantics' Why for both plans) - flips_between without building every record."""
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


def _num(a: np.ndarray | None, i: int) -> float | None:
    if a is None:
        return None
    v = float(a[i])
    return v if math.isfinite(v) else None


def worst_instances(c: Compiled, e: Edit, nodes: Sequence[int], without: Plan, with_: Plan,
                    score: np.ndarray, ev: Any = None, limit: int = 5) -> list[dict]:
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
        out.append({
            "node": str(node), "type": c.types[i], "fused": describe_node(c.graph, node),
            "precision_before": without.precision_list[i], "precision_after": with_.precision_list[i],
            "why_before": without.why(node).to_dict(),
            "error": _num(score, i) if not np.isinf(score[i]) else None, "non_finite": bool(np.isinf(score[i])),
            "local_rel_l2": _num(ev.local if ev is not None else None, i),
            "local_nonfinite": bool(ev.local_nf[i]) if ev is not None else None,
            "received_rel_l2": _num(ev.inp if ev is not None else None, i),
            "inrnd_rel_l2": _num(ev.inrnd if ev is not None else None, i),
        })
    return out


def local_vs_received(c: Compiled, e: Edit, ev: Any) -> dict | None:
    """Over the edited type's instances: worst local error (the op alone in low precision) vs worst received."""
    inst = np.flatnonzero(np.asarray(c.types, dtype=object) == e.type)
    if ev is None or not len(inst):
        return None

    def worst(a):
        v = a[inst]
        return float(np.nanmax(v)) if np.isfinite(v).any() else None
    return {"instances": int(len(inst)), "worst_local_rel_l2": worst(ev.local), "worst_received_rel_l2": worst(ev.inp),
            "worst_out_rel_l2": worst(ev.out), "any_local_nonfinite": bool(ev.local_nf[inst].any())}


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def _final(s: Mapping) -> str:
    return "non-finite" if s.get("final_nonfinite") else _fmt(s.get("final_rel_l2"))


def explain(e: Edit, purpose: str, worst: list[dict], without: Mapping, with_: Mapping, nflips: int, dt: float,
            how: str) -> str:
    """One paragraph: what the worst instance does in low precision and how it is decided, then the flips and
    the final error without/with the edit (``how``: replayed / estimated)."""
    parts = []
    if purpose == "fix":
        if worst:
            w = worst[0]
            if w.get("non_finite") or w.get("local_nonfinite"):
                src = "produces non-finite values"
            elif w.get("local_rel_l2") is not None:
                src = f"introduces a local error of {_fmt(w['local_rel_l2'])}"
            else:
                src = f"carries an error of {_fmt(w.get('error'))}"
            chain = ""
            wb = w["why_before"]
            if w["type"] != e.type:
                chain = (f" (it runs {w['precision_before']} by {wb['rule']} from {wb['via']}, decided by "
                         f"{wb['root']}; {e.type} is on that decision chain)")
            elif str(wb["rule"]).startswith("gray"):
                chain = f" (gray, inherits {w['precision_before']} from {wb['via']})"
            fused = f" [{w['fused']}]" if w.get("fused") else ""
            parts.append(f"{w['node']} ({w['type']}){fused} {src} in low precision{chain}.")
        parts.append(f"{e}: {nflips} op instance(s) flip; {how} final error {_final(without)} without it -> "
                     f"{_final(with_)} with it; time {dt:+.1f} us.")
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
            "share_before": times.share(lb), "share_after": times.share(la),
            "time_before": times.plan_time(lb)[0], "time_after": times.plan_time(la)[0]}
