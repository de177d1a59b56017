"""Keras CNN training step (Conv2D, BatchNormalization, MaxPooling, Dropout, Dense) with a
sparse-softmax cross-entropy loss: a TensorFlow **training control** for `advisor capture` /
`advisor tune` (forward + backward are captured; gradients dumped as ``Grad.<variable path>``).

Under mixed_float16 and the ascend910b lists the white Conv2D/MatMulV2 (and their backprop ops) run
in fp16, BatchNormalization's statistics (``ReduceMeanD``, black) and the bias gradients
(``BiasAddGrad``, black) in fp32; the loss and gradients stay within tolerance: no edit expected.
Needs the ``[tf]`` extra.

    advisor tune examples/keras_train.py:workload --out out/keras_train
"""
from __future__ import annotations

import numpy as np


def workload():
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(5),
    ])

    def loss_fn(logits, batch):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(batch[1], logits))

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 12, 12, 3)).astype("float32"), rng.integers(0, 5, (8,)))
               for _ in range(3)]
    return model, batches, loss_fn
