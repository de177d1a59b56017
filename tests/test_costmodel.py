"""The Ascend 910B cost model: pure, monotone, cube fp16 faster than fp32, vector fp16 ~2x fp32."""
from __future__ import annotations

import pytest

from advisor import costmodel as cm


def test_matmul_flops_from_shapes():
    assert cm.estimate_flops("MatMulV2", [[64, 512], [512, 256]], [[64, 256]]) == 2 * 64 * 256 * 512
    # addmm-style: bias first, then the two matrices (K from the first matrix)
    assert cm.estimate_flops("BatchMatMul", [[8, 128, 64], [8, 64, 128]], [[8, 128, 128]]) == 2 * 8 * 128 * 128 * 64


def test_conv_flops():
    f = cm.estimate_flops("Conv2D", [[2, 3, 8, 8], [4, 3, 3, 3]], [[2, 4, 8, 8]])
    assert f == 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)


def test_bytes_follow_dtypes():
    b32 = cm.estimate_bytes([[1024, 1024]], [[1024, 1024]], ["fp32"], ["fp32"])
    b16 = cm.estimate_bytes([[1024, 1024]], [[1024, 1024]], ["fp16"], ["fp16"])
    assert b32 == 2 * b16 == 2 * 1024 * 1024 * 4


def test_cube_fp16_much_faster_than_fp32_when_compute_bound():
    f = cm.estimate_flops("MatMulV2", [[4096, 4096], [4096, 4096]], [[4096, 4096]])
    t16 = cm.op_time_us("MatMulV2", f, cm.estimate_bytes([[4096, 4096]] * 2, [[4096, 4096]], ["fp16"] * 2, ["fp16"]), "fp16")
    t32 = cm.op_time_us("MatMulV2", f, cm.estimate_bytes([[4096, 4096]] * 2, [[4096, 4096]], ["fp32"] * 2, ["fp32"]), "fp32")
    assert t32 / t16 == pytest.approx(cm.CUBE_TFLOPS["fp16"] / cm.CUBE_TFLOPS["fp32"], rel=0.05)


def test_vector_fp16_about_twice_fp32_and_launch_floor():
    n = [[64, 1 << 20]]
    f = cm.estimate_flops("Gelu", n, n)
    t16 = cm.op_time_us("Gelu", f, cm.estimate_bytes(n, n, ["fp16"], ["fp16"]), "fp16")
    t32 = cm.op_time_us("Gelu", f, cm.estimate_bytes(n, n, ["fp32"], ["fp32"]), "fp32")
    assert 1.5 < (t32 - cm.LAUNCH_US) / (t16 - cm.LAUNCH_US) < 2.5
    assert cm.op_time_us("Add", 1.0, 8.0, "fp32") == pytest.approx(cm.LAUNCH_US, abs=0.01)


def test_pure_and_core_type():
    a = cm.op_time_us("SoftmaxV2", 1e9, 1e8, "fp16")
    assert a == cm.op_time_us("SoftmaxV2", 1e9, 1e8, "fp16")
    assert cm.core_type("MatMulV2") == "AI_CORE" and cm.core_type("Exp") == "AI_VECTOR_CORE"
