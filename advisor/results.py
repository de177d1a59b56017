"""Typed results that stages hand each other and save as JSON, read back as the same objects.

A result type is a dataclass; ``to_json`` writes one JSON key per field, named as the field, and ``from_json``
reads it back by the fields' type hints (nested dataclasses, ``list``/``tuple``/``dict`` of them, ``X | None``,
numbers, strings, ``Any``) and the codecs of other value types (``register_codec``: a mixlist is its
modify_mixlist object, an edit its sentence).  A *top-level* result (recommendation.json, ...) is registered
with ``@result(schema, version)``: its JSON object starts with ``schema`` and ``version``, and ``load`` picks
the type by ``schema``.  Adding a result type: a dataclass, ``@result("advisor.<name>/1", version=1)`` if it is
a file of its own, codecs for any new value type -- nothing else (the idea of Polygraphy's
``@Encoder.register``).

Field metadata (``field(metadata=...)``): ``OMIT_NONE`` (the key is left out while the value is None),
``OMIT_EMPTY`` (left out while empty), ``TRANSIENT`` (kept in memory, never written).  A class may name
keys written beside a field for readers (``DERIVED = {"edit": lambda r: {...}}``: written after ``edit``,
ignored when reading).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Mapping

from .errors import InputError

OMIT_NONE = {"omit": "none"}
OMIT_EMPTY = {"omit": "empty"}
TRANSIENT = {"omit": "always"}

_CODECS: dict[type, tuple[Callable[[Any], Any], Callable[[Any, str], Any]]] = {}
RESULT_TYPES: dict[str, type] = {}


def register_codec(tp: type, encode: Callable[[Any], Any], decode: Callable[[Any, str], Any]) -> None:
    """How values of ``tp`` (not a dataclass of this module's kind) are written and read (``decode(value,
    where)``, ``where`` naming the place in the file for error messages)."""
    _CODECS[tp] = (encode, decode)


def result(schema: str, version: int) -> Callable[[type], type]:
    """Register a top-level result type: its JSON starts with ``schema`` and ``version``."""
    def deco(cls: type) -> type:
        cls.SCHEMA, cls.VERSION = schema, version
        RESULT_TYPES[schema.split("/")[0]] = cls
        return cls
    return deco


# ---------------------------------------------------------------------- writing
def to_json(obj: Any) -> Any:
    """``obj`` as JSON-ready data (dicts, lists, strings, numbers, None)."""
    for tp, (enc, _) in _CODECS.items():
        if isinstance(obj, tp):
            return enc(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        if hasattr(type(obj), "SCHEMA"):
            out["schema"], out["version"] = type(obj).SCHEMA, type(obj).VERSION
        derived = getattr(type(obj), "DERIVED", {})
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            omit = f.metadata.get("omit")
            if omit == "always" or (omit == "none" and v is None) or (omit == "empty" and not v):
                continue
            out[f.name] = to_json(v)
            if f.name in derived:
                out.update(to_json(derived[f.name](obj)))
        return out
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_json(v) for v in obj]
    return obj


# ---------------------------------------------------------------------- reading
def from_json(tp: Any, data: Any, where: str = "the file") -> Any:
    """The value of type ``tp`` that ``to_json`` wrote as ``data``; a value of the wrong shape is an
    InputError naming ``where`` and the key."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return data
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if data is None:
            return None
        return from_json(args[0], data, where) if len(args) == 1 else data
    if data is None:
        raise InputError(where, "is null, expected a value")
    if tp in _CODECS:
        return _CODECS[tp][1](data, where)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, data, where)
    if origin in (list, tuple, set, frozenset):
        if not isinstance(data, list):
            raise InputError(where, f"must be a list, not {type(data).__name__}")
        (arg, *_rest) = typing.get_args(tp) or (Any,)
        vals = [from_json(arg, v, f"{where}[{i}]") for i, v in enumerate(data)]
        return vals if origin is list else origin(vals)
    if origin is dict or tp is dict:
        if not isinstance(data, dict):
            raise InputError(where, f"must be an object, not {type(data).__name__}")
        vt = (typing.get_args(tp) or (str, Any))[1]
        return {k: from_json(vt, v, f"{where}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise InputError(where, f"must be a number, not {data!r:.40}")
        return float(data)
    if tp in (int, bool, str):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise InputError(where, f"must be {tp.__name__}, not {data!r:.40}")
        return data
    return data


def _dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise InputError(where, f"must be an object, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("omit") == "always" or not f.init:
            continue
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(where, f"lacks {f.name!r}")
            continue
        kw[f.name] = from_json(hints[f.name], data[f.name], f"{where}.{f.name}")
    return cls(**kw)


def load(data: Mapping, where: str = "the file") -> Any:
    """A top-level result by its ``schema`` (``@result``)."""
    schema = str(data.get("schema", "")) if isinstance(data, Mapping) else ""
    cls = RESULT_TYPES.get(schema.split("/")[0])
    if cls is None:
        raise InputError(where, f"schema {schema!r} is not a result advisor knows")
    return cls.from_dict(data, where) if hasattr(cls, "from_dict") else from_json(cls, dict(data), where)


__all__ = ["OMIT_NONE", "OMIT_EMPTY", "TRANSIENT", "register_codec", "result", "to_json", "from_json", "load",
           "RESULT_TYPES"]
