"""Cost of Keras training over steps in the TF emulator: steps/s of ``advisor.emulator.capture`` on a compiled Keras
model given ``steps`` (``advisor.tf.train``: the FP32 and the mixed run both trained with the model's own optimizer,
the NpuLossScaleOptimizer scaler, per-step records, dumps every K steps) against Keras's own training of the same
model -- ``train_on_batch`` (its compiled train step, as ``model.fit`` runs it) and ``run_eagerly=True`` -- and the
run directory's size; the last figures dump only the first and the last step (the per-step cost alone).

    python bench/keras_train_steps.py [--steps 200] [--advice]

``--advice``: recommend's re-runs on the generated growing-activation case (tests/keras_steps_models.py, departure at
step 8 of 14), with and without the FP32 run reused across them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.emulator import capture  # noqa: E402
from advisor.workload import Workload  # noqa: E402


def _mlp():
    import keras
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    m.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    return m, [(rng.standard_normal((32, 64)).astype("float32"), rng.integers(0, 10, (32,)).astype("int32"))
               for _ in range(8)]


def _cnn():
    import keras
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                          keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                          keras.layers.Dense(10)])
    m.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    return m, [(rng.standard_normal((16, 16, 16, 3)).astype("float32"), rng.integers(0, 10, (16,)).astype("int32"))
               for _ in range(8)]


MODELS = {"Keras MLP 64-256-256-10 b32, SGD": _mlp, "Keras CNN conv16-BN-pool-dense b16, Adam": _cnn}


def keras_steps_per_s(build, steps: int, eagerly: bool) -> float:
    import keras
    model, batches = build()
    if eagerly:
        model.compile(optimizer=model.optimizer, loss=model.loss, run_eagerly=True)
    for s in range(2):                                # Keras traces its train step on the first call
        model.train_on_batch(*batches[s])
    t = time.perf_counter()
    for s in range(steps):
        model.train_on_batch(*batches[s % len(batches)])
    dt = time.perf_counter() - t
    keras.backend.clear_session()
    return steps / dt


def emulated(build, steps: int, local: bool, dump_every: int | None = None) -> tuple[float, float]:
    model, batches = build()
    out = Path(tempfile.mkdtemp(prefix="advisor_keras_bench_")) / "run"
    t = time.perf_counter()
    capture(Workload(model, batches, steps=steps, dump_every=dump_every), out, mode="mixed_float16", local=local)
    dt = time.perf_counter() - t
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2 ** 20
    shutil.rmtree(out.parent, ignore_errors=True)
    return steps / dt, size


def advice_cost() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import keras_steps_models as K
    from advisor.recommend import recommend_steps
    out = Path(tempfile.mkdtemp(prefix="advisor_keras_bench_")) / "run"
    capture(K.growing(), out, mode="mixed_float16")
    for reuse in (False, True, False, True):
        t = time.perf_counter()
        rec = recommend_steps(out, workload=K.growing, reuse_fp32=reuse)
        dt = time.perf_counter() - t
        tr = rec.training
        print(f"recommend, FP32 run {'reused' if reuse else 'not reused'}: {dt:5.1f} s, {tr.reruns} re-runs x "
              f"{tr.horizon} steps ({tr.reruns * tr.horizon / dt:5.1f} re-run steps/s), FP32 steps reused "
              f"{tr.fp32_reused_steps}, chosen {tr.chosen}")
    shutil.rmtree(out.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--advice", action="store_true", help="also measure recommend's re-runs with and without reuse")
    a = ap.parse_args(argv)
    import tensorflow as tf
    print(f"tensorflow {tf.__version__}, {a.steps} steps, dumps every {max(1, -(-a.steps // 10))} steps (the default)")
    for label, build in MODELS.items():
        fit = keras_steps_per_s(build, a.steps, eagerly=False)
        eager = keras_steps_per_s(build, a.steps, eagerly=True)
        fast, size = emulated(build, a.steps, local=False)
        full, _ = emulated(build, a.steps, local=True)
        bare, bare_size = emulated(build, a.steps, local=False, dump_every=a.steps)
        print(f"{label:42s} train_on_batch {fit:6.1f} steps/s, run_eagerly {eager:6.1f} | emulated {fast:5.1f} steps/s "
              f"({fit / fast:4.1f}x train_on_batch, {eager / fast:4.1f}x eager), with local errors {full:5.1f} | run "
              f"dir {size:5.1f} MiB | dumps at the first and last step only {bare:5.1f} steps/s "
              f"({fit / bare:4.1f}x), {bare_size:5.1f} MiB")
    if a.advice:
        advice_cost()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
