"""``advisor lint``: what is wrong with a modify_mixlist file, before GE silently ignores it.

Findings (code, severity):
  invalid-json (error)      not JSON at all, with line/column (GE cannot load the file)
  comments (error)          // or /* */ or # comments: GE's JSON parser rejects them
  bad-structure (error)     wrong keys or value types
  conflict (error)          one type in two to-add arrays (GE rejects the file)
  unknown-op-type (warning) not an AI Core op type of the chip: matches nothing (did-you-mean given)
  graph-engine-op (warning) a graph-engine/control node type (Data, LabelSet, Recv, ...): no effect
  other-chip (warning)      an op type of another chip only: no effect on this one
  no-op-add (warning)       to-add to the list the type is already in by default
  no-op-remove (warning)    to-remove from a list the type is not in
  add-and-remove (warning)  the same type added to and removed from one list
  duplicate (info)          the same type twice in one array
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from .errors import MixlistError
from .fsutil import read_user_text
from .mixlist import ACTIONS, LIST_KEYS, parse_obj, strip_json_comments
from .oplists import GRAPH_ENGINE_TYPES, SOCS, OpLists, load_default

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
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
        return {k: v for k, v in asdict(self).items() if v is not None}

    def __str__(self) -> str:
        pos = f":{self.line}" + (f":{self.column}" if self.column else "") if self.line else ""
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        return f"{self.file}{pos}: {self.severity}: [{self.code}] {self.message}{hint}"


def _norm(t: str) -> str:
    """Case-folded with the usual look-alikes (1/l, 0/o) unified, for did-you-mean."""
    return t.lower().replace("1", "l").replace("0", "o").replace("_", "")


@lru_cache(maxsize=None)
def _all_chip_types() -> dict[str, frozenset[str]]:
    return {soc: load_default(soc).known for soc in SOCS}


def suggest(op_type: str, lists: OpLists) -> str | None:
    """The closest real op type of the chip, or None."""
    known = sorted(lists.known | lists.white | lists.black)
    by_norm: dict[str, str] = {}
    for k in known:
        by_norm.setdefault(_norm(k), k)
    n = _norm(op_type)
    if n in by_norm and by_norm[n] != op_type:
        return by_norm[n]
    close = difflib.get_close_matches(n, list(by_norm), n=1, cutoff=0.82)
    return by_norm[close[0]] if close else None


def _line_col(text: str, needle: str, start: int = 0) -> tuple[int | None, int | None, int]:
    i = text.find(needle, start)
    if i < 0:
        return None, None, start
    line = text.count("\n", 0, i) + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    return line, col, i + len(needle)


def lint_text(text: str, lists: OpLists, source: str = "<text>") -> list[Finding]:
    """All findings for one mixlist's text against ``lists`` (the chip's default lists)."""
    out: list[Finding] = []
    clean, had_comments = strip_json_comments(text)
    if had_comments:
        m = re.search(r"//|/\*|#", text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        out.append(Finding(source, "comments", "error",
                           "the file has comments; GE's JSON parser rejects them (remove them)", line))
    try:
        obj = json.loads(clean)
    except json.JSONDecodeError as e:
        what = "not JSON" if not clean.lstrip().startswith(("{", "[")) else "invalid JSON"
        out.append(Finding(source, "invalid-json", "error", f"{what}: {e.msg}", e.lineno, e.colno))
        return out
    try:
        parse_obj(obj, source)
    except MixlistError as e:
        code = "conflict" if "both" in e.problem else "bad-structure"
        out.append(Finding(source, code, "error", e.problem))
        if code != "conflict":
            return out
    chips = _all_chip_types()
    cursor = 0
    seen_add: dict[str, str] = {}
    for key, val in obj.items():
        lst = LIST_KEYS[key]
        per_action: dict[str, list[str]] = {}
        for action in ACTIONS:
            types = val.get(action, []) if isinstance(val, dict) else []
            per_action[action] = types
            counts: dict[str, int] = {}
            for t in types:
                line, col, cursor = _line_col(text, json.dumps(t, ensure_ascii=False), cursor)
                counts[t] = counts.get(t, 0) + 1
                if counts[t] == 2:
                    out.append(Finding(source, "duplicate", "info", f"{key}.{action} lists {t!r} twice", line, col, t))
                    continue
                if counts[t] > 2:
                    continue
                where = f"{key}.{action}"
                if t in GRAPH_ENGINE_TYPES:
                    out.append(Finding(source, "graph-engine-op", "warning",
                                       f"{where}: {t!r} is a graph-engine/control node type, not an AI Core op "
                                       f"type; listing it has no effect", line, col, t))
                    continue
                if not lists.is_known(t):
                    others = [s for s, ks in chips.items() if t in ks and s != lists.soc]
                    sug = suggest(t, lists)
                    if others and not sug:
                        out.append(Finding(source, "other-chip", "warning",
                                           f"{where}: {t!r} is not an op type on {lists.soc} (it exists on "
                                           f"{', '.join(others)}); no effect on this chip", line, col, t))
                    else:
                        out.append(Finding(source, "unknown-op-type", "warning",
                                           f"{where}: {t!r} is not an op type on {lists.soc}; it matches nothing "
                                           f"(types are exact and case-sensitive)", line, col, t, sug))
                    continue
                now = lists.list_of(t)
                if action == "to-add" and lst == now:
                    out.append(Finding(source, "no-op-add", "warning",
                                       f"{where}: {t!r} is already {now} on {lists.soc}; this edit changes nothing",
                                       line, col, t))
                elif action == "to-remove" and lst != now:
                    out.append(Finding(source, "no-op-remove", "warning",
                                       f"{where}: {t!r} is {now} on {lists.soc}, not {lst}; GE only warns and "
                                       f"nothing changes", line, col, t))
                if action == "to-add":
                    seen_add.setdefault(t, lst)
        for t in sorted(set(per_action["to-add"]) & set(per_action["to-remove"])):
            out.append(Finding(source, "add-and-remove", "warning",
                               f"{key}: {t!r} is both in to-add and to-remove; removes apply first, so it ends "
                               f"in the {lst} list", op_type=t))
    return out


def lint_file(path: str | Path, lists: OpLists) -> list[Finding]:
    return lint_text(read_user_text(path, "a JSON mixlist"), lists, str(path))
