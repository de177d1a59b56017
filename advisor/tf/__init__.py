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

from ..errors import InputError

# what a TensorFlow workload is (no TensorFlow import needed) is part of the workload contract
from ..workload import INSTALL_HINT, is_missing_tf_error, is_tf_model as is_tf_object  # noqa: E402


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
