"""Ingest throughput: generate a kernel_details.csv of N rows (default 1,000,000) by replicating the
real sample's rows and formats (one copy of the sample per step, start times shifted, everything
else byte-identical), then time parse (read_kernel_details) and graph build (graph_from_kernels with
edge inference) and report rows/s and peak memory.

    python bench/ingest.py [--rows 1000000] [--keep FILE] [--repeat 3]
"""
from __future__ import annotations

import argparse
import csv
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT.parent / "shared" / "samples" / "torch_npu_profile_mstt" / "kernel_details.csv"


def generate(path: Path, rows: int) -> None:
    base = pd.read_csv(SAMPLE, dtype=str, keep_default_na=False)
    k = len(base)
    reps = -(-rows // k)
    df = pd.DataFrame({c: np.tile(base[c].to_numpy(), reps)[:rows] for c in base.columns})
    block = np.repeat(np.arange(reps), k)[:rows]
    df["Step Id"] = (block + 1).astype(str)
    # shift start times by 1 s per step, exactly, keeping the sample's decimal formatting
    st = base["Start Time(us)"].str.split(".", n=1, expand=True)
    whole = np.tile(st[0].astype("int64").to_numpy(), reps)[:rows] + block.astype("int64") * 1_000_000
    frac = np.tile(st[1].fillna("").to_numpy(), reps)[:rows]
    df["Start Time(us)"] = pd.Series(whole.astype(str)).str.cat(pd.Series(frac), sep=".").str.rstrip(".")
    df.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)


def measure(path: Path) -> None:
    """Parse + graph build of ``path`` in this (fresh) process, as ``advisor inspect`` would run.
    Prints one JSON line."""
    import json
    from advisor.ingest.infer import graph_from_kernels
    from advisor.ingest.profile import read_kernel_details
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    kf = read_kernel_details(path)
    t1 = time.perf_counter()
    g = graph_from_kernels(kf)
    t2 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"rows": len(kf), "parse": t1 - t0, "build": t2 - t1, "nodes": g.number_of_nodes(),
                      "edges": g.number_of_edges(), "peak_mib": ru.ru_maxrss / 1024, "faults": ru.ru_minflt - f0}))


def report(runs: list[dict]) -> None:
    import statistics
    n = runs[0]["rows"]
    for i, r in enumerate(runs, 1):
        tot = r["parse"] + r["build"]
        print(f"run {i}: parse {r['parse']:.2f} s + build {r['build']:.2f} s = {tot:.2f} s "
              f"({n / tot:,.0f} rows/s), {r['faults']:,} page faults")
    med = {k: statistics.median(r[k] for r in runs) for k in ("parse", "build")}
    tot = statistics.median(r["parse"] + r["build"] for r in runs)
    peak = max(r["peak_mib"] for r in runs)
    print(f"median of {len(runs)} fresh processes:")
    print(f"parse:       {med['parse']:6.2f} s  {n / med['parse']:12,.0f} rows/s")
    print(f"graph build: {med['build']:6.2f} s  {n / med['build']:12,.0f} rows/s  "
          f"({runs[0]['nodes']:,} nodes, {runs[0]['edges']:,} edges)")
    print(f"total:       {tot:6.2f} s  {n / tot:12,.0f} rows/s  (target >= 200,000)")
    print(f"peak RSS:    {peak:,.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--measure", type=Path, default=None, help="only parse + build this file (fresh process)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process measurements (median reported)")
    args = ap.parse_args()
    if args.measure:
        measure(args.measure)
        return
    with tempfile.TemporaryDirectory() as td:
        path = args.keep or Path(td) / "kernel_details.csv"
        t0 = time.perf_counter()
        generate(path, args.rows)
        t1 = time.perf_counter()
        print(f"generated {args.rows:,} rows ({path.stat().st_size / 1e6:.0f} MB) in {t1 - t0:.1f} s")
        sys.stdout.flush()
        # measured in fresh processes: the generator's heap (and its peak memory) must not count;
        # this machine's timings vary by +-30 % from run to run, so the median is reported
        import json
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, __file__, "--measure", str(path)], check=True,
                                 capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        report(runs)


if __name__ == "__main__":
    main()
