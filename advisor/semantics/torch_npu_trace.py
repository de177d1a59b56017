"""torch_npu_trace.json: the step-0 ``Trace`` of a torch_npu capture (what the dispatcher, the modules and Apex saw),
saved beside the dumps so that replay and the policy search re-plan the run under other policies with the one
semantics (``semantics.torch_npu.plan``) instead of guessing (docs/formats.md "torch_npu_trace.json").

``with_op_frames(trace, ops)`` is the trace a capture would have recorded had a policy named aten ``ops``: under
autocast a policy's op gets a kernel at the autocast key (``npu_policy``, the emulator's ``extra_ops``), so every
call of it that reaches the key -- one not running inside another autocast op's frame (addmm inside linear) --
opens an ``autocast`` frame around itself.  A recorded call is below every decomposition, so the frame wraps that
call alone.
"""
from __future__ import annotations

import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError
from .torch_npu import FLOATS, Call, Frame, Leaf, Trace

SCHEMA = "advisor.torch_npu_trace/1"
FILE = "torch_npu_trace.json"


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, (tuple, list)) else v


def _record(obj: Any) -> dict:
    """A dataclass as a dict of its non-default fields (tuples as lists)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if v != f.default:
            out[f.name] = _plain(v)
    return out


def trace_to_json(trace: Trace) -> dict:
    return {"schema": SCHEMA, "calls": [_record(c) for c in trace.calls],
            "frames": [_record(f) for f in trace.frames],
            "leaves": [_record(x) for x in trace.leaves.values()], "bn_modules": sorted(trace.bn_modules)}


def _tup(v: Any, depth: int) -> Any:
    if depth == 0 or not isinstance(v, list):
        return v
    return tuple(_tup(x, depth - 1) for x in v)


# tuple-valued fields and their nesting depth (srcs: (node, index) pairs; port_frames: frame ids per input)
_DEPTH = {"srcs": 2, "in_dtypes": 1, "in_dims": 1, "out_dtypes": 1, "port_frames": 2, "src_frames": 2}


def _build(cls: type, d: Any, where: str, what: str) -> Any:
    if not isinstance(d, dict):
        raise InputError(where, f"{what} must be an object, not {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    extra = sorted(set(d) - names)
    if extra:
        raise InputError(where, f"{what} has an unknown key {extra[0]!r}")
    try:
        return cls(**{k: _tup(v, _DEPTH.get(k, 0)) for k, v in d.items()})
    except TypeError as e:
        raise InputError(where, f"{what}: {e}") from None


def trace_from_json(doc: Any, where: str = FILE) -> Trace:
    if not isinstance(doc, dict) or str(doc.get("schema", "")).split("/")[0] != SCHEMA.split("/")[0]:
        raise InputError(where, f"not a torch_npu trace (schema {SCHEMA!r})")
    for k in ("calls", "frames", "leaves"):
        if not isinstance(doc.get(k, []), list):
            raise InputError(where, f"{k} must be an array")
    calls = [_build(Call, c, where, f"calls[{i}]") for i, c in enumerate(doc.get("calls", []))]
    frames = [_build(Frame, f, where, f"frames[{i}]") for i, f in enumerate(doc.get("frames", []))]
    leaves = [_build(Leaf, x, where, f"leaves[{i}]") for i, x in enumerate(doc.get("leaves", []))]
    return Trace(calls, frames, {x.name: x for x in leaves}, frozenset(doc.get("bn_modules") or ()))


def write_trace(out_dir: str | os.PathLike, trace: Trace) -> Path:
    from ..fsutil import atomic_write_json
    p = Path(out_dir) / FILE
    atomic_write_json(p, trace_to_json(trace), indent=0)
    return p


def read_trace(run_dir: str | os.PathLike) -> Trace | None:
    """The run's trace (None: the run has none -- a GE run, a real torch_npu run, one captured before it existed)."""
    from ..fsutil import read_user_json
    p = Path(run_dir) / FILE
    if not p.is_file():
        return None
    return trace_from_json(read_user_json(p, "a torch_npu trace"), str(p))


def _in_autocast_op(trace: Trace, fid: int) -> bool:
    while 0 <= fid < len(trace.frames):
        if trace.frames[fid].kind == "autocast":
            return True
        fid = trace.frames[fid].parent
    return False


def reaches_autocast_key(trace: Trace, c: Call) -> bool:
    """Whether call ``c`` reached the autocast key itself (no autocast op's frame around it; not a backward op,
    which runs outside autocast)."""
    return not c.backward and not _in_autocast_op(trace, c.frame)


def with_op_frames(trace: Trace, ops: Iterable[str]) -> Trace:
    """``trace`` as recorded with a marker for each of ``ops`` (``op`` or ``op.overload``) at the autocast key (the
    module docstring); calls already in a frame of their own op are left as they are."""
    want = {o.partition(".")[0]: o.partition(".")[2] for o in ops}
    frames = list(trace.frames)
    calls = []
    for c in trace.calls:
        ov = want.get(c.op)
        own = 0 <= c.frame < len(frames) and frames[c.frame].kind == "autocast" and \
            frames[c.frame].op.partition(".")[0] == c.op
        if ov is None or (ov and ov != c.overload) or own or not reaches_autocast_key(trace, c):
            calls.append(c)
            continue
        fid = len(frames)
        key = c.op if c.overload in ("", "default") else f"{c.op}.{c.overload}"
        first = bool(c.in_dtypes) and c.in_dtypes[0] in FLOATS
        pf = c.port_frames or tuple(() for _ in c.srcs)
        fl = [(s, p) for s, d, p in zip(c.srcs, c.in_dtypes, pf) if d in FLOATS]
        frames.append(Frame("autocast", key, c.module, tuple(s for s, _ in fl), tuple(p for _, p in fl),
                            first_float=first, dtype_arg=c.dtype_arg, parent=c.frame))
        calls.append(replace(c, frame=fid, port_frames=tuple(tuple(p) + (fid,) if d in FLOATS else tuple(p)
                                                             for d, p in zip(c.in_dtypes, pf))))
    return Trace(calls, frames, trace.leaves, trace.bn_modules)


__all__ = ["SCHEMA", "FILE", "trace_to_json", "trace_from_json", "write_trace", "read_trace", "with_op_frames",
           "reaches_autocast_key"]
