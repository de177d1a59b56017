"""Graph fusion before the precision judge: the stage between building an op graph and ``semantics.compile_graph``.

GE's fusion engine runs its graph fusion passes (``FEGraphOptimizer::OptimizeOriginalGraph``,
``compiler/engines/nn_engine/optimizer/graph_optimizer/fe_graph_optimizer.cc:390``) before the dtype judge
(``OptimizeOriginalGraphJudgeInsert``, ``:564``, ``FeOpDtypeJudge`` ``:603``), so the lists apply to the
post-fusion types.  ``fuse(graph, soc, lists)`` applies the passes that change op types or list membership, in
GE's order (the priorities of the ops-info tree's ``fusion_pass/config/fusion_config.json``; a built-in pass the
file does not rank runs after every ranked one, ``BUILT_IN_PASS_PRIORITY_MIN`` 8000), to a copy of the graph and
returns a ``FusionResult``: the post-fusion graph (``graph.graph["fusion"] == "applied"``) and, for every
pre-fusion op, the node whose decision it executes.

Where fusion runs (docs/architecture.md): the PyTorch, ONNX and TensorFlow captures plan the fused graph; ingest
fuses a GE dump whose stage is before fusion (``is_pre_fusion_dump``) and an emulator run written before this
stage existed.  A graph inferred from kernel_details.csv is made of already-fused kernels: nothing runs there.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping

import networkx as nx

from ..oplists import DEFAULT_SOC, OpLists
from .core import Context, FusionResult, Member, Rewrite, attrs, copy_graph, in_ports, reorder
from .passes import (CONST_TO_ATTR, D_TYPES, a_reduce_mean_fusion_pass, a_reduce_sum_fusion_pass,
                     const_to_attr_pass, const_to_attr_reduce_sum_fusion, const_to_attr_strided_slice_fusion,
                     const_to_attr_strided_slice_v2_fusion, einsum_pass, globalavgpool_pass, one_hot_fusion_pass,
                     pad_fusion_pass, tile_const_to_attr_fusion, z_split_fusion_pass, z_split_v_fusion_pass)
from .patterns import (add_layer_norm_fusion_pass, layer_norm_fusion_pass, layer_norm_onnx_fusion_pass,
                       mat_mul_bias_add_fusion_pass)
from .transnodes import TRANS_NODE_MERGING, cast_notes, cast_through, trans_node_merging

# (GE pass name, priority, the function, the op types it starts from) in the order GE runs them: the priorities of
# tests/engines/nn_engine/depends/CANN_910b_stub/cann/opp/built-in/fusion_pass/config/fusion_config.json ("Main"
# 4000-4999, "Down" 5000-5999); EinsumPass, OneHotFusionPass and ConstToAttrStridedSliceFusion are not ranked there:
# 8000, after all of them (their order among themselves: choice, they never meet).
PASSES: tuple[tuple[str, int, Callable, frozenset[str]], ...] = (
    ("AReduceMeanFusionPass", 4120, a_reduce_mean_fusion_pass, frozenset({"ReduceMean"})),
    ("AReduceSumFusionPass", 4150, a_reduce_sum_fusion_pass, frozenset({"ReduceSum"})),
    ("ConstToAttrStridedSliceV2Fusion", 4175, const_to_attr_strided_slice_v2_fusion, frozenset({"StridedSliceV2"})),
    ("Globalavgpoolpass", 4177, globalavgpool_pass, frozenset({"GlobalAveragePool"})),
    ("ConstToAttrPass", 4178, const_to_attr_pass, frozenset(CONST_TO_ATTR) | {"GlobalAveragePool"}),
    ("PadFusionPass", 4195, pad_fusion_pass, frozenset({"Pad"})),
    ("TileConstToAttrFusion", 4215, tile_const_to_attr_fusion, frozenset({"Tile"})),
    ("ConstToAttrReduceSumFusion", 4220, const_to_attr_reduce_sum_fusion, frozenset({"ReduceSum"})),
    ("LayerNormONNXFusionPass", 4336, layer_norm_onnx_fusion_pass,
     frozenset({"ReduceMean", "ReduceMeanD", "GlobalAveragePool"})),
    ("LayerNormFusionPass", 4337, layer_norm_fusion_pass, frozenset({"ReduceMeanD", "ReduceMean"})),
    ("AddLayerNormFusionPass", 4338, add_layer_norm_fusion_pass, frozenset({"LayerNorm", "LayerNormV3", "LayerNormV4",
                                                                            "ReduceMean", "ReduceMeanD"})),
    ("ZSplitFusionPass", 5050, z_split_fusion_pass, frozenset({"Split"})),
    ("ZSplitVFusionPass", 5070, z_split_v_fusion_pass, frozenset({"SplitV"})),
    ("MatMulBiasAddFusionPass", 5120, mat_mul_bias_add_fusion_pass, frozenset({"Add", "BiasAdd"})),
    ("OneHotFusionPass", 8000, one_hot_fusion_pass, frozenset({"OneHot"})),
    ("ConstToAttrStridedSliceFusion", 8000, const_to_attr_strided_slice_fusion, frozenset({"StridedSlice"})),
    ("EinsumPass", 8000, einsum_pass, frozenset({"Einsum"})),
)
# FE's TransNodeMerging runs after the judge (fe_graph_optimizer.cc:647 after :603): last, and it changes no type
# or edge (advisor.fusion.transnodes)
PASS_NAMES = tuple(p[0] for p in PASSES) + (TRANS_NODE_MERGING,)
APPLIED = "applied"


def fuse(g: nx.DiGraph, soc: str = DEFAULT_SOC, lists: OpLists | None = None, training: bool | None = None,
         passes: Iterable[str] | None = None) -> FusionResult:
    """The post-fusion graph of ``g`` (``g`` itself is not changed; it is returned as it is when no pass
    matches) and the op -> node mapping.  ``lists`` (the chip's default tables or an ops-info file) say which
    fused types have a kernel (GE's CheckOpSupported; without lists every type does, choice).  ``training``:
    default ``g.graph["training"]``.  ``passes``: only these (tests)."""
    want = set(PASS_NAMES if passes is None else passes)
    unknown = want - set(PASS_NAMES)
    if unknown:
        raise ValueError(f"unknown fusion pass {sorted(unknown)[0]!r}; passes: {', '.join(PASS_NAMES)}")
    types = {a.get("type") for a in g._node.values()}
    todo = [p for p in PASSES if p[0] in want and p[3] & types]
    casts = TRANS_NODE_MERGING in want and "Cast" in types
    if not todo and not casts:
        g.graph["fusion"] = APPLIED
        return FusionResult(g)
    h = copy_graph(g)
    h.graph["_fusion_order"] = list(h)
    ctx = Context(soc, lists.on_ai_core if lists is not None else (lambda t: True),
                  bool(g.graph.get("training", False) if training is None else training),
                  {n: i for i, n in enumerate(h)})
    rewrites: list[Rewrite] = []
    for _name, _prio, fn, _anchors in todo:
        rewrites += fn(h, ctx)
    h = reorder(h)
    if casts:
        rewrites += trans_node_merging(h)
    h.graph.pop("_fusion_order", None)
    h.graph["fusion"] = APPLIED
    if not rewrites:
        g.graph["fusion"] = APPLIED
        return FusionResult(g)
    mapping, members = _mapping(g, h)
    return FusionResult(h, rewrites, mapping, members)


def _mapping(pre: nx.DiGraph, post: nx.DiGraph) -> tuple[dict[str, Hashable], dict[str, Member]]:
    """pre-fusion op name -> post-fusion node, and how each member of a contracted node executes."""
    mapping: dict[str, Hashable] = {}
    members: dict[str, Member] = {}
    by_name = None
    for n, a in post.nodes(data=True):
        ms = a.get("members")
        if not ms:
            continue
        group = set(ms)
        internal = set(a.get("internal") or ())
        head = a["ports_out"][0][0] if a.get("ports_out") else ms[-1]
        for m in ms:
            mapping[m] = n
            key: Any = m
            if key not in pre:
                if by_name is None:
                    by_name = {str(b.get("name", k)): k for k, b in pre.nodes(data=True)}
                key = by_name.get(m, m)
            ins = in_ports(pre, key) if key in pre else {}
            inner = frozenset(i for i, (u, _) in ins.items() if str(attrs(pre, u).get("name", u)) in group)
            members[m] = Member(n, m == head, m not in internal, inner)
    return mapping, members


# ---------------------------------------------------------------------- which graphs are pre-fusion
_STAGE = re.compile(r"^ge_(?:onnx|proto)_\d+\w*?_graph_\d+_(?P<stage>.+)\.(?:pbtxt|txt)$")
# GE dump stages before FE's graph fusion: graph_manager.cc:4534 PreRunBegin, graph_prepare.cc:1811/1836/1998,
# graph_manager.cc:1347 RunCustomPassBeforeInfershape, graph_manager.cc:1104+1116-1130 "PreRunAfter<stage>" for the
# stages before OptimizeOriginalGraph (:1133), fe_graph_optimizer.cc:376 (dumped before Fusion() at :390).
PRE_FUSION_STAGES = frozenset({
    "PreRunBegin", "RunCustomPassBeforeInfershape", "RunCustomPass_AfterInferShape", "AfterInfershape",
    "PreRunAfterInitPreparation", "PreRunAfterHandleSummaryOp", "PreRunAfterNormalizeGraph",
    "PreRunAfterOptimizeGraphInit", "PreRunAfterOptimizeGraphPrepare", "PreRunAfterPrepare",
    "OptimizeQuantGraph_FeGraphFusionAfter", "after_parser",
})


def dump_stage(path: str | Path) -> str | None:
    """The GE stage a dump file name names (``ge_onnx_00012_graph_0_PreRunBegin.pbtxt`` -> ``PreRunBegin``;
    graph_metadef/graph/utils/graph_utils.cc:5120-5121, :1135)."""
    m = _STAGE.match(Path(path).name)
    return m.group("stage") if m else None


def is_pre_fusion_dump(path: str | Path, graph: nx.DiGraph, meta: Mapping | None = None) -> bool:
    """A GE dump to fuse before planning: its stage is before FE's graph fusion (``PRE_FUSION_STAGES``,
    ``PrepareAfter*``), or it is an emulator run's dump written before advisor modelled fusion (run.json
    ``emulated`` and no fusion marker in the dump)."""
    if graph.graph.get("fusion") == APPLIED:
        return False
    stage = dump_stage(path)
    if stage is not None and (stage in PRE_FUSION_STAGES or stage.startswith("PrepareAfter")):
        return True
    return bool((meta or {}).get("emulated"))


# ---------------------------------------------------------------------- what reports say
def describe_node(g: nx.DiGraph, n: Hashable) -> str | None:
    """How fusion made node ``n`` ("A + B fused into AddLayerNorm by AddLayerNormFusionPass"), None if it did not."""
    a = attrs(g, n)
    if a.get("members"):
        return f"{' + '.join(a['members'])} fused into {a.get('type')} by {a.get('fused_by')}"
    if a.get("trans_removed"):
        undoes = f", undoing {a['merged_with']}" if a.get("merged_with") else ""
        return f"{a.get('name', n)} (Cast) removed by TransNodeMerging after the precision judge{undoes}"
    if a.get("fused_by"):
        if a.get("type") == "Identity":
            return f"{a.get('name', n)} ({a.get('pre_fusion_type')}) removed by {a['fused_by']}"
        return f"{a.get('name', n)} ({a.get('pre_fusion_type')}) became {a.get('type')} by {a['fused_by']}"
    return None


def fused_types(g: nx.DiGraph) -> dict[str, str]:
    """Pre-fusion op type -> what became of it, for every type that no longer exists after fusion (a mixlist entry
    for it matches nothing GE judges): ``{"ReduceSum": "ReduceSumD (ConstToAttrReduceSumFusion)", ...}``."""
    after = {a.get("type") for a in g._node.values()}
    out: dict[str, set[str]] = {}
    for _n, a in g.nodes(data=True):
        if a.get("members"):
            for t in a.get("member_types") or ():
                if t not in after:
                    out.setdefault(t, set()).add(f"{a.get('type')} ({a.get('fused_by')})")
        elif a.get("fused_by") and a.get("pre_fusion_type") not in after:
            out.setdefault(a["pre_fusion_type"], set()).add(f"{a.get('type')} ({a['fused_by']})")
    return {t: ", ".join(sorted(v)) for t, v in sorted(out.items())}


__all__ = ["D_TYPES", "TRANS_NODE_MERGING", "cast_notes", "cast_through", "fuse", "summary", "local_rows", "notes", "FusionResult", "Member", "Rewrite", "PASSES", "PASS_NAMES",
           "APPLIED", "PRE_FUSION_STAGES", "dump_stage", "is_pre_fusion_dump", "describe_node", "fused_types"]


def summary(fz: FusionResult, limit: int = 200) -> dict:
    """What fusion did, for run.json / ingest sources: rewrites per pass and the first ``limit`` descriptions."""
    per: dict[str, int] = {}
    for r in fz.rewrites:
        per[r.pass_name] = per.get(r.pass_name, 0) + 1
    return {"passes": per, "rewrites": fz.describe()[:limit], "n_rewrites": len(fz.rewrites)}


def local_rows(fz: FusionResult, rows: Mapping[str, dict]) -> dict[str, dict]:
    """local_error.csv rows (by op name) plus one per fused node named after none of its members: its first
    output's member's row, under the fused node's name and type (the fused kernel's local error is taken as that
    member's, choice)."""
    out = dict(rows)
    for n, a in fz.graph.nodes(data=True):
        if not a.get("members") or str(a.get("name", n)) in out:
            continue
        head = a["ports_out"][0][0] if a.get("ports_out") else a["members"][-1]
        r = rows.get(head)
        if r is not None:
            out[str(a.get("name", n))] = {**r, "name": str(a.get("name", n)), "type": a.get("type")}
    return out


def notes(g: nx.DiGraph, mixlists: Mapping[str, Any] | None = None) -> list[str]:
    """What reports say about fusion: which pre-fusion types GE never judges (and what they became), and each
    mixlist entry (``{label: Mixlist}``) naming such a type (it matches nothing)."""
    gone = fused_types(g)
    if not gone:
        return []
    out = ["GE's graph fusion runs before its precision judge; the lists apply to the post-fusion types: "
           + "; ".join(f"{t} -> {v}" for t, v in list(gone.items())[:12]) + (" ..." if len(gone) > 12 else "")]
    for label, m in (mixlists or {}).items():
        for t in sorted(m.types() & set(gone)) if m is not None else ():
            out.append(f"{label}: {t} no longer exists when GE judges precisions (graph fusion: {gone[t]}); its "
                       "entry changes nothing")
    return out
