"""TensorFlow / Keras workloads: capture, emulate and tune them like the Ascend TF adapter runs them.

Importing this package never imports TensorFlow; the submodules that need it import it lazily
(``advisor.tf.capture.capture_tf``) and turn a missing installation into one clear line
(:func:`require_tf`).  Layout:

* ``opmap``       TF op type -> GE op type table and node roles (pure data);
* ``freeze``      workload -> frozen GraphDef (variables folded into constants), training step;
* ``graph``       frozen GraphDef -> advisor op graph (graph.py conventions);
* ``rewrite``     apply a semantics plan to the GraphDef (low ops in DT_HALF/DT_BFLOAT16, Casts);
* ``capture``     ``capture_tf``: run both graphs, write the run directory;
* ``npu_config``  TF1 session-config helper for the real Ascend TF adapter.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError

INSTALL_HINT = ("this is a TensorFlow/Keras workload: install the TensorFlow extra with "
                "`pip install 'advisor[tf]'` (tensorflow-cpu) and run the same command again")

_TF_MODULE_PREFIXES = ("tensorflow", "keras", "tf_keras")


def is_tf_object(obj: Any) -> bool:
    """True for Keras models/layers, tf.Module, tf.function and concrete functions (decided from the
    class's module, without importing TensorFlow)."""
    for cls in type(obj).__mro__:
        mod = getattr(cls, "__module__", "") or ""
        if mod.startswith(_TF_MODULE_PREFIXES):
            return True
    return False


def is_missing_tf_error(exc: BaseException) -> bool:
    """True when ``exc`` is an ImportError for TensorFlow or Keras (a TF workload without the extra)."""
    if not isinstance(exc, ImportError):
        return False
    name = getattr(exc, "name", None) or ""
    return name.split(".")[0] in _TF_MODULE_PREFIXES


def require_tf(path: object = None):
    """Import and return ``tensorflow``, or raise InputError with the one-line install hint."""
    try:
        import tensorflow as tf  # noqa: PLC0415 - lazy by design
    except ImportError:
        raise InputError(path, INSTALL_HINT) from None
    return tf


_GENERIC = ("Graph execution error:", "in user code:", "File \"", "Detected at node", "[[{{node", "[[", "Traceback")


def one_line(e: BaseException, limit: int = 300) -> str:
    """``Type: message`` of a TensorFlow/user error on one line: TF messages span many lines
    ("in user code:", source frames, "Graph execution error:"); keep the most specific one."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(_GENERIC)]
    msg = (useful or lines or [""])[-1]
    if not msg.startswith(e.__class__.__name__) and not msg.split(":")[0].endswith(("Error", "Exception")):
        msg = f"{e.__class__.__name__}: {msg}"
    return msg[:limit]
