"""advisor on the generated case suite (bench/cases), checked against the brute-force oracle.

For every case of a set:

* **single-shot recommend**: capture the case with the default lists (tensor dumps, as ``advisor capture`` does
  for small models), ``recommend`` once, then a FRESH capture with its modify_mixlist, judged like
  ``advisor compare --run`` judges it (outputs, loss and gradients on every batch).  Recorded: status, edits,
  passes?, the low-precision share of the fresh capture (``costmodel.kernel_low_share``).
* **tune** (``--tune``): ``advisor tune`` with the emulator runner and the default budget; recorded: confirmed?,
  the runs until the first passing run (FP32 reference included), the confirmed list and its measured share.
* the oracle (``bench/cases/oracle_<set>.json``): the best passing black-list set (size <= 3) and its share; the
  share gap is oracle best - advisor (points of share); controls (and cases whose base passes) must get no
  black-list edit.

    python bench/suite_eval.py --set dev [--tune] [--cases NAME ...] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _oracle(set_name: str) -> dict:
    p = ROOT / "bench" / "cases" / f"oracle_{set_name}.json"
    if not p.is_file():
        return {}
    d = json.loads(p.read_text())
    return {c["case"]: c for c in d.get("cases", [])}


def _judge(run_dir: Path) -> tuple[bool, float | None]:
    from advisor.analysis import analyze
    a = analyze(run_dir)
    return bool(a.verdict().ok), a.measured_low_share


def _black(m) -> list[str]:
    return sorted(m.black_add) if m is not None else []


def eval_recommend(case, work: Path) -> dict:
    from advisor.emulator import capture
    from advisor.recommend import recommend
    from advisor.results import to_json
    t0 = time.perf_counter()
    base = capture(case.workload(), work / "base", dump="tensors", local=False)
    t1 = time.perf_counter()
    rec = recommend(base)
    t2 = time.perf_counter()
    m = rec.modify_mixlist if not rec.modify_mixlist.is_empty() else None
    # the whole advice: the list, and for gradient underflow the advised static loss scale
    scale = ((rec.loss_scale or {}).get("loss_scale") or {}).get("static") if rec.status == "loss-scale" else None
    fresh = capture(case.workload(), work / "fresh", mixlist=m, dump="stats", local=False, loss_scale=scale)
    ok, share = _judge(fresh)
    out = {"status": rec.status, "black_add": _black(m), "mixlist": (m.to_dict() if m else {}), "passes": ok,
           "loss_scale": scale,
           "share": share, "predicted": to_json(rec.predicted.recommended), "search": to_json(rec.search),
           "capture_s": round(t1 - t0, 2), "recommend_s": round(t2 - t1, 2)}
    shutil.rmtree(work, ignore_errors=True)
    gc.collect()
    return out


def eval_tune(name: str, set_name: str, work: Path, max_runs: int, measure_minimality: bool = False) -> dict:
    from advisor.runners import EmulatorRunner
    from advisor.tune import tune
    target = f"{ROOT / 'bench' / 'cases' / 'targets.py'}:case_{set_name}_{name}"
    runner = EmulatorRunner(target=target)
    try:
        s = tune(runner, work / "tune", max_runs=max_runs, measure_minimality=measure_minimality)
    finally:
        runner.close()
    first = next((h for h in s["history"] if h["ok"]), None)
    out = {"confirmed": s["confirmed"], "runs": s["runs"], "runs_to_pass": first["runs_after"] if first else None,
           "runs_to_first_confirmation": s.get("runs_to_first_confirmation"),
           "edits": s["edits"], "share": s["low_precision_time_share"], "minimality": s["minimality"],
           "predictions": s["predictions"], "stop_reason": s["stop_reason"]}
    shutil.rmtree(work, ignore_errors=True)
    gc.collect()
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="dev", choices=("dev", "holdout"))
    ap.add_argument("--cases", nargs="*", help="case indexes (NN of case_<set>_NN) to run; default all")
    ap.add_argument("--tune", action="store_true", help="also run advisor tune on every case")
    ap.add_argument("--max-runs", type=int, default=6)
    ap.add_argument("--measure-minimality", action="store_true", help="tune with --measure-minimality")
    ap.add_argument("--out", help="write the per-case results as JSON")
    ap.add_argument("--summary", help="only re-summarise this results JSON (with the current oracle) and exit")
    ap.add_argument("--markdown", action="store_true", help="with --summary: also print the per-case table")
    a = ap.parse_args(argv)
    if a.summary:
        d = json.loads(Path(a.summary).read_text())
        rows = [{k: v for k, v in r.items() if k != "oracle"} for r in d["cases"]]
        attach_oracle(rows, d["set"])
        summary = summarize(rows)
        print(json.dumps(summary, indent=2))
        if a.markdown:
            print(markdown(rows))
        return summary
    from bench.cases.suite import cases
    rows = []
    all_cases = cases(a.set)
    idx = [int(x) for x in a.cases] if a.cases else range(len(all_cases))
    for i in idx:
        case = all_cases[i]
        with tempfile.TemporaryDirectory() as tmp:
            r = {"case": case.name, "index": i, "kind": case.kind, "family": case.family}
            try:
                r["recommend"] = eval_recommend(case, Path(tmp) / "r")
                if a.tune:
                    r["tune"] = eval_tune(f"{i:02d}", a.set, Path(tmp) / "t", a.max_runs, a.measure_minimality)
            except Exception as e:  # noqa: BLE001 - a benchmark row, not a crash of the whole run
                r["error"] = f"{type(e).__name__}: {e}"
        rows.append(r)
        rr = r.get("recommend", {})
        print(f"{case.name:42s} {case.kind:8s} rec {rr.get('status', r.get('error', '?'))[:20]:20s} "
              f"{','.join(rr.get('black_add', [])) or '-':24s} pass {rr.get('passes')} share "
              f"{rr.get('share') if rr.get('share') is None else round(rr['share'], 3)}"
              + (f" | tune {r['tune']['confirmed']} runs to pass {r['tune']['runs_to_pass']}, runs {r['tune']['runs']}"
                 if "tune" in r else ""),
              flush=True)
    attach_oracle(rows, a.set)   # read only now: advisor's runs never see it (it may finish while they run)
    summary = summarize(rows)
    print(json.dumps(summary, indent=2))
    if a.out:
        Path(a.out).write_text(json.dumps({"set": a.set, "summary": summary, "cases": rows}, indent=1) + "\n")
    return summary


def markdown(rows: list[dict]) -> str:
    """Per case: recommend's advice, its fresh capture and share; tune's confirmed list, runs and share; the
    oracle's best share."""
    def pct(x):
        return "—" if x is None else f"{100 * x:.1f}%"

    def advice(rr):
        if rr.get("loss_scale"):
            return f"loss scale 2^{int(rr['loss_scale']).bit_length() - 1}"
        return "+".join(rr.get("black_add") or []) or "(none)"
    out = ["| case | recommend (single shot) | fresh capture | share | tune confirms | runs to pass | share | "
           "oracle best share |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rr, t, o = r.get("recommend", {}), r.get("tune", {}), r.get("oracle") or {}
        tl = "+".join(((t.get("edits") or {}).get("black-list") or {}).get("to-add") or []) or "(none)"
        out.append(f"| {r['case']} | {advice(rr)} | {'passes' if rr.get('passes') else 'FAILS'} | {pct(rr.get('share'))} "
                   f"| {tl if t.get('confirmed') else 'not confirmed'} | {t.get('runs_to_pass')} | {pct(t.get('share'))} "
                   f"| {pct(o.get('best_share'))} |")
    return "\n".join(out)


def attach_oracle(rows: list[dict], set_name: str) -> None:
    """Each row's oracle facts: base passes?, the best share, the best-share sets."""
    oracle = _oracle(set_name)
    for r in rows:
        o = oracle.get(r["case"])
        if o is not None:
            best = max((p["share"] for p in o.get("best_share", [])), default=None)
            r["oracle"] = {"base_passes": o.get("base_passes"), "best_share": best,
                           "best": [p["edits"] for p in o.get("best_share", [])]}


def summarize(rows: list[dict]) -> dict:
    """Pass rate, controls with a black-list edit, share gaps to the oracle's best, tune runs-to-pass."""
    rec = [r for r in rows if "recommend" in r]
    passes = sum(1 for r in rec if r["recommend"]["passes"])
    controls = [r for r in rec if r["kind"] == "control" or (r.get("oracle") or {}).get("base_passes")]
    gaps = []
    for r in rec:
        o = r.get("oracle") or {}
        if o.get("best_share") is not None and r["recommend"]["passes"] and r["recommend"]["share"] is not None:
            gaps.append(round(100 * (o["best_share"] - r["recommend"]["share"]), 2))
    tuned = [r for r in rows if "tune" in r]
    tgaps = []
    for r in tuned:
        o = r.get("oracle") or {}
        if o.get("best_share") is not None and r["tune"]["confirmed"] and r["tune"]["share"] is not None:
            tgaps.append(round(100 * (o["best_share"] - r["tune"]["share"]), 2))
    return {"cases": len(rows), "errors": sum(1 for r in rows if "error" in r),
            "recommend_passes": f"{passes}/{len(rec)}",
            "controls_or_base_passing_with_black_edit": sum(1 for r in controls if r["recommend"]["black_add"]),
            "share_gap_points": {"within_1": sum(1 for g in gaps if g <= 1.0), "of": len(gaps),
                                 "max": max(gaps) if gaps else None},
            "tune_confirmed": f"{sum(1 for r in tuned if r['tune']['confirmed'])}/{len(tuned)}" if tuned else None,
            "tune_within_reference_plus_3": (f"{sum(1 for r in tuned if (r['tune']['runs_to_pass'] or 99) <= 4)}"
                                             f"/{len(tuned)}") if tuned else None,
            "tune_mean_runs_to_pass": round(sum(r["tune"]["runs_to_pass"] or 7 for r in tuned) / len(tuned), 3)
            if tuned else None,
            "tune_mean_runs": round(sum(r["tune"]["runs"] for r in tuned) / len(tuned), 3) if tuned else None,
            "tune_runs_equal_runs_to_pass": (f"{sum(1 for r in tuned if r['tune']['runs'] == r['tune']['runs_to_pass'])}"
                                             f"/{len(tuned)}") if tuned else None,
            "tune_share_gap_points": {"within_1": sum(1 for g in tgaps if g <= 1.0), "of": len(tgaps),
                                      "max": max(tgaps) if tgaps else None},
            "controls_or_base_passing_tune_black_edit": sum(
                1 for r in tuned if (r["kind"] == "control" or (r.get("oracle") or {}).get("base_passes"))
                and ((r["tune"].get("edits") or {}).get("black-list") or {}).get("to-add"))}


if __name__ == "__main__":
    main()
