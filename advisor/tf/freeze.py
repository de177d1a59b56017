"""A TF/Keras workload -> one frozen GraphDef per capture (variables folded into constants).

Inference: ``fn(*inputs)`` (Keras models are called with ``training=False``).  Training (the
workload has a ``loss_fn``): one step ``out = model(*inputs, training=True); loss = loss_fn(out,
batch); grads = d loss / d trainable variables`` traced into the same graph, so the forward and the
backward ops (ReluGrad, BiasAddGrad, Conv2DBackprop*, MaxPoolGrad, ...) are all in the op graph.
Variable updates (BatchNormalization moving statistics, RNG seed counters) are dropped: a capture
records one step at fixed weights.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InputError
from . import one_line, require_tf

_STATEFUL_DROP = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "Assign", "AssignAdd",
                  "AssignSub", "NoOp")


_CONTROL_FLOW = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
                           "PartitionedCall", "StatefulPartitionedCall", "Enter", "Exit", "Switch", "Merge",
                           "NextIteration", "LoopCond"})


@dataclass
class Frozen:
    graph_def: Any                      # tf.compat.v1.GraphDef
    inputs: list[str]                   # placeholder tensor names, batch element order ("x:0")
    input_indices: list[int]            # which element of a batch feeds each placeholder
    outputs: list[str]                  # model output tensor names (flattened structure)
    loss: str | None = None             # training: the loss tensor
    grads: list[tuple[str, str]] = field(default_factory=list)  # training: (parameter name, tensor)
    training: bool = False
    # training over steps (``freeze(steps=True)``): the loss-scale input the backward starts from (``loss * S``) and
    # (parameter name, the Const node its variable was folded into) -- fed each step with the run's current weights
    loss_scale: str | None = None
    weights: list[tuple[str, str]] = field(default_factory=list)


def quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _is_keras_model(obj: Any) -> bool:
    return any(c.__name__ in ("Model", "Layer") and (c.__module__ or "").startswith(("keras", "tf_keras"))
               for c in type(obj).__mro__)


def n_model_inputs(model: Any, batch_len: int, options: dict, training: bool = False) -> int:
    """How many leading batch elements are model inputs: ``options['inputs']``, else a built Keras
    functional/Sequential model's input count, else (training a subclassed Keras model) all but the
    last (the labels), else all of them (``model(*batch)``)."""
    n = options.get("inputs")
    if isinstance(n, int) and 1 <= n <= batch_len:
        return n
    if _is_keras_model(model):
        declared = _declared_inputs(model)
        if declared is not None:
            return min(declared, batch_len)
        if training and batch_len > 1:
            return batch_len - 1  # Keras convention: (x..., y); the loss_fn reads y from the batch
    return batch_len


def input_specs(tf, batches: Sequence[tuple]) -> list:
    """One TensorSpec per batch element: the shape shared by all batches (differing dims -> None)."""
    first = batches[0]
    specs = []
    for i, x in enumerate(first):
        a = np.asarray(x)
        shape = list(a.shape)
        for b in batches[1:]:
            if len(b) != len(first):
                raise InputError(None, "all batches must have the same number of elements")
            s = np.asarray(b[i]).shape
            if len(s) != len(shape):
                raise InputError(None, f"batch element {i} changes rank between batches")
            shape = [d if d == e else None for d, e in zip(shape, s)]
        dtype = tf.as_dtype(a.dtype) if a.dtype != np.float64 else tf.float32
        specs.append(tf.TensorSpec(shape, dtype, name=f"input_{i}"))
    return specs


def to_feed(batch: tuple) -> list[np.ndarray]:
    out = []
    for x in batch:
        a = np.asarray(x)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        out.append(a)
    return out


def _call(model: Any, xs: Sequence, training: bool):
    if _is_keras_model(model):
        n_declared = _declared_inputs(model)
        if n_declared is not None and n_declared > 1:
            return model(list(xs), training=training)  # functional multi-input models take a list
        return model(*xs, training=training)
    return model(*xs)


def _declared_inputs(model: Any) -> int | None:
    try:
        ins = model.inputs
    except Exception:  # noqa: BLE001 - subclassed models have no .inputs
        return None
    return len(ins) if ins else None


def _param_name(v: Any, i: int) -> str:
    for attr in ("path", "name"):
        n = getattr(v, attr, None)
        if isinstance(n, str) and n:
            return n.split(":")[0]
    return f"param_{i}"


def _trainable(model: Any) -> list:
    vs = getattr(model, "trainable_variables", None)
    if vs is None:
        raise InputError(None, "a training capture (loss_fn given) needs a model with trainable_variables "
                               "(a Keras model or tf.Module)")
    return list(vs)


def freeze(model: Any, batches: Sequence[tuple], loss_fn: Callable | None = None,
           options: dict | None = None, steps: bool = False) -> Frozen:
    """Trace the workload once and fold its variables into constants.  ``steps`` (training over optimizer steps):
    the backward starts from ``loss * S`` with S a scalar input (the scaled loss of a loss-scale optimizer:
    tf.keras ``get_scaled_loss``), and ``Frozen.weights`` names the constant each trainable variable became."""
    quiet_tf()
    tf = require_tf()
    from tensorflow.python.framework import convert_to_constants as c2c  # noqa: PLC0415

    options = options or {}
    specs = input_specs(tf, batches)
    training = loss_fn is not None
    n_in = n_model_inputs(model, len(specs), options, training)
    if training and _is_keras_model(model) and not getattr(model, "built", True):
        _call(model, [tf.convert_to_tensor(x) for x in to_feed(batches[0])[:n_in]], False)  # create the weights
    params = _trainable(model) if training else []
    if training and not params:
        raise InputError(None, "a training capture (loss_fn given) needs trainable variables; the model has none")

    if training:
        def step(*xs):
            scale = xs[-1] if steps else None
            xs = xs[:-1] if steps else xs
            with tf.GradientTape() as tape:
                out = _call(model, xs[:n_in], True)
                loss = loss_fn(out, xs)
                scaled = loss * tf.cast(scale, loss.dtype) if steps else loss
            grads = tape.gradient(scaled, params)
            return {"output": out, "loss": tf.cast(tf.reduce_sum(loss), tf.float32) if loss.shape.rank else loss,
                    "grads": [tf.zeros_like(p) if g is None else tf.convert_to_tensor(g) for g, p in zip(grads, params)]}
        used = specs + ([tf.TensorSpec([], tf.float32, name="loss_scale")] if steps else [])
    else:
        def step(*xs):
            return {"output": _call(model, xs, False)}
        used = specs[:n_in]

    if hasattr(model, "get_concrete_function") and not training and not _is_keras_model(model):
        fn = tf.function(lambda *xs: {"output": model(*xs)})
    else:
        fn = tf.function(step)
    try:
        cf = fn.get_concrete_function(*used)
    except InputError:
        raise
    except Exception as e:  # user model code: one line
        hint = ""
        if isinstance(e, TypeError) and training:
            hint = (" (the model is called as model(*batch); when batches carry labels, return "
                    "advisor.Workload(model, batches, loss_fn, options={'inputs': N}))")
        raise InputError(None, f"tracing the TensorFlow model failed: {one_line(e)}{hint}") from None

    n_user = len(used) - (1 if steps and training else 0)
    try:
        data = c2c._FunctionConverterDataInEager(func=cf, lower_control_flow=False, aggressive_inlining=True)
        gd, _ = c2c._replace_variables_by_constants(converter_data=data)
    except Exception:  # private API moved: the public converter (inference graphs)
        frozen = c2c.convert_variables_to_constants_v2(cf)
        gd = frozen.graph.as_graph_def()
    gd = _strip_state(tf, gd)
    flow = sorted({n.op for n in gd.node if n.op in _CONTROL_FLOW or n.op.startswith("TensorList")})
    if flow:
        raise InputError(None, "the TensorFlow graph has control flow or function calls ("
                               + ", ".join(flow) + "), which the TF emulator does not rewrite: unroll loops "
                               "(e.g. keras RNN layers with unroll=True) or capture the loop body as the model")

    flat = tf.nest.flatten(cf.structured_outputs, expand_composites=True)
    names = [t.name for t in flat]
    out_struct = cf.structured_outputs
    n_out = len(tf.nest.flatten(out_struct["output"], expand_composites=True))
    fr = Frozen(gd, [t.name for t in cf.inputs[:n_user]], list(range(n_user)), names[:n_out], training=training)
    if training:
        # flatten order of a dict is sorted by key: grads, loss, output
        n_g = len(params)
        fr.grads = [(_param_name(p, i), names[i]) for i, p in enumerate(params)]
        fr.loss = names[n_g]
        fr.outputs = names[n_g + 1:]
        if steps:
            fr.loss_scale = cf.inputs[n_user].name
            fr.weights = _weight_consts(cf, params)
    return fr


def _weight_consts(cf: Any, params: list) -> list[tuple[str, str]]:
    """(parameter name, node name) of every trainable variable the traced function captured: freezing turns the
    capture's placeholder into a Const of the same name."""
    out = []
    for ext, inner in cf.graph.captures:
        for i, p in enumerate(params):
            h = getattr(getattr(p, "value", p), "handle", None)
            if h is ext:
                out.append((_param_name(p, i), inner.name.split(":")[0]))
    return out


def _strip_state(tf, gd):
    """Drop variable updates and control edges (meaningless once weights are constants) and keep only
    what the fetched outputs need."""
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(gd.versions)
    out.library.CopyFrom(gd.library)
    for n in gd.node:
        if n.op in _STATEFUL_DROP:
            continue
        m = out.node.add()
        m.CopyFrom(n)
        del m.input[:]
        m.input.extend(i for i in n.input if not i.startswith("^"))
    return out
