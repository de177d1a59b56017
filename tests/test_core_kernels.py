"""advisor.kernels: ops-info dtype combinations as data (the matching rules are semantics' and tested there)."""
from advisor.kernels import Kernel, KernelTable, kernel_from_ops_info

LAYER_NORM_V4 = {  # hicann/ge tests/.../CANN_910b_stub/.../aic-ascend910b-ops-info-nn.json (ports trimmed)
    "input0": {"dtype": "float32,float16,float16,bfloat16,bfloat16", "name": "x"},
    "input1": {"dtype": "int32,int32,int32,int32,int32", "name": "normalized_shape"},
    "output0": {"dtype": "float32,float16,float16,bfloat16,bfloat16", "name": "y"},
    "output1": {"dtype": "float32,float32,float32,float32,float32", "name": "mean"},
    "opFile": {"value": "layer_norm_v4"},
}


def test_combinations_are_the_columns_of_the_port_dtype_lists():
    k = kernel_from_ops_info("LayerNormV4", LAYER_NORM_V4)
    assert k.n_combos == 5
    assert k.combos()[1] == (("fp16", "int32"), ("fp16", "fp32"))
    assert k.float_dtypes(0) == {"fp32", "fp16", "bf16"}
    assert k.supports("bf16") and not k.no_kernel


def test_undeclared_ports_support_every_float_and_null_opfile_means_no_kernel():
    k = kernel_from_ops_info("MatMulV2", {"input0": {"name": "x1"}, "output0": {"name": "y"}})
    assert not k.declared and k.float_dtypes(0) is None and k.supports("fp16")
    r = kernel_from_ops_info("Reshape", {"input0": {"dtype": "float,int32"}, "opFile": {"value": "Null"}})
    assert r.no_kernel


def test_table_round_trips_through_its_json_form():
    t = KernelTable.from_ops_info({"LayerNormV4": LAYER_NORM_V4, "Exp": {"input0": {"dtype": "float16,float"},
                                                                           "output0": {"dtype": "float16,float"}}})
    back = KernelTable.from_dict(t.to_dict())
    assert back.get("LayerNormV4") == t.get("LayerNormV4") and back.on_ai_core("Exp")
    assert not back.on_ai_core("RandomUniform")
    assert Kernel.from_dict("X", {"in": [None], "out": ["float16"]}).outputs == (("fp16",),)
