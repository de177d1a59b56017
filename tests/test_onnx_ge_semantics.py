"""Issue 20's acceptance, seen through the CLI on tiny ONNX graphs: ``advisor capture model.onnx --inputs x.npz``
with the real 2026 ascend910b ops-info entries (``--ops-info``, tests/fixtures/real/ge_ops_info_910b); the dtypes
and cores read back from kernel_details.csv as a real profile would be read."""
import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPS_INFO = Path(__file__).parent / "fixtures/real/ge_ops_info_910b/aic-ascend910b-ops-info.json"


def _model(nodes, inits, out="y", shape=(4, 8)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [shape[0], 8])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _capture(tmp_path, model, *args):
    d = tmp_path / "m"
    d.mkdir()
    onnx.save(model, d / "model.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "x.npz", x=rng.standard_normal((4, 8)).astype(np.float32))
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "advisor", "capture", str(d / "model.onnx"), "--inputs",
                        str(d / "x.npz"), "--out", str(run), "--ops-info", str(OPS_INFO), *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rows = {}
    for f in run.glob("profile/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"):
        with open(f, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                rows[row["Name"]] = row
    return rows


def _w(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.slow
def test_gray_mul_fed_only_by_initializers_runs_float(tmp_path):
    m = _model([helper.make_node("Mul", ["w", "decay"], ["wd"], name="decay_mul"),
                helper.make_node("MatMul", ["x", "wd"], ["y"], name="mm")],
               {"w": _w(8, 8), "decay": np.full((8, 8), 0.99, np.float32)})
    rows = _capture(tmp_path, m)
    mul = rows["decay_mul"]
    assert (mul["Input Data Types"], mul["Output Data Types"]) == ("FLOAT;FLOAT", "FLOAT")
    assert rows["mm"]["Input Data Types"] == "FLOAT16;FLOAT16"


@pytest.mark.slow
def test_op_without_an_ai_core_kernel_after_an_fp16_matmul_runs_float_on_ai_cpu(tmp_path):
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                helper.make_node("Hardmax", ["h"], ["y"], name="hardmax")], {"w": _w(8, 8)})
    rows = _capture(tmp_path, m)
    assert rows["mm"]["Output Data Types"] == "FLOAT16"
    hm = rows["hardmax"]
    assert (hm["Type"], hm["Input Data Types"], hm["Output Data Types"]) == ("HardMax", "FLOAT", "FLOAT")
    assert hm["Accelerator Core"] == "AI_CPU" and rows["mm"]["Accelerator Core"] == "AI_CORE"
    # an AI CPU kernel costs what the real profile's AI CPU kernels cost: far above its AI Core twin
    assert float(hm["Duration(us)"]) > 100.0


@pytest.mark.slow
def test_matmul_in_force_fp32_has_float16_inputs_and_a_float_output(tmp_path):
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"w": _w(8, 8)})
    rows = _capture(tmp_path, m, "--mode", "force_fp32")
    mm = rows["mm"]
    assert (mm["Input Data Types"], mm["Output Data Types"]) == ("FLOAT16;FLOAT16", "FLOAT")


@pytest.mark.slow
def test_matmul_in_allow_fp32_to_bf16_stays_float(tmp_path):
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"w": _w(8, 8)})
    rows = _capture(tmp_path, m, "--mode", "allow_fp32_to_bf16")
    mm = rows["mm"]
    assert (mm["Input Data Types"], mm["Output Data Types"]) == ("FLOAT;FLOAT", "FLOAT")


@pytest.mark.slow
def test_force_fp32_matmul_output_is_not_rounded_in_the_dump(tmp_path):
    """fp16 inputs, fp32 output: the mixed run's output equals fp32 math on fp16-rounded inputs, not fp16."""
    w = _w(8, 8)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"w": w})
    _capture(tmp_path, m, "--mode", "force_fp32", "--dump", "tensors")
    run = tmp_path / "run"
    x = np.load(tmp_path / "m" / "x.npz")["x"]
    want = x.astype(np.float16).astype(np.float32) @ w.astype(np.float16).astype(np.float32)
    got = np.load(next(run.glob("dump/mixed/step0/rank0/dump_tensor_data/mm.forward.output.0.npy")))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.array_equal(got, want.astype(np.float16).astype(np.float32))
