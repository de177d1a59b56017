"""What a run is judged on: the metrics of aligned target/golden tensor pairs, the final outputs, the loss and
every gradient per step (``judged_steps``: the items ``Tolerance.judge`` takes).  Compare, recommend, replay
and tune all judge these; a pair the verdict rests on that cannot be compared is bad input, never a pass."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..errors import InputError
from ..graph import normalize_dtype
from .dumps import DumpView, as_steps
from .metrics import stats_metrics, tensor_metrics, worse
from .tolerance import Tolerance, loss_rel_diff

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
    """Where the tensor file a record names is (or should be): beside its dump.json."""
    from ..ingest.msprobe import TENSOR_DIR
    return Path(d.source).parent / TENSOR_DIR / str(rec.get("data_name"))


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


def judged_steps(ts: Any, gs: Any, steps: list[int], tolerance: Tolerance | None = None,
                 low_dtype: str | None = None, order_fallback: list[str] | None = None
                 ) -> tuple[list[dict], dict | None, list[str]]:
    """What the verdict of a run is judged on, per step: ``final_metrics`` (model outputs, loss)
    with the step's worst gradient cosine (``grad_min_cosine``, ``grad_worst``) and, for gradients negligible
    against the model's gradient scale, the worst absolute error against it (``grad_abs_error``,
    ``grad_abs_worst``) from the training signals -- the items ``Tolerance.judge`` takes.  Compare, recommend (through ``attribute``) and
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
    gabs = (train or {}).get("grad_abs_error_per_step") or {}
    for f in final:
        if f["step"] in gcos:
            f["grad_min_cosine"], f["grad_worst"] = gcos[f["step"]]
        if f["step"] in gabs:
            f["grad_abs_error"], f["grad_abs_worst"] = gabs[f["step"]]
    if train and train.get("negligible"):
        notes.append(negligible_note(train))
    if final and final[0].get("source") != MODEL_OUTPUT:
        notes.append(f"no {MODEL_OUTPUT} entry: judged on the last forward entry {final[0].get('source')}")
    return final, train, notes


def negligible_note(train: Mapping) -> str:
    """What the report says about the gradients judged by absolute error: which, and the scale."""
    names = list(train["negligible"])
    scales = [v for v in (train.get("grad_scale_per_step") or {}).values() if v]
    worst = max((p.get("max_abs_error_over_scale", 0.0) for p in train["params"] if p.get("negligible_steps")),
                default=0.0)
    more = f" (+{len(names) - 8} more)" if len(names) > 8 else ""
    return (f"{len(names)} parameter gradient(s) judged by absolute error, not cosine: {', '.join(names[:8])}{more} -- "
            f"their FP32 gradient is at most {train['grad_negligible']:g} of the model's gradient scale (the RMS "
            f"of every FP32 gradient element: {min(scales):.3g}-{max(scales):.3g} over the steps), zero up to "
            f"rounding, so a cosine would be noise; their RMS error is at most {worst:.3g} of the scale (tolerance "
            f"{train['max_grad_abs']:g}); they are left out of the underflow ratio and the loss scale")


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
                                    "rel_diff": loss_rel_diff(vt, vg)}
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
