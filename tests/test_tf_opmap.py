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


def test_const_axes_give_the_d_variant_only_when_constant():
    assert opmap.ge_type("Mean", const_inputs={1}) == "ReduceMeanD"
    assert opmap.ge_type("Mean") == "ReduceMean"
    assert opmap.ge_type("Sum", const_inputs={1}) == "ReduceSumD"
    assert opmap.ge_type("StridedSlice", const_inputs={1, 2}) == "StridedSlice"   # end not constant
    assert opmap.ge_type("StridedSlice", const_inputs={1, 2, 3}) == "StridedSliceD"


def test_fused_batch_norm_training_and_inference():
    assert opmap.ge_type("FusedBatchNormV3", {"is_training": False}) == "BNInfer"
    assert opmap.ge_type("FusedBatchNormV3", {"is_training": True}) == "BNTrainingUpdate"
    assert opmap.ge_type("FusedBatchNormGradV3", {"is_training": True}) == "BNTrainingUpdateGrad"


@pytest.mark.parametrize("soc", ["ascend910b", "ascend910"])
def test_every_mapped_ge_type_exists_in_the_cann_tables(soc):
    lists = load_lists(soc)
    types = (set(opmap.TF_TO_GE.values()) | set(opmap.CONST_TO_ATTR) | {d for d, _ in opmap.CONST_TO_ATTR.values()}
             | {opmap.BATCHNORM_TRAINING})
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
