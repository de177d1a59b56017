"""Realising a precision_policy.json on a real torch_npu run: ``advisor.npu.apply_policy(model, "precision_policy.json")``.

What each rule *means* is decided by ``advisor.semantics.torch_npu`` (the emulator plans a capture with it); this
module makes a device do the same:

* ``{"module": X}`` -- forward pre/post hooks on X: its fp16/bf16 tensor inputs are cast to fp32 and it runs with
  the casts of the amp disabled (autocast: ``torch.autocast(device, enabled=False)``; Apex O1:
  ``amp.disable_casts()``); under Apex O2 X's parameters are made fp32 (``X.float()``: call after
  ``amp.initialize``) and its outputs cast back to fp16 for the half model after it (not the model's own: O2 casts
  those to fp32).
* ``{"op": T}`` / ``{"op": T, "module": X}`` -- under autocast, a kernel for T at the dispatcher's autocast key
  (``torch.library``, ``AutocastPrivateUse1`` on an NPU) with the fp32 policy, inside X only when a module is named
  (outside it T keeps torch_npu's own category, ``semantics.torch_npu.autocast_target``); an op reached only inside
  another autocast op (addmm inside linear) is not reached there, as on the device.  Under the other amps a
  ``TorchDispatchMode`` running T on fp32 inputs, its outputs cast back to the dtype they would have had.  Either
  way at the dispatcher, so ``h * h`` is covered.
* ``register_float_function`` names -- ``apex.amp.register_float_function(module, name)`` (call before
  ``amp.initialize``).

torch_npu and apex are imported only when used (never installed by advisor).  ``AppliedPolicy.remove()`` undoes it.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .precision_policy import PrecisionPolicy, read_policy

_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


@dataclass
class AppliedPolicy:
    """What ``apply_policy`` installed (hooks, kernels, a dispatch mode, Apex registrations)."""

    policy: PrecisionPolicy
    device_type: str
    hooks: list = field(default_factory=list)
    libraries: list = field(default_factory=list)
    modes: list = field(default_factory=list)
    registered: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()
        for lib in self.libraries:
            lib._destroy()
        for m in reversed(self.modes):
            m.__exit__(None, None, None)
        self.hooks, self.libraries, self.modes = [], [], []


def _torch():
    import torch
    return torch


def _cast_floats(x: Any, dtypes: tuple, to: Any) -> Any:
    torch = _torch()
    return torch.utils._pytree.tree_map(
        lambda t: t.to(to) if isinstance(t, torch.Tensor) and t.dtype in dtypes else t, x)


class _Scope:
    """The stack of named modules running now (for rules scoped to a module)."""

    def __init__(self):
        self.stack: list[str] = []

    def enter(self, name: str):
        def pre(_m, _args) -> None:
            self.stack.append(name)
        return pre

    def leave(self, _m, _args, _output) -> None:
        if self.stack:
            self.stack.pop()

    def inside(self, module: str | None) -> bool:
        if module is None or module == "":
            return True
        return any(m == module or m.startswith(module + ".") for m in self.stack)


def apply_policy(model: Any, policy: str | os.PathLike | PrecisionPolicy, *, device_type: str = "npu",
                 amp_module: Any = None) -> AppliedPolicy:
    """Make ``model`` run ``policy`` (a precision_policy.json path or a ``PrecisionPolicy``) on ``device_type``
    ("npu": torch_npu, imported here; "cpu" for a CPU check).  ``amp_module``: Apex's ``apex.amp`` (default:
    imported when the policy needs it).  Returns an ``AppliedPolicy`` (``remove()`` undoes it)."""
    pol = policy if isinstance(policy, PrecisionPolicy) else read_policy(policy)
    torch = _torch()
    if device_type == "npu":
        importlib.import_module("torch_npu")        # registers the npu device and its autocast kernels
    if not isinstance(model, torch.nn.Module):
        raise InputError(pol.source, f"apply_policy needs a torch.nn.Module, not {type(model).__name__}")
    modules = dict(model.named_modules())
    missing = [m for m in [r.module for r in pol.rules.keep_fp32 if r.module is not None] if m not in modules]
    if missing:
        raise InputError(pol.source, f"the model has no module {missing[0]!r} (model.named_modules() names "
                                     f"{', '.join(list(modules)[1:6]) or 'none'}, ...)")
    out = AppliedPolicy(pol, device_type)
    amp = None
    if pol.amp.startswith("apex") and (pol.kept_modules() or pol.rules.register_float_function):
        amp = amp_module if amp_module is not None else importlib.import_module("apex.amp")
    scope = _Scope()
    if any(r.op is not None and r.module is not None for r in pol.rules.keep_fp32):
        for name, m in modules.items():
            out.hooks.append(m.register_forward_pre_hook(scope.enter(name)))
            out.hooks.append(m.register_forward_hook(scope.leave, always_call=True))
    for name in pol.kept_modules():
        _keep_module(out, modules[name], name, pol, amp, device_type)
    if pol.op_names():
        if pol.amp == "autocast":
            _autocast_kernels(out, pol, scope, device_type)
        else:
            _dispatch_mode(out, pol, scope)
    for f in pol.rules.register_float_function:
        mod_name, _, fn = f.rpartition(".")
        target = _resolve(mod_name, pol)
        amp.register_float_function(target, fn)
        out.registered.append(f)
    return out


def _resolve(dotted: str, pol: PrecisionPolicy) -> Any:
    torch = _torch()
    if dotted == "torch.Tensor":
        return torch.Tensor
    try:
        return importlib.import_module(dotted)
    except ImportError:
        raise InputError(pol.source, f"register_float_function names module {dotted!r}, which does not import") \
            from None


def _keep_module(out: AppliedPolicy, m: Any, name: str, pol: PrecisionPolicy, amp: Any, device_type: str) -> None:
    torch = _torch()
    lows = (torch.float16, torch.bfloat16)
    ctx: list = []
    if pol.amp == "apex-o2":
        m.float()

    def pre(_m, args, kwargs):
        c = (torch.autocast(device_type, enabled=False) if pol.amp == "autocast" else
             amp.disable_casts() if pol.amp == "apex-o1" else contextlib.nullcontext())
        c.__enter__()
        ctx.append(c)
        return _cast_floats(args, lows, torch.float32), _cast_floats(kwargs, lows, torch.float32)

    def post(_m, args, kwargs, output):
        if ctx:
            ctx.pop().__exit__(None, None, None)
        if pol.amp == "apex-o2" and name != "":
            return _cast_floats(output, (torch.float32,), torch.float16)
        return None
    out.hooks.append(m.register_forward_pre_hook(pre, with_kwargs=True))
    out.hooks.append(m.register_forward_hook(post, with_kwargs=True, always_call=True))


def _overloads_named(op: str) -> list:
    torch = _torch()
    base, _, ov = op.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return []
    names = packet.overloads()
    return [getattr(packet, o) for o in names if not ov or o == ov]


def _autocast_kernels(out: AppliedPolicy, pol: PrecisionPolicy, scope: _Scope, device_type: str) -> None:
    """A kernel at the autocast key for every op the policy keeps: fp32 where a rule applies, torch_npu's own
    category elsewhere (``autocast_target`` from the generated table)."""
    torch = _torch()
    from .semantics.torch_npu import autocast_category, autocast_target
    key = "AutocastPrivateUse1" if device_type == "npu" else f"Autocast{device_type.upper()}"
    dkey = getattr(torch._C.DispatchKey, key)
    import warnings
    lib = torch.library.Library("aten", "IMPL")
    out.libraries.append(lib)
    names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}
    back = {v: k for k, v in names.items()}
    for op in pol.op_names():
        for handle in _overloads_named(op):
            base, ov = handle._schema.name.split("::")[1], handle._schema.overload_name or "default"
            rules = [r for r in pol.rules.keep_fp32 if r.names_op(base, ov)]

            def kernel(*args, _h=handle, _rules=rules, _base=base, _ov=ov, **kwargs):
                if any(scope.inside(r.module) for r in _rules):
                    target = "fp32"
                else:
                    flat = [a for a in torch.utils._pytree.tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
                    first = bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_floating_point()
                    dt = kwargs.get("dtype")
                    low = names.get(torch.get_autocast_dtype(device_type), "fp16")
                    target = autocast_target(autocast_category(_base, _ov), [names.get(t.dtype, "") for t in flat],
                                             first, names.get(dt) if dt is not None else None, low)
                if target is not None:
                    to = back[target]
                    args = _cast_floats(args, (torch.float16, torch.bfloat16, torch.float32), to)
                    kwargs = _cast_floats(kwargs, (torch.float16, torch.bfloat16, torch.float32), to)
                with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(dkey)):
                    return _h(*args, **kwargs)
            qual = base + ("." + handle._schema.overload_name if handle._schema.overload_name else "")
            with warnings.catch_warnings():           # replacing torch_npu's kernel for the op is the point
                warnings.simplefilter("ignore")
                lib.impl(qual, kernel, key)


def _dispatch_mode(out: AppliedPolicy, pol: PrecisionPolicy, scope: _Scope) -> None:
    """Outside autocast: the kept ops run on fp32 inputs (a TorchDispatchMode, entered until ``remove()``)."""
    torch = _torch()
    from torch.utils._python_dispatch import TorchDispatchMode
    lows = (torch.float16, torch.bfloat16)

    class _KeepFp32(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._schema.name.split("::")[-1]
            ov = func._overloadname or "default"
            if not any(r.names_op(name, ov) and scope.inside(r.module) for r in pol.rules.keep_fp32):
                return func(*args, **kwargs)
            ins = [t.dtype for t in torch.utils._pytree.tree_flatten((args, kwargs))[0]
                   if isinstance(t, torch.Tensor) and t.is_floating_point()]
            was = functools.reduce(torch.promote_types, ins) if ins else None
            args, kwargs = _cast_floats(args, lows, torch.float32), _cast_floats(kwargs, lows, torch.float32)
            out = func(*args, **kwargs)
            # the output keeps the dtype the op would have given it: the program stays type-consistent
            return _cast_floats(out, (torch.float32,), was) if was in lows else out
    mode = _KeepFp32()
    mode.__enter__()
    out.modes.append(mode)


__all__ = ["AppliedPolicy", "apply_policy"]
