"""The op graph: one networkx DiGraph that every stage reads and writes.

The graph carries data, not behaviour (networkx style).  Conventions, shared by
ingest, the emulator, the semantics module, compare and recommend:

Node attributes (node key: any hashable, usually the op instance name)
    type       GE op type, exact and case-sensitive ("MatMulV2"); for roles other
               than "op" the GE node type ("Data", "Const", "Variable").
    name       op instance name (defaults to the node key).
    role       "op" | "data" | "const" | "variable".  data = graph input (a real
               producer, fp32 unless ``dtype`` says otherwise); const/variable =
               weights and constants (rank after activation inputs).
    kernel     bool, default True.  False = no kernel (view/reshape): the op
               follows its predecessor's precision.
    decides    bool, default True.  False = kept as a node but excluded from
               precision decisions (HCCL, MemSet, AI_CPU bookkeeping): it passes
               its predecessor's precision through.
    float      bool, default True.  False = the op computes on int/bool tensors
               only; its precision is "n/a".
    dtype      for data/const/variable nodes: "fp32" (default), "fp16", "bf16",
               or a non-float name ("int64", "bool", ...).
    cast_to    for Cast ops, the destination dtype when known ("fp32", "fp16", ...).
    cast_from  for Cast ops, the model's input dtype when known (a GE dump's input origin dtype; else
               ``in_dtypes[0]``, else the producer's dtype): what decides GE's Cast look-through.
    origin_dtype  the op's original float dtype, default "fp32".
    Optional, filled where known: step, order (execution index), stream, core
    (Accelerator Core), duration_us, flops, bytes, in_shapes, out_shapes,
    in_dtypes, out_dtypes (lists of str as executed), dump (activation entry
    name), aten (source aten op for emulator runs), framework_op / phase
    ("fwd"|"bwd") / call_stack (the framework op that launched the kernel, from
    trace_view.json's async_npu flows).

Edge attributes (producer -> consumer)
    ports       list of (producer output index, consumer input index) pairs; a
                producer feeding two inputs of one consumer has two pairs.
    float       bool, default True: the tensor carried is floating point.
    confidence  1.0 for true dataflow (graph dump, emulator trace), < 1.0 when
                inferred from execution order and shapes.
"""
from __future__ import annotations

import gc
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    import networkx as nx

ROLES = ("op", "data", "const", "variable")
FLOAT_DTYPES = ("fp32", "fp16", "bf16", "fp64")

# dtype spellings seen in kernel_details.csv, msprobe dumps, torch and GE dumps
_DTYPE_ALIASES = {
    "float": "fp32", "float32": "fp32", "fp32": "fp32", "dt_float": "fp32", "torch.float32": "fp32",
    "float16": "fp16", "fp16": "fp16", "half": "fp16", "dt_float16": "fp16", "torch.float16": "fp16",
    "dt_bf16": "bf16", "bf16": "bf16", "bfloat16": "bf16", "dt_bfloat16": "bf16", "torch.bfloat16": "bf16",
    "double": "fp64", "float64": "fp64", "dt_double": "fp64", "torch.float64": "fp64",
}


_NORM_CACHE: dict[str, str] = {}


def normalize_dtype(name: Any) -> str:
    """Map any dtype spelling (``FLOAT16``, ``DT_BF16``, ``torch.float32``) to fp32/fp16/bf16/fp64,
    or a lower-case non-float name (``int64``, ``bool``, ``n/a``)."""
    if name.__class__ is str:  # hot path (called per node of 10^6-node graphs): memoized
        r = _NORM_CACHE.get(name)
        if r is None:
            r = _normalize_dtype(name)
            if len(_NORM_CACHE) < 4096:
                _NORM_CACHE[name] = r
        return r
    return _normalize_dtype(name)


def _normalize_dtype(name: Any) -> str:
    if name is None:
        return "n/a"
    s = str(name).strip().lower()
    if not s:
        return "n/a"
    if s in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[s]
    if s.startswith("dt_"):
        s = s[3:]
    if s.startswith("torch."):
        s = s[6:]
    return _DTYPE_ALIASES.get(s, s)


def is_float_dtype(name: Any) -> bool:
    return normalize_dtype(name) in FLOAT_DTYPES


def new_graph(**graph_attrs: Any) -> nx.DiGraph:
    import networkx as nx   # not at import: every command imports this module for its dtype names
    g = nx.DiGraph()
    g.graph.update(graph_attrs)
    return g


def add_op(g: nx.DiGraph, node: Any, type: str, role: str = "op", **attrs: Any) -> Any:
    """Add a node with the conventional attributes (defaults filled in)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    attrs.setdefault("name", str(node))
    g.add_node(node, type=type, role=role, **attrs)
    return node


def connect(g: nx.DiGraph, src: Any, dst: Any, src_out: int = 0, dst_in: int = 0,
            float: bool = True, confidence: float = 1.0) -> None:  # noqa: A002 - attribute name
    """Add the dataflow src[src_out] -> dst[dst_in] (merging ports of a repeated pair)."""
    if g.has_edge(src, dst):
        d = g.edges[src, dst]
        if (src_out, dst_in) not in d["ports"]:
            d["ports"].append((src_out, dst_in))
        d["float"] = d.get("float", True) or float
        d["confidence"] = min(d.get("confidence", 1.0), confidence)
    else:
        g.add_edge(src, dst, ports=[(src_out, dst_in)], float=float, confidence=confidence)


def topological_sort(g: nx.DiGraph) -> list:
    """The nodes in a topological order (networkx's), ValueError when the graph has a cycle."""
    import networkx as nx   # not at import: a command checking its --mode needs only semantics' modes table
    try:
        return list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        raise ValueError("the op graph has a cycle; precision decisions need a DAG") from None


def op_nodes(g: nx.DiGraph) -> Iterable[Any]:
    """Nodes with role "op"."""
    return (n for n, r in g.nodes(data="role", default="op") if r == "op")


def param_reads(g: Any, names: set) -> dict[str, list[str]]:
    """Per op of the graph: the parameters it reads, directly or through ops without a kernel (views)."""
    out: dict[str, list[str]] = {}

    def params_of(n: Any, seen: set) -> list[str]:
        found = []
        for p in g.predecessors(n):
            if p in seen:
                continue
            seen.add(p)
            if p in names:
                found.append(str(p))
            elif not g.nodes[p].get("kernel", True) and g.nodes[p].get("role") == "op":
                found += params_of(p, seen)
        return found
    for n, a in g.nodes(data=True):
        if a.get("role") == "op":
            got = params_of(n, set())
            if got:
                out[str(n)] = got
    return out




def export(g: nx.DiGraph, path: str) -> None:
    """Write the graph as GraphML (.graphml) or Graphviz dot (.dot); list attributes become strings."""
    import networkx as nx
    h = nx.DiGraph()
    for n, d in g.nodes(data=True):
        h.add_node(str(n), **{k: _scalar(v) for k, v in d.items() if v is not None})
    for u, v, d in g.edges(data=True):
        h.add_edge(str(u), str(v), **{k: _scalar(x) for k, x in d.items() if x is not None})
    if path.endswith(".graphml"):
        nx.write_graphml(h, path)
    elif path.endswith(".dot"):
        with open(path, "w", encoding="utf-8") as f:
            f.write("digraph ops {\n")
            for n, d in h.nodes(data=True):
                label = f"{d.get('type', '')} {n}"
                extra = f" precision={_q(d['precision'])}" if "precision" in d else ""
                f.write(f"  {_q(n)} [label={_q(label)}{extra}];\n")
            for u, v in h.edges():
                f.write(f"  {_q(u)} -> {_q(v)};\n")
            f.write("}\n")
    else:
        raise ValueError(f"{path}: export format must be .graphml or .dot")


def _scalar(v: Any) -> Any:
    if isinstance(v, Enum):  # semantics.Rule (a str Enum): its value, a plain str GraphML accepts
        v = v.value
    if isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _q(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


class no_gc:
    """Pause the cyclic garbage collector while building millions of small long-lived containers
    (they hold no cycles; without this CPython rescans the growing heap again and again).

    On exit the objects built are promoted straight to the oldest generation
    (``gc.freeze(); gc.unfreeze()``, two list splices): otherwise the first allocation after
    ``gc.enable()`` runs a young-generation collection over all of them (0.7 s for a 10^6-node
    graph) only to promote them there.  Skipped when the application froze objects itself."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def shape_ints(shape: Any) -> list[int]:
    """A shape as a list of ints, from a list or from the ``"d0,d1"`` cell kernel_details.csv and GE dumps
    write (an unreadable dim is -1; ``""`` is a scalar)."""
    if shape is None:
        return []
    if isinstance(shape, str):
        s = shape.strip().strip("[]()").replace(" ", "")
        if not s:
            return []
        out = []
        for d in s.split(","):
            if d:
                try:
                    out.append(int(d))
                except ValueError:
                    out.append(-1)
        return out
    return [int(d) for d in shape]
