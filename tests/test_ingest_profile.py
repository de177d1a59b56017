"""Profile readers, discovery, edge inference, load_run and the per-precision acceptance count."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from advisor import graph as G
from advisor.ingest.discover import discover
from advisor.ingest.infer import graph_from_kernels
from advisor.ingest.profile import (KERNEL_COLUMNS, read_kernel_details, read_op_statistic, read_op_summary,
                                    read_profiler_info)
from advisor.ingest.run import load_run
from advisor.ingest.trace import read_trace_view

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "ingest"
SAMPLE = HERE / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv"


def _torch_npu_dir(tmp_path: Path, rank: int | None = None, name: str = "worker0_20231109_ascend_pt") -> Path:
    d = tmp_path / name
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(SAMPLE, out / "kernel_details.csv")
    info = {"config": {"common_config": {}}, "start_info": {}, "end_info": {}}
    if rank is not None:
        info["rank_id"] = rank
    (d / ("profiler_info.json" if rank is None else f"profiler_info_{rank}.json")).write_text(json.dumps(info))
    return d


_LOW = {"FLOAT16": "fp16", "DT_FLOAT16": "fp16", "BF16": "bf16", "DT_BF16": "bf16", "BFLOAT16": "bf16"}
_F32 = {"FLOAT", "FLOAT32", "DT_FLOAT"}


def _hand_precision(in_dt: str, out_dt: str) -> str:
    """Independent restatement of the documented rule: lowest float among inputs, else outputs."""
    for cell in (in_dt, out_dt):
        parts = [p.strip().upper() for p in cell.split(";")]
        low = [_LOW[p] for p in parts if p in _LOW]
        if low:
            return "fp16" if "fp16" in low else "bf16"
        if any(p in _F32 for p in parts):
            return "fp32"
        if any(p in ("DOUBLE", "FLOAT64") for p in parts):
            return "fp64"
    return "n/a"


def test_acceptance_real_sample_precision_share(tmp_path):
    _torch_npu_dir(tmp_path)
    # hand count with the csv module
    tot: dict[str, float] = {}
    n_rows = 0
    with open(SAMPLE, newline="") as f:
        for row in csv.DictReader(f):
            n_rows += 1
            p = _hand_precision(row["Input Data Types"], row["Output Data Types"])
            tot[p] = tot.get(p, 0.0) + float(row["Duration(us)"])
    total = sum(tot.values())
    run = load_run(tmp_path)
    assert len(run.kernels) == n_rows
    from advisor.ingest.findings import precision_share
    got = {r["precision"]: r for r in precision_share(run.kernels)}
    assert set(got) == set(tot)
    for p, t in tot.items():
        assert got[p]["time_us"] == pytest.approx(t, rel=1e-12)
        assert got[p]["share"] == pytest.approx(t / total, rel=1e-12)
    assert {"fp16", "fp32", "n/a"} <= set(got)  # the sample mixes FLOAT16 and FLOAT kernels
    # the graph: one node per kernel of the step, HCCL/MemSet/AI_CPU excluded from decisions
    g = run.graph
    ops = [n for n in G.op_nodes(g)]
    assert len(ops) == n_rows
    for n in ops:
        a = g.nodes[n]
        if a["core"] in ("HCCL", "AI_CPU") or a["type"] == "MemSet":
            assert a.get("decides") is False, n


def test_kernel_details_columns_and_exact_strings():
    k = read_kernel_details(SAMPLE)
    assert list(k.columns) == KERNEL_COLUMNS
    with open(SAMPLE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert k["start_us"].tolist() == [r["Start Time(us)"] for r in rows]
    assert k["in_shapes"].iloc[0] == rows[0]["Input Shapes"].strip('"')
    assert k["step"].tolist() == [int(r["Step Id"]) for r in rows]
    assert np.isnan(k.loc[k["name"] == "hcom_broadcast__445_0", "wait_us"]).sum() == 0
    assert (k["block_dim"].to_numpy() == [float(r["Block Dim"]) for r in rows]).all()


def test_level0_block_num_quoted_tab_times():
    k = read_kernel_details(FIX / "kernel_details_level0.csv")
    assert k["step"].tolist() == [-1, -1, -1]
    assert k["start_us"].tolist() == ["1699529622790614.812\t", "1699529622790630.8\t", "1699529622790700\t"]
    assert k["start_ns"].tolist() == [1699529622790614812, 1699529622790630800, 1699529622790700000]
    assert k["block_dim"].tolist()[0] == 24.0 and np.isnan(k["block_dim"].tolist()[1])
    assert np.isnan(k["wait_us"].iloc[2])
    assert k["precision"].tolist() == ["n/a"] * 3


def test_op_summary_old_and_new_names_same_schema():
    a = read_op_summary(FIX / "op_summary_old.csv")
    b = read_op_summary(FIX / "op_summary_new.csv")
    assert list(a.columns) == KERNEL_COLUMNS
    assert a.drop(columns="source").equals(b.drop(columns="source"))
    assert a["core"].tolist() == ["AI_CORE", "AI_VECTOR_CORE", "AI_VECTOR_CORE"]
    assert a["precision"].tolist() == ["fp16", "fp16", "fp32"]
    assert a["in_shapes"].iloc[0] == "8,3,224,224;64,3,7,7"
    assert a["block_dim"].tolist() == [32.0, 16.0, 1.0]


def test_op_statistic_and_profiler_info(tmp_path):
    p = tmp_path / "op_statistic.csv"
    p.write_text("OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
                 "MatMulV2,AI_CORE,4,12.5,3,3.125,3.5,80.0\nCast,AI_VECTOR_CORE,2,3.125,1.5,1.5625,1.625,20.0\n")
    s = read_op_statistic(p)
    assert s["type"].tolist() == ["MatMulV2", "Cast"] and s["count"].tolist() == [4.0, 2.0]
    assert s["total_us"].sum() == pytest.approx(15.625)
    (tmp_path / "profiler_info_5.json").write_text("{}")
    assert read_profiler_info(tmp_path / "profiler_info_5.json")["rank"] == 5
    (tmp_path / "profiler_info.json").write_text('{"rank_id": 2}')
    assert read_profiler_info(tmp_path / "profiler_info.json")["rank"] == 2


def test_trace_view_links_stacks_phases():
    t = read_trace_view(FIX / "trace_view.json")
    ops, kern, links = t["ops"], t["kernels"], t["links"]
    assert ops["name"].tolist() == ["aten::mm", "aten::add", "MmBackward0"]
    assert kern["name"].tolist() == ["MatMul_1", "Add_2"]
    pairs = {(ops.loc[ops.op_id == o, "name"].item(), kern.loc[kern.kernel_id == k, "name"].item())
             for o, k in zip(links.op_id, links.kernel_id)}
    assert pairs == {("aten::mm", "MatMul_1"), ("aten::add", "Add_2")}
    assert ops["phase"].tolist() == ["fwd", "fwd", "bwd"]
    assert "model.py(12)" in ops["call_stack"].iloc[0]
    assert ops["seq"].tolist()[:2] == [5, 6]


def _kf(rows):
    """A kernel frame from (name, type, core, in_shapes, in_dtypes, out_shapes, out_dtypes) rows."""
    import pandas as pd
    n = len(rows)
    return pd.DataFrame({
        "step": [0] * n, "rank": [0] * n, "name": [r[0] for r in rows], "type": [r[1] for r in rows],
        "core": [r[2] for r in rows], "start_us": [str(i) for i in range(n)], "duration_us": [1.0] * n,
        "wait_us": [0.0] * n, "block_dim": [1.0] * n, "in_shapes": [r[3] for r in rows],
        "in_dtypes": [r[4] for r in rows], "in_formats": [""] * n, "out_shapes": [r[5] for r in rows],
        "out_dtypes": [r[6] for r in rows], "out_formats": [""] * n, "stream": ["1"] * n, "task_id": [""] * n,
        "start_ns": list(range(n)), "precision": ["fp16"] * n, "source": [""] * n})


def test_edge_inference_rule():
    rows = [
        ("mm", "MatMulV2", "AI_CORE", "8,16;16,32", "FLOAT16;FLOAT16", "8,32", "FLOAT16"),
        ("cast", "Cast", "AI_VECTOR_CORE", "8,32", "FLOAT16", "8,32", "FLOAT"),
        ("memset", "MemSet", "AI_VECTOR_CORE", "", "N/A", "", "N/A"),
        ("ar", "hcom_allReduce_", "HCCL", "N/A", "N/A", "N/A", "N/A"),
        ("exp", "Exp", "AI_VECTOR_CORE", "8,32", "FLOAT", "8,32", "FLOAT"),
        ("add", "Add", "AI_VECTOR_CORE", "8,32;8,32", "FLOAT16;FLOAT", "8,32", "FLOAT16"),
        ("idx", "ArgMax", "AI_VECTOR_CORE", "8,32", "FLOAT16", "8", "INT64"),
        ("g", "GatherV2", "AI_VECTOR_CORE", "8", "INT64", "8", "INT64"),
    ]
    g = graph_from_kernels(_kf(rows))
    assert g.edges["mm", "cast"]["ports"] == [(0, 0)]
    assert g.edges["cast", "exp"]["ports"] == [(0, 0)]
    # add's input 0 (fp16 8,32) comes from mm (only earlier fp16 8,32 output) -> confidence 0.9;
    # input 1 (fp32 8,32): two earlier producers (cast, exp) -> the latest (exp), confidence 0.7
    assert g.edges["mm", "add"]["ports"] == [(0, 0)] and g.edges["mm", "add"]["confidence"] == 0.9
    assert g.edges["exp", "add"]["ports"] == [(0, 1)] and g.edges["exp", "add"]["confidence"] == 0.7
    assert not g.has_edge("cast", "add")
    assert g.edges["idx", "g"]["float"] is False
    assert g.nodes["g"]["float"] is False
    assert g.nodes["memset"]["decides"] is False and g.nodes["ar"]["decides"] is False
    assert g.nodes["cast"]["cast_to"] == "fp32"
    assert all(0 < d["confidence"] < 1 for _, _, d in g.edges(data=True))
    # unmatched float inputs of mm become graph-input nodes
    data = [n for n, r in g.nodes(data="role") if r == "data"]
    assert sorted(g.nodes[n]["out_shapes"][0] for n in data) == ["16,32", "8,16"]
    from advisor import semantics
    from advisor.oplists import load_lists
    semantics.plan(g, load_lists("ascend910b"))  # the semantics module runs on it


def test_discovery_layouts_and_ranks(tmp_path):
    _torch_npu_dir(tmp_path / "a", rank=0, name="w0_ascend_pt")
    _torch_npu_dir(tmp_path / "b", rank=1, name="w1_ascend_pt")
    m = tmp_path / "PROF_001" / "mindstudio_profiler_output"
    m.mkdir(parents=True)
    shutil.copy(FIX / "op_summary_new.csv", m / "op_summary_20240101.csv")
    o = tmp_path / "PROF_002" / "device_3" / "summary"
    o.mkdir(parents=True)
    shutil.copy(FIX / "op_summary_old.csv", o / "op_summary_0_1.csv")
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "ge_onnx_00001_graph_0_Build.pbtxt").write_text("ir_version: 3\n")
    f = discover(tmp_path)
    kinds = sorted(p.kind for p in f.profiles)
    assert kinds == ["msprof", "msprof", "torch_npu", "torch_npu"]
    assert [p.device for p in f.profiles if p.kind == "msprof" and p.device is not None] == [3]
    assert len(f.ge_dumps) == 1
    # load by rank: only the rank-1 torch_npu dir
    shutil.rmtree(tmp_path / "graphs")
    r = load_run(tmp_path, rank=1)
    assert set(r.kernels["rank"]) == {1}
    assert r.ranks == [-1, 0, 1, 3]
    from advisor.errors import InputError
    with pytest.raises(InputError):
        load_run(tmp_path, rank=7)


def test_emulator_layout_run(tmp_path):
    """A run directory laid out as docs/architecture.md says: GE graph joined to kernels by name,
    dump/mixed = target, dump/fp32 = golden, dump links on nodes."""
    from advisor.ingest.ge_dump import write_ge_onnx
    g = G.new_graph()
    G.add_op(g, "x", "Data", role="data")
    G.add_op(g, "Aten.mm.default.0", "MatMulV2", in_shapes=["4,8", "8,8"], out_shapes=["4,8"])
    G.add_op(g, "Aten.exp.default.0", "Exp", in_shapes=["4,8"], out_shapes=["4,8"])
    G.connect(g, "x", "Aten.mm.default.0")
    G.connect(g, "Aten.mm.default.0", "Aten.exp.default.0")
    write_ge_onnx(g, tmp_path / "graph" / "ge_onnx_00000_graph_0_Build.pbtxt")
    out = tmp_path / "profile" / "t_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out.parent / "profiler_info.json").write_text('{"rank_id": 0}')
    with open(out / "kernel_details.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                    "Input Shapes", "Input Data Types", "Output Shapes", "Output Data Types"])
        for s in (0, 1):
            w.writerow([s, "Aten.mm.default.0", "MatMulV2", "AI_CORE", f"{100 * s}.5\t", 2.0 + s, "4,8;8,8",
                        "FLOAT16;FLOAT16", "4,8", "FLOAT16"])
            w.writerow([s, "Aten.exp.default.0", "Exp", "AI_VECTOR_CORE", f"{100 * s + 10}.5\t", 1.0, "4,8",
                        "FLOAT16", "4,8", "FLOAT16"])
    rec = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [4, 8], "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 2.0}
    for which in ("mixed", "fp32"):
        for s in (0, 1):
            d = tmp_path / "dump" / which / f"step{s}" / "rank0"
            d.mkdir(parents=True)
            (d / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L2", "framework": "pytorch",
                                                     "data": {"Aten.mm.default.0.forward": {"output": [rec]},
                                                              "Aten.exp.default.0.forward": {"output": [rec]}}}))
    (tmp_path / "run.json").write_text(json.dumps({"mode": "mixed_float16", "soc": "ascend910b", "emulated": True}))
    r = load_run(tmp_path)
    assert r.graph.graph["format"] == "ge_onnx"
    mm = r.graph.nodes["Aten.mm.default.0"]
    assert mm["duration_us"] == pytest.approx(2.5)  # mean over steps 0 and 1
    assert mm["in_dtypes"] == ["fp16", "fp16"] and mm["precision_observed"] == "fp16"
    assert mm["dump"] == "Aten.mm.default.0" and mm["flops"] > 0
    assert sorted(r.target_dump) == [0, 1] and sorted(r.golden_dump) == [0, 1]
    assert "mixed" in str(r.target_dump[0].path) and "fp32" in str(r.golden_dump[0].path)
    assert r.meta["mode"] == "mixed_float16" and r.steps == [0, 1]
    r1 = load_run(tmp_path, step=1)
    assert set(r1.kernels["step"]) == {1} and list(r1.target_dump) == [1]
    assert r1.graph.nodes["Aten.mm.default.0"]["duration_us"] == pytest.approx(3.0)


def test_public_exports_resolve():
    import advisor.ingest as I
    for n in I.__all__:
        assert getattr(I, n) is not None


def test_trace_links_on_graph_nodes(tmp_path):
    """trace_view.json beside kernel_details.csv: every linked kernel node carries the framework op
    that launched it, its phase (inherited from the enclosing MmBackward0) and the nearest call stack."""
    out = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(FIX / "trace_view_nested.json", out / "trace_view.json")
    hdr = "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Input Shapes,Input Data Types,Output Shapes,Output Data Types\n"
    rows = ['1,MatMul_1,MatMulV2,AI_CORE,"1699529622790614.812\t",10.5,"""8,16;16,32""",FLOAT16;FLOAT16,"""8,32""",FLOAT16',
            '1,Add_2,Add,AI_VECTOR_CORE,"1699529622790660.000\t",2.0,"""8,32;32""",FLOAT16;FLOAT16,"""8,32""",FLOAT16',
            '1,Cast_9,Cast,AI_VECTOR_CORE,"1699529622790690.000\t",1.0,"""8,32""",FLOAT16,"""8,32""",FLOAT',
            '1,MatMul_3,MatMulV2,AI_CORE,"1699529622790720.500\t",9.0,"""8,32;32,16""",FLOAT;FLOAT,"""8,16""",FLOAT']
    (out / "kernel_details.csv").write_text(hdr + "\n".join(rows) + "\n")
    run = load_run(tmp_path)
    g = run.graph
    assert g.nodes["MatMul_1"]["framework_op"] == "aten::mm" and g.nodes["MatMul_1"]["phase"] == "fwd"
    assert "model.py(12)" in g.nodes["MatMul_1"]["call_stack"]
    assert g.nodes["Add_2"]["framework_op"] == "aten::add"
    assert g.nodes["MatMul_3"]["framework_op"] == "aten::mm" and g.nodes["MatMul_3"]["phase"] == "bwd"
    assert "framework_op" not in g.nodes["Cast_9"]  # GE-inserted, no flow
    ops = run.trace["ops"]
    inner = ops[(ops["name"] == "aten::mm") & (ops["tid"] == "9")].iloc[0]
    par = ops[ops.op_id == inner["parent_id"]].iloc[0]
    assert par["name"] == "MmBackward0"
    assert ops.loc[ops.op_id == par["parent_id"], "name"].item().startswith("autograd::engine")
    from advisor.ingest.findings import framework_share, missing
    share = {(r["framework_op"], r["phase"]): r for r in framework_share(run.kernels)}
    assert share[("aten::mm", "bwd")]["fp32_us"] == 9.0 and share[("aten::mm", "fwd")]["fp32_us"] == 0.0
    assert not any("trace_view" in m for m in missing(run))
    # a broken trace does not stop the analysis: a note, kernels unlinked
    (out / "trace_view.json").write_text('[{"ph": "X", "name": ')
    run = load_run(tmp_path)
    assert run.graph.number_of_nodes() >= 4 and "framework_op" not in run.kernels.columns
    assert any("trace_view.json" in m and "not linked" in m for m in missing(run))
