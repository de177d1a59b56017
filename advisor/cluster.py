"""``advisor compare`` on every rank of a multi-rank job: one compare task per rank, then what differs.

Each rank's target and golden msprobe dumps (``step*/rank<R>/``) are compared by an independent task
(``advisor.tasks``: a local process pool or Ray) exactly as ``advisor compare`` compares one rank: with the
run's op graph (a run directory: ``analysis.analyze`` of that rank's files, its plan, ``Analysis.attribution``)
or from the dumps alone (``compare.attribution.attribute``).  Only a compact ``RankComparison`` travels back.
``cross_compare`` names the ranks that differ: ranks failing the tolerance while others pass, ranks whose
target dumps overflow (inf/nan) alone, and op types whose error on some ranks is far above the other ranks'
(``ERROR_RATIO`` times their median and over the tolerance, or non-finite where the others are finite).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .compare.tolerance import Tolerance
from .errors import InputError
from .ingest.discover import Found, discover
from .ingest.rankdiff import majority, rank_ranges
from .ingest.ranks import rank_dumps, rank_groups, read_rank, select

TOP = 10            # worst ops kept per rank
ERROR_RATIO = 10.0  # an op type's error this many times the median of the ranks' is a finding


@dataclass
class RankComparison:
    """One rank's comparison, compact (plain data)."""

    rank: int
    steps: list[int]
    ok: bool
    reasons: list[str]
    worst: dict                                  # the worst step's final figures (cosine, rel_l2, finite)
    first_exceeding: str | None = None
    culprits: list[str] = field(default_factory=list)
    types: dict[str, dict] = field(default_factory=dict)   # type -> max_rel_l2, nonfinite ops, worst_op
    worst_ops: list[dict] = field(default_factory=list)
    overflow: dict = field(default_factory=dict)           # target tensors with inf/nan statistics
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def rank_comparison(att: Any, run: Any, rank: int) -> RankComparison:
    """The summary of one rank's ``Attribution`` (``run``: its ingest.Run, for the overflow statistics)."""
    from .ingest.findings import saturation_hits
    ops = att.ops
    w = att.verdict.worst or {}
    out = RankComparison(rank=rank, steps=sorted({int(f["step"]) for f in att.final}), ok=bool(att.verdict.ok),
                         reasons=list(att.verdict.reasons[:5]),
                         worst={"step": w.get("step"), "cosine": _f(w.get("cosine")), "rel_l2": _f(w.get("rel_l2")),
                                "finite": bool(w.get("finite", True))},
                         first_exceeding=att.first_exceeding, culprits=[str(t) for t in list(att.types.index)[:5]],
                         notes=list(att.notes))
    if ops is not None and len(ops):
        err = ops["out_rel_l2"].astype(float).fillna(-1.0)
        nonfin = ops["out_nonfinite"].fillna(0).astype(float) > 0
        err = err.where(~nonfin, math.inf)
        d = ops.assign(err=err, nonfin=nonfin, op=ops.index.astype(str)).reset_index(drop=True)
        for t, g in d.groupby("type", sort=True):
            i = int(np.argmax(g["err"].to_numpy()))
            out.types[str(t)] = {"max_rel_l2": float(g["err"].iloc[i]), "nonfinite_ops": int(g["nonfin"].sum()),
                                 "worst_op": g["op"].iloc[i]}
        top = d.sort_values(["err", "op"], ascending=[False, True], kind="stable").head(TOP)
        out.worst_ops = [{"node": r.op, "type": str(r.type), "precision": str(r.precision), "step": int(r.step),
                          "rel_l2": float(r.err), "nonfinite": bool(r.nonfin)} for r in top.itertuples()]
    hits = saturation_hits(run, "overflow")
    out.overflow = {"count": len(hits), "first": hits[:5]}
    return out


@dataclass(frozen=True)
class CompareJob:
    """One rank's compare task (plain, picklable data): a run directory's rank files, or dump files."""

    path: str
    rank: int
    tolerance: Tolerance
    steps: tuple[int, ...] | None = None
    found: Found | None = None              # run directory: this rank's files
    several: bool = True
    target: dict | None = None              # dumps alone: step -> dump.json
    golden: dict | None = None
    soc: str | None = None
    ops_info: Any = None
    mode: str | None = None
    cann: str | None = None


def rank_run(job: CompareJob) -> tuple[Any, Any]:
    """(the rank's ingest.Run, what to attribute it with: its Analysis, or None for dumps alone)."""
    from .analysis import analyze
    from .ingest.msprobe import load_dumps
    from .ingest.run import run_of_dumps
    if job.found is None:
        t = {s: d for (s, _), d in load_dumps({(s, job.rank): Path(f) for s, f in job.target.items()}).items()}
        g = {s: d for (s, _), d in load_dumps({(s, job.rank): Path(f) for s, f in job.golden.items()}).items()}
        return run_of_dumps(job.path, t, g, job.rank), None
    run = read_rank(job.path, job.rank, job.found, job.several, trace=False)
    if run.target_dump is None or run.golden_dump is None:
        raise InputError(job.path, f"rank {job.rank} has no target/golden precision dumps (dump/mixed, dump/fp32)")
    if run.graph is None:
        return run, None
    return run, analyze(run, tolerance=job.tolerance, soc=job.soc, ops_info=job.ops_info, mode=job.mode,
                        cann=job.cann)


def attribute_rank(job: CompareJob, run: Any, analysis: Any):
    """The rank's Attribution, as ``advisor compare`` computes it."""
    from .compare.attribution import attribute
    steps = list(job.steps) if job.steps else None
    try:
        return analysis.attribution(steps) if analysis is not None else attribute(run, job.tolerance, steps)
    except ValueError as e:
        raise InputError(job.path, str(e)) from None


def compare_rank(job: CompareJob) -> RankComparison:
    """A rank's comparison from its own files (run in a worker; only the summary travels back)."""
    run, a = rank_run(job)
    return rank_comparison(attribute_rank(job, run, a), run, job.rank)


def compare_jobs(run_dir: str | Path | None = None, target: str | Path | None = None, golden: str | Path | None = None,
                 ranks: Iterable[int] | None = None, *, tolerance: Tolerance | None = None,
                 steps: Iterable[int] | None = None, **how: Any) -> list[CompareJob]:
    """One job per rank (``ranks``: a subset) of a run directory, or of target and golden dump roots; ranks
    are those with both a target and a golden dump.  ``how``: soc, ops_info, mode, cann."""
    tol = tolerance or Tolerance()
    st = tuple(sorted(set(steps))) if steps else None
    if run_dir is not None:
        groups = {r: f for r, f in rank_groups(discover(run_dir)).items() if f.dump_roots}
        if not groups:
            raise InputError(run_dir, "the run has no target/golden precision dumps (dump/mixed, dump/fp32)")
        return [CompareJob(str(run_dir), r, tol, st, f, len(groups) > 1, **how)
                for r, f in select(groups, ranks, run_dir).items()]
    t, g = _dump_ranks(target), _dump_ranks(golden)
    both = {r: (t[r], g[r]) for r in sorted(set(t) & set(g))}
    if not both and len(t) == 1 and len(g) == 1:  # one dump each, labelled differently (rank0 vs a bare dump.json)
        both = {max(*t, *g): (next(iter(t.values())), next(iter(g.values())))}
    if not both:
        raise InputError(target, f"target ranks {rank_ranges(t)} and golden ranks {rank_ranges(g)} do not overlap")
    return [CompareJob(str(target), r, tol, st, target={s: str(f) for s, f in tf.items()},
                       golden={s: str(f) for s, f in gf.items()}) for r, (tf, gf) in select(both, ranks, target).items()]


def _dump_ranks(path: Any) -> dict[int, dict[int, Path]]:
    """rank -> step -> dump.json of one side (a dump.json, its rank folder or a dump root)."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or folder")
    return {r: {**d["target"], **d["golden"]} for r, d in rank_dumps(p).items()}


def cross_compare(per: list[RankComparison], tolerance: Tolerance | None = None) -> list[dict]:
    """What differs between the ranks' comparisons (module docstring)."""
    if len(per) < 2:
        return []
    tol = tolerance or Tolerance()
    out = []
    bad = [c for c in per if not c.ok]
    if bad and len(bad) < len(per):
        ex = bad[0].reasons[0] if bad[0].reasons else ""
        out.append({"kind": "verdict", "ranks": [c.rank for c in bad],
                    "message": f"{_ranks([c.rank for c in bad])} {'fail' if len(bad) > 1 else 'fails'} the tolerance, "
                               f"the {len(per) - len(bad)} other rank(s) pass (rank {bad[0].rank}: {ex})"})
    over = [c for c in per if c.overflow.get("count")]
    if over and len(over) < len(per):
        first = over[0].overflow["first"][0]
        out.append({"kind": "overflow", "ranks": [c.rank for c in over], "tensors": {c.rank: c.overflow["count"]
                                                                                    for c in over},
                    "message": f"target dumps of {_ranks([c.rank for c in over])} have inf/nan values "
                               f"({sum(c.overflow['count'] for c in over)} tensors; first: step {first['step']} "
                               f"{first['entry']} {first['tensor']}), the {len(per) - len(over)} other rank(s) none"})
    return out + _op_errors(per, tol)


def _ranks(rs: list[int]) -> str:
    return f"rank{'s' if len(rs) > 1 else ''} {rank_ranges(rs)}"


def _op_errors(per: list[RankComparison], tol: Tolerance) -> list[dict]:
    out = []
    for t in sorted({t for c in per for t in c.types}):
        v = {c.rank: c.types[t] for c in per if t in c.types}
        if len(v) < 2:
            continue
        finite = {r: x["max_rel_l2"] for r, x in v.items() if math.isfinite(x["max_rel_l2"])}
        med = float(np.median(list(finite.values()))) if finite else math.inf
        maj = majority({r: math.isfinite(x["max_rel_l2"]) for r, x in v.items()})
        odd = sorted(r for r, x in v.items()
                     if (not math.isfinite(x["max_rel_l2"]) and maj is not None and maj[0])
                     or (math.isfinite(x["max_rel_l2"]) and x["max_rel_l2"] > max(ERROR_RATIO * med, tol.max_rel_l2)))
        if not odd or len(odd) * 2 >= len(v):
            continue
        worst = max(odd, key=lambda r: v[r]["max_rel_l2"])
        e = v[worst]["max_rel_l2"]
        out.append({"kind": "op-error", "type": t, "ranks": odd, "rel_l2": e, "median": med, "op": v[worst]["worst_op"],
                    "message": f"op type {t} errs on {_ranks(odd)} only: relative L2 up to "
                               f"{'non-finite' if not math.isfinite(e) else format(e, '.3g')} ({v[worst]['worst_op']} on "
                               f"rank {worst}) vs a median of {med:.3g} over the {len(v)} ranks running it"})
    return sorted(out, key=lambda f: -f["rel_l2"] if math.isfinite(f["rel_l2"]) else -math.inf)


def other_ranks(jobs: list[CompareJob], main: RankComparison, workers: int | None = None,
                ray: str | None = None) -> dict:
    """With several jobs: the other ranks compared by independent tasks, and ``{"per_rank": [every rank's
    RankComparison dict], "cross_rank": [findings], "ok": every rank within tolerance}``; else ``{}``."""
    from .tasks import run_tasks
    if len(jobs) < 2:
        return {}
    per = sorted([main, *run_tasks(compare_rank, jobs[1:], workers=workers, ray=ray)[1]], key=lambda c: c.rank)
    return {"per_rank": [c.to_dict() for c in per], "cross_rank": cross_compare(per, jobs[0].tolerance),
            "ok": all(c.ok for c in per)}


def compare_ranks(run_dir: str | Path | None = None, target: str | Path | None = None, golden: str | Path | None = None,
                  ranks: Iterable[int] | None = None, workers: int | None = None, ray: str | None = None,
                  **kw: Any) -> list[RankComparison]:
    """Every rank's (or ``ranks``') comparison by independent tasks (``advisor.tasks.run_tasks``), in rank
    order.  ``kw``: tolerance, steps, soc, ops_info, mode, cann (``compare_jobs``)."""
    from .tasks import run_tasks
    return run_tasks(compare_rank, compare_jobs(run_dir, target, golden, ranks, **kw), workers=workers, ray=ray)[1]
