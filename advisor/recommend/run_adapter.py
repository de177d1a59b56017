"""Thin adapter: a run (directory or ingest ``Run``) -> inputs of ``recommend_graph``.

Reads directories with ``advisor.ingest.load_run`` (the only reader); a run without dumps is
recommended on in profile-only mode.  The op graph comes from the run (graph dump or emulator
trace) or, failing that, is inferred from kernel_details.csv by ingest.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from .. import mixlist as mx
from ..errors import InputError
from ..oplists import DEFAULT_SOC, load_lists, precision_free
from ..semantics import DEFAULT_MODE
from .core import Recommendation, recommend_graph


def _has_dumps(run: Any) -> bool:
    t, g = getattr(run, "target_dump", None), getattr(run, "golden_dump", None)
    if t is None or g is None:
        return False
    try:
        return len(t) > 0 and len(g) > 0  # {step: dump} mappings
    except TypeError:
        return True


def load_any(run: Any, rank: int | None = None, step: int | None = None, progress: Any = None) -> Any:
    """A run object: ``run`` itself, or ``advisor.ingest.load_run`` of a directory."""
    if not isinstance(run, (str, Path)):
        return run
    p = Path(run)
    if not p.exists():
        raise InputError(p, "no such run directory")
    if not p.is_dir():
        raise InputError(p, "expected a run / profile directory")
    from ..ingest.run import load_run
    return load_run(p, rank=rank, step=step, progress=progress)


def run_mixlist(run: Any) -> mx.Mixlist | None:
    m = getattr(run, "mixlist", None)
    meta = dict(getattr(run, "meta", None) or {})
    if m is None:
        m = meta.get("mixlist")
    if m is None or isinstance(m, mx.Mixlist):
        return m
    if isinstance(m, Mapping):
        return mx.parse_obj(dict(m), "run.json mixlist")
    if isinstance(m, (str, Path)) and str(m):
        q = Path(m)
        base = getattr(run, "path", None)
        if not q.is_absolute() and base is not None:
            q = Path(base) / q
        if q.is_file():
            return mx.load(q)
        if base is not None and (Path(base) / "mixlist.json").is_file():
            return mx.load(Path(base) / "mixlist.json")
    return None


def _measured_final(att: Any) -> float | None:
    vals = []
    for f in getattr(att, "final", None) or []:
        o = f.get("output") or {}
        v = o.get("rel_l2")
        if v is None:
            v = o.get("norm_rel_diff")
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            vals.append(v)
    return max(vals) if vals else None


def _forward_ok(att: Any, tol: Any) -> bool:
    """The run's forward outputs and loss are within tolerance on every step (only the gradients fail)."""
    from .tolerance import limits
    rel, cos, fin = limits(tol)
    max_loss = getattr(tol, "max_loss_rel", 1e-2)
    finals = getattr(att, "final", None) or []
    if not finals:
        return False
    for f in finals:
        o = f.get("output") or {}
        if fin and o.get("finite") is False:
            return False
        r = o.get("rel_l2")
        if r is not None and not (isinstance(r, (int, float)) and r <= rel):
            return False
        c = o.get("cosine")
        if c is not None and isinstance(c, (int, float)) and c == c and c < cos:
            return False
        loss = f.get("loss") or {}
        ld = loss.get("rel_diff")
        if ld is not None and not (isinstance(ld, (int, float)) and ld <= max_loss):
            return False
    return True


def _saturation_findings(ops: pd.DataFrame | None) -> list[dict]:
    if ops is None or ops.empty or "saturated" not in ops.columns:
        return []
    s = pd.to_numeric(ops["saturated"], errors="coerce").fillna(0)
    hit = ops[s > 0]
    if hit.empty:
        return []
    by = hit.groupby("type").size().sort_values(ascending=False)
    return [{"kind": "saturation", "type": t, "instances": int(k),
             "message": f"{k} {t} output(s) hold +-65504 in fp16: saturated overflow (proved by the values)",
             "edit": None if precision_free(t) else f"black-list to-add {t}"} for t, k in by.items()]


def _profile_findings(run: Any) -> list[dict]:
    out = []
    kf = getattr(run, "kernels", None)
    if isinstance(kf, pd.DataFrame) and len(kf) and "type" in kf.columns:
        casts = kf[(kf["type"] == "Cast") | kf["name"].astype(str).str.contains("trans_Cast", regex=False)]
        if len(casts):
            dur = pd.to_numeric(casts.get("duration_us"), errors="coerce").fillna(0).sum() if "duration_us" in casts else 0
            tot = pd.to_numeric(kf.get("duration_us"), errors="coerce").fillna(0).sum() if "duration_us" in kf else 0
            out.append({"kind": "profile-casts", "casts": int(len(casts)), "cast_time_us": round(float(dur), 3),
                        "share_of_kernel_time": round(float(dur / tot), 6) if tot else None,
                        "message": "Cast kernels measured in the profile"})
    # overflow proved by the target dump's statistics alone (no golden needed): the ops whose outputs
    # saturate (+-65504) or turn inf/nan while their inputs are finite
    t = getattr(run, "target_dump", None)
    if t is not None and not _has_dumps(run):
        out.extend(_dump_overflow_findings(run, t))
    return out


def gather(run: Any, tolerance: Any = None, *, attribution: Any = None, soc: str | None = None,
           ops_info: str | None = None, mode: str | None = None, rank: int | None = None,
           step: int | None = None, progress: Any = None) -> dict:
    """Everything the search needs from a run: graph, chip defaults, mode, the run's mixlist, the
    attribution frame, local errors, culprit types, measured final error, findings, loss scale.
    ``progress(msg)`` hears each stage."""
    say = progress or (lambda msg: None)
    r = load_any(run, rank, step, progress)
    say("attributing errors and gathering evidence")
    g = getattr(r, "graph", None)
    src = getattr(r, "path", None) or run
    if g is None or g.number_of_nodes() == 0:
        raise InputError(src, "no op graph: the run has neither a GE graph dump nor kernel_details.csv")
    meta = dict(getattr(r, "meta", None) or {})
    soc = soc or meta.get("soc") or DEFAULT_SOC
    ops_info = ops_info or meta.get("ops_info")
    mode = mode or meta.get("mode") or DEFAULT_MODE
    defaults = load_lists(soc, ops_info)
    run_ml = run_mixlist(r)
    if tolerance is None:
        from .tolerance import default_tolerance
        tolerance = default_tolerance()
    att = attribution
    ops = None
    reason = None
    if att is None and _has_dumps(r):
        from ..compare.attribution import attribute
        try:
            att = attribute(r, tolerance)
        except ValueError as e:
            raise InputError(src, f"cannot compare the dumps: {e}") from None
    local = getattr(r, "local_errors", None)
    if not isinstance(local, pd.DataFrame):
        local = None
    findings = _profile_findings(r)
    culprits: list[str] = []
    culprit_nodes: list[str] = []
    measured_final = None
    loss_scale = None
    gradient_only = False
    if att is not None:
        ops = getattr(att, "ops", None)
        if isinstance(ops, pd.DataFrame) and ops.empty:
            ops = None
        types = getattr(att, "types", None)
        if isinstance(types, pd.DataFrame) and not types.empty:
            culprits = [str(t) for t in types.index]
            if "worst_instance" in types.columns:
                culprit_nodes = [str(x) for x in types["worst_instance"].tolist() if x is not None]
        measured_final = _measured_final(att)
        findings = _saturation_findings(ops) + findings
        tr = getattr(att, "training", None)
        if tr:
            loss_scale = {k: v for k, v in tr.items() if k not in ("params",)} if isinstance(tr, Mapping) else tr
            if isinstance(tr, Mapping) and tr.get("underflow_exceeds") and not tr.get("overflow") \
                    and tr.get("loss_scale") and _forward_ok(att, tolerance):
                gradient_only = True
    elif local is None:
        reason = ("profile-only mode: the run has no precision dumps and no local errors, so op sensitivity is "
                  "unknown; only what the profile proves is reported (fp32 time by inheritance, casts, saturation). "
                  "Sensitivity needs msprobe dumps or an emulator capture (`advisor capture`).")
    return dict(run=r, graph=g, defaults=defaults, mode=mode, run_mixlist=run_ml, ops=ops, local=local,
                tolerance=tolerance, culprit_types=culprits, culprit_nodes=culprit_nodes,
                measured_final=measured_final, findings=findings,
                loss_scale=loss_scale, profile_only_reason=reason, attribution=att, gradient_only=gradient_only)


def check_user_mixlist(m: mx.Mixlist, gathered: Mapping) -> None:
    """Refuse a user's mixlist naming an op type that exists nowhere - not in the chip tables (or the
    ops-info file) nor in this run's op graph (custom ops) - with a did-you-mean (mixlist.check_op_types)."""
    g = gathered["graph"]
    mx.check_op_types(m, gathered["defaults"], (a.get("type") for _, a in g.nodes(data=True)))


def _dump_overflow_findings(run: Any, t: Any, limit: int = 10) -> list[dict]:
    try:
        from ..ingest.msprobe import overflow, saturation
    except ImportError:
        return []
    g = getattr(run, "graph", None)
    by_entry = {}
    if g is not None:
        for n, a in g.nodes(data=True):
            by_entry[f"{a.get('dump') or a.get('name', n)}.forward"] = (n, a.get("type", ""))
    dumps = list(t.values()) if isinstance(t, Mapping) else [t]
    found: dict[str, dict] = {}
    for d in dumps:
        try:
            frames = [("saturated (+-65504)", saturation(d)), ("non-finite", overflow(d))]
        except Exception:  # noqa: BLE001 - a statistics layout this reader does not know: no finding
            continue
        for what, f in frames:
            if f is None or f.empty or "role" not in f.columns:
                continue
            bad_out = set(f.loc[f["role"] == "output", "entry"].astype(str))
            bad_in = set(f.loc[f["role"] == "input", "entry"].astype(str))
            for e in bad_out - bad_in:          # outputs bad, inputs fine: this op overflowed
                if e in found:
                    continue
                node, typ = by_entry.get(e, (None, ""))
                if e.startswith(("Model.", "Grad.")) or (g is not None and node is None):
                    continue                    # model outputs/loss/gradients: not an op
                found[e] = {"kind": "overflow-in-dump", "entry": e, "node": None if node is None else str(node),
                            "type": typ, "signal": what,
                            "message": f"{e}: output {what} from finite inputs in the low-precision run "
                                       f"(proved by the dump statistics)",
                            "edit": f"black-list to-add {typ}" if typ and not precision_free(typ) else None}
    return list(found.values())[:limit]


def recommend(run: Any, tolerance: Any = None, base_mixlist: mx.Mixlist | None = None, exclude: Iterable[str] = (),
              max_edits: int = 4, *, attribution: Any = None, soc: str | None = None, ops_info: str | None = None,
              mode: str | None = None, rank: int | None = None, step: int | None = None,
              mixlist_path: str = "modify_mixlist.json", progress: Any = None, **kw: Any) -> Recommendation:
    """Recommend mixlist edits for a run (path or ingest Run).  ``base_mixlist`` = where the search
    starts (default: the run's own mixlist); the result's ``mixlist`` is relative to the chip
    defaults.  See ``recommend_graph`` for ``kw`` (max_candidates, max_evals, perf, ...)."""
    d = gather(run, tolerance, attribution=attribution, soc=soc, ops_info=ops_info, mode=mode, rank=rank, step=step,
               progress=progress)
    if base_mixlist is not None:
        check_user_mixlist(base_mixlist, d)
    if progress is not None:
        progress("searching list edits")
    return recommend_graph(d["graph"], d["defaults"], mode=d["mode"], run_mixlist=d["run_mixlist"],
                           base_mixlist=base_mixlist, ops=d["ops"], local=d["local"], tolerance=d["tolerance"],
                           exclude=exclude, max_edits=max_edits, culprit_types=d["culprit_types"],
                           culprit_nodes=d["culprit_nodes"],
                           measured_final=d["measured_final"], findings=d["findings"], loss_scale=d["loss_scale"],
                           mixlist_path=mixlist_path, profile_only_reason=d["profile_only_reason"],
                           gradient_underflow_only=d["gradient_only"], **kw)
