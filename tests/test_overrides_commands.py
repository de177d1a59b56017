"""--keep-dtype / --customize-dtypes through the commands and emulators: the PyTorch and TensorFlow emulators
execute the plan with overrides, diff shows the flips with the new rule, recommend takes them as its base,
run.json records them (confined to the run directory), mixed per-port customize entries are refused where an
emulator cannot run them."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import semantics as S
from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.errors import InputError

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "layernorm_bias"
KEEP = "Aten.addmm.default.0\nAten.native_layer_norm.default.0\n"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=600)


def test_pytorch_emulator_executes_keep_dtype(tmp_path):
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP, encoding="utf-8")
    run = capture(str(REPO / "examples" / "layernorm_bias.py") + ":workload", tmp_path / "run", keep_dtype=kf,
                  batches=1)
    a = analyze(run)
    k = a.run.kernels.set_index("name")
    assert k.loc["Aten.addmm.default.0", "precision"] == "fp32"
    assert k.loc["Aten.native_layer_norm.default.0", "precision"] == "fp32"
    assert k.loc["Aten.addmm.default.1", "precision"] == "fp16"
    assert a.plan.why("Aten.addmm.default.0").rule is S.Rule.KEEP_DTYPE
    assert a.verdict().ok
    meta = json.loads((run / "run.json").read_text())
    assert meta["keep_dtype"] == "keep_dtype.cfg" and meta["customize_dtypes"] is None


def test_pytorch_emulator_executes_fp16_inputs_with_an_fp32_output(tmp_path):
    """An entry giving every float input one dtype and the output another is one (input, output) pair: the PyTorch
    emulator executes it, as it executes force_fp32's cube ops."""
    cf = tmp_path / "c.cfg"
    cf.write_text("Aten.addmm.default.0::InputDtype:float16,float16,float16,OutputDtype:float\n", encoding="utf-8")
    run = capture(str(REPO / "examples" / "layernorm_bias.py") + ":workload", tmp_path / "run", customize_dtypes=cf,
                  batches=1)
    a = analyze(run)
    row = a.run.kernels.set_index("name").loc["Aten.addmm.default.0"]
    assert (row["in_dtypes"], row["out_dtypes"]) == ("FLOAT16;FLOAT16;FLOAT16", "FLOAT")
    assert a.plan.why("Aten.addmm.default.0").rule is S.Rule.CUSTOMIZE_DTYPE
    assert a.plan["Aten.native_layer_norm.default.0"] == "fp32"     # gray: it inherits the fp32 output


def test_pytorch_emulator_refuses_per_port_customize_in_one_line(tmp_path):
    cf = tmp_path / "c.cfg"
    cf.write_text("Aten.addmm.default.0::InputDtype:float16,float,float16,OutputDtype:float\n", encoding="utf-8")
    with pytest.raises(InputError, match="per-port dtypes are emulated for ONNX models only"):
        capture(str(REPO / "examples" / "layernorm_bias.py") + ":workload", tmp_path / "run", customize_dtypes=cf,
                batches=1)
    cf.write_text("Aten.addmm.default.0::InputDtype:float,float,float,OutputDtype:float\n", encoding="utf-8")
    run = capture(str(REPO / "examples" / "layernorm_bias.py") + ":workload", tmp_path / "run2",
                  customize_dtypes=cf, batches=1)
    assert analyze(run).plan.why("Aten.addmm.default.0").rule is S.Rule.CUSTOMIZE_DTYPE


@pytest.mark.tf
def test_tensorflow_emulator_executes_keep_dtype_by_type(tmp_path):
    pytest.importorskip("tensorflow")
    kf = tmp_path / "keep.cfg"
    kf.write_text("OpType::Exp\n", encoding="utf-8")
    run = capture(str(REPO / "examples" / "keras_hazard.py") + ":workload", tmp_path / "run", keep_dtype=kf,
                  batches=1)
    a = analyze(run)
    k = a.run.kernels
    assert set(k[k["type"] == "Exp"]["precision"]) == {"fp32"}
    assert a.verdict().ok


@pytest.mark.slow
def test_diff_shows_the_flips_of_a_keep_file_with_the_new_rule(tmp_path):
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP, encoding="utf-8")
    r = _cli("diff", "defaults", "defaults", "--profile", str(PROFILE), "--keep-dtype-b", str(kf), "--out",
             str(tmp_path / "d"), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    rules = {f["node"]: f["why_after"]["rule"] for f in d["flips"]}
    assert rules["Aten.addmm.default.0"] == rules["Aten.native_layer_norm.default.0"] == "keep-dtype"
    assert rules["Aten.relu.default.0"] == "gray-inherit"        # inherits the kept LayerNorm's fp32
    assert "Aten.addmm.default.1" not in rules


@pytest.mark.slow
def test_recommend_takes_the_override_files_as_its_base(tmp_path):
    kf = tmp_path / "keep.cfg"
    kf.write_text(KEEP, encoding="utf-8")
    r = _cli("recommend", "--profile", str(PROFILE), "--keep-dtype", str(kf), "--out", str(tmp_path / "r"),
             "--json", "--no-perf")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] in ("no-change-needed", "recommended")
    bad = tmp_path / "bad.cfg"
    bad.write_text("OpType::exp\n", encoding="utf-8")
    r = _cli("recommend", "--profile", str(PROFILE), "--keep-dtype", str(bad), "--out", str(tmp_path / "r2"))
    assert r.returncode == 2 and "PascalCase" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_run_json_override_files_are_confined_to_the_run_directory(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(PROFILE, run)
    (tmp_path / "outside.cfg").write_text(KEEP, encoding="utf-8")
    meta = json.loads((run / "run.json").read_text())
    meta["keep_dtype"] = "../outside.cfg"
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="outside"):
        analyze(run)
    meta["keep_dtype"] = "keep_dtype.cfg"
    (run / "run.json").write_text(json.dumps(meta))
    (run / "keep_dtype.cfg").write_text(KEEP, encoding="utf-8")
    a = analyze(run)
    assert a.plan["Aten.addmm.default.0"] == "fp32"      # the run is planned with its own override file
    meta["keep_dtype"] = 3
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="keep_dtype"):
        analyze(run)
