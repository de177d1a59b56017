"""THE semantics module: which precision each op runs in, and why.

Every other stage (emulator, flip predictor, search, reports) calls this module; nothing else
decides an op's effective precision.  Rules (GE ``allow_mix_precision``; sources in
docs/semantics.md), written as small named steps:

``white``            white-list op -> low precision (fp16/bf16), unless it has no low kernel.
``black``            black-list op -> its original dtype (fp32).
``gray-inherit``     gray op -> the precision of the producer of its *first activation input*
                     (inputs fed by a real node first, in index order; then const/variable ones).
``gray-skip-cast``   ... where that producer is a non-black Cast fp16->fp32, the dtype before the Cast.
``gray-const-inputs`` / ``gray-no-producer``
                     gray op fed only by constants/variables, or with no float producer:
                     allow_fp32_to_fp16 -> low precision.
``cast-dtype``       Cast is dtype-sensitive: it produces its destination dtype.
``follow``           ops with no kernel (views) and ops excluded from decisions (HCCL, MemSet,
                     AI_CPU bookkeeping) pass their first input's precision through.
``graph-input`` / ``constant`` / ``non-float``
                     Data nodes are real fp32 producers; constants keep their dtype; int/bool ops are n/a.
Modes: ``mixed_float16``/``mixed_bfloat16`` (and the ``allow_mix_precision*`` aliases) apply the
lists; ``must_keep_origin_dtype`` reduces nothing; ``force_fp32`` keeps fp32; ``force_fp16``
reduces every float op; ``allow_fp32_to_fp16``/``allow_fp32_to_bf16`` reduce cube ops only.

Complexity: ``compile_graph`` is O(V + E) once per graph; ``plan`` is O(V) with a tight loop
(10^5 ops in well under a second); ``what_if`` only revisits the ops downstream of the edited
types along the decision chains.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Hashable, Iterable, Mapping

import networkx as nx

from .graph import no_gc, normalize_dtype
from .oplists import BLACK, WHITE, OpLists, is_cube_type

FP32, FP16, BF16, NA = "fp32", "fp16", "bf16", "n/a"
LOW = (FP16, BF16)

# mode name -> (family, low dtype)
MODES: dict[str, tuple[str, str | None]] = {
    "mixed_float16": ("mixed", FP16),
    "allow_mix_precision": ("mixed", FP16),
    "allow_mix_precision_fp16": ("mixed", FP16),
    "mixed_bfloat16": ("mixed", BF16),
    "allow_mix_precision_bf16": ("mixed", BF16),
    "must_keep_origin_dtype": ("origin", None),
    "origin": ("origin", None),
    "force_fp32": ("force_fp32", None),
    "cube_fp16in_fp32out": ("force_fp32", None),
    "force_fp16": ("force_low", FP16),
    "fp16": ("force_low", FP16),
    "allow_fp32_to_fp16": ("fp32_to_low", FP16),
    "allow_fp32_to_bf16": ("fp32_to_low", BF16),
}
DEFAULT_MODE = "mixed_float16"


def mode_info(mode: str) -> tuple[str, str | None]:
    """(family, low dtype) of a precision_mode / precision_mode_v2 value."""
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"unknown precision mode {mode!r}; choose one of {', '.join(MODES)}") from None


def uses_mixlist(mode: str) -> bool:
    """GE (and the TF adapter) apply a modify_mixlist only in the mixed-precision modes."""
    return mode_info(mode)[0] == "mixed"


@dataclass(frozen=True)
class Why:
    """Why an op got its precision: the rule, the immediate predecessor that decided it
    (None for rules that need none) and the root op whose own rule started the chain."""

    rule: str
    via: Hashable | None = None
    root: Hashable | None = None

    def to_dict(self) -> dict:
        return {"rule": self.rule, "via": _s(self.via), "root": _s(self.root)}


def _s(x: Any) -> Any:
    return None if x is None else str(x)


# node kinds in the compiled graph
_OP, _DATA, _CONST, _NONFLOAT, _FOLLOW, _CAST = range(6)
# decider kinds
_D_REAL, _D_WEAK, _D_NONE = 0, 1, 2


class Compiled:
    """A graph prepared for repeated planning: topological order, each op's decider (the producer
    of its first activation input) and static per-node facts.  Build with ``compile_graph``."""

    def __init__(self, g: nx.DiGraph):
        order = _topological_order(g)
        self.graph = g
        self.order = order
        idx = {n: i for i, n in enumerate(order)}
        self.index = idx
        n = len(order)
        self.types: list[str] = [""] * n
        self.kind = [0] * n
        self.dtype: list[str] = [FP32] * n       # data/const dtype, Cast destination, origin dtype
        self.low_kernel = [True] * n
        self.decider = [-1] * n
        self.dkind = [_D_NONE] * n
        self.children: list[list[int]] = [[] for _ in range(n)]
        weak = [False] * n
        nodes = g._node  # networkx's node -> attributes dict (no view call per node)
        pred = g._pred  # adjacency of predecessors: {node: {pred: edge data}}
        for i, node in enumerate(order):
            a = nodes[node]
            t = a.get("type", "")
            self.types[i] = t
            role = a.get("role", "op")
            if role == "data":
                self.kind[i] = _DATA
                self.dtype[i] = normalize_dtype(a.get("dtype", FP32))
                continue
            if role in ("const", "variable"):
                self.kind[i] = _CONST
                self.dtype[i] = normalize_dtype(a.get("dtype", FP32))
                weak[i] = True
                continue
            # rank float inputs: real producers first (index order), then weak ones
            best_real = best_weak = None
            for src, d in pred[node].items():
                if not d.get("float", True):
                    continue
                j = idx[src]
                ports = d.get("ports", _PORT0)
                in_idx = ports[0][1] if len(ports) == 1 else min(p[1] for p in ports)
                if weak[j]:
                    if best_weak is None or in_idx < best_weak[0]:
                        best_weak = (in_idx, j)
                elif best_real is None or in_idx < best_real[0]:
                    best_real = (in_idx, j)
            if best_real is not None:
                self.decider[i], self.dkind[i] = best_real[1], _D_REAL
            elif best_weak is not None:
                self.decider[i], self.dkind[i] = best_weak[1], _D_WEAK
            if self.decider[i] >= 0:
                self.children[self.decider[i]].append(i)
            self.dtype[i] = normalize_dtype(a.get("origin_dtype", FP32))
            if not a.get("float", True):
                self.kind[i] = _NONFLOAT
            elif not a.get("kernel", True) or not a.get("decides", True):
                self.kind[i] = _FOLLOW
                # a view of a weight is still a weight for its consumers' input ranking
                weak[i] = self.dkind[i] == _D_WEAK
            elif t == "Cast" and a.get("cast_to"):
                self.kind[i] = _CAST
                self.dtype[i] = normalize_dtype(a["cast_to"])
            else:
                self.kind[i] = _OP
                self.low_kernel[i] = a.get("low_kernel", True)

    def __len__(self) -> int:
        return len(self.order)

    # ------------------------------------------------------------------ rules
    def _decide(self, i: int, prec: list[str], root: list[int], lists: OpLists,
                family: str, low: str | None) -> tuple[str, str, int, int]:
        """(precision, rule, via index or -1, root index) of node i, predecessors decided."""
        kind = self.kind[i]
        if kind == _DATA:
            return self.dtype[i], "graph-input", -1, i
        if kind == _CONST:
            return self.dtype[i], "constant", -1, i
        if kind == _NONFLOAT:
            return NA, "non-float", -1, i
        d = self.decider[i]
        if kind == _FOLLOW:
            if d < 0:
                return (low or self.dtype[i]) if family in ("mixed", "force_low") else self.dtype[i], "follow", -1, i
            p = prec[d]
            return (p if p != NA else self.dtype[i]), "follow", d, root[d]
        if kind == _CAST:
            return self.dtype[i], "cast-dtype", -1, i
        origin = self.dtype[i]
        if family == "origin":
            return origin, "must_keep_origin_dtype", -1, i
        if family == "force_fp32":
            return FP32, "force_fp32", -1, i
        if family == "force_low":
            return low, "force_fp16", -1, i
        t = self.types[i]
        if family == "fp32_to_low":
            if is_cube_type(t):
                return low, "allow_fp32_to_low-cube", -1, i
            return origin, "allow_fp32_to_low-vector", -1, i
        # mixed precision: the lists
        cls = lists.list_of(t)
        if cls == WHITE:
            if self.low_kernel[i]:
                return low, "white", -1, i
            return origin, "white-no-low-kernel", -1, i
        if cls == BLACK:
            return origin, "black", -1, i
        if t == "Cast":  # Cast without a known destination: allow_fp32_to_fp16
            return low, "cast-allow_fp32_to_fp16", -1, i
        if d < 0:
            return low, "gray-no-producer", -1, i
        if self.dkind[i] == _D_WEAK:
            return low, "gray-const-inputs", d, i
        p = prec[d]
        if p == NA:
            return low, "gray-no-producer", d, i
        if (p == FP32 and self.kind[d] == _CAST and lists.list_of("Cast") != BLACK
                and self.decider[d] >= 0 and prec[self.decider[d]] in LOW):
            c = self.decider[d]
            return prec[c], "gray-skip-cast", c, root[c]
        return p, "gray-inherit", d, root[d]

    def plan(self, lists: OpLists, mode: str = DEFAULT_MODE) -> "Plan":
        family, low = mode_info(mode)
        n = len(self.order)
        prec: list[str] = [FP32] * n
        rule: list[str] = [""] * n
        via = [-1] * n
        root = list(range(n))
        decide = self._decide
        for i in range(n):
            prec[i], rule[i], via[i], root[i] = decide(i, prec, root, lists, family, low)
        return Plan(self, lists, mode, prec, rule, via, root)

    def what_if(self, base: "Plan", lists: OpLists) -> "Plan":
        """Plan for ``lists`` computed incrementally from ``base`` (same mode): only ops whose type
        changed list, and ops downstream of them along decision chains, are revisited."""
        if base.compiled is not self:
            raise ValueError("base plan belongs to another compiled graph")
        family, low = mode_info(base.mode)
        changed = {t for t in (base.lists.white ^ lists.white) | (base.lists.black ^ lists.black)}
        prec, rule, via, root = list(base.precision_list), list(base.rules), list(base.vias), list(base.roots)
        if changed and family == "mixed":
            heap = [i for i, t in enumerate(self.types) if t in changed]
            heapq.heapify(heap)
            seen = set()
            while heap:
                i = heapq.heappop(heap)
                if i in seen:
                    continue
                seen.add(i)
                new = self._decide(i, prec, root, lists, family, low)
                old = (prec[i], rule[i], via[i], root[i])
                prec[i], rule[i], via[i], root[i] = new
                # a Cast always propagates: its gray consumers look through it (gray-skip-cast)
                if new != old or self.kind[i] == _CAST:
                    for c in self.children[i]:
                        heapq.heappush(heap, c)
        return Plan(self, lists, base.mode, prec, rule, via, root)


_PORT0 = [(0, 0)]


def _topological_order(g: nx.DiGraph) -> list:
    """Insertion order when it already is topological (graphs are built in execution order),
    else a topological sort."""
    order = list(g)
    pos = {n: i for i, n in enumerate(order)}
    if all(pos[u] < pos[v] for u, v in g.edges()):
        return order
    # graphs whose inputs were added after the ops (kernel graphs: inferred data nodes) are
    # topological once the nodes without predecessors go first, each group in insertion order
    pred = g._pred
    order = [n for n in order if not pred[n]] + [n for n in order if pred[n]]
    pos = {n: i for i, n in enumerate(order)}
    if all(pos[u] < pos[v] for u, v in g.edges()):
        return order
    try:
        return list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        raise ValueError("the op graph has a cycle; precision decisions need a DAG") from None


def compile_graph(g: nx.DiGraph) -> Compiled:
    # the build allocates many small objects; cyclic GC passes over a big graph would dominate
    with no_gc():
        return Compiled(g)


class Plan:
    """Every node's precision with its reason.  ``precision`` / ``why`` map node -> value."""

    def __init__(self, compiled: Compiled, lists: OpLists, mode: str, prec: list[str], rules: list[str],
                 vias: list[int], roots: list[int]):
        self.compiled, self.lists, self.mode = compiled, lists, mode
        self.precision_list, self.rules, self.vias, self.roots = prec, rules, vias, roots

    @cached_property
    def precision(self) -> dict[Hashable, str]:
        """node -> precision (built once; a plan is never changed after it is made)."""
        return dict(zip(self.compiled.order, self.precision_list))

    def __getitem__(self, node: Hashable) -> str:
        return self.precision_list[self.compiled.index[node]]

    def why(self, node: Hashable) -> Why:
        i = self.compiled.index[node]
        order = self.compiled.order
        v, r = self.vias[i], self.roots[i]
        return Why(self.rules[i], order[v] if v >= 0 else None, order[r] if r >= 0 else None)

    def is_low(self, node: Hashable) -> bool:
        return self[node] in LOW

    def items(self) -> Iterable[tuple[Hashable, str]]:
        return zip(self.compiled.order, self.precision_list)

    def to_records(self) -> list[dict]:
        out = []
        for i, node in enumerate(self.compiled.order):
            w = self.why(node)
            out.append({"node": str(node), "type": self.compiled.types[i], "precision": self.precision_list[i],
                        **w.to_dict()})
        return out


@dataclass(frozen=True)
class Flip:
    node: Hashable
    type: str
    before: str
    after: str
    why_before: Why
    why_after: Why

    def to_dict(self) -> dict:
        return {"node": str(self.node), "type": self.type, "before": self.before, "after": self.after,
                "why_before": self.why_before.to_dict(), "why_after": self.why_after.to_dict()}


def flips_between(a: Plan, b: Plan) -> list[Flip]:
    """Op instances whose precision differs between two plans of the same graph, in topological order."""
    if a.compiled is not b.compiled:
        raise ValueError("plans of different graphs")
    c = a.compiled
    out = []
    for i, (pa, pb) in enumerate(zip(a.precision_list, b.precision_list)):
        if pa != pb:
            node = c.order[i]
            out.append(Flip(node, c.types[i], pa, pb, a.why(node), b.why(node)))
    return out


# ---------------------------------------------------------------------- convenience API
def plan(g: nx.DiGraph | Compiled, lists: OpLists, mode: str = DEFAULT_MODE) -> Plan:
    """Every op's precision under ``lists`` (the effective lists) and ``mode``."""
    c = g if isinstance(g, Compiled) else compile_graph(g)
    return c.plan(lists, mode)


def what_if(g: nx.DiGraph | Compiled, lists: OpLists, edited: OpLists, mode: str = DEFAULT_MODE,
            base: Plan | None = None) -> list[Flip]:
    """Op instances whose precision flips when the effective lists go from ``lists`` to ``edited``."""
    c = g if isinstance(g, Compiled) else compile_graph(g)
    if base is None or base.lists != lists or base.mode != mode:
        base = c.plan(lists, mode)
    return flips_between(base, c.what_if(base, edited))


def annotate(g: nx.DiGraph, p: Plan) -> None:
    """Write ``precision`` and ``why`` node attributes (for export and reports)."""
    nodes = g._node  # networkx's node -> attribute dict (g.nodes[n] costs a view call per node)
    with no_gc():
        for node, prec, rule in zip(p.compiled.order, p.precision_list, p.rules):
            a = nodes[node]
            a["precision"] = prec
            a["why"] = rule


def type_precision_summary(p: Plan, weights: Mapping[Hashable, float] | None = None) -> dict[str, dict[str, float]]:
    """Per op type: how many instances (or how much weight) run in each precision."""
    out: dict[str, dict[str, float]] = {}
    c = p.compiled
    for i, node in enumerate(c.order):
        if c.kind[i] not in (_OP, _CAST, _FOLLOW):
            continue
        w = 1.0 if weights is None else float(weights.get(node, 0.0))
        d = out.setdefault(c.types[i], {})
        d[p.precision_list[i]] = d.get(p.precision_list[i], 0.0) + w
    return out
