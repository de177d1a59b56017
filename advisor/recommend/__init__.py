"""Recommend the smallest mixlist edits (docs/recommend.md).

Public API::

    recommend(run, tolerance=None, base_mixlist=None, exclude=(), max_edits=4, ...) -> Recommendation
    recommend_graph(g, defaults, mode=..., ops=..., local=..., ...) -> Recommendation
    write_outputs(rec, out_dir, json_only=False) -> dict[str, Path]
    diff(run_or_graph, a, b, ...) -> DiffResult
"""
from __future__ import annotations

from .core import EditReport, Recommendation, recommend_graph
from .search import Edit

__all__ = ["recommend", "recommend_graph", "write_outputs", "Recommendation", "EditReport", "Edit",
           "diff", "DiffResult"]


def __getattr__(name):
    if name in ("recommend", "inputs_from_run"):
        from . import run_adapter
        return getattr(run_adapter, name)
    if name == "write_outputs":
        from .outputs import write_outputs
        return write_outputs
    if name in ("diff", "DiffResult"):
        from . import diffing
        return getattr(diffing, name)
    raise AttributeError(name)
