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
``keep_dtype``       ATC --keep_dtype on an op (by name or GE type): its original dtype (``keep-dtype``), except
                     under must_keep_origin_dtype; gray successors inherit it.  ``customize_dtype``: ATC
                     --customize_dtypes, per-port dtypes (``customize-dtype``); wins over keep_dtype.
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
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Mapping

from .graph import no_gc, normalize_dtype, topological_sort
from .oplists import BLACK, GRAY, WHITE, OpLists, is_cube_type
from .overrides import NO_OVERRIDES, CustomDtypes, Overrides, lowest_float

if TYPE_CHECKING:
    import networkx as nx

FP32, FP16, BF16, NA = "fp32", "fp16", "bf16", "n/a"
LOW = (FP16, BF16)
_FLOATS = frozenset({FP32, FP16, BF16, "fp64"})

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
    KEEP_DTYPE = "keep-dtype"
    CUSTOMIZE_DTYPE = "customize-dtype"

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
    """What the rules read besides the compiled graph: the lists, the mode, the overrides (by node index)."""

    __slots__ = ("lists", "family", "low", "cast_black", "_by_type", "overrides", "keep", "custom", "special")

    def __init__(self, lists: OpLists, family: str, low: str | None, overrides: Overrides = NO_OVERRIDES,
                 keep: frozenset = frozenset(), custom: Mapping[int, CustomDtypes] | None = None):
        self.lists, self.family, self.low = lists, family, low
        self.cast_black = lists.list_of("Cast") == BLACK
        self._by_type: dict[str, Any] = {}
        self.overrides, self.keep, self.custom = overrides, keep, dict(custom or {})
        self.special = {**{i: keep_dtype for i in keep if family != "origin"},
                        **dict.fromkeys(self.custom, customize_dtype)}

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


def keep_dtype(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """ATC --keep_dtype: the op keeps the original model's dtype (its successors inherit it)."""
    return c.dtype[i], Rule.KEEP_DTYPE, -1, i


def customize_dtype(c: "Compiled", i: int, prec: list, root: list, ctx: Context) -> Decision:
    """ATC --customize_dtypes: the lowest float dtype given for the inputs (else the outputs); empty ports take it;
    with no float dtype given, the decision without the entry (keep_dtype, the list or the mode) stands."""
    cd = ctx.custom[i]
    p = lowest_float(cd.inputs) or lowest_float(cd.outputs)
    if p is None:
        base = (keep_dtype if i in ctx.keep and ctx.family != "origin" else ctx.op_step(c.types[i]))
        return base(c, i, prec, root, ctx)
    return p, Rule.CUSTOMIZE_DTYPE, -1, i


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
        for u, nbrs in self.graph.adjacency():  # networkx's own adjacency dicts: no view per edge
            es.extend(idx[u] for d in nbrs.values() if d.get("float", True))
            ed.extend(idx[v] for v, d in nbrs.items() if d.get("float", True))
        return np.asarray(es, dtype=np.int64), np.asarray(ed, dtype=np.int64)

    @cached_property
    def names(self) -> list[str]:
        """Each node's name (its ``name`` attribute, else its key): what --keep_dtype names match."""
        nodes = self.graph._node
        return [str(nodes[n].get("name", n)) for n in self.order]

    def context(self, lists: OpLists, mode: str, overrides: Overrides | None = None) -> Context:
        """The rules' context; overrides resolved to this graph's ops (by node name and GE type)."""
        ov = overrides or NO_OVERRIDES
        keep, custom = ov.resolve(self.names, self.types, [k == _OP for k in self.kind]) if not ov.is_empty() \
            else (frozenset(), {})
        return Context(lists, *mode_info(mode), ov, keep, custom)

    # ------------------------------------------------------------------ planning
    def step(self, i: int, ctx: Context):
        """The named step that decides node i (by its kind; ops by an override, their list or the mode)."""
        k = self.kind[i]
        if k == _OP:
            s = ctx.special.get(i) if ctx.special else None
            return s if s is not None else ctx.op_step(self.types[i])
        return STEPS_BY_KIND[k]

    def emitted(self, i: int, p: str, ctx: Context) -> str:
        """The dtype node i's successors see: its precision, or a customized first output's dtype."""
        cd = ctx.custom.get(i) if ctx.custom else None
        return cd.outputs[0] if cd is not None and cd.outputs and cd.outputs[0] in _FLOATS else p

    def plan(self, lists: OpLists, mode: str = DEFAULT_MODE, overrides: Overrides | None = None) -> "Plan":
        ctx = self.context(lists, mode, overrides)
        n = len(self.order)
        prec: list[str] = [FP32] * n
        rule: list = [""] * n
        via = [-1] * n
        root = list(range(n))
        step, custom = self.step, bool(ctx.custom)
        emit: list[str] = [FP32] * n if custom else prec      # what successors see (decisions read it)
        for i in range(n):
            prec[i], rule[i], via[i], root[i] = step(i, ctx)(self, i, emit, root, ctx)
            if custom:
                emit[i] = self.emitted(i, prec[i], ctx)
        return Plan(self, lists, mode, prec, rule, via, root, ctx, emit)

    def what_if(self, base: "Plan", lists: OpLists, overrides: Overrides | None = None) -> "Plan":
        """Plan for ``lists`` (and ``overrides``; default: the base plan's) computed incrementally from
        ``base`` (same mode): only ops whose type changed list or whose override changed, and ops
        downstream of them along decision chains, are revisited."""
        if base.compiled is not self:
            raise ValueError("base plan belongs to another compiled graph")
        o = base.ctx if overrides is None or overrides == base.overrides else self.context(lists, base.mode, overrides)
        ctx = Context(lists, o.family, o.low, o.overrides, o.keep, o.custom)
        changed = {t for t in (base.lists.white ^ lists.white) | (base.lists.black ^ lists.black)}
        prec, rule, via, root = list(base.precision_list), list(base.rules), list(base.vias), list(base.roots)
        seeds = [i for i, t in enumerate(self.types) if t in changed] if changed and ctx.family == "mixed" else []
        b = base.ctx
        seeds += [i for i in b.keep | ctx.keep | set(b.custom) | set(ctx.custom)
                  if b.custom.get(i) != ctx.custom.get(i) or (i in b.keep) != (i in ctx.keep)]
        custom_any = bool(b.custom or ctx.custom)
        emit = list(base.emit_list) if custom_any else prec
        if seeds:
            heap = list(set(seeds))
            heapq.heapify(heap)
            seen = set()
            while heap:
                i = heapq.heappop(heap)
                if i in seen:
                    continue
                seen.add(i)
                new = self.step(i, ctx)(self, i, emit, root, ctx)
                old = (prec[i], rule[i], via[i], root[i])
                old_emit = emit[i]
                prec[i], rule[i], via[i], root[i] = new
                if custom_any:
                    emit[i] = self.emitted(i, prec[i], ctx)
                # a Cast always propagates: its gray consumers look through it (gray-skip-cast)
                if new != old or emit[i] != old_emit or self.kind[i] == _CAST:
                    for c in self.children[i]:
                        heapq.heappush(heap, c)
        return Plan(self, lists, base.mode, prec, rule, via, root, ctx, emit if custom_any else None)


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
    return topological_sort(g)


def compile_graph(g: nx.DiGraph) -> Compiled:
    # the build allocates many small objects; cyclic GC passes over a big graph would dominate
    with no_gc():
        return Compiled(g)


class Plan:
    """Every node's precision with its reason.  ``precision`` / ``why`` map node -> value."""

    def __init__(self, compiled: Compiled, lists: OpLists, mode: str, prec: list[str], rules: list[str],
                 vias: list[int], roots: list[int], ctx: Context | None = None, emit: list[str] | None = None):
        self.compiled, self.lists, self.mode = compiled, lists, mode
        self.precision_list, self.rules, self.vias, self.roots = prec, rules, vias, roots
        self.ctx = ctx if ctx is not None else compiled.context(lists, mode)
        self.emit_list = emit if emit is not None else prec

    overrides = property(lambda self: self.ctx.overrides, doc="The per-op overrides this plan applied.")

    def port_dtypes(self, node: Hashable, in_dtypes: list[str], out_dtypes: list[str],
                    aux: tuple = ()) -> tuple[list[str], list[str]]:
        """THE dtypes a node's kernel executes with per port (kernel_details, dumps, emulators), from the model's:
        float ports in its precision (``aux`` outputs and a Cast's inputs keep theirs), customized ports as given."""
        i = self.compiled.index[node]
        p, cd = self.precision_list[i], (self.ctx.custom.get(i) if self.ctx.custom else None)
        keep_in = self.compiled.kind[i] == _CAST or p not in _FLOATS

        def port(d: str, j: int, given: tuple, keep: bool) -> str:
            if d not in _FLOATS:
                return d
            return given[j] if j < len(given) and given[j] in _FLOATS else (d if keep else p)
        return ([port(d, j, cd.inputs if cd else (), keep_in) for j, d in enumerate(in_dtypes)],
                [port(d, j, cd.outputs if cd else (), j in aux or p not in _FLOATS) for j, d in enumerate(out_dtypes)])

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
    ea, eb = a.emit_list, b.emit_list
    for i, (pa, pb) in enumerate(zip(a.precision_list, b.precision_list)):
        if pa != pb or ea[i] != eb[i]:
            node = c.order[i]
            out.append(Flip(node, c.types[i], pa, pb, a.why(node), b.why(node)))
    return out


# ---------------------------------------------------------------------- convenience API
def plan(g: nx.DiGraph | Compiled, lists: OpLists, mode: str = DEFAULT_MODE,
         overrides: Overrides | None = None) -> Plan:
    """Every op's precision under ``lists`` (the effective lists), ``mode`` and the per-op
    ``overrides`` (ATC --keep_dtype / --customize_dtypes)."""
    c = g if isinstance(g, Compiled) else compile_graph(g)
    return c.plan(lists, mode, overrides)


def what_if(g: nx.DiGraph | Compiled, lists: OpLists, edited: OpLists, mode: str = DEFAULT_MODE,
            base: Plan | None = None, overrides: Overrides | None = None,
            edited_overrides: Overrides | None = None) -> list[Flip]:
    """Op instances whose precision flips when the effective lists go from ``lists`` to ``edited``
    (and the overrides from ``overrides`` to ``edited_overrides``, default: unchanged)."""
    c, ov = (g if isinstance(g, Compiled) else compile_graph(g)), overrides or NO_OVERRIDES
    if base is None or base.lists != lists or base.mode != mode or base.overrides != ov:
        base = c.plan(lists, mode, ov)
    return flips_between(base, c.what_if(base, edited, edited_overrides))


def annotate(g: nx.DiGraph, p: Plan) -> None:
    """Write ``precision`` and ``why`` node attributes (for export and reports)."""
    nodes = g._node  # networkx's node -> attribute dict (g.nodes[n] costs a view call per node)
    with no_gc():
        for node, prec, rule in zip(p.compiled.order, p.precision_list, p.rules):
            a = nodes[node]
            a["precision"] = prec
            a["why"] = rule
