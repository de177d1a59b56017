"""The chip's rounding in every emulator: overflow mode per chip (saturation on ascend910/ascend310p, INF/NaN on
A2/A3, --overflow-mode), HF32 for fp32 Conv (and MatMul when allowed) on A2/A3 (--allow-hf32), recorded in run.json
and applied again by replay and local error.  Oracles: the IEEE reference computed here with torch / numpy on the
run's own FP32 dump, and the rule's sources (docs/semantics.md, "Overflow mode", "HF32")."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from advisor import numerics as N
from advisor.analysis import analyze
from advisor.cli import main
from advisor.compare.dumps import as_steps
from advisor.emulator import capture
from advisor.ingest import load_run
from advisor.ingest.findings import saturation_hits

pytestmark = pytest.mark.timeout(600)

OVERFLOW = """
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(4) * 300.0)
            self.fc.bias.zero_()

    def forward(self, x):
        y = self.fc(x)                        # MatMulV2 (white): fp16, 300
        return y * y + torch.sqrt(x - 2.0)    # Mul: 90000 overflows fp16; Sqrt of -1: NaN

def workload():
    return M(), [(torch.ones(2, 4),)]
"""

CONV = """
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

def workload():
    torch.manual_seed(1)
    return M(), [(torch.randn(2, 3, 8, 8),)]
"""


def _target(tmp_path: Path, text: str, name: str) -> str:
    f = tmp_path / f"{name}.py"
    f.write_text(text)
    return f"{f}:workload"


def _entries(run_dir: Path, which: str = "mixed") -> dict:
    return json.loads((run_dir / "dump" / which / "step0" / "rank0" / "dump.json").read_text())["data"]


def _stat_values(entries: dict) -> list:
    return [o[k] for e in entries.values() for o in e.get("output", []) if isinstance(o, dict) for k in ("Max", "Min")]


def _cli(capfd, *args: str) -> int:
    capfd.readouterr()
    code = main(list(args))
    capfd.readouterr()
    return code


# ---------------------------------------------------------------------- overflow mode (acceptance: the CLI)
@pytest.mark.slow
def test_cli_capture_fp16_overflow_saturates_on_ascend910_and_is_inf_on_ascend910b(tmp_path, capfd):
    """Issue 20 acceptance: an fp16 overflow under --soc ascend910 gives ±65504 in the dump, never inf, while
    ascend910b gives inf."""
    t = _target(tmp_path, OVERFLOW, "ovf")
    assert _cli(capfd, "capture", t, "--out", str(tmp_path / "a910"), "--soc", "ascend910",
                "--engine", "ge") == 0
    assert _cli(capfd, "capture", t, "--out", str(tmp_path / "a910b"), "--soc", "ascend910b",
                "--engine", "ge") == 0
    sat, ieee = _stat_values(_entries(tmp_path / "a910")), _stat_values(_entries(tmp_path / "a910b"))
    assert 65504.0 in sat and not any(v in ("inf", "-inf", "nan") for v in sat)
    assert "inf" in ieee and 65504.0 not in ieee
    mul = next(e for k, e in _entries(tmp_path / "a910").items() if k.startswith("Aten.mul.Tensor"))
    x = torch.load(tmp_path / "a910" / "dump" / "mixed" / "step0" / "rank0" / "dump_tensor_data" /
                   mul["output"][0]["data_name"], weights_only=True)
    assert x.dtype == torch.float16 and torch.equal(x, torch.full_like(x, 65504.0))
    assert json.loads((tmp_path / "a910" / "run.json").read_text())["overflow_mode"] == "saturation"
    assert json.loads((tmp_path / "a910b" / "run.json").read_text())["overflow_mode"] == "inf_nan"


def test_saturation_nan_becomes_zero_in_the_dump(tmp_path):
    out = capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "r", soc="ascend910", local=False)
    sq = next(e for k, e in _entries(out).items() if k.startswith("Aten.sqrt"))
    assert sq["output"][0]["Max"] == 0.0 and sq["output"][0]["Min"] == 0.0
    fp32 = next(e for k, e in _entries(out, "fp32").items() if k.startswith("Aten.sqrt"))
    assert fp32["output"][0]["Max"] == "nan"        # the FP32 reference stays IEEE


def test_overflow_mode_option_switches_a2_to_saturation(tmp_path, capfd):
    t = _target(tmp_path, OVERFLOW, "ovf")
    assert _cli(capfd, "capture", t, "--out", str(tmp_path / "r"), "--soc", "ascend910b",
                "--overflow-mode", "saturation") == 0
    vals = _stat_values(_entries(tmp_path / "r"))
    assert 65504.0 in vals and "inf" not in vals
    assert json.loads((tmp_path / "r" / "run.json").read_text())["overflow_mode"] == "saturation"


def test_bad_overflow_mode_option_exits_2(tmp_path, capfd):
    assert _cli(capfd, "capture", _target(tmp_path, OVERFLOW, "ovf"), "--out", str(tmp_path / "r"),
                "--overflow-mode", "saturate") == 2
    assert not (tmp_path / "r").exists()


def test_saturation_hits_are_read_from_the_emulator_dump_as_from_a_real_one(tmp_path):
    out = capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "r", soc="ascend910", local=False)
    hits = saturation_hits(load_run(out))
    assert hits and all("65504" in json.dumps(h) or h for h in hits)
    none = capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "b", soc="ascend910b", local=False)
    assert not saturation_hits(load_run(none))


def test_local_error_applies_the_overflow_mode(tmp_path):
    import pandas as pd
    sat = pd.read_csv(capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "s", soc="ascend910") / "local_error.csv")
    ieee = pd.read_csv(capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "i", soc="ascend910b") /
                       "local_error.csv")
    row = lambda df: df[df["name"].str.startswith("Aten.mul.Tensor")].iloc[0]
    assert row(ieee)["local_nonfinite"] > 0 and row(sat)["local_nonfinite"] == 0
    assert row(sat)["local_rel_l2"] > 0.1           # 65504 against 90000: a large, finite error


def test_replay_of_a_saturation_run_equals_its_capture(tmp_path):
    out = capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "r", soc="ascend910", local=False)
    a = analyze(out)
    assert a.numerics.saturating
    measured = a.final_metrics()
    res = a.replay(a.plan)
    assert res.complete
    for p, q in zip(res.final_metrics(), measured):
        assert p["output"]["finite"] == q["output"]["finite"] is True
        assert p["output"]["rel_l2"] == pytest.approx(q["output"]["rel_l2"], rel=1e-6)


def test_old_run_without_the_field_replays_in_the_chip_default(tmp_path):
    """run.json written before the field existed: the chip's default (saturation on ascend910)."""
    out = capture(_target(tmp_path, OVERFLOW, "ovf"), tmp_path / "r", soc="ascend910", local=False)
    meta = json.loads((out / "run.json").read_text())
    del meta["overflow_mode"], meta["allow_hf32"]
    (out / "run.json").write_text(json.dumps(meta))
    a = analyze(out)
    assert a.numerics == N.Numerics(N.SATURATION, frozenset())
    assert analyze(out, overflow_mode="inf_nan").numerics.saturating      # the chip has no INF_NAN mode
    b = analyze(out, soc="ascend910b")
    assert b.numerics.overflow == N.INF_NAN and b.numerics.hf32 == {"conv"}


def test_replay_cli_takes_the_run_mode_and_the_option(tmp_path, capfd):
    squares = OVERFLOW.replace(" + torch.sqrt(x - 2.0)", "")   # the golden stays finite (90000)
    out = capture(_target(tmp_path, squares, "sq"), tmp_path / "r", soc="ascend910b", local=False)
    capfd.readouterr()
    code = main(["replay", "--run", str(out), "--json", "--allow-nonfinite"])
    default = json.loads(capfd.readouterr().out)
    code2 = main(["replay", "--run", str(out), "--json", "--overflow-mode", "saturation", "--allow-nonfinite"])
    sat = json.loads(capfd.readouterr().out)
    assert {code, code2} <= {0, 1}          # a verdict (outside tolerance: exit 1), not an error
    assert default["overflow_mode"] == "inf_nan" and sat["overflow_mode"] == "saturation"
    assert default["steps"][0]["output"]["finite"] is False and sat["steps"][0]["output"]["finite"] is True


# ---------------------------------------------------------------------- HF32
def _conv_io(out: Path, which: str):
    d = out / "dump" / which / "step0" / "rank0"
    e = next(v for k, v in _entries(out, which).items() if k.startswith("Aten.convolution"))
    load = lambda r: torch.load(d / "dump_tensor_data" / r["data_name"], weights_only=True)
    return [load(r) if isinstance(r, dict) and "data_name" in r else None for r in e["input_args"][:3]], \
        load(e["output"][0])


def test_fp32_conv_runs_hf32_on_ascend910b(tmp_path):
    """--allow_hf32 default "10": an fp32 Conv2D on A2 reads x, weight and bias as HF32 (ops-nn convolution
    golden), accumulates in fp32 and writes fp32.  Oracle: torch's conv on the golden inputs rounded by the
    vendored ops-nn rule."""
    out = capture(_target(tmp_path, CONV, "conv"), tmp_path / "r", mode="must_keep_origin_dtype", local=False)
    assert json.loads((out / "run.json").read_text())["allow_hf32"] == "conv"
    (x, w, b), y32 = _conv_io(out, "fp32")
    _, ymix = _conv_io(out, "mixed")
    want = torch.nn.functional.conv2d(N.hf32_tensor(x), N.hf32_tensor(w), N.hf32_tensor(b))
    assert not torch.equal(ymix, y32)
    assert torch.allclose(ymix, want, rtol=0, atol=1e-6)
    # only the Conv is HF32: the Linear (MatMul family, off by default) runs true fp32 on its inputs
    fc = next(v for k, v in _entries(out).items() if k.startswith("Aten.addmm"))
    assert fc["output"][0]["dtype"] == "torch.float32"


@pytest.mark.parametrize("soc,allow", [("ascend910", None), ("ascend310p", None), ("ascend910b", "none")])
def test_fp32_conv_is_true_fp32_without_hf32(tmp_path, soc, allow):
    kw = {"allow_hf32": allow} if allow else {}
    out = capture(_target(tmp_path, CONV, "conv"), tmp_path / "r", mode="must_keep_origin_dtype", soc=soc,
                  local=False, **kw)
    assert torch.equal(_conv_io(out, "mixed")[1], _conv_io(out, "fp32")[1])
    assert json.loads((out / "run.json").read_text())["allow_hf32"] == "none"


def test_allow_hf32_matmul_makes_fp32_linear_hf32(tmp_path, capfd):
    t = _target(tmp_path, CONV, "conv")
    assert _cli(capfd, "capture", t, "--out", str(tmp_path / "r"), "--mode", "must_keep_origin_dtype",
                "--allow-hf32", "conv,matmul") == 0
    out = tmp_path / "r"
    fc_mixed = next(v for k, v in _entries(out).items() if k.startswith("Aten.addmm"))
    fc_fp32 = next(v for k, v in _entries(out, "fp32").items() if k.startswith("Aten.addmm"))
    assert fc_mixed["output"][0]["Norm"] != fc_fp32["output"][0]["Norm"]
    assert json.loads((out / "run.json").read_text())["allow_hf32"] == "conv,matmul"


def test_hf32_dump_keeps_the_fp32_inputs(tmp_path):
    """HF32 happens inside the cube: the dumped inputs of the Conv are the fp32 tensors it was given."""
    out = capture(_target(tmp_path, CONV, "conv"), tmp_path / "r", mode="must_keep_origin_dtype", local=False)
    (x, w, b), _ = _conv_io(out, "mixed")
    (x0, w0, b0), _ = _conv_io(out, "fp32")
    assert torch.equal(x, x0) and torch.equal(w, w0) and torch.equal(b, b0)


def test_replay_applies_hf32_like_the_capture(tmp_path):
    out = capture(_target(tmp_path, CONV, "conv"), tmp_path / "r", mode="must_keep_origin_dtype", local=False)
    a = analyze(out)
    measured = a.final_metrics()[0]["output"]
    res = a.replay(a.plan)
    got = res.final_metrics()[0]["output"]
    assert measured["rel_l2"] > 0                                  # HF32 shows as error against true fp32
    assert got["rel_l2"] == pytest.approx(measured["rel_l2"], rel=1e-6)
    ieee = a.recording.replay(dict(a.plan.items()), numerics=N.IEEE).final_metrics()[0]["output"]
    assert ieee["rel_l2"] == 0


def test_recommend_explains_that_fp32_conv_is_hf32_on_a2(tmp_path):
    """A recommendation that keeps a Conv in fp32 says that on A2/A3 this fp32 is HF32."""
    from advisor.mixlist import Mixlist
    from advisor.recommend import recommend
    hot = CONV.replace("torch.randn(2, 3, 8, 8)", "torch.randn(2, 3, 8, 8) * 1e5").replace(
        "self.fc = ", "self.conv.weight.data.mul_(1e-3)\n        self.fc = ")   # inputs overflow fp16, outputs do not
    t = _target(tmp_path, hot, "hot")
    out = capture(t, tmp_path / "r", local=False)
    rec = recommend(out, max_edits=2, perf=False, granularity="type")
    conv = [e for e in rec.edits if e.edit.type == "Conv2D" and e.edit.kind == "black-add"]
    assert conv, [str(e.edit) for e in rec.edits]
    assert "HF32" in conv[0].explanation
    out910 = capture(t, tmp_path / "s", soc="ascend910", local=False)
    rec910 = recommend(out910, max_edits=2, perf=False, granularity="type")
    assert all("HF32" not in e.explanation for e in rec910.edits)
    assert isinstance(rec.modify_mixlist, Mixlist)


# ---------------------------------------------------------------------- ONNX and TensorFlow
def _onnx_model(path: Path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array((np.eye(4, dtype=np.float32) * 300.0), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
                           helper.make_node("Mul", ["y", "y"], ["z"], name="sq")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    np.savez(path.with_suffix(".npz"), x=np.ones((2, 4), np.float32))
    return path


@pytest.mark.slow
def test_onnx_capture_saturates_on_ascend910(tmp_path, capfd):
    m = _onnx_model(tmp_path / "m.onnx")
    for soc in ("ascend910", "ascend910b"):
        assert _cli(capfd, "capture", str(m), "--inputs", str(m.with_suffix(".npz")), "--out", str(tmp_path / soc),
                    "--soc", soc) == 0
    sat = _entries(tmp_path / "ascend910")["sq.forward"]["output"][0]
    ieee = _entries(tmp_path / "ascend910b")["sq.forward"]["output"][0]
    assert sat["Max"] == 65504.0 and ieee["Max"] == "inf"


def test_tf_capture_saturates_on_ascend910(tmp_path):
    pytest.importorskip("tensorflow")
    text = ("import numpy as np\nimport tensorflow as tf\n\ndef workload():\n"
            "    w = tf.constant(np.eye(4, dtype=np.float32) * 300.0)\n"
            "    f = tf.function(lambda x: tf.square(tf.matmul(x, w)))\n"
            "    return f, [(np.ones((2, 4), np.float32),)]\n")
    t = _target(tmp_path, text, "tfw")
    vals = {}
    for soc in ("ascend910", "ascend910b"):
        out = capture(t, tmp_path / soc, soc=soc, local=False)
        vals[soc] = next(e for k, e in _entries(out).items() if "Square" in k)["output"][0]["Max"]
    assert vals == {"ascend910": 65504.0, "ascend910b": "inf"}


def test_tf_rewrite_saturation_equals_the_numpy_rule():
    """The TF form of the rule (IsNan/SelectV2/ClipByValue after the Cast) gives what numerics.round_array gives."""
    tf = pytest.importorskip("tensorflow")
    from advisor.tf.capture import Session
    from advisor.tf.rewrite import DT_FLOAT, DT_HALF, _Builder
    a = np.array([1e5, -1e5, np.inf, -np.inf, np.nan, 1.5, 65519.0, 65520.0], np.float32)
    gd = tf.compat.v1.GraphDef()
    b = _Builder(tf, gd, N.Numerics(N.SATURATION))
    x = b.node("x", "Placeholder", [], dtype=DT_FLOAT)
    h = b.saturate("y", b.cast("y/cast", x, DT_FLOAT, DT_HALF), DT_HALF)
    f = b.saturate("z", x, DT_FLOAT)
    s = Session(tf, gd)
    got_h, got_f = s.run([h, f], {x: a})
    s.close()
    assert np.array_equal(got_h.astype(np.float32), N.round_array(a, "fp16", N.SATURATION))
    assert np.array_equal(got_f, N.round_array(a, "fp32", N.SATURATION))


def test_tf_rewrite_hf32_equals_the_numpy_rule():
    tf = pytest.importorskip("tensorflow")
    from advisor.tf.capture import Session
    from advisor.tf.rewrite import DT_FLOAT, _Builder
    a = (np.random.default_rng(0).standard_normal(1000) * 1e3).astype(np.float32)
    gd = tf.compat.v1.GraphDef()
    b = _Builder(tf, gd)
    x = b.node("x", "Placeholder", [], dtype=DT_FLOAT)
    y = b.hf32("y", x)
    s = Session(tf, gd)
    got = s.run([y], {x: a})[0]
    s.close()
    assert np.array_equal(got.view(np.int32), N.hf32_array(a).view(np.int32))


# ---------------------------------------------------------------------- training signals
def _grads(v: np.ndarray, dtype: str):
    from advisor.compare.dumps import DumpView
    return DumpView({"Grad.w": {"output": [{"type": "torch.Tensor", "dtype": dtype, "shape": list(v.shape),
                                            "tensor": v}]}})


def test_saturated_gradients_count_as_overflow():
    """In saturation mode an overflowing fp16 gradient reads ±65504, not inf: the loss-scale advice sees it."""
    from advisor.compare.training import training_signals
    golden = np.array([1e5, -2e5, 1.0, 2.0], np.float32)
    target = N.round_array(golden, "fp16", N.SATURATION)
    out = training_signals({0: _grads(target, "torch.float16")}, {0: _grads(golden, "torch.float32")}, [0])
    assert out["params"][0]["target_saturated"] == 2 and out["params"][0]["target_nonfinite"] == 0
    assert out["overflow"] and out["loss_scale"]["dynamic"]
    ok = training_signals({0: _grads(golden[2:], "torch.float16")}, {0: _grads(golden[2:], "torch.float32")}, [0])
    assert not ok["overflow"]


# ---------------------------------------------------------------------- tune and the other commands
def test_tune_runner_captures_with_the_overflow_mode_in_every_slot(tmp_path):
    from advisor.runners import make_runner
    r = make_runner("emulator", target=_target(tmp_path, OVERFLOW, "ovf"), soc="ascend910b",
                    overflow_mode="saturation", allow_hf32="none")
    try:
        assert r.slot(1).fixed == r.fixed
        res = r.run(None, "mixed_float16", tmp_path / "it" / "run")
        meta = json.loads((Path(res.run_dir) / "run.json").read_text())
        assert (meta["overflow_mode"], meta["allow_hf32"]) == ("saturation", "none")
    finally:
        r.close()


def test_tune_refuses_the_numerics_options_with_a_command_runner(tmp_path, capfd):
    assert _cli(capfd, "tune", "--runner", "command", "--cmd", "true", "--out", str(tmp_path / "t"),
                "--overflow-mode", "saturation") == 2


@pytest.mark.parametrize("command", ["recommend", "diff"])
def test_bad_numerics_options_exit_2_on_every_command(tmp_path, capfd, command):
    args = ["--profile", str(tmp_path)] + (["defaults", "defaults"] if command == "diff" else [])
    assert _cli(capfd, command, *args, "--allow-hf32", "gemm") == 2
