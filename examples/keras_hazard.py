"""Keras MLP with a custom exp-normalised gate layer whose pre-activations exceed 11: exp overflows
fp16 (max 65504) under the default mixed_float16 lists, inf / inf gives NaN.

GE types (TF adapter): Dense -> ``MatMulV2`` (white) + ``BiasAdd``; the gate -> ``Exp`` (gray),
``ReduceSumD`` (gray on ascend910b: the axis is a constant), ``RealDiv`` (gray).  Exp inherits fp16
from the white MatMulV2 -> overflow.  Expected single edit: black-list ``Exp`` (ReduceSumD and
RealDiv then follow it in fp32).  Needs the ``[tf]`` extra (tensorflow-cpu).

    advisor capture examples/keras_hazard.py:workload --out runs/keras_hazard
    advisor tune examples/keras_hazard.py:workload --out out/keras_hazard
"""
from __future__ import annotations

import numpy as np


def workload():
    import keras
    import tensorflow as tf

    class ExpGate(keras.layers.Layer):
        """exp(x) / sum(exp(x)) written by hand (no max subtraction, as in many custom layers)."""

        def call(self, x):
            e = tf.exp(x)
            return e / tf.reduce_sum(e, axis=-1, keepdims=True)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, bias_initializer=keras.initializers.Constant(12.0), name="fc1"),
        ExpGate(name="gate"),
        keras.layers.Dense(8, name="fc2"),
    ])
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((16, 32)).astype("float32"),) for _ in range(4)]
    return model, batches


def control():
    """The same model without the hazard (bias 0): a clean control, no edit expected."""
    import keras

    model, batches = workload()
    fc1 = model.get_layer("fc1")
    fc1.bias.assign(np.zeros(fc1.bias.shape, "float32"))
    _ = keras
    return model, batches
