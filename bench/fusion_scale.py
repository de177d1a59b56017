"""How ``advisor.fusion.fuse`` scales with the graph: synthetic chains of blocks (MatMul + bias Add, ReduceSum and
ReduceMean with constant axes, Sub), each block 7 nodes and 3 rewrites (MatMulBiasAddFusionPass,
ConstToAttrReduceSumFusion, ConstToAttrPass), fused at 35k, 70k and 140k nodes.

    python bench/fusion_scale.py [--nodes 35000 70000 140000] [--repeat 3]

Prints, per size, the nodes, the rewrites, the best wall and CPU time of ``repeat`` runs and the CPU time per node
(linear growth keeps it flat), plus the 1-minute load average (the machine is shared)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor import fusion  # noqa: E402
from advisor import graph as G  # noqa: E402
from advisor.oplists import load_lists  # noqa: E402

NODES_PER_BLOCK = 7


def chain(blocks: int):
    """``blocks`` blocks after one input: w, mm(x, w), b, add(mm, b), rs = ReduceSum(add), m = ReduceMean(rs),
    s = Sub(rs, m) feeding the next block."""
    g = G.new_graph()
    G.add_op(g, "x", "Data", role="data", dtype="fp32", out_shapes=[[4, 8]], out_dtypes=["fp32"])
    prev = "x"
    f = ["fp32"]
    for i in range(blocks):
        w, mm, b, add, rs, m, s = (f"w{i}", f"mm{i}", f"b{i}", f"add{i}", f"rs{i}", f"m{i}", f"s{i}")
        G.add_op(g, w, "Const", role="const", dtype="fp32", out_shapes=[[8, 8]], out_dtypes=f)
        G.add_op(g, b, "Const", role="const", dtype="fp32", out_shapes=[[8]], out_dtypes=f)
        for name, typ, ins, ish, osh in ((mm, "MatMulV2", [prev, w], [[4, 8], [8, 8]], [[4, 8]]),
                                         (add, "Add", [mm, b], [[4, 8], [8]], [[4, 8]]),
                                         (rs, "ReduceSum", [add], [[4, 8]], [[4]]),
                                         (m, "ReduceMean", [rs], [[4]], [[1]]),
                                         (s, "Sub", [rs, m], [[4], [1]], [[4]])):
            G.add_op(g, name, typ, in_shapes=ish, out_shapes=osh, in_dtypes=f * len(ins), out_dtypes=f,
                     origin_dtype="fp32")
            for k, u in enumerate(ins):
                G.connect(g, u, name, 0, k)
        prev = s
    return g


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[35000, 70000, 140000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    lists = load_lists("ascend910b")
    base = None
    for n in args.nodes:
        g = chain(max(1, n // NODES_PER_BLOCK))
        best = cpu = float("inf")
        rewrites = 0
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            fz = fusion.fuse(g, "ascend910b", lists)
            best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
            rewrites = len(fz.rewrites)
        per = cpu / len(g) * 1e6
        base = base or per
        print(f"{len(g):>7} nodes  {rewrites:>6} rewrites  wall {best:7.3f} s  cpu {cpu:7.3f} s  {per:6.2f} cpu-us/node"
              f"  ({per / base:.2f}x the first)  load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
