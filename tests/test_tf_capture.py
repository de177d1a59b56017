"""TensorFlow/Keras capture: the run directory executes exactly the semantics module's plan.

The plan is recomputed independently from the GE graph dump the capture wrote (ingest reader ->
advisor.semantics.plan) and compared with the executed dtypes in kernel_details.csv, for every
kernel of every step.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from advisor import semantics  # noqa: E402
from advisor.graph import normalize_dtype  # noqa: E402
from advisor.ingest.ge_dump import read_ge_dump  # noqa: E402
from advisor.mixlist import effective, parse_obj  # noqa: E402
from advisor.oplists import is_cube_type, load_lists  # noqa: E402
from advisor.tf.capture import capture_tf  # noqa: E402

pytestmark = pytest.mark.tf

REPO = Path(__file__).resolve().parents[1]
FLOATS = ("fp32", "fp16", "bf16")


def mlp():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.LayerNormalization(), keras.layers.Dense(4, activation="tanh"),
                          keras.layers.Softmax()])
    rng = np.random.default_rng(0)
    return m, [(rng.standard_normal((4, 8)).astype("float32"),) for _ in range(2)]


def cnn_train():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                          keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                          keras.layers.Dropout(0.3), keras.layers.Dense(4)])
    rng = np.random.default_rng(0)

    def loss_fn(out, batch):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(batch[1], out))
    batches = [(rng.standard_normal((2, 8, 8, 3)).astype("float32"), np.array([1, 3])) for _ in range(2)]
    return m, batches, loss_fn


def kernel_frame(run: Path) -> pd.DataFrame:
    (kd,) = run.glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    return pd.read_csv(kd, dtype=str, keep_default_na=False)


def planned(run: Path):
    meta = json.loads((run / "run.json").read_text())
    g = read_ge_dump(next((run / "graph").glob("ge_onnx_*.pbtxt")))
    base = load_lists(meta["soc"])
    ml = parse_obj(meta["mixlist"]) if meta.get("mixlist") else None
    lists = effective(base, ml) if semantics.uses_mixlist(meta["mode"]) else base
    return g, semantics.plan(g, lists, meta["mode"])


def assert_kernels_follow_plan(run: Path) -> int:
    g, p = planned(run)
    kd = kernel_frame(run)
    assert len(kd) > 0
    mismatches = []
    for _, r in kd.iterrows():
        name = r["Name"]
        want, emit = p.exec_dtypes(name)
        outs = [normalize_dtype(x) for x in r["Output Data Types"].split(";")]
        ins = [normalize_dtype(x) for x in r["Input Data Types"].split(";") if x]
        if want in FLOATS:
            # the main output and the first float (activation) input run in the planned precision
            # (an op with only non-float outputs, e.g. GreaterEqual, shows it on its inputs; BN ops'
            # scale/offset/statistics operands are fp32 by kernel definition, as on the NPU); the main
            # output is in the dtype the kernel emits (Conv2DBackpropFilterD takes fp16 and writes fp32 in
            # the 910b ops-info)
            first_in = next((d for d in ins if d in FLOATS), None)
            main = next((d for d in outs if d in FLOATS), None)
            if (main is not None and main != emit) or (first_in is not None and first_in != want) \
                    or (main is None and first_in is None):
                mismatches.append((name, r["Type"], want, ins, outs))
        else:
            if outs[0] in ("fp16", "bf16"):
                mismatches.append((name, r["Type"], want, ins, outs))
    assert mismatches == []
    # every kernel op of the graph has one row per step
    kernel_ops = {n for n, a in g.nodes(data=True) if a.get("role") == "op" and a.get("kernel", True)}
    steps = kd["Step Id"].nunique()
    assert set(kd["Name"]) <= set(g.nodes)
    assert len(kd) == steps * len(kernel_ops & set(kd["Name"]))
    return len(kd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tfruns")
    out = {}
    out["mlp"] = capture_tf(mlp(), base / "mlp", target="mlp")
    out["cnn_train"] = capture_tf(cnn_train(), base / "cnn_train", target="cnn_train")
    return out


def test_mlp_kernel_dtypes_equal_semantics_plan(runs):
    run = runs["mlp"]
    assert_kernels_follow_plan(run)
    kd = kernel_frame(run)
    # white MatMulV2 runs in fp16; the black ReduceMeanD of the LayerNorm decomposition in fp32
    assert set(kd.loc[kd["Type"] == "MatMulV2", "Output Data Types"]) == {"FLOAT16"}
    assert set(kd.loc[kd["Type"] == "ReduceMeanD", "Output Data Types"]) == {"FLOAT"}
    assert {"Add", "SoftmaxV2"} <= set(kd["Type"])  # GE names, not AddV2 / Softmax
    assert not {"AddV2", "Softmax", "Identity", "MatMul"} & set(kd["Type"])
    # a Dense layer's MatMul + BiasAdd is one MatMulV2 kernel for GE (MatMulBiasAddFusionPass, ascend910b)
    assert "BiasAdd" not in set(kd["Type"])
    assert json.loads((run / "run.json").read_text())["fusion"]["passes"]["MatMulBiasAddFusionPass"] >= 1


def test_cnn_training_kernel_dtypes_equal_semantics_plan(runs):
    run = runs["cnn_train"]
    assert_kernels_follow_plan(run)
    kd = kernel_frame(run)
    # filter_sizes = Shape(kernel) of a known shape: GE folds it into a Const (DimensionComputePass), and
    # ConstToAttrPass makes the Conv2DBackpropFilter a Conv2DBackpropFilterD before it judges (advisor.fusion)
    assert {"Conv2D", "MaxPool", "ReluGrad", "MaxPoolGrad", "Conv2DBackpropFilterD"} <= set(kd["Type"])
    assert set(kd.loc[kd["Type"] == "BiasAddGrad", "Output Data Types"]) == {"FLOAT"}  # black on 910b


def test_training_capture_dumps_loss_and_gradients_for_both_runs(runs):
    run = runs["cnn_train"]
    for which in ("fp32", "mixed"):
        d = json.loads((run / "dump" / which / "step0" / "rank0" / "dump.json").read_text())
        assert d["framework"] == "tensorflow"
        grads = [k for k in d["data"] if k.startswith("Grad.")]
        assert len(grads) == 6  # conv kernel/bias, BN gamma/beta, dense kernel/bias
        assert "Model.loss.0.forward" in d["data"]
        for k in grads:
            rec = d["data"][k]["output"][0]
            f = run / "dump" / which / "step0" / "rank0" / "dump_tensor_data" / rec["data_name"]
            arr = np.load(f, allow_pickle=False)
            assert list(arr.shape) == rec["shape"]
            assert np.isfinite(arr).all()


def test_dump_entries_match_graph_and_executed_dtypes(runs):
    run = runs["mlp"]
    g, p = planned(run)
    d = json.loads((run / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())["data"]
    ops = [n for n, a in g.nodes(data=True) if a.get("role") == "op"]
    assert {f"{n}.forward" for n in ops} <= set(d)
    # one entry per executed op: a fused kernel's members under the fused node's precision, except the values
    # that never leave the kernel (fp32, unrounded)
    of = {m: n for n in ops for m in g.nodes[n].get("members") or [n]}
    internal = {m for _, a in g.nodes(data=True) for m in a.get("internal") or ()}
    assert internal                                   # the Dense layers' MatMul + BiasAdd
    for m, n in of.items():
        out = d[f"{m}.forward"]["output"][0]
        if p[n] in FLOATS:
            assert normalize_dtype(out["dtype"]) == ("fp32" if m in internal else p[n]), m
    fp = json.loads((run / "dump" / "fp32" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert all(normalize_dtype(fp[f"{n}.forward"]["output"][0]["dtype"]) in ("fp32", "int32", "int64")
               for n in ops)


def test_local_error_rows_for_float_ops(runs):
    le = pd.read_csv(runs["mlp"] / "local_error.csv")
    kd = kernel_frame(runs["mlp"])
    g, _ = planned(runs["mlp"])
    members = {m for _, a in g.nodes(data=True) for m in a.get("members") or ()}
    assert set(le["name"]) <= set(kd["Name"]) | members        # one row per executed op, fused or not
    assert "MatMulV2" in set(le["type"])
    # an fp16 matmul of O(1) values has a small but non-zero local error
    mm = le[le["type"] == "MatMulV2"]
    assert (mm["local_rel_l2"] > 0).all() and (mm["local_rel_l2"] < 1e-2).all()


def _final(run: Path, which: str, step: int = 0) -> np.ndarray:
    base = run / "dump" / which / f"step{step}" / "rank0"
    rec = json.loads((base / "dump.json").read_text())["data"]["Model.output.0.forward"]["output"][0]
    return np.load(base / "dump_tensor_data" / rec["data_name"], allow_pickle=False).astype(np.float64)


def test_keras_hazard_blacklist_edit_fixes_and_follows_plan(tmp_path):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import keras_hazard
    finally:
        sys.path.remove(str(REPO / "examples"))
    bad = capture_tf(keras_hazard.workload(), tmp_path / "default", batches=1)
    assert not np.isfinite(_final(bad, "mixed")).all()
    ml = tmp_path / "ml.json"
    ml.write_text(json.dumps({"black-list": {"to-add": ["Exp"], "to-remove": []}}))
    good = capture_tf(keras_hazard.workload(), tmp_path / "fixed", mixlist=str(ml), batches=1)
    assert_kernels_follow_plan(good)
    kd = kernel_frame(good)
    # Exp and the gray ops after it (ReduceSumD, RealDiv) now run in fp32
    for t in ("Exp", "ReduceSumD", "RealDiv"):
        assert set(kd.loc[kd["Type"] == t, "Output Data Types"]) == {"FLOAT"}, t
    a, b = _final(good, "mixed"), _final(good, "fp32")
    assert np.isfinite(a).all()
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-2


def test_bf16_mode_runs_low_ops_in_bfloat16(tmp_path):
    run = capture_tf(mlp(), tmp_path / "bf16", mode="mixed_bfloat16", batches=1, dump="stats")
    assert_kernels_follow_plan(run)
    kd = kernel_frame(run)
    assert set(kd.loc[kd["Type"] == "MatMulV2", "Output Data Types"]) == {"DT_BF16"}
    d = json.loads((run / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())
    assert d["task"] == "statistics"
    # statistics only for ops, but the model output keeps its tensor file (finite-but-far-off check)
    assert all("data_name" not in r for k, e in d["data"].items() if k.endswith(".forward") and k != "Model.output.0.forward"
               for r in e["output"] if r)
    name = d["data"]["Model.output.0.forward"]["output"][0]["data_name"]
    assert (run / "dump" / "mixed" / "step0" / "rank0" / "dump_tensor_data" / name).is_file()


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "force_fp16", "allow_fp32_to_fp16", "mixed_float16"])
def test_every_mode_executes_the_plan_on_a_cnn(tmp_path, mode):
    def cnn():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.AveragePooling2D(2),
                              keras.layers.Flatten(), keras.layers.Dense(5, activation="sigmoid")])
        return m, [(np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype("float32"),)]
    run = capture_tf(cnn(), tmp_path / mode, mode=mode, dump="stats")
    assert_kernels_follow_plan(run)
    kd = kernel_frame(run)
    outs = set(";".join(kd["Output Data Types"]).split(";"))
    if mode == "must_keep_origin_dtype":
        assert "FLOAT16" not in outs
    elif mode == "force_fp16":
        assert "FLOAT" not in outs
    elif mode == "allow_fp32_to_fp16":
        # cube ops, and ops whose only AI Core kernel has no fp32 (AvgPool on 910b: fp16/int8), run fp16
        low = set(kd.loc[kd["Output Data Types"] == "FLOAT16", "Type"])
        lists = load_lists(json.loads((run / "run.json").read_text())["soc"])
        assert {"Conv2D", "MatMulV2"} <= low
        assert all(is_cube_type(t) or not lists.kernel(t).supports("fp32") for t in low)


@pytest.mark.slow
def test_cli_capture_of_a_subclassed_keras_model_is_a_tf_capture(tmp_path):
    # a user subclass of keras.Model has the user's module name: detection must use the class hierarchy
    target = tmp_path / "sub.py"
    target.write_text(
        "import numpy as np, keras\n"
        "class Net(keras.Model):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.d = keras.layers.Dense(3)\n"
        "    def call(self, x):\n"
        "        return keras.ops.exp(self.d(x))\n"
        "def workload():\n"
        "    keras.utils.set_random_seed(0)\n"
        "    return Net(), [(np.ones((2, 4), 'float32'),)]\n")
    from advisor.cli import main
    assert main(["capture", f"{target}:workload", "--out", str(tmp_path / "run")]) == 0
    run = tmp_path / "run"
    assert json.loads((run / "run.json").read_text())["framework"] == "tensorflow"
    assert {"MatMulV2", "Exp"} <= set(kernel_frame(run)["Type"])
    assert_kernels_follow_plan(run)


def test_dropout_masks_are_the_same_in_both_runs(runs):
    # random ops draw in fp32 in the mixed run too: the mixed training step stays close to FP32
    run = runs["cnn_train"]
    a, b = _final(run, "mixed"), _final(run, "fp32")
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-2
    kd = kernel_frame(run)
    assert "StatelessRandomUniformV2" in set(kd["Type"])


def test_out_folder_policy(tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("user file")
    run = capture_tf(mlp(), other, batches=1, dump="stats", local=False)   # a user's folder is kept as .bak
    assert (tmp_path / "mine.bak" / "notes.txt").read_text() == "user file" and (run / "run.json").is_file()
    run = capture_tf(mlp(), tmp_path / "run", batches=1, dump="stats", local=False)
    capture_tf(mlp(), tmp_path / "run", batches=1, dump="stats", local=False)
    assert (run / "run.json").is_file() and (tmp_path / "run.bak" / "run.json").is_file()
    assert not (run / "local_error.csv").exists()


def test_tf_module_training_with_fused_batch_norm_and_depthwise_conv(tmp_path):
    from advisor.workload import Workload

    class Net(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal((3, 3, 3, 4), seed=(1, 2)))
            self.g, self.b = tf.Variable(tf.ones(4)), tf.Variable(tf.zeros(4))

        def __call__(self, x):
            y = tf.nn.conv2d(x, self.w, 1, "SAME")
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(y, self.g, self.b, is_training=True)
            y = tf.nn.depthwise_conv2d(y, tf.ones((3, 3, 4, 1)), [1, 1, 1, 1], "SAME")
            return tf.nn.log_softmax(tf.reduce_mean(y, axis=[1, 2]))

    def loss_fn(out, batch):
        return -tf.reduce_mean(tf.gather(out, batch[1], batch_dims=1))
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype("float32")
    wl = Workload(Net(), [(x, np.array([1, 2]))], loss_fn, options={"inputs": 1})
    run = capture_tf(wl, tmp_path / "run", dump="stats")
    assert_kernels_follow_plan(run)
    kd = kernel_frame(run)
    bn = kd[kd["Type"] == "BNTrainingUpdate"].iloc[0]
    # T (x, y) in fp16, U (scale, offset, statistics) stays fp32, as the TF kernel and GE's BN ops take them
    assert bn["Input Data Types"].split(";")[:2] == ["FLOAT16", "FLOAT"]
    assert {"DepthwiseConv2D", "LogSoftmaxV2", "BNTrainingUpdateGrad", "Conv2DBackpropFilterD"} <= set(kd["Type"])
    assert set(kd.loc[kd["Type"] == "LogSoftmaxV2", "Output Data Types"]) == {"FLOAT"}  # black on 910b
