"""The PyTorch emulator executes what the plan says: parameters are graph inputs as torchair builds the graph,
force_fp32's cube ops take fp16 inputs and give an fp32 output, an op without an AI Core kernel runs in its
original dtype on AI CPU (kernel_details.csv ``Accelerator Core`` = AI_CPU)."""
import csv
import json
from pathlib import Path

import torch
import torch.nn as nn

from advisor.emulator import capture, trace_workload
from advisor.workload import Workload

OPS_INFO = Path(__file__).parent / "fixtures/real/ge_ops_info_910b/aic-ascend910b-ops-info.json"


def _rows(run: Path) -> list[dict]:
    f = next(run.glob("profile/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    with open(f, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_parameters_are_data_nodes_as_torchair_builds_the_graph():
    torch.manual_seed(0)
    g, _ = trace_workload(Workload(nn.Linear(4, 3), [(torch.randn(2, 4),)], name="lin"))
    params = [n for n in g if n in ("weight", "bias")]
    assert sorted(params) == ["bias", "weight"]
    assert all((g.nodes[n]["type"], g.nodes[n]["role"]) == ("Data", "data") for n in params)


def test_force_fp32_linear_has_fp16_inputs_and_an_unrounded_fp32_output(tmp_path):
    torch.manual_seed(0)
    m = nn.Linear(16, 16, bias=False)
    x = torch.randn(4, 16)
    run = capture(Workload(m, [(x,)], name="lin"), tmp_path / "r", mode="force_fp32", dump="tensors", local=False)
    mm = [r for r in _rows(run) if r["Type"] in ("MatMulV2", "MatMul", "BatchMatMulV2")]
    assert mm and all(r["Input Data Types"].split(";") == ["FLOAT16", "FLOAT16"] for r in mm)
    assert all(r["Output Data Types"] == "FLOAT" for r in mm)
    dump = json.loads(next(run.glob("dump/mixed/step0/rank0/dump.json")).read_text())["data"]
    out = dump["Model.output.0.forward"]["output"][0]
    got = torch.load(next(run.glob("dump/mixed/step0/rank0/dump_tensor_data")) / out["data_name"])
    want = x.half().float() @ m.weight.detach().half().float().t()
    assert torch.allclose(got.float(), want, rtol=1e-6, atol=1e-6)
    assert not torch.equal(got.float(), want.half().float())


def test_op_without_an_ai_core_kernel_runs_its_original_dtype_on_ai_cpu(tmp_path):
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.erf(self.fc(x))     # Erf: no entry in the vendored ops-info -> AI CPU

    run = capture(Workload(M(), [(torch.randn(2, 8),)], name="erf"), tmp_path / "r", ops_info=str(OPS_INFO),
                  dump="stats", local=False)
    rows = {r["Type"]: r for r in _rows(run)}
    erf = rows["Erf"]
    assert (erf["Accelerator Core"], erf["Input Data Types"], erf["Output Data Types"]) == ("AI_CPU", "FLOAT", "FLOAT")
    assert float(erf["Duration(us)"]) > 100.0
    assert rows["MatMulV2"]["Output Data Types"] == "FLOAT16" and rows["MatMulV2"]["Accelerator Core"] == "AI_CORE"
