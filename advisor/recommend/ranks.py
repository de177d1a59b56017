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
from ..ingest.ranks import load_rank, rank_groups, read_rank
from ..mixlist import Mixlist
from ..tasks import run_tasks
from .core import Recommendation, recommend
from .edits import Edit
from .explain import EditReport

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
    sets: tuple[tuple[Edit, ...], ...] = ()
    soc: str | None = None
    ops_info: str | None = None
    mode: str | None = None
    overrides: Any = None
    cann: str | None = None
    overflow_mode: str | None = None
    allow_hf32: str | None = None


def check_rank(job: RankCheck) -> dict:
    """A rank's measured verdict, culprit op types, and the replayed verdict of each edit set (small dict)."""
    from ..analysis import analyze
    from .replay_search import ReplaySearch
    run = read_rank(job.path, job.rank, job.found, True, trace=False)
    a = analyze(run, tolerance=job.tolerance, soc=job.soc, ops_info=job.ops_info, mode=job.mode,
                overrides=job.overrides, cann=job.cann, overflow_mode=job.overflow_mode, allow_hf32=job.allow_hf32)
    out: dict = {"rank": job.rank, "measured": None, "culprits": [], "checks": []}
    steps = None if job.steps is None else [s for s in job.steps if s in a.steps]
    if a.has_dumps:
        items, _, _ = a.judged(steps)
        v = a.tolerance.judge(items)
        worst = v.worst or {}
        out["measured"] = {"ok": bool(v.ok), "reasons": list(v.reasons)[:3], "final_rel_l2": worst.get("rel_l2"),
                           "final_nonfinite": worst.get("finite") is False}
        if not v.ok:
            try:
                types = a.attribution(steps).types
                out["culprits"] = [str(t) for t in types.index[:5]] if types is not None else []
            except ValueError:
                pass
    replay = a.recording is not None and a.recording.replayable_share() > 0
    search = ReplaySearch(a, a.lists_with(job.start if job.start is not None else a.run_mixlist), steps) \
        if replay and job.sets else None
    for edits in job.sets:
        if search is None:
            out["checks"].append({"ok": None, "how": "not replayed (no FP32 tensor dump)"})
            continue
        t = search.judged(frozenset(edits))
        out["checks"].append({"ok": bool(t.ok), "how": t.how, **t.final(), "reasons": list(t.reasons)[:3]})
    return out


def recommend_run(path: str | Path, tolerance: Tolerance | None = None, *, rank: int | None = None,
                  workers: int | None = None, ray: str | None = None, step: int | None = None,
                  progress: Any = None, **kw: Any) -> Recommendation:
    """``advisor recommend --profile PATH``: ``core.recommend`` for a single-rank run (or ``rank``: that rank of
    a multi-rank run, read from its own files), else every rank's evidence (module docstring).  ``kw``: the
    other ``core.recommend`` arguments."""
    groups = rank_groups(discover(path)) if Path(path).is_dir() else {}
    if len(groups) < 2 or not any(f.dump_roots for f in groups.values()):   # one rank, or profiles only
        return recommend(path, tolerance, rank=rank, step=step, progress=progress, **kw)
    if rank is not None:
        run = load_rank(path, rank, step=step, progress=progress)
        return recommend(run, tolerance, progress=progress, **kw)
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

    def checks(self, sets: list[frozenset] = ()) -> list[dict]:
        kw = self.kw
        st = tuple(sorted(set(kw["steps"]))) if kw.get("steps") is not None else None
        jobs = [RankCheck(self.path, r, f, self.tolerance, st, kw.get("base_mixlist"),
                          tuple(tuple(sorted(s, key=lambda e: (e.kind, e.type))) for s in sets), kw.get("soc"),
                          kw.get("ops_info"), kw.get("mode"), kw.get("overrides"), kw.get("cann"),
                          kw.get("overflow_mode"), kw.get("allow_hf32"))
                for r, f in self.groups.items()]
        return run_tasks(check_rank, jobs, workers=self.workers, ray=self.ray)[1]

    def detailed(self, rank: int, start: Mixlist | None) -> Recommendation:
        self.say(f"recommending on rank {rank}")
        kw = {**self.kw, "base_mixlist": start} if start is not None else self.kw
        return recommend(load_rank(self.path, rank, step=self.step), self.tolerance, progress=self.progress, **kw)

    def recommend(self) -> Recommendation:
        self.say(f"judging the measured run of each of {len(self.groups)} ranks")
        measured = self.checks()
        failing = [c["rank"] for c in measured if (c["measured"] or {}).get("ok") is False]
        rec = self.detailed(failing[0] if failing else min(self.groups), None)
        driving = [failing[0] if failing else min(self.groups)]
        fixes = frozenset(e.edit for e in rec.edits)
        notes: list[str] = []
        while True:
            perf = frozenset(e.edit for e in rec.perf_edits)
            sets = [fixes, *(fixes - {e} for e in sorted(fixes, key=str))] + ([fixes | perf] if perf else [])
            self.say(f"replaying the list on every rank ({len(sets)} edit set{'s' if len(sets) != 1 else ''} each)")
            per = self.checks(sets)
            still = [c["rank"] for c in per if c["checks"][0]["ok"] is False]
            if not still or rec.status not in ACCURACY or len(driving) >= len(self.groups) or still[0] in driving:
                break
            more = self.detailed(still[0], rec.mixlist)
            driving.append(still[0])
            if more.status != "recommended":
                rec.status, rec.ok = "no-solution", False
                notes.append(f"rank {still[0]} still fails with the list and no edits on top of it were found there "
                             f"({more.status})")
                break
            rec.edits = [*rec.edits, *more.edits]
            rec.perf_edits, rec.perf_mixlist = more.perf_edits, more.perf_mixlist
            rec.mixlist, rec.snippets = more.mixlist, more.snippets
            fixes = fixes | {e.edit for e in more.edits}
        return self.finish(rec, measured, per, sets, fixes, perf, driving, notes)

    def finish(self, rec: Recommendation, measured: list[dict], per: list[dict], sets: list, fixes: frozenset,
               perf: frozenset, driving: list[int], notes: list[str]) -> Recommendation:
        order = sorted(fixes, key=str)
        still = [c["rank"] for c in per if c["checks"][0]["ok"] is False]
        if still and rec.status in ACCURACY:
            rec.status, rec.ok = "no-solution", False
            notes.append(f"the list fails the tolerance on rank{'s' if len(still) > 1 else ''} {_names(still)} "
                         "(replayed)")
        if perf and any(c["checks"][-1]["ok"] is False for c in per):
            bad = [c["rank"] for c in per if c["checks"][-1]["ok"] is False]
            notes.append(f"performance edits dropped: they fail the tolerance on rank {_names(bad)} (replayed)")
            rec.perf_edits, rec.perf_mixlist = [], None
        drivers = {e: [c["rank"] for c in per if c["checks"][1 + i]["ok"] is False] for i, e in enumerate(order)}
        by_rank = {c["rank"]: c for c in measured}
        rec.edits = [_ranked(r, drivers.get(r.edit, []), by_rank, per, order) for r in rec.edits]
        notes.extend(f"{r.edit}: {r.driven}" for r in rec.edits if isinstance(r, RankedEditReport))
        failing = [c["rank"] for c in measured if (c["measured"] or {}).get("ok") is False]
        m = rec.predicted.get("measured")
        if m is not None:
            m["meets_tolerance"] = not failing
            m["failing_ranks"] = failing
            rec.predicted["base_meets_tolerance"] = not failing
        rec.predicted["recommended_meets_tolerance"] = rec.status in ACCURACY
        unchecked = [c["rank"] for c in per if fixes and c["checks"][0]["ok"] is None]
        if order:
            proved = all(drivers[e] for e in order) and not unchecked
            rec.minimality = {**rec.minimality, "proved": proved, "how": "replayed on every rank",
                              "statement": ("1-minimal over the ranks by replay: without any one edit the list fails "
                                            "on at least one rank" if proved else
                                            "not proved 1-minimal over the ranks: " + "; ".join(
                                                f"{e} fails on no rank without it" for e in order if not drivers[e])
                                            + ("" if not unchecked else f"ranks {_names(unchecked)} not replayed")),
                              "checks": [{"edit": str(e), "ranks_failing_without_it": drivers[e]} for e in order]}
        if unchecked:
            notes.append(f"ranks {_names(unchecked)} have no FP32 tensor dump: the list was not replayed there")
        rec.notes = [*rec.notes, *notes]
        rec.ranks = {"ranks": sorted(self.groups), "failing": failing, "recommended_on": driving,
                     "per_rank": [{"rank": c["rank"], "measured": c["measured"], "culprits": c["culprits"],
                                   "with_list": p["checks"][0] if fixes else None}
                                  for c, p in zip(measured, per)],
                     "edits": {str(e): drivers[e] for e in order}}
        if failing:
            lines = ", ".join(f"rank {c['rank']}: {'; '.join(c['measured']['reasons'][:1])}" for c in measured
                              if c["rank"] in failing)
            rec.notes.append(f"measured: {len(failing)} of {len(self.groups)} ranks fail the tolerance ({lines})")
        return rec


@dataclass
class RankedEditReport(EditReport):
    """An edit of a multi-rank recommendation: the ranks whose replay fails without it."""

    ranks: list[int] = dataclasses.field(default_factory=list)
    driven: str = ""                  # "driven by rank 1 (overflow in Exp)"

    def to_dict(self) -> dict:
        return {**super().to_dict(), "ranks": self.ranks, "driven": self.driven}


def _ranked(r: EditReport, ranks: list[int], measured: dict[int, dict], per: list[dict], order: list) -> EditReport:
    if r.purpose != "fix":
        return r
    why = []
    for k in ranks:
        c = measured.get(k) or {}
        nf = (c.get("measured") or {}).get("final_nonfinite")
        if r.edit.type in c.get("culprits", []):
            why.append(f"{'overflow' if nf else 'error'} in {r.edit.type}")
        else:
            without = next(p for p in per if p["rank"] == k)["checks"][1 + order.index(r.edit)]
            why.append("non-finite outputs without it" if without.get("final_nonfinite") else
                       f"final rel L2 {without.get('final_rel_l2')} without it")
    driven = (f"driven by rank{'s' if len(ranks) > 1 else ''} {_names(ranks)} ({'; '.join(dict.fromkeys(why))})"
              if ranks else "needed on no rank by replay (the list passes every rank without it)")
    fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(EditReport)}
    return RankedEditReport(**{**fields, "explanation": f"{r.explanation} {driven[0].upper()}{driven[1:]}."},
                            ranks=ranks, driven=driven)


def _names(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks)
