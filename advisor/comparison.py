"""``advisor compare``'s work (the command only parses options): the attribution of a run directory or
of a target and a golden msprobe dump, and the files it writes (advisor's per-op table as CSV, the full
result as JSON, msprobe's compare table as CSV or Excel)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable

from .compare.attribution import Attribution, attribute
from .compare.tolerance import Tolerance
from .errors import InputError
from .ingest.run import Run


def run_attribution(path: str, tol: Tolerance, *, soc: str | None = None, ops_info: str | None = None,
                    mode: str | None = None, steps: Iterable[int] | None = None) -> tuple[Attribution, Run]:
    """(attribution, run) of a capture/tune run directory: with its op graph the run's plan says who
    decided each precision; without, the dumped dtypes do."""
    from .analysis import analyze
    from .ingest.run import load_run
    p = Path(path)
    if not p.is_dir():
        raise InputError(p, "not a run directory")
    r = load_run(p)
    if r.target_dump is None or r.golden_dump is None:
        raise InputError(p, "the run has no target/golden precision dumps (dump/mixed, dump/fp32)")
    a = analyze(r, tolerance=tol, soc=soc, ops_info=ops_info, mode=mode) if r.graph is not None else None
    try:
        return (a.attribution(steps) if a is not None else attribute(r, tol, steps)), r
    except ValueError as e:
        raise InputError(path, str(e)) from None


def dumps_attribution(target: str, golden: str, tol: Tolerance, steps: Iterable[int] | None = None
                      ) -> tuple[Attribution, Run]:
    """(attribution, run) of a target and a golden msprobe dump alone (dataflow inferred, precision = the
    dumped dtype)."""
    from .ingest.run import run_from_dumps
    r = run_from_dumps(target, golden)
    try:
        return attribute(r, tol, steps), r
    except ValueError as e:
        raise InputError(target, str(e)) from None


def write_outputs(att: Attribution, run: Run, *, csv_out: str | None = None, json_out: str | None = None,
                  xlsx_out: str | None = None, msprobe_csv: str | None = None,
                  steps: Iterable[int] | None = None) -> list[tuple[str, Path | None]]:
    """Write the requested files (an existing one kept as ``.bak``); returns (file, its backup or None)."""
    from .compare.msprobe_table import msprobe_table, write_csv, write_xlsx
    from .fsutil import atomic_write_json, atomic_write_text
    kept = []
    if csv_out:
        buf = io.StringIO()
        att.ops.to_csv(buf, index=True, index_label="node")
        kept.append((csv_out, atomic_write_text(csv_out, buf.getvalue(), keep_existing=True)))
    if json_out:
        kept.append((json_out, atomic_write_json(json_out, att.to_dict(), keep_existing=True)))
    if xlsx_out or msprobe_csv:
        table = msprobe_table(run.target_dump, run.golden_dump, sorted(set(steps)) if steps else None)
        if msprobe_csv:
            kept.append((msprobe_csv, write_csv(table, msprobe_csv)))
        if xlsx_out:
            kept.append((xlsx_out, write_xlsx(table, xlsx_out)))
    return kept
