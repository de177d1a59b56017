"""Writing a Recommendation: modify_mixlist.json, recommendation.json, report.html."""
from __future__ import annotations

from pathlib import Path

from ..fsutil import atomic_write_text, json_text
from .core import Recommendation
from .snippets import mixlist_snippets

MIXLIST_NAME = "modify_mixlist.json"
PERF_MIXLIST_NAME = "modify_mixlist.performance.json"


def write_outputs(rec: Recommendation, out_dir: str | Path, html: bool = True) -> dict[str, Path]:
    """Write the outputs into ``out_dir``; an existing file with different content is kept as
    ``<name>.bak`` (never silently overwritten).  Returns {"mixlist", "recommendation", "report",
    ["performance_mixlist"], kept backups as "kept:<name>"}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    mpath = out / MIXLIST_NAME
    fp32 = sorted(e.edit.type for e in rec.edits if e.edit.kind == "black-add")
    low = sorted(e.edit.type for e in rec.edits if e.edit.kind == "white-add")
    rec.snippets = mixlist_snippets(str(mpath.resolve()), rec.mode, fp32, low)

    def put(key: str, p: Path, text: str) -> None:
        kept = atomic_write_text(p, text, keep_existing=True)
        paths[key] = p
        if kept is not None:
            paths[f"kept:{p.name}"] = kept

    put("mixlist", mpath, rec.mixlist.to_json())
    if rec.perf_mixlist is not None:
        put("performance_mixlist", out / PERF_MIXLIST_NAME, rec.perf_mixlist.to_json())
    d = rec.to_dict()
    d["files"] = {k: str(v) for k, v in paths.items()}
    put("recommendation", out / "recommendation.json", json_text(d) + "\n")
    if html:
        from ..report.html import render_recommendation
        put("report", out / "report.html", render_recommendation(d, rec.curve))
    return paths
