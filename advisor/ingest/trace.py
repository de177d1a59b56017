"""trace_view.json (the torch_npu profiler's Chrome trace): framework ops, device kernels and the
``async_npu`` flows linking them (docs/formats.md "trace_view.json")."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fsutil import read_user_json
from .profile import MAX_DURATION_US

_INT64_MAX = 2 ** 63 - 1


def _ts_ns(v: Any) -> int:
    """Exact nanoseconds of a trace ``ts`` in microseconds; -1 for anything else (type, range)."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return -1
    s = str(v).strip().strip('"').strip()
    if not s or len(s) > 40:
        return -1
    w, _, f = s.partition(".")
    try:
        ns = int(w) * 1000 + int((f + "000")[:3] or 0)
    except ValueError:
        try:
            x = float(s) * 1000
        except ValueError:
            return -1
        ns = int(round(x)) if math.isfinite(x) else -1
    return ns if 0 <= ns <= _INT64_MAX else -1


def _dur_us(v: Any) -> float:
    """A trace ``dur`` (microseconds) as a float; NaN when it is not a plausible duration."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return math.nan
    try:
        x = float(v)
    except (ValueError, OverflowError):
        return math.nan
    return x if 0.0 <= x <= MAX_DURATION_US else math.nan


def _key(v: Any) -> str:  # a pid/tid/id of any JSON type as a hashable string
    return v if isinstance(v, str) else str(v)[:200]


def _args(e: dict) -> dict:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _strings(values: list) -> pd.Series:
    """An object column (object dtype even when empty: no float column of nothing)."""
    return pd.Series(values, dtype=object)


def read_trace_view(path: str | Path) -> dict[str, pd.DataFrame]:
    """``trace_view.json`` -> ``{"ops": framework ops, "kernels": device kernels, "links": op<->kernel}``.

    ops: ``op_id, name, pid, tid, ts_ns, dur_us, seq, call_stack, input_dims, parent_id, phase, stack``
    (phase = "bwd" when the op is the end of a ``fwdbwd`` flow, its name contains "Backward"
    (autograd nodes), or it runs inside such an op; else "fwd".  parent_id = enclosing op on the
    same pid/tid or -1; stack = nearest non-empty call stack of the op or its ancestors).
    kernels: ``kernel_id, name, pid, tid, ts_ns, dur_us, task_type``.
    links: ``op_id, kernel_id`` from ``async_npu`` flows (start bound to the enclosing cpu_op on
    the same pid/tid, end bound to the kernel starting at the flow end's ts on that pid/tid).
    """
    p = Path(path)
    d = read_user_json(p, "a trace_view.json")
    events = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(events, list):
        raise InputError(p, "expected a JSON list of trace events (or {\"traceEvents\": [...]})")
    ops, kernels, flows = _sort_events(events)
    opf = _frame(ops, "op_id",
                 seq=[_args(o).get("Sequence number") for o in ops],
                 call_stack=[str(_args(o).get("Call stack", "")) for o in ops],
                 input_dims=[str(_args(o).get("Input Dims", "")) for o in ops])
    kf = _frame(kernels, "kernel_id", task_type=[str(_args(k).get("Task Type", "")) for k in kernels])
    fl = _flow_frame(flows)
    links = pd.DataFrame({"op_id": pd.Series(dtype=np.int64), "kernel_id": pd.Series(dtype=np.int64)})
    phase = pd.Series("fwd", index=opf.index, dtype=object)
    phase[opf["name"].str.contains("Backward|backward", regex=True)] = "bwd"
    if not fl.empty:
        links = _launch_links(opf, kf, fl, links)
        fb = fl[fl["cat"] == "fwdbwd"]
        fe = fb[fb["ph"].isin(["f", "t"])]
        if not fe.empty:
            bw = _bind_op(opf, fe)
            phase[bw[bw >= 0].to_numpy()] = "bwd"
    own_bwd = (phase == "bwd").to_numpy()
    parent, bwd, stack = _nest(opf, own_bwd)
    opf["parent_id"] = parent
    opf["phase"] = np.where(bwd, "bwd", "fwd").astype(object)
    opf["stack"] = stack
    return {"ops": opf, "kernels": kf, "links": links}


def _sort_events(events: list) -> tuple[list[dict], list[dict], list[dict]]:
    """(cpu ops, device kernels, async_npu/fwdbwd flow events) of the trace; kernels only from the
    "Ascend Hardware"/NPU processes when the trace names any."""
    proc_names: dict[str, str] = {}
    ops, kernels, flows = [], [], []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            proc_names[_key(e.get("pid"))] = str(_args(e).get("name", ""))
        elif ph == "X":
            (ops if e.get("cat") == "cpu_op" else kernels).append(e)
        elif ph in ("s", "f", "t") and e.get("cat") in ("async_npu", "fwdbwd"):
            flows.append(e)
    hw = {pid for pid, nm in proc_names.items() if "ascend hardware" in nm.lower() or "npu" in nm.lower()}
    kernels = [k for k in kernels if not hw or _key(k.get("pid")) in hw]
    return ops, kernels, flows


def _frame(evs: list, id_col: str, **extra) -> pd.DataFrame:
    """The columns every X event has (id, name, pid, tid, exact ts, dur) plus ``extra``; any
    JSON type is tolerated (a time that is not a number is -1 / NaN)."""
    return pd.DataFrame({
        id_col: np.arange(len(evs), dtype=np.int64),
        "name": _strings([str(e.get("name", "")) for e in evs]),
        "pid": _strings([_key(e.get("pid", "")) for e in evs]),
        "tid": _strings([_key(e.get("tid", "")) for e in evs]),
        "ts_ns": np.array([_ts_ns(e.get("ts", "")) for e in evs], dtype=np.int64),
        "dur_us": np.array([_dur_us(e.get("dur")) for e in evs], dtype=float),
        **{k: _strings(v) for k, v in extra.items()}})


def _flow_frame(flows: list) -> pd.DataFrame:
    """Flow events: cat, ph, id, pid, tid, exact ts."""
    return pd.DataFrame({
        "cat": _strings([str(f.get("cat")) for f in flows]), "ph": _strings([str(f.get("ph")) for f in flows]),
        "id": _strings([_key(f.get("id")) for f in flows]), "pid": _strings([_key(f.get("pid", "")) for f in flows]),
        "tid": _strings([_key(f.get("tid", "")) for f in flows]),
        "ts_ns": np.array([_ts_ns(f.get("ts", "")) for f in flows], dtype=np.int64),
    })


def _bind_op(opf: pd.DataFrame, points: pd.DataFrame) -> pd.Series:
    """Enclosing cpu_op (latest start <= ts with ts <= end) on the same pid/tid."""
    if points.empty or opf.empty:
        return pd.Series(-1, index=points.index, dtype=np.int64)
    left = points[["pid", "tid", "ts_ns"]].reset_index().sort_values("ts_ns")
    right = opf[["pid", "tid", "ts_ns", "dur_us", "op_id"]].sort_values("ts_ns")
    m = pd.merge_asof(left, right, on="ts_ns", by=["pid", "tid"], direction="backward",
                      suffixes=("", "_op"))
    # merge_asof keeps the right ts only through op_id; check containment
    end = opf.set_index("op_id").reindex(m["op_id"].fillna(-1).astype(int))
    inside = (m["op_id"].notna().to_numpy()
              & (m["ts_ns"].to_numpy() <= end["ts_ns"].to_numpy() + (end["dur_us"].fillna(0).to_numpy() * 1000)))
    res = pd.Series(np.where(inside, m["op_id"].fillna(-1).astype(int), -1), index=m["index"].to_numpy())
    return res.reindex(points.index).astype(np.int64)


def _launch_links(opf: pd.DataFrame, kf: pd.DataFrame, fl: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    """op_id -> kernel_id pairs of the ``async_npu`` flows: the start bound to its enclosing cpu op,
    the end to the kernel starting at its ts on its pid/tid (else at that ts anywhere); ``links``
    (empty) when there is no kernel or no flow end."""
    a = fl[fl["cat"] == "async_npu"]
    s, f = a[a["ph"] == "s"], a[a["ph"].isin(["f", "t"])]
    s = s.assign(op_id=_bind_op(opf, s))
    if kf.empty or f.empty:
        return links
    kk = kf[["pid", "tid", "ts_ns", "kernel_id"]]
    fk = f.merge(kk, on=["pid", "tid", "ts_ns"], how="left")
    if fk["kernel_id"].isna().any():  # fall back to ts only (some versions put flows on another tid)
        byts = kk.drop_duplicates("ts_ns").set_index("ts_ns")["kernel_id"]
        fk["kernel_id"] = fk["kernel_id"].fillna(fk["ts_ns"].map(byts))
    links = s[["id", "op_id"]].merge(fk[["id", "kernel_id"]], on="id")
    links = links[(links["op_id"] >= 0) & links["kernel_id"].notna()]
    links = links.astype({"op_id": np.int64, "kernel_id": np.int64})[["op_id", "kernel_id"]]
    return links.drop_duplicates().reset_index(drop=True)


def _nest(opf: pd.DataFrame, own_bwd: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """The call tree of cpu ops on each pid/tid (an op's parent is the innermost op whose
    [ts, ts + dur] contains its start): parent op_id (-1 = top level), backward flag inherited
    from ancestors (``aten::mm`` under ``MmBackward0`` is backward), and the nearest non-empty
    call stack among the op and its ancestors (torch_npu records stacks on the Python-level op)."""
    n = len(opf)
    parent = np.full(n, -1, dtype=np.int64)
    bwd = own_bwd.astype(bool).copy()
    stack: list = [""] * n
    if not n:
        return parent, bwd, stack
    end = opf["ts_ns"].to_numpy() + np.nan_to_num(opf["dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    order = opf.assign(_end=end).sort_values(["pid", "tid", "ts_ns", "_end"], ascending=[True, True, True, False],
                                             kind="stable")
    own_stack = opf["call_stack"].tolist()
    open_: list = []
    cur = None
    for oid, key_p, key_t, ts, e in zip(order["op_id"].tolist(), order["pid"].tolist(), order["tid"].tolist(),
                                        order["ts_ns"].tolist(), order["_end"].tolist()):
        if (key_p, key_t) != cur:
            cur, open_ = (key_p, key_t), []
        while open_ and open_[-1][0] < ts:
            open_.pop()
        if open_:
            par = open_[-1][1]
            parent[oid] = par
            bwd[oid] = bwd[oid] or bwd[par]
            stack[oid] = own_stack[oid] or stack[par]
        else:
            stack[oid] = own_stack[oid]
        open_.append((e, oid))
    return parent, bwd, stack


def kernel_links(trace: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per device kernel of a ``read_trace_view`` result that an ``async_npu`` flow ties to the
    framework op that launched it: ``name``, ``start_ns`` (the kernel's start, exact, to join
    kernel_details.csv rows), ``framework_op`` (the launching op, e.g. ``aten::mm``), ``phase``
    (fwd/bwd, inherited from enclosing ops), ``call_stack`` (nearest recorded stack), ``seq``."""
    ops, kern, links = trace["ops"], trace["kernels"], trace["links"]
    cols = ["name", "start_ns", "framework_op", "phase", "call_stack", "seq"]
    if links.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    m = links.drop_duplicates("kernel_id").merge(kern[["kernel_id", "name", "ts_ns"]], on="kernel_id")
    m = m.merge(ops[["op_id", "name", "phase", "stack", "seq"]].rename(columns={"name": "framework_op"}), on="op_id")
    out = m.rename(columns={"ts_ns": "start_ns", "stack": "call_stack"})[cols]
    return out.drop_duplicates(["name", "start_ns"]).reset_index(drop=True)
