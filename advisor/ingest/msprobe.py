"""msprobe precision dumps: ``dump.json`` (+ ``dump_tensor_data/``), statistics and tensor modes,
old (``input_args``/``input_kwargs``/``output``) and new (``input``/``output``/``parameters``/
``parameters_grad``) entry layouts, multi-step/rank roots, and the alignment of two dumps.

Tensor files are never unpickled: ``.pt`` through ``torch.load(weights_only=True)``, ``.npy``
through ``np.load(allow_pickle=False)``; ``data_name`` is resolved inside the dump's
``dump_tensor_data/`` folder (next to dump.json; the ``dump_data_dir`` written in dump.json names
the machine where the dump was made and is ignored) and rejected if it escapes it.
"""
from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fsutil import read_user_json, resolve_inside
from ..graph import normalize_dtype

TENSOR_DIR = "dump_tensor_data"
_INPUT_KEYS = ("input_args", "input_kwargs", "input")
_OUTPUT_KEYS = ("output",)
_PARAM_KEYS = ("parameters",)
_PARAM_GRAD_KEYS = ("parameters_grad",)
# msprobe's own gradient entries: ``Module.fc1.Linear.parameters_grad`` (newer versions add a call
# index, ``...parameters_grad.0``) -> {"weight": [record], "bias": [record]}
PARAM_GRAD_ENTRY = re.compile(r"^(?P<module>.+)\.parameters_grad(?:\.\d+)?$")


def param_grad_name(entry: str, index: str) -> str | None:
    """The parameter a gradient record of an msprobe ``<prefix>.<Class>.parameters_grad[.N]`` entry
    belongs to (``Module.fc1.Linear.parameters_grad.0`` + ``weight`` -> ``fc1.weight``: the first
    segment ``Module``/``Cell`` and the class name dropped), or None for other entries."""
    m = PARAM_GRAD_ENTRY.match(entry)
    if m is None:
        return None
    parts = m.group("module").split(".")
    path = parts[1:-1] if len(parts) > 2 else parts[-1:]
    return ".".join(path + [index])


@dataclass
class TensorRecord:
    """One tensor of a dump entry.  ``key`` = ``<role>.<index>`` (``input.0``, ``input.weight``,
    ``input.1.0`` for nested lists, ``output.0``, ``parameter.weight``, ``parameter_grad.weight``)."""

    entry: str
    role: str            # input | output | parameter | parameter_grad
    index: str
    dtype: str           # normalized (fp32, fp16, bf16, int64, bool, ...)
    raw_dtype: str
    shape: tuple[int, ...]
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None
    requires_grad: bool | None = None
    data_name: str | None = None
    path: Path | None = None     # resolved tensor file (None: statistics-only or file missing)

    @property
    def key(self) -> str:
        return f"{self.role}.{self.index}"

    @property
    def full_name(self) -> str:
        return f"{self.entry}.{self.key}"


@dataclass
class Entry:
    name: str
    inputs: list[TensorRecord] = field(default_factory=list)
    outputs: list[TensorRecord] = field(default_factory=list)
    parameters: list[TensorRecord] = field(default_factory=list)
    parameter_grads: list[TensorRecord] = field(default_factory=list)
    # the call's arguments as dumped (non-tensor values included; tensors in ``inputs`` order), for replay
    input_args: Any = None
    input_kwargs: Any = None

    def records(self) -> Iterator[TensorRecord]:
        yield from self.inputs
        yield from self.outputs
        yield from self.parameters
        yield from self.parameter_grads

    @property
    def by_key(self) -> dict[str, TensorRecord]:
        return {r.key: r for r in self.records()}


@dataclass
class Dump:
    path: Path                      # the dump.json
    task: str                       # "statistics" | "tensor" | ...
    level: str
    framework: str
    entries: dict[str, Entry]
    step: int = -1
    rank: int = -1
    missing_files: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def has_tensors(self) -> bool:
        return any(r.path is not None for e in self.entries.values() for r in e.records())

    def __len__(self) -> int:
        return len(self.entries)

    def stats_frame(self) -> pd.DataFrame:
        """One row per tensor record: entry, role, index, key, dtype, shape, max, min, mean, norm, data_name, path."""
        rows = [(r.entry, r.role, r.index, r.key, r.dtype, ",".join(map(str, r.shape)), r.max, r.min, r.mean,
                 r.norm, r.data_name, str(r.path) if r.path else None)
                for e in self.entries.values() for r in e.records()]
        return pd.DataFrame(rows, columns=["entry", "role", "index", "key", "dtype", "shape", "max", "min",
                                           "mean", "norm", "data_name", "path"])


def _f(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None if v is None else float(v)
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).strip())
    except ValueError:
        return None


def _is_tensor(d: Any) -> bool:
    return isinstance(d, dict) and ("dtype" in d and "shape" in d or "data_name" in d) and \
        ("Tensor" in str(d.get("type", "Tensor")) or "tensor" in str(d.get("type", "")) or "ndarray" in str(d.get("type", "")))


class _Ctx:
    def __init__(self, dump_json: Path):
        self.dump_json = dump_json
        self.tensor_dir = dump_json.parent / TENSOR_DIR
        self.missing: list[str] = []


def _record(ctx: _Ctx, entry: str, role: str, index: str, d: dict) -> TensorRecord:
    shape_raw = d.get("shape")
    if shape_raw is None:
        shape_raw = []
    try:
        if not isinstance(shape_raw, (list, tuple)):
            raise TypeError
        shape = tuple(int(x) for x in shape_raw)
    except (TypeError, ValueError, OverflowError):
        raise InputError(ctx.dump_json, f"entry {entry!r} {role}.{index}: shape {shape_raw!r} is not a list of integers") from None
    data_name = d.get("data_name")
    path = None
    if data_name is not None:
        if not isinstance(data_name, str) or not data_name:
            raise InputError(ctx.dump_json, f"entry {entry!r} {role}.{index}: data_name must be a file name")
        if data_name != "-1":
            try:
                p = resolve_inside(ctx.tensor_dir, data_name, what=f"entry {entry!r} data_name")
            except InputError as e:  # named by the folder: say which dump.json holds the name
                raise InputError(ctx.dump_json, e.problem.replace("the folder", TENSOR_DIR)) from None
            try:
                found = p.is_file()
            except OSError as e:  # a name too long for the file system, ...
                raise InputError(ctx.dump_json, f"entry {entry!r} data_name {data_name[:80]!r} is not a usable "
                                                f"file name ({e.strerror or e})") from None
            if found:
                path = p
            else:
                ctx.missing.append(data_name)
    raw = str(d.get("dtype", ""))
    return TensorRecord(entry=entry, role=role, index=index, dtype=normalize_dtype(raw), raw_dtype=raw,
                        shape=shape, max=_f(d.get("Max")), min=_f(d.get("Min")), mean=_f(d.get("Mean")),
                        norm=_f(d.get("Norm")), requires_grad=d.get("requires_grad"),
                        data_name=data_name, path=path)


def _walk(ctx: _Ctx, entry: str, role: str, prefix: str, obj: Any, out: list[TensorRecord], depth: int = 0) -> None:
    if depth > 20:
        raise InputError(ctx.dump_json, f"entry {entry!r}: arguments nested too deeply")
    if _is_tensor(obj):
        out.append(_record(ctx, entry, role, prefix, obj))
    elif isinstance(obj, list):
        for i, x in enumerate(obj):
            _walk(ctx, entry, role, f"{prefix}.{i}" if prefix else str(i), x, out, depth + 1)
    elif isinstance(obj, dict) and "type" not in obj:
        for k, x in obj.items():
            _walk(ctx, entry, role, f"{prefix}.{k}" if prefix else str(k), x, out, depth + 1)


def _entry(ctx: _Ctx, name: str, body: Any) -> Entry:
    if not isinstance(body, dict):
        raise InputError(ctx.dump_json, f"entry {name!r} is not an object")
    e = Entry(name, input_args=body.get("input_args"), input_kwargs=body.get("input_kwargs"))
    if PARAM_GRAD_ENTRY.match(name) and not any(k in body for k in _INPUT_KEYS + _OUTPUT_KEYS + _PARAM_KEYS):
        for k, v in body.items():  # {"weight": [record], ...}: one record per parameter
            _walk(ctx, name, "parameter_grad", str(k), v[0] if isinstance(v, list) and len(v) == 1 else v,
                  e.parameter_grads)
        return e
    n_args = 0
    for k in _INPUT_KEYS:
        if k in body:
            v = body[k]
            if k == "input_kwargs":
                _walk(ctx, name, "input", "", v if isinstance(v, dict) else {}, e.inputs)
            else:
                items = v if isinstance(v, list) else [v]
                for i, x in enumerate(items):
                    _walk(ctx, name, "input", str(n_args + i), x, e.inputs)
                n_args += len(items)
    for k in _OUTPUT_KEYS:
        if k in body:
            v = body[k]
            items = v if isinstance(v, list) else [v]
            for i, x in enumerate(items):
                _walk(ctx, name, "output", str(i), x, e.outputs)
    for keys, role, lst in ((_PARAM_KEYS, "parameter", e.parameters), (_PARAM_GRAD_KEYS, "parameter_grad", e.parameter_grads)):
        for k in keys:
            if isinstance(body.get(k), dict):
                _walk(ctx, name, role, "", body[k], lst)
    return e


def load_dump(path: str | Path) -> Dump:
    """Load one msprobe dump: ``path`` is a dump.json or the folder holding it."""
    p = Path(path)
    if p.is_dir():
        p = p / "dump.json"
    d = read_user_json(p, "an msprobe dump.json")
    if not isinstance(d, dict) or not isinstance(d.get("data"), dict):
        raise InputError(p, 'expected an msprobe dump.json object with a "data" mapping of entries')
    ctx = _Ctx(p)
    entries = {}
    for name, body in d["data"].items():
        entries[str(name)] = _entry(ctx, str(name), body)
    step, rank = _step_rank(p.parent)
    return Dump(path=p, task=str(d.get("task") or ""), level=str(d.get("level") or ""),
                framework=str(d.get("framework") or ""), entries=entries, step=step, rank=rank,
                missing_files=sorted(set(ctx.missing)))


_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"^(rank|proc)(\d+)$")


def _step_rank(folder: Path) -> tuple[int, int]:
    step = rank = -1
    for part in folder.parts[-3:]:
        m = _STEP.match(part)
        if m:
            step = int(m.group(1))
        m = _RANK.match(part)
        if m and m.group(1) == "rank":
            rank = int(m.group(2))
    return step, rank


def dump_files(root: str | Path, rank: int | None = None) -> dict[tuple[int, int], Path]:
    """(step, rank) -> dump.json of every dump under an msprobe dump root (``step<N>/rank<R>|proc<pid>/``),
    found without parsing any (one walk that never enters ``dump_tensor_data/``).  ``rank<R>`` gives R;
    ``proc<pid>`` folders (single-process dumps) are numbered 0, 1, ... in pid order within their step.
    A folder with a dump.json directly is (-1, -1) unless its path names a step/rank.  ``rank``: inside
    ``step<N>`` folders only ``rank<rank>`` (and ``proc*``) folders are entered (one rank of 1,024: no walk
    through the others)."""
    r = Path(root)
    if r.is_file():
        return {_step_rank(r.parent): r}
    if not r.is_dir():
        raise InputError(r, "no such directory (expected an msprobe dump root)")
    files = []
    mine = f"rank{rank}"
    for dirpath, dirnames, filenames in os.walk(r):
        dirnames[:] = sorted(x for x in dirnames if x != TENSOR_DIR)
        if rank is not None and _STEP.match(os.path.basename(dirpath)):
            dirnames[:] = [x for x in dirnames if x == mine or not _RANK.match(x) or x.startswith("proc")]
        if "dump.json" in filenames:
            files.append(Path(dirpath) / "dump.json")
    if not files:
        raise InputError(r, "no dump.json found under this folder (expected step*/rank*|proc*/dump.json)")
    out: dict[tuple[int, int], Path] = {}
    procs: dict[int, list[tuple[int, Path]]] = {}
    for f in sorted(files):
        m = _RANK.match(f.parent.name)
        if m and m.group(1) == "proc":
            procs.setdefault(_step_rank(f.parent)[0], []).append((int(m.group(2)), f))
        else:
            out[_step_rank(f.parent)] = f
    for step, lst in procs.items():
        for i, (_, f) in enumerate(sorted(lst)):
            out.setdefault((step, i), f)
    return out


def load_dumps(files: dict[tuple[int, int], Path]) -> dict[tuple[int, int], Dump]:
    """``dump_files``' (or a subset's) dumps, keyed the same way (a proc folder's dump gets its number as rank)."""
    out = {}
    for (step, rank), f in files.items():
        d = load_dump(f)
        d.rank = rank
        out[(step, rank)] = d
    return out


def load_dump_root(root: str | Path) -> dict[tuple[int, int], Dump]:
    """All dumps under a msprobe dump root, keyed by (step, rank) (``dump_files``)."""
    return load_dumps(dump_files(root))


def dump_steps(path: str | Path) -> dict[int, Dump]:
    """step -> Dump of a dump.json, its rank/proc folder, or a root with ``step*/rank*|proc*/``: per step the
    lowest rank (a step-less dump is step 0)."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or folder")
    out: dict[int, Dump] = {}
    for (step, rank), d in sorted(load_dump_root(p).items(), key=lambda kv: (kv[0][0], kv[0][1])):
        out.setdefault(max(step, 0), d)
    return out


def load_torch_tensor(rec: TensorRecord):
    """The tensor of a record as a torch tensor in its own dtype (int/bool/fp16 kept); never unpickles:
    ``.pt`` through ``torch.load(weights_only=True)``, ``.npy`` through ``np.load(allow_pickle=False)``."""
    import torch
    if rec.path is None:
        raise InputError(rec.data_name or rec.full_name, "no tensor file for this record (statistics-only dump or file missing)")
    p = rec.path
    try:
        if p.suffix == ".npy":
            t = torch.from_numpy(np.ascontiguousarray(np.load(p, allow_pickle=False)))
        elif p.suffix in (".pt", ".pth"):
            with warnings.catch_warnings():  # a refused pickle is our InputError, not torch's warnings
                warnings.simplefilter("ignore")
                t = torch.load(p, map_location="cpu", weights_only=True)
            if not isinstance(t, torch.Tensor):
                raise InputError(p, f"expected one tensor, found {type(t).__name__}")
            t = t.detach()
        else:
            raise InputError(p, "unknown tensor file type (expected .pt or .npy)")
    except InputError:
        raise
    except Exception as e:  # corrupted zip, unpickling refused, bad header, ...
        raise InputError(p, f"cannot load tensor ({type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
    if t.is_complex():
        raise InputError(p, "complex tensors are not supported")
    return t


def load_tensor(rec: TensorRecord) -> np.ndarray:
    """The tensor of a record as a float numpy array (float64 for fp64, else float32); never unpickles."""
    import torch
    t = load_torch_tensor(rec)
    p = rec.path
    try:
        a = (t.double() if t.dtype == torch.float64 else t.float()).numpy()
    except Exception as e:  # noqa: BLE001 - a dtype numpy cannot take
        raise InputError(p, f"cannot load tensor ({type(e).__name__})") from None
    if a.dtype == np.float64:
        return a
    if a.dtype.kind in "fiub":
        return a.astype(np.float32, copy=False)
    raise InputError(p, f"tensor dtype {a.dtype} is not numeric")


@dataclass
class Alignment:
    """Two dumps matched by entry name (and tensors by role.index)."""

    target: Dump
    golden: Dump
    common: list[str]
    only_target: list[str]
    only_golden: list[str]

    def pairs(self) -> Iterator[tuple[str, Entry, Entry]]:
        for n in self.common:
            yield n, self.target.entries[n], self.golden.entries[n]

    def tensor_pairs(self) -> Iterator[tuple[str, str, TensorRecord, TensorRecord]]:
        """(entry, key, target record, golden record) for tensors present in both."""
        for n, te, ge in self.pairs():
            gk = ge.by_key
            for r in te.records():
                g = gk.get(r.key)
                if g is not None:
                    yield n, r.key, r, g

    def frame(self) -> pd.DataFrame:
        """Tensor pairs with both sides' statistics (columns suffixed _t / _g)."""
        t = self.target.stats_frame()
        g = self.golden.stats_frame()
        common = set(self.common)
        t = t[t["entry"].isin(common)]
        g = g[g["entry"].isin(common)]
        return t.merge(g, on=["entry", "role", "index", "key"], suffixes=("_t", "_g"))

    def report(self, limit: int = 10) -> str:
        lines = [f"{len(self.common)} entries in both dumps; {len(self.only_target)} only in target "
                 f"({self.target.path}); {len(self.only_golden)} only in golden ({self.golden.path})"]
        for label, lst in (("only in target", self.only_target), ("only in golden", self.only_golden)):
            if lst:
                more = f" (+{len(lst) - limit} more)" if len(lst) > limit else ""
                lines.append(f"  {label}: " + ", ".join(lst[:limit]) + more)
        return "\n".join(lines)


def align(target: Dump, golden: Dump) -> Alignment:
    """Match entries of two dumps by name (target order kept)."""
    gset = set(golden.entries)
    tset = set(target.entries)
    return Alignment(target, golden,
                     common=[n for n in target.entries if n in gset],
                     only_target=[n for n in target.entries if n not in gset],
                     only_golden=[n for n in golden.entries if n not in tset])


def saturation(d: Dump, limit: float = 65504.0) -> pd.DataFrame:
    """Tensor records whose max or min is exactly +-65504 (fp16 saturation-mode overflow signal)."""
    f = d.stats_frame()
    if f.empty:
        return f
    hit = (f["max"].abs() == limit) | (f["min"].abs() == limit)
    return f[hit.fillna(False)]


def overflow(d: Dump) -> pd.DataFrame:
    """Tensor records whose statistics are inf/nan (overflow in INFNAN mode).  A statistic the
    dump leaves out (``"Mean": null``, e.g. for bool tensors) is unknown, not non-finite."""
    f = d.stats_frame()
    if f.empty:
        return f
    bad = [any(v is not None and not math.isfinite(v) for v in (r.max, r.min, r.mean, r.norm))
           for e in d.entries.values() for r in e.records()]
    return f[np.array(bad, dtype=bool)]
