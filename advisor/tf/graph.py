"""Frozen GraphDef -> advisor op graph (conventions of advisor/graph.py).

Every TF node becomes one op-graph node keyed by its TF node name (the name GE keeps, the kernel
``Name`` and the dump prefix), except the nodes GE removes (``opmap.BYPASS``: Identity,
StopGradient, NoOp, ...), whose consumers are wired straight to their producers.  Roles:
Placeholder -> ``data`` (a real fp32 producer), Const (frozen weights included) -> ``const``,
everything else -> ``op`` typed with its GE type (``opmap.ge_type``).  Edges carry true dataflow
ports (producer output index, consumer input index) and whether the tensor is floating point.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from .. import graph as G
from . import opmap

FLOAT_TF = ("float32", "float16", "bfloat16", "float64")
STRIDED_SLICE_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def split_tensor(name: str) -> tuple[str, int]:
    """``"node:1"`` -> ("node", 1); ``"node"`` -> ("node", 0)."""
    if name.startswith("^"):
        name = name[1:]
    node, sep, idx = name.rpartition(":")
    if sep and idx.isdigit():
        return node, int(idx)
    return name, 0


@dataclass
class TFGraphInfo:
    """What the capture needs besides the op graph."""

    nodes: dict[str, Any]                           # name -> NodeDef (kept nodes and bypassed ones)
    order: list[str]                                # kept nodes (op-graph nodes), topological
    resolve: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)  # bypass resolution
    out_dtypes: dict[str, list[str]] = field(default_factory=dict)  # fp32-run output dtypes per node
    out_shapes: dict[str, list[list[int] | None]] = field(default_factory=dict)
    inputs: dict[str, list[tuple[str, int] | None]] = field(default_factory=dict)  # per input: resolved source

    def source(self, tensor: str) -> tuple[str, int]:
        t = split_tensor(tensor)
        return self.resolve.get(t, t)


def _dtype_name(dt) -> str:
    return dt.base_dtype.name if hasattr(dt, "base_dtype") else str(dt)


def _shape(t) -> list[int] | None:
    try:
        dims = t.shape.as_list()
    except ValueError:
        return None
    return [(-1 if d is None else int(d)) for d in dims]


def prune(graph_def, fetch_nodes: list[str]):
    """Keep only the ancestors of the fetched nodes (data inputs; control edges were stripped)."""
    by_name = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    stack = [n for n in fetch_nodes if n in by_name]
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        for i in by_name[n].input:
            src = split_tensor(i)[0]
            if src in by_name and src not in keep:
                stack.append(src)
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        if n.name in keep:
            out.node.add().CopyFrom(n)
    return out


def topo_order(graph_def) -> list[str]:
    names = [n.name for n in graph_def.node]
    dg = nx.DiGraph()
    dg.add_nodes_from(names)
    for n in graph_def.node:
        for i in n.input:
            src = split_tensor(i)[0]
            if src in dg:
                dg.add_edge(src, n.name)
    pos = {n: i for i, n in enumerate(names)}
    return list(nx.lexicographical_topological_sort(dg, key=lambda n: pos[n]))


def build(tf, graph_def, name: str = "model") -> tuple[nx.DiGraph, TFGraphInfo]:
    """The op graph of a frozen, pruned GraphDef, plus the facts the rewrite and the dumps need."""
    g_tf = tf.Graph()
    with g_tf.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    nodes = {n.name: n for n in graph_def.node}
    order_all = topo_order(graph_def)
    info = TFGraphInfo(nodes, [])

    # bypass resolution, in topological order so chains of Identity collapse
    for n in order_all:
        nd = nodes[n]
        if nd.op not in opmap.BYPASS:
            continue
        data_in = [i for i in nd.input if not i.startswith("^")]
        if nd.op == "IdentityN":
            for k, i in enumerate(data_in):
                info.resolve[(n, k)] = info.source(i)
        elif data_in:
            info.resolve[(n, 0)] = info.source(data_in[0])

    g = G.new_graph(framework="tensorflow", name=name)
    for n in order_all:
        nd = nodes[n]
        if nd.op in opmap.BYPASS:
            continue
        op = g_tf.get_operation_by_name(n)
        outs = [_dtype_name(t.dtype) for t in op.outputs]
        info.out_dtypes[n] = outs
        info.out_shapes[n] = [_shape(t) for t in op.outputs]
        srcs = [info.source(i) for i in nd.input if not i.startswith("^")]
        info.inputs[n] = srcs
        in_dtypes = [_dtype_name(t.dtype) for t in op.inputs]
        info.order.append(n)
        any_float_out = any(d in FLOAT_TF for d in outs)
        if nd.op in opmap.DATA_TYPES:
            G.add_op(g, n, "Data", role="data", dtype=G.normalize_dtype(outs[0]), tf_type=nd.op,
                     out_shapes=info.out_shapes[n], out_dtypes=[G.normalize_dtype(d) for d in outs])
            continue
        if nd.op in opmap.CONST_TYPES:
            G.add_op(g, n, "Const", role="const", dtype=G.normalize_dtype(outs[0]) if outs else "n/a",
                     tf_type=nd.op, out_shapes=info.out_shapes[n])
            continue
        attrs = {}
        if "is_training" in nd.attr:
            attrs["is_training"] = bool(nd.attr["is_training"].b)
        masks = {k: int(nd.attr[k].i) for k in STRIDED_SLICE_MASKS if k in nd.attr}   # read by graph fusion
        ge_t = opmap.ge_type(nd.op, attrs)      # the parser's type; its D variant is graph fusion's (advisor.fusion)
        is_float = (any_float_out or any(d in FLOAT_TF for d in in_dtypes)) and nd.op not in opmap.SHAPE_ONLY
        extra: dict[str, Any] = {}
        if nd.op == "Cast" and "DstT" in nd.attr:
            extra["cast_to"] = G.normalize_dtype(tf.dtypes.as_dtype(nd.attr["DstT"].type).name)
        origin = next((d for d in outs + in_dtypes if d in FLOAT_TF), "float32")
        if G.normalize_dtype(origin) != "fp32":
            extra["origin_dtype"] = G.normalize_dtype(origin)
        extra.update(masks)
        kernel = nd.op not in opmap.NO_KERNEL and nd.op not in opmap.HOST_SHAPE
        G.add_op(g, n, ge_t, role="op", tf_type=nd.op, kernel=kernel, float=is_float,
                 dump=n, in_shapes=[_shape(t) for t in op.inputs], out_shapes=info.out_shapes[n],
                 in_dtypes=[G.normalize_dtype(d) for d in in_dtypes], out_dtypes=[G.normalize_dtype(d) for d in outs],
                 **extra)
        for i, (src, k) in enumerate(srcs):
            if not g.has_node(src):
                continue
            dt = in_dtypes[i] if i < len(in_dtypes) else "float32"
            G.connect(g, src, n, src_out=k, dst_in=i, float=dt in FLOAT_TF)
    for i, n in enumerate(info.order):
        g.nodes[n]["order"] = i
    return g, info
