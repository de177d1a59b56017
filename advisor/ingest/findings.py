"""Profile-only findings for ``advisor inspect`` (no dumps needed, dumps used where present)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import semantics
from ..errors import InputError
from ..graph import op_nodes
from ..oplists import OpLists
from .common import GRAPH_OUTPUT_TYPES
from .msprobe import overflow, saturation
from .run import Run

LOW = ("fp16", "bf16")
FP16_MAX = 65504.0


def kernel_table(k: pd.DataFrame) -> pd.DataFrame:
    """Kernel time and count per (type, precision) of a kernel frame: columns type, precision, time_us,
    kernels (sorted by type, precision).  Tables of several ranks add up (``ingest.ranks.combined_table``)."""
    if not len(k):
        return pd.DataFrame({"type": pd.Series(dtype=object), "precision": pd.Series(dtype=object),
                             "time_us": pd.Series(dtype=float), "kernels": pd.Series(dtype=np.int64)})
    d = pd.DataFrame({"type": k["type"].astype(str).to_numpy(), "precision": k["precision"].astype(str).to_numpy(),
                      "dur": k["duration_us"].fillna(0.0).to_numpy(), "n": 1})
    g = d.groupby(["type", "precision"], sort=True).agg(time_us=("dur", "sum"), kernels=("n", "sum"))
    return g.reset_index()


def _table(k: pd.DataFrame) -> pd.DataFrame:
    return k if "time_us" in k.columns else kernel_table(k)


def _by_time(g: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Largest time first; ties in key order (deterministic whatever order the rows came in)."""
    return g.sort_values(["time_us", *keys], ascending=[False] + [True] * len(keys), kind="stable")


def precision_share(t: pd.DataFrame) -> list[dict]:
    """Kernel time per precision (of a kernel frame or its ``kernel_table``) with its share."""
    if not len(t):
        return []
    t = _table(t)
    g = t.groupby("precision", sort=True).agg(time_us=("time_us", "sum"), kernels=("kernels", "sum"))
    tot = float(g["time_us"].sum())
    g["share"] = g["time_us"] / tot if tot > 0 else 0.0
    g = _by_time(g.reset_index(), ["precision"])
    return [{"precision": r.precision, "time_us": float(r.time_us), "kernels": int(r.kernels), "share": float(r.share)}
            for r in g.itertuples()]


def type_share(t: pd.DataFrame, top: int | None = None) -> list[dict]:
    """Kernel time per op type and precision (of a kernel frame or its ``kernel_table``), largest first."""
    if not len(t):
        return []
    t = _table(t)
    tot = float(t["time_us"].sum())
    g = _by_time(t.assign(share=t["time_us"] / tot if tot > 0 else 0.0), ["type", "precision"])
    if top:
        g = g.head(top)
    return [{"type": r.type, "precision": r.precision, "time_us": float(r.time_us), "kernels": int(r.kernels),
             "share": float(r.share)} for r in g.itertuples()]


def framework_share(k: pd.DataFrame, top: int = 10) -> list[dict]:
    """Kernel time per launching framework op and phase (kernels linked through trace_view.json),
    with the fp32 part: where the fp32 time comes from, in the user's own terms (aten::*)."""
    if "framework_op" not in k.columns or not k["framework_op"].notna().any():
        return []
    d = k[k["framework_op"].notna()]
    d = d.assign(fp32_us=d["duration_us"].where(d["precision"].astype(str) == "fp32", 0.0))
    g = d.groupby(["framework_op", "phase"], sort=False).agg(kernels=("name", "size"), time_us=("duration_us", "sum"),
                                                             fp32_us=("fp32_us", "sum"))
    g = g.sort_values("time_us", ascending=False).head(top).reset_index()
    return [{"framework_op": str(r.framework_op), "phase": str(r.phase), "kernels": int(r.kernels),
             "time_us": float(r.time_us), "fp32_us": float(r.fp32_us)} for r in g.itertuples()]


def casts(k: pd.DataFrame) -> dict:
    """GE-inserted casts (``trans_Cast_*`` kernels) and all Cast kernels, with their time."""
    if not len(k):
        return {"inserted": 0, "inserted_time_us": 0.0, "cast": 0, "cast_time_us": 0.0, "share": 0.0}
    names = k["name"].astype(str)
    ins = names.str.startswith("trans_Cast").to_numpy()
    cst = (k["type"].astype(str) == "Cast").to_numpy() | ins
    dur = k["duration_us"].fillna(0.0).to_numpy()
    tot = float(dur.sum())
    return {"inserted": int(ins.sum()), "inserted_time_us": float(dur[ins].sum()),
            "cast": int(cst.sum()), "cast_time_us": float(dur[cst].sum()),
            "share": float(dur[cst].sum() / tot) if tot > 0 else 0.0}


def behaved_as(t: pd.DataFrame, lists: OpLists) -> list[dict]:
    """Per float op type (of a kernel frame or its ``kernel_table``), how its kernels actually ran: "low" (all fp16/bf16, behaved
    white), "fp32" (all fp32, behaved black or gray-kept-fp32), "mixed" (gray following its inputs); with the
    list the type is on for this chip."""
    t = _table(t) if len(t) else t
    d = t[t["precision"] != "n/a"] if len(t) else t
    if not len(d):
        return []
    d = d.assign(low=np.where(d["precision"].isin(LOW), d["kernels"], 0))
    g = d.groupby("type", sort=True).agg(kernels=("kernels", "sum"), low=("low", "sum"), time_us=("time_us", "sum"))
    out = []
    for r in _by_time(g.reset_index(), ["type"]).itertuples():
        t_ = r.type
        behaved = "low" if r.low == r.kernels else ("fp32" if r.low == 0 else "mixed")
        lst = lists.list_of(t_)
        as_list = {"low": "white", "fp32": "black", "mixed": "gray"}[behaved]
        out.append({"type": t_, "list": lst, "behaved": behaved, "behaved_as": as_list, "kernels": int(r.kernels),
                    "low_kernels": int(r.low), "time_us": float(r.time_us),
                    "differs": (lst == "white" and behaved != "low") or (lst == "black" and behaved != "fp32")})
    return out


def gray_fp32_ops(run: Run, plan: semantics.Plan, lists: OpLists) -> list[dict]:
    """Gray op types kept in fp32 because their first activation input is fp32 (rules
    gray-inherit / gray-skip-cast / gray-const-inputs), confirmed by the profile where it ran (observed fp32)."""
    g = run.graph
    rows: dict[str, dict] = {}
    nodes = g._node
    gray: dict[str, bool] = {}
    for i, (n, prec, rule) in enumerate(zip(plan.compiled.order, plan.precision_list, plan.rules)):
        # cheap filters first (plan arrays), node attributes only for the few that pass
        if prec != "fp32" or rule not in ("gray-inherit", "gray-skip-cast", "gray-const-inputs"):
            continue
        a = nodes[n]
        if a.get("role", "op") != "op":
            continue
        t = a.get("type", "")
        if t not in gray:
            gray[t] = lists.list_of(t) == "gray"
        if not gray[t]:
            continue
        why = plan.why(n)
        obs = a.get("precision_observed")
        if obs is not None and obs != "fp32":
            continue
        core = str(a.get("core", ""))
        r = rows.setdefault(t, {"type": t, "ops": 0, "time_us": 0.0, "vector_core": 0, "roots": {}})
        r["ops"] += 1
        r["time_us"] += float(a.get("duration_us") or 0.0)
        r["vector_core"] += int("VECTOR" in core or "AIV" in core)
        root = why.root if why.root is not None else why.via
        if root is not None:
            rt = g.nodes[root].get("type", str(root)) if root in g else str(root)
            r["roots"][rt] = r["roots"].get(rt, 0) + 1
    out = sorted(rows.values(), key=lambda r: (-r["time_us"], -r["ops"]))
    for r in out:
        r["roots"] = dict(sorted(r["roots"].items(), key=lambda kv: -kv[1]))
    return out


def saturation_hits(run: Run, which: str = "saturation") -> list[dict]:
    """Target-dump tensors whose statistics are exactly +-65504 (fp16 saturation) or, with
    ``which="overflow"``, inf/nan."""
    out = []
    fn = saturation if which == "saturation" else overflow
    for step, d in sorted((run.target_dump or {}).items()):
        f = fn(d) if which != "saturation" else fn(d, FP16_MAX)
        for r in f.itertuples():
            out.append({"step": step, "entry": r.entry, "tensor": r.key, "dtype": r.dtype,
                        "max": r.max, "min": r.min})
    return out


def linked_rows(k: pd.DataFrame) -> int:
    """Kernel rows that a trace_view.json links to the framework op that launched them."""
    return int(k["framework_op"].notna().sum()) if "framework_op" in k.columns else 0


def missing(run: Run) -> list[str]:
    """What is missing, and which analysis needs it."""
    msgs = []
    profiles = list(run.found.profiles) if run.found is not None else []
    if not len(run.kernels):
        where = f" in the {len(profiles)} profile folder(s) found" if profiles else ""
        msgs.append(f"no kernel table (kernel_details.csv / op_summary_*.csv){where}: no timings, no per-precision "
                    "time share, no performance edits")
    if run.graph is None:
        msgs.append("no op graph: no GE graph dump and no kernels to infer one from; semantics/what-if unavailable")
    elif run.graph.graph.get("edges") == "inferred":
        msgs.append("no GE graph dump (ge_onnx_*.pbtxt / ge_proto_*.txt): dataflow edges are inferred from "
                    "execution order and shapes (confidence < 1); inheritance findings are approximate "
                    "(set DUMP_GE_GRAPH=2 for exact edges)")
    if not run.target_dump:
        msgs.append("no precision dump (msprobe dump.json): compare/recommend cannot measure errors; "
                    "saturation check unavailable")
    elif not run.golden_dump:
        msgs.append("no golden (fp32) dump: compare/recommend need target and golden dumps of the same steps")
    elif run.target_dump and not any(d.has_tensors for d in run.target_dump.values()):
        msgs.append("statistics-only dumps: per-tensor metrics limited to max/min/mean/norm")
    if run.local_errors is None and run.meta.get("emulated"):
        msgs.append("no local_error.csv: flip prediction falls back to the graph only")
    if len(run.kernels) and not run.meta.get("emulated"):
        read = run.sources.get("trace_view", [])
        if not any(p.kernels is not None and p.trace_view is not None for p in profiles):
            msgs.append("no trace_view.json beside the kernels: kernels are not linked to the framework ops "
                        "(aten::*) that launched them, nor to call stacks / forward-backward phase")
        elif read and not linked_rows(run.kernels):
            msgs.append(f"{read[0]}: read, but none of its device kernels matches a kernel row by name and start "
                        "time (a trace of another run, or without async_npu flows): kernels are not linked to "
                        "the framework ops that launched them")
    msgs.extend(run.sources.get("notes", []))
    return msgs


def run_mode(run: Run, mode: str | None = None) -> str:
    """The precision mode to plan a run in: ``mode``, else run.json's, else the default (also for a mode
    semantics does not know)."""
    mode = mode or run.meta.get("mode") or run.meta.get("precision_mode") or semantics.DEFAULT_MODE
    try:
        semantics.mode_info(mode)
    except ValueError:
        mode = semantics.DEFAULT_MODE
    return mode


def summarize(run: Run, lists: OpLists, mode: str | None = None, top: int = 15) -> dict[str, Any]:
    """Everything ``advisor inspect`` prints about a run, as a JSON-able dict (the profile figures over all of
    ``run.kernels``; ``ingest.ranks.combine`` puts several ranks' figures in their place)."""
    k = run.kernels
    mode = run_mode(run, mode)
    found = run.found
    table = kernel_table(k)
    out: dict[str, Any] = {
        "path": str(run.path),
        "found": found.to_dict() if found else {},
        "ranks": run.ranks, "steps": run.steps, "graph_rank": run.rank, "graph_step": run.step,
        "kernels": int(len(k)),
        "kernel_time_us": float(k["duration_us"].fillna(0).sum()) if len(k) else 0.0,
        "precision_share": precision_share(table),
        "type_share": type_share(table, top),
        "casts": casts(k),
        "behaved_as": behaved_as(table, lists),
        "mode": mode, "soc": lists.soc,
        "engine": (run.engine_info.to_dict() if run.engine_info is not None else {"engine": run.engine, "why":
                   "run.json"}),
    }
    if run.graph is not None:
        g = run.graph
        ops = [n for n in op_nodes(g) if g._node[n].get("type") not in GRAPH_OUTPUT_TYPES]
        n_edges = g.number_of_edges()
        out["graph"] = {"nodes": g.number_of_nodes(), "ops": len(ops), "edges": n_edges,
                        "edges_source": "inferred" if g.graph.get("edges") == "inferred" else "GE graph dump",
                        "excluded": sum(1 for n in ops if g._node[n].get("decides", True) is False)}
        if g.graph.get("edges") == "inferred" and n_edges:
            conf = np.fromiter((d.get("confidence", 1.0) for _, _, d in g.edges(data=True)), float)
            out["graph"]["mean_edge_confidence"] = float(conf.mean())
        try:
            p = semantics.plan(g, lists, mode)
        except ValueError as e:  # a cyclic graph
            raise InputError(g.graph.get("source"), str(e)) from None
        semantics.annotate(g, p)
        out["plan_mix"] = {}
        prec = p.precision
        for n in ops:
            pr = prec.get(n, "n/a")
            out["plan_mix"][pr] = out["plan_mix"].get(pr, 0) + 1
        out["gray_fp32_by_inheritance"] = gray_fp32_ops(run, p, lists)
    out["dumps"] = {
        "target": {str(s): {"entries": len(d), "task": d.task, "path": str(d.path)} for s, d in (run.target_dump or {}).items()},
        "golden": {str(s): {"entries": len(d), "task": d.task, "path": str(d.path)} for s, d in (run.golden_dump or {}).items()},
    }
    if run.target_dump and run.golden_dump:
        from .msprobe import align
        s = sorted(set(run.target_dump) & set(run.golden_dump))
        if s:
            al = align(run.target_dump[s[0]], run.golden_dump[s[0]])
            out["dumps"]["alignment"] = {"step": s[0], "common": len(al.common), "only_target": al.only_target[:20],
                                         "only_golden": al.only_golden[:20]}
    if run.trace is not None:
        t = run.trace
        ops = t["ops"]
        out["trace"] = {"path": run.sources.get("trace_view", [""])[0], "framework_ops": int(len(ops)),
                        "kernels": int(len(t["kernels"])), "linked": int(len(t["links"])),
                        "bwd_ops": int((ops["phase"] == "bwd").sum()) if len(ops) else 0,
                        "with_call_stack": int((ops["call_stack"] != "").sum()) if len(ops) else 0,
                        "kernel_rows_linked": linked_rows(k),
                        "by_framework_op": framework_share(k)}
    out["saturation"] = saturation_hits(run)
    out["overflow"] = saturation_hits(run, "overflow")
    out["missing"] = missing(run)
    return out
