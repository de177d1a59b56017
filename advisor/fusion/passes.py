"""GE's one-node graph fusion passes that change an op's type before the precision judge.

Each function is one GE pass, named after it, reading and rewriting the op graph in place and returning its
``Rewrite``s.  Sources (docs/semantics.md, "Fusion before the judge", cites every line):

[CD]  CANN canndev graph fusion passes, 2022-06 (``ops/built-in/fusion_pass/graph_fusion/ai_core/``, Apache-2.0;
      public copy github dengguojie/vue-element-admin @ ba4c1cbd): the newest public source of these passes.
[OM]  hicann/ops-math (2026): ``math/reduce_mean/op_graph/fusion_pass/globalavgpool_fusion_pass.cpp``.
[DOC] hicann/docs @ 4add9bd, ``docs/en/fusion-patterns/Graph_Fusion_Patterns/<Pass>.md`` (2026 constraints).

What GE checks that the op graph does not record (the kernel's own ``CheckSupported`` verdict on shapes and
formats, the GE compiler version) is a choice, said in docs/semantics.md.
"""
from __future__ import annotations

from .core import (FLOATS, Context, Rewrite, attrs, const_input, const_value, dtype, in_ports, numel, remove, retype,
                   shape, static)


def _of_type(g, *types: str) -> list:
    return [n for n, a in g._node.items() if a.get("type") in types and a.get("role", "op") == "op"]


def _reduces_nothing(a: dict) -> bool:
    """Every reduced axis has size 1 ([CD] ``CheckSumFussionOrNot`` / ``CheckMeanFussionOrNot``): with static
    shapes that is exactly an output with as many elements as the input (a scalar input too).  Unknown shapes:
    False (not rewritten)."""
    si, so = shape(a, "in", 0), shape(a, "out", 0)
    if si is None or so is None:
        return False
    return si == [] or (numel(si) == numel(so) and numel(si) > 0)


def _empty_axes(a: dict) -> bool:
    """The axes input is an empty tensor (shape [0])."""
    s = shape(a, "in", 1)
    return s is not None and s == [0]


# ---------------------------------------------------------------------- reductions
def a_reduce_mean_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """AReduceMeanFusionPass: a static ReduceMean with constant axes, all of size 1, is deleted and its consumers
    read its input ([CD] a_reduce_mean_fusion_pass.cc:28-52, :85-90, :115-132)."""
    out = []
    for n in _of_type(g, "ReduceMean"):
        a = attrs(g, n)
        if static(a) and const_input(g, n, 1) and _reduces_nothing(a):
            out.append(remove(g, n, "AReduceMeanFusionPass"))
    return out


def a_reduce_sum_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """AReduceSumFusionPass: a static ReduceSum with constant, non-empty axes, all of size 1, becomes a Reshape
    (no kernel) ([CD] a_reduce_sum_fusion_pass.cc:40-59, :85, :95-100, :147-206; [DOC] AReduceSumFusionPass.md:
    not for an empty axes tensor, not in dynamic scenarios)."""
    out = []
    for n in _of_type(g, "ReduceSum"):
        a = attrs(g, n)
        if static(a) and const_input(g, n, 1) and not _empty_axes(a) and _reduces_nothing(a):
            out.append(retype(g, n, "Reshape", "AReduceSumFusionPass", kernel=False))
    return out


def const_to_attr_reduce_sum_fusion(g, ctx: Context) -> list[Rewrite]:
    """ConstToAttrReduceSumFusion: ReduceSum with a constant, non-empty axes input becomes ReduceSumD when
    ReduceSumD is supported ([CD] reduce_sum_fusion_pass.cc:61-105; [DOC] ConstToAttrReduceSumFusion.md: static
    scenarios only, input float16/float32/bfloat16)."""
    out = []
    for n in _of_type(g, "ReduceSum"):
        a = attrs(g, n)
        if (static(a) and const_input(g, n, 1) and not _empty_axes(a) and dtype(a, "in", 0) in FLOATS
                and ctx.supported("ReduceSumD")):
            out.append(retype(g, n, "ReduceSumD", "ConstToAttrReduceSumFusion", attr_inputs=[1]))
    return out


# ConstToAttrPass registrations ([CD] const2attr/const2attr_fusion_pass.cc): original type -> (D type, the input
# indices that must be constants).  All of these are registered with NeedCheckSupported(true).
CONST_TO_ATTR: dict[str, tuple[str, tuple[int, ...]]] = {
    "ArgMaxV2": ("ArgMaxD", (1,)),            # :188-191
    "ArgMin": ("ArgMinD", (1,)),              # :193
    "BroadcastTo": ("BroadcastToD", (1,)),    # :200-203
    "ReduceMean": ("ReduceMeanD", (1,)),      # :288-291
    "ReduceAll": ("ReduceAllD", (1,)),        # :293-296
    "ReduceAny": ("ReduceAnyD", (1,)),        # :298-301
    "ReduceMax": ("ReduceMaxD", (1,)),        # :303-306
    "ReduceMin": ("ReduceMinD", (1,)),        # :308-311
    "ReduceProd": ("ReduceProdD", (1,)),      # :313-316
    "Cumprod": ("CumprodD", (1,)),            # :318
    "Cumsum": ("CumsumD", (1,)),              # :320
    "Conv2DBackpropFilter": ("Conv2DBackpropFilterD", (1,)),                    # :222-225
    "Conv2DBackpropInput": ("Conv2DBackpropInputD", (0,)),                      # :227-230
    "DepthwiseConv2DBackpropFilter": ("DepthwiseConv2DBackpropFilterD", (1,)),  # :249-252
    "DepthwiseConv2DBackpropInput": ("DepthwiseConv2DBackpropInputD", (0,)),    # :254-257
}


def const_to_attr_pass(g, ctx: Context) -> list[Rewrite]:
    """ConstToAttrPass: an op of a registered type whose listed inputs are constants becomes its D variant
    (ReduceMean -> ReduceMeanD, ...) when the D variant is supported; a dynamic-shape op the original kernel
    supports stays ([CD] const2attr_fusion_pass.cc:47-145: :82-98 dynamic, :100-111 CheckSupported, :121-126
    constant inputs)."""
    out = []
    for n in _of_type(g, *CONST_TO_ATTR):
        a = attrs(g, n)
        d_type, idx = CONST_TO_ATTR[a["type"]]
        if not static(a) and ctx.supported(a["type"]):
            continue
        if all(const_input(g, n, i) for i in idx) and ctx.supported(d_type):
            out.append(retype(g, n, d_type, "ConstToAttrPass", attr_inputs=list(idx)))
    return out


def _d_type_pass(g, ctx: Context, typ: str, d_type: str, idx: tuple[int, ...], pass_name: str,
                 dynamic_keeps: bool = True) -> list[Rewrite]:
    """The shape every one-operand-to-attribute pass below shares: ``typ`` whose inputs ``idx`` are constants
    becomes ``d_type`` when ``d_type`` is supported; with an unknown shape the op stays when its own kernel
    supports it (``dynamic_keeps``)."""
    out = []
    for n in _of_type(g, typ):
        if dynamic_keeps and not static(attrs(g, n)) and ctx.supported(typ):
            continue
        if all(const_input(g, n, i) for i in idx) and ctx.supported(d_type):
            out.append(retype(g, n, d_type, pass_name, attr_inputs=list(idx)))
    return out


PAD_DTYPES = ("fp16", "fp32", "int32", "int8", "uint8")


def pad_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """PadFusionPass: a static Pad with constant paddings and an input of float16/float32/int32/int8/uint8 becomes
    PadD ([CD] pad_fusion_pass.cc:106-145: :109 NOT_CHANGED_WITH_DYNAMIC_NODE, :115-119 the dtypes, :129-135
    paddings to an attribute; the pass asks no CheckOpSupported)."""
    out = []
    for n in _of_type(g, "Pad"):
        a = attrs(g, n)
        if static(a) and const_input(g, n, 1) and dtype(a, "in", 0) in PAD_DTYPES:
            out.append(retype(g, n, "PadD", "PadFusionPass", attr_inputs=[1]))
    return out


def tile_const_to_attr_fusion(g, ctx: Context) -> list[Rewrite]:
    """TileConstToAttrFusion: Tile with constant multiples becomes TileD when TileD is supported (with an unknown
    shape only then, :78-81); multiples all 1 delete the Tile, its consumers read its input (:115-175)
    ([CD] tile_fusion_pass.cc:64-177).  Multiples not recorded in the graph count as not all 1 (choice)."""
    out = []
    for n in _of_type(g, "Tile"):
        if not const_input(g, n, 1) or (not static(attrs(g, n)) and not ctx.supported("TileD")):
            continue
        m = const_value(g, n, 1)
        if isinstance(m, (list, int)) and all(int(v) == 1 for v in (m if isinstance(m, list) else [m])):
            out.append(remove(g, n, "TileConstToAttrFusion"))
        elif ctx.supported("TileD"):
            out.append(retype(g, n, "TileD", "TileConstToAttrFusion", attr_inputs=[1]))
    return out


def z_split_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """ZSplitFusionPass: Split with a constant split_dim (input 0) becomes SplitD when SplitD is supported; with an
    unknown shape the Split stays when its own kernel supports it ([CD] split_fusion_pass.cc:71-135: :91-94,
    :103, :116).  More than 63 outputs: GE splits it again, a SplitVD feeding SplitD nodes (:135-); advisor keeps
    the one SplitD node (choice: both gray in every table shipped)."""
    return _d_type_pass(g, ctx, "Split", "SplitD", (0,), "ZSplitFusionPass")


def z_split_v_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """ZSplitVFusionPass: SplitV with constant size_splits and split_dim (inputs 1, 2) becomes SplitVD ([CD]
    splitv_fusion_pass.cc:73-113: :88-91 unknown shapes, :94-96 the attributes, :106 CheckOpSupported, :110)."""
    return _d_type_pass(g, ctx, "SplitV", "SplitVD", (1, 2), "ZSplitVFusionPass")


def one_hot_fusion_pass(g, ctx: Context) -> list[Rewrite]:
    """OneHotFusionPass: OneHot with a constant depth (input 1) becomes OneHotD when OneHotD is supported ([CD]
    one_hot_fusion_pass.cc:68-105: :83, :91, :96); no shape condition."""
    return _d_type_pass(g, ctx, "OneHot", "OneHotD", (1,), "OneHotFusionPass", dynamic_keeps=False)


def const_to_attr_strided_slice_fusion(g, ctx: Context) -> list[Rewrite]:
    """ConstToAttrStridedSliceFusion: StridedSlice with constant begin/end/strides becomes StridedSliceD when it is
    supported; an unknown shape the StridedSlice kernel supports stays (:75-77), an output with a 0 dimension stays
    (AI CPU, :81-84), a last stride below 1 stays (:99-102), and so does a slice with ellipsis, new-axis, shrink and
    end masks set but no begin mask (AI CPU, :119-123) ([CD] strided_slice_fusion_pass.cc:62-141).  Strides not
    recorded count as positive, masks not recorded (a TF graph records them) as zero (choice)."""
    out = []
    for n in _of_type(g, "StridedSlice"):
        a = attrs(g, n)
        if not static(a) and ctx.supported("StridedSlice"):
            continue
        so = shape(a, "out", 0)
        st = const_value(g, n, 3)
        last = st[-1] if isinstance(st, list) and st else st
        if (so is not None and 0 in so) or (isinstance(last, (int, float)) and last < 1) or _ai_cpu_masks(a):
            continue
        if all(const_input(g, n, i) for i in (1, 2, 3)) and ctx.supported("StridedSliceD"):
            out.append(retype(g, n, "StridedSliceD", "ConstToAttrStridedSliceFusion", attr_inputs=[1, 2, 3]))
    return out


def _ai_cpu_masks(a: dict) -> bool:
    m = {k: int(a.get(f"{k}_mask") or 0) for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    return bool(m["ellipsis"] and m["new_axis"] and m["shrink_axis"] and not m["begin"] and m["end"])


# Every type a one-node pass above turns into its "D" variant by making constant inputs attributes: original type ->
# (D type, the inputs that must be constants, the pass).  The one table of these rules: TensorFlow's parser builds
# the original types and these passes do the rest, as for every framework (advisor.tf.opmap reads it for its docs).
D_TYPES: dict[str, tuple[str, tuple[int, ...], str]] = {
    **{t: (d, idx, "ConstToAttrPass") for t, (d, idx) in CONST_TO_ATTR.items()},
    "ReduceSum": ("ReduceSumD", (1,), "ConstToAttrReduceSumFusion"),
    "StridedSliceV2": ("StridedSliceD", (1, 2, 3), "ConstToAttrStridedSliceV2Fusion"),
    "Pad": ("PadD", (1,), "PadFusionPass"),
    "Tile": ("TileD", (1,), "TileConstToAttrFusion"),
    "Split": ("SplitD", (0,), "ZSplitFusionPass"),
    "SplitV": ("SplitVD", (1, 2), "ZSplitVFusionPass"),
    "OneHot": ("OneHotD", (1,), "OneHotFusionPass"),
    "StridedSlice": ("StridedSliceD", (1, 2, 3), "ConstToAttrStridedSliceFusion"),
}


# ---------------------------------------------------------------------- slices, pooling, einsum
def const_to_attr_strided_slice_v2_fusion(g, ctx: Context) -> list[Rewrite]:
    """ConstToAttrStridedSliceV2Fusion: StridedSliceV2 with constant begin/end/axes/strides becomes StridedSliceD
    (static), StridedSliceV3 (dynamic), or the AI CPU StridedSlice when the output is 1-D or has a 0 dimension
    ([CD] strided_slice_v2_fusion_pass.cc:44-78 CheckMask, :179-213, :378-392, :497-540).  Negative strides
    (the ReverseV2 branch, :215-270) need the constants' values: not modelled (choice)."""
    out = []
    for n in _of_type(g, "StridedSliceV2"):
        a = attrs(g, n)
        ports = in_ports(g, n)
        if not all(const_input(g, n, i) for i in ports if i > 0):
            continue
        if not static(a):
            new = "StridedSliceV3"
        else:
            si, so = shape(a, "in", 0), shape(a, "out", 0)
            cpu = (si is not None and len(si) == 1) or (so is not None and 0 in so)
            new = "StridedSlice" if cpu else "StridedSliceD"
        if new == "StridedSliceD" and not ctx.supported(new):
            continue
        extra = {"attr_inputs": sorted(i for i in ports if i > 0)} if new == "StridedSliceD" else {}
        out.append(retype(g, n, new, "ConstToAttrStridedSliceV2Fusion", **extra))
    return out


def globalavgpool_pass(g, ctx: Context) -> list[Rewrite]:
    """Globalavgpoolpass: GlobalAveragePool over a 3-, 4- or 5-D input becomes a ReduceMean over its spatial axes
    with constant axes and keep_dims ([OM] globalavgpool_fusion_pass.cpp:214-227, :246-282; GE >= 9.1.0, :109-120:
    the 2026 GE is assumed).  ConstToAttrPass, which runs after it, may then make it ReduceMeanD."""
    out = []
    for n in _of_type(g, "GlobalAveragePool"):
        si = shape(attrs(g, n), "in", 0)
        if si is not None and len(si) in (3, 4, 5):
            out.append(retype(g, n, "ReduceMean", "Globalavgpoolpass", const_axes=True))
    return out


def _einsum_terms(eq: str) -> tuple[list[str], str] | None:
    eq = eq.replace(" ", "").replace("...", ".")
    if "->" not in eq:
        return None
    lhs, rhs = eq.split("->", 1)
    return lhs.split(","), rhs


def einsum_pass(g, ctx: Context) -> list[Rewrite]:
    """EinsumPass: a static Einsum of one or two inputs is rebuilt around one MatMulV2 (both operands 2-D after the
    reshapes: no batch label) or BatchMatMulV2, with ReduceSumD for labels summed in one input only and Transposes
    around it ([CD] einsum_fusion_pass.cc:1632-1689 inputs, :1692-1727, :2439-2470 DoBatchMatmul, :2192 ReduceSumD).
    advisor keeps one node typed as the fused op's kernel: MatMulV2 / BatchMatMulV2 for two inputs, ReduceSumD or
    TransposeD for one (the reshapes and transposes GE adds are data movement; choice).  [DOC] EinsumPass.md: static
    shapes need distinct labels per term and, for a BatchMatMul, float16/float32 inputs; dynamic shapes (14 fixed
    equations) are not modelled (choice)."""
    out = []
    for n in _of_type(g, "Einsum"):
        a = attrs(g, n)
        terms = _einsum_terms(str(a.get("equation") or ""))
        if terms is None or not static(a):
            continue
        ins, res = terms
        if len(ins) not in (1, 2) or any(len(set(t)) != len(t) for t in ins + [res]):
            continue
        if len(ins) == 1:
            new = "ReduceSumD" if set(ins[0]) - set(res) else "TransposeD"
        else:
            if any(dtype(a, "in", i) not in ("fp16", "fp32") for i in range(2)):
                continue
            batch = (set(ins[0]) & set(ins[1]) & set(res)) | ({"."} if "." in ins[0] + ins[1] else set())
            new = "BatchMatMulV2" if batch else "MatMulV2"
        out.append(retype(g, n, new, "EinsumPass"))
    return out
