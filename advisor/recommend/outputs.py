"""Writing a Recommendation: modify_mixlist.json (and keep_dtype.cfg, customize_dtypes.cfg), recommendation.json,
report.html.  tune
writes its confirmed list through ``write_list_files`` too: one writer of the files a consumer takes."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..fsutil import Same, atomic_write_text, json_text, same_but_timing
from ..mixlist import Mixlist
from .granularity import CUSTOMIZE_DTYPES_NAME, KEEP_DTYPE_NAME, MIXLIST_NAME, rec_snippets
from .result import Recommendation

PERF_MIXLIST_NAME = "modify_mixlist.performance.json"
TYPE_LEVEL_MIXLIST_NAME = "modify_mixlist.type_level.json"    # when per-op advice won: the type-level alternative


def _put(paths: dict[str, Path], key: str, p: Path, text: str, same: Same | None = None) -> None:
    """Write ``p``; an existing file with different content is kept as ``<name>.bak`` (in ``paths`` as
    ``kept:<name>``), unless ``same(old, new)`` calls it the same result (``fsutil.same_but_timing``)."""
    kept = atomic_write_text(p, text, keep_existing=True, same=same)
    paths[key] = p
    if kept is not None:
        paths[f"kept:{p.name}"] = kept


def write_list_files(out_dir: str | Path, mixlist: Mixlist | None, keep_lines: Iterable[str] = (),
                     customize_lines: Iterable[str] = ()) -> dict[str, Path]:
    """modify_mixlist.json (``mixlist``, relative to the chip defaults; the empty list when None) and, with
    keep lines, ATC's keep_dtype.cfg, with customize lines its customize_dtypes.cfg.  Returns {"mixlist",
    ["keep_dtype"], ["customize_dtypes"], kept backups as "kept:<name>"}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    _put(paths, "mixlist", out / MIXLIST_NAME, (mixlist or Mixlist()).to_json())
    lines = list(keep_lines)
    if lines:
        _put(paths, "keep_dtype", out / KEEP_DTYPE_NAME, "".join(f"{ln}\n" for ln in lines))
    custom = list(customize_lines)
    if custom:
        _put(paths, "customize_dtypes", out / CUSTOMIZE_DTYPES_NAME, "".join(f"{ln}\n" for ln in custom))
    return paths


def write_outputs(rec: Recommendation, out_dir: str | Path | None = None, html: bool = True) -> dict[str, Path]:
    """Write the outputs into ``out_dir`` (default: the folder ``recommend(out_dir=)`` was given); an existing
    file with different content is kept as ``<name>.bak`` (never silently overwritten).  The snippets name the
    files where ``recommend`` was told they would be; written elsewhere, they are re-targeted to ``out_dir``.
    Returns {"mixlist", "recommendation", "report", ["performance_mixlist"], ["keep_dtype": keep_dtype.cfg when
    the advice keeps ops], ["customize_dtypes": customize_dtypes.cfg when it customizes one], kept backups as
    "kept:<name>"}."""
    if out_dir is None and rec.out_dir is None:
        raise ValueError("write_outputs needs out_dir (recommend was not given one)")
    out = Path(out_dir if out_dir is not None else rec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if rec.out_dir != str(out.resolve()):
        rec.out_dir = str(out.resolve())
        rec.snippets = rec_snippets(rec, str(out.resolve() / MIXLIST_NAME), str(out.resolve() / KEEP_DTYPE_NAME),
                                    str(out.resolve() / CUSTOMIZE_DTYPES_NAME))
    paths = write_list_files(out, rec.modify_mixlist, rec.keep_dtype, rec.customize_dtypes)
    tl = rec.type_level_alternative
    if tl is not None and tl.modify_mixlist is not None and not tl.modify_mixlist.is_empty():
        _put(paths, "type_level_mixlist", out / TYPE_LEVEL_MIXLIST_NAME, tl.modify_mixlist.to_json())
    if rec.performance_mixlist is not None:
        _put(paths, "performance_mixlist", out / PERF_MIXLIST_NAME, rec.performance_mixlist.to_json())
    rec.files = {k: str(v) for k, v in paths.items()}
    d = rec.to_dict()
    _put(paths, "recommendation", out / "recommendation.json", json_text(d) + "\n",
         same_but_timing)   # differing only in timing: the same result, no .bak
    if html:
        from ..report.html import render_recommendation
        _put(paths, "report", out / "report.html", render_recommendation(d, rec.curve))
    return paths
