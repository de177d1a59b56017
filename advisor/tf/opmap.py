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
* ``CONST_TO_ATTR``: when an op's axes/shape/multiples operand is a constant (always the case in a
  frozen graph), GE's ConstToAttr pass turns it into an attribute and the op becomes its ``D``
  variant.  This matters: on ascend910b ``ReduceMeanD`` is black while ``ReduceMean`` is gray.
  (From the ModelZoo mixlists, and GE's own LayerNormFusionPass, which matches ``ReduceMeanD``
  nodes in TF graphs; the dynamic-shape ``ReduceMean`` etc. are used when the operand is not
  constant.)
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
    # reductions (dynamic forms; CONST_TO_ATTR gives the D forms)
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

# GE type -> its ConstToAttr "D" variant, used when the listed input indices are all constants.
CONST_TO_ATTR: dict[str, tuple[str, tuple[int, ...]]] = {
    "ReduceSum": ("ReduceSumD", (1,)),
    "ReduceMean": ("ReduceMeanD", (1,)),
    "ReduceMax": ("ReduceMaxD", (1,)),
    "ReduceMin": ("ReduceMinD", (1,)),
    "ReduceProd": ("ReduceProdD", (1,)),
    "ReduceAll": ("ReduceAllD", (1,)),
    "ReduceAny": ("ReduceAnyD", (1,)),
    "StridedSlice": ("StridedSliceD", (1, 2, 3)),
    "Tile": ("TileD", (1,)),
    "OneHot": ("OneHotD", (1,)),
    "Pad": ("PadD", (1,)),
    "Split": ("SplitD", (0,)),
    "SplitV": ("SplitVD", (1, 2)),
    "DepthwiseConv2DBackpropInput": ("DepthwiseConv2DBackpropInputD", (0,)),
    "DepthwiseConv2DBackpropFilter": ("DepthwiseConv2DBackpropFilterD", (1,)),
    "Conv2DBackpropInput": ("Conv2DBackpropInputD", (0,)),
    "Conv2DBackpropFilter": ("Conv2DBackpropFilterD", (1,)),
}

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


def ge_type(tf_type: str, attrs: dict | None = None, const_inputs: set[int] | frozenset[int] = frozenset()) -> str:
    """The GE op type of a TF node.  ``attrs``: decoded attributes that change the mapping
    (``is_training`` of FusedBatchNorm*); ``const_inputs``: input indices fed by constants."""
    attrs = attrs or {}
    if tf_type.startswith("FusedBatchNorm") and "Grad" not in tf_type and attrs.get("is_training"):
        return BATCHNORM_TRAINING
    t = TF_TO_GE.get(tf_type, tf_type)
    d = CONST_TO_ATTR.get(t)
    if d is not None and all(i in const_inputs for i in d[1]):
        return d[0]
    return t


def attr_inputs(ge_t: str) -> tuple[int, ...]:
    """Input indices a ``D`` variant takes as attributes (not kernel inputs)."""
    for d, idx in CONST_TO_ATTR.values():
        if d == ge_t:
            return idx
    return ()


def table_markdown() -> str:
    """The mapping as a Markdown table (docs/tensorflow.md embeds it)."""
    rows = ["| TF op type | GE op type | note |", "|---|---|---|"]
    for tf_t, ge_t in sorted(TF_TO_GE.items()):
        note = ""
        if ge_t in CONST_TO_ATTR:
            note = f"`{CONST_TO_ATTR[ge_t][0]}` when the axes operand is constant (frozen graphs)"
        if tf_t.startswith("FusedBatchNorm") and "Grad" not in tf_t:
            note = f"`{BATCHNORM_TRAINING}` when is_training"
        rows.append(f"| `{tf_t}` | `{ge_t}` | {note} |")
    for ge_t, (d, _) in sorted(CONST_TO_ATTR.items()):
        if ge_t not in TF_TO_GE.values():
            rows.append(f"| `{ge_t}` | `{ge_t}` | `{d}` when the operand is constant |")
    return "\n".join(rows)
