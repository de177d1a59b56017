"""Keras training over optimizer steps (advisor.tf.train): the FP32 run is Keras's own training, an overflow that
appears after some steps is found at its step and fixed by a confirmed edit, a healthy run gets no advice, and the
scale follows the scaler's rule."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from advisor.compare.steps import judge_steps  # noqa: E402
from advisor.compare.tolerance import Tolerance  # noqa: E402
from advisor.emulator import capture  # noqa: E402
from advisor.errors import InputError  # noqa: E402
from advisor.ingest.steps import read_steps  # noqa: E402
from advisor.mixlist import parse_obj  # noqa: E402
from advisor.recommend import recommend_steps  # noqa: E402
from advisor.scalers import make_scaler, scale_sequence  # noqa: E402
from advisor.workload import Workload  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import keras_steps_models as K  # noqa: E402

pytestmark = pytest.mark.tf


def _steps(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "train" / "steps.jsonl").read_text().splitlines()]


def _mlp(optimizer):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    m.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _data(n=3):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((8, 6)).astype("float32"), rng.integers(0, 3, (8,)).astype("int32"))
            for _ in range(n)]


@pytest.mark.parametrize("make_opt", [lambda: keras.optimizers.Adam(0.01),
                                      lambda: keras.optimizers.SGD(0.2, momentum=0.9, global_clipnorm=0.05),
                                      lambda: keras.optimizers.RMSprop(0.01, clipnorm=0.1)],
                         ids=["adam", "sgd-global-clipnorm", "rmsprop-clipnorm"])
def test_fp32_run_is_keras_train_on_batch(tmp_path, make_opt):
    """Oracle: Keras's own training (train_on_batch on a copy of the same compiled model, same data order).  The FP32
    run's loss at every step is the one train_on_batch reports, so every update in between was Keras's."""
    batches, n = _data(), 10
    model = _mlp(make_opt())
    w0 = [w.copy() for w in model.get_weights()]
    run = capture(Workload(model, batches, steps=n, dump_every=5), tmp_path / "r", mode="mixed_float16")
    got = [r["loss_fp32"] for r in _steps(run)]
    assert [w for w in model.get_weights()] and all(np.array_equal(a, b) for a, b in zip(model.get_weights(), w0))
    ref = _mlp(make_opt())
    ref.set_weights(w0)
    want = [float(ref.train_on_batch(*batches[s % len(batches)])) for s in range(n)]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert len(set(np.round(want, 4))) > 3           # the weights did move
    meta = json.loads((run / "run.json").read_text())
    assert meta["train"]["dumped_steps"] == [0, 5, 9] and meta["train"]["scaler"]["name"] == "tf_keras"
    assert (run / "dump" / "mixed" / "step5" / "rank0" / "dump.json").is_file()


def test_explicit_optimizer_and_loss_match_a_gradient_tape_loop(tmp_path):
    """``Workload(optimizer=lambda variables: ..., loss_fn=...)``: the FP32 run equals a plain eager GradientTape loop
    with the same Keras optimizer."""
    batches, n = _data(2), 6
    model = _mlp("sgd")
    w0 = [w.copy() for w in model.get_weights()]

    def loss_fn(out, b):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(b[1], out))
    run = capture(Workload(model, batches, loss_fn, optimizer=lambda vs: keras.optimizers.SGD(0.5), steps=n,
                           scaler="none"), tmp_path / "r")
    ref = _mlp("sgd")
    ref.set_weights(w0)
    opt, want = keras.optimizers.SGD(0.5), []
    for s in range(n):
        x, y = batches[s % 2]
        with tf.GradientTape() as tape:
            loss = loss_fn(ref(x, training=True), (x, y))
        opt.apply_gradients(zip(tape.gradient(loss, ref.trainable_variables), ref.trainable_variables))
        want.append(float(loss))
    np.testing.assert_allclose([r["loss_fp32"] for r in _steps(run)], want, rtol=2e-5, atol=1e-6)
    assert all(r["scale"] == 1.0 and not r["skipped"] for r in _steps(run))


def _fp16_overflow_step(wl: Workload) -> int:
    """Oracle for the growing case: train a copy with Keras's own train_on_batch and return the first step whose first
    Dense output, computed as the fp16 cube unit does (fp16 inputs and weights, fp32 accumulation), passes 65504."""
    ref = K.growing().model
    ref.set_weights(wl.model.get_weights())
    for s in range(wl.steps):
        x, y = wl.batches[s % len(wl.batches)]
        k, b = ref.layers[0].kernel.numpy(), ref.layers[0].bias.numpy()
        h = x.astype(np.float16).astype(np.float32) @ k.astype(np.float16).astype(np.float32)
        if np.abs(h + b.astype(np.float16)).max() > K.FP16_MAX:
            return s
        ref.train_on_batch(x, y)
    return -1


@pytest.mark.slow
def test_growing_activations_found_at_their_step_and_fixed(tmp_path):
    """Weights grow until the first Dense overflows fp16 at step k (an independent Keras run says which): compare
    departs at k, led by that Dense's kernel; the advice re-runs the steps, and a fresh capture with it confirms."""
    wl = K.growing()
    k = _fp16_overflow_step(K.growing())
    assert 3 <= k < wl.steps - 2
    run = capture(wl, tmp_path / "run", mode="mixed_float16")
    v = judge_steps(read_steps(run), Tolerance())
    assert v.departure is not None and v.departure.step == k and v.departure.reason == "non-finite"
    assert v.departure.op_type == "MatMulV2" and v.departure.phase == "fwd" and v.departure.precision
    rows = _steps(run)
    assert not any(r["overflow"] for r in rows[:k]) and rows[k]["overflow"] and rows[k]["skipped"]
    rec = recommend_steps(run, Tolerance(), workload=K.growing)
    assert rec.status == "recommended", rec.notes
    s = rec.training.settings
    assert s["mode"] == "mixed_bfloat16" or "MatMulV2" in s["black_add"]
    cw = K.growing()
    cw.scaler, cw.scaler_options, cw.clip_grad_norm = s["scaler"], s["scaler_options"], s["clip_grad_norm"]
    ml = rec.modify_mixlist if not rec.modify_mixlist.is_empty() else None
    conf = capture(cw, tmp_path / "confirm", mode=s["mode"], mixlist=ml)
    assert judge_steps(read_steps(conf), Tolerance()).departure is None
    # the fp32-type edit alone, re-captured: no departure either (the op that leads there is the one to keep)
    fixed = capture(K.growing(), tmp_path / "fp32", mode="mixed_float16",
                    mixlist=parse_obj({"black-list": {"to-add": ["MatMulV2"]}}, "test"))
    assert judge_steps(read_steps(fixed), Tolerance()).departure is None


def test_healthy_run_gets_no_advice(tmp_path):
    run = capture(K.healthy(), tmp_path / "run", mode="mixed_float16")
    rec = recommend_steps(run, Tolerance(), workload=K.healthy)
    assert rec.status == "no-change-needed" and rec.training.departure is None
    assert not any(r["overflow"] for r in _steps(run))


@pytest.mark.parametrize("scaler,options", [("tf_keras", {"dynamic_growth_steps": 3}),
                                            ("tf1", {"init_loss_scale": 2.0 ** 20, "incr_every_n_steps": 2}),
                                            ("keras", {"initial_scale": 2.0 ** 17, "dynamic_growth_steps": 4})])
def test_scale_follows_the_scaler_rule(tmp_path, scaler, options):
    """The run's scale, skips and next scales are the scaler's rule (advisor.scalers, tested against its source) on
    the run's own overflow sequence; on the growing case the scale both grows and backs off."""
    wl = K.growing(overflow_step=4, steps=12, scaler=scaler)
    wl.scaler_options = options
    rows = _steps(capture(wl, tmp_path / "r", mode="mixed_float16", local=False))
    want = scale_sequence(make_scaler(scaler, options), [r["overflow"] for r in rows])
    assert [(r["scale"], r["skipped"], r["next_scale"]) for r in rows] == \
        [(w.scale, w.skipped, w.next_scale) for w in want]
    assert any(r["overflow"] for r in rows) and any(not r["overflow"] for r in rows)
    assert all(r["n_anomalies"] > 0 for r in rows if r["overflow"])     # an overflowing step names its ops


def test_torch_scaler_refused_for_keras(tmp_path):
    wl = K.healthy()
    wl.scaler = "torch_npu"
    with pytest.raises(InputError, match="PyTorch one"):
        capture(wl, tmp_path / "r")


@pytest.mark.slow
def test_tune_confirms_a_keras_training_case(tmp_path):
    """advisor tune on a Keras workload trained over steps: the first run departs, the advice is confirmed over the N
    steps on the held-out batch (a fresh capture), and the confirmed settings are written."""
    from advisor.tune.training import tune_training
    target = f"{Path(__file__).resolve().parent / 'keras_steps_models.py'}:growing_target"
    doc = tune_training(target, tmp_path / "t")
    assert doc["first_run"]["departure"]["step"] >= 3 and doc["recommendation"] == "recommended"
    assert doc["confirmed"] and doc["confirmation"]["on"] == "held-out batches", doc.get("reason")
    assert (tmp_path / "t" / "report.html").is_file() and (tmp_path / "t" / "training_settings.py").is_file()


@pytest.mark.slow
def test_saturation_chip_scale_spiral_fixed_by_keeping_the_op_in_fp32(tmp_path):
    """ascend910 (saturation mode, no bf16): the overflowing Dense saturates instead of turning Inf, the
    NpuLossScaleOptimizer reads the float-status flag and skips every step from k on while the scale halves -- a
    spiral one op causes.  The advice keeps that op's type in fp32 (not a bigger or static scale, and no bf16 on this
    chip), and a fresh capture with it does not depart."""
    k = _fp16_overflow_step(K.growing())
    run = capture(K.growing(), tmp_path / "run", mode="mixed_float16", soc="ascend910")
    rows = _steps(run)
    assert all(r["loss_mixed"] is not None for r in rows)           # saturated, never non-finite
    v = judge_steps(read_steps(run), Tolerance())
    assert v.departure.step == k and v.departure.reason == "skipped" and v.departure.op_type == "MatMulV2"
    assert rows[-1]["next_scale"] < rows[k]["scale"] / 8
    rec = recommend_steps(run, Tolerance(), workload=K.growing)
    assert rec.status == "recommended" and rec.training.settings["black_add"] == ["MatMulV2"]
    assert rec.training.settings["mode"] == "mixed_float16"
    assert not any(c.kinds == ["low-dtype"] for c in rec.training.candidates)
    conf = capture(K.growing(), tmp_path / "confirm", mode="mixed_float16", soc="ascend910",
                   mixlist=rec.modify_mixlist)
    assert judge_steps(read_steps(conf), Tolerance()).departure is None
