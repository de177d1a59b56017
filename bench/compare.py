"""Speed of the compare stage: tensor metrics throughput and attribution of a captured run.
Prints figures; asserts nothing.  Usage: python bench/compare.py [--run RUNDIR]"""
from __future__ import annotations

import argparse
import time

import torch

from advisor.compare.metrics import tensor_metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", help="a capture run directory to attribute")
    ap.add_argument("--numel", type=int, default=1 << 24)
    a = ap.parse_args()
    g = torch.randn(a.numel, generator=torch.Generator().manual_seed(0))
    t = g.half()
    tensor_metrics(t[:1000], g[:1000])
    t0 = time.perf_counter()
    tensor_metrics(t, g)
    dt = time.perf_counter() - t0
    print(f"tensor_metrics: {a.numel:,} elements in {dt:.3f} s = {a.numel / dt / 1e6:.1f} M elements/s")
    if a.run:
        from advisor.compare import attribute
        from advisor.analysis import analyze
        t0 = time.perf_counter()
        r = analyze(a.run)
        att = r.attribution()
        dt = time.perf_counter() - t0
        print(f"attribute({a.run}): {len(att.ops)} ops x {len(att.final)} steps in {dt:.2f} s")


if __name__ == "__main__":
    main()
