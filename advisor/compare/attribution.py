"""Per-op error attribution: which op's precision decision *causes* the error.

For every op (graph node with a dump entry, or dump entry when there is no graph):
``out_*``  error of its output (worst output tensor, worst step) against the FP32 run;
``in_rel_l2``  worst error among the inputs it received (its producers' outputs);
``growth`` = out_rel_l2 / in_rel_l2;
``local_*`` / ``inrnd_*``  from the emulator's local_error.csv when present (see docs/architecture.md).

Attribution rule (docs/compare.md):

* with local errors: an op running low by its *own* decision (white, force, gray without a producer)
  introduces ``local_rel_l2`` and is blamed itself (it rounds its own inputs).  An op that runs low by
  *inheritance* from a low producer, or runs in FP32 while fed by a low producer, receives inputs
  already rounded by that producer: the part of its error explained by input rounding
  (``inrnd_rel_l2``) is blamed on the producer when it dominates (>= half of the op's own local
  error); otherwise the op is blamed with ``local_rel_l2`` (FP32 ops introduce nothing themselves).
* without local errors (real NPU runs): ``introduced`` = max(out - in, 0).  FP32 ops and inheriting
  low ops whose output is finite and whose growth exceeds ``AMPLIFY_GROWTH`` are amplifying their low
  producer's output rounding: blamed on that producer.  Otherwise the op itself.

The blamed producer is walked back through kernel-less views to the op that really rounds.
Op types are ranked by the error introduced by their instances (worst instance first, then the sum),
counting only blamed nodes that run in low precision (black-listing them can change something).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping

import numpy as np
import pandas as pd

from .. import semantics
from ..errors import InputError
from ..graph import normalize_dtype
from .dumps import DumpView, as_steps
from .metrics import headline, stats_metrics, tensor_metrics, worse
from .tolerance import Tolerance, Verdict

AMPLIFY_GROWTH = 10.0      # growth above which an op is amplifying the error it receives
DOMINANT = 0.5             # input-rounding share of an op's local error that makes it the producer's
LOW = ("fp16", "bf16")
INHERITED_RULES = ("gray-inherit", "gray-skip-cast", "follow")

# ops whose output is uninitialised memory (overwritten later by a copy): never compared
UNINIT_TYPES = frozenset({"Empty", "EmptyStrided", "empty", "new_empty", "new_empty_strided", "empty_like"})

MODEL_OUTPUT = "Model.output.0.forward"
MODEL_LOSS = "Model.loss.0.forward"


# ---------------------------------------------------------------------- pair metrics
class Mismatch(ValueError):
    """A target/golden tensor pair that cannot be compared (shapes differ)."""


def _shape_of(x: Any) -> list[int]:
    return [int(n) for n in getattr(x, "shape", np.shape(x))]


def _rec_shape(r: Mapping) -> list[int] | None:
    s = r.get("shape")
    return [int(n) for n in s] if isinstance(s, (list, tuple)) else None


def _names_file(r: Mapping) -> bool:
    """The record names a tensor file (msprobe writes data_name "-1" when it saved none)."""
    return bool(r.get("data_name")) and r.get("data_name") != "-1"


def tensor_file_path(d: DumpView, rec: Mapping) -> Path:
    """Where the tensor file a record names is (or should be)."""
    name = str(rec.get("data_name"))
    if d.data_dir is not None:
        return Path(d.data_dir) / name
    from ..ingest.msprobe import TENSOR_DIR
    return Path(d.source).parent / TENSOR_DIR / name


def _has_stats(r: Mapping) -> bool:
    return any(r.get(k) is not None for k in ("Max", "Norm"))


def pair_metrics(target: DumpView, golden: DumpView, rt: Mapping, rg: Mapping) -> dict | None:
    """Metrics of one record pair: full tensor metrics when both tensors exist, else statistics.
    Raises ``Mismatch`` when the shapes differ (of the tensors, else of the records), and
    InputError when a record names a tensor file that is missing and has no statistics either."""
    low = rt.get("dtype")
    tt = target.tensor(rt) if target.has_tensors(rt) else None
    tg = golden.tensor(rg) if golden.has_tensors(rg) else None
    if tt is not None and tg is not None:
        st, sg = _shape_of(tt), _shape_of(tg)
        if st != sg:
            raise Mismatch(f"target shape {st} vs golden shape {sg}")
        return tensor_metrics(tt, tg, low)
    st, sg = _rec_shape(rt), _rec_shape(rg)
    if st is not None and sg is not None and st != sg:
        raise Mismatch(f"target shape {st} vs golden shape {sg}")
    if _has_stats(rt) and _has_stats(rg):
        return stats_metrics(rt, rg, low)
    for d, r, x in ((target, rt, tt), (golden, rg, tg)):
        if x is None and _names_file(r):
            raise InputError(tensor_file_path(d, r), "tensor file named in dump.json is missing and its record "
                                                     "has no statistics (Max/Min/Mean/Norm) to compare instead")
    return None


def is_float_record(r: Mapping) -> bool:
    """The record is a floating-point tensor (fp32, fp16, bf16, fp64)."""
    d = normalize_dtype(r.get("dtype"))
    return d in ("fp32", "fp16", "bf16", "fp64")


def tensor_pairs(target: DumpView, golden: DumpView, entry: str, io: str = "output"
                 ) -> list[tuple[str, Mapping | None, Mapping | None]]:
    """(position, target record, golden record) of every position of ``entry``'s outputs (or
    inputs) where either side has a float tensor record; the other side is None when it has no
    tensor record there (its record may be a non-float one: a dtype mismatch)."""
    if io == "output":
        ts, gs = dict(target.outputs(entry)), dict(golden.outputs(entry))
    else:
        ts, gs = dict(target.inputs(entry)), dict(golden.inputs(entry))
    return [(pos, ts.get(pos), gs.get(pos)) for pos in list(ts) + [p for p in gs if p not in ts]
            if is_float_record(ts.get(pos) or {}) or is_float_record(gs.get(pos) or {})]


def _dtype_name(r: Mapping | None) -> str:
    return "no tensor" if r is None else normalize_dtype(r.get("dtype"))


def _side(r: Mapping | None) -> str:
    return "no tensor" if r is None else f"{normalize_dtype(r.get('dtype'))} {_rec_shape(r) or []}"


def entry_metrics(target: DumpView, golden: DumpView, entry: str, io: str = "output") -> list[dict]:
    """Per float tensor of ``entry``'s outputs (or inputs): {pos, dtype, golden_dtype, shape,
    golden_shape, **metrics}.  A pair that cannot be compared (a tensor on one side only, a float
    against a non-float, different shapes) is a row of ``kind`` "mismatch" with a ``message``."""
    out = []
    for pos, rt, rg in tensor_pairs(target, golden, entry, io):
        row = {"pos": pos, "dtype": _dtype_name(rt), "golden_dtype": _dtype_name(rg),
               "shape": str(_rec_shape(rt or {}) or []), "golden_shape": str(_rec_shape(rg or {}) or [])}
        if rt is None or rg is None or not (is_float_record(rt) and is_float_record(rg)):
            out.append({**row, "kind": "mismatch", "message": f"target {_side(rt)} vs golden {_side(rg)}"})
            continue
        try:
            m = pair_metrics(target, golden, rt, rg)
        except Mismatch as e:
            out.append({**row, "kind": "mismatch", "message": str(e)})
            continue
        if m is not None:
            out.append({**row, **m})
    return out


def judged_metrics(target: DumpView, golden: DumpView, entry: str, step: Any = None) -> list[dict]:
    """``entry_metrics`` of an entry the verdict rests on (final outputs, loss, gradients): a pair
    that cannot be compared is bad input (one line naming the entry and both sides), never skipped."""
    rows = entry_metrics(target, golden, entry, "output")
    for r in rows:
        if r["kind"] == "mismatch":
            where = f"step {step} " if step is not None else ""
            raise InputError(target.source or entry, f"{where}{entry} output {r['pos']}: {r['message']}: not "
                                                     "comparable")
    return rows


def missing_tensor_files(dumps: Iterable[DumpView]) -> list[str]:
    """Tensor files named by the dumps' records that are not there."""
    out = []
    for d in dumps:
        for e in d.entries:
            for _pos, r in d.inputs(e) + d.outputs(e):
                if _names_file(r) and not d.has_tensors(r):
                    out.append(str(tensor_file_path(d, r)))
    return out


def compare_dumps(target: Any, golden: Any, io: Iterable[str] = ("output",)) -> pd.DataFrame:
    """Every aligned float tensor pair of two dumps (all steps): one row per (step, entry, io, pos);
    pairs that cannot be compared are rows of ``kind`` "mismatch"."""
    ts, gs = as_steps(target), as_steps(golden)
    rows = []
    for step in sorted(set(ts) & set(gs)):
        t, g = ts[step], gs[step]
        for name in t.entries:
            if name not in g.entries:
                continue
            for kind in io:
                for m in entry_metrics(t, g, name, kind):
                    rows.append({"step": step, "entry": name, "io": kind, **m})
    return pd.DataFrame(rows)


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

    @property
    def culprits(self) -> list[str]:
        return list(self.types.index)

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict.to_dict(),
            "tolerance": self.tolerance.to_dict(),
            "first_exceeding": self.first_exceeding,
            "final": _clean(self.final),
            "types": _records(self.types, "type"),
            "ops": _records(self.ops, "node"),
            "training": _clean(self.training),
            "unmatched": self.unmatched,
            "notes": list(self.notes),
        }


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        v = float(x)
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _records(df: pd.DataFrame, index_name: str) -> list[dict]:
    if df is None or df.empty:
        return []
    return [_clean({index_name: str(i), **r}) for i, r in zip(df.index, df.to_dict(orient="records"))]


# ---------------------------------------------------------------------- plan of a run
def run_plan(run: Any, lists=None, mode: str | None = None, soc: str | None = None, ops_info: str | None = None):
    """The semantics plan of ``run.graph`` under the run's mode and effective lists (or overrides:
    ``lists`` replaces them; ``soc``/``ops_info`` replace the chip tables the run's mixlist applies to)."""
    g = getattr(run, "graph", None)
    if g is None:
        return None
    meta = dict(getattr(run, "meta", None) or {})
    mode = mode or meta.get("mode") or semantics.DEFAULT_MODE
    if lists is None:
        from .. import mixlist as mx
        from ..oplists import DEFAULT_SOC, load_lists
        lists = load_lists(soc or meta.get("soc") or DEFAULT_SOC, ops_info or meta.get("ops_info"))
        m = getattr(run, "mixlist", None)
        if m is None:
            m = meta.get("mixlist")
        if isinstance(m, (str, Path)):
            p = Path(m) if m else None
            if p is not None and not p.is_absolute() and getattr(run, "path", None):
                p = Path(run.path) / p
            m = mx.load(p) if (p is not None and p.is_file()) else None
        elif isinstance(m, Mapping):
            m = mx.parse_obj(dict(m), "run.json mixlist")
        if m is not None:
            lists = mx.effective(lists, m)
    return semantics.plan(g, lists, mode)


# ---------------------------------------------------------------------- attribution
def attribute(run: Any, tolerance: Tolerance | None = None, steps: Iterable[int] | None = None,
              lists=None, mode: str | None = None, soc: str | None = None,
              ops_info: str | None = None) -> Attribution:
    """Attribute the error of a run (``run.graph`` may be None: dump-only, dataflow inferred from
    identical tensor statistics).  ``run`` needs ``target_dump``, ``golden_dump`` (DumpView, ingest
    dump, {step: dump} or path); optional ``graph``, ``meta`` (mode/soc/mixlist), ``local_errors``
    (DataFrame of local_error.csv)."""
    tol = tolerance or Tolerance()
    ts, gs = as_steps(getattr(run, "target_dump")), as_steps(getattr(run, "golden_dump"))
    common = sorted(set(ts) & set(gs))
    if not common:
        raise ValueError(f"target steps {sorted(ts)} and golden steps {sorted(gs)} share no step")
    if steps is not None:
        want = sorted(set(int(s) for s in steps))
        absent = [s for s in want if s not in common]
        if absent:
            raise ValueError(f"step {', '.join(map(str, absent))} is not in the dumps; steps in both target and "
                             f"golden: {', '.join(map(str, common))}")
        common = want
    notes: list[str] = list(getattr(run, "notes", None) or [])
    g = getattr(run, "graph", None)
    if g is not None:
        names0 = ts[common[0]].entries
        if not any(f"{a.get('dump') or a.get('name', n)}.forward" in names0 for n, a in g.nodes(data=True)):
            notes.append("no op of the graph has an entry in the dumps (e.g. msprobe API-level names vs kernel "
                         "names): compared the dumps without the graph")
            g = None
    plan = run_plan(run, lists, mode, soc, ops_info) if g is not None else None
    local = _local_frame(getattr(run, "local_errors", None))

    # ---- which entries are ops, in topological order
    if g is not None:
        order = [n for n in plan.compiled.order if g.nodes[n].get("role", "op") == "op"]
        order = [n for n in order if not _uninitialised(g.nodes[n].get("type", ""), n)]
        entry_of = {n: f"{g.nodes[n].get('dump') or g.nodes[n].get('name', n)}.forward" for n in order}
    else:
        first = ts[common[0]]
        order = [e for e in first.entries if e.endswith(".forward") and not e.startswith(("Model.", "Grad."))
                 and not _uninitialised(_entry_type(e), e)]
        entry_of = {e: e for e in order}
        notes.append("no op graph: dataflow inferred from identical tensor statistics; precision = dumped dtype")

    # ---- output metrics per op: worst over outputs and steps; keep per-port outputs for consumers
    out_best: dict[Hashable, dict] = {}
    port_err: dict[tuple[Hashable, str], dict] = {}
    present: set = set()
    mismatched: list[str] = []

    def comparable(rows: list[dict], s: int, e: str, io: str) -> list[dict]:
        for r in rows:
            if r["kind"] == "mismatch":
                mismatched.append(f"step {s} {e} {io} {r['pos']}: {r['message']}")
        return [r for r in rows if r["kind"] != "mismatch"]

    for s in common:
        t, gd = ts[s], gs[s]
        for n in order:
            e = entry_of[n]
            if e not in t.entries or e not in gd.entries:
                continue
            present.add(n)
            for m in comparable(entry_metrics(t, gd, e, "output"), s, e, "output"):
                key = (n, m["pos"].split(".")[0])
                port_err[key] = worse(port_err.get(key), {**m, "step": s})
                out_best[n] = worse(out_best.get(n), {**m, "step": s})
    t0, g0 = ts[common[0]], gs[common[0]]
    only_t = [e for e in t0.entries if e not in g0.entries]
    only_g = [e for e in g0.entries if e not in t0.entries]

    # ---- producers
    producers: dict[Hashable, list[tuple[Hashable, str]]] = {}
    if g is not None:
        for n in order:
            lst = []
            for src, _, d in g.in_edges(n, data=True):
                if not d.get("float", True):
                    continue
                for po, _pi in d.get("ports", [(0, 0)]):
                    lst.append((src, str(po)))
            producers[n] = lst
    else:
        producers = _infer_producers(t0, order)

    # ---- received error
    def received(n) -> tuple[float, Hashable | None, bool]:
        worst_v, worst_p, finite = 0.0, None, True
        for src, port in producers.get(n, []):
            m = _port_error(src, port)
            if m is None:
                continue
            h = headline(m)
            v = _nan0(h["rel_l2"])
            if not h["finite"]:
                finite = False
            if v > worst_v or worst_p is None:
                worst_v, worst_p = v, src
        if not producers.get(n):  # no graph producers known: the entry's own input records
            for s in common:
                for m in comparable(entry_metrics(ts[s], gs[s], entry_of[n], "input"), s, entry_of[n], "input"):
                    h = headline(m)
                    if _nan0(h["rel_l2"]) > worst_v:
                        worst_v = _nan0(h["rel_l2"])
                    finite = finite and h["finite"]
        return worst_v, worst_p, finite

    def _port_error(src, port, depth=0):
        if g is not None and _uninitialised(g.nodes[src].get("type", ""), src):
            return None
        if (src, port) in port_err:
            return port_err[(src, port)]
        if src in out_best:
            return out_best[src]
        if g is not None and depth < 16 and g.nodes[src].get("role", "op") == "op":
            # kernel-less view without its own entry: its input's error passes through
            for s2, _, d in g.in_edges(src, data=True):
                if d.get("float", True):
                    return _port_error(s2, str(d.get("ports", [(0, 0)])[0][0]), depth + 1)
        return None

    def precision(n) -> str:
        if plan is not None:
            return plan[n]
        m = out_best.get(n)
        return m.get("dtype", "n/a") if m else "n/a"

    def rounding_producer(n) -> Hashable | None:
        """The low-precision producer whose output rounding feeds n (walked back through views)."""
        cands = []
        if plan is not None:
            w = plan.why(n)
            if w.via is not None:
                cands.append(w.via)
        cands += [p for p, _ in producers.get(n, [])]
        for p in cands:
            q, k = p, 0
            while g is not None and k < 32 and (not g.nodes[q].get("kernel", True) or not g.nodes[q].get("decides", True)
                                                or _uninitialised(g.nodes[q].get("type", ""), q)):
                v = plan.why(q).via
                if v is None:
                    break
                q, k = v, k + 1
            if g is not None and g.nodes[q].get("role", "op") != "op":
                continue
            if precision(q) in LOW:
                return q
        return None

    rows = []
    for n in order:
        if n not in present:
            continue
        om = out_best.get(n)
        if om is None:
            continue
        h = headline(om)
        in_v, in_p, in_finite = received(n)
        out_v = _nan0(h["rel_l2"])
        growth = (math.inf if out_v > 0 else 1.0) if in_v <= 0 else out_v / in_v
        prec = precision(n)
        rule = plan.why(n).rule if plan is not None else ("dtype" if prec in LOW else "")
        name = g.nodes[n].get("name", str(n)) if g is not None else str(n)
        typ = g.nodes[n].get("type", "") if g is not None else _entry_type(n)
        lrow = local.get(str(name)) if local else None
        own_low = prec in LOW
        inherited = rule in INHERITED_RULES or (plan is None and own_low)
        prod = rounding_producer(n)
        row: dict[str, Any] = {
            "node": str(n), "type": typ, "precision": prec, "rule": rule, "entry": entry_of[n], "kind": h["kind"],
            "step": om.get("step"), "out_rel_l2": h["rel_l2"], "out_cosine": h["cosine"], "out_max_abs": h["max_abs"],
            "out_finite": h["finite"], "out_nonfinite": int(om.get("target_nan", 0) + om.get("target_inf", 0)
                                                            + om.get("target_nonfinite", 0)),
            "in_rel_l2": in_v, "in_nonfinite": int(not in_finite), "in_from": None if in_p is None else str(in_p),
            "in_finite": in_finite, "growth": growth,
            "out_max_rel_diff": om.get("max_rel_diff", math.nan), "out_min_rel_diff": om.get("min_rel_diff", math.nan),
            "out_mean_rel_diff": om.get("mean_rel_diff", math.nan),
            "saturated": om.get("saturated", 0), "underflow": om.get("underflow", math.nan),
            "overflow_risk": om.get("overflow_risk", math.nan),
            "local_rel_l2": math.nan, "local_nonfinite": math.nan, "inrnd_rel_l2": math.nan,
            "inrnd_nonfinite": math.nan,
        }
        if lrow is not None:
            row["local_rel_l2"] = lrow.get("local_rel_l2", math.nan)
            row["local_nonfinite"] = lrow.get("local_nonfinite", math.nan)
            row["inrnd_rel_l2"] = lrow.get("inrnd_rel_l2", math.nan)
            row["inrnd_nonfinite"] = lrow.get("inrnd_nonfinite", math.nan)
            own = _bad(row["local_rel_l2"], row["local_nonfinite"]) if own_low else 0.0
            rnd = _bad(row["inrnd_rel_l2"], lrow.get("inrnd_nonfinite", 0)) if prod is not None else 0.0
            co = None
            if prod is not None and (not own_low or inherited) and rnd > 0 and rnd >= DOMINANT * own:
                blamed, introduced, basis = prod, rnd, "input rounding (inrnd)"
            else:
                blamed, introduced, basis = n, own, "local"
                if prod is not None and own_low and rnd > 0 and rnd >= DOMINANT * own:
                    # the op rounds its inputs itself (white/own decision) AND its producer already
                    # rounds its output: both decisions must change; the producer is co-blamed
                    co = prod
        else:
            if not h["finite"] and in_finite:
                excess = math.inf
            elif not h["finite"]:
                excess = 0.0          # non-finite received and passed on: introduced upstream
            else:
                excess = max(out_v - in_v, 0.0)
            # an FP32 op turning finite, slightly perturbed inputs into large (or non-finite) error
            # amplifies its low producer's rounding; so does an op that inherited low precision
            # (but a non-finite output of a low op is its own overflow)
            amp_fp32 = not own_low and in_v > 0 and (growth > AMPLIFY_GROWTH or not h["finite"])
            amp_inh = own_low and inherited and h["finite"] and growth > AMPLIFY_GROWTH and in_v > 0
            co = None
            if prod is not None and (amp_fp32 or amp_inh):
                blamed, introduced, basis = prod, excess, "amplified input error"
            else:
                blamed, introduced, basis = n, (excess if own_low else 0.0), "received/produced"
        if blamed == n and rule == "follow":
            introduced = 0.0      # a view / pass-through op makes no precision decision of its own
        if isinstance(introduced, float) and math.isnan(introduced):
            introduced = math.inf if not h["finite"] else 0.0
        row["introduced"] = introduced
        row["blamed_on"] = str(blamed)
        row["co_blamed"] = None if co is None else str(co)
        row["co_blamed_type"] = None if co is None else (g.nodes[co].get("type", "") if g is not None else _entry_type(co))
        row["blamed_type"] = g.nodes[blamed].get("type", "") if g is not None else _entry_type(blamed)
        row["blamed_precision"] = precision(blamed)
        row["basis"] = basis
        row["exceeds"] = bool(tol.tensor_reasons({**om, **h}))
        rows.append(row)
    ops = pd.DataFrame(rows)
    if not ops.empty:
        ops = ops.set_index("node")
    first = next((str(n) for n, r in ops.iterrows() if r["exceeds"]), None) if not ops.empty else None
    types = rank_types(ops)
    if mismatched:
        notes.append(f"{len(mismatched)} op tensor pair(s) not compared, shapes or dtypes differ (first: "
                     f"{mismatched[0]})")
    low = semantics.mode_info(plan.mode)[1] if plan is not None else None
    final, train, judged_notes = judged_steps(ts, gs, common, tol, low, order_fallback=[entry_of[n] for n in order])
    verdict = tol.judge(final)
    return Attribution(ops, types, final, first, verdict, tol, train,
                       {"target_only": only_t, "golden_only": only_g}, notes + judged_notes)


def judged_steps(ts: Any, gs: Any, steps: list[int], tolerance: Tolerance | None = None,
                 low_dtype: str | None = None, order_fallback: list[str] | None = None
                 ) -> tuple[list[dict], dict | None, list[str]]:
    """What the verdict of a run is judged on, per step: ``final_metrics`` (model outputs, loss)
    with the step's worst gradient cosine (``grad_min_cosine``, ``grad_worst``) from the training
    signals -- the items ``Tolerance.judge`` takes.  Compare, recommend (through ``attribute``) and
    tune all judge these.  Returns (items, training signals or None, notes).  Every gradient pair
    must be comparable (else InputError); tensor files named but missing are compared by their
    statistics and said so in the notes."""
    from .training import GRAD_PREFIX, training_signals  # local import: training imports metrics only
    tol = tolerance or Tolerance()
    ts, gs = as_steps(ts), as_steps(gs)
    notes: list[str] = []
    missing = missing_tensor_files([d for s in steps for d in (ts[s], gs[s])])
    if missing:
        notes.append(f"{len(missing)} tensor files named in the dumps are missing (first: {missing[0]}); those "
                     "tensors were compared by their statistics (Max/Min/Mean/Norm) only")
    final = final_metrics(ts, gs, steps, order_fallback=order_fallback)
    for s in steps:
        for e in ts[s].entries:
            if e.startswith(GRAD_PREFIX) and e in gs[s].entries:
                judged_metrics(ts[s], gs[s], e, s)
    train = training_signals(ts, gs, steps, tol, low_dtype=low_dtype)
    gcos = (train or {}).get("grad_min_cosine_per_step") or {}
    for f in final:
        if f["step"] in gcos:
            f["grad_min_cosine"], f["grad_worst"] = gcos[f["step"]]
    if final and final[0].get("source") != MODEL_OUTPUT:
        notes.append(f"no {MODEL_OUTPUT} entry: judged on the last forward entry {final[0].get('source')}")
    return final, train, notes


def _bad(rel: Any, nonfinite: Any) -> float:
    try:
        if nonfinite is not None and not (isinstance(nonfinite, float) and math.isnan(nonfinite)) and float(nonfinite) > 0:
            return math.inf
    except (TypeError, ValueError):
        pass
    try:
        v = float(rel)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v


def _nan0(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v


def _uninitialised(typ: Any, name: Any) -> bool:
    n = str(name).lower()
    return str(typ) in UNINIT_TYPES or ".empty" in n or "new_empty" in n or "empty_like" in n


def _entry_type(entry: Any) -> str:
    """``Functional.linear.0.forward`` -> ``linear``; ``Aten.mm.default.3.forward`` -> ``mm``."""
    parts = str(entry).split(".")
    return parts[1] if len(parts) > 2 else str(entry)


def _local_frame(df: Any) -> dict[str, dict]:
    if df is None:
        return {}
    if isinstance(df, (str, Path)):
        df = pd.read_csv(df)
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
        lst = []
        for _pos, r in dump.inputs(e):
            k = key(r)
            if k in made and r.get("Max") is not None:
                lst.append(made[k])
        out[e] = lst
        for pos, r in dump.outputs(e):
            made[key(r)] = (e, pos.split(".")[0])
    return out


# ---------------------------------------------------------------------- types and final
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


def final_metrics(ts: Mapping[int, DumpView], gs: Mapping[int, DumpView], steps: list[int],
                  order_fallback: list[str] | None = None) -> list[dict]:
    """Per step: metrics of the model outputs (worst output tensor), and the loss when dumped.
    ``ts``/``gs``: {step: dump} (DumpView, ingest Dump) or anything ``as_steps`` accepts."""
    ts, gs = as_steps(ts), as_steps(gs)
    steps = [s for s in steps if s in ts and s in gs]
    out = []
    for s in steps:
        t, g = ts[s], gs[s]
        src = MODEL_OUTPUT
        if src not in t.entries or src not in g.entries:
            cands = [e for e in (order_fallback or list(t.entries)) if e in t.entries and e in g.entries
                     and e.endswith(".forward") and not e.startswith(("Model.", "Grad."))]
            if not cands:
                continue
            src = cands[-1]
        worst = None
        for m in judged_metrics(t, g, src, s):
            worst = worse(worst, m)
        item: dict[str, Any] = {"step": s, "source": src, "output": None}
        if worst is not None:
            item["output"] = {k: worst.get(k) for k in ("kind", "cosine", "rel_l2", "sqnr_db", "max_abs", "max_rel",
                                                         "finite", "norm_rel_diff", "saturated") if k in worst}
        if MODEL_LOSS in t.entries and MODEL_LOSS in g.entries and judged_metrics(t, g, MODEL_LOSS, s):
            lt, lg = t.outputs(MODEL_LOSS), g.outputs(MODEL_LOSS)
            if lt and lg:
                vt, vg = _scalar(t, lt[0][1]), _scalar(g, lg[0][1])
                if vt is not None and vg is not None:
                    fin = math.isfinite(vt)
                    item["loss"] = {"target": vt, "golden": vg, "finite": fin,
                                    "rel_diff": abs(vt - vg) / max(abs(vg), 1e-30) if fin else math.inf}
        out.append(item)
    return out


def _scalar(d: DumpView, rec: Mapping) -> float | None:
    x = d.tensor(rec) if d.has_tensors(rec) else None
    if x is not None:
        from .metrics import to_numpy
        a = to_numpy(x).reshape(-1)
        return float(a[0]) if a.size else None
    for k in ("value", "Mean", "Max"):
        if rec.get(k) is not None:
            try:
                return float(rec[k])
            except (TypeError, ValueError):
                return None
    return None
