"""Keras workloads trained over optimizer steps (advisor.tf.train): a healthy run, and one whose first layer's
weights grow until its fp16 output overflows at a known step.  TARGETs for tests (``tests/keras_steps_models.py:...``);
each builds its model from a fixed seed, so every call returns the same workload."""
from __future__ import annotations

import numpy as np

from advisor.workload import Workload

GROWTH = 0.08            # the mis-signed weight decay: the first layer's weights grow 8 % per step
FP16_MAX = 65504.0


def _batches(n: int, d_in: int = 16, classes: int = 4, rows: int = 16) -> list:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        x = rng.standard_normal((rows, d_in)).astype("float32")
        out.append((x, x[:, :classes].argmax(1).astype("int32")))    # a learnable rule
    return out


def healthy(steps: int = 12) -> Workload:
    """A compiled MLP (Adam, sparse cross-entropy) that trains well in fp16: no departure, no advice."""
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return Workload(model, _batches(3), name="keras_healthy", steps=steps, dump_every=4)


def _sign_bug_sgd():
    import keras

    class SignBugSGD(keras.optimizers.SGD):
        """SGD whose weight decay on the first ``grown`` variables has the wrong sign: they grow by (1 + growth)."""

        def __init__(self, grown: int = 2, growth: float = GROWTH, **kw):
            super().__init__(**kw)
            self.grown, self.growth = grown, growth

        def update_step(self, gradient, variable, learning_rate):
            super().update_step(gradient, variable, learning_rate)
            if self._get_variable_index(variable) < self.grown:
                variable.assign(variable * (1.0 + self.growth))

        def get_config(self):
            return {**super().get_config(), "grown": self.grown, "growth": self.growth}
    return SignBugSGD


def growing(overflow_step: int = 6, steps: int = 14, scaler: str | None = None) -> Workload:
    """Dense -> x / max|x| -> Dense -> Dense, the first Dense's weights growing 8 % per step (the optimizer's bug):
    its output passes fp16's 65504 at about ``overflow_step`` while the normalization keeps the FP32 loss normal (no
    square on the way, so nothing else overflows first)."""
    import keras
    from keras import ops
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32),
                              keras.layers.Lambda(lambda x: x / ops.max(ops.abs(x), axis=-1, keepdims=True)),
                              keras.layers.Activation("relu"), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(4)])
    batches = _batches(3)
    k, b = model.layers[0].kernel, model.layers[0].bias
    a0 = max(float(np.abs(x @ k.numpy() + b.numpy()).max()) for x, _ in batches)
    c = FP16_MAX / (1.0 + GROWTH) ** (overflow_step + 0.5) / a0
    k.assign(k.numpy() * c)
    b.assign(b.numpy() * c)
    model.compile(optimizer=_sign_bug_sgd()(learning_rate=0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return Workload(model, batches, name="keras_growing", steps=steps, dump_every=4, scaler=scaler)


def growing_target() -> Workload:
    return growing()
