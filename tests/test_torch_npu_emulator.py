"""The emulator under --engine torch_npu: what kernel_details.csv shows a PyTorch program ran in, by amp mode, chip
and policy (docs/semantics.md "torch_npu"); the engine choice and its defaults; old run directories stay ge."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from advisor.cli import main
from advisor.emulator.capture import capture
from advisor.ingest.run import load_run

from torch_npu_models import optimizer_workload_source, LinMul, kernel_rows, lin_mul_workload, rows_of

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)

WL = f"{Path(__file__).with_name('torch_npu_models.py')}:lin_mul_workload"


def _cli(*args) -> int:
    return main(list(args))


def _dtype(run, typ: str) -> str:
    """The dtype a kernel computed in, as ingest reads it from kernel_details.csv (its lowest float input)."""
    r = rows_of(run, typ)[0]
    return min((d for d in r["in"] if d in ("fp16", "bf16", "fp32")), key=["fp16", "bf16", "fp32"].index)


def _meta(run) -> dict:
    return json.loads((Path(run) / "run.json").read_text())


# ---------------------------------------------------------------------------- autocast, as torch_npu runs it
@pytest.mark.slow
def test_capture_defaults_to_torch_npu_for_a_pytorch_workload(tmp_path):
    """A new PyTorch capture runs as torch_npu runs it (autocast in the mixed mode); --engine ge keeps GE."""
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--no-local-error", "--dump", "stats") == 0
    m = _meta(tmp_path / "r")
    assert (m["engine"], m["amp"]) == ("torch_npu", "autocast")
    assert _cli("capture", WL, "--out", str(tmp_path / "g"), "--engine", "ge", "--no-local-error", "--dump",
                "stats") == 0
    assert _meta(tmp_path / "g")["engine"] == "ge" and "amp" not in _meta(tmp_path / "g")


@pytest.mark.slow
def test_a_default_capture_can_be_recommended_as_a_policy(tmp_path):
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--no-local-error") == 0
    assert _cli("recommend", "--profile", str(tmp_path / "r"), "--out", str(tmp_path / "rec")) == 0
    assert (tmp_path / "rec" / "precision_policy.json").is_file()
    assert not (tmp_path / "rec" / "modify_mixlist.json").exists()


@pytest.mark.slow
def test_a_default_capture_of_an_optimizer_workload_stays_ge_with_a_note(tmp_path):
    src = tmp_path / "wl.py"
    src.write_text(optimizer_workload_source(1))
    assert _cli("capture", f"{src}:workload", "--out", str(tmp_path / "r"), "--no-local-error", "--dump",
                "stats") == 0
    m = _meta(tmp_path / "r")
    assert m["engine"] == "ge" and any("optimizer" in n for n in m["notes"])


@pytest.mark.slow
def test_amp_without_engine_means_torch_npu(tmp_path):
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--amp", "autocast", "--no-local-error",
                "--dump", "stats") == 0
    m = _meta(tmp_path / "r")
    assert (m["engine"], m["amp"], m["acl_precision_mode"]) == ("torch_npu", "autocast", "must_keep_origin_dtype")


@pytest.mark.slow
def test_h_times_h_after_a_linear_runs_fp16_exp_and_softmax_fp32(tmp_path):
    """The issue's model: the Mul is in no table and takes the linear's fp16 output; exp is fp32, softmax
    fp32_set_opt_dtype (kernel_details.csv of a capture on the command line)."""
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--engine", "torch_npu", "--no-local-error") == 0
    run = tmp_path / "r"
    assert _dtype(run, "Mul") == "fp16"
    assert rows_of(run, "Mul")[0]["out"] == ["fp16"]
    assert _dtype(run, "Exp") == "fp32" and _dtype(run, "SoftmaxV2") == "fp32"
    assert _dtype(run, "MatMulV2") == "fp16"


def test_fp16_mul_overflows_where_the_fp32_run_does_not(tmp_path):
    """Large activations: the fp16 h*h is inf in the target dump, finite in the golden (the hazard 22b advises on)."""
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", local=False)

    def out(which):
        d = Path(run) / "dump" / which / "step0" / "rank0"
        e = json.loads((d / "dump.json").read_text())["data"]["Aten.mul.Tensor.0.forward"]
        return torch.load(d / "dump_tensor_data" / e["output"][0]["data_name"])
    assert torch.isinf(out("mixed")).any() and torch.isfinite(out("fp32")).all()


def test_mixed_bfloat16_picks_bf16_as_the_autocast_dtype(tmp_path):
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", mode="mixed_bfloat16", local=False,
                  dump="stats")
    assert _dtype(run, "Mul") == "bf16" and _dtype(run, "Exp") == "fp32"
    assert _meta(run)["low_dtype"] == "bf16"


# ---------------------------------------------------------------------------- --amp none: ACL_PRECISION_MODE
@pytest.mark.slow
@pytest.mark.parametrize("soc,want", [("ascend910", "fp16"), ("ascend910b", "fp32")])
def test_amp_none_cube_op_follows_the_chips_acl_precision_mode(tmp_path, soc, want):
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--amp", "none", "--soc", soc, "--no-local-error",
                "--dump", "stats") == 0
    run = tmp_path / "r"
    mm = rows_of(run, "MatMulV2")[0]
    assert _dtype(run, "MatMulV2") == want and mm["out"] == ["fp32"]
    assert _dtype(run, "Mul") == "fp32"                        # not a cube op: origin dtype on every chip
    assert _meta(run)["acl_precision_mode"] == ("allow_fp32_to_fp16" if soc == "ascend910" else
                                                "must_keep_origin_dtype")


def test_mode_names_the_acl_precision_mode_of_amp_none(tmp_path):
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", mode="allow_fp32_to_fp16",
                  soc="ascend910b", local=False, dump="stats")
    assert _meta(run)["amp"] == "none" and _dtype(run, "MatMulV2") == "fp16"


# ---------------------------------------------------------------------------- policies
def _policy(tmp_path, rules: dict, amp: str = "autocast") -> str:
    p = tmp_path / "precision_policy.json"
    p.write_text(json.dumps({"schema": "advisor.precision_policy/1", "version": 1, "engine": "torch_npu", "amp": amp,
                             "dtype": "float16", "rules": rules}))
    return str(p)


@pytest.mark.slow
@pytest.mark.parametrize("rule", [{"module": "sq"}, {"op": "mul"}, {"op": "mul.Tensor", "module": "sq"}])
def test_policy_keeping_the_mul_or_its_module_runs_it_fp32(tmp_path, rule):
    pol = _policy(tmp_path, {"keep_fp32": [rule]})
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--policy", pol, "--no-local-error", "--dump",
                "stats") == 0
    run = tmp_path / "r"
    assert _dtype(run, "Mul") == "fp32"
    assert _dtype(run, "MatMulV2") == "fp16"                   # the rest of the program is unchanged
    assert _meta(run)["policy"] == "precision_policy.json" and (run / "precision_policy.json").is_file()


def test_policy_scoped_to_another_module_leaves_the_mul_fp16(tmp_path):
    pol = _policy(tmp_path, {"keep_fp32": [{"op": "mul", "module": "fc"}]})
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", policy=pol, local=False, dump="stats")
    assert _dtype(run, "Mul") == "fp16"


def test_kept_module_runs_with_autocast_disabled(tmp_path):
    pol = _policy(tmp_path, {"keep_fp32": [{"module": "fc"}]})
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", policy=pol, local=False, dump="stats")
    assert _dtype(run, "MatMulV2") == "fp32" and _dtype(run, "Mul") == "fp32"


def test_policy_naming_nothing_in_the_model_is_noted(tmp_path):
    pol = _policy(tmp_path, {"keep_fp32": [{"module": "decoder"}, {"op": "addmm"}]})
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", policy=pol, local=False, dump="stats")
    notes = " ".join(_meta(run)["notes"])
    assert "no module 'decoder' ran" in notes and "addmm was not called at the autocast key" in notes


# ---------------------------------------------------------------------------- Apex
def test_apex_o1_patches_functions_not_the_dispatcher(tmp_path):
    """Apex O1 lists F.softmax, not torch.softmax; Tensor.sum is fp32 (torch's FP32_FUNCS extended to Tensor)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc(x)
            return torch.nn.functional.softmax(h, -1) + torch.softmax(h * 2, -1) + h.sum()
    torch.manual_seed(0)
    run = capture((M(), [(torch.randn(4, 8),)]), tmp_path / "r", engine="torch_npu", amp="apex-o1", local=False,
                  dump="stats")
    soft = [r["in"][0] for r in rows_of(run, "SoftmaxV2")]
    assert soft == ["fp32", "fp16"] and _dtype(run, "ReduceSum") == "fp32"
    assert _dtype(run, "MatMulV2") == "fp16"


def test_apex_register_float_function_runs_it_fp32(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.sigmoid(self.fc(x))
    torch.manual_seed(0)
    wl = (M(), [(torch.randn(4, 8),)])
    plain = capture(wl, tmp_path / "a", engine="torch_npu", amp="apex-o1", local=False, dump="stats")
    pol = _policy(tmp_path, {"keep_fp32": [], "register_float_function": ["torch.sigmoid"]}, amp="apex-o1")
    kept = capture(wl, tmp_path / "b", engine="torch_npu", amp="apex-o1", policy=pol, local=False, dump="stats")
    assert _dtype(plain, "Sigmoid") == "fp16" and _dtype(kept, "Sigmoid") == "fp32"


def test_apex_o2_halves_the_model_but_keeps_batchnorm_fp32(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)).mean()
    torch.manual_seed(0)
    run = capture((M().eval(), [(torch.randn(2, 3, 8, 8),)]), tmp_path / "r", engine="torch_npu", amp="apex-o2",
                  local=False, dump="stats")
    conv = rows_of(run, "Conv2D")[0]
    assert conv["in"] == ["fp16", "fp16", "fp16"]              # input cast by O2, weight and bias halved
    bn = kernel_rows(run)[1]
    assert bn["in"][0] == "fp16" and bn["in"][1:] == ["fp32"] * (len(bn["in"]) - 1) and bn["out"][0] == "fp16"


# ---------------------------------------------------------------------------- the engine choice
def test_onnx_target_refuses_engine_torch_npu(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g), str(path))
    code = _cli("capture", str(path), "--out", str(tmp_path / "r"), "--engine", "torch_npu")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "runs on GE" in err[0]


@pytest.mark.slow
def test_ge_only_options_pick_ge_by_default_and_refuse_torch_npu(tmp_path, capsys):
    ml = tmp_path / "ml.json"
    ml.write_text('{"black-list": {"to-add": ["Exp"]}}')
    assert _cli("capture", WL, "--out", str(tmp_path / "a"), "--mixlist", str(ml), "--no-local-error") == 0
    assert _meta(tmp_path / "a")["engine"] == "ge"
    capsys.readouterr()
    assert _cli("capture", WL, "--out", str(tmp_path / "b"), "--mixlist", str(ml), "--engine", "torch_npu") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mixlist" in err[0]


class _Residual(torch.nn.Module):
    """x + y feeding a LayerNorm: GE fuses the fp16 pair into AddLayerNorm (AddLayerNormFusionPass)."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)

    def forward(self, x, y):
        s = x + y
        return self.ln(s) + s


def _residual_workload():
    torch.manual_seed(0)
    return _Residual().half(), [(torch.randn(4, 16).half(), torch.randn(4, 16).half())]


def test_torch_npu_runs_every_op_as_its_own_kernel_without_graph_fusion(tmp_path):
    ge = capture(_residual_workload(), tmp_path / "ge", local=False, dump="stats")
    assert "AddLayerNorm" in {r["type"] for r in kernel_rows(ge)}          # the oracle: GE fuses this model
    run = capture(_residual_workload(), tmp_path / "npu", engine="torch_npu", local=False, dump="stats")
    types = [r["type"] for r in kernel_rows(run)]
    assert "AddLayerNorm" not in types and types.count("Add") == 2
    assert _meta(run)["fusion"] is None


def test_torch_npu_refuses_a_workload_with_an_optimizer_in_one_line(tmp_path, capsys):
    src = tmp_path / "wl.py"
    src.write_text(
        "import torch\nimport torch.nn.functional as F\nfrom advisor.workload import Workload\n"
        "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(6, 2)\n    def forward(self, x, y):\n        return self.fc(x)\n"
        "def workload():\n    torch.manual_seed(0)\n"
        "    return Workload(M(), [(torch.randn(4, 6), torch.randn(4, 2))], lambda o, b: F.mse_loss(o, b[1]),\n"
        "                    optimizer=lambda p: torch.optim.SGD(p, lr=0.1), steps=2)\n")
    assert _cli("capture", f"{src}:workload", "--out", str(tmp_path / "r"), "--engine", "torch_npu") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--engine ge" in err[0] and "optimizer" in err[0]
    assert not (tmp_path / "r").exists()


def test_amp_with_engine_ge_is_refused(tmp_path, capsys):
    assert _cli("capture", WL, "--out", str(tmp_path / "r"), "--engine", "ge", "--amp", "none") == 2
    assert "--amp" in capsys.readouterr().err


def test_run_without_engine_in_run_json_reads_as_ge(tmp_path):
    old = tmp_path / "mlp_exp"
    shutil.copytree(REPO / "profiles" / "mlp_exp", old)
    assert "engine" not in _meta(old)
    r = load_run(old)
    assert r.engine == "ge"
    from advisor.commands.options import EngineChoice
    assert EngineChoice().for_run(str(old), "recommend") == "ge"


def test_recommend_refuses_a_ge_mixlist_for_a_torch_npu_run_in_one_line(tmp_path, capsys):
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", local=False, dump="stats")
    assert load_run(run).engine == "torch_npu"
    ml = tmp_path / "m.json"
    ml.write_text(json.dumps({"black-list": {"to-add": ["Mul"]}}))
    capsys.readouterr()
    assert _cli("recommend", "--profile", str(run), "--mixlist", str(ml), "--out", str(tmp_path / "a")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--policy" in err[0]


# ---------------------------------------------------------------------------- eager-looking profiles
def test_kernel_rows_have_eager_aclnn_names_and_join_their_nodes(tmp_path):
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", local=False, dump="stats")
    names = {r["type"]: r["name"] for r in kernel_rows(run)}
    assert names["Mul"] == "aclnnMul_MulAiCore_Mul" and names["MatMulV2"].startswith("aclnnAddmm_")
    g = load_run(run).graph
    mul = g.nodes["Aten.mul.Tensor.0"]
    assert mul["precision_observed"] == "fp16" and mul["duration_us"] > 0 and mul["module"] == "sq"


def test_real_eager_profile_and_emulated_one_read_alike(real, tmp_path):
    from advisor.ingest.profile import read_kernel_details
    run = capture(lin_mul_workload(), tmp_path / "r", engine="torch_npu", local=False, dump="stats")
    emu = read_kernel_details(next(Path(run).glob("profile/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")))
    eager = read_kernel_details(real / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv")
    assert list(emu.columns) == list(eager.columns)
    assert emu["name"].str.startswith("aclnn").all() and eager["name"].str.startswith("aclnn").all()
    assert set(emu["precision"]) <= {"fp16", "fp32"} and set(eager["precision"]) == {"bf16", "fp32"}


def test_training_backward_ops_run_in_their_forward_ops_dtype(tmp_path):
    def wl():
        torch.manual_seed(0)
        m = LinMul()
        return m, [(torch.randn(4, 16),)], lambda out, b: out
    run = capture(wl(), tmp_path / "r", engine="torch_npu", local=False, dump="stats")
    g = load_run(run).graph
    bwd = [a for n, a in g.nodes(data=True) if a.get("type") == "MatMul"]   # AddmmBackward's mm
    assert bwd and all(a["precision_observed"] == "fp16" for a in bwd)
