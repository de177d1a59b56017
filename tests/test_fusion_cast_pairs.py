"""GE's TransNodeMerging (advisor.fusion.transnodes): inverse float Cast pairs, the user's included, are removed
after the precision judge (trans_node_merging.cc:359-447, :563-648; fe_graph_optimizer.cc:603 before :647).
One test per condition of CheckTwoTransOpDescMergable, and the effect on captures (ONNX through the CLI, PyTorch)
checked against values computed here, not by the emulator."""
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

from advisor import fusion, semantics
from advisor.emulator import capture
from advisor.workload import Workload

from test_fusion_passes import L910B, B, fuse


def _cast(b: B, name: str, src: str, to: str, shape=(4, 8), frm: str | None = None):
    frm = frm or b.g.nodes[src]["out_dtypes"][0]
    return b.op(name, "Cast", [src], [list(shape)], in_dtypes=[frm], out_dtypes=[to], cast_to=to)


def _pair(frm: str, mid: str, to: str | None = None, consumer: str = "Log", shape=(4, 8)):
    b = B(frm)
    b.data("x", list(shape))
    _cast(b, "c1", "x", mid, shape)
    _cast(b, "c2", "c1", to or frm, shape)
    b.op("y", consumer, ["c2"], [list(shape)], out_dtypes=[to or frm])
    return b


def _merged(g) -> dict:
    return {n: (a.get("merged_with"), bool(a.get("trans_removed"))) for n, a in g.nodes(data=True)
            if a.get("type") == "Cast"}


@pytest.mark.parametrize("frm, mid", [("fp32", "fp16"), ("fp16", "fp32"), ("fp32", "bf16"), ("bf16", "fp32"),
                                      ("fp16", "bf16"), ("fp64", "fp32")])
def test_an_inverse_float_cast_pair_is_removed(frm, mid):
    """IsFloatingCast (trans_node_merging.cc:641-648: fp32, fp16, fp64, bf16) + inverse dtypes (:435-442)."""
    fz = fuse(_pair(frm, mid).g)
    assert _merged(fz.graph) == {"c1": (None, True), "c2": ("c1", True)}
    assert fz.describe() == [f"c1 + c2 (Casts {frm}->{mid}->{frm}) removed by TransNodeMerging after the precision "
                             "judge"]


def test_a_cast_pair_through_an_integer_type_is_kept():
    """A user's Cast to or from an integer type merges only when GE inserted both (:397-405): fp32 -> int32 ->
    fp32 truncates and stays."""
    b = _pair("fp32", "int32")
    b.g.nodes["c2"]["float"] = True
    fz = fuse(b.g)
    assert _merged(fz.graph) == {"c1": (None, False), "c2": (None, False)} and not fz.rewrites


def test_a_cast_pair_that_is_not_inverse_is_kept():
    """fp32 -> fp16 -> bf16: the second Cast's output dtype is not the first one's input dtype (:436)."""
    fz = fuse(_pair("fp32", "fp16", to="bf16").g)
    assert not fz.rewrites and _merged(fz.graph) == {"c1": (None, False), "c2": (None, False)}


def test_a_cast_pair_of_unknown_rank_is_kept():
    """CheckTwoDimsEquivalent: an unknown rank (-2) is never equivalent (:80-82)."""
    fz = fuse(_pair("fp32", "fp16", shape=(-2,)).g)
    assert not fz.rewrites


def test_casts_separated_by_another_op_are_not_a_pair():
    """Only adjacent trans ops of the same type merge (:375-382); a Reshape between the Casts blocks (choice:
    inverse Reshape pairs are not modelled)."""
    b = B()
    b.data("x", [4, 8])
    _cast(b, "c1", "x", "fp16")
    b.op("r", "Reshape", ["c1"], [[8, 4]], out_dtypes=["fp16"])
    _cast(b, "c2", "r", "fp32", shape=(8, 4))
    b.op("y", "Log", ["c2"], [[8, 4]])
    assert not fuse(b.g).rewrites


def test_a_chain_of_casts_cancels_like_ges_stack():
    """MergeTransOpBetweenTwoNormalOp's stack (:573-631): fp32 -> fp16 -> bf16 -> fp16 -> fp32 cancels whole."""
    b = B()
    b.data("x", [4, 8])
    _cast(b, "c1", "x", "fp16")
    _cast(b, "c2", "c1", "bf16")
    _cast(b, "c3", "c2", "fp16")
    _cast(b, "c4", "c3", "fp32")
    b.op("y", "Log", ["c4"], [[4, 8]])
    fz = fuse(b.g)
    assert _merged(fz.graph) == {"c1": (None, True), "c2": (None, True), "c3": ("c2", True), "c4": ("c1", True)}


def test_a_cast_pair_whose_first_cast_has_another_consumer_keeps_that_cast():
    """RemoveNodeAndEdges (:286-350): a trans node with more consumers is only unlinked from the merged path; the
    other consumer still reads it."""
    b = _pair("fp32", "fp16")
    b.op("z", "Abs", ["c1"], [[4, 8]], out_dtypes=["fp16"])
    fz = fuse(b.g)
    assert _merged(fz.graph) == {"c1": (None, False), "c2": ("c1", True)}


def test_the_judge_still_sees_the_casts():
    """TransNodeMerging runs after FeOpDtypeJudge (fe_graph_optimizer.cc:603, :647): in mixed_float16 a gray op
    after fp32 -> fp16 -> fp32 looks through the fp16 -> fp32 Cast and runs fp16, as without the pass."""
    b = _pair("fp32", "fp16", consumer="Abs")
    p = semantics.plan(fuse(b.g).graph, L910B, "mixed_float16")
    q = semantics.plan(fuse(b.g, passes=[]).graph, L910B, "mixed_float16")
    assert p["y"] == q["y"] == "fp16" and p.why("y").rule == semantics.Rule.GRAY_SKIP_CAST


def test_the_pass_can_be_left_out_and_never_changes_the_input_graph():
    g = _pair("fp32", "fp16").g
    assert not fuse(g, passes=[p for p in fusion.PASS_NAMES if p != fusion.TRANS_NODE_MERGING]).rewrites
    fuse(g)
    assert not any(a.get("merged_by") for _n, a in g.nodes(data=True))


# ---------------------------------------------------------------------- captures
def _rows(run: Path) -> list[dict]:
    (kd,) = run.glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with open(kd, newline="") as f:
        return [r for r in csv.DictReader(f) if r["Step Id"] == "0"]


def _onnx_capture(tmp_path: Path, nodes: list, outputs: list, x: np.ndarray) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info(n, t, list(x.shape)) for n, t in outputs])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "model.onnx")
    np.savez(tmp_path / "x.npz", x=x)
    p = subprocess.run([sys.executable, "-m", "advisor", "capture", "model.onnx", "--inputs", "x.npz", "--out", "run"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    return tmp_path / "run"


def _onnx_out(run: Path, which: str, k: int = 0) -> np.ndarray:
    return np.load(run / "dump" / which / "step0" / "rank0" / "dump_tensor_data" / f"Model.output.0.forward.output.{k}.npy")


def _x() -> np.ndarray:
    return (1 + np.random.RandomState(0).rand(4, 8) * 1e-3).astype(np.float32)   # bits below fp16's resolution


@pytest.mark.slow
def test_onnx_capture_cli_a_users_fp16_round_trip_does_not_round(tmp_path):
    """Cast(to FLOAT16) -> Cast(to FLOAT) -> Log (black, fp32): on GE the pair is gone, Log reads x itself."""
    from onnx import TensorProto, helper
    x = _x()
    nodes = [helper.make_node("Cast", ["x"], ["h16"], name="to16", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h16"], ["h32"], name="to32", to=TensorProto.FLOAT),
             helper.make_node("Log", ["h32"], ["y"], name="log")]
    run = _onnx_capture(tmp_path, nodes, [("y", TensorProto.FLOAT)], x)
    assert np.array_equal(_onnx_out(run, "mixed"), np.log(x))
    assert np.array_equal(_onnx_out(run, "fp32"), np.log(x.astype(np.float16).astype(np.float32)))  # as written
    assert [r["Name"] for r in _rows(run)] == ["log"]                 # neither Cast runs a kernel
    meta = json.loads((run / "run.json").read_text())
    assert meta["fusion"]["passes"] == {"TransNodeMerging": 1}
    assert any("TransNodeMerging removes 1 inverse float Cast pair" in n for n in meta["notes"])


@pytest.mark.slow
def test_onnx_capture_cli_an_integer_round_trip_still_truncates(tmp_path):
    """Cast(to INT32) -> Cast(to FLOAT): not float casts, the user's: kept (:397-405)."""
    from onnx import TensorProto, helper
    x = _x() * 3
    nodes = [helper.make_node("Cast", ["x"], ["i"], name="toint", to=TensorProto.INT32),
             helper.make_node("Cast", ["i"], ["f"], name="tofloat", to=TensorProto.FLOAT),
             helper.make_node("Log", ["f"], ["y"], name="log")]
    run = _onnx_capture(tmp_path, nodes, [("y", TensorProto.FLOAT)], x)
    assert np.array_equal(_onnx_out(run, "mixed"), np.log(np.trunc(x)))
    assert {r["Name"] for r in _rows(run)} == {"toint", "tofloat", "log"}


@pytest.mark.slow
def test_onnx_capture_cli_the_first_cast_keeps_its_other_consumer(tmp_path):
    """The fp16 tensor also feeds an Abs: Abs still reads the rounded value (the Cast keeps its kernel for it),
    Log reads x."""
    from onnx import TensorProto, helper
    x = _x()
    nodes = [helper.make_node("Cast", ["x"], ["h16"], name="to16", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h16"], ["h32"], name="to32", to=TensorProto.FLOAT),
             helper.make_node("Log", ["h32"], ["y"], name="log"),
             helper.make_node("Abs", ["h16"], ["z"], name="abs")]
    run = _onnx_capture(tmp_path, nodes, [("y", TensorProto.FLOAT), ("z", TensorProto.FLOAT16)], x)
    assert np.array_equal(_onnx_out(run, "mixed", 0), np.log(x))
    assert np.array_equal(_onnx_out(run, "mixed", 1).astype(np.float32), x.astype(np.float16).astype(np.float32))
    assert {r["Name"] for r in _rows(run)} == {"to16", "log", "abs"}


class HalfRoundTrip(nn.Module):
    def forward(self, x):
        return torch.log(x.half().float())


def test_pytorch_half_float_round_trip_does_not_round(tmp_path):
    """``x.half().float()`` in a model: two ``_to_copy`` Casts GE removes; Log (black) reads x."""
    x = torch.from_numpy(_x())
    run = capture(Workload(HalfRoundTrip(), [(x,)], name="m"), tmp_path / "r", dump="tensors", local=False)
    data = run / "dump" / "{}" / "step0" / "rank0" / "dump_tensor_data" / "Model.output.0.forward.output.0.pt"
    mixed = torch.load(str(data).format("mixed"), weights_only=True)
    fp32 = torch.load(str(data).format("fp32"), weights_only=True)
    assert torch.equal(mixed, torch.log(x))
    assert torch.equal(fp32, torch.log(x.half().float())) and not torch.equal(mixed, fp32)
    assert [r["Type"] for r in _rows(run)] == ["Log"]


def _tf_round_trip():
    tf = pytest.importorskip("tensorflow")

    class RoundTrip(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32)])
        def __call__(self, x):
            return tf.math.log(tf.cast(tf.cast(x, tf.float16), tf.float32))
    return tf, RoundTrip()


@pytest.mark.tf
def test_tensorflow_cast_round_trip_does_not_round(tmp_path):
    """``tf.cast(tf.cast(x, float16), float32)``: GE removes both Casts; Log reads x."""
    tf, m = _tf_round_trip()
    from advisor.tf.capture import capture_tf
    x = _x()
    run = capture_tf((m, [(x,)]), tmp_path / "r", target="m", local=False, dump="tensors")
    mixed, fp32 = (np.load(run / "dump" / w / "step0" / "rank0" / "dump_tensor_data" / "Model.output.0.forward.output.0.npy")
                   for w in ("mixed", "fp32"))
    assert np.array_equal(mixed, tf.math.log(tf.constant(x)).numpy())
    assert np.array_equal(fp32, tf.math.log(tf.constant(x.astype(np.float16).astype(np.float32))).numpy())
    assert [r["Type"] for r in _rows(run)] == ["Log"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_replay_of_a_run_with_a_removed_cast_pair_reproduces_its_capture(tmp_path, kind):
    """Replay re-executes from the FP32 dump, where the user's Casts rounded: the removed pair passes its input
    through there too, so a replayed plan equals the capture."""
    from advisor.analysis import analyze
    x = _x()
    if kind == "pytorch":
        run = capture(Workload(HalfRoundTrip(), [(torch.from_numpy(x),)], name="m"), tmp_path / "r", dump="tensors",
                      local=False)
    else:
        from onnx import TensorProto, helper
        nodes = [helper.make_node("Cast", ["x"], ["h16"], name="to16", to=TensorProto.FLOAT16),
                 helper.make_node("Cast", ["h16"], ["h32"], name="to32", to=TensorProto.FLOAT),
                 helper.make_node("Log", ["h32"], ["y"], name="log")]
        run = _onnx_capture(tmp_path, nodes, [("y", TensorProto.FLOAT)], x)
    a = analyze(run)
    measured = a.final_metrics()
    replayed = a.replay(a.plan).final_metrics(tolerance=a.tolerance)
    assert measured[0]["output"]["rel_l2"] > 0
    assert [m["output"]["rel_l2"] for m in measured] == [m["output"]["rel_l2"] for m in replayed]
