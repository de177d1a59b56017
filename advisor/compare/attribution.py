"""Per-op error attribution: which op's precision decision *causes* the error.

For every op (graph node with a dump entry, or dump entry when there is no graph):
``out_*``  error of its output (worst output tensor, worst step) against the FP32 run;
``in_rel_l2``  worst error among the inputs it received (its producers' outputs);
``growth`` = out_rel_l2 / in_rel_l2;
``local_*`` / ``inrnd_*``  from the emulator's local_error.csv when present (see docs/architecture.md).
Whose decision introduced each op's error is ``blame.blame`` (a pure function of these facts); the blamed
producer is walked back through kernel-less views to the op that really rounds.  Op types are ranked by the
error introduced by their instances (worst instance first, then the sum), counting only blamed nodes that run
in low precision (black-listing them can change something).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping

import numpy as np
import pandas as pd

from ..semantics import INHERITED, LOW, Rule
from .blame import Blame, LocalError, OpFacts, blame
from .dumps import DumpView, as_steps
from .judge import entry_metrics, judged_steps
from .metrics import headline, worse
from .tolerance import Tolerance, Verdict

# ops whose output is uninitialised memory (overwritten later by a copy): never compared
UNINIT_TYPES = frozenset({"Empty", "EmptyStrided", "empty", "new_empty", "new_empty_strided", "empty_like"})


# ---------------------------------------------------------------------- result
@dataclass
class Attribution:
    ops: pd.DataFrame
    types: pd.DataFrame
    final: list[dict]
    first_exceeding: str | None
    verdict: Verdict
    tolerance: Tolerance = field(default_factory=Tolerance)
    training: dict | None = None
    unmatched: dict = field(default_factory=dict)      # {"target_only": [...], "golden_only": [...]}
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        from ..fsutil import json_safe
        return json_safe({
            "verdict": self.verdict.to_dict(), "tolerance": self.tolerance.to_dict(),
            "first_exceeding": self.first_exceeding, "final": self.final,
            "types": _records(self.types, "type"), "ops": _records(self.ops, "node"),
            "training": self.training, "unmatched": self.unmatched, "notes": list(self.notes)})


def _records(df: pd.DataFrame, index_name: str) -> list[dict]:
    if df is None or df.empty:
        return []
    return [{index_name: str(i), **r} for i, r in zip(df.index, df.to_dict(orient="records"))]


# ---------------------------------------------------------------------- attribution
def attribute(run: Any, tolerance: Tolerance | None = None, steps: Iterable[int] | None = None,
              plan: Any = None, judged: tuple | None = None) -> Attribution:
    """Attribute the error of an ``ingest.Run``: with ``plan`` (the measured ``semantics.Plan`` of its graph:
    ``Analysis.attribution`` passes it) the plan says who decided each precision; without (a target and a golden
    dump alone) the dataflow is inferred from identical tensor statistics and precision is the dumped dtype.
    ``steps``: only these (default: every step in both dumps).  ``judged``: the run's ``judged_steps`` on these
    steps when the caller already has it (``Analysis.judged``), so the run is judged once."""
    return _Attributor(run, plan, tolerance or Tolerance(), steps).result(judged)


class _Attributor:
    """One attribution: the ops in order, their measured errors, their producers, one row per op."""

    def __init__(self, run: Any, plan: Any, tol: Tolerance, steps: Iterable[int] | None):
        self.tol = tol
        self.ts, self.gs = as_steps(run.target_dump), as_steps(run.golden_dump)
        common = sorted(set(self.ts) & set(self.gs))
        if not common:
            raise ValueError(f"target steps {sorted(self.ts)} and golden steps {sorted(self.gs)} share no step")
        if steps is not None:
            want = sorted(set(int(s) for s in steps))
            absent = [s for s in want if s not in common]
            if absent:
                raise ValueError(f"step {', '.join(map(str, absent))} is not in the dumps; steps in both target "
                                 f"and golden: {', '.join(map(str, common))}")
            common = want
        self.steps = common
        self.notes: list[str] = []
        self.g, self.plan = run.graph, plan
        if self.g is not None:
            names0 = self.ts[common[0]].entries
            if plan is None or not any(f"{a.get('dump') or a.get('name', n)}.forward" in names0
                                       for n, a in self.g.nodes(data=True)):
                if plan is not None:
                    self.notes.append("no op of the graph has an entry in the dumps (e.g. msprobe API-level names "
                                      "vs kernel names): compared the dumps without the graph")
                self.g, self.plan = None, None
        self.local = _local_rows(run.local_errors)
        self.mismatched: list[str] = []
        self._order()
        self._outputs()
        self._producers()

    # ------------------------------------------------------------------ ops and their errors
    def _order(self) -> None:
        g = self.g
        if g is not None:
            order = [n for n in self.plan.compiled.order if g.nodes[n].get("role", "op") == "op"]
            self.order = [n for n in order if not _uninitialised(g.nodes[n].get("type", ""), n)]
            self.entry_of = {n: f"{g.nodes[n].get('dump') or g.nodes[n].get('name', n)}.forward" for n in self.order}
        else:
            first = self.ts[self.steps[0]]
            self.order = [e for e in first.entries if e.endswith(".forward") and not e.startswith(("Model.", "Grad."))
                          and not _uninitialised(_entry_type(e), e)]
            self.entry_of = {e: e for e in self.order}
            self.notes.append("no op graph: dataflow inferred from identical tensor statistics; precision = dumped "
                              "dtype")

    def _comparable(self, rows: list[dict], s: int, e: str, io: str) -> list[dict]:
        for r in rows:
            if r["kind"] == "mismatch":
                self.mismatched.append(f"step {s} {e} {io} {r['pos']}: {r['message']}")
        return [r for r in rows if r["kind"] != "mismatch"]

    def _outputs(self) -> None:
        """Per op the worst output metrics over its outputs and the steps, and per output port."""
        self.out_best: dict[Hashable, dict] = {}
        self.port_err: dict[tuple[Hashable, str], dict] = {}
        self.present: set = set()
        for s in self.steps:
            t, gd = self.ts[s], self.gs[s]
            for n in self.order:
                e = self.entry_of[n]
                if e not in t.entries or e not in gd.entries:
                    continue
                self.present.add(n)
                for m in self._comparable(entry_metrics(t, gd, e, "output"), s, e, "output"):
                    key = (n, m["pos"].split(".")[0])
                    self.port_err[key] = worse(self.port_err.get(key), {**m, "step": s})
                    self.out_best[n] = worse(self.out_best.get(n), {**m, "step": s})

    def _producers(self) -> None:
        if self.g is None:
            self.producers = _infer_producers(self.ts[self.steps[0]], self.order)
            return
        self.producers = {}
        for n in self.order:
            self.producers[n] = [(src, str(po)) for src, _, d in self.g.in_edges(n, data=True) if d.get("float", True)
                                 for po, _pi in d.get("ports", [(0, 0)])]

    def _port_error(self, src: Hashable, port: str, depth: int = 0) -> dict | None:
        g = self.g
        if g is not None and _uninitialised(g.nodes[src].get("type", ""), src):
            return None
        if (src, port) in self.port_err:
            return self.port_err[(src, port)]
        if src in self.out_best:
            return self.out_best[src]
        if g is not None and depth < 16 and g.nodes[src].get("role", "op") == "op":
            # kernel-less view without its own entry: its input's error passes through
            for s2, _, d in g.in_edges(src, data=True):
                if d.get("float", True):
                    return self._port_error(s2, str(d.get("ports", [(0, 0)])[0][0]), depth + 1)
        return None

    def received(self, n: Hashable) -> tuple[float, Hashable | None, bool]:
        """(worst error among the inputs, the producer it came from, all inputs finite)."""
        worst_v, worst_p, finite = 0.0, None, True
        for src, port in self.producers.get(n, []):
            m = self._port_error(src, port)
            if m is None:
                continue
            h = headline(m)
            v = _nan0(h["rel_l2"])
            finite = finite and h["finite"]
            if v > worst_v or worst_p is None:
                worst_v, worst_p = v, src
        if not self.producers.get(n):  # no producers known: the entry's own input records
            for s in self.steps:
                e = self.entry_of[n]
                for m in self._comparable(entry_metrics(self.ts[s], self.gs[s], e, "input"), s, e, "input"):
                    h = headline(m)
                    worst_v = max(worst_v, _nan0(h["rel_l2"]))
                    finite = finite and h["finite"]
        return worst_v, worst_p, finite

    def precision(self, n: Hashable) -> str:
        if self.plan is not None:
            return self.plan[n]
        m = self.out_best.get(n)
        return m.get("dtype", "n/a") if m else "n/a"

    def rounding_producer(self, n: Hashable) -> Hashable | None:
        """The low-precision producer whose output rounding feeds n (walked back through views)."""
        g, plan = self.g, self.plan
        cands = [plan.why(n).via] if plan is not None and plan.why(n).via is not None else []
        cands += [p for p, _ in self.producers.get(n, [])]
        for q in cands:
            k = 0
            while g is not None and k < 32 and (not g.nodes[q].get("kernel", True) or not g.nodes[q].get("decides", True)
                                                or _uninitialised(g.nodes[q].get("type", ""), q)):
                v = plan.why(q).via
                if v is None:
                    break
                q, k = v, k + 1
            if g is not None and g.nodes[q].get("role", "op") != "op":
                continue
            if self.precision(q) in LOW:
                return q
        return None

    def _type(self, n: Hashable) -> str:
        return self.g.nodes[n].get("type", "") if self.g is not None else _entry_type(n)

    # ------------------------------------------------------------------ rows
    def row(self, n: Hashable) -> dict:
        om = self.out_best[n]
        h = headline(om)
        in_v, in_p, in_finite = self.received(n)
        out_v = _nan0(h["rel_l2"])
        prec = self.precision(n)
        rule = self.plan.why(n).rule if self.plan is not None else ("dtype" if prec in LOW else "")
        name = self.g.nodes[n].get("name", str(n)) if self.g is not None else str(n)
        lrow = self.local.get(str(name))
        prod = self.rounding_producer(n)
        local = None if lrow is None else LocalError(*(_float(lrow.get(k)) for k in
                                                       ("local_rel_l2", "local_nonfinite", "inrnd_rel_l2",
                                                        "inrnd_nonfinite")))
        facts = OpFacts(prec in LOW, rule in INHERITED or (self.plan is None and prec in LOW), rule == Rule.FOLLOW,
                        prod is not None, out_v, bool(h["finite"]), in_v, in_finite, local)
        b: Blame = blame(facts)
        blamed = prod if b.on_producer else n
        co = prod if b.co_producer else None
        return {
            "node": str(n), "type": self._type(n), "precision": prec, "rule": str(rule), "entry": self.entry_of[n],
            "kind": h["kind"], "step": om.get("step"), "out_rel_l2": h["rel_l2"], "out_cosine": h["cosine"],
            "out_max_abs": h["max_abs"], "out_finite": h["finite"],
            "out_nonfinite": int(om.get("target_nan", 0) + om.get("target_inf", 0) + om.get("target_nonfinite", 0)),
            "in_rel_l2": in_v, "in_nonfinite": int(not in_finite), "in_from": None if in_p is None else str(in_p),
            "in_finite": in_finite, "growth": facts.growth,
            "out_max_rel_diff": om.get("max_rel_diff", math.nan), "out_min_rel_diff": om.get("min_rel_diff", math.nan),
            "out_mean_rel_diff": om.get("mean_rel_diff", math.nan), "saturated": om.get("saturated", 0),
            "underflow": om.get("underflow", math.nan), "overflow_risk": om.get("overflow_risk", math.nan),
            "local_rel_l2": local.local_rel if local else math.nan,
            "local_nonfinite": local.local_nf if local else math.nan,
            "inrnd_rel_l2": local.inrnd_rel if local else math.nan,
            "inrnd_nonfinite": local.inrnd_nf if local else math.nan,
            "introduced": b.introduced, "blamed_on": str(blamed), "co_blamed": None if co is None else str(co),
            "co_blamed_type": None if co is None else self._type(co), "blamed_type": self._type(blamed),
            "blamed_precision": self.precision(blamed), "basis": b.basis,
            "exceeds": bool(self.tol.tensor_reasons({**om, **h}))}

    def result(self, judged: tuple | None = None) -> Attribution:
        rows = [self.row(n) for n in self.order if n in self.present and n in self.out_best]
        ops = pd.DataFrame(rows)
        if not ops.empty:
            ops = ops.set_index("node")
        first = next((str(n) for n, r in ops.iterrows() if r["exceeds"]), None) if not ops.empty else None
        if self.mismatched:
            self.notes.append(f"{len(self.mismatched)} op tensor pair(s) not compared, shapes or dtypes differ "
                              f"(first: {self.mismatched[0]})")
        low = _low_dtype(self.plan.mode) if self.plan is not None else None
        final, train, judged_notes = judged if judged is not None else judged_steps(
            self.ts, self.gs, self.steps, self.tol, low, order_fallback=[self.entry_of[n] for n in self.order])
        t0, g0 = self.ts[self.steps[0]], self.gs[self.steps[0]]
        unmatched = {"target_only": [e for e in t0.entries if e not in g0.entries],
                     "golden_only": [e for e in g0.entries if e not in t0.entries]}
        return Attribution(ops, rank_types(ops), final, first, self.tol.judge(final), self.tol, train, unmatched,
                           self.notes + judged_notes)


def _low_dtype(mode: str) -> str | None:
    from ..semantics import mode_info
    return mode_info(mode)[1]


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _nan0(x: Any) -> float:
    v = _float(x)
    return 0.0 if math.isnan(v) else v


def _uninitialised(typ: Any, name: Any) -> bool:
    n = str(name).lower()
    return str(typ) in UNINIT_TYPES or ".empty" in n or "new_empty" in n or "empty_like" in n


def _entry_type(entry: Any) -> str:
    """``Functional.linear.0.forward`` -> ``linear``; ``Aten.mm.default.3.forward`` -> ``mm``."""
    parts = str(entry).split(".")
    return parts[1] if len(parts) > 2 else str(entry)


def _local_rows(df: Any) -> dict[str, dict]:
    if not isinstance(df, pd.DataFrame) or df.empty or "name" not in df.columns:
        return {}
    return {str(r["name"]): r for r in df.to_dict(orient="records")}


def _infer_producers(dump: DumpView, order: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Dump-only dataflow: an input record whose (shape, Max, Min, Mean, Norm) equal an earlier
    entry's output record came from that entry (msprobe records the same tensor at both ends)."""
    def key(r: Mapping):
        return (str(r.get("shape")), r.get("Max"), r.get("Min"), r.get("Mean"), r.get("Norm"))

    made: dict[tuple, tuple[str, str]] = {}
    out: dict[str, list[tuple[str, str]]] = {}
    for e in order:
        out[e] = [made[key(r)] for _pos, r in dump.inputs(e) if key(r) in made and r.get("Max") is not None]
        for pos, r in dump.outputs(e):
            made[key(r)] = (e, pos.split(".")[0])
    return out


# ---------------------------------------------------------------------- types
def rank_types(ops: pd.DataFrame) -> pd.DataFrame:
    """Op types ranked by the error their low-precision instances introduce (worst instance, then sum)."""
    cols = ["introduced_max", "introduced_sum", "instances", "ops_blamed", "exceeding", "worst_instance",
            "worst_observed_at"]
    if ops is None or ops.empty:
        return pd.DataFrame(columns=cols).rename_axis("type")
    d = ops[ops["blamed_precision"].isin(LOW) & (ops["introduced"] > 0)].copy()
    if d.empty:
        return pd.DataFrame(columns=cols).rename_axis("type")
    d["observed_at"] = d.index.astype(str)
    if "co_blamed" in d.columns:
        co = d[d["co_blamed"].notna()].copy()
        if not co.empty:
            co["blamed_on"] = co["co_blamed"]
            co["blamed_type"] = co["co_blamed_type"]
            d = pd.concat([d, co])
    d = d.sort_values("introduced", ascending=False, kind="stable")
    agg = d.groupby("blamed_type", sort=False).agg(
        introduced_max=("introduced", "max"), introduced_sum=("introduced", lambda s: float(np.sum(s))),
        instances=("blamed_on", "nunique"), ops_blamed=("blamed_on", "size"), exceeding=("exceeds", "sum"),
        worst_instance=("blamed_on", "first"), worst_observed_at=("observed_at", "first"))
    agg = agg.sort_values(["introduced_max", "introduced_sum"], ascending=False, kind="stable")
    agg.index.name = "type"
    return agg
