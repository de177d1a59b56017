"""Compare FP16/BF16 runs against FP32: metrics, tolerance, attribution, training signals.

The names below are imported on first use (PEP 562): ``advisor.compare.tolerance`` -- what every command's
option parsing needs -- does not pull in pandas and the attribution."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"Attribution": "attribution", "attribute": "attribution", "rank_types": "attribution",
          "compare_dumps": "judge", "final_metrics": "judge", "judged_steps": "judge",
          "msprobe_pass": "metrics", "stats_metrics": "metrics", "tensor_metrics": "metrics",
          "Tolerance": "tolerance", "Verdict": "tolerance", "tolerance_from_options": "tolerance",
          "recommend_loss_scale": "training", "scale_text": "training", "training_signals": "training"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
