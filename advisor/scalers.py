"""Loss scalers as their frameworks run them: the scale each step's backward uses, when a step is skipped and how
the scale moves -- one class per framework's scaler, read from its source (docs/semantics.md, "Loss scalers", has
every rule with file and line).

A scaler sees one event per optimizer step: did this step overflow?  ``LossScaler.update(overflow)`` returns the
step's :class:`ScalerStep` (the scale the step's backward used, whether the optimizer step was skipped, the scale
of the next step) and moves the scaler's state exactly as its source does.  *Whether* a step overflowed is decided
by the chip's overflow mode (``advisor.numerics``), the same for every framework on Ascend:

* **inf_nan** (A2/A3 default): the (scaled) gradients hold an Inf or NaN element
  (``ForeachNonFiniteCheckAndUnscale``, which torch_npu's op_api path and Apex's ``unscale_foreach`` call; Keras /
  tf.keras ``isfinite`` on every gradient).  :func:`grads_overflow`.
* **saturation** (ascend910 / ascend310p): values saturate instead of becoming Inf, so the gradients never show it;
  the scaler reads the chip's float-status (overflow) flag, set by any op that overflowed since the flag was last
  cleared.  torch_npu and Apex clear it when the loss is scaled (after the forward: ``flag_window == "backward"``);
  the TensorFlow adapters clear it after reading it at the previous step (``flag_window == "step"``: the forward
  counts too).  :meth:`LossScaler.overflowed`.

The scalers: ``torch_npu`` (``torch_npu.npu.amp.GradScaler``), ``apex`` (Ascend Apex ``amp`` ``LossScaler``),
``keras`` (Keras 3 ``LossScaleOptimizer``), ``tf_keras`` (TF2 ``npu.train.optimizer.NpuLossScaleOptimizer`` /
``tf.keras.mixed_precision.LossScaleOptimizer``), ``tf1`` (npu_bridge ``ExponentialUpdateLossScaleManager`` under
``NPULossScaleOptimizer``), ``tf1_fixed`` (npu_bridge ``FixedLossScaleManager``) and ``static`` (a fixed scale:
torch_npu ``GradScaler(dynamic=False)``, Apex ``loss_scale=<number>``).  :func:`make_scaler` builds one by name
with its source's parameter names as options; the defaults are the source's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import InputError
from .numerics import Numerics

FP32_MAX = 3.4e38           # the TF adapters' growth bound (``3.4e+38 / multiplier``)
BACKWARD, STEP = "backward", "step"     # which ops the float-status flag covers (saturation mode)


@dataclass(frozen=True)
class ScalerStep:
    """What one optimizer step did: the scale its backward used, whether the chip reported an overflow, whether the
    optimizer step was skipped, and the scale of the next step."""

    scale: float
    overflow: bool
    skipped: bool
    next_scale: float


class LossScaler:
    """One framework's loss scaler (subclasses: its update rule).  ``scale`` is the scale of the coming step."""

    name = "none"
    flag_window = BACKWARD
    checks_overflow = True      # False: the framework never looks for an overflow (no skip, scale unchanged)

    def __init__(self) -> None:
        self.scale = 1.0

    def overflowed(self, numerics: Numerics, grads: Iterable[Any], flagged_forward: bool, flagged_backward: bool
                   ) -> bool:
        """Whether this framework sees an overflow in the step: its grads hold Inf/NaN (inf_nan mode), or the chip's
        float-status flag is set in its window (saturation mode: ``flagged_*`` say whether any op of the step's
        forward / backward overflowed)."""
        if not self.checks_overflow:
            return False
        if numerics.saturating:
            return flagged_backward or (self.flag_window == STEP and flagged_forward)
        return grads_overflow(grads)

    def update(self, overflow: bool) -> ScalerStep:
        """The step is done and ``overflow`` says what the check found: skip or not, move the scale."""
        s = self.scale
        skipped = self._update(bool(overflow))
        return ScalerStep(float(s), bool(overflow), skipped, float(self.scale))

    def _update(self, overflow: bool) -> bool:
        return False

    def describe(self) -> dict:
        """The scaler's name and settings (run.json ``train.scaler``)."""
        return {"name": self.name, **{k: _plain(v) for k, v in vars(self).items() if not k.startswith("_")}}


class NoScaler(LossScaler):
    """No loss scaling: scale 1, every step applied."""

    checks_overflow = False


class StaticScaler(LossScaler):
    """A fixed scale.  torch_npu ``GradScaler(dynamic=False)`` and Apex ``loss_scale=<number>`` unscale without an
    overflow check and always step (``skip_on_overflow=False``); npu_bridge ``FixedLossScaleManager`` (with
    ``enable_overflow_check``) and TF2 ``NpuLossScaleOptimizer(dynamic=False)`` on a saturation chip skip an
    overflowing step (``skip_on_overflow=True``)."""

    name = "static"

    def __init__(self, scale: float = 2.0 ** 16, skip_on_overflow: bool = False) -> None:
        super().__init__()
        if not (float(scale) > 0 and math.isfinite(float(scale))):
            raise ValueError("scale must be a finite number > 0")
        self.scale = float(scale)
        self.skip_on_overflow = bool(skip_on_overflow)
        self.checks_overflow = self.skip_on_overflow

    def _update(self, overflow: bool) -> bool:
        return overflow and self.skip_on_overflow


class TorchNpuGradScaler(LossScaler):
    """``torch_npu.npu.amp.GradScaler``: the scale is an fp32 tensor; an overflow skips ``optimizer.step()``, multiplies
    the scale by ``backoff_factor`` and zeroes the growth tracker; ``growth_interval`` consecutive good steps multiply
    it by ``growth_factor`` unless that gives inf.  ``dynamic=False``: a static scale, never skipped."""

    name = "torch_npu"

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, dynamic: bool = True) -> None:
        super().__init__()
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self.scale = float(np.float32(init_scale))
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval, self.dynamic = _positive_int(growth_interval, "growth_interval"), bool(dynamic)
        self.checks_overflow = self.dynamic
        self._tracker = 0

    def _update(self, overflow: bool) -> bool:
        if not self.dynamic:
            return False
        f32 = np.float32
        if overflow:
            self.scale = float(f32(self.scale) * f32(self.backoff_factor))
            self._tracker = 0
            return True
        self._tracker += 1
        if self._tracker == self.growth_interval:
            with np.errstate(over="ignore"):
                new = f32(self.scale) * f32(self.growth_factor)
            if not np.isinf(new):
                self.scale = float(new)
            self._tracker = 0
        return False


class ApexLossScaler(LossScaler):
    """Ascend Apex ``amp.scaler.LossScaler`` (Python floats): ``loss_scale="dynamic"`` starts at
    ``min(max_loss_scale, init_scale)``; an overflow skips the step and multiplies the scale by
    ``scale_backoff_factor`` (not below ``min_loss_scale`` when one is set); ``scale_window`` consecutive good steps
    multiply it by ``scale_growth_factor``, capped at ``max_loss_scale``.  A number: a static scale, never skipped."""

    name = "apex"

    def __init__(self, loss_scale: Any = "dynamic", init_scale: float = 2.0 ** 16, scale_growth_factor: float = 2.0,
                 scale_backoff_factor: float = 0.5, scale_window: int = 2000, min_loss_scale: float | None = None,
                 max_loss_scale: float = 2.0 ** 24) -> None:
        super().__init__()
        self.dynamic = loss_scale == "dynamic"
        self.scale = float(min(max_loss_scale, init_scale)) if self.dynamic else float(loss_scale)
        self.scale_growth_factor, self.scale_backoff_factor = float(scale_growth_factor), float(scale_backoff_factor)
        self.scale_window = _positive_int(scale_window, "scale_window")
        self.min_loss_scale = None if min_loss_scale is None else float(min_loss_scale)
        self.max_loss_scale = float(max_loss_scale)
        self.checks_overflow = self.dynamic
        self._unskipped = 0

    def _update(self, overflow: bool) -> bool:
        skip = overflow and self.dynamic
        if skip:
            s = self.scale * self.scale_backoff_factor
            self.scale = max(self.min_loss_scale, s) if self.min_loss_scale else s
            self._unskipped = 0
        else:
            self._unskipped += 1
        if self._unskipped == self.scale_window and self.dynamic:
            self.scale = min(self.max_loss_scale, self.scale * self.scale_growth_factor)
            self._unskipped = 0
        return skip


class KerasLossScaleOptimizer(LossScaler):
    """Keras 3 ``LossScaleOptimizer`` (float32 variables): a non-finite step is skipped, the scale halved (no floor)
    and the counter zeroed; on a finite step, when the counter has reached ``dynamic_growth_steps - 1`` the scale
    doubles (no cap) and the counter restarts, else it counts up."""

    name = "keras"
    flag_window = STEP

    def __init__(self, initial_scale: float = 2.0 ** 15, dynamic_growth_steps: int = 2000) -> None:
        super().__init__()
        self.scale = float(np.float32(initial_scale))
        self.dynamic_growth_steps = _positive_int(dynamic_growth_steps, "dynamic_growth_steps")
        self._counter = 0

    def _update(self, overflow: bool) -> bool:
        f32 = np.float32
        if overflow:
            self._counter = 0
            self.scale = float(f32(self.scale) * f32(0.5))
            return True
        if self._counter == self.dynamic_growth_steps - 1:
            self._counter = 0
            self.scale = float(f32(self.scale) * f32(2.0))
        else:
            self._counter += 1
        return False


class TfKerasLossScaleOptimizer(LossScaler):
    """TF2's ``npu.train.optimizer.NpuLossScaleOptimizer`` (a ``tf.keras.mixed_precision.LossScaleOptimizer``,
    multiplier 2): a non-finite step is skipped and the scale divided by 2, not below 1; ``dynamic_growth_steps``
    consecutive finite steps multiply it by 2 while it stays below 3.4e38/2 (tf.keras: while the product is finite).
    ``dynamic=False``: a fixed ``initial_scale``; on a saturation chip the NPU optimizer still skips an overflowing
    step, tf.keras (inf_nan) never does."""

    name = "tf_keras"
    flag_window = STEP

    def __init__(self, dynamic: bool = True, initial_scale: float | None = None,
                 dynamic_growth_steps: int | None = None) -> None:
        super().__init__()
        self.dynamic = bool(dynamic)
        if self.dynamic:
            initial_scale = 2.0 ** 15 if initial_scale is None else initial_scale
            dynamic_growth_steps = 2000 if dynamic_growth_steps is None else dynamic_growth_steps
        elif initial_scale is None:
            raise ValueError('"initial_scale" must be specified if "dynamic" is False')
        elif dynamic_growth_steps is not None:
            raise ValueError('"dynamic_growth_steps" must be None if "dynamic" is False')
        self.scale = float(np.float32(initial_scale))
        self.dynamic_growth_steps = None if dynamic_growth_steps is None else \
            _positive_int(dynamic_growth_steps, "dynamic_growth_steps")
        self._counter = 0
        self._skip_static = False

    def overflowed(self, numerics: Numerics, grads: Iterable[Any], flagged_forward: bool, flagged_backward: bool
                   ) -> bool:
        # a static tf.keras optimizer checks nothing (inf_nan); the NPU one reads the flag (saturation)
        self._skip_static = numerics.saturating
        if not self.dynamic and not numerics.saturating:
            return False
        return super().overflowed(numerics, grads, flagged_forward, flagged_backward)

    def _update(self, overflow: bool) -> bool:
        if not self.dynamic:
            return overflow and self._skip_static
        f32 = np.float32
        if overflow:
            self.scale = float(max(f32(self.scale) / f32(2.0), f32(1.0)))
            self._counter = 0
            return True
        if self._counter + 1 >= self.dynamic_growth_steps:
            if f32(self.scale) < f32(FP32_MAX / 2.0):
                self.scale = float(f32(self.scale) * f32(2.0))
            self._counter = 0
        else:
            self._counter += 1
        return False


class ExponentialUpdateLossScaleManager(LossScaler):
    """npu_bridge ``ExponentialUpdateLossScaleManager`` (TF1, under ``NPULossScaleOptimizer``, float32): a finite
    step counts a good step, and ``incr_every_n_steps`` consecutive ones multiply the scale by ``incr_ratio`` (while
    it stays below 3.4e38/incr_ratio); a non-finite step is skipped, zeroes the good steps and counts a bad one --
    bad steps accumulate (they need not be consecutive) and every ``decr_every_n_nan_or_inf`` of them multiply the
    scale by ``decr_ratio``, not below 1.  A scale change resets both counters."""

    name = "tf1"
    flag_window = STEP

    def __init__(self, init_loss_scale: float | None = None, incr_every_n_steps: int | None = None,
                 decr_every_n_nan_or_inf: int = 2, incr_ratio: float = 2, decr_ratio: float = 0.8) -> None:
        super().__init__()
        if init_loss_scale is None or incr_every_n_steps is None:
            raise ValueError("init_loss_scale and incr_every_n_steps have no default (the constructor requires them)")
        self.scale = float(np.float32(init_loss_scale))
        self.incr_every_n_steps = _positive_int(incr_every_n_steps, "incr_every_n_steps")
        self.decr_every_n_nan_or_inf = _positive_int(decr_every_n_nan_or_inf, "decr_every_n_nan_or_inf")
        self.incr_ratio, self.decr_ratio = float(incr_ratio), float(decr_ratio)
        self._good = self._bad = 0

    def _update(self, overflow: bool) -> bool:
        f32 = np.float32
        if not overflow:
            if self._good + 1 >= self.incr_every_n_steps:
                if f32(self.scale) < f32(FP32_MAX / self.incr_ratio):
                    self.scale = float(f32(self.scale) * f32(self.incr_ratio))
                self._good = self._bad = 0
            else:
                self._good += 1
            return False
        if self._bad + 1 >= self.decr_every_n_nan_or_inf:
            self.scale = float(max(f32(1.0), f32(self.scale) * f32(self.decr_ratio)))
            self._good = self._bad = 0
        else:
            self._bad += 1
            self._good = 0
        return True


class FixedLossScaleManager(StaticScaler):
    """npu_bridge ``FixedLossScaleManager(loss_scale, enable_overflow_check=True)``: a fixed scale (at least 1);
    with the overflow check an overflowing step is skipped."""

    name = "tf1_fixed"
    flag_window = STEP

    def __init__(self, loss_scale: float | None = None, enable_overflow_check: bool = True) -> None:
        if loss_scale is None:
            raise ValueError("loss_scale has no default (the constructor requires it)")
        if loss_scale < 1:
            raise ValueError("loss scale must be at least 1.")
        super().__init__(loss_scale, skip_on_overflow=enable_overflow_check)


SCALERS: dict[str, type[LossScaler]] = {
    c.name: c for c in (StaticScaler, TorchNpuGradScaler, ApexLossScaler, KerasLossScaleOptimizer,
                        TfKerasLossScaleOptimizer, ExponentialUpdateLossScaleManager, FixedLossScaleManager)}
TORCH_SCALERS = ("torch_npu", "apex", "static")     # the ones a PyTorch training loop uses
TF_SCALERS = ("tf_keras", "keras", "tf1", "tf1_fixed", "static")   # the ones a Keras training loop uses
DEFAULTS = {"pytorch": "torch_npu", "tensorflow": "tf_keras"}       # an fp16 run's scaler when none is chosen


def default_scaler(framework: str, low_dtype: str | None) -> str | None:
    """The scaler a training loop uses when the workload names none (choice): none for the PyTorch loop (as
    before), and for a TF2 Keras model on Ascend the ``NpuLossScaleOptimizer`` (``tf_keras``, dynamic) when the low
    dtype is fp16; bf16 and fp32 runs are not scaled."""
    return DEFAULTS["tensorflow"] if framework == "tensorflow" and low_dtype == "fp16" else None


def make_scaler(name: str | None, options: Mapping | None = None, what: str = "scaler") -> LossScaler:
    """The scaler ``name`` (None: no scaling) with ``options`` -- its source's parameter names and checks; an unknown
    name or option, or a value its source refuses, is an InputError naming it."""
    options = dict(options or {})
    if name is None or name == "none":
        if options:
            raise InputError(what, f"scaler_options given without a scaler: {sorted(options)}")
        return NoScaler()
    cls = SCALERS.get(str(name))
    if cls is None:
        raise InputError(what, f"unknown scaler {name!r}: one of {', '.join(sorted(SCALERS))} or None")
    import inspect
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise InputError(what, f"{name} takes the options {', '.join(params)}; not {', '.join(unknown)}")
    try:
        return cls(**options)
    except (TypeError, ValueError) as e:
        raise InputError(what, f"{name}: {e}") from None


def grads_overflow(grads: Iterable[Any]) -> bool:
    """inf_nan mode: any Inf or NaN element in the (scaled) gradients (``ForeachNonFiniteCheckAndUnscale``, Keras
    ``isfinite``)."""
    grads = [g for g in grads if g is not None]
    if all(isinstance(g, np.ndarray) for g in grads):     # the Keras loop's numpy gradients
        return any(not bool(np.isfinite(g.astype(np.float32)).all()) for g in grads)
    import torch
    return any(not bool(torch.isfinite(g).all()) for g in grads)


def scale_sequence(scaler: LossScaler, overflows: Iterable[bool]) -> list[ScalerStep]:
    """The scaler's steps over a scripted sequence of overflowing (True) and good (False) steps."""
    return [scaler.update(o) for o in overflows]


def _positive_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, not {v!r}")
    return int(v)


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


__all__ = ["LossScaler", "ScalerStep", "NoScaler", "StaticScaler", "TorchNpuGradScaler", "ApexLossScaler",
           "KerasLossScaleOptimizer", "TfKerasLossScaleOptimizer", "ExponentialUpdateLossScaleManager",
           "FixedLossScaleManager", "SCALERS", "TORCH_SCALERS", "TF_SCALERS", "DEFAULTS", "default_scaler", "make_scaler", "grads_overflow", "scale_sequence",
           "BACKWARD", "STEP"]
