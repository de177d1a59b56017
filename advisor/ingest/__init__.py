"""Readers for real Ascend run output (profiles, GE graph dumps, msprobe dumps), discovery and
the op-graph build.  Public entry points are re-exported lazily to keep imports cheap."""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "write_ge_onnx": "ge_dump", "render_ge_onnx": "ge_dump", "render_ge_proto": "ge_dump", "read_ge_dump": "ge_dump",
    "read_kernel_details": "profile", "read_op_summary": "profile", "read_op_statistic": "profile",
    "read_profiler_info": "profile", "read_trace_view": "trace", "read_kernels": "profile",
    "load_dump": "msprobe", "load_dump_root": "msprobe", "align": "msprobe", "load_tensor": "msprobe",
    "saturation": "msprobe", "overflow": "msprobe", "Dump": "msprobe", "Entry": "msprobe", "TensorRecord": "msprobe",
    "Alignment": "msprobe", "kernel_precision": "profile",
    "infer_edges": "infer", "graph_from_kernels": "infer",
    "discover": "discover", "load_run": "run", "Run": "run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(name)
    return getattr(import_module(f".{mod}", __name__), name)
