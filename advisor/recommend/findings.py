"""What a run proves without predicting anything: measured casts, values that saturate or turn non-finite in
the target dump, fp32 time held by black membership or gray inheritance, Cast churn at precision boundaries.
Every time comes from the one time model (costmodel.TimeModel): the profile's measured kernel times where it
has them (``time_source``), ``estimated`` names the fields the cost model supplied."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from ..semantics import FP32_BY_LIST, NodeKind, Plan, low_mask
from .edits import proposable


def profile_casts(kernels: pd.DataFrame | None) -> list[dict]:
    """Cast kernels measured in the profile (GE-inserted ``trans_Cast_*`` and Cast ops)."""
    if kernels is None or not len(kernels) or "type" not in kernels.columns:
        return []
    casts = kernels[(kernels["type"] == "Cast") | kernels["name"].astype(str).str.contains("trans_Cast", regex=False)]
    if not len(casts):
        return []
    dur = float(pd.to_numeric(casts["duration_us"], errors="coerce").fillna(0).sum())
    tot = float(pd.to_numeric(kernels["duration_us"], errors="coerce").fillna(0).sum())
    return [{"kind": "profile-casts", "casts": int(len(casts)), "cast_time_us": round(dur, 3),
             "share_of_kernel_time": round(dur / tot, 6) if tot else None, "time_source": "measured",
             "message": "Cast kernels measured in the profile"}]


def dump_overflow(graph: Any, targets: dict | None, limit: int = 10) -> list[dict]:
    """Ops whose outputs saturate (+-65504) or turn inf/nan in the target dump (``{step: ingest Dump}``) while
    their inputs are finite (proved by the dump's statistics alone, no golden needed)."""
    from ..ingest.msprobe import overflow, saturation
    by_entry = {}
    if graph is not None:
        for n, a in graph.nodes(data=True):
            by_entry[f"{a.get('dump') or a.get('name', n)}.forward"] = (n, a.get("type", ""))
    found: dict[str, dict] = {}
    for d in (targets or {}).values():
        for what, f in (("saturated (+-65504)", saturation), ("non-finite", overflow)):
            frame = f(d)
            if frame is None or frame.empty or "role" not in frame.columns:
                continue
            bad_out = set(frame.loc[frame["role"] == "output", "entry"].astype(str))
            bad_in = set(frame.loc[frame["role"] == "input", "entry"].astype(str))
            for e in sorted(bad_out - bad_in):
                node, typ = by_entry.get(e, (None, ""))
                if e in found or e.startswith(("Model.", "Grad.")) or (graph is not None and node is None):
                    continue
                found[e] = {"kind": "overflow-in-dump", "entry": e, "node": None if node is None else str(node),
                            "type": typ, "signal": what,
                            "message": f"{e}: output {what} from finite inputs in the low-precision run "
                                       "(proved by the dump statistics)",
                            "edit": f"black-list to-add {typ}" if proposable(typ) else None}
    return list(found.values())[:limit]


def saturation(ops: pd.DataFrame | None) -> list[dict]:
    """Op types whose outputs hold +-65504 (fp16 saturation mode: overflow proved by the values)."""
    if ops is None or ops.empty or "saturated" not in ops.columns:
        return []
    s = pd.to_numeric(ops["saturated"], errors="coerce").fillna(0)
    hit = ops[s > 0]
    if hit.empty:
        return []
    by = hit.groupby("type").size().sort_values(ascending=False)
    return [{"kind": "saturation", "type": t, "instances": int(k),
             "message": f"{k} {t} output(s) hold +-65504 in fp16: saturated overflow (proved by the values)",
             "edit": f"black-list to-add {t}" if proposable(t) else None} for t, k in by.items()]


def fp32_time(plan: Plan, times: Any, top: int = 10) -> list[dict]:
    """fp32 kernel time per (type, rule) for ops that run fp32 by black membership or gray inheritance -
    what the profile proves.  Types never proposed (``edits.proposable``: precision-free, Casts) are left out."""
    c = plan.compiled
    low = low_mask(plan)
    kind = np.asarray(c.kind)
    rules = np.asarray(plan.rules, dtype=object)
    types = np.asarray(c.types, dtype=object)
    free = np.array([not proposable(t) for t in types.tolist()], dtype=bool)
    sel = np.flatnonzero((kind == NodeKind.OP) & ~low & np.isin(rules, list(FP32_BY_LIST)) & ~free)
    if not len(sel):
        return []
    meas = times.measured_at(low)
    total = times.kernel_time(low) or 1.0
    step_measured = times.step_us is not None
    df = pd.DataFrame({"type": types[sel], "rule": [str(r) for r in rules[sel]], "fp32_us": times.t_fp32[sel],
                       "saving_us": times.t_fp32[sel] - times.t_low[sel], "measured": meas[sel]})
    g = df.groupby(["type", "rule"], sort=False).agg(instances=("fp32_us", "size"), fp32_us=("fp32_us", "sum"),
                                                      saving_us=("saving_us", "sum"), measured=("measured", "sum"))
    g = g.sort_values("fp32_us" if meas.any() else "saving_us", ascending=False).head(top)
    out = []
    for (t, r), x in g.iterrows():
        k, n = int(x["measured"]), int(x["instances"])
        source = "measured" if k == n else "cost model" if k == 0 else f"measured for {k} of {n} instances"
        estimated = ["saving_if_low_us"] + ([] if k == n else ["fp32_time_us"]) + \
            ([] if k == n and step_measured else ["share_of_step"])
        out.append({"kind": "fp32-time", "type": t, "rule": r, "instances": n,
                    "fp32_time_us": round(float(x["fp32_us"]), 3), "saving_if_low_us": round(float(x["saving_us"]), 3),
                    "share_of_step": round(float(x["fp32_us"]) / total, 6), "time_source": source,
                    "estimated": estimated,
                    "message": "runs fp32 by " + ("black membership" if r == "black" else "gray inheritance")
                               + "; whether it tolerates low precision needs dumps or a capture"})
    return out


def cast_churn(plan: Plan, times: Any, try_edit: Callable[[str], dict | None] | None = None,
               top: int = 5) -> list[dict]:
    """Float edges whose ends differ in precision (GE inserts a Cast on each), grouped by type pair;
    ``try_edit(type)`` may return the best single edit on a boundary type that removes Casts."""
    low = low_mask(plan)
    if not len(times.edge_src):
        return []
    mism = low[times.edge_src] != low[times.edge_dst]
    n = int(mism.sum())
    if n == 0:
        return []
    types = np.asarray(plan.compiled.types, dtype=object)
    df = pd.DataFrame({"src": types[times.edge_src[mism]], "dst": types[times.edge_dst[mism]],
                       "us": times.cast_us[times.edge_src[mism]]})
    grp = df.groupby(["src", "dst"], sort=False)["us"].agg(["count", "sum"]).sort_values("count", ascending=False)
    out = {"kind": "cast-churn", "casts": n, "cast_time_us": round(float(df["us"].sum()), 3),
           "time_source": "cost model (the Casts GE inserts on these edges)",
           "top_pairs": [{"producer_type": a, "consumer_type": b, "casts": int(r["count"]),
                          "time_us": round(float(r["sum"]), 3)} for (a, b), r in grp.head(top).iterrows()]}
    if try_edit is not None:
        best = None
        for (a, b), _ in grp.head(2).iterrows():
            for t in (a, b):
                r = try_edit(t)
                if r is not None and (best is None or r["casts_after"] < best["casts_after"]):
                    best = r
        if best is not None:
            out["edit_removing_most"] = best
    return [out]
