"""Brute-force oracle of the torch_npu cases: which precision-policy rules make each case pass, and what they cost.

Per case: capture under ``--engine torch_npu --amp autocast`` (mixed_float16, ascend910b) with no policy; the
candidate rules are ``keep_fp32 {"op": T}`` for every aten op with a low-precision (fp16/bf16) kernel in that
capture (the op named by the kernel's launching framework op, ``aten::T``) and ``keep_fp32 {"module": X}`` for
every named module of the model (``named_modules()``, the model itself left out).  Every rule set up to
``--max-size`` (2) is judged by a FRESH capture with that precision_policy.json (``advisor capture --policy FILE``,
here its library call) and the verdict ``advisor compare --run`` gives with the default tolerance
(bench/cases/search.py ``judge_run``).  Strict supersets of a passing set are not captured (more fp32: they can
neither need fewer rules nor keep more low-precision time).  For each passing set the low-precision share of
measured kernel time is recorded (bench/cases/search.py ``low_precision_share``: the same definition as the GE
oracle).  advisor's recommend is never called.

Every capture result is cached in a JSON file keyed by (case name @ spec fingerprint, rule set), written after each
capture, so an interrupted run resumes where it stopped.

    nice -n 10 python -m bench.npu_cases.oracle --set dev --out bench/npu_cases/oracle_dev.json
    python -m bench.npu_cases.oracle --summary bench/npu_cases/oracle_dev.json     # markdown for docs/benchmarks.md
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

from bench.cases.search import judge_run, low_precision_share, minimal_by, search_black_subsets

from .generator import NpuCase
from .suite import SETS, cases as suite_cases

ENGINE, AMP, MODE, SOC, MAX_SIZE = "torch_npu", "autocast", "mixed_float16", "ascend910b", 2
CACHE_VERSION = 1
SCHEMA = "advisor.precision_policy/1"


def rules_key(rules) -> str:
    return "+".join(sorted(rules)) or "-"


def policy_doc(rules) -> dict:
    """The precision_policy.json of a rule set (``op:T`` / ``module:X`` keys)."""
    keep = [{r.split(":", 1)[0]: r.split(":", 1)[1]} for r in sorted(rules)]
    return {"schema": SCHEMA, "version": 1, "engine": ENGINE, "amp": AMP, "dtype": "float16",
            "rules": {"keep_fp32": keep}}


class Cache:
    """``{"meta": {...}, "results": {"<case>@<fingerprint>|<rules>": record}}`` in one JSON file."""

    def __init__(self, path: Path | None):
        self.path = path
        self.meta = {"version": CACHE_VERSION, "engine": ENGINE, "amp": AMP, "mode": MODE, "soc": SOC,
                     "tolerance": "default"}
        self.results: dict[str, dict] = {}
        if path is not None and path.exists():
            d = json.loads(path.read_text())
            if d.get("meta") != self.meta:
                raise SystemExit(f"{path}: cache made with other settings {d.get('meta')}; use another --cache")
            self.results = d["results"]

    @staticmethod
    def key(case: NpuCase, rules) -> str:
        return f"{case.name}@{case.fingerprint}|{rules_key(rules)}"

    def get(self, case: NpuCase, rules) -> dict | None:
        return self.results.get(self.key(case, rules))

    def put(self, case: NpuCase, rules, rec: dict) -> None:
        self.results[self.key(case, rules)] = rec
        if self.path is not None:
            from advisor.fsutil import atomic_write_json
            atomic_write_json(self.path, {"meta": self.meta, "results": self.results}, indent=None)


def candidates(run_dir: Path, model) -> list[str]:
    """``op:T`` for each aten op with a low-precision kernel in the capture, then ``module:X`` for each named module."""
    from advisor.ingest.run import load_run
    k = load_run(run_dir).kernels
    low = k[k["precision"].astype(str).isin(("fp16", "bf16"))]
    ops = sorted({str(o).removeprefix("aten::") for o in low.get("framework_op", []) if isinstance(o, str) and o})
    mods = [n for n, _ in model.named_modules() if n]
    return [f"op:{o}" for o in ops] + [f"module:{m}" for m in mods]


def capture_and_judge(case: NpuCase, rules, work: Path) -> dict:
    """One fresh capture of ``case`` with ``rules`` as its precision_policy.json, judged; the run is removed."""
    from advisor.emulator import capture
    from advisor.fsutil import atomic_write_json, json_safe
    t0 = time.perf_counter()
    pol = None
    if rules:
        pol = work / "precision_policy.json"
        atomic_write_json(pol, policy_doc(rules))
    wl = case.workload()
    d = capture(wl, work / "run", engine=ENGINE, amp=AMP, mode=MODE, soc=SOC, policy=str(pol) if pol else None,
                dump="stats", local=False)
    try:
        v = judge_run(d)
        rec = {"ok": bool(v["ok"]), "share": low_precision_share(d), "worst": json_safe(v["worst"]),
               "reasons": v["reasons"][:3]}
        if not rules:
            rec["candidates"] = candidates(Path(d), wl[0])
    finally:
        shutil.rmtree(d, ignore_errors=True)
        gc.collect()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def oracle_case(case: NpuCase, cache: Cache, work: Path, max_size: int = MAX_SIZE, log=None) -> dict:
    t0 = time.perf_counter()
    new = 0

    def evaluate(rules) -> dict:
        nonlocal new
        rec = cache.get(case, rules)
        if rec is None:
            rec = capture_and_judge(case, rules, work)
            cache.put(case, rules, rec)
            new += 1
        return rec

    base = evaluate(frozenset())
    cands = list(base["candidates"])
    judged, passing = search_black_subsets(cands, lambda s: evaluate(s)["ok"], max_size)
    share = {s: evaluate(s)["share"] for s in passing}

    def fmt(s) -> dict:
        return {"rules": sorted(s), "share": None if share[s] is None else round(share[s], 6)}

    sets = sorted(passing, key=lambda s: (len(s), sorted(s)))
    best = minimal_by(sets, lambda s: -round(share[s] or 0.0, 9))
    fewest = minimal_by(sets, len)
    out = {"case": case.name, "seed": case.seed, "kind": case.kind, "family": case.family,
           "fingerprint": case.fingerprint, "description": case.description, "candidates": cands,
           "base_passes": bool(base["ok"]), "base": {"share": base["share"], "worst": base["worst"],
                                                      "reasons": base["reasons"]},
           "passing": [fmt(s) for s in sets], "best_share": [fmt(s) for s in best],
           "fewest_rules": [fmt(s) for s in fewest], "captures": len(judged), "new_captures": new,
           "capture_seconds": round(sum(evaluate(s)["seconds"] for s in judged), 1),
           "seconds": round(time.perf_counter() - t0, 1)}
    if log:
        b = ", ".join("+".join(x["rules"]) or "(none)" for x in out["best_share"]) or "none found"
        log(f"{case.name}: base {'passes' if out['base_passes'] else 'fails'}, {len(cands)} candidates, "
            f"{out['captures']} captures ({new} new), {len(sets)} passing, best {b}, {out['seconds']} s")
    return out


def _sets_text(sets: list[dict]) -> str:
    return "; ".join(f"{'+'.join(x['rules']) or '(none)'} {100 * (x['share'] or 0):.1f}%" for x in sets) or "none"


def markdown_summary(data: dict, counts_only: bool = False) -> str:
    """docs/benchmarks.md's tables of an oracle JSON: counts by kind, then (unless ``counts_only``, as for the
    held-out set) one row per case."""
    recs, kinds = data["cases"], ("hazard", "control")

    def col(f) -> list[int]:
        return [sum(1 for r in recs if r["kind"] == k and f(r)) for k in kinds] + [sum(1 for r in recs if f(r))]

    def size(r, key="best_share"):
        return len(r[key][0]["rules"]) if r[key] else None

    def kind_of(r, what):
        return bool(r["best_share"]) and all(x.split(":")[0] == what for x in r["best_share"][0]["rules"]) \
            and size(r) > 0

    rows = [("cases", col(lambda r: True)), ("base passes (no rule needed)", col(lambda r: r["base_passes"]))]
    for k in (1, 2):
        rows.append((f"best-share set of {k} rule{'s' if k > 1 else ''}", col(lambda r, k=k: size(r) == k)))
    rows += [("best-share set keeps ops only", col(lambda r: kind_of(r, "op"))),
             ("best-share set keeps modules only", col(lambda r: kind_of(r, "module"))),
             (f"no passing set within {data['max_size']} rules", col(lambda r: size(r) is None))]
    out = [f"| {data['set']} set ({len(recs)} cases) | hazard | control | all |", "|---|---|---|---|"]
    out += [f"| {label} | {' | '.join(str(x) for x in v)} |" for label, v in rows]
    sm = data["summary"]
    out += ["", f"Captures: {sm['captures']} (rule sets up to size {data['max_size']}), "
            f"{sm['capture_seconds'] / 60:.0f} min of capture + judge time (measured, this shared 2-core machine)."]
    if counts_only:
        return "\n".join(out)
    out += ["", "| case | base | best-share set (low-prec share) | fewest-rule set(s) | passing sets | captures |",
            "|---|---|---|---|---|---|"]
    for r in recs:
        out.append(f"| {r['case']} | {'passes' if r['base_passes'] else 'fails'} | {_sets_text(r['best_share'])} | "
                   f"{_sets_text(r['fewest_rules'])} | {len(r['passing'])} | {r['captures']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.npu_cases.oracle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=sorted(SETS))
    ap.add_argument("--cases", nargs="*", help="only these cases (names or seeds)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summary", type=Path, help="print the markdown tables of this oracle JSON and exit")
    ap.add_argument("--counts-only", action="store_true", help="with --summary: the counts table only")
    ap.add_argument("--cache", type=Path, help="capture cache (default: <out>.cache.json)")
    ap.add_argument("--max-size", type=int, default=MAX_SIZE)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    if a.summary is not None:
        print(markdown_summary(json.loads(a.summary.read_text()), a.counts_only))
        return 0
    if a.set is None or a.out is None:
        ap.error("--set and --out are required (or --summary FILE)")
    import torch
    torch.set_num_threads(a.threads)
    cache = Cache(a.cache or a.out.with_name(a.out.stem + ".cache.json"))
    cs = [c for c in suite_cases(a.set) if not a.cases or c.name in a.cases or str(c.seed) in a.cases]
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    records = []
    with tempfile.TemporaryDirectory(prefix="npu_oracle_") as tmp:
        for i, c in enumerate(cs):
            log(f"({i + 1}/{len(cs)}) {c.name}: {c.description}")
            records.append(oracle_case(c, cache, Path(tmp), a.max_size, log))
    summary = {"cases": len(records), "captures": sum(r["captures"] for r in records),
               "new_captures": sum(r["new_captures"] for r in records),
               "capture_seconds": round(sum(r["capture_seconds"] for r in records), 1),
               "wall_seconds": round(time.perf_counter() - t0, 1)}
    from advisor.fsutil import atomic_write_json, json_safe
    atomic_write_json(a.out, json_safe({"set": a.set, "engine": ENGINE, "amp": AMP, "mode": MODE, "soc": SOC,
                                        "max_size": a.max_size, "tolerance": "advisor compare default",
                                        "share_definition": " ".join(low_precision_share.__doc__.split()),
                                        "summary": summary, "cases": records}))
    log(f"wrote {a.out}: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
