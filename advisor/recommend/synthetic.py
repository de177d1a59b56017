"""Synthetic op graphs with per-op evidence, for tests and bench/recommend.py.

``Builder`` adds ops in execution order with their local-error rows; ``transformer_like`` makes a
large graph of repeated transformer-style blocks (statistics-level evidence: per-op output/input
rel-L2 as a statistics dump would give, plus local/inrnd errors) with planted hazards.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..graph import add_op, connect, new_graph

RND16 = 2.0 ** -11 / math.sqrt(3)


class Builder:
    """Ops in execution order with per-op evidence rows (local_error.csv columns)."""

    def __init__(self, shape=(64, 512)):
        self.g = new_graph()
        self.rows: list[dict] = []
        self.n = 0
        add_op(self.g, "x", "Data", role="data", out_shapes=[list(shape)])

    def op(self, typ, *inputs, shape=(64, 512), local=RND16, local_nf=0, inrnd=RND16, inrnd_nf=0, weight=False):
        name = f"{typ.lower()}{self.n}"
        self.n += 1
        ins = [list(shape)] * max(1, len(inputs))
        w = None
        if weight:
            w = add_op(self.g, f"w{self.n}", "Variable", role="variable", out_shapes=[[shape[1], shape[1]]])
        add_op(self.g, name, typ, in_shapes=ins + ([[shape[1], shape[1]]] if weight else []),
               out_shapes=[list(shape)])
        for k, src in enumerate(inputs):
            connect(self.g, src, name, 0, k)
        if w is not None:
            connect(self.g, w, name, 0, len(inputs))
        self.rows.append(dict(node=name, type=typ, local_rel_l2=local, local_nonfinite=local_nf,
                              inrnd_rel_l2=inrnd, inrnd_nonfinite=inrnd_nf))
        return name

    def local(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


# one block: (type, input offsets relative to the block start, has weight, local error scale)
_BLOCK = [
    ("MatMulV2", (-1,), True), ("Add", (0, -1), False), ("LayerNormV4", (1,), False),
    ("BatchMatMul", (2, 2), False), ("RealDiv", (3,), False), ("SoftmaxV2", (4,), False),
    ("BatchMatMul", (5, 2), False), ("MatMulV2", (6,), True), ("Add", (7, 1), False),
    ("LayerNormV4", (8,), False), ("MatMulV2", (9,), True), ("Gelu", (10,), False),
    ("MatMulV2", (11,), True), ("Add", (12, 8), False), ("Mul", (13,), False), ("Exp", (14,), False),
    ("Add", (15, 13), False), ("Cast", (16,), False), ("Relu", (17,), False), ("Sigmoid", (18,), False),
]


def transformer_like(n_ops: int = 100_000, hazards: int = 1, seed: int = 0, shape=(8 * 128, 256)):
    """(graph, ops frame with measured out/in rel-L2 + local/inrnd errors, list of hazard nodes).

    Built directly with ``add_nodes_from``/``add_edges_from`` (fast for 10^5 ops)."""
    import networkx as nx

    rng = np.random.default_rng(seed)
    nodes, edges, names, types = _blocks(max(1, n_ops // len(_BLOCK)), shape)
    g = nx.DiGraph()
    g.add_nodes_from(_weights_first(nodes))
    g.add_edges_from(edges)
    n = len(names)
    local = RND16 * rng.uniform(0.5, 2.0, n)
    inrnd = RND16 * rng.uniform(0.5, 1.5, n)
    local_nf = np.zeros(n, dtype=int)
    t = np.asarray(types, dtype=object)
    exp_idx = np.flatnonzero(t == "Exp")
    haz = rng.choice(exp_idx, size=min(hazards, len(exp_idx)), replace=False) if hazards else np.array([], int)
    local_nf[haz] = 1
    local[haz] = np.inf
    # statistics-level measurements of the run: output rel-L2 ~1e-3 everywhere (a stable network),
    # input rel-L2 = worst producer output, non-finite from the hazards downstream
    out = 1e-3 * rng.uniform(0.8, 1.2, n)
    pos = {nm: i for i, nm in enumerate(names)}
    nf = np.zeros(n, dtype=bool)
    for h in haz:
        nf[h] = True
        for d in nx.descendants(g, names[h]):
            if d in pos:
                nf[pos[d]] = True
    inp, in_nf = _worst_inputs(edges, pos, out, nf)
    ops = pd.DataFrame({"node": names, "type": types, "local_rel_l2": local, "local_nonfinite": local_nf,
                        "inrnd_rel_l2": inrnd, "inrnd_nonfinite": 0,
                        "out_rel_l2": np.where(nf, np.inf, out), "out_nonfinite": nf.astype(int),
                        "in_rel_l2": np.where(in_nf, np.inf, inp), "in_nonfinite": in_nf.astype(int)})
    return g, ops, [names[i] for i in haz]


def _blocks(blocks: int, shape) -> tuple[list[tuple], list[tuple], list[str], list[str]]:
    """(nodes, edges, op names, op types) of ``blocks`` repeats of ``_BLOCK`` after the input ``x``,
    each block fed by the previous one's last op; weights as Variable nodes."""
    nodes: list[tuple] = [("x", {"type": "Data", "role": "data", "name": "x", "out_shapes": [list(shape)]})]
    edges: list[tuple] = []
    names: list[str] = []
    types: list[str] = []
    prev = "x"
    shp = [list(shape)]
    for b in range(blocks):
        base = []
        for k, (typ, ins, weight) in enumerate(_BLOCK):
            name = f"b{b}.{k}.{typ}"
            attrs = {"type": typ, "role": "op", "name": name, "in_shapes": shp * len(ins), "out_shapes": shp,
                     "dump": name}
            if typ == "Cast":
                attrs["cast_to"] = "fp32"
            nodes.append((name, attrs))
            for port, off in enumerate(ins):
                src = prev if off < 0 else base[off]
                edges.append((src, name, {"ports": [(0, port)], "float": True, "confidence": 1.0}))
            if weight:
                wn = f"b{b}.{k}.w"
                nodes.append((wn, {"type": "Variable", "role": "variable", "name": wn,
                                   "out_shapes": [[shape[1], shape[1]]]}))
                edges.append((wn, name, {"ports": [(0, len(ins))], "float": True, "confidence": 1.0}))
                attrs["in_shapes"] = shp * len(ins) + [[shape[1], shape[1]]]
            base.append(name)
            names.append(name)
            types.append(typ)
        prev = base[-1]
    return nodes, edges, names, types


def _weights_first(nodes: list[tuple]) -> list[tuple]:
    """The nodes in insertion order with each weight right before its consumer."""
    order = []
    pending_w = {}
    for n, a in nodes:
        if a["role"] == "variable":
            pending_w[n] = a
    for n, a in nodes:
        if a["role"] == "variable":
            continue
        wn = n.rsplit(".", 1)[0] + ".w"
        if wn in pending_w:
            order.append((wn, pending_w.pop(wn)))
        order.append((n, a))
    return order


def _worst_inputs(edges: list[tuple], pos: dict[str, int], out: np.ndarray, nf: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per op: the worst output error among its op producers, and whether any of them is non-finite."""
    n = len(out)
    src = np.array([pos.get(u, -1) for u, v, _ in edges])
    dst = np.array([pos.get(v, -1) for u, v, _ in edges])
    ok = (src >= 0) & (dst >= 0)
    inp = np.zeros(n)
    np.maximum.at(inp, dst[ok], out[src[ok]])
    in_nf = np.zeros(n, dtype=bool)
    np.logical_or.at(in_nf, dst[ok], nf[src[ok]])
    return inp, in_nf
