"""A recorded dump entry's call arguments and tensors, for replay: an msprobe record decoded into the Python value
the op was called with (tensors as ``Slot`` placeholders, ``decode``) and linked back to values (``relink``), and the
recorded tensors of a record (``tensor_of``) and of an entry's inputs (``input_tensors``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .compare.dumps import DumpView, is_tensor_record


class Undecodable(Exception):
    pass


@dataclass(frozen=True)
class Slot:
    """Placeholder for the i-th tensor input of an op in its decoded argument structure."""

    i: int


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def decode(obj: Any, slots: list) -> Any:
    """A dump record (msprobe layout) -> the Python value, tensors replaced by Slot."""
    import torch
    if obj is None:
        return None
    if isinstance(obj, list):
        return [decode(x, slots) for x in obj]
    if not isinstance(obj, Mapping):
        raise Undecodable(f"argument {obj!r}")
    if is_tensor_record(obj):
        slots.append(obj)
        return Slot(len(slots) - 1)
    t = str(obj.get("type", ""))
    v = obj.get("value")
    if t in _SCALARS:
        if t == "float" and isinstance(v, str):   # non-finite floats written as strings
            return float(v)
        return _SCALARS[t](v) if v is not None else None
    if t in ("torch.dtype", "torch.device", "torch.layout", "torch.memory_format") and isinstance(v, str):
        if t == "torch.device":
            return torch.device(v)
        attr = v.replace("torch.", "")
        if hasattr(torch, attr):
            return getattr(torch, attr)
    if t == "slice" and isinstance(v, list) and len(v) == 3:
        return slice(*v)
    if t in ("ellipsis", "Ellipsis"):
        return Ellipsis
    raise Undecodable(f"argument of type {t or '?'}")


def relink(obj: Any, values: list) -> Any:
    if isinstance(obj, Slot):
        return values[obj.i]
    if isinstance(obj, list):
        return [relink(x, values) for x in obj]
    return obj


def tensor_of(view: DumpView, rec: Mapping):
    """The recorded tensor of a dump record as a torch tensor in its own dtype, or None."""
    import numpy as np
    import torch
    if "_rec" in rec:       # a record read by ingest: its tensor file, dtype kept
        r = rec["_rec"]
        if getattr(r, "path", None) is None:
            return None
        from .ingest.msprobe import load_torch_tensor
        return load_torch_tensor(r)
    x = view.tensor(rec) if view.has_tensors(rec) else None
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    return x.detach() if isinstance(x, torch.Tensor) else None


def input_tensors(view: DumpView, entry: str) -> list:
    """The recorded tensors of an entry's tensor inputs (None: statistics only), in the order of the
    replay's argument slots."""
    body = view.entries.get(entry)
    if not isinstance(body, Mapping):
        return []
    recs: list = []
    if "_inputs" in body:
        recs = [r for _, r in view.inputs(entry)]
    else:
        try:
            for a in body.get("input_args") or []:
                decode(a, recs)
            for v in (body.get("input_kwargs") or {}).values():
                decode(v, recs)
        except Undecodable:
            return []
    return [tensor_of(view, r) for r in recs]


__all__ = ["Slot", "Undecodable", "decode", "relink", "tensor_of", "input_tensors"]
