"""Inputs of the compare stage: a run directory or a pair of dumps, as one Run-like object."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import AdvisorError, InputError
from .dumps import DumpView, load_dump_steps

LOCAL_ERROR_COLUMNS = ("name", "local_rel_l2")


@dataclass
class CompareRun:
    """What ``attribute`` needs: graph (or None), the two dumps per step, meta, local errors."""

    target_dump: dict[int, DumpView]
    golden_dump: dict[int, DumpView]
    graph: Any = None
    meta: dict = field(default_factory=dict)
    local_errors: pd.DataFrame | None = None
    path: Path | None = None
    mixlist: Any = None
    notes: list = field(default_factory=list)


def from_dumps(target: str | Path, golden: str | Path) -> CompareRun:
    t, g = load_dump_steps(target), load_dump_steps(golden)
    if not set(t) & set(g):
        raise InputError(target, f"target steps {sorted(t)} and golden steps {sorted(g)} do not overlap")
    return CompareRun(t, g)


def read_local_errors(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    try:
        df = pd.read_csv(p)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(p, f"cannot read local_error.csv ({type(e).__name__})") from None
    missing = [c for c in LOCAL_ERROR_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(p, f"local_error.csv lacks column(s) {', '.join(missing)}")
    return df


def from_run_dir(path: str | Path) -> CompareRun:
    """A capture / tune run directory (docs/architecture.md).  Uses ``advisor.ingest.load_run``
    when it exists; otherwise reads run.json, the GE graph dump, dump/mixed, dump/fp32 and
    local_error.csv directly (the same files)."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(p, "not a run directory")
    try:
        from ..ingest.run import load_run  # type: ignore[import-not-found]
    except ImportError:
        load_run = None
    notes: list[str] = []
    r = None
    if load_run is not None:
        try:
            r = load_run(p)
        except AdvisorError:
            raise
        except Exception as e:  # noqa: BLE001 - the reader failed unexpectedly: read the files directly
            notes.append(f"advisor.ingest.load_run failed ({type(e).__name__}: {e}); "
                         "read run.json, graph, dumps and local_error.csv directly")
    if r is not None:
        t, g = getattr(r, "target_dump", None), getattr(r, "golden_dump", None)
        if t is None or g is None:
            raise InputError(p, "the run has no target/golden precision dumps (dump/mixed, dump/fp32)")
        from .dumps import as_steps
        local = getattr(r, "local_errors", None)
        return CompareRun(as_steps(t), as_steps(g), getattr(r, "graph", None), dict(getattr(r, "meta", None) or {}),
                          local if isinstance(local, pd.DataFrame) else None, p, getattr(r, "mixlist", None))
    return _read_run_files(p, notes)


def _read_run_files(p: Path, notes: list[str]) -> CompareRun:
    """The run directory's files read directly (used when the ingest run loader is unavailable)."""
    meta: dict = {}
    rj = p / "run.json"
    if rj.is_file():
        try:
            meta = json.loads(rj.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(rj, f"cannot read run.json ({type(e).__name__})") from None
        if not isinstance(meta, dict):
            raise InputError(rj, "run.json must be a JSON object")
    if not (p / "dump" / "mixed").is_dir() or not (p / "dump" / "fp32").is_dir():
        raise InputError(p, "no dump/mixed and dump/fp32 precision dumps in this run directory")
    graph = None
    gdir = p / "graph"
    dumps = sorted(gdir.glob("ge_onnx_*.pbtxt")) + sorted(gdir.glob("ge_proto_*.txt")) if gdir.is_dir() else []
    if dumps:
        from ..ingest.ge_dump import read_ge_dump
        graph = read_ge_dump(dumps[-1])
    local = read_local_errors(p / "local_error.csv") if (p / "local_error.csv").is_file() else None
    mix = None
    if (p / "mixlist.json").is_file():
        from .. import mixlist as mx
        mix = mx.load(p / "mixlist.json")
    return CompareRun(load_dump_steps(p / "dump" / "mixed"), load_dump_steps(p / "dump" / "fp32"), graph, meta,
                      local, p, mix, notes)
