"""The fusion stage's machinery: what a pass sees of the op graph, the two rewrites a pass can make, and what
the stage hands on (``FusionResult``).

Passes never decide a precision; they change the graph GE's precision judge later sees (docs/semantics.md,
"Fusion before the judge"):

* ``retype`` (one-node passes): the node keeps its name, inputs and outputs; its ``type`` becomes the
  post-fusion type; ``pre_fusion_type`` keeps the type it had before any pass and ``fused_by`` the passes that
  changed it.  A node GE *removes* (a mean over size-1 axes) stays as a kernel-less ``Identity`` (``kernel``
  False): its consumers then follow its input exactly as they would follow the input GE connects them to.
* ``contract`` (multi-node passes): the matched nodes become one GE op node that records ``members`` (their
  pre-fusion names, in execution order), ``member_types``, ``fused_by``, and how its ports map onto the
  members' (``ports_in`` / ``ports_out``: ``[member, member port]`` per fused port; ``attr_ports``: member
  inputs the fused op takes as attributes) and which members' outputs never leave the fused kernel
  (``internal``).

All passes together are O(V + E): each pass visits the nodes of its anchor type once and looks at a bounded
neighbourhood of each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

import networkx as nx

from ..graph import connect, normalize_dtype, shape_ints

FLOATS = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class Rewrite:
    """One rewrite a pass made: the post-fusion node, its pre-fusion members (one for a one-node pass) and types."""

    pass_name: str
    node: Hashable
    members: tuple[str, ...]
    before: tuple[str, ...]
    after: str

    def describe(self) -> str:
        """``Aten.add.Tensor.3 + Aten.native_layer_norm.default.1 fused into AddLayerNorm by
        AddLayerNormFusionPass``."""
        if self.pass_name == "TransNodeMerging":
            return (f"{' + '.join(self.members)} (Casts {self.after}) removed by TransNodeMerging after the "
                    "precision judge")
        if len(self.members) == 1:
            if self.after == "Identity":
                return f"{self.members[0]} ({self.before[0]}) removed by {self.pass_name}"
            return f"{self.members[0]} ({self.before[0]}) became {self.after} by {self.pass_name}"
        return f"{' + '.join(self.members)} fused into {self.after} by {self.pass_name}"

    def to_dict(self) -> dict:
        return {"pass": self.pass_name, "node": str(self.node), "members": list(self.members),
                "before": list(self.before), "after": self.after}


@dataclass(frozen=True)
class Member:
    """How one pre-fusion op of a contracted node executes: ``node`` its fused node, ``last`` it produces the
    fused node's first output, ``round_out`` its outputs leave the fused kernel (rounded to the kernel's
    dtype), ``internal_in`` its input indices fed by another member (never rounded between members)."""

    node: Hashable
    last: bool
    round_out: bool
    internal_in: frozenset[int]


@dataclass
class FusionResult:
    """The post-fusion graph and how every pre-fusion op maps onto it."""

    graph: nx.DiGraph
    rewrites: list[Rewrite] = field(default_factory=list)
    mapping: dict[str, Hashable] = field(default_factory=dict)     # pre-fusion name -> post-fusion node
    members: dict[str, Member] = field(default_factory=dict)       # members of contracted nodes only

    def node_of(self, name: Hashable) -> Hashable:
        """The post-fusion node that decides the precision of the pre-fusion op ``name``."""
        return self.mapping.get(name, name)

    def describe(self) -> list[str]:
        return [r.describe() for r in self.rewrites]


@dataclass(frozen=True)
class Context:
    """What the passes read besides the graph: the chip, whether an op type has a kernel on it (GE's
    ``CheckOpSupported`` of the fused op), and whether the graph is a training graph."""

    soc: str
    supported: Callable[[str], bool]
    training: bool = False
    position: dict = field(default_factory=dict)    # node -> execution position (members are ordered by it)


# ---------------------------------------------------------------------- reading the graph
def attrs(g: nx.DiGraph, n: Hashable) -> dict:
    return g._node[n]  # networkx's node -> attribute dict (no view per call)


def in_ports(g: nx.DiGraph, n: Hashable) -> dict[int, tuple[Hashable, int]]:
    """consumer input index -> (producer, producer output index)."""
    out: dict[int, tuple[Hashable, int]] = {}
    for u, d in g._pred[n].items():
        for o, i in d.get("ports", ((0, 0),)):
            out[int(i)] = (u, int(o))
    return out


def uses(g: nx.DiGraph, n: Hashable, port: int | None = None) -> list[tuple[Hashable, int, int]]:
    """(consumer, producer output index, consumer input index) of every read of ``n``'s outputs (of ``port``)."""
    out = []
    for v, d in g._succ[n].items():
        for o, i in d.get("ports", ((0, 0),)):
            if port is None or int(o) == port:
                out.append((v, int(o), int(i)))
    return out


def n_uses(g: nx.DiGraph, n: Hashable, port: int = 0) -> int:
    """How many consumers read output ``port`` of ``n`` (GE's ``GetPeerAnchorsSize``), a model output counting
    as one (GE's NetOutput reads it)."""
    net = attrs(g, n).get("net_outputs") or ()
    return len(uses(g, n, port)) + sum(1 for p in net if int(p) == port)


def producer(g: nx.DiGraph, n: Hashable, i: int) -> tuple[Hashable, int] | None:
    return in_ports(g, n).get(i)


def is_op(g: nx.DiGraph, n: Hashable, *types: str) -> bool:
    a = attrs(g, n)
    return a.get("role", "op") == "op" and (not types or a.get("type") in types)


# Shape ops GE computes on the host and folds into constants before its graph fusion when their input's shape is
# known: DimensionComputePass in InferShapeForPreprocess (graph_prepare.cc:2433-2434, the "Prepare" stage,
# graph_manager.cc:1132, before OptimizeOriginalGraph :1133), host kernels Shape/ShapeN/Size/Rank
# (compiler/host_kernels/array_ops/shape_kernel.cc:41-44: NOT_CHANGED for an unknown shape).
FOLDED_SHAPE_TYPES = frozenset({"Shape", "ShapeN", "Size", "Rank"})


def is_const(g: nx.DiGraph, n: Hashable) -> bool:
    """A Const/Variable producer (GE's ``GetInputConstData`` reads a Const; weights are folded constants of a
    frozen inference graph), or a shape op of a known shape, which GE folds into one first (``FOLDED_SHAPE_TYPES``)."""
    a = attrs(g, n)
    role = a.get("role", "op")
    if role in ("const", "variable"):
        return True
    ins = a.get("in_shapes") or ()
    return (role == "op" and a.get("type") in FOLDED_SHAPE_TYPES and bool(ins) and all(s is not None for s in ins)
            and static(a))


def const_input(g: nx.DiGraph, n: Hashable, i: int) -> bool:
    """Input ``i`` of ``n`` is a constant.  An input the framework op takes as an attribute (aten's ``dim``
    list, an ONNX attribute) has no tensor edge at all: GE's converters turn it into a Const input, so a
    missing input counts as constant (choice)."""
    src = in_ports(g, n).get(i)
    return src is None or is_const(g, src[0])


def shape(a: dict, kind: str, i: int) -> list[int] | None:
    """Shape of input/output ``i`` as ints (None when unknown)."""
    s = a.get(f"{kind}_shapes") or []
    if i >= len(s) or s[i] is None:
        return None
    return shape_ints(s[i])


def static(a: dict) -> bool:
    """No unknown dimension (-1 / -2) among the node's described shapes; undescribed shapes count as static
    (choice: emulator graphs always have shapes, GE dumps describe them)."""
    for kind in ("in_shapes", "out_shapes"):
        for s in a.get(kind) or ():
            if s is None:
                continue
            if any(d < 0 for d in shape_ints(s)):
                return False
    return True


def dtype(a: dict, kind: str, i: int) -> str:
    """The dtype of input/output ``i`` before the precision judge (a GE dump's origin dtype when it has one)."""
    d = (a.get("in_origin_dtypes") if kind == "in" else None) or a.get(f"{kind}_dtypes") or []
    return normalize_dtype(d[i]) if i < len(d) else "n/a"


def numel(s: list[int] | None) -> int | None:
    return None if s is None else math.prod(s)


def const_value(g: nx.DiGraph, n: Hashable, i: int) -> Any:
    """The recorded value of a small constant feeding input ``i`` (a ``value`` attribute), or None."""
    src = in_ports(g, n).get(i)
    return attrs(g, src[0]).get("value") if src is not None and is_const(g, src[0]) else None


# ---------------------------------------------------------------------- rewrites
def retype(g: nx.DiGraph, n: Hashable, new_type: str, pass_name: str, **extra: Any) -> Rewrite:
    """One-node pass: ``n`` becomes ``new_type`` (its pre-fusion type kept, the pass recorded)."""
    a = attrs(g, n)
    before = a.get("type", "")
    a.setdefault("pre_fusion_type", before)
    a["fused_by"] = f"{a['fused_by']}, {pass_name}" if a.get("fused_by") else pass_name
    a["type"] = new_type
    a.update(extra)
    return Rewrite(pass_name, n, (str(a.get("name", n)),), (str(a["pre_fusion_type"]),), new_type)


def remove(g: nx.DiGraph, n: Hashable, pass_name: str) -> Rewrite:
    """GE deletes ``n`` and connects its consumers to its input: kept as a kernel-less Identity they follow."""
    return retype(g, n, "Identity", pass_name, kernel=False)


def _members_of(g: nx.DiGraph, n: Hashable) -> tuple[list[str], list[str]]:
    a = attrs(g, n)
    if a.get("members"):
        return list(a["members"]), list(a.get("member_types") or [])
    return [str(a.get("name", n))], [str(a.get("pre_fusion_type", a.get("type", "")))]


def contract(g: nx.DiGraph, nodes: list[Hashable], new_type: str, pass_name: str, name: str | None = None,
             first_out: Hashable | None = None, attributes: Iterable[Hashable] = ()) -> Rewrite:
    """Multi-node pass: ``nodes`` (in execution order) become one node of ``new_type`` named ``name`` (default:
    the last node's name), placed where the last one was.  Its inputs are the members' inputs from outside, in
    member order then input order; output 0.. are ``first_out``'s (default: the last member's) outputs, then the
    other members' outputs read outside, in member order.  ``attributes``: constant producers whose values
    the fused op takes as attributes (an epsilon): not inputs of the fused node."""
    group, dropped = set(nodes), set(attributes)
    last = nodes[-1]
    head = first_out if first_out is not None else last
    key = name if name is not None else attrs(g, last).get("name", last)
    ins: list[tuple[Hashable, int, Hashable, int]] = []   # (producer, out port, member, member input)
    attr_ports: list[list] = []                           # [member, input] the fused op takes as an attribute
    for n in nodes:
        for i, (u, o) in sorted(in_ports(g, n).items()):
            if u in dropped:
                attr_ports.append(_orig_port(g, n, "ports_in", i))
            elif u not in group:
                ins.append((u, o, n, i))
    outs = _exported(g, nodes, head, group)
    out_index = {(n, p): k for k, (n, p) in enumerate(outs)}
    reads = [(v, out_index[(n, int(o))], int(i), d.get("float", True))   # (consumer, fused out, its input, float)
             for n in nodes for v, d in g._succ[n].items() if v not in group for o, i in d.get("ports", ((0, 0),))]
    new = _fused_attrs(g, nodes, head, new_type, pass_name, str(key), ins, outs)
    if attr_ports:
        new["attr_ports"] = attr_ports
    net = [out_index[(n, int(p))] for n in nodes for p in attrs(g, n).get("net_outputs") or ()]
    if net:
        new["net_outputs"] = net
    in_edges = [(u, o, k, _edge_float(g, u, m)) for k, (u, o, m, _) in enumerate(ins)]
    pos = g.graph.setdefault("_fusion_pos", {})
    pos[key] = pos.pop(last, last)          # the original slot of the last member (itself maybe fused)
    for n in nodes:
        g.remove_node(n)
    if key in g:
        raise ValueError(f"fusion: {key!r} is already a node of the graph")
    g.add_node(key, **new)
    for u, o, k, fl in in_edges:
        connect(g, u, key, o, k, float=fl)
    for v, o, i, fl in reads:
        connect(g, key, v, o, i, float=fl)
    return Rewrite(pass_name, key, tuple(new["members"]), tuple(new["member_types"]), new_type)


def _exported(g: nx.DiGraph, nodes: list, head: Hashable, group: set) -> list[tuple[Hashable, int]]:
    """The fused node's outputs as (member, port): all of ``head``'s, then the other members' outputs read outside
    the group (or returned by the step)."""
    outs: list[tuple[Hashable, int]] = []
    for n in [head] + [n for n in nodes if n != head]:
        a = attrs(g, n)
        ports = sorted({o for v, o, _i in uses(g, n) if v not in group} | {int(p) for p in a.get("net_outputs") or ()})
        if n == head:
            width = max([len(a.get("out_shapes") or ()), len(a.get("out_dtypes") or ())] + [p + 1 for p in ports] + [1])
            ports = list(range(width))
        outs += [(n, p) for p in ports]
    return outs


def _fused_attrs(g: nx.DiGraph, nodes: list, head: Hashable, new_type: str, pass_name: str, key: str,
                 ins: list, outs: list) -> dict:
    """The attributes of the node that replaces ``nodes`` (docs/formats.md, "Fusion attributes of a node")."""
    members: list[str] = []
    mtypes: list[str] = []
    for n in nodes:
        ms, ts = _members_of(g, n)
        members += ms
        mtypes += ts
    exported = {n for n, _ in outs}
    internal: list[str] = []
    for n in nodes:      # members whose outputs never leave the kernel (a fused member keeps its own list)
        internal += list(attrs(g, n).get("internal") or []) if n in exported else _members_of(g, n)[0]
    la, ha = attrs(g, nodes[-1]), attrs(g, head)
    new = {"type": new_type, "name": key, "role": "op", "kernel": True, "decides": True,
           "float": any(attrs(g, n).get("float", True) for n in nodes),
           "origin_dtype": ha.get("origin_dtype", la.get("origin_dtype", "fp32")),
           "members": members, "member_types": mtypes, "fused_by": pass_name,
           "ports_in": [_orig_port(g, m, "ports_in", i) for _, _, m, i in ins],
           "ports_out": [_orig_port(g, m, "ports_out", p) for m, p in outs],
           "internal": internal, "dump": str(ha.get("dump") or ha.get("name", head)),
           "in_shapes": [_port(attrs(g, m), "in_shapes", i) for _, _, m, i in ins],
           "in_dtypes": [_port(attrs(g, m), "in_dtypes", i) for _, _, m, i in ins],
           "out_shapes": [_port(attrs(g, m), "out_shapes", p) for m, p in outs],
           "out_dtypes": [_port(attrs(g, m), "out_dtypes", p) for m, p in outs]}
    for k in ("order", "step", "stream", "phase", "framework_op", "aten", "mapped"):
        if k in la:
            new[k] = la[k]
    blobs: dict[str, str] = {}          # an ONNX run's members, for replay (advisor.onnx.replay)
    for n in nodes:
        a = attrs(g, n)
        blobs.update(a.get("member_onnx") or {})
        if a.get("onnx_node"):
            blobs[str(a.get("name", n))] = a["onnx_node"]
            new["onnx_opset"] = a.get("onnx_opset")
    if blobs:
        new["member_onnx"] = blobs
    return new


def _orig_port(g: nx.DiGraph, n: Hashable, kind: str, i: int) -> list:
    """[pre-fusion member, its port] behind port ``i`` of ``n`` (through an earlier contraction)."""
    ports = attrs(g, n).get(kind)
    if ports and i < len(ports):
        return list(ports[i])
    return [str(attrs(g, n).get("name", n)), i]


def _edge_float(g: nx.DiGraph, u: Hashable, v: Hashable) -> bool:
    return g._succ[u][v].get("float", True)


def _port(a: dict, key: str, i: int) -> Any:
    v = a.get(key) or []
    return v[i] if i < len(v) else None


def copy_graph(g: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``g`` with its own node and edge attribute dicts (lists inside are shared: passes replace
    attributes, never mutate them), built straight into networkx's adjacency dicts (``Graph.copy`` goes through
    ``add_nodes_from`` / ``add_edges_from``, several times slower on 10^5 nodes)."""
    h = g.__class__()
    h.graph.update(g.graph)
    h._node.update((n, a.copy()) for n, a in g._node.items())
    succ, pred = h._adj, h._pred
    for n in g._node:
        succ[n] = {}
        pred[n] = {}
    for u, nbrs in g._adj.items():
        su = succ[u]
        for v, d in nbrs.items():
            dd = d.copy()
            su[v] = dd
            pred[v][u] = dd
    return h


def reorder(g: nx.DiGraph) -> nx.DiGraph:
    """Place every contracted node where its last member was, in place (insertion order stays the execution
    order, which the semantics module takes as its topological order when it is one): the node and adjacency
    dicts are re-inserted in that order."""
    pos = g.graph.pop("_fusion_pos", None)
    slots = g.graph.pop("_fusion_order", None) or []
    if not pos:
        return g
    at = {p: k for k, p in pos.items()}
    nodes = g._node
    order: list = []
    seen: set = set()
    for n in slots:                 # the original insertion order, each fused node at its last member's slot
        if n in at:
            k = at[n]
        elif n in pos:              # a fused node reusing a member's name, away from its own slot
            continue
        else:
            k = n
        if k in nodes and k not in seen:
            order.append(k)
            seen.add(k)
    order += [n for n in nodes if n not in seen]
    for d in (g._node, g._adj, g._pred):
        for n in order:
            d[n] = d.pop(n)
    return g


def float_inputs(g: nx.DiGraph, n: Hashable) -> Iterable[tuple[int, Hashable, int]]:
    for i, (u, o) in sorted(in_ports(g, n).items()):
        if g._succ[u][n].get("float", True):
            yield i, u, o
