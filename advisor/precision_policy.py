"""precision_policy.json: the code-level precision changes a torch_npu user applies (docs/formats.md).

A policy names the engine (``torch_npu``), the mixed-precision method (``amp``: autocast | apex-o1 | apex-o2 |
none), its low dtype and rules: ``keep_fp32`` entries -- ``{"module": X}`` (module X, as
``model.named_modules()`` names it, with everything under it, runs in fp32), ``{"op": T}`` (aten op T, ``mul`` or
``mul.Tensor``, runs in fp32 everywhere), ``{"op": T, "module": X}`` (only within X) -- and
``register_float_function`` names (``torch.nn.functional.gelu``: Apex O1's ``amp.register_float_function(module,
name)``).  What each rule does to an op is decided in one place, ``advisor.semantics.torch_npu``; realising it on a
device is ``advisor.npu.apply_policy``.

``read_policy(path)`` is the only reader: anything malformed is an ``InputError`` naming the file and the problem
(exit 2), never a silent pass.  ``PrecisionPolicy.to_dict`` writes the same format back.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .results import OMIT_NONE, result

SCHEMA = "advisor.precision_policy/1"
VERSION = 1
ENGINE = "torch_npu"
AMP_MODES = ("autocast", "apex-o1", "apex-o2", "none")
APEX_MODES = ("apex-o1", "apex-o2")
# the policy's dtype as PyTorch spells it -> advisor's dtype name
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "fp16": "fp16", "bf16": "bf16"}
DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}
_TOP_KEYS = ("schema", "version", "engine", "amp", "dtype", "rules", "notes")
_RULE_KEYS = ("keep_fp32", "register_float_function")
_OP = re.compile(r"^(?:aten::)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$")
_MODULE = re.compile(r"^[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*$")
_PYTHON_NAMESPACES = frozenset({"torch", "Tensor", "F", "nn", "functional"})
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class KeepRule:
    """One ``keep_fp32`` entry: a module (with everything under it), an aten op, or an op within a module."""

    module: str | None = field(default=None, metadata=OMIT_NONE)
    op: str | None = field(default=None, metadata=OMIT_NONE)

    def covers_module(self, path: str) -> bool:
        """Whether ``path`` (a named_modules() name; "" is the model) is this rule's module or inside it."""
        m = self.module
        return m is not None and (m == "" or path == m or path.startswith(m + "."))

    def names_op(self, op: str, overload: str = "default") -> bool:
        """Whether this rule's op is aten ``op`` (any overload) or exactly ``op.overload``."""
        if self.op is None:
            return False
        base, _, ov = self.op.partition(".")
        return base == op and (not ov or ov == overload)

    def __str__(self) -> str:
        if self.op is None:
            return f"keep module {self.module!r} in fp32"
        return f"keep op {self.op} in fp32" + (f" within {self.module!r}" if self.module is not None else "")


@dataclass(frozen=True)
class PolicyRules:
    keep_fp32: tuple[KeepRule, ...] = ()
    register_float_function: tuple[str, ...] = ()


@result(SCHEMA, version=VERSION)
@dataclass(frozen=True)
class PrecisionPolicy:
    """A torch_npu precision policy (``read_policy`` / ``to_dict``)."""

    engine: str = ENGINE
    amp: str = "autocast"
    dtype: str = "fp16"                  # advisor's name (fp16 | bf16); the file spells float16 | bfloat16
    rules: PolicyRules = PolicyRules()
    source: str | None = field(default=None, compare=False, metadata={"omit": "always"})

    # ------------------------------------------------------------------ questions semantics asks
    def keeps_module(self, path: str) -> bool:
        """Module ``path`` (or an ancestor) is kept in fp32."""
        return any(r.op is None and r.covers_module(path) for r in self.rules.keep_fp32)

    def kept_modules(self) -> tuple[str, ...]:
        return tuple(r.module for r in self.rules.keep_fp32 if r.op is None and r.module is not None)

    def keeps_op(self, op: str, overload: str, module: str) -> bool:
        """Aten ``op.overload`` running in module ``module`` is kept in fp32 (everywhere or within a module)."""
        return any(r.names_op(op, overload) and (r.module is None or r.covers_module(module))
                   for r in self.rules.keep_fp32)

    def op_names(self) -> tuple[str, ...]:
        """The aten ops the rules name (``mul``, ``mul.Tensor``), in order, once each."""
        return tuple(dict.fromkeys(r.op for r in self.rules.keep_fp32 if r.op is not None))

    def registers_float(self, function: str) -> bool:
        return function in self.rules.register_float_function

    def is_empty(self) -> bool:
        return not self.rules.keep_fp32 and not self.rules.register_float_function

    # ------------------------------------------------------------------ the file
    def to_dict(self) -> dict:
        rules: dict[str, Any] = {"keep_fp32": [{k: v for k, v in (("module", r.module), ("op", r.op)) if v is not None}
                                               for r in self.rules.keep_fp32]}
        if self.rules.register_float_function or self.amp == "apex-o1":
            rules["register_float_function"] = list(self.rules.register_float_function)
        return {"schema": SCHEMA, "version": VERSION, "engine": self.engine, "amp": self.amp,
                "dtype": DTYPE_NAMES[self.dtype], "rules": rules}

    def lines(self) -> list[str]:
        """One sentence per rule (reports, notes)."""
        out = [str(r) for r in self.rules.keep_fp32]
        out += [f"amp.register_float_function({f.rsplit('.', 1)[0]}, {f.rsplit('.', 1)[1]!r})"
                for f in self.rules.register_float_function]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "precision_policy.json") -> "PrecisionPolicy":
        return parse_policy(data, where)


def _want(cond: bool, where: str, problem: Any) -> None:
    """Refuse unless ``cond``; ``problem`` is the message or a function making it (evaluated only on refusal)."""
    if not cond:
        raise InputError(where, problem() if callable(problem) else problem)


def _keep_rule(e: Any, i: int, where: str) -> KeepRule:
    at = f"rules.keep_fp32[{i}]"
    _want(isinstance(e, dict), where, f"{at} must be an object like {{\"module\": \"head\"}} or {{\"op\": \"mul\"}}, "
                                      f"not {type(e).__name__}")
    extra = sorted(set(e) - {"module", "op"})
    _want(not extra, where, lambda: f"{at} has an unknown key {extra[0]!r} (keys: module, op)")
    _want("module" in e or "op" in e, where, f"{at} names neither a module nor an op")
    mod, op = e.get("module"), e.get("op")
    if mod is not None:
        _want(isinstance(mod, str) and (mod == "" or _MODULE.match(mod)), where,
              f"{at}.module must be a module name as model.named_modules() gives it (e.g. encoder.layer.0), "
              f"not {mod!r:.60}")
    if op is not None:
        _want(isinstance(op, str) and bool(_OP.match(op)), where,
              f"{at}.op must be an aten op name such as mul or mul.Tensor, not {op!r:.60}")
        op = op[6:] if op.startswith("aten::") else op
        _want(op.partition(".")[0] not in _PYTHON_NAMESPACES, where,
              lambda: f"{at}.op {op!r} is a Python name: name the aten op it runs ({op.rpartition('.')[2]}), which "
                      "covers every spelling (h * h, torch.mul, Tensor.mul_)")
    return KeepRule(module=mod, op=op)


def parse_policy(data: Any, where: str = "precision_policy.json") -> PrecisionPolicy:
    """A PrecisionPolicy from the file's JSON value (strict: unknown keys, wrong types and values are refused)."""
    _want(isinstance(data, dict), where, f"expected a JSON object (a precision policy), not {type(data).__name__}")
    extra = sorted(set(data) - set(_TOP_KEYS))
    _want(not extra, where, lambda: f"unknown key {extra[0]!r} (keys: {', '.join(_TOP_KEYS[:-1])})")
    schema = data.get("schema")
    _want(schema is not None, where, f"lacks \"schema\": \"{SCHEMA}\"")
    _want(isinstance(schema, str) and schema.split("/")[0] == SCHEMA.split("/")[0], where,
          f"schema {schema!r:.60} is not {SCHEMA!r}")
    ver = data.get("version", VERSION)
    _want(isinstance(ver, int) and not isinstance(ver, bool), where, f"version must be an integer, not {ver!r:.40}")
    _want(ver <= VERSION, where, f"version {ver} is newer than this advisor reads ({VERSION}): update advisor")
    eng = data.get("engine", ENGINE)
    _want(eng == ENGINE, where, f"engine must be {ENGINE!r}, not {eng!r:.40} (a GE run takes a modify_mixlist)")
    amp = data.get("amp")
    _want(amp in AMP_MODES, where, f"amp must be one of {', '.join(AMP_MODES)}, not {amp!r:.40}")
    dt = data.get("dtype", "float16")
    _want(isinstance(dt, str) and dt in DTYPES, where, f"dtype must be float16 or bfloat16, not {dt!r:.40}")
    dtype = DTYPES[dt]
    _want(amp not in APEX_MODES or dtype == "fp16", where, f"Apex ({amp}) casts to float16 only, not {dt}")
    rules = data.get("rules", {})
    _want(isinstance(rules, dict), where, f"rules must be an object, not {type(rules).__name__}")
    extra = sorted(set(rules) - set(_RULE_KEYS))
    _want(not extra, where, lambda: f"rules has an unknown key {extra[0]!r} (keys: {', '.join(_RULE_KEYS)})")
    keeps = rules.get("keep_fp32", [])
    _want(isinstance(keeps, list), where, f"rules.keep_fp32 must be an array, not {type(keeps).__name__}")
    keep = tuple(_keep_rule(e, i, where) for i, e in enumerate(keeps))
    regs = rules.get("register_float_function", [])
    _want(isinstance(regs, list), where,
          f"rules.register_float_function must be an array, not {type(regs).__name__}")
    for i, f in enumerate(regs):
        _want(isinstance(f, str) and bool(_FUNCTION.match(f)), where,
              f"rules.register_float_function[{i}] must be a dotted function name such as "
              f"torch.nn.functional.gelu, not {f!r:.60}")
    _want(not regs or amp == "apex-o1", where, f"register_float_function is Apex O1's (amp.register_float_function); "
                                               f"this policy's amp is {amp}")
    return PrecisionPolicy(ENGINE, amp, dtype, PolicyRules(keep, tuple(regs)), source=where)


def read_policy(path: str | os.PathLike) -> PrecisionPolicy:
    """The policy in ``path`` (``InputError``, exit 2, on anything unreadable or malformed)."""
    from .fsutil import read_user_json
    return parse_policy(read_user_json(path, "a precision policy"), str(path))


__all__ = ["SCHEMA", "VERSION", "AMP_MODES", "KeepRule", "PolicyRules", "PrecisionPolicy", "parse_policy",
           "read_policy"]
