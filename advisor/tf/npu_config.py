"""TF1 glue for the real Ascend TF adapter (npu_bridge): the session config / NPURunConfig settings that
apply a mode and a mixlist, read from ``ADVISOR_MIXLIST`` / ``ADVISOR_MODE`` by default.

TF2 (``npu_device.global_options()``) is configured by ``advisor.npu.apply()``; this module is the
TF1 counterpart a user's ``tf.compat.v1.Session`` / Estimator script calls::

    from advisor.tf.npu_config import tf1_session_config
    config = tf1_session_config()                      # ADVISOR_* from the environment
    with tf.compat.v1.Session(config=config) as sess: ...

    run_config = advisor.tf.npu_config.npu_run_config(model_dir="ckpt")   # Estimator: NPURunConfig

The adapter's documented TF1 spelling (facts doc): a custom optimizer ``NpuOptimizer`` in
``graph_options.rewrite_options`` with ``parameter_map["precision_mode"]`` (or
``"precision_mode_v2"``) and ``parameter_map["modify_mixlist"]``; ``use_off_line`` = True runs on
the NPU; grappler's remapping must be off.  The adapter rejects a mixlist outside the mixed modes,
so it is set only there (``Setup.notes`` says when it was dropped).  Neither TensorFlow nor
npu_bridge is imported at module import.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError

ENV_MIXLIST, ENV_MODE = "ADVISOR_MIXLIST", "ADVISOR_MODE"
DEFAULT_MODE = "mixed_float16"
V2_VALUES = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "mixed_hif8")
V1_VALUES = ("force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
             "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16")
# advisor mode names with a precision_mode_v2 spelling
TO_V2 = {"must_keep_origin_dtype": "origin", "force_fp32": "cube_fp16in_fp32out", "force_fp16": "fp16"}
MIXLIST_MODES = ("mixed_float16", "mixed_bfloat16", "allow_mix_precision", "allow_mix_precision_fp16",
                 "allow_mix_precision_bf16")


@dataclass
class Setup:
    """The adapter options to set: ``{"precision_mode" | "precision_mode_v2": ..., "modify_mixlist": ...}``."""

    options: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def npu_options(mixlist_path: str | os.PathLike | None = None, mode: str | None = None,
                environ: Mapping[str, str] | None = None) -> Setup:
    """Adapter options for ``mode`` and ``mixlist_path`` (defaults: ADVISOR_MODE / ADVISOR_MIXLIST)."""
    env = os.environ if environ is None else environ
    mode = mode or env.get(ENV_MODE) or DEFAULT_MODE
    if mixlist_path is None:
        mixlist_path = env.get(ENV_MIXLIST) or None
    s = Setup()
    if mode in V2_VALUES or mode in TO_V2:
        s.options["precision_mode_v2"] = TO_V2.get(mode, mode)
    elif mode in V1_VALUES:
        s.options["precision_mode"] = mode
    else:
        raise InputError(None, f"precision mode {mode!r} is not one the Ascend TF adapter accepts")
    if mixlist_path is not None:
        p = Path(mixlist_path)
        if not p.is_file():
            raise InputError(p, "mixlist file does not exist")
        if mode in MIXLIST_MODES:
            s.options["modify_mixlist"] = str(p.resolve())
        else:
            s.notes.append(f"mixlist ignored: the TF adapter accepts modify_mixlist only in mixed modes, not {mode}")
    return s


def tf1_session_config(mixlist_path: str | os.PathLike | None = None, mode: str | None = None,
                       config: Any = None, environ: Mapping[str, str] | None = None) -> Any:
    """A ``tf.compat.v1.ConfigProto`` (``config`` updated in place when given) carrying the
    ``NpuOptimizer`` custom optimizer with the precision mode and mixlist."""
    import tensorflow as tf  # noqa: PLC0415 - lazy
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig  # noqa: PLC0415

    setup = npu_options(mixlist_path, mode, environ)
    if config is None:
        config = tf.compat.v1.ConfigProto()
    ro = config.graph_options.rewrite_options
    custom = next((c for c in ro.custom_optimizers if c.name == "NpuOptimizer"), None)
    if custom is None:
        custom = ro.custom_optimizers.add()
        custom.name = "NpuOptimizer"
    if "use_off_line" not in custom.parameter_map:
        custom.parameter_map["use_off_line"].b = True
    for key in ("precision_mode", "precision_mode_v2", "modify_mixlist"):
        if key in custom.parameter_map and key not in setup.options:
            del custom.parameter_map[key]
    for key, val in setup.options.items():
        custom.parameter_map[key].s = tf.compat.as_bytes(val)
    ro.remapping = RewriterConfig.OFF
    return config


def npu_run_config(mixlist_path: str | os.PathLike | None = None, mode: str | None = None,
                   environ: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
    """``npu_bridge.estimator.npu.npu_config.NPURunConfig(precision_mode=..., modify_mixlist=..., **kwargs)``
    for Estimator scripts (imports npu_bridge lazily; it exists only on an Ascend host)."""
    setup = npu_options(mixlist_path, mode, environ)
    try:
        mod = importlib.import_module("npu_bridge.estimator.npu.npu_config")
    except ImportError:
        raise InputError(None, "npu_bridge (the Ascend TF1 adapter) is not importable here") from None
    return mod.NPURunConfig(**setup.options, **kwargs)
