"""Inputs of the compare stage: a run directory or a pair of dumps, as one Run-like object."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from .dumps import DumpView, load_dump_steps


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


def from_run_dir(path: str | Path) -> CompareRun:
    """A capture / tune run directory (docs/architecture.md), read by ``advisor.ingest.load_run``."""
    from ..ingest.run import load_run

    p = Path(path)
    if not p.is_dir():
        raise InputError(p, "not a run directory")
    r = load_run(p)
    t, g = getattr(r, "target_dump", None), getattr(r, "golden_dump", None)
    if t is None or g is None:
        raise InputError(p, "the run has no target/golden precision dumps (dump/mixed, dump/fp32)")
    from .dumps import as_steps
    local = getattr(r, "local_errors", None)
    return CompareRun(as_steps(t), as_steps(g), getattr(r, "graph", None), dict(getattr(r, "meta", None) or {}),
                      local if isinstance(local, pd.DataFrame) else None, p, getattr(r, "mixlist", None))
