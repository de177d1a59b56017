"""TF capture overhead: plain graph forward vs the emulator's FP32 / mixed session runs (all tensors
fetched) and a whole capture, on a Keras MLP and a Keras transformer encoder block (d=256, seq 128,
batch 8).  Prints figures; asserts nothing.  Needs the [tf] extra.

    python bench/tf_capture.py
"""
from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402


def mlp():
    import keras
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
    return m, [(np.random.default_rng(0).standard_normal((64, 512)).astype("float32"),)]


def encoder(d=256, seq=128, batch=8):
    import keras
    keras.utils.set_random_seed(0)
    x_in = keras.Input((seq, d))
    a = keras.layers.MultiHeadAttention(4, d // 4)(x_in, x_in)
    x = keras.layers.LayerNormalization()(x_in + a)
    f = keras.layers.Dense(4 * d, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(d)(f))
    return keras.Model(x_in, x), [(np.random.default_rng(0).standard_normal((batch, seq, d)).astype("float32"),)]


def best(fn, n=5):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    import tensorflow as tf

    from advisor import semantics
    from advisor.oplists import load_lists
    from advisor.tf.capture import Session, capture_tf
    from advisor.tf.freeze import freeze
    from advisor.tf.graph import build, prune, split_tensor
    from advisor.tf.rewrite import apply_plan

    for name, make in (("keras MLP 512-1024-1024-10, batch 64", mlp), ("keras encoder d=256 seq=128 batch=8", encoder)):
        model, batches = make()
        x = batches[0][0]
        f = tf.function(lambda t: model(t, training=False))
        f(x)
        t_plain = best(lambda: f(x).numpy())
        fr = freeze(model, batches)
        gd = prune(fr.graph_def, [split_tensor(t)[0] for t in fr.outputs + fr.inputs])
        g, info = build(tf, gd)
        p = semantics.plan(g, load_lists("ascend910b"), "mixed_float16")
        rw = apply_plan(tf, gd, info, p.precision, "fp16", g)
        keys = [(n, k) for n in info.order for k in range(len(info.out_dtypes[n])) if g.nodes[n]["role"] != "const"]
        s32, smx = Session(tf, gd), Session(tf, rw.graph_def)
        feed = {fr.inputs[0]: x}
        f32 = [f"{n}:{k}" for n, k in keys]
        fmx = [rw.tensor.get(k, f"{k[0]}:{k[1]}") for k in keys]
        s32.run(f32, feed)
        smx.run(fmx, feed)
        t32 = best(lambda: s32.run(f32, feed))
        tmx = best(lambda: smx.run(fmx, feed))
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            capture_tf((model, batches), os.path.join(d, "stats"), dump="stats")
            t_cap = time.perf_counter() - t
            t = time.perf_counter()
            capture_tf((model, batches), os.path.join(d, "tensors"), dump="tensors")
            t_cap_t = time.perf_counter() - t
        n_ops = sum(1 for n in g if g.nodes[n]["role"] == "op")
        print(f"{name}: {n_ops} ops")
        print(f"  plain tf.function forward      {1e3 * t_plain:8.2f} ms")
        print(f"  FP32 session, all tensors      {1e3 * t32:8.2f} ms  ({t32 / t_plain:.1f}x)")
        print(f"  mixed session, all tensors     {1e3 * tmx:8.2f} ms  ({tmx / t_plain:.1f}x)")
        print(f"  whole capture, 1 batch, stats  {t_cap:8.2f} s")
        print(f"  whole capture, 1 batch, tensors{t_cap_t:8.2f} s")
        s32.close()
        smx.close()


if __name__ == "__main__":
    main()
