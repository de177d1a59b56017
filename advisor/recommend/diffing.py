"""``advisor diff``: what changes between two mixlists on one run's graph.

Effective list changes per type (mixlist.list_changes), the op instances that flip precision and
why (semantics Why: rule, predecessor, root), predicted time change (cost model) and, when the run
has activations (dumps or local errors), the predicted final error of each side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import mixlist as mx
from ..errors import InputError
from ..semantics import DEFAULT_MODE, compile_graph, flips_between, mode_info, uses_mixlist
from . import tolerance as tolmod
from .core import _curve, _jsonable
from ..costmodel import build_time_model
from ..semantics import low_mask
from .model import ErrorModel, build_evidence
from .search import _pred_dict


@dataclass
class DiffResult:
    a: str
    b: str
    list_changes: dict
    flips: list[dict]
    predicted: dict
    notes: list[str]
    tolerance: dict
    mode: str
    soc: str
    b_mixlist: mx.Mixlist | None = None
    curve: dict = field(default_factory=dict)

    @property
    def flip_count(self) -> int:
        return len(self.flips)

    def to_dict(self) -> dict:
        return _jsonable({"schema": "advisor.diff/1", "a": self.a, "b": self.b, "mode": self.mode, "soc": self.soc,
                          "list_changes": {t: list(v) for t, v in self.list_changes.items()},
                          "flip_count": self.flip_count, "flips": self.flips, "predicted": self.predicted,
                          "tolerance": self.tolerance, "notes": self.notes,
                          "b_mixlist": self.b_mixlist.to_dict() if self.b_mixlist is not None else None})


def _load_side(x: Any, what: str) -> mx.Mixlist | None:
    if x is None:
        return None
    if isinstance(x, mx.Mixlist):
        return x
    s = str(x)
    if s in ("defaults", "none", "-"):
        return None
    p = Path(s)
    if not p.is_file():
        raise InputError(p, f"{what}: no such mixlist file")
    return mx.load(p)


def diff(run: Any, a: Any, b: Any, *, tolerance: Any = None, soc: str | None = None, ops_info: str | None = None,
         mode: str | None = None, rank: int | None = None, step: int | None = None, **rec_kw: Any) -> DiffResult:
    """Compare mixlists ``a`` and ``b`` (paths, Mixlist, "defaults"; ``b`` may be "recommended")
    on the graph of ``run`` (a directory or ingest Run)."""
    from .run_adapter import check_user_mixlist, gather
    d = gather(run, tolerance, soc=soc, ops_info=ops_info, mode=mode, rank=rank, step=step)
    defaults, mode = d["defaults"], d["mode"]
    notes: list[str] = []
    ma = _load_side(a, "A")
    if ma is not None:
        check_user_mixlist(ma, d)
    if str(b) == "recommended":
        from .core import recommend_graph
        rec = recommend_graph(d["graph"], defaults, mode=mode, run_mixlist=d["run_mixlist"], base_mixlist=ma,
                              ops=d["ops"], local=d["local"], tolerance=d["tolerance"],
                              culprit_types=d["culprit_types"], culprit_nodes=d["culprit_nodes"],
                              measured_final=d["measured_final"], **rec_kw)
        mb = rec.mixlist
        notes.append(f"B = the recommendation computed from A ({rec.status})")
    else:
        mb = _load_side(b, "B")
        if mb is not None:
            check_user_mixlist(mb, d)
    try:
        mode_info(mode)
    except ValueError as e:
        raise InputError(None, str(e)) from None
    if not uses_mixlist(mode):
        notes.append(f"precision mode {mode!r} ignores mixlists; flips shown for mixed_float16")
        mode = "mixed_bfloat16" if mode_info(mode)[1] == "bf16" else DEFAULT_MODE
    la, lb = mx.effective(defaults, ma), mx.effective(defaults, mb)
    changes = mx.list_changes(la, lb)
    try:
        c = compile_graph(d["graph"])
    except ValueError as e:
        raise InputError(getattr(d["run"], "path", None), str(e)) from None
    low = mode_info(mode)[1] or "fp16"
    pa = c.plan(la, mode)
    pb = c.what_if(pa, lb)
    fl = flips_between(pa, pb)
    ops, local = d["ops"], d["local"]
    ev = build_evidence(c, ops, local) if (ops is not None or local is not None) else None
    run_plan = c.plan(mx.effective(defaults, d["run_mixlist"]), mode)
    times = build_time_model(c, low, ran_low=low_mask(run_plan))
    model = ErrorModel(c, ev, times, low, run_plan, None, d["measured_final"])
    pra, prb = model.evaluate(pa, keep_arrays=True), model.evaluate(pb, keep_arrays=True)
    tol = d["tolerance"]
    pred = {"a": _pred_dict(pra), "b": _pred_dict(prb), "time_change_us": round(prb.time_us - pra.time_us, 3),
            "time_model": times.source}
    if model.enabled:
        pred["a_meets_tolerance"] = tolmod.meets(tol, pra.final_rel_l2, pra.final_nonfinite)
        pred["b_meets_tolerance"] = tolmod.meets(tol, prb.final_rel_l2, prb.final_nonfinite)
    else:
        for k in ("a", "b"):
            pred[k]["final_rel_l2"] = None
            pred[k]["final_nonfinite"] = None
            pred[k]["final_cosine"] = None
        notes.append("no activations (dumps or local errors): flips and time only, no error prediction")
    flips = []
    for f in fl:
        r = f.to_dict()
        wa = f.why_after
        r["reason"] = (f"{f.type} {f.before}->{f.after}: rule {wa.rule}"
                       + (f" via {wa.via}" if wa.via is not None else "")
                       + (f" (root {wa.root})" if wa.root is not None and wa.root != f.node else ""))
        flips.append(r)
    return DiffResult(str(a) if a is not None else "defaults", str(b), changes, flips, pred, notes,
                      tolmod.describe(tol), mode, defaults.soc, mb, _curve(c, pra, prb, ev, pa, pb))


def write_diff_outputs(res: DiffResult, out_dir: str | Path, html: bool = True) -> dict[str, Path]:
    import json

    from ..fsutil import atomic_write_text
    out = Path(out_dir)
    paths: dict[str, Path] = {}

    def put(key: str, p: Path, text: str) -> None:
        kept = atomic_write_text(p, text, keep_existing=True)
        paths[key] = p
        if kept is not None:
            paths[f"kept:{p.name}"] = kept
    if res.b_mixlist is not None and res.b == "recommended":
        put("mixlist", out / "modify_mixlist.json", res.b_mixlist.to_json())
    put("diff", out / "diff.json", json.dumps(res.to_dict(), indent=2, ensure_ascii=False) + "\n")
    if html:
        from ..report.html import render_diff
        put("report", out / "diff.html", render_diff(res.to_dict(), res.curve))
    return paths
