"""advisor recommend on the torch_npu cases, checked against the brute-force oracle (bench/npu_cases/oracle.py).

Per case: a fresh capture under ``--engine torch_npu --amp autocast`` (mixed_float16, ascend910b; FP32 tensor
dumps, so recommend replays its candidates); ``advisor recommend --profile RUN --exclude dtype`` on it (the
oracle's candidates are keep_fp32 rules only; ``--with-dtype`` lets recommend change the autocast dtype too); when it writes a precision_policy.json, a FRESH capture with that policy
(``--policy FILE``) judged by compare's default verdict, its low-precision share measured as the oracle measures it
(bench/cases/search.py ``low_precision_share``), and both set beside the oracle's passing / best-share /
fewest-rule sets.  A recommend that refuses torch_npu runs (exit 2, one line) is reported per case as "recommend
refused", not as a failure of the script.

    nice -n 10 python -m bench.npu_suite_eval --set dev --oracle bench/npu_cases/oracle_dev.json --out /tmp/e.json
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.cases.search import judge_run, low_precision_share
from bench.npu_cases.oracle import AMP, ENGINE, MODE, SOC
from bench.npu_cases.suite import SETS, cases as suite_cases


def _capture(case, out: Path, policy: Path | None = None, dump: str = "stats") -> Path:
    from advisor.emulator import capture
    return Path(capture(case.workload(), out, engine=ENGINE, amp=AMP, mode=MODE, soc=SOC,
                        policy=str(policy) if policy else None, dump=dump, local=False))


def _recommend(run: Path, out: Path, with_dtype: bool) -> tuple[int, str]:
    """(exit code, stderr) of ``advisor recommend --profile RUN --out OUT``, run in this process."""
    from advisor.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["recommend", "--profile", str(run), "--out", str(out),
                     *([] if with_dtype else ["--exclude", "dtype"])])
    return code, err.getvalue().strip()


def _rules_of(policy: Path) -> list[str]:
    d = json.loads(policy.read_text())
    return sorted(f"{k}:{v}" for r in d.get("rules", {}).get("keep_fp32", []) for k, v in r.items())


def eval_case(case, oracle: dict | None, work: Path, with_dtype: bool = False) -> dict:
    t0 = time.perf_counter()
    run = _capture(case, work / "base", dump="tensors")
    out = {"case": case.name, "kind": case.kind, "family": case.family}
    try:
        code, err = _recommend(run, work / "rec", with_dtype)
        policy = work / "rec" / "precision_policy.json"
        rec_json = work / "rec" / "recommendation.json"
        status = json.loads(rec_json.read_text()).get("status") if rec_json.is_file() else None
        if code == 0 and status == "no-change-needed":
            out.update(status="no change", passes=bool(judge_run(run)["ok"]), rules=[])
            if oracle is not None:
                out.update(oracle_base_passes=bool(oracle.get("base_passes")))
        elif code == 2 and "torch_npu" in err:
            out.update(status="recommend refused", message=err.splitlines()[-1] if err else "")
        elif code != 0 or not policy.is_file():
            out.update(status=f"recommend exit {code}" + ("" if policy.is_file() else ", no precision_policy.json"),
                       message=(err.splitlines() or [""])[-1])
        else:
            rules = _rules_of(policy)
            fresh = _capture(case, work / "fresh", policy)
            v = judge_run(fresh)
            d = json.loads(policy.read_text())
            out.update(status="advised", rules=rules, dtype=d.get("dtype"), passes=bool(v["ok"]),
                       share=low_precision_share(fresh))
            if oracle is not None:
                best = oracle["best_share"][0]["share"] if oracle["best_share"] else None
                fewest = len(oracle["fewest_rules"][0]["rules"]) if oracle["fewest_rules"] else None
                out.update(oracle_best_share=best, oracle_fewest=fewest,
                           within_1pt_of_best=None if best is None or not v["ok"] else
                           bool(out["share"] >= best - 0.01),
                           in_oracle_passing=any(sorted(p["rules"]) == rules for p in oracle["passing"]))
    finally:
        for d in ("base", "rec", "fresh"):
            shutil.rmtree(work / d, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def tune_case(case, work: Path, max_runs: int = 6) -> dict:
    """``advisor tune --engine torch_npu`` on the case (the library call the command makes): runs until a policy
    passes the calibration and held-out batches, each run a fresh emulator capture with the policy applied."""
    from advisor.runners.emulator import EmulatorRunner
    from advisor.tune.policy_loop import tune_policy
    t0 = time.perf_counter()
    r = EmulatorRunner(case.workload(), soc=SOC, dump="tensors")
    try:
        s = tune_policy(r, work / "tune", amp=AMP, mode=MODE, soc=SOC, start=None, max_runs=max_runs)
    finally:
        r.close()
        shutil.rmtree(work / "tune", ignore_errors=True)
    pol = s.get("policy") or {}
    return {"tune_confirmed": bool(s["confirmed"]), "tune_runs": s["runs"], "tune_dtype": pol.get("dtype"),
            "tune_rules": sorted(f"{k}:{v}" for r_ in (pol.get("rules") or {}).get("keep_fp32", [])
                                 for k, v in r_.items()),
            "tune_seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.npu_suite_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=sorted(SETS), required=True)
    ap.add_argument("--oracle", type=Path, help="the oracle JSON of the same set (bench/npu_cases/oracle.py)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", nargs="*", help="only these cases (names or seeds)")
    ap.add_argument("--tune", action="store_true", help="also run the torch_npu tune on every case (budget 6 runs)")
    ap.add_argument("--with-dtype", action="store_true", help="let recommend change the autocast dtype (outside "
                    "the oracle's candidates: its shares are then not comparable)")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    orc = {r["case"]: r for r in json.loads(a.oracle.read_text())["cases"]} if a.oracle else {}
    cs = [c for c in suite_cases(a.set) if not a.cases or c.name in a.cases or str(c.seed) in a.cases]
    recs = []
    with tempfile.TemporaryDirectory(prefix="npu_eval_") as tmp:
        for c in cs:
            r = eval_case(c, orc.get(c.name), Path(tmp), a.with_dtype)
            if a.tune:
                r.update(tune_case(c, Path(tmp)))
            print(json.dumps(r), flush=True)
            recs.append(r)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    advised = [r for r in recs if r["status"] == "advised"]
    summary = {"cases": len(recs), "status": counts,
               "passes_fresh_capture": sum(bool(r.get("passes")) for r in recs),
               "advice_passes": sum(r["passes"] for r in advised),
               "advice_in_oracle_passing": sum(bool(r.get("in_oracle_passing")) for r in advised),
               "advice_within_1pt_of_oracle_best": sum(bool(r.get("within_1pt_of_best")) for r in advised),
               "hazards_advised": sum(r["kind"] == "hazard" for r in advised),
               "controls_no_change": sum(r["kind"] == "control" and r["status"] == "no change" for r in recs)}
    if a.tune:
        conf = [r for r in recs if r.get("tune_confirmed")]
        summary.update(tune_confirmed=len(conf), tune_within_3_runs_after_reference=sum(r["tune_runs"] <= 4
                                                                                        for r in conf),
                       tune_mean_runs=round(sum(r["tune_runs"] for r in conf) / max(len(conf), 1), 2),
                       tune_dtype_changes=sum(r.get("tune_dtype") not in (None, "fp16", "float16") for r in conf))
    from advisor.fsutil import atomic_write_json, json_safe
    atomic_write_json(a.out, json_safe({"set": a.set, "summary": summary, "cases": recs}))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
