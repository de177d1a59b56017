"""Every rank of a multi-rank job: each rank's own files, read and reduced to a compact summary by independent
tasks (``advisor.tasks``: this process, a local process pool or Ray), then compared across ranks.

A 64- to 1,024-rank job is one profile folder per rank (torch_npu ``*_ascend_pt`` with its
``profiler_info_<rank>.json``, msprof ``device_N``) and msprobe dumps ``step*/rank*/``.  ``rank_groups(found)``
splits what discovery found by rank (``discover.source_rank`` for profiles, the ``rank<R>`` folder for dumps);
the run-wide files (run.json, mixlist, GE graph dump, local_error.csv) go with every rank.  A run with one
profile rank and one dump rank is one rank, whatever the two are labelled (a bare kernel_details.csv beside a
``rank0`` dump).

``summarize(path, ranks=None, workers=..., ray=...) -> list[RankSummary]``: per rank, the precision mix, time per
op type and precision, casts, step times, the gray ops kept in fp32 by inheritance (the rank's own op graph
and the semantics plan), and saturation / overflow in its target dumps.  Only the summaries travel between
processes.  ``load_rank(path, rank)`` is that rank's ``ingest.Run`` (only its files are read) and
``rank_dumps(path)`` its target/golden dump files per step, for analyses that need a rank's full data.
Cross-rank findings: ``advisor.ingest.rankdiff``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import InputError
from ..oplists import DEFAULT_SOC, OpLists, load_lists, run_cann
from .common import is_bookkeeping
from .discover import Found, discover, source_rank
from .msprobe import dump_files
from .rankdiff import cross_rank
from .run import Run, load_run

SAMPLES = 5   # saturated / overflowing tensors named per rank (the counts are exact)


# ---------------------------------------------------------------------- files per rank
def rank_groups(found: Found) -> dict[int, Found]:
    """rank -> the part of ``found`` that is this rank's (module docstring); sorted by rank."""
    profiles: dict[int, list] = {}
    for src in found.profiles:
        profiles.setdefault(source_rank(src), []).append(src)
    dumps: dict[int, list[Path]] = {}
    for root in found.dump_roots:
        for r in sorted({r for (_, r) in dump_files(root)}):
            dumps.setdefault(r, []).append(root)
    known = (set(profiles) | set(dumps)) - {-1}
    if len(known) <= 1:  # one rank (an unknown label joins the known one): the whole run
        return {min(known, default=-1): found} if profiles or dumps or found.ge_dumps else {}
    out = {}
    for r in sorted(set(profiles) | set(dumps)):
        out[r] = dataclasses.replace(found, profiles=profiles.get(r, []), dump_roots=dumps.get(r, []))
    return out


def select(groups: dict[int, Found], ranks: Iterable[int] | None, path: Any) -> dict[int, Found]:
    """The groups of ``ranks`` (all when None); a rank that is not there is an InputError listing those found."""
    if ranks is None:
        return groups
    want = sorted(set(ranks))
    missing = [r for r in want if r not in groups]
    if missing:
        found = ", ".join(map(str, groups)) or "none"
        raise InputError(path, f"no rank {', '.join(map(str, missing))}; ranks found: {found}")
    return {r: groups[r] for r in want}


def load_rank(path: str | Path, rank: int, found: Found | None = None, step: int | None = None,
              progress: Any = None) -> Run:
    """The ``ingest.Run`` of one rank of a run directory, reading only that rank's files."""
    groups = rank_groups(found if found is not None else discover(path))
    return read_rank(path, rank, select(groups, [rank], path)[rank], len(groups) > 1, step=step, progress=progress)


def read_rank(path: str | Path, rank: int, files: Found, several: bool, step: int | None = None,
              trace: bool = True, progress: Any = None) -> Run:
    """The ``ingest.Run`` of a rank's ``files`` (``rank_groups``; ``several``: the run has other ranks, else
    the one group is read as a single-rank run; ``trace=False``: without its trace_view.json)."""
    if not trace:
        files = dataclasses.replace(files, profiles=[dataclasses.replace(s, trace_view=None) for s in files.profiles])
    return load_run(path, rank=rank if several else None, step=step, progress=progress, found=files)


def rank_dumps(path: str | Path) -> dict[int, dict[str, dict[int, Path]]]:
    """rank -> {"target": {step: dump.json}, "golden": {step: dump.json}} of a run directory, a dump root or a
    dump.json (files only, nothing parsed; load a rank with ``load_rank`` or ``msprobe.load_dumps``).  Target
    and golden are told apart as ``load_run`` does (a root whose path names fp32/golden/bench is the golden)."""
    from .run import is_golden_root
    p = Path(path)
    found = discover(p)
    out: dict[int, dict[str, dict[int, Path]]] = {}
    for root in found.dump_roots:
        side = "golden" if is_golden_root(p, root) else "target"
        for (s, r), f in sorted(dump_files(root).items()):
            out.setdefault(r, {"target": {}, "golden": {}})[side].setdefault(max(s, 0), f)
    return dict(sorted(out.items()))


def run_lists(run: Run, soc: str | None = None, ops_info: Any = None, cann: str | None = None) -> OpLists:
    """The lists a run's kernels are judged against: the chip's (``soc``/``ops_info``/``cann``, else run.json's)
    with the run's mixlist applied."""
    from ..mixlist import effective
    return effective(load_lists(soc or run.meta.get("soc") or DEFAULT_SOC, ops_info or run.meta.get("ops_info"),
                                run_cann(cann, run.meta)), run.mixlist)


# ---------------------------------------------------------------------- one rank's summary
@dataclass
class RankSummary:
    """What one rank's files say, compact enough to ship from a worker (plain data)."""

    rank: int
    files: list[str] = field(default_factory=list)
    kernels: int = 0
    kernel_time_us: float = 0.0
    precision: dict[str, list] = field(default_factory=dict)          # precision -> [time_us, kernels]
    types: dict[str, dict[str, list]] = field(default_factory=dict)   # type -> precision -> [time_us, kernels]
    steps: dict[int, dict] = field(default_factory=dict)              # step -> kernels, busy_us, compute_us, span_us
    casts: dict = field(default_factory=dict)
    graph: dict | None = None                                         # step, ops, plan mix of the rank's op graph
    fp32_by_inheritance: dict = field(default_factory=dict)           # time_us, ops, types {type: time_us}
    dumps: dict = field(default_factory=dict)                         # target / golden steps
    saturation: dict = field(default_factory=dict)                    # count, first SAMPLES tensors
    overflow: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def low_share(self) -> float | None:
        """Share of float kernel time in fp16/bf16."""
        fl = {p: v[0] for p, v in self.precision.items() if p in ("fp16", "bf16", "fp32", "fp64")}
        tot = sum(fl.values())
        return (fl.get("fp16", 0.0) + fl.get("bf16", 0.0)) / tot if tot > 0 else None

    @property
    def step_compute_us(self) -> float | None:
        """Median over the rank's steps of the compute time per step (kernels that are not communication,
        memory or AI_CPU bookkeeping: ``ingest.common.is_bookkeeping``)."""
        v = [s["compute_us"] for s in self.steps.values()]
        return float(np.median(v)) if v else None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["steps"] = [{"step": s, **v} for s, v in sorted(self.steps.items())]
        d["low_share"] = self.low_share
        d["step_compute_us"] = self.step_compute_us
        return d


def _step_times(k: pd.DataFrame, dur: np.ndarray) -> dict[int, dict]:
    """Per step: kernels, busy time (sum of durations), compute time (no bookkeeping kernels), span (first
    start to last end, exact ns starts; NaN without start times)."""
    tc, tu = pd.factorize(k["type"].astype(str))
    cc, cu = pd.factorize(k["core"].astype(str))
    book = np.array([is_bookkeeping(t) for t in tu] + [False])[tc] | np.array([is_bookkeeping("", c) for c in cu]
                                                                              + [False])[cc]
    start = k["start_ns"].to_numpy(dtype=np.int64) if "start_ns" in k.columns else np.full(len(k), -1, np.int64)
    df = pd.DataFrame({"step": k["step"].to_numpy(dtype=np.int64), "dur": dur, "comp": np.where(book, 0.0, dur),
                       "start": np.where(start >= 0, start, np.nan),
                       "end": np.where(start >= 0, start + dur * 1000.0, np.nan)})
    g = df.groupby("step", sort=True).agg(n=("dur", "size"), busy=("dur", "sum"), comp=("comp", "sum"),
                                          s0=("start", "min"), s1=("end", "max"))
    return {int(s): {"kernels": int(r.n), "busy_us": float(r.busy), "compute_us": float(r.comp),
                     "span_us": float((r.s1 - r.s0) / 1000.0)} for s, r in zip(g.index, g.itertuples())}


def _hits(rows: list[dict]) -> dict:
    return {"count": len(rows), "first": rows[:SAMPLES]}


def rank_summary(run: Run, lists: OpLists, mode: str, rank: int, gray: list[dict] | None = None) -> RankSummary:
    """The summary of one rank's Run (``gray``: ``findings.gray_fp32_ops`` when the caller already has it)."""
    from .. import semantics
    from .findings import casts, gray_fp32_ops, kernel_table, saturation_hits
    k = run.kernels
    s = RankSummary(rank=rank, files=list(run.sources.get("kernels", [])), kernels=int(len(k)))
    if len(k):
        dur = k["duration_us"].to_numpy(dtype=float)
        dur = np.where(np.isnan(dur), 0.0, dur)
        s.kernel_time_us = float(dur.sum())
        for t, p, tm, n in kernel_table(k).itertuples(index=False):
            s.types.setdefault(t, {})[p] = [float(tm), int(n)]
            acc = s.precision.setdefault(p, [0.0, 0])
            acc[0] += float(tm)
            acc[1] += int(n)
        s.precision = dict(sorted(s.precision.items()))
        s.steps = _step_times(k, dur)
        s.casts = casts(k)
    if run.graph is not None:
        g = run.graph
        if gray is None:
            try:
                gray = gray_fp32_ops(run, semantics.plan(g, lists, mode), lists)
            except ValueError as e:  # a cyclic graph
                raise InputError(g.graph.get("source"), str(e)) from None
        s.graph = {"step": run.step, "nodes": g.number_of_nodes(), "edges": g.number_of_edges()}
        s.fp32_by_inheritance = {"time_us": float(sum(r["time_us"] for r in gray)),
                                 "ops": int(sum(r["ops"] for r in gray)),
                                 "types": {r["type"]: float(r["time_us"]) for r in gray}}
    s.dumps = {"target": sorted((run.target_dump or {})), "golden": sorted((run.golden_dump or {}))}
    s.saturation = _hits(saturation_hits(run))
    s.overflow = _hits(saturation_hits(run, "overflow"))
    s.notes = list(run.sources.get("notes", []))
    if rank >= 0 and len(s.files) > 1:
        s.notes.append(f"{len(s.files)} profiles claim rank {rank} (msprof device ids repeat on every machine: give "
                       "each machine's PROF_* folders to advisor separately, or use torch_npu's profiler_info rank_id)")
    return s


def combined_table(summaries: list[RankSummary]) -> pd.DataFrame:
    """``findings.kernel_table`` of all the ranks' kernels together (summed from the summaries)."""
    rows = [(t, p, v[0], v[1]) for s in summaries for t, ps in s.types.items() for p, v in ps.items()]
    df = pd.DataFrame(rows, columns=["type", "precision", "time_us", "kernels"])
    return df.groupby(["type", "precision"], sort=True).agg(time_us=("time_us", "sum"),
                                                             kernels=("kernels", "sum")).reset_index()


def combine(report: dict, summaries: list[RankSummary], lists: OpLists, top: int = 15) -> dict:
    """``findings.summarize``'s profile figures (ranks, steps, kernels, time, shares, casts, how types behaved)
    over all ``summaries`` instead of the one rank it read; adds ``per_rank`` and ``cross_rank``."""
    from .findings import behaved_as, precision_share, type_share
    table = combined_table(summaries)
    total = sum(s.kernel_time_us for s in summaries)
    cast = {k: sum(s.casts.get(k, 0) for s in summaries) for k in ("inserted", "inserted_time_us", "cast",
                                                                     "cast_time_us")}
    cast["share"] = cast["cast_time_us"] / total if total > 0 else 0.0
    report.update({"ranks": [s.rank for s in summaries], "steps": sorted({st for s in summaries for st in s.steps}),
                   "kernels": sum(s.kernels for s in summaries), "kernel_time_us": total,
                   "precision_share": precision_share(table), "type_share": type_share(table, top), "casts": cast,
                   "behaved_as": behaved_as(table, lists), "per_rank": [s.to_dict() for s in summaries],
                   "cross_rank": cross_rank(summaries)})
    return report


@dataclass(frozen=True)
class RankJob:
    """One rank's task: its files and how to judge them (plain, picklable data)."""

    path: str
    rank: int
    found: Found
    several: bool              # the run has several ranks (else the one group is read as a single-rank run)
    soc: str | None = None     # lists: these chip tables (else run.json's) with the run's mixlist (``run_lists``)
    ops_info: Any = None       # one ops-info file or several
    mode: str | None = None    # else run.json's (``findings.run_mode``)
    step: int | None = None
    cann: str | None = None    # the default table's version (else run.json's, else 8.1.RC1: ``oplists.run_cann``)


def summarize_rank(job: RankJob) -> RankSummary:
    """A rank's summary from its own files (run in a worker; only the summary travels back)."""
    from .findings import run_mode
    run = read_rank(job.path, job.rank, job.found, job.several, step=job.step, trace=False)
    return rank_summary(run, run_lists(run, job.soc, job.ops_info, job.cann), run_mode(run, job.mode), job.rank)


def rank_jobs(path: str | Path, ranks: Iterable[int] | None = None, *, found: Found | None = None,
              **how: Any) -> list[RankJob]:
    """One job per rank (``ranks``: a subset; a rank that is not there is an InputError); ``how``: the
    ``RankJob`` fields soc, ops_info, mode, step, cann."""
    groups = rank_groups(found if found is not None else discover(path))
    return [RankJob(str(path), r, f, len(groups) > 1, **how) for r, f in select(groups, ranks, path).items()]


def summarize(path: str | Path, ranks: Iterable[int] | None = None, workers: int | None = None,
              ray: str | None = None, **how: Any) -> list[RankSummary]:
    """Every rank's (or ``ranks``') summary, computed by independent tasks (``advisor.tasks.run_tasks``:
    ``workers`` local processes, default the cores; or Ray at ``ray``), in rank order.  ``how``: soc,
    ops_info, mode, step (``RankJob``)."""
    from ..tasks import run_tasks
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    return run_tasks(summarize_rank, rank_jobs(p, ranks, **how), workers=workers, ray=ray)[1]


def inspect(path: str | Path, ranks: Iterable[int] | None = None, *, workers: int | None = None,
            ray: str | None = None, progress: Any = None, **how: Any) -> tuple[Run, dict]:
    """``advisor inspect``'s analysis: (the Run of the lowest chosen rank, the report).  That rank is read in
    full here (op graph, trace, dumps: ``findings.summarize``) while independent tasks summarise the other
    ranks; the report's profile figures are then those of all chosen ranks (``combine``).  ``how``: soc,
    ops_info, mode, step."""
    from ..tasks import default_workers, run_tasks
    from . import findings
    p = Path(path)
    found = discover(p)
    if found.empty:
        raise InputError(p, "found no profile (kernel_details.csv, op_summary_*.csv), GE graph dump or msprobe dump here")
    groups = rank_groups(found)
    chosen = select(groups, ranks, p)
    main = next(iter(chosen))
    several = len(groups) > 1
    jobs = [RankJob(str(p), r, f, several, **how) for r, f in chosen.items() if r != main]
    say = progress or (lambda msg: None)

    def detail():
        run = read_rank(p, main, chosen[main], several, step=how.get("step"), progress=progress)
        lists = run_lists(run, how.get("soc"), how.get("ops_info"), how.get("cann"))
        mode = findings.run_mode(run, how.get("mode"))
        say("semantics and profile-only findings")
        report = findings.summarize(run, lists, mode)
        return run, lists, report, rank_summary(run, lists, mode, main, report.get("gray_fp32_by_inheritance"))

    if jobs:
        say(f"summarising {len(jobs)} other rank{'s' if len(jobs) > 1 else ''} "
            + (f"on Ray ({ray})" if ray else f"with {min(workers or default_workers(), len(jobs))} worker(s)"))
    (run, lists, report, mine), others = run_tasks(summarize_rank, jobs, workers=workers, ray=ray, alongside=detail)
    summaries = sorted([mine, *others], key=lambda x: x.rank)
    if several:
        say("comparing the ranks")
        return run, combine(report, summaries, lists)
    report.update(per_rank=[mine.to_dict()], cross_rank=[])
    return run, report


def parse_ranks(specs: Iterable[str] | None) -> list[int] | None:
    """``--rank`` values (repeatable, each ``3``, ``0,4,8`` or ``0-63``) -> sorted ranks, None when not given."""
    if not specs:
        return None
    out: set[int] = set()
    for spec in specs:
        for part in str(spec).split(","):
            a, sep, b = part.strip().partition("-")
            try:
                lo = int(a)
                hi = int(b) if sep else lo
            except ValueError:
                raise InputError("--rank", f"{spec!r} is not a rank, a list (0,4,8) or a range (0-63)") from None
            if lo < 0 or hi < lo or hi - lo > 1 << 20:
                raise InputError("--rank", f"{spec!r} is not a rank range from low to high")
            out.update(range(lo, hi + 1))
    return sorted(out)
