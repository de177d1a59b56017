"""Time compile + plan + incremental what-if of the semantics module on a 100,000-op graph."""
from __future__ import annotations

import random
import time

from advisor import semantics as S
from advisor.graph import add_op, connect, new_graph
from advisor.mixlist import Mixlist, apply
from advisor.oplists import load_default

TYPES = ["MatMulV2", "Add", "Exp", "Mul", "ReduceSum", "Cast", "Relu", "SoftmaxV2", "LayerNorm", "Reshape"]


def synthetic(n: int, seed: int = 0):
    rnd = random.Random(seed)
    g = new_graph()
    add_op(g, 0, "Data", role="data")
    for i in range(1, n):
        t = rnd.choice(TYPES)
        attrs = {"cast_to": "fp32"} if t == "Cast" else ({"kernel": False} if t == "Reshape" else {})
        add_op(g, i, t, **attrs)
        for k in range(rnd.randint(1, 2)):
            connect(g, rnd.randint(max(0, i - 20), i - 1), i, 0, k)
    return g


def main(n: int = 100_000) -> dict:
    g = synthetic(n)
    lists = load_default()
    t0 = time.perf_counter()
    c = S.compile_graph(g)
    t1 = time.perf_counter()
    p = c.plan(lists)
    t2 = time.perf_counter()
    edited = apply(lists, Mixlist(black_add=("Exp",))).lists
    q = c.what_if(p, edited)
    t3 = time.perf_counter()
    flips = len(S.flips_between(p, q))
    res = {"ops": n, "compile_s": t1 - t0, "plan_s": t2 - t1, "what_if_s": t3 - t2, "flips": flips}
    print(f"semantics on {n:,} ops: compile {res['compile_s']:.3f} s, plan {res['plan_s']:.3f} s, "
          f"what-if (black-list Exp, {flips:,} flips) {res['what_if_s']:.3f} s")
    return res


if __name__ == "__main__":
    main()
