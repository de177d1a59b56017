"""Edits advisor recommends vs the brute-force minimum, on every planted example.

For each example: capture with the default lists, run ``recommend`` once (no re-runs), re-capture with its
mixlist to check it really meets tolerance; then enumerate black-list subsets of the op types present
(float, not already black; at most 8 types), re-capturing each: the fewest-edit passing set and the passing set
that keeps the largest low-precision time share (advisor's objective).  Prints edits and shares for all three.
"""
from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from advisor.emulator import capture
from advisor.ingest import read_kernels
from advisor.mixlist import Mixlist
from advisor.oplists import load_lists
from advisor.recommend import recommend
from advisor.tune import Stages

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ["mlp_exp", "transformer_hazard", "two_hazards", "layernorm_bias"]


def judge(stages: Stages, run_dir: Path) -> tuple[bool, float | None]:
    run = stages.load(run_dir)
    ok = bool(stages.judge(stages.final_metrics(run))["ok"])
    return ok, stages.low_precision_time_share(run)


def present_types(run_dir: Path, max_types: int = 8) -> list[str]:
    k = read_kernels(next(run_dir.glob("profile/**/kernel_details.csv")))
    k = k[k["precision"].isin(["fp16", "bf16", "fp32"])]
    lists = load_lists("ascend910b")
    # the most expensive types first when more than max_types are present
    t = k.groupby("type")["duration_us"].sum().sort_values(ascending=False)
    return [x for x in t.index if lists.list_of(x) != "black"][:max_types]


def bench_one(name: str, work: Path, stages: Stages) -> dict:
    wl = str(ROOT / f"examples/{name}.py") + ":workload"
    t0 = time.perf_counter()
    base = capture(wl, work / name / "base", dump="stats")
    rec = recommend(base)
    adv_types = sorted(t for lst, act, t in rec.mixlist.entries()) if rec.mixlist else []
    adv_dir = capture(wl, work / name / "advisor", mixlist=rec.mixlist, dump="stats", local=False)
    adv_ok, adv_share = judge(stages, adv_dir)
    t_adv = time.perf_counter() - t0
    types = present_types(base)
    # every black-list subset, smallest first; supersets of a passing set are skipped (they black-list
    # more, so they can neither need fewer edits nor keep more compute in low precision)
    passing: list[dict] = []
    runs = 0
    for k in range(1, len(types) + 1):
        for combo in itertools.combinations(types, k):
            if any(set(p["edits"]) <= set(combo) for p in passing):
                continue
            runs += 1
            d = capture(wl, work / name / f"bf_{runs}", mixlist=Mixlist(black_add=combo), dump="stats", local=False)
            ok, share = judge(stages, d)
            if ok:
                passing.append({"edits": list(combo), "share": share or 0.0})
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
