"""Type-level or per-op advice: when recommend proposes ATC keep_dtype lines, what it shows beside them (the
best type-level alternative; in modes without a mixlist the matching mixed mode), and the deployment snippets
of each consumer (docs/recommend.md, "Per-op advice").  The search itself is replay_search's."""
from __future__ import annotations

from typing import Any

from ..mixlist import compose
from ..semantics import uses_mixlist
from .edits import edits_mixlist, mixed_mode_of, overrides_with

KEEP_DTYPE_NAME = "keep_dtype.cfg"


def per_op_by_default(a: Any) -> bool:
    """Per-op advice by default where its consumer takes keep_dtype files: ONNX models (ATC), modes without a
    mixlist (force_fp16 & co: keeps are the only advice there), runs that already use keep_dtype /
    customize_dtypes.  PyTorch (torch_npu eager, torchair) and TF runs get type-level advice unless
    ``--granularity op`` is given.  ``a``: the run's Analysis."""
    return (str((a.run.meta or {}).get("framework") or "") == "onnx" or not uses_mixlist(a.mode)
            or not a.plan.overrides.is_empty())


def type_level_alternative(ctx: Any, t: Any, how: str) -> dict:
    """recommendation.json ``type_level_alternative`` of the best type-level set ``t`` (a replay_search
    Trial); ``ctx``: the recommendation in progress (core's search context)."""
    keeps = [e for e in t.edits if e.is_keep]
    return {"edits": sorted(str(e) for e in t.edits), "how": how,
            "modify_mixlist": compose(ctx.a.defaults, ctx.start, edits_mixlist(ctx.base_lists, t.edits)).to_dict(),
            "fp32_types": sorted(e.type for e in t.edits if e.kind == "black-add" or e.is_keep),
            "keep_dtype": overrides_with(ctx.base_plan.overrides, keeps).keep_dtype_text().splitlines() if keeps else [],
            "predicted": ctx.summary(t.plan, t.final(), how),
            "note": "the best type-level advice (modify_mixlist only): use it where per-op files are not accepted "
                    "(torch_npu eager, torchair); it keeps less compute in low precision"}


def mixed_mode_alternative(ctx: Any, best: Any, budget: int, skip: set, how: str) -> dict | None:
    """In a mode without a mixlist (force_fp16, ...): the best type-level list in the matching mixed mode, by
    replay (half the budget); when it keeps more compute low than ``best`` (the keeps found in the run's mode)
    by more than KEEP_MARGIN, a note on ``ctx`` and recommendation.json's ``mixed_mode_alternative``."""
    from .replay_search import KEEP_MARGIN, ReplaySearch
    mixed = mixed_mode_of(ctx.mode)
    r = ReplaySearch(ctx.a, ctx.base_lists, ctx.steps, exclude=ctx.exclude, budget=budget // 2,
                     max_exhaustive=min(3, ctx.max_edits), proposable=ctx.proposable, skip=skip, mode=mixed).run()
    if r.best is None or r.best.share <= best.share + KEEP_MARGIN:
        return None
    edits = sorted(str(e) for e in r.best.edits)
    which = ", ".join(edits) or "the default lists"
    ctx.notes.append(f"switching to --precision_mode_v2={mixed} with modify_mixlist ({which}) keeps "
                     f"{r.best.share:.1%} of float time in low precision ({how}), more than the {best.share:.1%} of "
                     f"{ctx.mode} with the keeps above (mixed_mode_alternative)")
    return {"mode": mixed, "edits": edits, "how": how,
            "modify_mixlist": compose(ctx.a.defaults, ctx.start, edits_mixlist(ctx.base_lists, r.best.edits)).to_dict(),
            "predicted": ctx.summary(r.best.plan, r.best.final(), how)}


def rec_snippets(rec: Any, mixlist_path: str, keep_path: str) -> dict[str, str]:
    """The deployment snippets of a Recommendation (its list edits; its keep_dtype file when it has one; the
    PyTorch policy from the type-level alternative when per-op advice won)."""
    from .snippets import deployment_snippets
    kinds = [e.edit for e in rec.edits]
    tl = rec.type_level_alternative or {}
    return deployment_snippets(mixlist_path, rec.mode, sorted(e.type for e in kinds if e.kind == "black-add"),
                               sorted(e.type for e in kinds if e.kind == "white-add"), keep_path, rec.keep_dtype,
                               any(not e.is_keep for e in kinds), tl.get("fp32_types"))
