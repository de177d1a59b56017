"""TensorFlow op type -> GE op type, and the roles TF nodes play in the op graph.

Pure data (no TensorFlow import).  The Ascend TF adapter hands the TF graph to GE, whose TF parser
maps each TF op to a GE op type through framework plugins (``REGISTER_CUSTOM_OP(<GE type>)
.FrameworkType(TENSORFLOW).OriginOpType(<TF type>)``); most types are identical.  Where they
differ the table below says what GE calls it, which is the name a mixlist must use.  Sources and
inferences are documented in docs/tensorflow.md:

* renamed types read from CANN's TF parser plugins (``ops/built-in/framework/tf_plugin/*.cc``:
  ``REGISTER_CUSTOM_OP("Add").OriginOpType("AddV2")``, ``"MatMulV2"`` <- ``"MatMul"``,
  ``"SoftmaxV2"`` <- ``"Softmax"``, ``"ReduceMean"`` <- ``"Mean"``, ``"DepthwiseConv2D"`` <-
  ``"DepthwiseConv2dNative"``, ``"BatchMatMulV2"`` <- ``{"BatchMatMul", "BatchMatMulV2"}``,
  ``"EinSum"`` <- ``"Einsum"``, ``"BatchNorm"`` <- ``FusedBatchNorm*``), consistent with the 52 real
  ModelZoo mixlists (TF users black-list ``Add``, ``SoftmaxV2``, ``ReduceSumD``, ``ReduceMeanD``,
  ``StridedSliceD``, ``TileD``, ``OneHotD`` — never ``AddV2``/``Sum``/``Mean``);
* the ``D`` variants (``ReduceMeanD``, ``TileD``, ...): the parser builds the original type; when its axes /
  shape / multiples operand is a constant (always the case in a frozen graph) GE's graph fusion passes turn the
  operand into an attribute before the precision judge.  That is ``advisor.fusion`` (``fusion.D_TYPES``, one rule
  for every framework), which the TF capture runs on this graph like the others.  It matters: on ascend910b
  ``ReduceMeanD`` is black while ``ReduceMean`` is gray.
"""
from __future__ import annotations

# TF type -> GE type (types not listed keep their TF name)
TF_TO_GE: dict[str, str] = {
    # elementwise arithmetic
    "AddV2": "Add",
    "BiasAddV1": "BiasAdd",
    # matrix (cube) ops
    "MatMul": "MatMulV2",
    "BatchMatMul": "BatchMatMulV2",     # CANN's batch_matmul plugin: OriginOpType {BatchMatMul, BatchMatMulV2}
    "BatchMatMulV2": "BatchMatMulV2",
    "BatchMatMulV3": "BatchMatMulV2",   # parsed into BatchMatMulV2 (+ Cast)
    "Einsum": "EinSum",                 # einsum plugin; no precision_reduce entry in CANN 8.1.RC1 (gray)
    "DepthwiseConv2dNative": "DepthwiseConv2D",
    "DepthwiseConv2dNativeBackpropInput": "DepthwiseConv2DBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter": "DepthwiseConv2DBackpropFilter",
    # activations / normalisation
    "Softmax": "SoftmaxV2",
    "LogSoftmax": "LogSoftmaxV2",
    "FusedBatchNorm": "BNInfer",       # training variant: see BATCHNORM_TRAINING
    "FusedBatchNormV2": "BNInfer",
    "FusedBatchNormV3": "BNInfer",
    "FusedBatchNormGradV3": "BNTrainingUpdateGrad",
    "FusedBatchNormGrad": "BNTrainingUpdateGrad",
    "FusedBatchNormGradV2": "BNTrainingUpdateGrad",
    # reductions (the D forms with constant axes: advisor.fusion)
    "Sum": "ReduceSum",
    "Mean": "ReduceMean",
    "Max": "ReduceMax",
    "Min": "ReduceMin",
    "Prod": "ReduceProd",
    "All": "ReduceAll",
    "Any": "ReduceAny",
    # data movement
    "ResourceGather": "GatherV2",
    "Gather": "GatherV2",
    "AccumulateNV2": "AddN",
}

# FusedBatchNorm* are parsed into GE ``BatchNorm`` (``BatchNormGrad`` for the gradient), which GE's
# original-graph fusion passes turn into BNInfer (inference) or BNTrainingReduce + BNTrainingUpdate
# (training; gradient: BNTrainingReduceGrad + BNTrainingUpdateGrad) before precisions are chosen.
# advisor keeps one node per TF op, typed BNInfer / BNTrainingUpdate / BNTrainingUpdateGrad (the
# split parts are all gray on every chip shipped, so the precision is the same).
BATCHNORM_TRAINING = "BNTrainingUpdate"

# TF nodes GE removes or resolves at build time: advisor bypasses them (their consumers are
# connected straight to their producers) and they get no kernel row.
BYPASS = frozenset({"Identity", "IdentityN", "StopGradient", "Snapshot", "PreventGradient", "NoOp",
                    "CheckNumerics", "EnsureShape"})

# Nodes that are graph inputs (role "data") and constants (role "const").  Frozen variables become
# Const nodes (convert_variables_to_constants_v2), so ReadVariableOp/VarHandleOp only appear when a
# graph was not frozen; they are constants too.
DATA_TYPES = frozenset({"Placeholder", "PlaceholderWithDefault"})
CONST_TYPES = frozenset({"Const", "VarHandleOp", "ReadVariableOp", "VariableV2", "HostConst"})

# No kernel: reshapes and views follow their producer's precision (kernel=False in the op graph).
NO_KERNEL = frozenset({"Reshape", "Squeeze", "ExpandDims", "Unsqueeze", "Flatten"})

# Ops whose result is a shape or size, not a value: float=False even with a float input.
SHAPE_ONLY = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs", "ZerosLike",
                        "OnesLike"})
# ... of which these are host-side shape computations GE folds at build time: no kernel row.
HOST_SHAPE = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs"})

# Pure random ops: the capture fixes their seeds so the mixed and the FP32 run draw the same numbers.
RANDOM_OPS = frozenset({"RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
                        "StatelessRandomUniformV2", "StatelessRandomNormalV2"})


def is_random(tf_type: str) -> bool:
    """Random-number ops (stateful or stateless)."""
    return tf_type in RANDOM_OPS or tf_type.startswith(("StatelessRandom", "StatelessTruncated", "Random",
                                                         "StatelessParameterized", "Multinomial"))


# GE types the TF parser produces that have no precision_reduce entry in CANN 8.1.RC1's tables
# (no AI Core kernel in the tables -> AI CPU in the original dtype; reported in run.json's unmapped_ops)
NOT_IN_TABLES = frozenset({"EinSum"})


def ge_type(tf_type: str, attrs: dict | None = None) -> str:
    """The GE op type GE's TF parser gives a TF node (before graph fusion).  ``attrs``: decoded attributes that
    change the mapping (``is_training`` of FusedBatchNorm*)."""
    attrs = attrs or {}
    if tf_type.startswith("FusedBatchNorm") and "Grad" not in tf_type and attrs.get("is_training"):
        return BATCHNORM_TRAINING
    return TF_TO_GE.get(tf_type, tf_type)


# TF op types GE's parser keeps by name that graph fusion turns into a D variant with a constant operand
# (``fusion.D_TYPES``; the ModelZoo mixlists name StridedSliceD, TileD, OneHotD)
SAME_NAME_D_ORIGINALS = frozenset({"StridedSlice", "Tile", "OneHot", "Pad", "Split", "SplitV", "Cumsum",
                                   "Conv2DBackpropInput", "Conv2DBackpropFilter"})


def table_markdown() -> str:
    """The mapping as a Markdown table (docs/tensorflow.md embeds it); the D variants are graph fusion's
    (``fusion.D_TYPES``), for the GE types a TF node can have."""
    from ..fusion import D_TYPES
    rows = ["| TF op type | GE op type | note |", "|---|---|---|"]
    for tf_t, ge_t in sorted(TF_TO_GE.items()):
        note = ""
        if ge_t in D_TYPES:
            note = f"`{D_TYPES[ge_t][0]}` when the operand is constant (frozen graphs; {D_TYPES[ge_t][2]})"
        if tf_t.startswith("FusedBatchNorm") and "Grad" not in tf_t:
            note = f"`{BATCHNORM_TRAINING}` when is_training"
        rows.append(f"| `{tf_t}` | `{ge_t}` | {note} |")
    for ge_t, (d, _, pass_name) in sorted(D_TYPES.items()):
        if ge_t in SAME_NAME_D_ORIGINALS:
            rows.append(f"| `{ge_t}` | `{ge_t}` | `{d}` when the operand is constant ({pass_name}) |")
    return "\n".join(rows)
