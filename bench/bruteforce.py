"""Edits advisor recommends vs the brute-force minimum, on every planted example.

For each example: capture with the default lists, run ``recommend`` once (no re-runs), re-capture with its
mixlist to check it really meets tolerance; then enumerate black-list subsets of the op types present
(float, not already black; at most 8 types), re-capturing each: the fewest-edit passing set and the passing set
that keeps the largest low-precision time share (advisor's objective).  Prints edits and shares for all three.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.emulator import capture  # noqa: E402
from advisor.mixlist import Mixlist  # noqa: E402
from advisor.recommend import recommend  # noqa: E402
from advisor.tune import Stages  # noqa: E402
from bench.cases.search import candidate_types, search_black_subsets  # noqa: E402

PLANTED = ["mlp_exp", "transformer_hazard", "two_hazards", "layernorm_bias"]


def judge(stages: Stages, run_dir: Path) -> tuple[bool, float | None]:
    run = stages.load(run_dir)
    ok = bool(stages.verdict(stages.final_metrics(run))["ok"])
    return ok, stages.low_precision_time_share(run)


def bench_one(name: str, work: Path, stages: Stages) -> dict:
    wl = str(ROOT / f"examples/{name}.py") + ":workload"
    t0 = time.perf_counter()
    base = capture(wl, work / name / "base", dump="stats")
    rec = recommend(base)
    adv_types = sorted(t for lst, act, t in rec.modify_mixlist.entries()) if rec.modify_mixlist else []
    adv_dir = capture(wl, work / name / "advisor", mixlist=rec.modify_mixlist, dump="stats", local=False)
    adv_ok, adv_share = judge(stages, adv_dir)
    t_adv = time.perf_counter() - t0
    types = candidate_types(base, limit=8)      # the 8 most expensive types when more are present
    # every black-list subset, smallest first; supersets of a passing set are skipped (they black-list
    # more, so they can neither need fewer edits nor keep more compute in low precision)
    passing: list[dict] = []
    runs = 0

    def judge_set(s: frozenset) -> bool:
        nonlocal runs
        if not s:
            return judge(stages, base)[0]
        runs += 1
        combo = [t for t in types if t in s]
        d = capture(wl, work / name / f"bf_{runs}", mixlist=Mixlist(black_add=tuple(combo)), dump="stats", local=False)
        ok, share = judge(stages, d)
        if ok:
            passing.append({"edits": combo, "share": share or 0.0})
        return ok

    search_black_subsets(types, judge_set)
    fewest = min(passing, key=lambda p: (len(p["edits"]), -p["share"])) if passing else None
    best = max(passing, key=lambda p: (p["share"], -len(p["edits"]))) if passing else None
    return {"example": name, "advisor_edits": adv_types, "advisor_ok": adv_ok, "advisor_share": adv_share,
            "advisor_s": t_adv, "min_edits": fewest["edits"] if fewest else None,
            "min_share": fewest["share"] if fewest else None, "best_edits": best["edits"] if best else None,
            "best_share": best["share"] if best else None, "bruteforce_runs": runs, "types": types}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--examples", nargs="*", default=PLANTED)
    a = ap.parse_args(argv)
    stages = Stages()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.examples:
            rows.append(bench_one(name, Path(tmp), stages))
    print(f"{'example':20} {'advisor edits':28} {'ok':3} {'share':>6} | {'brute-force fewest edits':28} {'share':>6} "
          f"| {'brute-force best share':28} {'share':>6} {'runs':>5}")
    for r in rows:
        fmt = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
        print(f"{r['example']:20} {','.join(r['advisor_edits']) or '(none)':28} {'yes' if r['advisor_ok'] else 'NO':3} "
              f"{fmt(r['advisor_share']):>6} | {','.join(r['min_edits'] or ['none found']):28} "
              f"{fmt(r['min_share']):>6} | {','.join(r['best_edits'] or ['none found']):28} "
              f"{fmt(r['best_share']):>6} {r['bruteforce_runs']:>5}")
    return rows


if __name__ == "__main__":
    main()
