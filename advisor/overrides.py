"""Per-op precision overrides: ATC's ``--keep_dtype`` and ``--customize_dtypes`` files.

``Overrides`` is the typed value ``semantics.plan`` takes (and a search can vary: it is a frozen,
hashable value with ``with_keep`` / ``without_keep`` / ``with_custom``).  The two file formats are
ATC's own (sources in docs/semantics.md, "Per-op overrides"):

``--keep_dtype FILE``: one entry per line, whitespace around it trimmed, empty lines skipped:
    ``OpName``              the op of that name keeps the original model's precision
    ``OpType::TypeName``    every op of that GE type does (``TypeName`` must be PascalCase, else
                            GE rejects the file: E10003)
  GE (``KeepDtypeFunc``) matches the whole trimmed line; there is no comment syntax (a ``#`` line is
  an op name that matches nothing).  Names and types not in the graph are only a warning in GE.

``--customize_dtypes FILE``: one entry per line:
    ``OpName::InputDtype:dt1,dt2,...,OutputDtype:dt1,...``
    ``OpType::TypeName:InputDtype:dt1,...,OutputDtype:dt1,...``
  read as the fusion engine reads it (``OpCustDtypesConfigParser``): a leading ``OpType::`` makes it a
  type entry; the name / type is the text up to the first ``:``; ``InputDtype`` must come before
  ``OutputDtype`` and at least one of them must be there; dtypes are comma-separated, case-insensitive
  GE names (``float``, ``float16``, ``bfloat16``, ``int8``, ...; ``DT_`` + upper case must be a GE
  DataType); an empty slot (``,,``) leaves that port unset.  GE rejects the whole file for a line it
  cannot parse (an empty line too); a name or type given twice keeps the first (GE warns).

Readers go through ``advisor.fsutil`` (FIFOs, devices, binary data, non-UTF-8 refused) and raise one
``InputError`` line naming the file, the line and the problem.  ``read_keep_dtype_text`` /
``read_customize_text`` return a ``Document`` with every entry's line (for ``advisor lint``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping

from .errors import InputError
from .fsutil import read_user_text

KEEP_WHAT = "an ATC --keep_dtype file"
CUSTOM_WHAT = "an ATC --customize_dtypes file"
OPTYPE_PREFIX = "OpType::"
MAX_LINE = 1023          # the fusion engine reads customize lines into a 1024-byte buffer (getline)

# GE DataType names (metadef TypeUtils kStringTodataTypeMap, without the DT_ prefix) -> advisor's
# canonical dtype names (float ones) or the lower-case GE name (the others: not emulated)
GE_DTYPES: dict[str, str] = {
    "FLOAT": "fp32", "FLOAT32": "fp32", "FLOAT16": "fp16", "BFLOAT16": "bf16", "BF16": "bf16", "DOUBLE": "fp64",
    **{n: n.lower() for n in (
        "INT4", "INT8", "INT16", "INT32", "INT64", "UINT1", "UINT8", "UINT16", "UINT32", "UINT64", "BOOL",
        "STRING", "DUAL", "DUAL_SUB_INT8", "DUAL_SUB_UINT8", "COMPLEX32", "COMPLEX64", "COMPLEX128", "QINT8",
        "QINT16", "QINT32", "QUINT8", "QUINT16", "RESOURCE", "STRING_REF", "VARIANT", "INT2", "UINT2",
        "HIFLOAT8", "FLOAT8_E5M2", "FLOAT8_E4M3FN", "FLOAT8_E8M0")},
}
EMULATED_DTYPES = frozenset({"fp32", "fp16", "bf16", "fp64"})
# canonical -> the spelling written back into a customize_dtypes file
_GE_SPELLING = {"fp32": "float", "fp16": "float16", "bf16": "bfloat16", "fp64": "double"}
_PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")


# ---------------------------------------------------------------------- the value semantics takes
@dataclass(frozen=True)
class CustomDtypes:
    """The dtypes one customize_dtypes entry gives: per input / output index, a canonical dtype name
    (``fp16``, ``fp32``, ``bf16``, ``int8``, ...) or None (slot left empty: not customized)."""

    inputs: tuple[str | None, ...] = ()
    outputs: tuple[str | None, ...] = ()

    def text(self) -> str:
        """``InputDtype:...,OutputDtype:...`` in ATC's spelling."""
        def spell(xs):
            return ",".join("" if x is None else _GE_SPELLING.get(x, x) for x in xs)
        parts = []
        if self.inputs:
            parts.append(f"InputDtype:{spell(self.inputs)}")
        if self.outputs:
            parts.append(f"OutputDtype:{spell(self.outputs)}")
        return ",".join(parts)


@dataclass(frozen=True)
class Overrides:
    """Per-instance precision overrides (ATC ``--keep_dtype`` / ``--customize_dtypes``).

    ``keep_names`` / ``keep_types``: ops (by node name) / GE op types that keep their original dtype.
    ``customize``: ``((kind, key, CustomDtypes), ...)`` with kind ``"name"`` or ``"type"``, sorted: a
    hashable value, so a search can vary overrides like mixlists.  A name entry wins over a type entry
    for the same op; customize wins over keep (ATC's documented precedence)."""

    keep_names: frozenset[str] = frozenset()
    keep_types: frozenset[str] = frozenset()
    customize: tuple[tuple[str, str, CustomDtypes], ...] = ()
    sources: tuple[str, ...] = field(default=(), compare=False)   # the files read, for messages

    def __post_init__(self):
        object.__setattr__(self, "keep_names", frozenset(self.keep_names))
        object.__setattr__(self, "keep_types", frozenset(self.keep_types))
        object.__setattr__(self, "customize", tuple(sorted(self.customize, key=lambda t: (t[0], t[1]))))

    @cached_property
    def custom_names(self) -> dict[str, CustomDtypes]:
        return {k: c for kind, k, c in self.customize if kind == "name"}

    @cached_property
    def custom_types(self) -> dict[str, CustomDtypes]:
        return {k: c for kind, k, c in self.customize if kind == "type"}

    def is_empty(self) -> bool:
        return not (self.keep_names or self.keep_types or self.customize)

    def kept(self, name: str, op_type: str) -> bool:
        return name in self.keep_names or op_type in self.keep_types

    def custom(self, name: str, op_type: str) -> CustomDtypes | None:
        """The customize entry for an op (its name's entry wins over its type's)."""
        c = self.custom_names.get(name)
        return c if c is not None else self.custom_types.get(op_type)

    def resolve(self, names: list[str], types: list[str], is_op: list[bool]) -> tuple[frozenset, dict]:
        """(indices of kept ops, index -> CustomDtypes) among nodes ``names`` / ``types`` (ops only: ``is_op``);
        ATC's matching: a name entry matches the node of that name, a type entry every node of that GE type."""
        keep, custom = set(), {}
        for i, (n, t) in enumerate(zip(names, types)):
            if not is_op[i]:
                continue
            if self.kept(n, t):
                keep.add(i)
            cd = self.custom(n, t)
            if cd is not None:
                custom[i] = cd
        return frozenset(keep), custom

    # ------------------------------------------------------------------ variations (for a search)
    def with_keep(self, names: Iterable[str] = (), types: Iterable[str] = ()) -> "Overrides":
        return Overrides(self.keep_names | set(names), self.keep_types | set(types), self.customize, self.sources)

    def without_keep(self, names: Iterable[str] = (), types: Iterable[str] = ()) -> "Overrides":
        return Overrides(self.keep_names - set(names), self.keep_types - set(types), self.customize, self.sources)

    def with_custom(self, kind: str, key: str, dtypes: CustomDtypes | None) -> "Overrides":
        """Set (or with ``dtypes=None`` remove) the customize entry of a name or a type."""
        if kind not in ("name", "type"):
            raise ValueError(f"kind must be 'name' or 'type', not {kind!r}")
        rest = [t for t in self.customize if (t[0], t[1]) != (kind, key)]
        if dtypes is not None:
            rest.append((kind, key, dtypes))
        return Overrides(self.keep_names, self.keep_types, tuple(rest), self.sources)

    def merged(self, other: "Overrides | None") -> "Overrides":
        """Both files' entries (another file's customize entry for the same key replaces this one's)."""
        if other is None or other.is_empty():
            return self
        cust = {(k, n): c for k, n, c in self.customize}
        cust.update({(k, n): c for k, n, c in other.customize})
        return Overrides(self.keep_names | other.keep_names, self.keep_types | other.keep_types,
                         tuple((k, n, c) for (k, n), c in cust.items()), self.sources + other.sources)

    # ------------------------------------------------------------------ files
    def keep_dtype_text(self) -> str:
        """The --keep_dtype file (names, then ``OpType::`` lines), or "" when nothing is kept."""
        lines = sorted(self.keep_names) + [OPTYPE_PREFIX + t for t in sorted(self.keep_types)]
        return "".join(f"{ln}\n" for ln in lines)

    def customize_text(self) -> str:
        lines = [f"{OPTYPE_PREFIX}{k}:{c.text()}" if kind == "type" else f"{k}::{c.text()}"
                 for kind, k, c in self.customize]
        return "".join(f"{ln}\n" for ln in lines)

    def to_dict(self) -> dict:
        return {"keep_names": sorted(self.keep_names), "keep_types": sorted(self.keep_types),
                "customize": [{"kind": kind, "key": k, "inputs": list(c.inputs), "outputs": list(c.outputs)}
                              for kind, k, c in self.customize]}


NO_OVERRIDES = Overrides()


# ---------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Entry:
    """One line of a keep_dtype / customize_dtypes file."""

    line: int
    kind: str                      # "name" | "type"
    key: str                       # op name or GE op type
    dtypes: CustomDtypes | None = None
    column: int = 1


@dataclass
class Document:
    """A keep_dtype or customize_dtypes file as read: entries with their lines, and the lines GE warns
    about (``warnings``: (line, code, message)) without rejecting the file."""

    source: str
    entries: list[Entry]
    warnings: list[tuple[int, str, str]] = field(default_factory=list)

    def overrides(self) -> Overrides:
        keep_n, keep_t, cust = set(), set(), {}
        for e in self.entries:
            if e.dtypes is None:
                (keep_t if e.kind == "type" else keep_n).add(e.key)
            else:
                cust.setdefault((e.kind, e.key), e.dtypes)   # GE keeps the first entry of a key
        return Overrides(frozenset(keep_n), frozenset(keep_t),
                         tuple((k, n, c) for (k, n), c in cust.items()), (self.source,))


def read_text(path: str | Path, what: str) -> str:
    """A user's text file through fsutil; an empty file is allowed (it overrides nothing)."""
    return read_user_text(path, what, allow_empty=True)


def _lines(text: str) -> list[str]:
    # C++ getline splits on "\n" only; a Windows "\r" is trimmed with the other whitespace
    return text.split("\n")


def read_keep_dtype_text(text: str, source: str = "<keep_dtype>") -> Document:
    """Parse a --keep_dtype file's text (GE's ``KeepDtypeFunc``); InputError for what GE rejects."""
    entries: list[Entry] = []
    warnings: list[tuple[int, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for no, raw in enumerate(_lines(text), 1):
        if not raw:
            continue
        s = raw.strip()
        if not s:
            warnings.append((no, "blank-line", "a line of only spaces is an op name \"\" to GE: it matches nothing"))
            continue
        col = raw.index(s[0]) + 1
        if s.startswith(OPTYPE_PREFIX):
            t = s[len(OPTYPE_PREFIX):]
            if not _PASCAL.match(t):
                raise InputError(source, f"line {no}: op type {t!r} after OpType:: is not a GE op type (it must be "
                                         "PascalCase, e.g. OpType::MatMulV2); GE rejects the file (E10003)")
            kind, key = "type", t
        else:
            if OPTYPE_PREFIX in s:
                warnings.append((no, "misplaced-optype", f"'OpType::' must start the line; GE reads {s!r} as an op name"))
            if s.startswith(("#", "//")):
                warnings.append((no, "comment", "GE has no comments in this file: the line is read as an op name"))
            kind, key = "name", s
        if (kind, key) in seen:
            warnings.append((no, "duplicate", f"{key!r} is listed twice"))
            continue
        seen.add((kind, key))
        entries.append(Entry(no, kind, key, None, col))
    return Document(source, entries, warnings)


def _dtype_list(s: str, source: str, no: int) -> tuple[str | None, ...]:
    items = s.split(",")
    if items and items[-1].strip() == "":
        items = items[:-1]              # "float16,float16," before OutputDtype: the separating comma
    out: list[str | None] = []
    for it in items:
        v = it.strip()
        if not v:
            out.append(None)
            continue
        canon = GE_DTYPES.get(v.upper())    # GE looks up "DT_" + upper case
        if canon is None:
            raise InputError(source, f"line {no}: {v!r} is not a GE data type (float, float16, bfloat16, int8, ...); "
                                     "GE rejects the file")
        out.append(canon)
    return tuple(out)


def read_customize_text(text: str, source: str = "<customize_dtypes>") -> Document:
    """Parse a --customize_dtypes file's text (the fusion engine's ``OpCustDtypesConfigParser``);
    InputError naming the line for what GE rejects."""
    entries: list[Entry] = []
    warnings: list[tuple[int, str, str]] = []
    seen: set[tuple[str, str]] = set()
    lines = _lines(text)
    if lines and lines[-1] == "":
        lines = lines[:-1]              # the final newline ends the last line; it is not an empty line
    for no, raw in enumerate(lines, 1):
        if len(raw.encode("utf-8")) > MAX_LINE:
            raise InputError(source, f"line {no} is longer than {MAX_LINE} bytes: GE stops reading the file there "
                                     "and ignores every later line")
        s = raw
        kind = "name"
        if s.startswith(OPTYPE_PREFIX):
            s, kind = s[len(OPTYPE_PREFIX):], "type"
        s = s.strip()
        pos = s.find(":")
        if pos <= 0:
            what = "an empty line" if not s else f"{s[:60]!r} has no 'Name::InputDtype:...' form"
            raise InputError(source, f"line {no}: {what}; GE rejects the whole file (expected "
                                     "OpName::InputDtype:dt,...,OutputDtype:dt,... or OpType::Type:InputDtype:...)")
        key = s[:pos]
        pi, po = s.find("InputDtype"), s.find("OutputDtype")
        if pi < 0 and po < 0:
            raise InputError(source, f"line {no}: neither InputDtype nor OutputDtype given; GE rejects the file")
        if pi >= 0 and po >= 0 and pi > po:
            raise InputError(source, f"line {no}: InputDtype must come before OutputDtype; GE rejects the file")
        ins: tuple[str | None, ...] = ()
        outs: tuple[str | None, ...] = ()
        if pi >= 0:
            body = s[pi + len("InputDtype"):po if po >= 0 else len(s)]
            ins = _dtype_list(_after_colon(body, "InputDtype", source, no), source, no)
        if po >= 0:
            outs = _dtype_list(_after_colon(s[po + len("OutputDtype"):], "OutputDtype", source, no), source, no)
        if kind == "type" and not _PASCAL.match(key):
            warnings.append((no, "bad-type", f"{key!r} is not a GE op type name (PascalCase): it matches no op"))
        if (kind, key) in seen:
            warnings.append((no, "duplicate", f"{key!r} is customized twice; GE keeps the first entry"))
            continue
        seen.add((kind, key))
        entries.append(Entry(no, kind, key, CustomDtypes(ins, outs)))
    return Document(source, entries, warnings)


def _after_colon(body: str, word: str, source: str, no: int) -> str:
    if not body.startswith(":"):
        raise InputError(source, f"line {no}: {word} must be followed by ':' and the dtypes; GE rejects the file")
    return body[1:]


def read_keep_dtype(path: str | Path) -> Document:
    return read_keep_dtype_text(read_text(path, KEEP_WHAT), str(path))


def read_customize(path: str | Path) -> Document:
    return read_customize_text(read_text(path, CUSTOM_WHAT), str(path))


def load(keep_dtype: str | Path | None = None, customize: str | Path | None = None) -> Overrides:
    """The Overrides of a --keep_dtype and a --customize_dtypes file (either may be None)."""
    o = NO_OVERRIDES
    if keep_dtype:
        o = o.merged(read_keep_dtype(keep_dtype).overrides())
    if customize:
        o = o.merged(read_customize(customize).overrides())
    return o


def from_files_in(meta: Mapping) -> Overrides:
    """The Overrides a run recorded (run.json ``keep_dtype`` / ``customize_dtypes``: file names the
    reader has already resolved inside the run directory)."""
    return load(meta.get("keep_dtype") or None, meta.get("customize_dtypes") or None)


def lowest_float(dtypes: Iterable[str | None]) -> str | None:
    """The lowest-precision float dtype among ``dtypes`` (fp16/bf16 < fp32 < fp64), or None."""
    rank = {"fp16": 0, "bf16": 0, "fp32": 1, "fp64": 2}
    best = None
    for d in dtypes:
        if d in rank and (best is None or rank[d] < rank[best]):
            best = d
    return best


__all__ = ["Overrides", "CustomDtypes", "NO_OVERRIDES", "Document", "Entry", "load", "read_keep_dtype",
           "read_customize", "read_keep_dtype_text", "read_customize_text", "from_files_in", "lowest_float",
           "GE_DTYPES", "EMULATED_DTYPES", "KEEP_WHAT", "CUSTOM_WHAT"]
