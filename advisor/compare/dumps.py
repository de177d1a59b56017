"""A thin, uniform view of msprobe dumps for the compare stage.

``DumpView`` wraps whatever produced the entries: the ingest reader's dump objects
(``advisor.ingest.msprobe``, the only dump reader) or an in-memory dict (tests).

Tensor records are msprobe's dicts (``dtype``, ``shape``, ``Max``, ``Min``, ``Mean``, ``Norm``,
``data_name``); an in-memory record may carry the tensor itself under ``"tensor"``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping


def is_tensor_record(x: Any) -> bool:
    if not isinstance(x, Mapping):
        return False
    if "tensor" in x or "data_name" in x:
        return True
    t = str(x.get("type", ""))
    return ("Tensor" in t or "tensor" in t) and "dtype" in x


def flat_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, Mapping]]:
    """(position label, record) of every tensor record in a nested args structure, in order.
    Labels follow msprobe's file naming: ``0``, ``2``, ``3.1`` (nested) ..."""
    if isinstance(obj, Mapping) and not is_tensor_record(obj):
        for k, v in obj.items():
            yield from flat_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flat_tensors(v, f"{prefix}.{i}" if prefix else str(i))
    elif is_tensor_record(obj):
        yield prefix, obj


@dataclass
class DumpView:
    """Entries of one dump (one step, one rank): name -> {input_args, input_kwargs, output, ...}; records of
    the ingest reader carry it under ``_rec`` (its tensor file is read by ingest, never unpickled), in-memory
    records the tensor itself under ``tensor``."""

    entries: dict[str, Mapping]
    source: str = ""                    # path shown in messages

    def has_tensors(self, rec: Mapping) -> bool:
        if "_rec" in rec:
            return rec["_rec"].path is not None
        return "tensor" in rec

    def tensor(self, rec: Mapping):
        """The tensor of a record, or None for statistics-only records."""
        if "tensor" in rec:
            return rec["tensor"]
        r = rec.get("_rec")
        if r is None or r.path is None:
            return None
        from ..ingest.msprobe import load_tensor
        return load_tensor(r)   # not cached: a run's tensors may not fit in memory together

    def outputs(self, entry: str) -> list[tuple[str, Mapping]]:
        e = self.entries.get(entry)
        if e and "_outputs" in e:
            return list(e["_outputs"])
        return list(flat_tensors(e.get("output", []))) if e else []

    def inputs(self, entry: str) -> list[tuple[str, Mapping]]:
        e = self.entries.get(entry)
        if not e:
            return []
        if "_inputs" in e:
            return list(e["_inputs"])
        return list(flat_tensors(e.get("input_args", []))) + [
            ("kw." + k, r) for k, r in flat_tensors(e.get("input_kwargs", {}))]

    def param_grads(self, entry: str) -> list[tuple[str, Mapping]]:
        """(parameter key, record) of an msprobe ``...parameters_grad`` entry
        (``{"weight": [record], "bias": [record]}``)."""
        e = self.entries.get(entry)
        if not e:
            return []
        if "_param_grads" in e:
            return list(e["_param_grads"])
        out = []
        for k, v in e.items():
            v = v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v
            out.extend(flat_tensors(v, str(k)) if not is_tensor_record(v) else [(str(k), v)])
        return out


def from_ingest(d: Any) -> DumpView:
    """Adapt an ``advisor.ingest.msprobe.Dump`` (entries of ``Entry`` with ``TensorRecord`` lists)
    to a DumpView; records become msprobe-style dicts carrying the ingest record under ``_rec``."""
    if isinstance(d, DumpView):
        return d
    entries: dict[str, dict] = {}
    for name, e in d.entries.items():
        def conv(r):
            return {"dtype": r.raw_dtype or r.dtype, "shape": list(r.shape), "Max": r.max, "Min": r.min,
                    "Mean": r.mean, "Norm": r.norm, "data_name": r.data_name, "_rec": r}
        entries[name] = {"_inputs": [(r.index, conv(r)) for r in e.inputs],
                         "_outputs": [(r.index, conv(r)) for r in e.outputs],
                         "_param_grads": [(r.index, conv(r)) for r in e.parameter_grads],
                         "input_args": e.input_args, "input_kwargs": e.input_kwargs}
    return DumpView(entries, str(d.path))


def as_steps(d: Any) -> dict[int, DumpView]:
    """Normalise a dump argument: DumpView / ingest dump / {step: dump} / path -> {step: DumpView}."""
    if d is None:
        return {}
    if isinstance(d, (str, Path)):
        from ..ingest.msprobe import dump_steps
        return {s: from_ingest(v) for s, v in dump_steps(d).items()}
    if isinstance(d, DumpView):
        return {0: d}
    if isinstance(d, Mapping) and d and all(isinstance(k, tuple) for k in d):  # ingest load_dump_root
        out: dict[int, DumpView] = {}
        for (step, _rank), v in sorted(d.items(), key=lambda kv: kv[0]):
            out.setdefault(max(int(step), 0), from_ingest(v))
        return out
    if isinstance(d, Mapping) and d and all(isinstance(k, int) for k in d):
        return {int(k): as_steps(v)[0] if not isinstance(v, DumpView) else v for k, v in d.items()}
    return {0: from_ingest(d)}
