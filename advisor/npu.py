"""Real-NPU glue: the first thing a user's NPU script calls when ``advisor tune --runner command``
runs it.

    import advisor.npu
    cfg = advisor.npu.apply()          # reads ADVISOR_MIXLIST / ADVISOR_MODE / ADVISOR_RUN_DIR / ADVISOR_POLICY
    cfg.apply_policy(model)            # torch_npu eager: the precision_policy.json (advisor.npu.apply_policy)

* **TensorFlow (npu_device, TF2)**: sets ``npu_device.global_options().precision_mode_v2`` (or
  ``precision_mode`` for the v1 names such as ``allow_mix_precision``) and, in the mixed modes,
  ``modify_mixlist`` -- before the script calls ``npu_device.open().as_default()``.
* **PyTorch (torch_npu)**: GE graph mode reads a mixlist through GE options; ``apply`` returns
  them in ``cfg.ge_options`` (``ge.exec.precision_mode_v2`` / ``ge.exec.precision_mode`` and
  ``ge.exec.modify_mixlist``) for the script's GE session / torchair config.  torch_npu eager
  has no mixlist (facts doc), so ``cfg.autocast()`` gives an autocast policy that realises the same
  decision: ``torch.autocast`` in the low dtype plus the mixlist's black-listed op types forced to
  fp32 (and white-listed ones to the low dtype).  Eager ``ACL_PRECISION_MODE`` is set only for the
  two values torch_npu accepts (allow_fp32_to_fp16, must_keep_origin_dtype).

Evidence for the next iteration: profile with the torch_npu profiler into ``cfg.profile_dir``
(``torch_npu.profiler.tensorboard_trace_handler(str(cfg.profile_dir))``) and dump with msprobe's
``PrecisionDebugger(**cfg.msprobe_kwargs(task="tensor"))``.

Neither ``npu_device`` nor ``torch_npu`` is imported unless used (they cannot import without CANN).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

ENV_MIXLIST, ENV_MODE, ENV_RUN_DIR = "ADVISOR_MIXLIST", "ADVISOR_MODE", "ADVISOR_RUN_DIR"
ENV_LOSS_SCALE = "ADVISOR_LOSS_SCALE"
ENV_POLICY = "ADVISOR_POLICY"            # a precision_policy.json (torch_npu eager): cfg.apply_policy(model)
DEFAULT_MODE = "mixed_float16"

# precision_mode_v2 values, and advisor/precision_mode (v1) names that have a v2 spelling
V2_VALUES = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "mixed_hif8")
TO_V2 = {"must_keep_origin_dtype": "origin", "force_fp32": "cube_fp16in_fp32out", "force_fp16": "fp16"}
V1_VALUES = ("force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
             "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16")
MIXLIST_MODES = ("mixed_float16", "mixed_bfloat16", "allow_mix_precision", "allow_mix_precision_fp16",
                 "allow_mix_precision_bf16")
EAGER_ACL_MODES = ("allow_fp32_to_fp16", "must_keep_origin_dtype")

# GE op type -> torch functions that produce it (eager autocast policy).  Kept small and explicit;
# types not listed cannot be expressed in eager and are reported in ``unmapped``.
GE_TO_TORCH: dict[str, tuple[str, ...]] = {
    "MatMul": ("matmul", "mm", "nn.functional.linear"), "MatMulV2": ("matmul", "mm", "addmm", "nn.functional.linear"),
    "MatMulV3": ("matmul", "mm", "addmm", "nn.functional.linear"), "BatchMatMul": ("bmm", "matmul", "baddbmm"),
    "BatchMatMulV2": ("bmm", "matmul", "baddbmm"), "Conv2D": ("conv2d", "nn.functional.conv2d"),
    "Conv3D": ("conv3d", "nn.functional.conv3d"), "Exp": ("exp",), "Log": ("log",), "Log1p": ("log1p",),
    "Sigmoid": ("sigmoid", "nn.functional.sigmoid"), "Tanh": ("tanh", "nn.functional.tanh"),
    "SoftmaxV2": ("softmax", "nn.functional.softmax"), "LogSoftmaxV2": ("log_softmax", "nn.functional.log_softmax"),
    "LayerNorm": ("layer_norm", "nn.functional.layer_norm"), "LayerNormV3": ("layer_norm", "nn.functional.layer_norm"),
    "LayerNormV4": ("layer_norm", "nn.functional.layer_norm"), "Gelu": ("nn.functional.gelu",),
    "Swish": ("nn.functional.silu",), "Relu": ("relu", "nn.functional.relu"), "Pow": ("pow",), "Sqrt": ("sqrt",),
    "Rsqrt": ("rsqrt",), "ReduceSum": ("sum",), "ReduceSumD": ("sum",), "ReduceMean": ("mean",),
    "ReduceMeanD": ("mean",), "Add": ("add",), "Sub": ("sub",), "Mul": ("mul",), "RealDiv": ("div",),
    "Div": ("div",), "Cumsum": ("cumsum",), "NLLLoss": ("nn.functional.nll_loss",),
    "BatchNorm": ("nn.functional.batch_norm",), "Square": ("square",),
}


@dataclass
class Settings:
    """The ADVISOR_* variables as read."""

    mode: str = DEFAULT_MODE
    mixlist: Path | None = None
    run_dir: Path | None = None
    reference: bool = False
    loss_scale: float | None = None          # ADVISOR_LOSS_SCALE: the static loss scale to train with
    policy: Path | None = None               # ADVISOR_POLICY: the precision_policy.json to apply

    @property
    def dump_dir(self) -> Path | None:
        return self.run_dir / "dump" / "mixed" if self.run_dir else None

    @property
    def profile_dir(self) -> Path | None:
        return self.run_dir / "profile" if self.run_dir else None


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    mode = env.get(ENV_MODE) or DEFAULT_MODE
    ml = env.get(ENV_MIXLIST) or None
    rd = env.get(ENV_RUN_DIR) or None
    if ml is not None and not Path(ml).is_file():
        from .errors import InputError
        raise InputError(ml, f"{ENV_MIXLIST} names a file that does not exist")
    ls = env.get(ENV_LOSS_SCALE) or None
    scale = None
    if ls is not None:
        try:
            scale = float(ls)
        except ValueError:
            scale = math.nan
        if not (0 < scale < math.inf):
            from .errors import InputError
            raise InputError(ENV_LOSS_SCALE, f"must be a number > 0, not {ls!r}")
    pol = env.get(ENV_POLICY) or None
    if pol is not None and not Path(pol).is_file():
        from .errors import InputError
        raise InputError(pol, f"{ENV_POLICY} names a file that does not exist")
    return Settings(mode, Path(ml) if ml else None, Path(rd) if rd else None, env.get("ADVISOR_REFERENCE") == "1",
                    scale, Path(pol) if pol else None)


@dataclass
class Applied:
    """What ``apply`` configured (and, for torch, what the script still has to use)."""

    framework: str
    settings: Settings
    options: dict[str, Any] = field(default_factory=dict)      # set on npu_device.global_options()
    ge_options: dict[str, str] = field(default_factory=dict)   # GE session / torchair options (torch)
    acl_options: dict[str, str] = field(default_factory=dict)  # torch_npu eager set_option
    policy: "AutocastPolicy | None" = None
    notes: list[str] = field(default_factory=list)

    def autocast(self):
        """Context manager realising the mixlist decision in torch eager (no-op for TF)."""
        return self.policy.context() if self.policy is not None else contextlib.nullcontext()

    def apply_policy(self, model: Any, device_type: str = "npu"):
        """Apply ``ADVISOR_POLICY`` (a precision_policy.json) to ``model`` (``apply_policy``); None when unset."""
        if self.settings.policy is None:
            return None
        return apply_policy(model, self.settings.policy, device_type=device_type)

    def msprobe_kwargs(self, task: str = "statistics", level: str = "L1") -> dict:
        """Arguments for msprobe's ``PrecisionDebugger(**kwargs)`` so its dump lands where tune reads
        it: ``$ADVISOR_RUN_DIR/dump/mixed/step<N>/rank<R>/dump.json``.  ``task`` "tensor" dumps
        tensors (needed for cosine/relative-L2 per op; "statistics" gives the stats-only subset)."""
        if self.settings.dump_dir is None:
            raise ValueError(f"{ENV_RUN_DIR} is not set: run under advisor tune --runner command")
        return {"task": task, "dump_path": str(self.settings.dump_dir), "level": level}

    def grad_scaler_kwargs(self) -> dict:
        """Arguments for torch_npu's ``torch_npu.npu.amp.GradScaler(**kwargs)`` realising the static loss scale
        tune asks for (``ADVISOR_LOSS_SCALE``); ``{}`` when none is set (keep the script's own scaler).  With
        TensorFlow: ``tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False,
        initial_scale=cfg.settings.loss_scale)``."""
        s = self.settings.loss_scale
        return {} if s is None else {"init_scale": s, "dynamic": False}

    @property
    def profile_dir(self) -> Path | None:
        """Where the torch_npu profiler should write (``tensorboard_trace_handler(str(cfg.profile_dir))``)."""
        return self.settings.profile_dir


def _has_module(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def detect_framework() -> str:
    """"tensorflow" when npu_device is present, else "torch" when torch_npu is, else "none"."""
    if _has_module("npu_device"):
        return "tensorflow"
    if _has_module("torch_npu"):
        return "torch"
    return "none"


def apply(framework: str = "auto", environ: Mapping[str, str] | None = None, device_type: str = "npu") -> Applied:
    """Configure the framework from ADVISOR_* (call before building the model / opening the device)."""
    s = settings(environ)
    fw = detect_framework() if framework == "auto" else framework
    if fw in ("tensorflow", "tf"):
        return _apply_tf(s)
    if fw == "torch":
        return _apply_torch(s, device_type)
    if fw == "none":
        return Applied("none", s, notes=["neither npu_device nor torch_npu is importable: nothing configured"])
    raise ValueError(f"framework must be auto, tensorflow or torch, not {framework!r}")


def _mixlist_applies(s: Settings) -> bool:
    return s.mixlist is not None and s.mode in MIXLIST_MODES


def _apply_tf(s: Settings) -> Applied:
    npu_device = importlib.import_module("npu_device")
    opts = npu_device.global_options()
    out = Applied("tensorflow", s)
    if s.mode in V2_VALUES or s.mode in TO_V2:
        key, val = "precision_mode_v2", TO_V2.get(s.mode, s.mode)
    elif s.mode in V1_VALUES:
        key, val = "precision_mode", s.mode
    else:
        raise ValueError(f"{ENV_MODE}={s.mode!r} is not a precision mode npu_device accepts")
    setattr(opts, key, val)
    out.options[key] = val
    if _mixlist_applies(s):
        opts.modify_mixlist = str(s.mixlist)
        out.options["modify_mixlist"] = str(s.mixlist)
    elif s.mixlist is not None:
        out.notes.append(f"mixlist ignored: the TF adapter accepts modify_mixlist only in mixed modes, not {s.mode}")
    return out


def _apply_torch(s: Settings, device_type: str) -> Applied:
    torch_npu = importlib.import_module("torch_npu")
    out = Applied("torch", s)
    if s.mode in V2_VALUES or s.mode in TO_V2:
        out.ge_options["ge.exec.precision_mode_v2"] = TO_V2.get(s.mode, s.mode)
    else:
        out.ge_options["ge.exec.precision_mode"] = s.mode
    if _mixlist_applies(s):
        out.ge_options["ge.exec.modify_mixlist"] = str(s.mixlist)
    if s.mode in EAGER_ACL_MODES:
        out.acl_options["ACL_PRECISION_MODE"] = s.mode
        torch_npu.npu.set_option(dict(out.acl_options))
    low = {"mixed_float16": "float16", "allow_mix_precision": "float16", "allow_mix_precision_fp16": "float16",
           "mixed_bfloat16": "bfloat16", "allow_mix_precision_bf16": "bfloat16"}.get(s.mode)
    if low is not None:
        from .mixlist import load
        ml = load(s.mixlist) if s.mixlist is not None else None
        out.policy = AutocastPolicy.from_mixlist(ml, low, device_type)
        if out.policy.unmapped:
            out.notes.append("op types with no eager equivalent: " + ", ".join(out.policy.unmapped))
    return out


def apply_policy(model: Any, policy: Any, *, device_type: str = "npu", amp_module: Any = None):
    """Realise a precision_policy.json on ``model`` (torch_npu eager; ``advisor.npu_policy``): kept modules, kept
    ops at the dispatcher, Apex float functions.  Returns an ``AppliedPolicy`` (``remove()`` undoes it)."""
    from . import npu_policy
    return npu_policy.apply_policy(model, policy, device_type=device_type, amp_module=amp_module)


# ------------------------------------------------------------------ eager autocast policy
class AutocastPolicy:
    """``torch.autocast(device_type, dtype)`` plus per-function overrides: functions in ``fp32`` run
    with autocast disabled on fp32 inputs; functions in ``low`` run on inputs cast to the low dtype."""

    def __init__(self, dtype: str = "float16", device_type: str = "npu", fp32: tuple[str, ...] = (),
                 low: tuple[str, ...] = (), unmapped: tuple[str, ...] = ()):
        self.dtype, self.device_type = dtype, device_type
        self.fp32, self.low, self.unmapped = tuple(sorted(set(fp32))), tuple(sorted(set(low))), tuple(unmapped)

    @classmethod
    def from_mixlist(cls, mixlist, dtype: str = "float16", device_type: str = "npu") -> "AutocastPolicy":
        fp32, low, unmapped = [], [], []
        if mixlist is not None:
            for lst, action, t in mixlist.entries():
                if action != "to-add" or lst not in ("black", "white"):
                    continue
                fns = GE_TO_TORCH.get(t)
                if not fns:
                    unmapped.append(t)
                    continue
                (fp32 if lst == "black" else low).extend(fns)
        return cls(dtype, device_type, tuple(fp32), tuple(low), tuple(unmapped))

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "device_type": self.device_type, "fp32": list(self.fp32),
                "low": list(self.low), "unmapped": list(self.unmapped)}

    @contextlib.contextmanager
    def context(self):
        import torch
        from torch.overrides import TorchFunctionMode

        dtype = getattr(torch, self.dtype)
        fp32_names = _func_names(self.fp32)
        low_names = _func_names(self.low)
        device_type = self.device_type

        def cast_all(x, dt):
            return torch.utils._pytree.tree_map(
                lambda t: t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, x)

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                if name in fp32_names:
                    with torch.autocast(device_type=device_type, enabled=False):
                        return func(*cast_all(args, torch.float32), **cast_all(kwargs, torch.float32))
                if name in low_names:
                    with torch.autocast(device_type=device_type, enabled=False):
                        return func(*cast_all(args, dtype), **cast_all(kwargs, dtype))
                return func(*args, **kwargs)

        with torch.autocast(device_type=device_type, dtype=dtype), _Mode():
            yield self


_DUNDER = {"add": ("__add__", "__radd__", "__iadd__"), "sub": ("__sub__", "__rsub__", "__isub__"),
           "mul": ("__mul__", "__rmul__", "__imul__"), "div": ("__truediv__", "__rtruediv__", "__itruediv__"),
           "matmul": ("__matmul__", "__rmatmul__"), "pow": ("__pow__", "__rpow__")}


def _func_names(dotted: tuple[str, ...]) -> frozenset[str]:
    """Names matched against ``func.__name__`` (torch.x, Tensor.x, F.x and operator dunders)."""
    names: set[str] = set()
    for d in dotted:
        base = d.rsplit(".", 1)[-1]
        names.add(base)
        names.update(_DUNDER.get(base, ()))
    return frozenset(names)
