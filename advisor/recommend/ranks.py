"""recommend on a multi-rank run: the evidence of every rank (docs/large-jobs.md#recommend).

A run directory whose dumps (or profiles) hold several ranks is recommended for as one job:

1. every rank's measured run is judged by an independent task (``check_rank`` through ``advisor.tasks.run_tasks``:
   this process, a local pool or Ray; each task reads only its rank's files and returns a few numbers): the
   measured verdict fails if any rank fails;
2. the detailed recommendation (``core.recommend``: measured, replayed, estimated) is made on the lowest failing
   rank (all pass: the lowest rank);
3. the list is replayed on every rank's dumps, with and without each of its edits (again one task per rank).  A
   rank it still fails drives a further recommendation on that rank starting from the list (at most once per
   rank); the list must pass on every rank, or the status is ``no-solution``.  The ranks whose replay fails
   without an edit are the ranks that drove it: ``"ranks"`` of each edit in recommendation.json and a
   "driven by rank R (...)" sentence in its explanation.  Performance edits must pass on every rank as well, else
   they are dropped (said in the notes).

``recommend_run`` is the entry of ``advisor recommend``: a single-rank run, or a multi-rank profile without dumps
(no per-rank verdict to take), goes to ``core.recommend`` as before.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..compare.tolerance import Tolerance
from ..ingest.discover import Found, discover
from ..ingest.ranks import rank_groups, read_rank
from ..ingest.run import load_run
from ..mixlist import Mixlist
from ..tasks import run_tasks
from .core import recommend
from .edits import Edit
from .result import (EditReport, Minimality, MinimalityCheck, RankEvidence, RankMeasured, RankRow, Recommendation,
                     SetCheck)

ACCURACY = ("recommended", "no-change-needed")


@dataclass(frozen=True)
class RankCheck:
    """One rank's task (plain, picklable data): its files, how to judge, and the edit sets to replay."""

    path: str
    rank: int
    found: Found
    tolerance: Tolerance
    steps: tuple[int, ...] | None = None
    start: Mixlist | None = None            # where the edits apply (None: the run's own list)
    sets: tuple[frozenset, ...] = ()
    soc: str | None = None
    ops_info: str | None = None
    mode: str | None = None
    overrides: Any = None
    cann: str | None = None
    overflow_mode: str | None = None
    allow_hf32: str | None = None


@dataclass
class RankChecked:
    """What a rank's task found: its measured verdict, its culprit op types, each edit set's replayed verdict."""

    rank: int
    measured: RankMeasured | None = None
    culprits: list[str] = dataclasses.field(default_factory=list)
    checks: dict = dataclasses.field(default_factory=dict)      # frozenset[Edit] -> SetCheck

    def fails(self, edits: frozenset) -> bool:
        """The set was replayed on this rank and fails the tolerance there."""
        return self.checks[edits].ok is False


def check_rank(job: RankCheck) -> RankChecked:
    """A rank's measured verdict, culprit op types, and the replayed verdict of each edit set."""
    from ..analysis import analyze
    from .replay_search import ReplaySearch
    run = read_rank(job.path, job.rank, job.found, True, trace=False)
    a = analyze(run, tolerance=job.tolerance, soc=job.soc, ops_info=job.ops_info, mode=job.mode,
                overrides=job.overrides, cann=job.cann, overflow_mode=job.overflow_mode, allow_hf32=job.allow_hf32)
    out = RankChecked(job.rank)
    steps = None if job.steps is None else [s for s in job.steps if s in a.steps]
    if a.has_dumps:
        items, _, _ = a.judged(steps)
        v = a.tolerance.judge(items)
        worst = v.worst or {}
        out.measured = RankMeasured(bool(v.ok), list(v.reasons)[:3], worst.get("rel_l2"), worst.get("finite") is False)
        if not v.ok:
            try:
                types = a.attribution(steps).types
                out.culprits = [str(t) for t in types.index[:5]] if types is not None else []
            except ValueError:
                pass
    replay = a.recording is not None and a.recording.replayable_share() > 0
    search = ReplaySearch(a, a.lists_with(job.start if job.start is not None else a.run_mixlist), steps) \
        if replay and job.sets else None
    for edits in job.sets:
        if search is None:
            out.checks[edits] = SetCheck(None, "not replayed (no FP32 tensor dump)")
            continue
        t = search.replayed(edits)
        out.checks[edits] = SetCheck(bool(t.ok), t.how, **t.final(), reasons=list(t.reasons)[:3])
    return out


def recommend_run(path: str | Path, tolerance: Tolerance | None = None, *, rank: int | None = None,
                  workers: int | None = None, ray: str | None = None, step: int | None = None,
                  progress: Any = None, **kw: Any) -> Recommendation:
    """``advisor recommend --profile PATH``: ``core.recommend`` for a single-rank run (or ``rank``: that rank of
    a multi-rank run, read from its own files), else every rank's evidence (module docstring).  The folder is
    discovered once here and its files handed on.  ``kw``: the other ``core.recommend`` arguments."""
    if not Path(path).is_dir():
        return recommend(path, tolerance, rank=rank, step=step, progress=progress, **kw)
    found = discover(path)
    groups = rank_groups(found)
    if len(groups) < 2 or not any(f.dump_roots for f in groups.values()):   # one rank, or profiles only
        run = load_run(path, rank=rank, step=step, progress=progress, found=found)
        return recommend(run, tolerance, progress=progress, **kw)
    if rank is not None:
        from ..ingest.ranks import select
        return recommend(read_rank(path, rank, select(groups, [rank], path)[rank], True, step=step,
                                   progress=progress), tolerance, progress=progress, **kw)
    return _Ranks(str(path), groups, tolerance or Tolerance(), kw, workers, ray, step, progress).recommend()


@dataclass
class _Ranks:
    path: str
    groups: dict[int, Found]
    tolerance: Tolerance
    kw: dict
    workers: int | None
    ray: str | None
    step: int | None
    progress: Any

    def say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    def checks(self, sets: list[frozenset] = ()) -> list[RankChecked]:
        kw = self.kw
        st = tuple(sorted(set(kw["steps"]))) if kw.get("steps") is not None else None
        jobs = [RankCheck(self.path, r, f, self.tolerance, st, kw.get("base_mixlist"), tuple(sets), kw.get("soc"),
                          kw.get("ops_info"), kw.get("mode"), kw.get("overrides"), kw.get("cann"),
                          kw.get("overflow_mode"),
                          kw.get("allow_hf32"))
                for r, f in self.groups.items()]
        return run_tasks(check_rank, jobs, workers=self.workers, ray=self.ray)[1]

    def detailed(self, rank: int, start: Mixlist | None) -> Recommendation:
        self.say(f"recommending on rank {rank}")
        kw = {**self.kw, "base_mixlist": start} if start is not None else self.kw
        run = read_rank(self.path, rank, self.groups[rank], True, step=self.step, progress=self.progress)
        return recommend(run, self.tolerance, progress=self.progress, **kw)

    def recommend(self) -> Recommendation:
        self.say(f"judging the measured run of each of {len(self.groups)} ranks")
        measured = self.checks()
        failing = [c.rank for c in measured if c.measured is not None and not c.measured.ok]
        driving = [failing[0] if failing else min(self.groups)]
        rec = self.detailed(driving[0], None)
        edits, notes = list(rec.edits), []
        while True:
            fixes = frozenset(e.edit for e in edits)
            perf = frozenset(e.edit for e in rec.performance_edits)
            sets = [fixes, *(fixes - {e} for e in sorted(fixes, key=str))] + ([fixes | perf] if perf else [])
            self.say(f"replaying the list on every rank ({len(sets)} edit set{'s' if len(sets) != 1 else ''} each)")
            per = self.checks(sets)
            still = [c.rank for c in per if c.fails(fixes)]
            if not still or rec.status not in ACCURACY or len(driving) >= len(self.groups) or still[0] in driving:
                break
            more = self.detailed(still[0], rec.modify_mixlist)
            driving.append(still[0])
            if more.status != "recommended":
                notes.append(f"rank {still[0]} still fails with the list and no edits on top of it were found there "
                             f"({more.status})")
                rec = dataclasses.replace(rec, status="no-solution", ok=False)
                break
            edits = [*edits, *more.edits]
            rec = dataclasses.replace(rec, edits=edits, performance_edits=more.performance_edits,
                                      performance_mixlist=more.performance_mixlist, modify_mixlist=more.modify_mixlist,
                                      snippets=more.snippets)
        return self.finish(rec, measured, per, fixes, perf, driving, notes)

    def finish(self, rec: Recommendation, measured: list[RankChecked], per: list[RankChecked], fixes: frozenset,
               perf: frozenset, driving: list[int], notes: list[str]) -> Recommendation:
        """The recommendation with every rank's evidence: a new Recommendation (``rec`` is not changed)."""
        order = sorted(fixes, key=str)
        status, ok = rec.status, rec.ok
        still = [c.rank for c in per if c.fails(fixes)]
        if still and status in ACCURACY:
            status, ok = "no-solution", False
            notes.append(f"the list fails the tolerance on rank{'s' if len(still) > 1 else ''} {_names(still)} "
                         "(replayed)")
        perf_edits, perf_mixlist = rec.performance_edits, rec.performance_mixlist
        if perf and any(c.fails(fixes | perf) for c in per):
            notes.append(f"performance edits dropped: they fail the tolerance on rank "
                         f"{_names(c.rank for c in per if c.fails(fixes | perf))} (replayed)")
            perf_edits, perf_mixlist = [], None
        drivers = {e: [c.rank for c in per if c.fails(fixes - {e})] for e in order}
        by_rank = {c.rank: c for c in measured}
        per_of = {c.rank: c for c in per}
        edits = [_ranked(r, drivers.get(r.edit, []), by_rank, per_of, fixes) for r in rec.edits]
        notes.extend(f"{r.edit}: {r.driven}" for r in edits if r.driven)
        failing = [c.rank for c in measured if c.measured is not None and not c.measured.ok]
        predicted = rec.predicted
        if predicted.measured is not None:
            predicted = dataclasses.replace(predicted, measured=dataclasses.replace(
                predicted.measured, meets_tolerance=not failing, failing_ranks=failing), base_meets_tolerance=not failing)
        predicted = dataclasses.replace(predicted, recommended_meets_tolerance=status in ACCURACY)
        unchecked = [c.rank for c in per if fixes and c.checks[fixes].ok is None]
        minimality = rec.minimality
        if order:
            proved = all(drivers[e] for e in order) and not unchecked
            minimality = Minimality(proved, "1-minimal over the ranks by replay: without any one edit the list fails "
                                    "on at least one rank" if proved else "not proved 1-minimal over the ranks: "
                                    + "; ".join(f"{e} fails on no rank without it" for e in order if not drivers[e])
                                    + ("" if not unchecked else f"ranks {_names(unchecked)} not replayed"),
                                    [MinimalityCheck(str(e), ranks_failing_without_it=drivers[e]) for e in order],
                                    "replayed on every rank")
        if unchecked:
            notes.append(f"ranks {_names(unchecked)} have no FP32 tensor dump: the list was not replayed there")
        if failing:
            lines = ", ".join(f"rank {c.rank}: {'; '.join(c.measured.reasons[:1])}" for c in measured
                              if c.rank in failing)
            notes.append(f"measured: {len(failing)} of {len(self.groups)} ranks fail the tolerance ({lines})")
        ranks = RankEvidence(sorted(self.groups), failing, driving,
                             [RankRow(c.rank, c.measured, c.culprits, per_of[c.rank].checks[fixes] if fixes else None)
                              for c in measured],
                             {str(e): drivers[e] for e in order})
        return dataclasses.replace(rec, status=status, ok=ok, edits=edits, performance_edits=perf_edits,
                                   performance_mixlist=perf_mixlist, predicted=predicted, minimality=minimality,
                                   notes=[*rec.notes, *notes], ranks=ranks)


def _ranked(r: EditReport, ranks: list[int], measured: dict[int, RankChecked], per: dict[int, RankChecked],
            fixes: frozenset) -> EditReport:
    """The edit report with the ranks whose replay fails without it, and the sentence saying why."""
    if r.purpose != "fix":
        return r
    why = []
    for k in ranks:
        c = measured.get(k)
        nf = c.measured.final_nonfinite if c is not None and c.measured is not None else None
        if c is not None and r.edit.type in c.culprits:
            why.append(f"{'overflow' if nf else 'error'} in {r.edit.type}")
        else:
            without = per[k].checks[fixes - {r.edit}]
            why.append("non-finite outputs without it" if without.final_nonfinite else
                       f"final rel L2 {without.final_rel_l2} without it")
    driven = (f"driven by rank{'s' if len(ranks) > 1 else ''} {_names(ranks)} ({'; '.join(dict.fromkeys(why))})"
              if ranks else "needed on no rank by replay (the list passes every rank without it)")
    return dataclasses.replace(r, explanation=f"{r.explanation} {driven[0].upper()}{driven[1:]}.", ranks=ranks,
                               driven=driven)


def _names(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks)
