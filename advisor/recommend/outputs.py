"""Writing a Recommendation: modify_mixlist.json, recommendation.json, report.html."""
from __future__ import annotations

from pathlib import Path

from ..fsutil import atomic_write_text, json_text, same_but_timing
from .core import Recommendation
from .granularity import KEEP_DTYPE_NAME, rec_snippets

MIXLIST_NAME = "modify_mixlist.json"
PERF_MIXLIST_NAME = "modify_mixlist.performance.json"
TYPE_LEVEL_MIXLIST_NAME = "modify_mixlist.type_level.json"    # when per-op advice won: the type-level alternative


def write_outputs(rec: Recommendation, out_dir: str | Path, html: bool = True) -> dict[str, Path]:
    """Write the outputs into ``out_dir``; an existing file with different content is kept as
    ``<name>.bak`` (never silently overwritten).  Returns {"mixlist", "recommendation", "report",
    ["performance_mixlist"], ["keep_dtype": keep_dtype.cfg when the advice keeps ops], kept backups as
    "kept:<name>"}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    mpath = out / MIXLIST_NAME
    kpath = out / KEEP_DTYPE_NAME
    rec.snippets = rec_snippets(rec, str(mpath.resolve()), str(kpath.resolve()))

    def put(key: str, p: Path, text: str, same=None) -> None:
        kept = atomic_write_text(p, text, keep_existing=True, same=same)
        paths[key] = p
        if kept is not None:
            paths[f"kept:{p.name}"] = kept

    put("mixlist", mpath, rec.mixlist.to_json())
    if rec.keep_dtype:
        put("keep_dtype", kpath, "".join(f"{ln}\n" for ln in rec.keep_dtype))
    tl = rec.type_level_alternative or {}
    if any(v for lst in (tl.get("modify_mixlist") or {}).values() for v in lst.values()):
        put("type_level_mixlist", out / TYPE_LEVEL_MIXLIST_NAME, json_text(tl["modify_mixlist"]) + "\n")
    if rec.perf_mixlist is not None:
        put("performance_mixlist", out / PERF_MIXLIST_NAME, rec.perf_mixlist.to_json())
    d = rec.to_dict()
    d["files"] = {k: str(v) for k, v in paths.items()}
    put("recommendation", out / "recommendation.json", json_text(d) + "\n", same_but_timing)   # timing: same result
    if html:
        from ..report.html import render_recommendation
        put("report", out / "report.html", render_recommendation(d, rec.curve))
    return paths
