"""Graph fusion through the pipeline: what the captures execute and write (kernel rows typed as GE judges them,
per-op dumps, fused kernels not rounded between their members), replay of a fused run, the ONNX acceptance
through the CLI, which GE dumps are fused when read, and what diff and recommend say of fused-away types."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from advisor import fusion
from advisor import graph as G
from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.ingest.ge_dump import write_ge_onnx
from advisor.ingest.run import load_run
from advisor.mixlist import Mixlist
from advisor.workload import Workload


def _rows(run: Path) -> list[dict]:
    (kd,) = run.glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with open(kd, newline="") as f:
        return [r for r in csv.DictReader(f) if r["Step Id"] == "0"]


def _dump(run: Path, which: str = "mixed") -> dict:
    return json.loads((run / "dump" / which / "step0" / "rank0" / "dump.json").read_text())["data"]


class SumHead(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.l = nn.Linear(16, 16)
        with torch.no_grad():
            self.l.weight.mul_(scale)

    def forward(self, x):
        return self.l(x).sum(dim=-1)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)

    def forward(self, x, y):
        s = x + y
        return self.ln(s) + s


class MmBias(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w = nn.Parameter(torch.randn(16, 16, generator=g))
        self.b = nn.Parameter(torch.randn(16, generator=g) * 1e-3)

    def forward(self, x):
        return torch.mm(x, self.w) + self.b


def _wl(model, *xs, name="m"):
    return Workload(model, [tuple(xs)], name=name)


# ---------------------------------------------------------------------- PyTorch
def test_pytorch_sum_with_constant_axes_runs_as_reduce_sum_d_in_fp16(tmp_path):
    torch.manual_seed(0)
    run = capture(_wl(SumHead(), torch.randn(4, 16)), tmp_path / "r", dump="stats", local=False)
    (row,) = [r for r in _rows(run) if r["Name"] == "Aten.sum.dim_IntList.0"]
    assert row["Type"] == "ReduceSumD" and row["Output Data Types"] == "FLOAT16"
    assert _dump(run)["Aten.sum.dim_IntList.0.forward"]["output"][0]["dtype"] == "torch.float16"
    meta = json.loads((run / "run.json").read_text())
    assert meta["fusion"]["passes"] == {"ConstToAttrReduceSumFusion": 1}


def test_pytorch_fp32_residual_layer_norm_is_not_fused_and_black_listing_layer_norm_v4_works(tmp_path):
    torch.manual_seed(0)
    run = capture(_wl(Residual(), torch.randn(4, 16), torch.randn(4, 16)), tmp_path / "r", dump="stats", local=False,
                  mixlist=Mixlist(black_add=("LayerNormV4",)))
    types = {r["Name"]: r for r in _rows(run)}
    assert types["Aten.native_layer_norm.default.0"]["Type"] == "LayerNormV4"
    assert types["Aten.native_layer_norm.default.0"]["Output Data Types"].split(";")[0] == "FLOAT"
    assert types["Aten.add.Tensor.0"]["Type"] == "Add"


def test_pytorch_fp16_residual_layer_norm_fuses_into_add_layer_norm_and_ignores_a_layer_norm_v4_entry(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(4, 16).half(), torch.randn(4, 16).half()
    run = capture(_wl(Residual().half(), x, y), tmp_path / "r", dump="stats", local=False,
                  mixlist=Mixlist(black_add=("LayerNormV4",)))
    rows = {r["Name"]: r for r in _rows(run)}
    ln = rows["Aten.native_layer_norm.default.0"]
    assert ln["Type"] == "AddLayerNorm" and ln["Output Data Types"].split(";")[0] == "FLOAT16"
    assert len(ln["Input Data Types"].split(";")) == 4                  # x1, x2, gamma, beta
    assert "Aten.add.Tensor.0" not in rows                               # fused: no row of its own
    assert {"Aten.add.Tensor.0.forward", "Aten.native_layer_norm.default.0.forward"} <= set(_dump(run))
    meta = json.loads((run / "run.json").read_text())
    assert ("Aten.add.Tensor.0 + Aten.native_layer_norm.default.0 fused into AddLayerNorm by AddLayerNormFusionPass"
            in meta["fusion"]["rewrites"])


def _rne16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float16).to(torch.float32)


def test_a_fused_kernels_inner_value_is_not_rounded_between_its_members(tmp_path):
    """MatMul + bias: fp16 inputs, fp32 accumulation of the product and the bias, one rounding of the result
    ([DOC] MatMulBiasAddFusionPass.md) - an oracle computed here, not by the emulator."""
    torch.manual_seed(0)
    m, x = MmBias(), torch.randn(8, 16)
    run = capture(_wl(m, x), tmp_path / "r", dump="tensors", local=False)
    out = torch.load(run / "dump" / "mixed" / "step0" / "rank0" / "dump_tensor_data" /
                     "Model.output.0.forward.output.0.pt", weights_only=True).float()
    fused = _rne16(_rne16(x) @ _rne16(m.w.detach()) + _rne16(m.b.detach()))
    per_op = _rne16(_rne16(_rne16(x) @ _rne16(m.w.detach())) + _rne16(m.b.detach()))
    assert torch.equal(out, fused)
    assert not torch.equal(fused, per_op)          # the oracle tells the two apart on this data
    rows = {r["Name"]: r for r in _rows(run)}
    assert rows["Aten.mm.default.0"]["Type"] == "MatMul" and "Aten.add.Tensor.0" not in rows
    mm = _dump(run)["Aten.mm.default.0.forward"]["output"][0]
    assert mm["dtype"] == "torch.float32"          # the inner product stays unrounded in the dump


def test_replay_of_a_fused_run_reproduces_its_capture(tmp_path):
    torch.manual_seed(0)
    run = capture(_wl(MmBias(), torch.randn(8, 16)), tmp_path / "r", dump="tensors", local=False)
    a = analyze(run)
    assert a.graph.nodes["Aten.mm.default.0"]["members"] == ["Aten.mm.default.0", "Aten.add.Tensor.0"]
    measured = a.final_metrics()
    replayed = a.replay(a.plan).final_metrics(tolerance=a.tolerance)
    assert [m["output"]["rel_l2"] for m in measured] == [m["output"]["rel_l2"] for m in replayed]
    assert measured[0]["output"]["rel_l2"] > 0


def test_diff_notes_a_mixlist_entry_for_a_type_fusion_replaced(tmp_path):
    from advisor.recommend.diffing import diff
    torch.manual_seed(0)
    run = capture(_wl(SumHead(), torch.randn(4, 16)), tmp_path / "r", dump="stats", local=False)
    ml = tmp_path / "m.json"
    ml.write_text(json.dumps({"black-list": {"to-add": ["ReduceSum"]}}))
    res = diff(run, None, str(ml))
    assert not res.flips
    assert any("ReduceSum no longer exists when GE judges precisions" in n for n in res.notes)


def test_recommend_proposes_only_types_that_exist_when_ge_judges(tmp_path):
    from advisor.recommend import recommend
    torch.manual_seed(0)
    x = torch.randn(64, 16) * 40
    run = capture(_wl(SumHead(scale=400.0), x), tmp_path / "r", dump="tensors")
    a = analyze(run)
    assert a.plan["Aten.sum.dim_IntList.0"] == "fp16" and not a.verdict().ok      # the fp16 sum overflows
    rec = recommend(a)
    types = {e.edit.type for e in rec.edits}
    assert types and types <= set(a.compiled.types) and "ReduceSum" not in types


# ---------------------------------------------------------------------- ONNX through the CLI
def test_onnx_capture_cli_reduce_sum_with_constant_axes_is_reduce_sum_d_in_float16(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(0)
    w = numpy_helper.from_array(rs.randn(8, 8).astype(np.float32), "W")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("ReduceSum", ["h", "axes"], ["y"], name="rsum", keepdims=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])], [w, axes])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "model.onnx")
    np.savez(tmp_path / "x.npz", x=rs.randn(4, 8).astype(np.float32))
    p = subprocess.run([sys.executable, "-m", "advisor", "capture", "model.onnx", "--inputs", "x.npz", "--out", "run"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    (row,) = [r for r in _rows(tmp_path / "run") if r["Name"] == "rsum"]
    assert (row["Type"], row["Input Data Types"], row["Output Data Types"]) == ("ReduceSumD", "FLOAT16", "FLOAT16")


# ---------------------------------------------------------------------- GE dumps: before and after fusion
def _pre_fusion_graph():
    g = G.new_graph()
    G.add_op(g, "x", "Data", role="data", out_shapes=["4,8"], out_dtypes=["fp32"])
    G.add_op(g, "w", "Const", role="const", out_shapes=["8,8"], out_dtypes=["fp32"])
    G.add_op(g, "mm", "MatMulV2", in_shapes=["4,8", "8,8"], out_shapes=["4,8"], in_dtypes=["fp32", "fp32"],
             out_dtypes=["fp32"])
    G.connect(g, "x", "mm", 0, 0)
    G.connect(g, "w", "mm", 0, 1)
    G.add_op(g, "axes", "Const", role="const", dtype="int64", out_shapes=["1"], out_dtypes=["int64"])
    G.add_op(g, "rs", "ReduceSum", in_shapes=["4,8", "1"], out_shapes=["4"], in_dtypes=["fp32", "int64"],
             out_dtypes=["fp32"])
    G.connect(g, "mm", "rs", 0, 0)
    G.connect(g, "axes", "rs", 0, 1, float=False)
    return g


@pytest.mark.parametrize("stage,fused", [("PreRunBegin", True), ("PreRunAfterPrepare", True),
                                         ("OptimizeQuantGraph_FeGraphFusionAfter", True),
                                         ("Build", False), ("OptimizeOriginalGraph_FeGraphFusionAfter", False)])
def test_a_ge_dump_is_fused_when_its_stage_is_before_graph_fusion(tmp_path, stage, fused):
    write_ge_onnx(_pre_fusion_graph(), tmp_path / f"ge_onnx_00003_graph_0_{stage}.pbtxt")
    run = load_run(tmp_path)
    assert run.graph.nodes["rs"]["type"] == ("ReduceSumD" if fused else "ReduceSum")
    assert ("fusion" in run.sources) is fused


def test_an_emulator_run_from_before_fusion_was_modelled_is_fused_when_read(tmp_path):
    write_ge_onnx(_pre_fusion_graph(), tmp_path / "graph" / "ge_onnx_00000_graph_0_Build.pbtxt")
    (tmp_path / "run.json").write_text(json.dumps({"emulated": True, "soc": "ascend910b", "mode": "mixed_float16"}))
    run = load_run(tmp_path)
    assert run.graph.nodes["rs"]["type"] == "ReduceSumD"
    assert "before graph fusion was modelled" in run.sources["fusion"]["why"]


def test_a_post_fusion_dump_round_trips_its_fusion_attributes(tmp_path):
    fz = fusion.fuse(_pre_fusion_graph(), "ascend910b")
    g2 = G.new_graph()
    g2.add_nodes_from(fz.graph.nodes(data=True))
    g2.add_edges_from(fz.graph.edges(data=True))
    g2.graph["fusion"] = "applied"
    p = write_ge_onnx(g2, tmp_path / "ge_onnx_00000_graph_0_Build.pbtxt")
    back = load_run(p.parent).graph
    assert back.graph["fusion"] == "applied"
    a = back.nodes["rs"]
    assert (a["type"], a["pre_fusion_type"], a["fused_by"]) == ("ReduceSumD", "ReduceSum",
                                                                "ConstToAttrReduceSumFusion")


def test_a_graph_inferred_from_kernel_rows_is_not_fused(tmp_path):
    """kernel_details.csv rows are kernels GE built, after fusion: a ReduceSum row stays ReduceSum."""
    head = ("Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Input Shapes,Input Data Types,"
            "Output Shapes,Output Data Types\n")
    (tmp_path / "kernel_details.csv").write_text(
        head + '0,mm,MatMulV2,AI_CORE,1,3.0,"4,8;8,8",FLOAT16;FLOAT16,"4,8",FLOAT16\n'
               '0,rs,ReduceSum,AI_VECTOR_CORE,5,3.0,"4,8;1",FLOAT;INT64,"4",FLOAT\n')
    run = load_run(tmp_path / "kernel_details.csv")
    assert run.graph.nodes["rs"]["type"] == "ReduceSum" and "fusion" not in run.sources
