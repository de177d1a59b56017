"""A fused kernel under the plan's kernel dtypes and the chip's numerics: it executes the fused node's (input,
output) dtypes, the overflow mode saturates only what it reads from and writes to outside the kernel, HF32 applies to
its cube member's operands; replay reproduces the capture.  Oracles are computed here from the inputs (the HF32 bit
rounding from GE's ATC doc / the ops-nn goldens, docs/semantics.md "HF32"), never by the emulator."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.workload import Workload


class MmBias(nn.Module):
    """torch.mm + a 1-D bias: GE's MatMulBiasAddFusionPass makes it one MatMul with a bias input (ascend910b)."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.w, self.b = nn.Parameter(w), nn.Parameter(b)

    def forward(self, x):
        return torch.mm(x, self.w) + self.b


def _rows(run: Path) -> list[dict]:
    (kd,) = run.glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with open(kd, newline="") as f:
        return [r for r in csv.DictReader(f) if r["Step Id"] == "0"]


def _tensor(run: Path, name: str) -> torch.Tensor:
    return torch.load(run / "dump" / "mixed" / "step0" / "rank0" / "dump_tensor_data" / name,
                      weights_only=True).float()


def _rne16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float16).to(torch.float32)


def _hf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> HF32 (11 mantissa bits, the low 12 rounded away, ties away from zero on the magnitude)."""
    b = t.numpy().view(np.uint32).astype(np.uint64)
    sign, mag = b & 0x80000000, b & 0x7FFFFFFF
    mag = ((mag >> 11) + 1) >> 1 << 12
    return torch.from_numpy((sign | mag).astype(np.uint32).view(np.float32))


def _random_case():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g), torch.randn(16, generator=g)


def _capture(tmp_path, model, x, **kw):
    return capture(Workload(model, [(x,)], name="m"), tmp_path / "r", dump="tensors", local=False, **kw)


def test_a_fused_kernel_with_fp16_inputs_and_an_fp32_output_rounds_only_its_inputs(tmp_path):
    """force_fp32 runs the fused MatMul (bias input) fp16-in / fp32-out: x, w and the bias rounded to fp16, the
    product and the bias accumulated in fp32, the result left fp32; its one kernel row says so."""
    x, w, b = _random_case()
    run = _capture(tmp_path, MmBias(w, b), x, mode="force_fp32")
    out = _tensor(run, "Model.output.0.forward.output.0.pt")
    assert torch.equal(out, _rne16(x) @ _rne16(w) + _rne16(b))
    (row,) = [r for r in _rows(run) if r["Name"] == "Aten.mm.default.0"]
    assert (row["Type"], row["Input Data Types"], row["Output Data Types"]) == (
        "MatMul", "FLOAT16;FLOAT16;FLOAT16", "FLOAT")


def test_saturation_mode_does_not_saturate_a_value_inside_a_fused_kernel(tmp_path):
    """x @ w = 70016 (over fp16's max) inside the kernel, + bias -10016 = 60000 leaves it (all exact in fp16): one
    rounding, no saturation in between (per-op saturation would give 65504 - 10016 = 55488)."""
    x, w, b = torch.ones(4, 16), torch.full((16, 16), 4376.0), torch.full((16,), -10016.0)
    run = _capture(tmp_path, MmBias(w, b), x, overflow_mode="saturation")
    assert json.loads((run / "run.json").read_text())["overflow_mode"] == "saturation"
    out = _tensor(run, "Model.output.0.forward.output.0.pt")
    assert torch.equal(out, torch.full((4, 16), 60000.0))
    inner = _tensor(run, "Aten.mm.default.0.forward.output.0.pt")
    assert torch.equal(inner, torch.full((4, 16), 70016.0))          # dumped as executed, unsaturated


def test_a_fused_kernels_cube_member_reads_its_operands_as_hf32(tmp_path):
    """fp32 (must_keep_origin_dtype) MatMul with bias, HF32 allowed for matmul: x and w read as HF32, the bias
    (the Add member's operand, not the cube's) as it is, fp32 accumulation and output."""
    x, w, b = _random_case()
    run = _capture(tmp_path, MmBias(w, b), x, mode="must_keep_origin_dtype", allow_hf32="matmul")
    out = _tensor(run, "Model.output.0.forward.output.0.pt")
    assert torch.equal(out, _hf32(x) @ _hf32(w) + b)
    assert not torch.equal(out, x @ w + b)                           # the oracle tells HF32 from fp32 here


@pytest.mark.parametrize("kw", [dict(mode="force_fp32"), dict(overflow_mode="saturation"),
                                dict(mode="must_keep_origin_dtype", allow_hf32="matmul")],
                         ids=["fp16_in_fp32_out", "saturation", "hf32"])
def test_replay_of_a_fused_run_under_its_numerics_reproduces_its_capture(tmp_path, kw):
    x, w, b = _random_case()
    run = _capture(tmp_path, MmBias(w * 4000, b), x, **kw)
    a = analyze(run)
    assert a.graph.nodes["Aten.mm.default.0"]["members"] == ["Aten.mm.default.0", "Aten.add.Tensor.0"]
    measured = [m["output"]["rel_l2"] for m in a.final_metrics()]
    replayed = [m["output"]["rel_l2"] for m in a.replay(a.plan).final_metrics(tolerance=a.tolerance)]
    assert measured == replayed and measured[0] > 0


def test_onnx_saturation_mode_does_not_saturate_a_value_inside_a_fused_kernel(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.full((16, 16), 4376.0, dtype=np.float32), "W")
    bias = numpy_helper.from_array(np.full((16,), -10016.0, dtype=np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "B"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w, bias])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "model.onnx")
    np.savez(tmp_path / "x.npz", x=np.ones((4, 16), dtype=np.float32))
    run = capture(str(tmp_path / "model.onnx"), tmp_path / "r", dump="tensors", local=False,
                  inputs=[str(tmp_path / "x.npz")], overflow_mode="saturation")
    meta = json.loads((run / "run.json").read_text())
    assert meta["fusion"]["passes"].get("MatMulBiasAddFusionPass") == 1
    (y,) = run.glob("dump/mixed/step0/rank0/dump_tensor_data/Model.output.0.forward.output.0*")
    assert np.array_equal(np.load(y).astype(np.float32), np.full((4, 16), 60000.0, dtype=np.float32))


def test_tensorflow_dense_layer_is_one_kernel_not_rounded_between_its_matmul_and_bias(tmp_path):
    """A Keras Dense layer's MatMul + BiasAdd (MatMulBiasAddFusionPass): the same 70016 - 10016 = 60000 case as
    above through the TF rewrite, whose members run cube-style (fp32 compute), only what leaves rounded."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from advisor.tf.capture import capture_tf
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16)])
    m.layers[0].set_weights([np.full((16, 16), 4376.0, dtype="float32"), np.full((16,), -10016.0, dtype="float32")])
    run = capture_tf((m, [(np.ones((4, 16), dtype="float32"),)]), tmp_path / "r", dump="tensors", local=False,
                     overflow_mode="saturation")
    assert json.loads((run / "run.json").read_text())["fusion"]["passes"]["MatMulBiasAddFusionPass"] == 1
    base = run / "dump" / "mixed" / "step0" / "rank0"
    rec = json.loads((base / "dump.json").read_text())["data"]["Model.output.0.forward"]["output"][0]
    out = np.load(base / "dump_tensor_data" / rec["data_name"], allow_pickle=False).astype(np.float32)
    assert np.array_equal(out, np.full((4, 16), 60000.0, dtype=np.float32))
    (row,) = [r for r in _rows(run) if r["Type"] == "MatMulV2"]
    assert row["Input Data Types"] == "FLOAT16;FLOAT16;FLOAT16" and row["Output Data Types"] == "FLOAT16"
