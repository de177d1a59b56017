"""``advisor lint``: what is wrong with a modify_mixlist file, before GE silently ignores it.

Findings (code, severity), each at the line and column of its own array element (or key):
  invalid-json (error)      not JSON at all, with line/column (GE cannot load the file)
  comments (error)          // or /* */ or # comments: GE's JSON parser rejects them
  bad-structure (error)     wrong keys or value types
  duplicate-key (error)     a key given twice ("black-list" twice): JSON keeps one, the other is lost
  conflict (error)          a type's edits are none of GE's 11 templates (VerifyMixlist: two to-adds, to-add and
                            to-remove in one list, to-remove from two lists, gray-list to-remove alone): GE rejects
                            the whole file; the message is GE's own
  unknown-op-type (warning) not an op type of the lists in use: matches nothing (did-you-mean given)
  graph-engine-op (warning) a graph-engine/control node type (Data, LabelSet, Recv, ...): no effect
  other-chip (warning)      an op type of another chip only: no effect on this one
  no-op-add (warning)       to-add to the list the type is already in by default, and every gray-list to-add
                            (GE's GetPrecisionPolicy ignores it)
  no-op-remove (warning)    to-remove from a list the type is not in
  duplicate (info)          the same type twice in one array
ATC --keep_dtype / --customize_dtypes files (``lint_overrides_file``): rejected (error: GE rejects the file),
  unknown-op-type, not-in-graph (with ``--profile``: op names/types not in the run's graph, did-you-mean from
  the graph's names), comment / misplaced-optype / blank-line (GE reads the line as an op name), duplicate,
  not-emulated (integer customize dtypes).

Cost: one JSON decode, one scan for string positions, and per entry a few set look-ups; what depends
only on the op type (known? which chips? did-you-mean?) is computed once per distinct type.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import InputError
from .fsutil import read_user_text
from .graph import no_gc
from .mixlist import LIST_KEYS, WHAT, JsonSyntaxError, read_text, strip_json_comments
from .oplists import GRAPH_ENGINE_TYPES, GRAY, OpLists, chip_types, suggest

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}

__all__ = ["Finding", "SEVERITY_ORDER", "lint_text", "lint_file", "suggest", "lint_overrides_text",
           "lint_overrides_file"]


@dataclass(slots=True)
class Finding:
    file: str
    code: str
    severity: str
    message: str
    line: int | None = None
    column: int | None = None
    op_type: str | None = None
    suggestion: str | None = None

    def to_dict(self) -> dict:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    def __str__(self) -> str:
        pos = f":{self.line}" + (f":{self.column}" if self.column else "") if self.line else ""
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        return f"{self.file}{pos}: {self.severity}: [{self.code}] {self.message}{hint}"


def lint_text(text: str, lists: OpLists, source: str = "<text>") -> list[Finding]:
    """All findings for one mixlist's text against ``lists`` (the chip's default lists or an ops-info
    file's), in file order."""
    out: list[Finding] = []
    clean, had_comments = strip_json_comments(text)
    if had_comments:
        m = re.search(r"//|/\*|#", text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        out.append(Finding(source, "comments", "error",
                           "the file has comments; GE's JSON parser rejects them (remove them)", line))
    try:
        doc = read_text(clean, source)
    except JsonSyntaxError as e:
        what = "not JSON" if not clean.lstrip().startswith(("{", "[")) else "invalid JSON"
        out.append(Finding(source, "invalid-json", "error", f"{what}: {e.reason}",
                           e.line, e.column))
        return out
    for p in doc.problems:
        out.append(Finding(source, p.code, "error", p.message, p.line, p.column, p.op_type))
    if any(p.code == "bad-structure" for p in doc.problems):
        return out
    rejected = {p.op_type for p in doc.problems if p.code == "conflict"}
    with no_gc():       # one finding per entry at most; no cycles
        _lint_entries(doc.entries, lists, source, out, rejected)
    return out


def _lint_entries(entries: list, lists: OpLists, source: str, out: list[Finding], rejected: set) -> None:
    """Per-entry findings; ``rejected``: types GE rejects the file for (their no-op findings would be moot)."""
    where = lists.label
    chips = chip_types()
    verdict: dict[str, tuple] = {}          # per distinct type: (list, known, other chips, suggestion)
    counts: dict[tuple[str, str, str], int] = {}
    for e in entries:
        t, key, action = e.op_type, e.key, e.action
        at = f"{key}.{action}"
        n = counts[(key, action, t)] = counts.get((key, action, t), 0) + 1
        if n == 2:
            out.append(Finding(source, "duplicate", "info", f"{at} lists {t!r} twice", e.line, e.column, t))
        if n >= 2:
            continue
        v = verdict.get(t)
        if v is None:
            known = lists.is_known(t)
            others = [s for s, ks in chips.items() if t in ks and s != lists.soc] if not known else []
            sug = suggest(t, lists) if not known and t not in GRAPH_ENGINE_TYPES else None
            v = verdict[t] = (lists.list_of(t), known, others, sug)
        now, known, others, sug = v
        if t in GRAPH_ENGINE_TYPES:
            out.append(Finding(source, "graph-engine-op", "warning",
                               f"{at}: {t!r} is a graph-engine/control node type, not an AI Core op type; listing "
                               f"it has no effect", e.line, e.column, t))
        elif not known:
            if others and not sug:
                out.append(Finding(source, "other-chip", "warning",
                                   f"{at}: {t!r} is not an op type on {where} (it exists on {', '.join(others)}); "
                                   f"no effect here", e.line, e.column, t))
            else:
                out.append(Finding(source, "unknown-op-type", "warning",
                                   f"{at}: {t!r} is not an op type on {where}; it matches nothing (types are "
                                   f"exact and case-sensitive)", e.line, e.column, t, sug))
        elif t in rejected:
            continue
        elif action == "to-add" and LIST_KEYS[key] == GRAY:
            out.append(Finding(source, "no-op-add", "warning",
                               f"{at}: GE ignores gray-list to-add ({t!r} is {now} on {where}; only a to-remove "
                               f"from its list makes a type gray)", e.line, e.column, t))
        elif action == "to-add" and LIST_KEYS[key] == now:
            out.append(Finding(source, "no-op-add", "warning",
                               f"{at}: {t!r} is already {now} on {where}; this edit changes nothing",
                               e.line, e.column, t))
        elif action == "to-remove" and LIST_KEYS[key] != now:
            out.append(Finding(source, "no-op-remove", "warning",
                               f"{at}: {t!r} is {now} on {where}, not {LIST_KEYS[key]}; GE only warns and nothing "
                               f"changes", e.line, e.column, t))


def lint_file(path: str | Path, lists: OpLists) -> list[Finding]:
    return lint_text(read_user_text(path, WHAT), lists, str(path))


# ---------------------------------------------------------------------- ATC per-op override files
def _line_of(problem: str) -> int | None:
    m = re.match(r"line (\d+)", problem)
    return int(m.group(1)) if m else None


def lint_overrides_text(text: str, kind: str, lists: OpLists, source: str = "<text>",
                        graph: Any = None) -> list[Finding]:
    """Findings for one ATC --keep_dtype (``kind="keep_dtype"``) or --customize_dtypes (``"customize_dtypes"``)
    file: what GE rejects (``rejected``, error), what it only warns about or silently ignores (a name or
    type listed twice, ``#`` "comments" that are op names, misplaced ``OpType::``), op types that exist
    nowhere (``unknown-op-type``, with a did-you-mean), and with ``graph`` (a run's op graph) op names and
    types not in it (``not-in-graph``, with a did-you-mean from the graph's own names).  Integer dtypes in
    a customize file are reported as not emulated (info)."""
    from .overrides import read_customize_text, read_keep_dtype_text
    try:
        doc = (read_keep_dtype_text if kind == "keep_dtype" else read_customize_text)(text, source)
    except InputError as e:
        return [Finding(source, "rejected", "error", e.problem.split(": ", 1)[-1] if _line_of(e.problem) else e.problem,
                        _line_of(e.problem))]
    out = [Finding(source, code, "warning" if code != "duplicate" else "info", msg, line)
           for line, code, msg in doc.warnings]
    names: list[str] = []
    types: set[str] = set()
    if graph is not None:
        for n, a in graph.nodes(data=True):
            if a.get("role", "op") == "op":
                names.append(str(a.get("name", n)))
                types.add(str(a.get("type", "")))
    name_set = set(names)
    for e in doc.entries:
        if e.kind == "type":
            known = lists.is_known(e.key) or e.key in types
            if not known:
                sug = suggest(e.key, lists) or (_close(e.key, sorted(types)) if types else None)
                out.append(Finding(source, "unknown-op-type", "warning",
                                   f"OpType::{e.key} is not an op type on {lists.label}"
                                   + (" nor in the graph" if graph is not None else "") + ": it matches nothing",
                                   e.line, e.column, e.key, sug))
            elif graph is not None and e.key not in types:
                out.append(Finding(source, "not-in-graph", "warning", f"no op of type {e.key!r} in the graph: "
                                   "the entry changes nothing there", e.line, e.column, e.key))
        elif graph is not None and e.key not in name_set:
            out.append(Finding(source, "not-in-graph", "warning", f"no op named {e.key!r} in the graph (GE only "
                               "warns and keeps nothing)", e.line, e.column, None, _close(e.key, names)))
        if e.dtypes is not None:
            bad = sorted({d for d in e.dtypes.inputs + e.dtypes.outputs if d is not None and d not in
                          ("fp16", "bf16", "fp32", "fp64")})
            if bad:
                out.append(Finding(source, "not-emulated", "info", f"{e.key!r}: {', '.join(bad)} ports are not "
                                   "emulated by advisor (they run in the op's precision)", e.line, e.column))
    return sorted(out, key=lambda f: (f.line or 0, f.column or 0))


def _close(name: str, names: list[str]) -> str | None:
    import difflib
    hit = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return hit[0] if hit else None


def lint_overrides_file(path: str | Path, kind: str, lists: OpLists, graph: Any = None) -> list[Finding]:
    from .overrides import CUSTOM_WHAT, KEEP_WHAT, read_text
    return lint_overrides_text(read_text(path, KEEP_WHAT if kind == "keep_dtype" else CUSTOM_WHAT), kind, lists,
                               str(path), graph)
