"""The ``modify_mixlist`` file: parse, validate, apply to op lists, emit, and diff.

GE semantics implemented here (see docs/semantics.md for sources):

* keys ``black-list`` / ``white-list`` (and GE's undocumented ``gray-list``), inner keys
  ``to-add`` / ``to-remove``, values are arrays of exact, case-sensitive op types;
* ``to-remove`` from the list a type is in makes it gray; from a list it is not in: warning only;
* ``to-add`` to black moves a type out of white (and vice versa); ``gray-list.to-add`` makes it gray;
* the same type in two ``to-add`` arrays is an error;
* removes are applied before adds, so "black to-add A + white to-remove A" ends with A black
  (the seed document's second correct example) without a spurious warning.

Reading a file written by someone else (``read_text`` / ``parse_text`` / ``load``): strict JSON, every
op-type entry located (line, column of its array element), and what GE would silently get wrong refused
as well as what it rejects: a key given twice (``"black-list"`` twice: a JSON reader keeps one of the two
and the other's edits are lost without a word), wrong structure, one type in two to-add arrays.
``check_op_types`` refuses op types that exist nowhere (typos such as ``MatMu1V2``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from .errors import MixlistError
from .fsutil import parse_json_text, read_user_text
from .graph import no_gc
from .oplists import BLACK, GRAPH_ENGINE_TYPES, GRAY, WHITE, OpLists, chip_types, suggest

LIST_KEYS = {"black-list": BLACK, "white-list": WHITE, "gray-list": GRAY}
ACTIONS = ("to-add", "to-remove")
WHAT = "a modify_mixlist JSON file"


@dataclass(frozen=True)
class Mixlist:
    """One modify_mixlist file: for each list, the types to add and to remove (order kept)."""

    black_add: tuple[str, ...] = ()
    black_remove: tuple[str, ...] = ()
    white_add: tuple[str, ...] = ()
    white_remove: tuple[str, ...] = ()
    gray_add: tuple[str, ...] = ()
    gray_remove: tuple[str, ...] = ()
    source: str = field(default="", compare=False)   # the file it was read from, for messages

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
        adds = ((lst, t) for lst in (BLACK, WHITE, GRAY) for t in self.get(lst, "to-add"))
        for _, problem in conflicts(adds):
            raise MixlistError(self.source or None, problem)


def conflicts(adds: Iterable[tuple[str, str]]) -> Iterator[tuple[int, str]]:
    """GE's rule: one op type in the to-add arrays of two lists is an error.  ``adds`` = (list, type)
    of every to-add entry in order; yields (index of the entry that conflicts, problem)."""
    seen: dict[str, str] = {}
    for i, (lst, t) in enumerate(adds):
        first = seen.setdefault(t, lst)
        if first != lst:
            yield i, f"op type {t!r} is in both {first}-list and {lst}-list to-add"


@dataclass
class ApplyResult:
    lists: OpLists
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- parse
class Entry(NamedTuple):
    """One op type of a mixlist file, at its array element."""

    key: str                 # "black-list" | "white-list" | "gray-list"
    action: str              # "to-add" | "to-remove"
    op_type: str
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Problem:
    """What GE rejects or would silently get wrong, at its place in the file."""

    code: str                # "bad-structure" | "duplicate-key" | "conflict"
    message: str
    line: int | None = None
    column: int | None = None
    op_type: str | None = None

    def where(self) -> str:
        return f"line {self.line} column {self.column}: " if self.line else ""


@dataclass
class Document:
    """A mixlist file as read: every entry with its position, and every problem found."""

    entries: list[Entry]
    problems: list[Problem]
    source: str = ""

    def mixlist(self) -> Mixlist:
        """The Mixlist, or MixlistError naming the first problem and where it is."""
        if self.problems:
            p = self.problems[0]
            raise MixlistError(self.source or None, p.where() + p.message)
        parts: dict[str, list[str]] = {}
        for e in self.entries:
            parts.setdefault(f"{LIST_KEYS[e.key]}_{'add' if e.action == 'to-add' else 'remove'}", []).append(e.op_type)
        return Mixlist(**{k: tuple(v) for k, v in parts.items()}, source=self.source)


class JsonSyntaxError(MixlistError):
    """The text is not JSON; ``line``/``column`` locate the error, ``reason`` is the parser's word."""

    def __init__(self, path: object, reason: str, line: int, column: int):
        super().__init__(path, f"not valid JSON at line {line} column {column}: {reason}")
        self.reason, self.line, self.column = reason, line, column


class _Members:
    """A JSON object as decoded with every member kept in file order (duplicate keys included)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs


# a JSON string token; in valid JSON every '"' outside a string opens one, so the matches are exactly
# the document's strings (keys and values) in file order
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def _decode(text: str, source: str) -> _Members | object:
    """Strict JSON with every object member kept; JsonSyntaxError with line/column for bad syntax,
    fsutil's one-line InputError for nesting too deep or numbers too long."""
    try:
        return json.loads(text, object_pairs_hook=_Members)
    except json.JSONDecodeError as e:
        raise JsonSyntaxError(source or None, e.msg, e.lineno, e.colno) from None
    except (RecursionError, ValueError):
        return parse_json_text(text, source, WHAT)   # raises fsutil's one-line error for these limits


def _pairs(x: object) -> list | None:
    """An object's members in file order (duplicates kept), or None when ``x`` is no object."""
    if isinstance(x, _Members):
        return x.pairs
    if isinstance(x, dict):
        return list(x.items())
    return None


class _Raw(NamedTuple):
    """A problem before it is located: token indices instead of line/column."""

    code: str
    message: str
    at: int | None               # string-token index of the key / element it is about
    first: int | None = None     # duplicate keys: token index of the first occurrence
    op_type: str | None = None


class _Array(NamedTuple):
    key: str
    action: str
    types: list
    token: int                   # string-token index of its first element


def _walk(obj: object) -> tuple[list[_Array], list[_Raw]]:
    """GE's structure over a decoded mixlist, in file order: the arrays of op types and the problems.
    String tokens are counted as keys and string values appear in the file, so a token index locates
    the exact key or array element; the walk stops at the first structural problem (what follows
    cannot be read as a mixlist)."""
    arrays: list[_Array] = []
    problems: list[_Raw] = []
    top = _pairs(obj)
    if top is None:
        return arrays, [_Raw("bad-structure", "a mixlist must be a JSON object with black-list/white-list keys", None)]
    tok = 0
    seen_keys: dict[str, int] = {}
    for key, val in top:
        kat, tok = tok, tok + 1
        if key not in LIST_KEYS:
            problems.append(_Raw("bad-structure", f"unknown key {key[:80]!r}; expected black-list, white-list or "
                                 "gray-list", kat))
            return arrays, problems
        if key in seen_keys:
            problems.append(_Raw("duplicate-key", f"duplicate key {key!r}", kat, seen_keys[key]))
        seen_keys.setdefault(key, kat)
        inner = _pairs(val)
        if inner is None:
            problems.append(_Raw("bad-structure", f"{key} must be an object with to-add/to-remove arrays", kat))
            return arrays, problems
        seen_actions: dict[str, int] = {}
        for action, types in inner:
            aat, tok = tok, tok + 1
            if action not in ACTIONS:
                problems.append(_Raw("bad-structure", f"{key}: unknown key {action[:80]!r}; expected to-add or "
                                     "to-remove", aat))
                return arrays, problems
            if action in seen_actions:
                problems.append(_Raw("duplicate-key", f"duplicate key {action!r} in {key}", aat, seen_actions[action]))
            seen_actions.setdefault(action, aat)
            if not isinstance(types, list) or not all(t.__class__ is str for t in types):
                problems.append(_Raw("bad-structure", f"{key}.{action} must be an array of op-type strings", aat))
                return arrays, problems
            arrays.append(_Array(key, action, types, tok))
            tok += len(types)
    adds = [(a.token + i, LIST_KEYS[a.key], t) for a in arrays if a.action == "to-add" for i, t in enumerate(a.types)]
    for j, msg in conflicts((lst, t) for _, lst, t in adds):
        problems.append(_Raw("conflict", msg + "; GE rejects the file", adds[j][0], op_type=adds[j][2]))
    return arrays, problems


DUPLICATE_NOTE = ("a JSON reader keeps only one of the two (Python's json and nlohmann::json keep the last), so "
                  "the other's edits are silently lost; merge them into one")


def _document(obj: object, source: str, text: str | None = None) -> Document:
    """Entries and problems of a decoded mixlist, located (line, column) in ``text`` when given."""
    arrays, raw = _walk(obj)
    if text is None:   # decoded elsewhere (run.json): a dict has no duplicate keys and nothing to locate
        entries = [Entry(a.key, a.action, t) for a in arrays for t in a.types]
        return Document(entries, [Problem(r.code, r.message, op_type=r.op_type) for r in raw], source)
    offs = np.fromiter((m.start() for m in _STRING.finditer(text)), dtype=np.int64)
    nl = np.fromiter((m.start() for m in re.finditer("\n", text)), dtype=np.int64)

    def line_col(tokens: np.ndarray) -> tuple[list[int], list[int]]:
        off = offs[tokens]
        k = np.searchsorted(nl, off)                    # line breaks before each token
        start = nl[np.maximum(k - 1, 0)] + 1 if len(nl) else np.zeros_like(off)
        return (k + 1).tolist(), (off - np.where(k > 0, start, 0) + 1).tolist()

    tokens = np.concatenate([np.arange(a.token, a.token + len(a.types)) for a in arrays] or [np.zeros(0, np.int64)])
    lines, cols = line_col(tokens.astype(np.int64))
    entries: list[Entry] = []
    i = 0
    for a in arrays:
        n = len(a.types)
        entries.extend(map(Entry, [a.key] * n, [a.action] * n, a.types, lines[i:i + n], cols[i:i + n]))
        i += n
    at = np.array([r.at if r.at is not None else 0 for r in raw] + [r.first or 0 for r in raw], dtype=np.int64)
    plines, pcols = line_col(at) if len(offs) else ([None] * len(at), [None] * len(at))
    problems = []
    for j, r in enumerate(raw):
        if r.at is None:
            problems.append(Problem(r.code, r.message, op_type=r.op_type))
            continue
        msg = r.message
        if r.first is not None:
            msg = f"{msg} (first at line {plines[len(raw) + j]}): {DUPLICATE_NOTE}"
        problems.append(Problem(r.code, msg, plines[j], pcols[j], r.op_type))
    return Document(entries, problems, source)


def read_text(text: str, source: str = "") -> Document:
    """Read a mixlist's text: every entry with the line/column of its array element, and every
    problem (bad structure stops the reading; duplicate keys and conflicts are all reported).
    JsonSyntaxError (with line/column) when it is not JSON; InputError for nesting too deep or
    numbers too long.  Comments must have been blanked out (``strip_json_comments``) or it is not JSON."""
    with no_gc():       # millions of small entries, no cycles
        return _document(_decode(text, source), source, text)


def parse_obj(obj: object, source: str = "") -> Mixlist:
    """A Mixlist from already-decoded JSON (run.json's mixlist); MixlistError on a wrong structure
    or a conflict."""
    return _document(obj, source).mixlist()


# runs of text that hold no comment (strings - which may contain comment markers - and other
# characters), or one comment: // or # to the end of the line, /* */ (to the end when unclosed)
_COMMENT = re.compile(r'(?P<keep>(?:"(?:[^"\\]+|\\[\s\S])*(?:"|\\?$)|[^"/#]+|/(?![/*]))+)'
                      r'|//[^\n]*|#[^\n]*|/\*[\s\S]*?(?:\*/|$)')


def strip_json_comments(text: str) -> tuple[str, bool]:
    """Remove // and # line comments and /* */ comments outside strings; returns (text, had_comments).
    Line/column positions are kept (comments become spaces, their line breaks stay)."""
    if "/" not in text and "#" not in text:
        return text, False
    had = False

    def blank(m: re.Match) -> str:
        nonlocal had
        if m.group("keep") is not None:
            return m.group(0)
        had = True
        return re.sub(r"[^\n]", " ", m.group(0))

    return _COMMENT.sub(blank, text), had


def parse_text(text: str, source: str = "") -> Mixlist:
    """Strict parse, as GE reads the file: invalid JSON (comments included), duplicate keys, a wrong
    structure and conflicting to-adds are errors naming the line."""
    try:
        return read_text(text, source).mixlist()
    except JsonSyntaxError as e:
        hint = ""
        if strip_json_comments(text)[1]:
            hint = " (the file has comments, which GE's JSON parser does not accept)"
        raise MixlistError(source or None, e.problem + hint) from None


def load(path: str | Path) -> Mixlist:
    """A user's mixlist file: a regular UTF-8 file, strict JSON, GE's structure, no key given twice."""
    p = Path(path)
    return parse_text(read_user_text(p, WHAT), str(p))


def check_op_types(m: Mixlist, lists: OpLists, graph_types: Iterable[str] = (),
                   where: str = "the run's op graph") -> None:
    """Refuse a user's mixlist naming an op type that exists nowhere - not in any chip's tables nor
    the lists in use (an ops-info file), not a graph-engine node type, not a type of the graph it applies to
    (``graph_types``: the run's op graph, custom ops included; before a capture, every type a capture can give its
    graph, ``inputs.capture_graph_types``) - with a did-you-mean: such a type matches nothing, silently.  The one
    rule for every command that takes a user's mixlist (capture, tune, replay, recommend, diff), called before any
    run."""
    chips = chip_types()
    extra = None
    for t in dict.fromkeys(t for _, _, t in m.entries()):
        if lists.is_known(t) or t in GRAPH_ENGINE_TYPES or any(t in ks for ks in chips.values()):
            continue
        if extra is None:   # a set (or a set-like rule) is used as it is; anything else is read once
            extra = graph_types if isinstance(graph_types, (set, frozenset)) else set(graph_types)
        if t in extra:
            continue
        sug = suggest(t, lists)
        hint = f" (did you mean {sug!r}?)" if sug else ""
        raise MixlistError(m.source or None, f"op type {t[:80]!r} is not an op type on {lists.label} nor of "
                           f"{where}; it would match nothing{hint}")


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


def with_targets(base: OpLists, targets: Mapping[str, str]) -> OpLists:
    """Effective lists after moving each type to its target list ("white"/"black"/"gray"): the same as
    ``apply(base, from_targets(base, targets)).lists``, without building the mixlist (the search calls it
    for every candidate)."""
    white, black = set(base.white), set(base.black)
    for t, to in targets.items():
        white.discard(t)
        black.discard(t)
        if to == WHITE:
            white.add(t)
        elif to == BLACK:
            black.add(t)
        elif to != GRAY:
            raise ValueError(f"target list must be white, black or gray, not {to!r}")
    return base.with_lists(frozenset(white), frozenset(black))


def compose(base: OpLists, first: Mixlist | None, then: Mixlist) -> Mixlist:
    """One mixlist equivalent to applying ``first`` then ``then`` to ``base``."""
    return between(base, apply(effective(base, first), then).lists)
