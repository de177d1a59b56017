"""Every reader on real files written by Ascend tools (tests/fixtures/real, sources in its SOURCES.md),
and the defects those files and crafted variants of them exposed: each check asserts facts read from
the file by hand."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.ingest import load_dump, load_dump_root, load_run, overflow, read_ge_dump, read_kernel_details
from advisor.ingest.trace import kernel_links, read_trace_view


def _run(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def _one_line_error(code, err, *needles):
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("advisor: error: "), err
    for n in needles:
        assert n in lines[0], lines[0]


def _inspect_json(path) -> dict:
    code, out, err = _run(["inspect", "--profile", str(path), "--json"])
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------ torch_npu profiles

def test_kernel_details_bf16_version(real):
    """mstt's second kernel_details.csv: DT_BF16 dtypes, shapes in tripled quotes, Step Id 19."""
    k = read_kernel_details(real / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv")
    assert len(k) == 29 and set(k["step"]) == {19}
    first = k.iloc[0]
    assert (first["name"], first["type"], first["duration_us"]) == ("aclnnMatmul_MatMulCommon_MatMulV2", "MatMulV2",
                                                                     185.504)
    assert first["in_shapes"] == "81920,4096;8192,512" and first["start_ns"] == 1736413971558972912
    assert Counter(k["precision"]) == {"bf16": 25, "fp32": 4}
    s = _inspect_json(real / "torch_npu_kernel_details_bf16_mstt")
    assert s["kernels"] == 29 and s["steps"] == [19] and s["graph_step"] == 19


def test_trace_view_real(real):
    """mstt's torch_npu trace_view.json: 711 cpu ops, 276 Ascend Hardware kernels, 274 async_npu flows."""
    t = read_trace_view(real / "torch_npu_trace_view_mstt" / "trace_view.json")
    assert len(t["ops"]) == 711 and len(t["kernels"]) == 276 and len(t["links"]) == 274
    assert set(t["kernels"]["pid"]) == {"800"}                      # process_name "Ascend Hardware"
    links = kernel_links(t)
    first = links.sort_values("start_ns").iloc[0]
    assert first["name"] == "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike"
    assert first["start_ns"] == 1704161511422904204 and first["framework_op"] == "aclnnInplaceZero"
    assert int((t["ops"]["phase"] == "bwd").sum()) == 148


def test_trace_only_folder_says_what_it_has(real):
    """A folder with a trace_view.json and no kernel table: read, and said so without contradiction."""
    code, out, err = _run(["inspect", "--profile", str(real / "torch_npu_trace_view_mstt")])
    assert code == 0, err
    assert "no kernel table (trace_view.json only)" in out
    assert "trace_view.json: 711 framework ops" in out
    assert "no profile (" not in out and "None" not in out


def test_trace_of_another_run_is_named_not_missing(real, tmp_path):
    """Real kernels beside a real trace of another run: the trace was read and linked nothing."""
    out_dir = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out_dir.mkdir(parents=True)
    shutil.copy(real / "torch_npu_profile_mstt" / "kernel_details.csv", out_dir)
    shutil.copy(real / "torch_npu_trace_view_mstt" / "trace_view.json", out_dir)
    s = _inspect_json(tmp_path)
    assert s["trace"]["framework_ops"] == 711 and s["trace"]["kernel_rows_linked"] == 0
    assert not any("no trace_view.json beside" in m for m in s["missing"])
    assert any("read, but none of its device kernels matches" in m for m in s["missing"])


# ------------------------------------------------------------------------------ GE graph dumps

def test_ge_proto_partitioned_subgraph(real):
    """GE's ST dump after UB fusion: a partitioned subgraph whose inputs are 109 PlaceHolder nodes and
    whose output is an End node; fp16 throughout, one Cast back to fp32 before End."""
    g = read_ge_dump(real / "ge_proto_ge_st" / "ge_proto_00046_afterUBMatch.txt")
    assert g.number_of_nodes() == 234
    roles = Counter((a["type"], a["role"]) for _, a in g.nodes(data=True))
    assert roles[("PlaceHolder", "data")] == 109 and roles[("Conv2D", "op")] == 53
    end = g.nodes["End111"]
    assert end["kernel"] is False and end["decides"] is False
    assert g.nodes["PlaceHolder2"]["dtype"] == "fp16"
    assert g.nodes["trans_Cast_167"]["cast_to"] == "fp32"
    s = _inspect_json(real / "ge_proto_ge_st")                       # the higher sequence (00046) is used
    assert s["graph"]["ops"] == 234 - 109 - 1                          # neither PlaceHolder nor End is an op
    assert sum(s["plan_mix"].values()) == s["graph"]["ops"]


def test_ge_proto_whole_graph_with_consts(real):
    """GE's quantized ResNet-50 dump: one Data, 162 Const weights, a NetOutput."""
    g = read_ge_dump(real / "ge_proto_ge_st" / "ge_proto_00015_OptimizeQuantGraph_FeGraphFusionAfter.txt")
    roles = Counter(a["role"] for _, a in g.nodes(data=True))
    assert roles == {"op": 302, "const": 162, "data": 1}
    assert g.nodes["data"]["dtype"] == "uint8"
    out = g.nodes["Node_Output"]
    assert out["type"] == "NetOutput" and out["kernel"] is False and out["decides"] is False


def test_cyclic_ge_graph_in_inspect(tmp_path):
    (tmp_path / "ge_onnx_00000_graph_0_Build.pbtxt").write_text(
        'ir_version: 3\nproducer_name: "GE"\ngraph {\n  node { input: "b:0" name: "a" op_type: "ge:Add" }\n'
        '  node { input: "a:0" name: "b" op_type: "ge:Mul" }\n}\n')
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    _one_line_error(code, err, "ge_onnx_00000_graph_0_Build.pbtxt", "cycle")


# ------------------------------------------------------------------------------ msprobe dumps

def test_mindspore_null_statistics_are_not_overflow(real):
    """MindSpore bool tensors carry "Mean": null, "Norm": null: unknown statistics, finite tensors."""
    d = load_dump(real / "msprobe_dump_mindspore_ut")
    assert (d.framework, d.task, len(d.entries)) == ("mindspore", "statistics", 13)
    r = d.entries["Tensor.__bool__.1.forward"].inputs[0]
    assert (r.dtype, r.mean, r.norm, r.max) == ("bool", None, None, 0.0)
    assert overflow(d).empty
    s = _inspect_json(real / "msprobe_dump_mindspore_ut")
    assert s["overflow"] == []


def test_nan_statistic_is_still_overflow(tmp_path):
    rec = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2], "Max": "inf", "Min": 0.0,
           "Mean": None, "Norm": None}
    d = tmp_path / "dump.json"
    d.write_text(json.dumps({"task": "statistics", "data": {"A.a.0.forward": {"output": [rec]}}}))
    assert list(overflow(load_dump(d))["key"]) == ["output.0"]


def test_megatron_fp16_statistics(real):
    d = load_dump(real / "msprobe_dump_fp16_megatron_ut" / "dump.json")
    assert len(d.entries) == 3
    assert {r.dtype for e in d.entries.values() for r in e.records()} == {"fp16"}
    r = d.entries["Tensor.__mul__.7.forward"].inputs[0]
    assert r.shape == (2048, 2, 1, 256) and r.norm == 318.5


@pytest.mark.parametrize("root,tensors", [("msprobe_train_pair_cpu/train_bf16", True),
                                          ("msprobe_train_l0_stats_cpu", False)])
def test_parameters_grad_entries_load(real, root, tensors):
    """msprobe 26.2.0 names gradients ``Module.fc1.Linear.parameters_grad.0`` -> {"weight": [...], "bias": [...]}."""
    dumps = load_dump_root(real / root)
    assert sorted(dumps) == [(0, 0), (1, 0)]
    e = dumps[(0, 0)].entries["Module.fc1.Linear.parameters_grad.0"]
    got = {r.key: (r.shape, r.dtype, r.path is not None) for r in e.parameter_grads}
    assert got == {"parameter_grad.weight": ((4, 8), "fp32", tensors), "parameter_grad.bias": ((4,), "fp32", tensors)}


def test_real_training_dump_gets_training_analysis(real, tmp_path):
    """The real bf16-autocast vs fp32 training pair: gradients of fc1/fc2 are compared per step."""
    code, out, err = _run(["compare", "--run", str(real / "msprobe_train_pair_cpu"), "--json", str(tmp_path / "c.json")])
    assert code == 0, err
    tr = json.loads((tmp_path / "c.json").read_text())["training"]
    assert tr is not None
    assert sorted(p["param"] for p in tr["params"]) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert all(p["numel"] == {"fc1.weight": 64, "fc1.bias": 8, "fc2.weight": 16, "fc2.bias": 4}[p["param"]]
               for p in tr["params"])                                    # 2 steps x (4x8, 4, 2x4, 2)
    assert "gradients: underflow" in out


# ------------------------------------------------------------------------------ run.json paths, GE mixlist fixtures

def test_run_json_ops_info_inside_the_run_is_read(real, tmp_path):
    """GE's own customize ops-info fixture, named by run.json relative to the run directory."""
    shutil.copy(real / "ge_mixlist_ut" / "aic-ascend310-ops-info.json", tmp_path)
    shutil.copy(real / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv", tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"soc": "ascend310", "ops_info": "aic-ascend310-ops-info.json"}))
    r = load_run(tmp_path)
    assert r.meta["ops_info"] == str((tmp_path / "aic-ascend310-ops-info.json").resolve())
    assert _inspect_json(tmp_path)["soc"] == "ascend310"


@pytest.mark.parametrize("field,value", [("ops_info", "../outside.json"), ("ops_info", "/etc/hostname"),
                                         ("mixlist", "../op_info_right.json")])
def test_run_json_paths_confined_to_the_run(real, tmp_path, field, value):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(real / "ge_mixlist_ut" / "op_info_right.json", tmp_path)
    (tmp_path / "outside.json").write_text("{}")
    shutil.copy(real / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv", run)
    (run / "run.json").write_text(json.dumps({field: value}))
    for cmd in (["inspect", "--profile", str(run)], ["recommend", "--profile", str(run), "--out", str(tmp_path / "o")]):
        code, out, err = _run(cmd)
        _one_line_error(code, err, "run.json", field, "outside the run directory")


def test_ge_mixlist_fixtures_through_lint(real):
    """GE's own modify_mixlist fixtures: the "right" one has GE's example typo 'Matmul'; the "wrong"
    one a trailing comma (line 10); op_store_right.json is ops-info, not a mixlist."""
    d = real / "ge_mixlist_ut"
    code, out, err = _run(["lint", str(d / "op_info_right.json")])
    assert "'Matmul' is not an op type" in out and "did you mean 'MatMul'?" in out
    code, out, err = _run(["lint", str(d / "op_info_wrong.json")])
    assert code != 0 and "op_info_wrong.json:10:" in out + err and "invalid-json" in out + err
    code, out, err = _run(["lint", str(d / "op_store_right.json")])
    assert "unknown key 'Yolo'" in out + err


def test_parameters_grad_without_call_index(real, tmp_path):
    """Older msprobe versions name the entry without the trailing call index."""
    src = real / "msprobe_train_l0_stats_cpu" / "step0" / "proc8281" / "dump.json"
    d = json.loads(src.read_text())
    d["data"] = {k.replace("parameters_grad.0", "parameters_grad"): v for k, v in d["data"].items()}
    (tmp_path / "dump.json").write_text(json.dumps(d))
    e = load_dump(tmp_path).entries["Module.fc2.Linear.parameters_grad"]
    assert sorted(r.key for r in e.parameter_grads) == ["parameter_grad.bias", "parameter_grad.weight"]
    from advisor.compare.dumps import as_steps
    from advisor.compare.training import grad_records
    assert sorted(grad_records(as_steps(tmp_path / "dump.json")[0])) == ["fc1.bias", "fc1.weight", "fc2.bias",
                                                                       "fc2.weight"]


@pytest.mark.slow
def test_capture_keeps_its_ops_info_inside_the_run(real, tmp_path):
    """A capture with --ops-info elsewhere on the machine stays readable: the run holds a copy."""
    ops = tmp_path / "cfg" / "aic-ascend310-ops-info.json"
    ops.parent.mkdir()
    shutil.copy(real / "ge_mixlist_ut" / ops.name, ops)
    run = tmp_path / "run"
    code, out, err = _run(["capture", str(Path(__file__).resolve().parents[1] / "examples" / "two_hazards.py") +
                           ":workload", "--out", str(run), "--ops-info", str(ops)])
    assert code == 0, err
    assert json.loads((run / "run.json").read_text())["ops_info"] == "ops_info/aic-ascend310-ops-info.json"
    assert (run / "ops_info" / ops.name).read_bytes() == ops.read_bytes()
    assert load_run(run).meta["ops_info"] == str((run / "ops_info" / ops.name).resolve())
