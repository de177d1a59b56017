"""``advisor diff``: what changes between two mixlists on one run's graph.

Effective list changes per type (mixlist.list_changes), the op instances that flip precision and why
(semantics Why: rule, predecessor, root), the time of both sides (costmodel.TimeModel) and, when the run has
activations, the final error of each side: replayed on the run's FP32 tensor dump when it has one, else
estimated by the error model (dumps' statistics or local errors); ``how`` says which.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import mixlist as mx
from ..analysis import Analysis, analyze
from ..errors import InputError
from ..fsutil import atomic_write_text, json_safe, json_text
from ..semantics import Plan, cpu_mask, flips_between, low_mask, uses_mixlist
from .edits import mixed_mode_of
from .explain import curve


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
        return json_safe({"schema": "advisor.diff/1", "a": self.a, "b": self.b, "mode": self.mode, "soc": self.soc,
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


def _side(an: Analysis, plan: Plan) -> dict:
    """Time, casts and share of a plan, and its final error (replayed or estimated) when activations exist."""
    low = low_mask(plan)
    t, casts, share, lost = an.times.plan_time(low, cpu_mask(plan))
    d = {"final_rel_l2": None, "final_nonfinite": None, "final_cosine": None, "time_us": round(t, 3),
         "casts": casts, "low_precision_share": round(share, 6), "fp32_forfeited_us": round(lost, 3),
         "how": "not predicted (no activations)"}
    if an.recording is not None and an.recording.replayable_share() > 0:
        res = an.replay(plan)
        items = res.final_metrics(tolerance=an.tolerance)
        v = an.tolerance.judge(items)
        w = v.worst or {}
        d.update(final_rel_l2=w.get("rel_l2"), final_nonfinite=w.get("finite") is False, final_cosine=w.get("cosine"),
                 how="replayed" if res.complete else "replayed, incomplete", meets_tolerance=bool(v.ok),
                 coverage=round(res.coverage, 6))
    return d


def _estimated_sides(an: Analysis, pa: Plan, pb: Plan, da: dict, db: dict) -> tuple[Any, Any] | None:
    """The error model's prediction of both sides (no FP32 tensor dump to replay): dumps' statistics and/or
    local errors as evidence."""
    import pandas as pd

    from .model import ErrorModel, build_evidence
    from .search import pred_dict
    local = an.run.local_errors if isinstance(an.run.local_errors, pd.DataFrame) else None
    ops = None
    if an.has_dumps:
        att = an.attribution()
        ops = att.ops if att.ops is not None and not att.ops.empty else None
    if ops is None and local is None:
        return None
    model = ErrorModel(an.compiled, build_evidence(an.compiled, ops, local), an.times, an.low_dtype, an.plan)
    if not model.enabled:
        return None
    pra, prb = model.evaluate(pa, keep_arrays=True), model.evaluate(pb, keep_arrays=True)
    for d, pr in ((da, pra), (db, prb)):
        p = pred_dict(pr)
        d.update(final_rel_l2=p["final_rel_l2"], final_nonfinite=p["final_nonfinite"], final_cosine=p["final_cosine"],
                 how="estimated", meets_tolerance=an.tolerance.predicted_ok(pr.final_rel_l2, pr.final_nonfinite))
    return pra, prb


def diff(run: Any, a: Any, b: Any, *, tolerance: Any = None, soc: str | None = None, ops_info: str | None = None,
         mode: str | None = None, rank: int | None = None, step: int | None = None, overrides_a: Any = None,
         overrides_b: Any = None, cann: str | None = None, overflow_mode: str | None = None,
         allow_hf32: str | None = None, **rec_kw: Any) -> DiffResult:
    """Compare mixlists ``a`` and ``b`` (paths, Mixlist, "defaults"; ``b`` may be "recommended") on the graph of
    ``run`` (a directory, an ingest Run or an Analysis); ``overrides_a`` / ``overrides_b``: each side's per-op
    overrides (``advisor.overrides.Overrides``; default: the run's own)."""
    an = run if isinstance(run, Analysis) else analyze(run, tolerance=tolerance, soc=soc, ops_info=ops_info,
                                                       mode=mode, rank=rank, step=step, cann=cann,
                                                       overflow_mode=overflow_mode, allow_hf32=allow_hf32)
    types = an.compiled.types
    notes: list[str] = []
    ma = _load_side(a, "A")
    if ma is not None:
        mx.check_op_types(ma, an.defaults, types)
    if str(b) == "recommended":
        from .core import recommend
        rec = recommend(an, base_mixlist=ma, **rec_kw)
        mb = rec.modify_mixlist
        notes.append(f"B = the recommendation computed from A ({rec.status})")
    else:
        mb = _load_side(b, "B")
        if mb is not None:
            mx.check_op_types(mb, an.defaults, types)
    notes += _fused_away(an, ma, mb)
    mode = an.mode
    if not uses_mixlist(mode) and (overrides_b is None or overrides_b == overrides_a):
        notes.append(f"precision mode {mode!r} ignores mixlists; flips shown for the mixed mode")
        mode = mixed_mode_of(mode)
    la, lb = an.lists_with(ma), an.lists_with(mb)
    ova = an.plan.overrides if overrides_a is None else overrides_a
    pa = an.compiled.plan(la, mode, ova)
    pb = an.compiled.what_if(pa, lb, overrides_b)
    da, db = _side(an, pa), _side(an, pb)
    if da["final_rel_l2"] is None and da["final_nonfinite"] is None and _estimated_sides(an, pa, pb, da, db) is None:
        notes.append("no activations (dumps or local errors): flips and time only, no error prediction")
    pred = {"a": da, "b": db, "time_change_us": round(db["time_us"] - da["time_us"], 3), "time_model": an.times.source}
    if "meets_tolerance" in da:
        pred["a_meets_tolerance"], pred["b_meets_tolerance"] = da.pop("meets_tolerance"), db.pop("meets_tolerance")
    flips = []
    for f in flips_between(pa, pb):
        r = f.to_dict()
        wa = f.why_after
        r["reason"] = (f"{f.type} {f.before}->{f.after}: rule {wa.rule}"
                       + (f" via {wa.via}" if wa.via is not None else "")
                       + (f" (root {wa.root})" if wa.root is not None and wa.root != f.node else ""))
        flips.append(r)
    return DiffResult(str(a) if a is not None else "defaults", str(b), mx.list_changes(la, lb), flips, pred, notes,
                      an.tolerance.to_dict(), mode, an.defaults.soc, mb,
                      curve(an.compiled, None, None, None, pa, pb, an.times))


def _fused_away(an: Analysis, ma: Any, mb: Any) -> list[str]:
    """Fusion notes: the types GE never judges, and each side's entries naming one (they match nothing)."""
    from ..fusion import notes
    return notes(an.graph, {"A": ma, "B": mb})


def write_diff_outputs(res: DiffResult, out_dir: str | Path, html: bool = True) -> dict[str, Path]:
    out = Path(out_dir)
    paths: dict[str, Path] = {}

    def put(key: str, p: Path, text: str) -> None:
        kept = atomic_write_text(p, text, keep_existing=True)
        paths[key] = p
        if kept is not None:
            paths[f"kept:{p.name}"] = kept
    if res.b_mixlist is not None and res.b == "recommended":
        put("mixlist", out / "modify_mixlist.json", res.b_mixlist.to_json())
    put("diff", out / "diff.json", json_text(res.to_dict()) + "\n")
    if html:
        from ..report.html import render_diff
        put("report", out / "diff.html", render_diff(res.to_dict(), res.curve))
    return paths
