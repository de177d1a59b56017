"""The compiled graph and the plan: every node's compute dtype, output dtype, placement and why.

``compile_graph`` prepares a graph once (order, GE's input ranking, static facts); ``Compiled.plan`` runs the
rule steps of ``advisor.semantics.rules`` over it in topological order; ``Compiled.what_if`` revisits only what
an edit can change.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Hashable, Iterable

from ..graph import no_gc, normalize_dtype, topological_sort
from ..oplists import OpLists
from ..overrides import NO_OVERRIDES, Overrides
from .rules import (AI_CPU_RULES, BF16, DEFAULT_MODE, FLOATS, FP16, FP32, HCCL_TYPES, STEPS_BY_KIND,
                    WEAK_PRODUCER_TYPES, Context, Rule, Why, K_CAST, K_CONST, K_DATA, K_FOLLOW, K_HCCL, K_NONFLOAT, K_OP,
                    ai_cpu, dtype_sensitive, mode_info)

if TYPE_CHECKING:
    import networkx as nx

# Accelerator Core values of a profile that show the kernel ran on the AI Core (its type has an AI Core kernel
# whatever the table says)
AI_CORE_CORES = frozenset({"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "MIX_AICORE", "MIX_VECTOR_CORE"})
_PORT0 = [(0, 0)]


class Compiled:
    """A graph prepared for repeated planning: topological order, each op's ranked float inputs (GE's
    ``SortInputBySequence``) and decider (the first of them), and static per-node facts.  Build with
    ``compile_graph``."""

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
        self.cast_from: list[str] = [""] * n      # a Cast's input dtype in the model
        self.low_kernel = [True] * n
        self.decider = [-1] * n
        self.ranked: list[tuple] = [()] * n       # ((input index, producer), ...) in GE's ranking
        self.children: list[list[int]] = [[] for _ in range(n)]
        self.static_special: dict[int, object] = {}
        self.on_core: set[int] = set()            # ops a profile measured on the AI Core
        weak = [False] * n
        children = self.children
        nodes = g._node  # networkx's node -> attributes dict (no view call per node)
        pred = g._pred  # adjacency of predecessors: {node: {pred: edge data}}
        for i, node in enumerate(order):
            a = nodes[node]
            t = a.get("type", "")
            self.types[i] = t
            role = a.get("role", "op")
            if role == "data" or role in ("const", "variable"):
                self.kind[i] = K_DATA if role == "data" else K_CONST
                self.dtype[i] = normalize_dtype(a.get("dtype", FP32))
                weak[i] = t in WEAK_PRODUCER_TYPES
                continue
            # rank float inputs: Const/Constant/Variable producers after the others, each group by input index
            ins = []
            for src, d in pred[node].items():
                if not d.get("float", True):
                    continue
                j = idx[src]
                w = weak[j]
                for p in d.get("ports", _PORT0):
                    ins.append((w, p[1], j))
            if ins:
                if len(ins) == 1:
                    r = ((ins[0][1], ins[0][2]),)
                else:
                    ins.sort()
                    r = tuple((p, j) for _, p, j in ins)
                self.ranked[i] = r
                self.decider[i] = r[0][1]
                for _, j in r:
                    ch = children[j]
                    if not ch or ch[-1] != i:
                        ch.append(i)
            self.dtype[i] = normalize_dtype(a.get("origin_dtype", FP32))
            core = a.get("core")
            if core is not None and str(core).strip().upper() in AI_CORE_CORES:
                self.on_core.add(i)
            if not a.get("float", True):
                self.kind[i] = K_NONFLOAT
            elif t in HCCL_TYPES and "origin_dtype" in a:
                self.kind[i] = K_HCCL
            elif not a.get("kernel", True) or not a.get("decides", True):
                self.kind[i] = K_FOLLOW
            elif t == "Cast" and a.get("cast_to"):
                self.kind[i] = K_CAST
                self.dtype[i] = normalize_dtype(a["cast_to"])
                ind = a.get("in_dtypes") or ()
                src = normalize_dtype(a.get("cast_from") or (ind[0] if ind else ""))
                d = self.decider[i]
                self.cast_from[i] = src if src in FLOATS else (self.dtype[d] if d >= 0 else "")
            else:
                self.kind[i] = K_OP
                self.low_kernel[i] = a.get("low_kernel", True)
                if t == "Cast" or _complex(a):
                    self.static_special[i] = dtype_sensitive

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
        keep, custom = ov.resolve(self.names, self.types, [k == K_OP for k in self.kind]) if not ov.is_empty() \
            else (frozenset(), {})
        return Context(lists, *mode_info(mode), ov, keep, custom, self.static_special)

    # ------------------------------------------------------------------ planning
    def step(self, i: int, ctx: Context):
        """The named step that decides node i (by its kind; ops by an override, where they run, their list or
        the mode)."""
        k = self.kind[i]
        if k == K_OP:
            s = ctx.special.get(i) if ctx.special else None
            if s is not None:
                return s
            s = ctx.op_step(self.types[i])
            if s is ai_cpu and i in self.on_core:
                return ctx.list_or_mode_step(self.types[i])
            return s
        return STEPS_BY_KIND[k]

    def plan(self, lists: OpLists, mode: str = DEFAULT_MODE, overrides: Overrides | None = None) -> "Plan":
        ctx = self.context(lists, mode, overrides)
        n = len(self.order)
        prec: list[str] = [FP32] * n
        emit: list[str] = [FP32] * n      # the output dtype: what successors see (decisions read it)
        rule: list = [""] * n
        via = [-1] * n
        root = list(range(n))
        # Compiled.step inlined: one call less per node of the hot loop
        kind, types, special, on_core = self.kind, self.types, ctx.special, self.on_core
        by_type: dict = {}
        for i in range(n):
            k = kind[i]
            if k == K_OP:
                s = special.get(i) if special else None
                if s is None:
                    t = types[i]
                    s = by_type.get(t)
                    if s is None:
                        s = by_type[t] = ctx.op_step(t)
                    if s is ai_cpu and i in on_core:
                        s = ctx.list_or_mode_step(t)
            else:
                s = STEPS_BY_KIND[k]
            prec[i], emit[i], rule[i], via[i], root[i] = s(self, i, emit, root, ctx)
        return Plan(self, lists, mode, prec, rule, via, root, ctx, emit)

    def what_if(self, base: "Plan", lists: OpLists, overrides: Overrides | None = None) -> "Plan":
        """Plan for ``lists`` (and ``overrides``; default: the base plan's) computed incrementally from
        ``base`` (same mode): only ops whose type changed list or whose override changed, and the ops
        downstream of them whose inputs' dtypes changed, are revisited."""
        if base.compiled is not self:
            raise ValueError("base plan belongs to another compiled graph")
        if lists.kernels is not base.lists.kernels or (lists.known is not base.lists.known
                                                       and lists.known != base.lists.known):
            return self.plan(lists, base.mode, base.overrides if overrides is None else overrides)
        o = base.ctx if overrides is None or overrides == base.overrides else self.context(lists, base.mode, overrides)
        ctx = Context(lists, o.family, o.low, o.overrides, o.keep, o.custom, self.static_special)
        changed = (base.lists.white ^ lists.white) | (base.lists.black ^ lists.black)
        prec, rule, via, root = list(base.precision_list), list(base.rules), list(base.vias), list(base.roots)
        emit = list(base.emit_list)
        seeds = [i for i, t in enumerate(self.types) if t in changed] if changed else []
        b = base.ctx
        seeds += [i for i in b.keep | ctx.keep | set(b.custom) | set(ctx.custom)
                  if b.custom.get(i) != ctx.custom.get(i) or (i in b.keep) != (i in ctx.keep)]
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
                old = (prec[i], emit[i], rule[i], via[i], root[i])
                prec[i], emit[i], rule[i], via[i], root[i] = new
                # a Cast always passes the change on: its gray consumers may look through it (gray-skip-cast)
                if new != old or self.kind[i] == K_CAST:
                    for c in self.children[i]:
                        heapq.heappush(heap, c)
        return Plan(self, lists, base.mode, prec, rule, via, root, ctx, emit)


def _complex(a: dict) -> bool:
    """An op with a complex tensor (dtype-sensitive: op_info_common.cc:775-800)."""
    for key in ("in_dtypes", "out_dtypes"):
        for d in a.get(key) or ():
            if "complex" in str(d).lower():
                return True
    return False


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
    """Every node's compute dtype (``precision``: what "ran in low precision" means), output dtype (``emit_list``:
    what its successors see), placement (AI Core or AI CPU, by its rule) and reason."""

    def __init__(self, compiled: Compiled, lists: OpLists, mode: str, prec: list[str], rules: list,
                 vias: list[int], roots: list[int], ctx: Context | None = None, emit: list[str] | None = None):
        self.compiled, self.lists, self.mode = compiled, lists, mode
        self.precision_list, self.rules, self.vias, self.roots = prec, rules, vias, roots
        self.ctx = ctx if ctx is not None else compiled.context(lists, mode)
        self.emit_list = emit if emit is not None else prec

    overrides = property(lambda self: self.ctx.overrides, doc="The per-op overrides this plan applied.")

    def port_dtypes(self, node: Hashable, in_dtypes: list[str], out_dtypes: list[str],
                    aux: tuple = ()) -> tuple[list[str], list[str]]:
        """THE dtypes a node's kernel executes with per port (kernel_details, dumps, emulators), from the model's:
        float inputs in its compute dtype, float outputs in its output dtype (``aux`` outputs and a Cast's inputs
        keep theirs), customized ports as given (their empty slots: the compute dtype)."""
        i = self.compiled.index[node]
        p, q = self.precision_list[i], self.emit_list[i]
        cd = self.ctx.custom.get(i) if self.ctx.custom else None
        keep_in = self.compiled.kind[i] == K_CAST or p not in FLOATS
        if cd is not None:
            q = p

        def port(d: str, j: int, given: tuple, keep: bool, v: str) -> str:
            if d not in FLOATS:
                return d
            return given[j] if j < len(given) and given[j] in FLOATS else (d if keep else v)
        return ([port(d, j, cd.inputs if cd else (), keep_in, p) for j, d in enumerate(in_dtypes)],
                [port(d, j, cd.outputs if cd else (), j in aux or q not in FLOATS, q)
                 for j, d in enumerate(out_dtypes)])

    def exec_dtypes(self, node: Hashable) -> tuple[str, str]:
        """(dtype of the node's float inputs, dtype of its float outputs) as it executes."""
        i = self.compiled.index[node]
        return self.precision_list[i], self.emit_list[i]

    def on_ai_cpu(self, node: Hashable) -> bool:
        """True when the op runs on AI CPU (no AI Core kernel, or none that takes its dtypes)."""
        return self.rules[self.compiled.index[node]] in AI_CPU_RULES

    @cached_property
    def cpu(self):
        """Bool numpy array per compiled node: on AI CPU; None when no op is (``cpu_mask``)."""
        return _cpu_array(self.rules)

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
        return self[node] in (FP16, BF16)

    def items(self) -> Iterable[tuple[Hashable, str]]:
        return zip(self.compiled.order, self.precision_list)

    def to_records(self) -> list[dict]:
        out = []
        for i, node in enumerate(self.compiled.order):
            w = self.why(node)
            out.append({"node": str(node), "type": self.compiled.types[i], "precision": self.precision_list[i],
                        "output": self.emit_list[i], "ai_cpu": self.rules[i] in AI_CPU_RULES, **w.to_dict()})
        return out


def low_mask(p: Plan):
    """Bool numpy array per compiled node: the plan runs it in fp16/bf16 (THE "runs in low precision")."""
    import numpy as np
    a = np.asarray(p.precision_list, dtype=object)
    return np.asarray((a == FP16) | (a == BF16), dtype=bool)


def cpu_mask(p: Plan):
    """Bool numpy array per compiled node: the plan places it on AI CPU (None when it places none there)."""
    return p.cpu


def _cpu_array(rules: list):
    import numpy as np
    a = np.asarray(rules, dtype=object)
    m = (a == Rule.AI_CPU) | (a == Rule.AI_CPU_DTYPE)
    return np.asarray(m, dtype=bool) if m.any() else None


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
    """Op instances whose precision, output dtype or placement differs between two plans of the same graph, in
    topological order."""
    if a.compiled is not b.compiled:
        raise ValueError("plans of different graphs")
    c = a.compiled
    out = []
    ea, eb, ra, rb = a.emit_list, b.emit_list, a.rules, b.rules
    for i, (pa, pb) in enumerate(zip(a.precision_list, b.precision_list)):
        if pa != pb or ea[i] != eb[i] or ((ra[i] in AI_CPU_RULES) != (rb[i] in AI_CPU_RULES)):
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
