"""Cross-rank findings from per-rank summaries (``ingest.ranks.RankSummary``, read by attribute: this module
imports nothing of advisor's): what only some ranks show.

Every finding is a dict with ``kind``, ``ranks`` (the ranks it names), ``message`` (one sentence) and its numbers:

* ``precision-mix``: an op type whose kernels run in another set of precisions on some ranks than on the
  majority of the ranks running it (e.g. fp32 on rank 5, fp16 on the 63 others: a hazard only some ranks'
  data trigger, or a gray op inheriting fp32 there); with no majority, the split is named.
* ``low-share``: a rank whose low-precision share of float kernel time is more than ``SHARE_GAP`` away from
  the median of the ranks.
* ``op-types``: op types that run on only some ranks.
* ``slow-rank``: a rank whose compute time per step (median over its steps; kernels that are not
  communication or bookkeeping) exceeds the median of the ranks by more than ``slow`` (default 10 %).
  Synchronous training makes every rank's step *span* equal (the others wait in HCCL), so compute time is
  what tells the straggler.
* ``slow-step``: a step whose compute time (median over ranks) exceeds the median step's by more than
  ``slow``; ``slow-step-rank``: a step that is slow on a few ranks only (against that step on the others).
* ``step-kernels``: a step that runs another number of kernels on some ranks than on the majority;
  ``steps-missing``: steps some ranks have and others do not.
* ``overflow`` / ``saturation``: target dumps with inf/nan (or +-65504) statistics on some ranks only.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

import numpy as np


SLOW = 0.10        # slower than the median by more than this share
SHARE_GAP = 0.05   # low-precision share further than this from the median
FLOATS = ("fp16", "bf16", "fp32", "fp64")


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``"0-3, 5"``."""
    rs = sorted(set(ranks))
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if j == i else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)


def cross_rank(summaries: list, slow: float = SLOW) -> list[dict]:
    """All cross-rank findings (module docstring); none for fewer than two ranks."""
    if len(summaries) < 2:
        return []
    return (precision_mix(summaries) + low_share(summaries) + op_types(summaries) + slow_ranks(summaries, slow)
            + slow_steps(summaries, slow) + step_kernels(summaries) + dump_hazards(summaries))


def _others(n: int) -> str:
    return f"the {n} other rank{'s' if n != 1 else ''}"


def _ranks(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    return f"rank{'s' if len(rs) > 1 else ''} {rank_ranges(rs)}"


def majority(values: dict[int, object]) -> tuple[object, int] | None:
    """The value more than half of the ranks have, with its count (None when no value has a majority)."""
    if not values:
        return None
    v, n = Counter(values.values()).most_common(1)[0]
    return (v, n) if n * 2 > len(values) else None


def precision_mix(summaries: list) -> list[dict]:
    """Op types whose set of precisions differs on some ranks."""
    per_type: dict[str, dict[int, tuple]] = {}
    for s in summaries:
        for t, precs in s.types.items():
            fl = tuple(sorted(p for p in precs if p in FLOATS))
            if fl:
                per_type.setdefault(t, {})[s.rank] = fl
    by_rank = {s.rank: s for s in summaries}
    out = []
    for t, cls in sorted(per_type.items()):
        if len(set(cls.values())) < 2:
            continue
        maj = majority(cls)
        if maj is None:
            groups = {}
            for r, c in cls.items():
                groups.setdefault(c, []).append(r)
            split = "; ".join(f"{'+'.join(c)} on {_ranks(rs)}" for c, rs in sorted(groups.items()))
            out.append({"kind": "precision-mix", "type": t, "ranks": sorted(cls), "split": {"+".join(c): sorted(rs)
                        for c, rs in groups.items()}, "fp32_us": 0.0,
                        "message": f"op type {t} runs in different precisions across ranks: {split}"})
            continue
        common, n = maj
        for c in sorted({c for c in cls.values() if c != common}):
            rs = sorted(r for r, x in cls.items() if x == c)
            fp32 = sum(by_rank[r].types[t].get("fp32", [0.0])[0] for r in rs)
            out.append({"kind": "precision-mix", "type": t, "ranks": rs, "here": "+".join(c), "others": "+".join(common),
                        "other_ranks": n, "fp32_us": fp32,
                        "message": f"op type {t} runs {'+'.join(c)} on {_ranks(rs)} but {'+'.join(common)} on "
                                   f"{_others(n)} running it ({fp32:,.1f} us of fp32 kernel time there)"})
    return sorted(out, key=lambda f: -f["fp32_us"])


def low_share(summaries: list) -> list[dict]:
    sh = {s.rank: s.low_share for s in summaries if s.low_share is not None}
    if len(sh) < 2:
        return []
    med = float(np.median(list(sh.values())))
    return [{"kind": "low-share", "ranks": [r], "share": v, "median": med,
             "message": f"rank {r} runs {100 * v:.1f}% of its float kernel time in low precision, the median of the "
                        f"ranks {100 * med:.1f}%"} for r, v in sh.items() if abs(v - med) > SHARE_GAP]


def op_types(summaries: list) -> list[dict]:
    ranks = {s.rank for s in summaries if s.types}
    if len(ranks) < 2:
        return []
    where: dict[str, set[int]] = {}
    for s in summaries:
        for t in s.types:
            where.setdefault(t, set()).add(s.rank)
    out = []
    for t, rs in sorted(where.items()):
        if rs == ranks:
            continue
        few, verb = (rs, "runs only on") if len(rs) * 2 <= len(ranks) else (ranks - rs, "does not run on")
        out.append({"kind": "op-types", "type": t, "ranks": sorted(few), "runs_on": sorted(rs),
                    "message": f"op type {t} {verb} {_ranks(few)}"})
    return out


def slow_ranks(summaries: list, slow: float = SLOW) -> list[dict]:
    c = {s.rank: s.step_compute_us for s in summaries if s.step_compute_us}
    if len(c) < 2:
        return []
    med = float(np.median(list(c.values())))
    out = [{"kind": "slow-rank", "ranks": [r], "compute_us": v, "median_us": med, "ratio": v / med,
            "message": f"rank {r} is slow: {v / med:.2f}x the median compute time per step of the ranks "
                       f"({v:,.0f} us vs {med:,.0f} us)"} for r, v in c.items() if med > 0 and v > med * (1 + slow)]
    return sorted(out, key=lambda f: -f["ratio"])


def _step_table(summaries: list, key: str) -> dict[int, dict[int, float]]:
    t: dict[int, dict[int, float]] = {}
    for s in summaries:
        for st, v in s.steps.items():
            t.setdefault(st, {})[s.rank] = v[key]
    return t


def slow_steps(summaries: list, slow: float = SLOW) -> list[dict]:
    t = _step_table(summaries, "compute_us")
    if not t:
        return []
    per_step = {st: float(np.median(list(v.values()))) for st, v in t.items()}
    med = float(np.median(list(per_step.values())))
    out = []
    if len(per_step) > 1 and med > 0:
        out += [{"kind": "slow-step", "steps": [st], "ranks": sorted(t[st]), "compute_us": v, "median_us": med,
                 "message": f"step {st} is slow on every rank: {v / med:.2f}x the median step's compute time "
                            f"({v:,.0f} us vs {med:,.0f} us, median over ranks)"}
                for st, v in sorted(per_step.items()) if v > med * (1 + slow)]
    slow_rank = {r for f in slow_ranks(summaries, slow) for r in f["ranks"]}
    for st, v in sorted(t.items()):
        m = per_step[st]
        rs = [r for r, x in v.items() if m > 0 and x > m * (1 + slow) and r not in slow_rank]
        if rs and len(rs) * 2 < len(v):
            worst = max(rs, key=lambda r: v[r])
            out.append({"kind": "slow-step-rank", "steps": [st], "ranks": rs, "compute_us": v[worst], "median_us": m,
                        "message": f"step {st} is slow on {_ranks(rs)} only: up to {v[worst] / m:.2f}x that step's "
                                   f"median compute time on the ranks ({v[worst]:,.0f} us vs {m:,.0f} us)"})
    return out


def step_kernels(summaries: list) -> list[dict]:
    t = _step_table(summaries, "kernels")
    ranks = {s.rank for s in summaries if s.steps}
    out = []
    missing: dict[tuple, list[int]] = {}
    for st, v in sorted(t.items()):
        lack = tuple(sorted(ranks - set(v)))
        if lack:
            missing.setdefault(lack, []).append(st)
        maj = majority(v)
        if maj is None or len(set(v.values())) < 2:
            continue
        n, _ = maj
        for r, x in sorted(v.items()):
            if x != n:
                out.append({"kind": "step-kernels", "steps": [st], "ranks": [r], "kernels": int(x), "others": int(n),
                            "message": f"step {st} runs {int(x):,} kernels on rank {r} but {int(n):,} on most ranks"})
    for lack, steps in missing.items():
        out.append({"kind": "steps-missing", "steps": steps, "ranks": list(lack),
                    "message": f"{_ranks(lack)} lack{'' if len(lack) > 1 else 's'} step{'s' if len(steps) > 1 else ''} "
                               f"{rank_ranges(steps)} "
                               "that other ranks have"})
    return out


def dump_hazards(summaries: list) -> list[dict]:
    out = []
    with_dumps = [s for s in summaries if s.dumps.get("target")]
    for kind, what in (("overflow", "inf/nan"), ("saturation", "+-65504 (fp16 saturation)")):
        hit = {s.rank: getattr(s, kind) for s in with_dumps if getattr(s, kind).get("count")}
        if not hit or len(hit) == len(with_dumps):
            continue
        first = next(iter(hit.values()))["first"]
        ex = f"; first: step {first[0]['step']} {first[0]['entry']} {first[0]['tensor']}" if first else ""
        out.append({"kind": kind, "ranks": sorted(hit), "tensors": {r: h["count"] for r, h in hit.items()},
                    "message": f"target dumps of {_ranks(hit)} have {what} values ({sum(h['count'] for h in hit.values())}"
                               f" tensors{ex}), {_others(len(with_dumps) - len(hit))} none"})
    return out
