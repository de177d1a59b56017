"""Recommend the smallest mixlist edits (docs/recommend.md).

Public API::

    recommend(run_dir | ingest.Run | Analysis, tolerance=None, base_mixlist=None, exclude=(), max_edits=4, ...)
        -> Recommendation
    recommend_graph(g, defaults, mode=..., local=..., ...) -> Recommendation
    recommend_steps(run_dir, tolerance=None, workload=None, ...) -> Recommendation   (trained over steps)
    write_outputs(rec, out_dir) -> dict[str, Path]
    Recommendation.from_dict(json.load(recommendation.json)) -> Recommendation
    diff(run, a, b, ...) -> DiffResult
"""
from __future__ import annotations

from .core import recommend, recommend_graph, recommend_steps
from .diffing import DiffResult, diff, write_diff_outputs
from .edits import Edit
from .outputs import write_outputs
from .result import EditReport, Recommendation

__all__ = ["recommend", "recommend_graph", "recommend_steps", "write_outputs", "Recommendation", "EditReport", "Edit",
           "diff", "DiffResult", "write_diff_outputs"]
