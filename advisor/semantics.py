"""THE semantics module: which precision each op runs in, and why.

Every other stage (emulator, flip predictor, replay, search, reports) calls this module; nothing else
decides an op's effective precision.  Rules (GE ``allow_mix_precision``; sources in docs/semantics.md) are
named steps (``Rule`` names what each decided, ``Why`` carries it with the deciding predecessor and root),
chosen per node by its ``NodeKind`` and, for ops, by the mode family or the list its type is in:

``graph_input``      Data nodes are real producers in their own dtype (``graph-input``).
``constant``         constants/variables keep their dtype (``constant``).
``non_float``        int/bool ops: ``n/a`` (``non-float``).
``follow``           ops with no kernel (views) and ops excluded from decisions (HCCL, MemSet, AI_CPU
                     bookkeeping) pass their first input's precision through (``follow``).
``cast_dtype``       Cast is dtype-sensitive: it produces its destination dtype (``cast-dtype``).
``white``            white-list op -> low precision (fp16/bf16), unless it has no low kernel.
``black``            black-list op -> its original dtype (fp32).
``gray``             gray op -> the precision of the producer of its *first activation input* (inputs fed
                     by a real node first, in index order; then const/variable ones) (``gray-inherit``);
                     where that producer is a non-black Cast fp16->fp32, the dtype before the Cast
                     (``gray-skip-cast``); fed only by constants/variables, with no float producer, or a Cast
                     with no known destination: allow_fp32_to_fp16 -> low precision
                     (``gray-const-inputs`` / ``gray-no-producer`` / ``cast-allow_fp32_to_fp16``).
``mode_*``           the other modes: ``must_keep_origin_dtype`` reduces nothing; ``force_fp32`` keeps fp32;
                     ``force_fp16`` reduces every float op; ``allow_fp32_to_fp16``/``allow_fp32_to_bf16``
                     reduce cube ops only.
Modes: ``mixed_float16``/``mixed_bfloat16`` (and the ``allow_mix_precision*`` aliases) apply the lists.

Complexity: ``compile_graph`` is O(V + E) once per graph; ``plan`` is O(V) with a tight loop
(10^5 ops in well under a second); ``what_if`` only revisits the ops downstream of the edited
types along the decision chains.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum, IntEnum
from functools import cached_property
from typing import Any, Hashable, Iterable, Mapping

import networkx as nx

from .graph import no_gc, normalize_dtype
from .oplists import BLACK, GRAY, WHITE, OpLists, is_cube_type

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


class Rule(str, Enum):
    """The named rules of the decision chain (values are the strings reports and JSON carry)."""

    GRAPH_INPUT = "graph-input"
    CONSTANT = "constant"
    NON_FLOAT = "non-float"
    FOLLOW = "follow"
    CAST_DTYPE = "cast-dtype"
    ORIGIN = "must_keep_origin_dtype"
    FORCE_FP32 = "force_fp32"
    FORCE_LOW = "force_fp16"
    FP32_TO_LOW_CUBE = "allow_fp32_to_low-cube"
    FP32_TO_LOW_VECTOR = "allow_fp32_to_low-vector"
    WHITE = "white"
    WHITE_NO_LOW_KERNEL = "white-no-low-kernel"
    BLACK = "black"
    CAST_ALLOW = "cast-allow_fp32_to_fp16"
    GRAY_NO_PRODUCER = "gray-no-producer"
    GRAY_CONST_INPUTS = "gray-const-inputs"
    GRAY_SKIP_CAST = "gray-skip-cast"
    GRAY_INHERIT = "gray-inherit"

    def __str__(self) -> str:
        return self.value


# rules under which an op runs fp32 only because of its list or its producer (not its mode or role)
FP32_BY_LIST = frozenset({Rule.BLACK, Rule.GRAY_INHERIT, Rule.GRAY_SKIP_CAST})
# rules under which an op's precision is inherited from a predecessor
INHERITED = frozenset({Rule.GRAY_INHERIT, Rule.GRAY_SKIP_CAST, Rule.FOLLOW})


class NodeKind(IntEnum):
    """What a node of the compiled graph is, for the decision chain."""

    OP = 0          # a kernel with a precision decision
    DATA = 1        # graph input (a real producer)
    CONST = 2       # constant / variable (weak producer: ranks after activations)
    NONFLOAT = 3    # int/bool op: precision n/a
    FOLLOW = 4      # no kernel (view) or excluded from decisions (HCCL, MemSet): passes its input's precision
    CAST = 5        # Cast with a known destination dtype


@dataclass(frozen=True)
class Why:
    """Why an op got its precision: the rule, the immediate predecessor that decided it
    (None for rules that need none) and the root op whose own rule started the chain."""

    rule: str
    via: Hashable | None = None
    root: Hashable | None = None

    def to_dict(self) -> dict:
        return {"rule": str(self.rule), "via": _s(self.via), "root": _s(self.root)}


def _s(x: Any) -> Any:
    return None if x is None else str(x)


# plain ints in the hot loops (an IntEnum comparison costs several times more)
_OP, _DATA, _CONST, _NONFLOAT, _FOLLOW, _CAST = (int(k) for k in NodeKind)
# decider kinds
_D_REAL, _D_WEAK, _D_NONE = 0, 1, 2


class Context:
    """What the rules read besides the compiled graph: the effective lists and the mode."""

    __slots__ = ("lists", "family", "low", "cast_black", "_by_type")

    def __init__(self, lists: OpLists, family: str, low: str | None):
        self.lists, self.family, self.low = lists, family, low
        self.cast_black = lists.list_of("Cast") == BLACK
        self._by_type: dict[str, Any] = {}

    def op_step(self, op_type: str):
        """The step deciding an op of this type: its list's step in the mixed modes, else the mode's."""
        step = self._by_type.get(op_type)
        if step is None:
            step = self._by_type[op_type] = (LIST_STEPS[self.lists.list_of(op_type)] if self.family == "mixed"
                                             else OP_STEP_BY_FAMILY[self.family])
        return step


Decision = tuple  # (precision, Rule, via index or -1, root index)


# ---------------------------------------------------------------------- the decision chain, step by step
# Each step decides node i given its predecessors' decisions (``prec``, ``root``); steps are chosen by the
# node's kind, and for ops by the mode family (``STEPS_BY_KIND``, ``OP_STEP_BY_FAMILY``).
def graph_input(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """Data nodes are real producers in their own dtype (an fp32 model input keeps a gray consumer fp32)."""
    return c.dtype[i], Rule.GRAPH_INPUT, -1, i


def constant(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """Constants and variables keep their dtype."""
    return c.dtype[i], Rule.CONSTANT, -1, i


def non_float(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """int/bool ops have no float precision."""
    return NA, Rule.NON_FLOAT, -1, i


def follow(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """No kernel (views) or excluded from decisions: the first input's precision passes through; with no
    float input, the mode's default."""
    d = c.decider[i]
    if d < 0:
        return (ctx.low or c.dtype[i]) if ctx.family in ("mixed", "force_low") else c.dtype[i], Rule.FOLLOW, -1, i
    p = prec[d]
    return (p if p != NA else c.dtype[i]), Rule.FOLLOW, d, root[d]


def cast_dtype(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """Cast is dtype-sensitive: it produces its destination dtype."""
    return c.dtype[i], Rule.CAST_DTYPE, -1, i


def mode_origin(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """must_keep_origin_dtype reduces nothing."""
    return c.dtype[i], Rule.ORIGIN, -1, i


def mode_force_fp32(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    return FP32, Rule.FORCE_FP32, -1, i


def mode_force_low(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """force_fp16: every float op in the low dtype."""
    return ctx.low, Rule.FORCE_LOW, -1, i


def mode_fp32_to_low(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """allow_fp32_to_fp16 / allow_fp32_to_bf16: cube ops reduce, vector ops keep their dtype."""
    if is_cube_type(c.types[i]):
        return ctx.low, Rule.FP32_TO_LOW_CUBE, -1, i
    return c.dtype[i], Rule.FP32_TO_LOW_VECTOR, -1, i


def white(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """A white-list op runs in the low dtype, unless it has no low-precision kernel."""
    if c.low_kernel[i]:
        return ctx.low, Rule.WHITE, -1, i
    return c.dtype[i], Rule.WHITE_NO_LOW_KERNEL, -1, i


def black(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """A black-list op keeps its original dtype."""
    return c.dtype[i], Rule.BLACK, -1, i


def gray(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """A gray op follows the producer of its first activation input (GE's input ranking); a Cast with no
    known destination, an op with no float producer or fed only by constants: allow_fp32_to_fp16; a
    non-black fp16->fp32 Cast before it is looked through."""
    low = ctx.low
    if c.types[i] == "Cast":
        return low, Rule.CAST_ALLOW, -1, i
    d = c.decider[i]
    if d < 0:
        return low, Rule.GRAY_NO_PRODUCER, -1, i
    if c.dkind[i] == _D_WEAK:
        return low, Rule.GRAY_CONST_INPUTS, d, i
    p = prec[d]
    if p == NA:
        return low, Rule.GRAY_NO_PRODUCER, d, i
    if p == FP32 and c.kind[d] == _CAST and not ctx.cast_black and c.decider[d] >= 0 and prec[c.decider[d]] in LOW:
        cd = c.decider[d]
        return prec[cd], Rule.GRAY_SKIP_CAST, cd, root[cd]
    return p, Rule.GRAY_INHERIT, d, root[d]


# the mixed modes decide an op by the list its type is in; the other modes by the mode alone
LIST_STEPS = {WHITE: white, BLACK: black, GRAY: gray}
OP_STEP_BY_FAMILY = {"origin": mode_origin, "force_fp32": mode_force_fp32, "force_low": mode_force_low,
                     "fp32_to_low": mode_fp32_to_low}
STEPS_BY_KIND = {NodeKind.DATA: graph_input, NodeKind.CONST: constant, NodeKind.NONFLOAT: non_float,
                 NodeKind.FOLLOW: follow, NodeKind.CAST: cast_dtype}


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

    @cached_property
    def float_edges(self):
        """(src, dst) numpy arrays of compiled indices of the float edges (computed once)."""
        import numpy as np
        idx = self.index
        es, ed = [], []
        for u, nbrs in self.graph._succ.items():  # networkx's adjacency itself: no view per edge
            iu = idx[u]
            for v, d in nbrs.items():
                if d.get("float", True):
                    es.append(iu)
                    ed.append(idx[v])
        return np.asarray(es, dtype=np.int64), np.asarray(ed, dtype=np.int64)

    # ------------------------------------------------------------------ planning
    def step(self, i: int, ctx: Context):
        """The named step that decides node i (by its kind; ops by their list or the mode)."""
        k = self.kind[i]
        return ctx.op_step(self.types[i]) if k == _OP else STEPS_BY_KIND[k]

    def plan(self, lists: OpLists, mode: str = DEFAULT_MODE) -> "Plan":
        family, low = mode_info(mode)
        ctx = Context(lists, family, low)
        n = len(self.order)
        prec: list[str] = [FP32] * n
        rule: list = [""] * n
        via = [-1] * n
        root = list(range(n))
        step = self.step
        for i in range(n):
            prec[i], rule[i], via[i], root[i] = step(i, ctx)(self, i, prec, root, ctx)
        return Plan(self, lists, mode, prec, rule, via, root)

    def what_if(self, base: "Plan", lists: OpLists) -> "Plan":
        """Plan for ``lists`` computed incrementally from ``base`` (same mode): only ops whose type
        changed list, and ops downstream of them along decision chains, are revisited."""
        if base.compiled is not self:
            raise ValueError("base plan belongs to another compiled graph")
        family, low = mode_info(base.mode)
        ctx = Context(lists, family, low)
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
                new = self.step(i, ctx)(self, i, prec, root, ctx)
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


def low_mask(p: "Plan"):
    """Bool numpy array per compiled node: the plan runs it in fp16/bf16 (THE "runs in low precision")."""
    import numpy as np
    a = np.asarray(p.precision_list, dtype=object)
    return np.asarray((a == FP16) | (a == BF16), dtype=bool)


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
