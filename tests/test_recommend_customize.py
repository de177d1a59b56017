"""Per-op fp16 inputs with an fp32 output: recommend's ATC --customize_dtypes line (the per-op form of GE's
cube_fp16in_fp32out) where the op's kernel has that combination, and never where it lacks it.

The ONNX model is GE's motivating case built with onnx.helper: Linear (bias 1000) -> LayerNorm -> Linear.  In fp16
the first Gemm's output (~1000, ulp 0.5) loses the O(1) variation the LayerNorm keeps; an fp32 output of that Gemm
fixes it while its compute stays fp16.  Every claim about the advice is checked by an independent oracle -- a fresh
capture with the written files, judged by compare and measured for its share from its own kernel_details.csv --
never by the replay that chose it.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from advisor import semantics as S
from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.graph import add_op, connect, new_graph
from advisor.kernels import Kernel, KernelTable
from advisor.oplists import OpLists
from advisor.recommend import recommend, write_outputs
from advisor.recommend.edits import CUSTOMIZE, Edit, edits_from_json, edits_to_json
from advisor.recommend.replay_search import KEEP_MARGIN
from advisor.recommend.result import Recommendation
from advisor.workload import Workload

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D_IN, HIDDEN, D_OUT, BATCH = 32, 64, 8, 16
LINE = "/fc1/Gemm::InputDtype:float16,float16,OutputDtype:float"


def _model(seed: int):
    """x -> Gemm (bias 1000) -> LayerNormalization -> Gemm, with ONNX node names as torch.onnx names them."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((HIDDEN, D_IN)) / np.sqrt(D_IN)).astype(np.float32)
    w2 = (rng.standard_normal((D_OUT, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    inits = {"fc1.weight": w1, "fc1.bias": np.full(HIDDEN, 1000.0, np.float32),
             "ln.weight": np.ones(HIDDEN, np.float32), "ln.bias": np.zeros(HIDDEN, np.float32),
             "fc2.weight": w2, "fc2.bias": (rng.standard_normal(D_OUT) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="/fc1/Gemm", transB=1),
             helper.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["n"],
                              name="/ln/LayerNormalization", axis=-1, epsilon=1e-5),
             helper.make_node("Gemm", ["n", "fc2.weight", "fc2.bias"], ["y"], name="/fc2/Gemm", transB=1)]
    g = helper.make_graph(nodes, "linear_ln_linear",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, D_IN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, D_OUT])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _batches(seed: int, n: int = 4):
    rng = np.random.default_rng(100 + seed)
    return [{"x": rng.standard_normal((BATCH, D_IN)).astype(np.float32)} for _ in range(n)]


def _workload(seed: int) -> Workload:
    return Workload(model=_model(seed), batches=_batches(seed), name=f"linear_ln_linear_{seed}")


def _fresh(seed: int, out, **files):
    """A fresh capture with these override files: (compare's verdict, the measured low-precision share, run)."""
    a = analyze(capture(_workload(seed), out, **{k: str(v) for k, v in files.items()}))
    return a.verdict().ok, a.measured_low_share, a


@pytest.fixture(scope="module", params=[0, 1])
def base(request, tmp_path_factory):
    seed = request.param
    return seed, capture(_workload(seed), tmp_path_factory.mktemp(f"base{seed}") / "run")


# ---------------------------------------------------------------------- the one rule, against brute force


@st.composite
def kernels(draw):
    t = draw(st.sampled_from(["MatMulV2", "BatchMatMulV2", "Conv2D", "MatMulV3", "Add"]))
    n = draw(st.integers(1, 4))
    col = st.lists(st.sampled_from(["fp16", "fp32", "bf16"]), min_size=n, max_size=n).map(tuple)
    return t, Kernel(t, (draw(col), draw(col)), (draw(col),))


def _lists(k: Kernel) -> OpLists:
    return OpLists(frozenset({k.op_type}), frozenset(), frozenset({k.op_type}), "test", "test",
                   kernels=KernelTable({k.op_type: k}, "test"))


@settings(max_examples=150, deadline=None)
@given(kernels())
def test_fp16_in_fp32_out_is_the_rule_force_fp32_and_the_customize_candidate_share(tk):
    """fe.ini fp16.op_type and a combination with input 0 fp16 and output 0 fp32 (IsNodeSupport16In32out), by
    brute force over the combinations; force_fp32 gives such a one-input op fp16 in / fp32 out exactly then (where
    its kernel also runs fp32: without, GE reduces whatever the type), and
    the customize entry exists exactly when a combination has every float input fp16 with an fp32 output."""
    t, k = tk
    lists = _lists(k)
    combos = k.combos()
    want = t in S.FP16_OP_TYPES and any(i[0] == "fp16" and o[0] == "fp32" for i, o in combos)
    assert S.fp16_in_fp32_out(lists, t) is want
    g = new_graph()
    add_op(g, "x", "Data", role="data", dtype="fp32")
    add_op(g, "op", t)
    connect(g, "x", "op", 0, 0)
    p = S.plan(g, lists, "force_fp32")
    if any(i[0] == "fp32" and o[0] == "fp32" for i, o in combos):       # fp32 is there: fp16 in only by the rule
        assert (p.exec_dtypes("op") == ("fp16", "fp32")) is want
    entry = S.fp16_in_fp32_out_entry(lists, t, [0, 1])
    both = t in S.FP16_OP_TYPES and any(i[:2] == ("fp16", "fp16") and o[0] == "fp32" for i, o in combos)
    assert (entry is not None) is both
    if entry is not None:
        assert entry.inputs == ("fp16", "fp16") and entry.outputs == ("fp32",)
        assert S.custom_matches(lists, t, entry.inputs, entry.outputs)


def test_an_undeclared_cube_kernel_gets_its_two_operands_and_leaves_the_bias_port_to_ge():
    """MatMulV2's ops-info declares no dtypes (dynamicFormat): the line gives the operands fp16 and leaves the
    bias port empty, so it never asks for a combination the op-select function may lack."""
    lists = _lists(Kernel("MatMulV2", (None, None, None, None), (None,)))
    e = S.fp16_in_fp32_out_entry(lists, "MatMulV2", [0, 1, 2])
    assert (e.inputs, e.outputs) == (("fp16", "fp16"), ("fp32",))
    assert S.custom_matches(lists, "MatMulV2", e.inputs, e.outputs) is None            # unknown: op-select decides
    assert S.fp16_in_fp32_out_entry(lists, "MatMulV2", [1, 2]) is None                  # input 0 is not float


# ---------------------------------------------------------------------- the Edit
def test_customize_edit_round_trips_through_str_and_the_journal():
    e = Edit(CUSTOMIZE, "MatMulV2", "/fc1/Gemm", S.fp16_in_fp32_out_entry(
        _lists(Kernel("MatMulV2", (None, None, None), (None,))), "MatMulV2", [0, 1, 2]))
    assert e.line == LINE and e.per_op and e.is_override and not e.is_keep
    assert str(e) == f"customize_dtypes {LINE} (MatMulV2)" and Edit.parse(str(e)) == e
    assert e.entry == ("customize_dtypes", "customize", LINE)
    back = edits_from_json(json.loads(json.dumps(edits_to_json([e, Edit("black-add", "Exp")]))))
    assert back == {e.journal_identity, Edit("black-add", "Exp")} and e.journal_identity.line == LINE
    with pytest.raises(ValueError):
        Edit.parse("customize_dtypes /fc1/Gemm::InputDtype:float17 (MatMulV2)")


# ---------------------------------------------------------------------- recommend on the ONNX model
def test_recommend_gives_the_biased_gemm_fp16_inputs_and_an_fp32_output(base, tmp_path):
    """The advice is the customize line for /fc1/Gemm (not a keep); a fresh capture with customize_dtypes.cfg
    passes the tolerance and keeps more of the kernel time in fp16 than keeping that Gemm whole in fp32."""
    seed, run = base
    rec = recommend(run)
    assert rec.status == "recommended"
    assert [str(r.edit) for r in rec.edits] == [f"customize_dtypes {LINE} (MatMulV2)"]
    assert rec.customize_dtypes == [LINE] and not rec.keep_dtype
    paths = write_outputs(rec, tmp_path / "advice")
    cfg = tmp_path / "advice" / "customize_dtypes.cfg"
    assert paths["customize_dtypes"] == cfg and cfg.read_text() == LINE + "\n"
    assert "keep_dtype" not in paths and not (tmp_path / "advice" / "keep_dtype.cfg").exists()
    assert f"--customize_dtypes={cfg.resolve()}" in rec.snippets["atc"]
    ok, share, a = _fresh(seed, tmp_path / "fresh", customize_dtypes=cfg)
    assert ok
    k = a.run.kernels
    rows = k[k["name"] == "/fc1/Gemm"]
    assert len(rows) == 4 and set(zip(rows["in_dtypes"], rows["out_dtypes"])) == {("FLOAT16;FLOAT16;FLOAT16", "FLOAT")}
    keep = tmp_path / "keep.cfg"
    keep.write_text("/fc1/Gemm\n", encoding="utf-8")
    k_ok, k_share, _ = _fresh(seed, tmp_path / "keep", keep_dtype=keep)
    assert k_ok and share > k_share + KEEP_MARGIN


def test_the_customize_edit_round_trips_through_recommendation_json(base, tmp_path):
    rec = recommend(base[1])
    write_outputs(rec, tmp_path / "advice", html=False)
    back = Recommendation.from_dict(json.loads((tmp_path / "advice" / "recommendation.json").read_text()))
    assert back.fixes == rec.fixes and any(e.is_customize for e in back.fixes)
    assert back.customize_dtypes == rec.customize_dtypes == [LINE]
    d = json.loads((tmp_path / "advice" / "recommendation.json").read_text())
    assert d["edits"][0]["kind"] == "customize" and d["edits"][0]["line"] == LINE


# ---------------------------------------------------------------------- a kernel without the combination
def _ops_info(tmp_path, with_16in32out: bool):
    """An ops-info declaring MatMulV2 (white) with fp16 and fp32 combinations, and fp16 inputs with an fp32 output
    only when asked; LayerNorm (gray) undeclared."""
    cols = ["float16", "float"] + (["float16"] if with_16in32out else [])
    out = ["float16", "float"] + (["float"] if with_16in32out else [])
    mm = {f"input{i}": {"name": n, "dtype": ",".join(cols)} for i, n in enumerate(("x1", "x2", "bias"))}
    mm.update(output0={"name": "y", "dtype": ",".join(out)}, precision_reduce={"flag": "true"},
              opFile={"value": "mat_mul"})
    ln = {"input0": {"name": "x"}, "input1": {"name": "gamma"}, "input2": {"name": "beta"},
          "output0": {"name": "y"}, "opFile": {"value": "layer_norm"}}
    p = tmp_path / f"aic-ascend910b-ops-info-{'with' if with_16in32out else 'without'}.json"
    p.write_text(json.dumps({"MatMulV2": mm, "LayerNorm": ln}), encoding="utf-8")
    return p


@pytest.mark.parametrize("with_16in32out", [False, True])
def test_the_line_is_proposed_only_where_the_kernel_has_fp16_inputs_with_an_fp32_output(tmp_path, with_16in32out):
    """--ops-info declaring MatMulV2 without fp16 -> fp32: never a customize line (GE would fail the op); with
    that combination declared: the line gives every declared float input fp16, and a fresh capture passes."""
    oi = _ops_info(tmp_path, with_16in32out)
    run = capture(_workload(0), tmp_path / "run", ops_info=str(oi))
    rec = recommend(run)
    assert rec.status == "recommended"
    customs = [r.edit for r in rec.edits if r.edit.is_customize]
    if not with_16in32out:
        assert not customs and not rec.customize_dtypes
        assert not S.fp16_in_fp32_out(analyze(run).lists, "MatMulV2")
        return
    line = "/fc1/Gemm::InputDtype:float16,float16,float16,OutputDtype:float"
    assert [e.line for e in customs] == [line] and rec.customize_dtypes == [line]
    write_outputs(rec, tmp_path / "advice", html=False)
    a = analyze(capture(_workload(0), tmp_path / "fresh", ops_info=str(oi),
                        customize_dtypes=str(tmp_path / "advice" / "customize_dtypes.cfg")))
    assert a.verdict().ok and a.plan.exec_dtypes("/fc1/Gemm") == ("fp16", "fp32")


# ---------------------------------------------------------------------- tune
@pytest.mark.slow
def test_tune_confirms_the_customize_line_applied_by_its_runner(tmp_path):
    """advisor tune on the model file: the confirmed list is the customize line, the confirming run applied it
    (run.json's customize_dtypes file inside the run), tune writes customize_dtypes.cfg and journals the edit."""
    from advisor.tune import read_journal
    d = tmp_path / "model"
    d.mkdir()
    (d / "m.onnx").write_bytes(_model(0).SerializeToString())
    args = []
    for i, b in enumerate(_batches(0)):
        np.savez(d / f"x{i}.npz", **b)
        args += ["--inputs", str(d / f"x{i}.npz")]
    r = subprocess.run([sys.executable, "-m", "advisor", "--quiet", "tune", str(d / "m.onnx"), *args, "--out",
                        str(tmp_path / "t"), "--max-runs", "6", "--json", "--no-perf"],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert s["confirmed"] and s["customize_dtypes"] == [LINE] and not s["keep_dtype"], s["stop_reason"]
    assert (tmp_path / "t" / "customize_dtypes.cfg").read_text() == LINE + "\n"
    best = tmp_path / "t" / f"iter_{s['best_iteration']:02d}" / "run"
    meta = json.loads((best / "run.json").read_text())
    assert LINE in (best / meta["customize_dtypes"]).read_text().splitlines()
    assert analyze(best).plan.exec_dtypes("/fc1/Gemm") == ("fp16", "fp32")
    st_ = read_journal(tmp_path / "t" / "tune_state.json")
    assert any(e.is_customize and e.line == LINE for e in st_.iterations[s["best_iteration"]].edits)
