"""Type-level or per-op advice: which runs get per-op keep_dtype lines by default, and the deployment snippets of
each consumer of a Recommendation (docs/recommend.md, "Per-op advice").  The search itself (per-op keeps, the
type-level alternative, the matching mixed mode) is replay_search's."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..semantics import uses_mixlist

if TYPE_CHECKING:
    from ..analysis import Analysis
    from .result import Recommendation

MIXLIST_NAME = "modify_mixlist.json"
KEEP_DTYPE_NAME = "keep_dtype.cfg"
CUSTOMIZE_DTYPES_NAME = "customize_dtypes.cfg"


def per_op_by_default(a: "Analysis") -> bool:
    """Per-op advice by default where its consumer takes keep_dtype files: ONNX models (ATC), modes without a
    mixlist (force_fp16 & co: keeps are the only advice there), runs that already use keep_dtype /
    customize_dtypes.  PyTorch (torch_npu eager, torchair) and TF runs get type-level advice unless
    ``--granularity op`` is given."""
    return (str((a.run.meta or {}).get("framework") or "") == "onnx" or not uses_mixlist(a.mode)
            or not a.plan.overrides.is_empty())


def rec_snippets(rec: "Recommendation", mixlist_path: str, keep_path: str, customize_path: str = "") -> dict[str, str]:
    """The deployment snippets of a Recommendation (its list edits; its keep_dtype and customize_dtypes files when
    it has them; the PyTorch policy from the type-level alternative when per-op advice won), naming the files at
    these paths."""
    from .snippets import deployment_snippets
    kinds = [e.edit for e in rec.edits]
    tl = rec.type_level_alternative
    out = deployment_snippets(mixlist_path, rec.mode, sorted(e.type for e in kinds if e.kind == "black-add"),
                              sorted(e.type for e in kinds if e.kind == "white-add"), keep_path, rec.keep_dtype,
                              any(not e.is_override for e in kinds), tl.fp32_types if tl is not None else None,
                              customize_path, rec.customize_dtypes)
    if rec.training is not None and rec.training.snippet:      # a run trained over steps: its settings as code
        out["training"] = rec.training.snippet
    return out
