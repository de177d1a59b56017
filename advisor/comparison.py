"""``advisor compare``'s work (the command only parses options): the attribution of a run directory or
of a target and a golden msprobe dump, and the files it writes (advisor's per-op table as CSV, the full
result as JSON, msprobe's compare table as CSV or Excel)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Iterable

from .compare.attribution import Attribution
from .compare.tolerance import Tolerance
from .errors import InputError
from .ingest.run import Run


def compare_ranks_of(run: str | None, target: str | None, golden: str | None, tol: Tolerance, *,
                     ranks: Iterable[int] | None = None, steps: Iterable[int] | None = None,
                     soc: str | None = None, ops_info: Any = None, mode: str | None = None,
                     workers: int | None = None, ray: str | None = None,
                     cann: str | None = None) -> tuple[Attribution, Run, dict]:
    """``advisor compare`` on a run directory or on a target and a golden dump: (the first rank's
    attribution, its run, the ranks document: every other rank compared by independent tasks and the
    cross-rank findings, ``{}`` with one rank).  With its op graph a rank's plan says who decided each
    precision; without, the dumped dtypes do."""
    from .cluster import other_ranks, rank_comparison
    from .tasks import check_workers
    check_workers(workers, ray)
    jobs = _jobs(run, target, golden, tol, ranks, steps, soc=soc, ops_info=ops_info, mode=mode, cann=cann)
    att, r = _first(jobs)
    return att, r, other_ranks(jobs, rank_comparison(att, r, jobs[0].rank), workers, ray)


def training_steps(run: str | Path, tol: Tolerance) -> tuple[Any, dict] | None:
    """compare over the training steps of a run directory: (``compare.steps.judge_steps``'s ``StepsVerdict``, the
    curves report.html plots: ``steps_summary``), or None when the run has no ``train/steps.jsonl``."""
    from .compare.steps import judge_steps, steps_summary
    from .ingest.steps import read_steps
    log = read_steps(run)
    return None if log is None else (judge_steps(log, tol), steps_summary(log))


def run_attribution(path: str, tol: Tolerance, *, soc: str | None = None, ops_info: Any = None,
                    mode: str | None = None, steps: Iterable[int] | None = None,
                    cann: str | None = None) -> tuple[Attribution, Run]:
    """(attribution, run) of a capture/tune run directory's first rank, as ``advisor compare --run``."""
    return _first(_jobs(str(path), None, None, tol, None, steps, soc=soc, ops_info=ops_info, mode=mode, cann=cann))


def _jobs(run: str | None, target: str | None, golden: str | None, tol: Tolerance, ranks, steps, **how) -> list:
    """compare's per-rank jobs, after the checks of its inputs."""
    from .cluster import compare_jobs
    if run and not Path(run).is_dir():
        raise InputError(run, "not a run directory")
    if not run and not (target and golden):
        raise InputError("", "give --run RUNDIR, or both --target DUMP and --golden DUMP")
    return compare_jobs(run, target, golden, ranks, tolerance=tol, steps=steps, **how)


def _first(jobs: list) -> tuple[Attribution, Run]:
    """(attribution, run) of the first job's rank."""
    from .cluster import attribute_rank, rank_run
    r, analysis = rank_run(jobs[0])
    return attribute_rank(jobs[0], r, analysis), r


def write_outputs(att: Attribution, run: Run, *, csv_out: str | None = None, json_out: str | None = None,
                  xlsx_out: str | None = None, msprobe_csv: str | None = None,
                  steps: Iterable[int] | None = None, extra: dict | None = None) -> list[tuple[str, Path | None]]:
    """Write the requested files (an existing one kept as ``.bak``; ``extra`` joins the JSON's keys); returns
    (file, its backup or None)."""
    from .compare.msprobe_table import msprobe_table, write_csv, write_xlsx
    from .fsutil import atomic_write_json, atomic_write_text
    kept = []
    if csv_out:
        buf = io.StringIO()
        att.ops.to_csv(buf, index=True, index_label="node")
        kept.append((csv_out, atomic_write_text(csv_out, buf.getvalue(), keep_existing=True)))
    if json_out:
        kept.append((json_out, atomic_write_json(json_out, {**att.to_dict(), **(extra or {})}, keep_existing=True)))
    if xlsx_out or msprobe_csv:
        table = msprobe_table(run.target_dump, run.golden_dump, sorted(set(steps)) if steps else None)
        if msprobe_csv:
            kept.append((msprobe_csv, write_csv(table, msprobe_csv)))
        if xlsx_out:
            kept.append((xlsx_out, write_xlsx(table, xlsx_out)))
    return kept
