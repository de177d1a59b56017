"""The TF -> GE op-type table (pure data: runs without TensorFlow)."""
from __future__ import annotations

import pytest

from advisor.oplists import SOCS, load_lists
from advisor.tf import is_missing_tf_error, is_tf_object, opmap


def test_renamed_types():
    assert opmap.ge_type("AddV2") == "Add"
    assert opmap.ge_type("Softmax") == "SoftmaxV2"
    assert opmap.ge_type("LogSoftmax") == "LogSoftmaxV2"
    assert opmap.ge_type("MatMul") == "MatMulV2"
    assert opmap.ge_type("BatchMatMulV3") == "BatchMatMulV2"
    assert opmap.ge_type("BatchMatMul") == "BatchMatMulV2"
    assert opmap.ge_type("Einsum") == "EinSum"
    assert opmap.ge_type("Relu") == "Relu"          # identical names pass through
    assert opmap.ge_type("SomeCustomOp") == "SomeCustomOp"


def test_the_parser_type_is_the_original_and_graph_fusion_makes_the_d_variant():
    """One rule, one place: the TF parser builds ReduceMean / StridedSlice, GE's graph fusion (advisor.fusion)
    turns the constant operands into attributes, as for every framework."""
    from advisor import fusion
    from advisor import graph as G
    assert opmap.ge_type("Mean") == "ReduceMean" and opmap.ge_type("Sum") == "ReduceSum"
    assert opmap.ge_type("StridedSlice") == "StridedSlice"
    g = G.new_graph(framework="tensorflow")
    G.add_op(g, "x", "Data", role="data", out_shapes=[[4, 8]], out_dtypes=["fp32"])
    G.add_op(g, "y", "Data", role="data", out_shapes=[[2]], out_dtypes=["int32"])
    for c in ("axes", "begin", "end", "strides"):
        G.add_op(g, c, "Const", role="const", dtype="int32", out_shapes=[[2]], out_dtypes=["int32"])
    G.add_op(g, "mean", "ReduceMean", in_shapes=[[4, 8], [1]], out_shapes=[[4, 1]], in_dtypes=["fp32", "int32"],
             out_dtypes=["fp32"])
    G.add_op(g, "ss", "StridedSlice", in_shapes=[[4, 8], [2], [2], [2]], out_shapes=[[2, 8]],
             in_dtypes=["fp32", "int32", "int32", "int32"], out_dtypes=["fp32"])
    G.add_op(g, "ss2", "StridedSlice", in_shapes=[[4, 8], [2], [2], [2]], out_shapes=[[2, 8]],
             in_dtypes=["fp32", "int32", "int32", "int32"], out_dtypes=["fp32"])
    G.connect(g, "x", "mean", 0, 0)
    G.connect(g, "axes", "mean", 0, 1, float=False)
    for n, end in (("ss", "end"), ("ss2", "y")):          # ss2's end is computed: not a constant
        G.connect(g, "x", n, 0, 0)
        for i, c in enumerate(("begin", end, "strides"), 1):
            G.connect(g, c, n, 0, i, float=False)
    fz = fusion.fuse(g, "ascend910b", load_lists("ascend910b"))
    assert [fz.graph.nodes[n]["type"] for n in ("mean", "ss", "ss2")] == ["ReduceMeanD", "StridedSliceD",
                                                                         "StridedSlice"]


def test_fused_batch_norm_training_and_inference():
    assert opmap.ge_type("FusedBatchNormV3", {"is_training": False}) == "BNInfer"
    assert opmap.ge_type("FusedBatchNormV3", {"is_training": True}) == "BNTrainingUpdate"
    assert opmap.ge_type("FusedBatchNormGradV3", {"is_training": True}) == "BNTrainingUpdateGrad"


@pytest.mark.parametrize("soc", ["ascend910b", "ascend910"])
def test_every_mapped_ge_type_exists_in_the_cann_tables(soc):
    lists = load_lists(soc)
    from advisor.fusion import D_TYPES
    parsed = set(opmap.TF_TO_GE.values()) | {opmap.BATCHNORM_TRAINING} | set(opmap.SAME_NAME_D_ORIGINALS)
    types = parsed | {D_TYPES[t][0] for t in parsed if t in D_TYPES}
    assert sorted(t for t in types if not lists.is_known(t)) == sorted(opmap.NOT_IN_TABLES)
    assert soc in SOCS


def test_d_variant_changes_the_list_on_910b():
    # why the ConstToAttr rule matters: a mixlist must name the type GE actually builds
    lists = load_lists("ascend910b")
    assert lists.list_of("ReduceMeanD") == "black" and lists.list_of("ReduceMean") == "gray"


def test_table_markdown_lists_every_mapping():
    md = opmap.table_markdown()
    for tf_t, ge_t in opmap.TF_TO_GE.items():
        assert f"| `{tf_t}` | `{ge_t}` |" in md


def test_tf_object_detection_without_importing_tensorflow():
    class Model:  # a user class that merely shares a name is not a TF object
        pass
    assert not is_tf_object(Model())
    Fake = type("Layer", (), {"__module__": "keras.src.layers.layer"})
    Sub = type("MyModel", (Fake,), {"__module__": "user_code"})
    assert is_tf_object(Sub())                     # a user subclass of a Keras class is
    e = ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    assert is_missing_tf_error(e)
    assert not is_missing_tf_error(ModuleNotFoundError("x", name="torchvision"))
