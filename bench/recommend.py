"""Time of `recommend` on a 100,000-op synthetic graph with statistics-level data (target <= 30 s).

The graph repeats a transformer-like block (MatMulV2, LayerNormV4, BatchMatMul, SoftmaxV2, Gelu,
Exp, Cast, ...) with one planted hazard (an Exp instance that overflows in fp16); the evidence is
what a statistics dump plus emulator local errors give per op (out/in rel-L2, local and inrnd
errors).  Prints the figures; asserts nothing about time.

    python bench/recommend.py [--ops 100000] [--hazards 1]
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--hazards", type=int, default=1)
    args = ap.parse_args()
    from advisor.oplists import load_lists
    from advisor.recommend import recommend_graph
    from advisor.recommend.synthetic import transformer_like

    t0 = time.perf_counter()
    g, ops, haz = transformer_like(args.ops, hazards=args.hazards)
    t1 = time.perf_counter()
    n_ops = sum(1 for _, r in g.nodes(data="role") if r == "op")
    print(f"graph: {n_ops} ops, {g.number_of_nodes()} nodes, {g.number_of_edges()} edges "
          f"(built in {t1 - t0:.1f} s); planted hazards: {', '.join(haz)}")
    rec = recommend_graph(g, load_lists(), ops=ops)
    t2 = time.perf_counter()
    print(f"recommend: {t2 - t1:.1f} s (target <= 30 s); status {rec.status}; edits "
          f"{[str(e.edit) for e in rec.edits]}; search {rec.search}")
    print(f"predicted final rel-L2 {rec.predicted['base']['final_rel_l2']} "
          f"(non-finite {rec.predicted['base']['final_nonfinite']}) -> "
          f"{rec.predicted['recommended']['final_rel_l2']}; 1-minimal: {rec.minimality.get('proved')}")


if __name__ == "__main__":
    main()
