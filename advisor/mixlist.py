"""The ``modify_mixlist`` file: parse, validate, apply to op lists, emit, and diff.

GE semantics implemented here (see docs/semantics.md for sources):

* keys ``black-list`` / ``white-list`` (and GE's undocumented ``gray-list``), inner keys
  ``to-add`` / ``to-remove``, values are arrays of exact, case-sensitive op types;
* ``to-remove`` from the list a type is in makes it gray; from a list it is not in: warning only;
* ``to-add`` to black moves a type out of white (and vice versa); ``gray-list.to-add`` makes it gray;
* the same type in two ``to-add`` arrays is an error;
* removes are applied before adds, so "black to-add A + white to-remove A" ends with A black
  (the seed document's second correct example) without a spurious warning.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from .errors import MixlistError
from .oplists import BLACK, GRAY, WHITE, OpLists

LIST_KEYS = {"black-list": BLACK, "white-list": WHITE, "gray-list": GRAY}
ACTIONS = ("to-add", "to-remove")


@dataclass(frozen=True)
class Mixlist:
    """One modify_mixlist file: for each list, the types to add and to remove (order kept)."""

    black_add: tuple[str, ...] = ()
    black_remove: tuple[str, ...] = ()
    white_add: tuple[str, ...] = ()
    white_remove: tuple[str, ...] = ()
    gray_add: tuple[str, ...] = ()
    gray_remove: tuple[str, ...] = ()

    def get(self, lst: str, action: str) -> tuple[str, ...]:
        return getattr(self, f"{lst}_{'add' if action == 'to-add' else 'remove'}")

    def entries(self) -> Iterable[tuple[str, str, str]]:
        """(list, action, op type) for every entry, in file order of lists."""
        for lst in (BLACK, WHITE, GRAY):
            for action in ACTIONS:
                for t in self.get(lst, action):
                    yield lst, action, t

    def is_empty(self) -> bool:
        return not any(True for _ in self.entries())

    def types(self) -> set[str]:
        return {t for _, _, t in self.entries()}

    # ------------------------------------------------------------------ emit
    def to_dict(self) -> dict:
        """GE-accepted structure with stable key order; black and white always present."""
        out: dict = {}
        for key, lst in LIST_KEYS.items():
            add, rem = list(self.get(lst, "to-add")), list(self.get(lst, "to-remove"))
            if lst == GRAY and not add and not rem:
                continue
            out[key] = {"to-add": add, "to-remove": rem}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def validate(self) -> None:
        """Raise MixlistError for what GE rejects: one type in two to-add arrays."""
        seen: dict[str, str] = {}
        for lst in (BLACK, WHITE, GRAY):
            for t in self.get(lst, "to-add"):
                if t in seen and seen[t] != lst:
                    raise MixlistError(None, f"op type {t!r} is in both {seen[t]}-list and {lst}-list to-add")
                seen[t] = lst


@dataclass
class ApplyResult:
    lists: OpLists
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- parse
def parse_obj(obj: object, source: str = "") -> Mixlist:
    """Build a Mixlist from already-decoded JSON, raising MixlistError on a wrong structure."""
    if not isinstance(obj, dict):
        raise MixlistError(source, "a mixlist must be a JSON object with black-list/white-list keys")
    parts: dict[str, tuple[str, ...]] = {}
    for key, val in obj.items():
        if key not in LIST_KEYS:
            raise MixlistError(source, f"unknown key {key!r}; expected black-list, white-list or gray-list")
        if not isinstance(val, dict):
            raise MixlistError(source, f"{key} must be an object with to-add/to-remove arrays")
        lst = LIST_KEYS[key]
        for action, types in val.items():
            if action not in ACTIONS:
                raise MixlistError(source, f"{key}: unknown key {action!r}; expected to-add or to-remove")
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                raise MixlistError(source, f"{key}.{action} must be an array of op-type strings")
            parts[f"{lst}_{'add' if action == 'to-add' else 'remove'}"] = tuple(types)
    m = Mixlist(**parts)
    try:
        m.validate()
    except MixlistError as e:
        raise MixlistError(source, e.problem) from None
    return m


def strip_json_comments(text: str) -> tuple[str, bool]:
    """Remove // and /* */ comments outside strings; returns (text, had_comments).
    Line/column positions are kept (comments become spaces)."""
    out, i, n, had = [], 0, len(text), False
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i) or c == "#":
            had = True
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            had = True
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), had


def parse_text(text: str, source: str = "") -> Mixlist:
    """Strict parse, as GE reads the file: invalid JSON (comments included) is an error."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        hint = ""
        if strip_json_comments(text)[1]:
            hint = " (the file has comments, which GE's JSON parser does not accept)"
        raise MixlistError(source, f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}{hint}") from None
    return parse_obj(obj, source)


def load(path: str | Path) -> Mixlist:
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise MixlistError(p, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MixlistError(p, f"cannot read as UTF-8 text ({e.__class__.__name__})") from None
    return parse_text(text, str(p))


# ---------------------------------------------------------------------- apply
def apply(base: OpLists, mixlist: Mixlist) -> ApplyResult:
    """Effective lists after applying ``mixlist`` to ``base`` with GE's semantics."""
    mixlist.validate()
    white, black = set(base.white), set(base.black)
    warnings: list[str] = []
    members = {WHITE: white, BLACK: black}
    for lst in (BLACK, WHITE, GRAY):
        for t in mixlist.get(lst, "to-remove"):
            if lst == GRAY:
                if t in white or t in black:
                    warnings.append(f"gray-list to-remove {t!r}: not gray ({base.list_of(t)}); no effect")
                else:
                    warnings.append(f"gray-list to-remove {t!r}: removing from gray has no effect")
                continue
            if t in members[lst]:
                members[lst].discard(t)
            else:
                warnings.append(f"{lst}-list to-remove {t!r}: not in the {lst} list; no effect")
    for t in mixlist.black_add:
        white.discard(t)
        black.add(t)
    for t in mixlist.white_add:
        black.discard(t)
        white.add(t)
    for t in mixlist.gray_add:
        white.discard(t)
        black.discard(t)
    return ApplyResult(base.with_lists(frozenset(white), frozenset(black)), warnings)


def effective(base: OpLists, mixlist: Mixlist | None) -> OpLists:
    return base if mixlist is None else apply(base, mixlist).lists


# ---------------------------------------------------------------------- diff
def list_changes(a: OpLists, b: OpLists) -> dict[str, tuple[str, str]]:
    """Op types whose effective list differs: {type: (list in a, list in b)}, sorted by type."""
    types = (a.white ^ b.white) | (a.black ^ b.black)
    out = {}
    for t in sorted(types):
        la, lb = a.list_of(t), b.list_of(t)
        if la != lb:
            out[t] = (la, lb)
    return out


def between(a: OpLists, b: OpLists) -> Mixlist:
    """The smallest mixlist that turns effective lists ``a`` into ``b``."""
    return from_targets(a, {t: to for t, (_, to) in list_changes(a, b).items()})


def from_targets(base: OpLists, targets: Mapping[str, str]) -> Mixlist:
    """Mixlist moving each type to its target list ("white"/"black"/"gray") from ``base``.
    Gray targets become to-remove from the list the type is in (nothing if already gray)."""
    parts: dict[str, list[str]] = {k: [] for k in ("black_add", "white_add", "black_remove", "white_remove")}
    for t in sorted(targets):
        to, now = targets[t], base.list_of(t)
        if to == now:
            continue
        if to == BLACK:
            parts["black_add"].append(t)
        elif to == WHITE:
            parts["white_add"].append(t)
        elif to == GRAY:
            parts[f"{now}_remove"].append(t)
        else:
            raise ValueError(f"target list must be white, black or gray, not {to!r}")
    return Mixlist(**{k: tuple(v) for k, v in parts.items()})


def compose(base: OpLists, first: Mixlist | None, then: Mixlist) -> Mixlist:
    """One mixlist equivalent to applying ``first`` then ``then`` to ``base``."""
    return between(base, apply(effective(base, first), then).lists)


def describe_changes(changes: Mapping[str, tuple[str, str]]) -> list[str]:
    return [f"{t}: {a}\u2192{b}" for t, (a, b) in changes.items()]
