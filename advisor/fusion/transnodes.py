"""GE's TransNodeMerging: inverse float Cast pairs vanish, the user's own included (docs/semantics.md, "Inverse
Cast pairs").

FE's ``TransNodeMerging::MergeAllTransOps`` (compiler/engines/nn_engine/optimizer/graph_optimizer/
shape_format_transfer/trans_node_manager/trans_node_merging/trans_node_merging.cc:449-484) walks back from every
input of every normal (non trans-op) node through the trans ops feeding it (``MergeTransOpBetweenTwoNormalOp``,
:563-634, a stack) and removes each adjacent pair ``CheckTwoTransOpDescMergable`` (:359-447) accepts: two Casts
(:375-382) neither of them quant-dumpable (:384-387), casting between float types (fp32, fp16, fp64, bf16;
``IsFloatingCast`` :641-648) or both inserted by GE itself (:397-405, ``IsOptimizableCast`` :636-639), the second
undoing the first (its output dtype is the first one's input dtype, :435-442) on the same shape (:78-84: equal
dims, unknown rank -2 never).  It runs after the precision judge: ``InsertTransNodesForAllGraph``
(fe_graph_optimizer.cc:647, ``InsertAndMergeTransNodes`` trans_node_manager.cc:61-114) comes after
``FeOpDtypeJudge`` (:603).  So the judge sees the Casts (a gray consumer may look through one), and then the
pair is an identity: its consumers read the first Cast's input, each converted to its own compute dtype by the
Cast GE inserts (which merges the same way).

``trans_node_merging(g)`` marks, in place, every Cast that cancels against the uncancelled Cast behind it
(``merged_with``: that Cast's name; the emulators pass its input through unrounded) and every Cast GE deletes
(``trans_removed``: no kernel, no kernel_details row): the second of a pair always, the first when nothing else
reads it.  Types and edges are unchanged, so the judge is the one GE runs.  O(V + E).
"""
from __future__ import annotations

from typing import Hashable

import networkx as nx

from ..graph import normalize_dtype, shape_ints
from .core import Rewrite, attrs, dtype, in_ports, uses

TRANS_NODE_MERGING = "TransNodeMerging"
# IsFloatingType (trans_node_merging.cc:645-648): DT_FLOAT, DT_FLOAT16, DT_DOUBLE, DT_BF16
FLOATING = frozenset({"fp32", "fp16", "fp64", "bf16"})
UNKNOWN_RANK = [-2]         # kUnknownDimNum (:24): never equivalent (:80-82)


def cast_dtypes(a: dict) -> tuple[str, str]:
    """(input dtype, output dtype) of a Cast node in the model (the judge never changes a Cast's dtypes)."""
    out = a.get("cast_to") or ((a.get("out_dtypes") or ["n/a"])[0])
    return dtype(a, "in", 0), normalize_dtype(out)


def _shape(a: dict, key: str) -> list[int] | None:
    s = a.get(key) or ()
    return shape_ints(s[0]) if s and s[0] is not None else None


def _same_dims(x: list[int] | None, y: list[int] | None) -> bool:
    """CheckTwoDimsEquivalent for Casts (:78-84, :130): equal dims, never an unknown rank; a shape the graph does
    not describe counts as equal (choice)."""
    if x == UNKNOWN_RANK or y == UNKNOWN_RANK:
        return False
    return x is None or y is None or x == y


def mergeable(first: dict, second: dict) -> bool:
    """``second`` (a Cast reading ``first``'s output) undoes ``first`` and GE removes both (:397-405, :435-442).
    Casts the user wrote (all the Casts of a captured graph: GE's inserted ones are not nodes here) merge only
    between float types; formats are not modelled (ND, choice)."""
    f_in, f_out = cast_dtypes(first)
    s_in, s_out = cast_dtypes(second)
    if not (f_in in FLOATING and f_out in FLOATING and s_in == f_out and s_out == f_in):
        return False
    return (_same_dims(_shape(second, "in_shapes"), _shape(first, "out_shapes"))
            and _same_dims(_shape(second, "out_shapes"), _shape(first, "in_shapes")))


def _is_cast(a: dict) -> bool:
    return a.get("role", "op") == "op" and a.get("type") == "Cast" and bool(a.get("float", True))


def trans_node_merging(g: nx.DiGraph) -> list[Rewrite]:
    """Mark the inverse float Cast pairs GE removes after its judge (module docstring); one ``Rewrite`` per pair."""
    nodes = g._node
    casts = [n for n, a in nodes.items() if _is_cast(a)]
    if len(casts) < 2:
        return []
    partner: dict[Hashable, Hashable] = {}      # cancelled Cast -> the uncancelled Cast it undoes
    through: dict[Hashable, Hashable | None] = {}   # cancelled Cast -> the node whose value it passes on
    done: set = set()

    def source(n: Hashable) -> Hashable | None:
        """The node whose output Cast ``n`` reads once the pairs behind it are gone."""
        src = in_ports(g, n).get(0)
        if src is None:
            return None
        u = src[0]
        if u in nodes and _is_cast(nodes[u]):
            visit(u)
            if u in through:
                return through[u]
        return u

    def visit(n: Hashable) -> None:
        stack = [n]
        while stack:                       # iterative: a long Cast chain never recurses deeply
            m = stack[-1]
            if m in done:
                stack.pop()
                continue
            src = in_ports(g, m).get(0)
            u = src[0] if src is not None else None
            if u is not None and u in nodes and _is_cast(nodes[u]) and u not in done:
                stack.append(u)
                continue
            stack.pop()
            done.add(m)
            q = through.get(u, u) if u is not None and u in through else u
            if q is not None and q in nodes and _is_cast(nodes[q]) and q not in through \
                    and mergeable(nodes[q], nodes[m]):
                partner[m] = q
                through[m] = source(q)

    for n in casts:
        visit(n)
    if not partner:
        return []
    removed = set(partner)
    pos = {n: i for i, n in enumerate(g)}
    for q in sorted(set(partner.values()), key=lambda x: -pos[x]):   # later Casts first (chains of pairs)
        if not attrs(g, q).get("net_outputs") and all(v in removed for v, _o, _i in uses(g, q)):
            removed.add(q)
    out = []
    for m, q in partner.items():
        a, b = attrs(g, m), attrs(g, q)
        a["merged_with"] = str(b.get("name", q))
        a["merged_by"] = TRANS_NODE_MERGING
        b.setdefault("merged_by", TRANS_NODE_MERGING)
        out.append(Rewrite(TRANS_NODE_MERGING, m, (str(b.get("name", q)), str(a.get("name", m))),
                           ("Cast", "Cast"), "->".join((*cast_dtypes(b), cast_dtypes(a)[1]))))
    for n in removed:
        attrs(g, n)["trans_removed"] = True
    return out


def cast_through(g: nx.DiGraph) -> dict[str, str]:
    """Each Cast GE removes that undoes another -> the name of the Cast whose input it passes on (the emulators)."""
    return {str(a.get("name", n)): a["merged_with"] for n, a in g.nodes(data=True) if a.get("merged_with")}


def cast_notes(g: nx.DiGraph) -> list[str]:
    """What reports say when GE removes Cast pairs: how many, and that the emulation does not round there."""
    pairs = [(a.get("merged_with"), str(a.get("name", n))) for n, a in g.nodes(data=True) if a.get("merged_with")]
    if not pairs:
        return []
    shown = "; ".join(f"{p} + {q}" for p, q in pairs[:6]) + (" ..." if len(pairs) > 6 else "")
    return [f"GE's TransNodeMerging removes {len(pairs)} inverse float Cast pair(s) after its precision judge "
            f"(trans_node_merging.cc:397-446): {shown}; they do not round on the NPU"]
