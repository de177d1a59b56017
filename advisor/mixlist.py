"""The ``modify_mixlist`` file: parse, validate, apply to op lists, emit, and diff.

GE semantics implemented here, read from GE's parser (``FE/utils/common/config_parser/
modify_mixlist_config_parser.cc`` of hicann/ge; docs/semantics.md cites the lines):

* keys ``black-list`` / ``white-list`` / ``gray-list``, inner keys ``to-add`` / ``to-remove``, values are arrays
  of exact, case-sensitive op types;
* each type's edits form a bitmap of (list, action) (``AddMixList``); the **whole file** is rejected unless every
  type's bitmap is one of GE's 11 templates (``VerifyMixlist``): at most one to-add, at most one to-remove, never
  both in one list, and a gray-list to-remove only beside a black-list or white-list to-add;
* the effective list of a type (``GetPrecisionPolicy``): a to-remove from the list the type is in makes it gray;
  a to-remove from another list only warns; then a black-list to-add makes it black, else a white-list to-add
  white.  A gray-list to-add changes nothing.

Reading a file written by someone else (``read_text`` / ``parse_text`` / ``load``): strict JSON, every
op-type entry located (line, column of its array element), and what GE would silently get wrong refused
as well as what it rejects: a key given twice (``"black-list"`` twice: a JSON reader keeps one of the two
and the other's edits are lost without a word), wrong structure, a type whose edits are no GE template.
``check_op_types`` refuses op types that exist nowhere (typos such as ``MatMu1V2``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from .errors import MixlistError
from .fsutil import parse_json_text, read_user_text
from .graph import no_gc
from .oplists import BLACK, GRAPH_ENGINE_TYPES, GRAY, WHITE, OpLists, chip_types, suggest

LIST_KEYS = {"black-list": BLACK, "white-list": WHITE, "gray-list": GRAY}
ACTIONS = ("to-add", "to-remove")
WHAT = "a modify_mixlist JSON file"

# GE's per-type bitmap of edits (modify_mixlist_config_parser.cc:29-40) and its 11 accepted templates (:46-60)
BIT = {(BLACK, "to-remove"): 0x20, (BLACK, "to-add"): 0x10, (WHITE, "to-remove"): 0x08, (WHITE, "to-add"): 0x04,
       (GRAY, "to-remove"): 0x02, (GRAY, "to-add"): 0x01}
_REMOVE_BIT = {BLACK: 0x20, WHITE: 0x08, GRAY: 0x02}
TEMPLATES = frozenset({0x20, 0x08, 0x01, 0x01 | 0x20, 0x01 | 0x08,
                       0x04, 0x04 | 0x02, 0x04 | 0x20,
                       0x10, 0x10 | 0x02, 0x10 | 0x08})
# GE's words for each bit, in GE's order (kOperListStrMap, a std::map ordered by bit: :41-44)
_BIT_WORDS = ((0x01, "add gray list"), (0x02, "remove gray list"), (0x04, "add white list"),
              (0x08, "remove white list"), (0x10, "add black list"), (0x20, "remove black list"))


def describe(bitmap: int) -> str:
    """GE's description of a bitmap (``GetMixlistDesc``, :250-264): ``"add white list, add black list"``."""
    return ", ".join(w for b, w in _BIT_WORDS if bitmap & b)


def why_rejected(bitmap: int) -> str:
    """Which of the templates' conditions a bitmap breaks (advisor's words beside GE's)."""
    adds = [lst for lst in (BLACK, WHITE, GRAY) if bitmap & BIT[(lst, "to-add")]]
    removes = [lst for lst in (BLACK, WHITE, GRAY) if bitmap & BIT[(lst, "to-remove")]]
    if len(adds) > 1:
        return f"to-add in {' and '.join(x + '-list' for x in adds)}: a type can be added to one list only"
    if len(removes) > 1:
        return f"to-remove from {' and '.join(x + '-list' for x in removes)}: a type can be removed from one list only"
    if set(adds) & set(removes):
        return f"to-add and to-remove in {adds[0]}-list"
    return "gray-list to-remove is accepted only beside a black-list or white-list to-add"


def rejection(op_type: str, bitmap: int) -> str:
    """The one-line reason GE rejects a file for ``op_type``'s edits (its own message, VerifyMixlist :233-249)."""
    return (f"GE rejects the file: \"Operation {describe(bitmap)} for op {op_type} is invalid\" "
            f"({why_rejected(bitmap)})")


def policy(bitmap: int, current: str) -> str:
    """GE's ``GetPrecisionPolicy`` (:265-294): the list of a type now in ``current`` after edits ``bitmap``."""
    out = GRAY if bitmap & _REMOVE_BIT[current] else current
    if bitmap & BIT[(BLACK, "to-add")]:
        return BLACK
    if bitmap & BIT[(WHITE, "to-add")]:
        return WHITE
    return out


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

    def bitmaps(self) -> dict[str, int]:
        """GE's bitmap of edits per op type (``AddMixList``), in first-seen order."""
        out: dict[str, int] = {}
        for lst, action, t in self.entries():
            out[t] = out.get(t, 0) | BIT[(lst, action)]
        return out

    def rejected(self) -> list[tuple[str, int]]:
        """(type, bitmap) of every type whose edits are no GE template, in GE's order (sorted by type)."""
        return sorted((t, b) for t, b in self.bitmaps().items() if b not in TEMPLATES)

    def validate(self) -> None:
        """Raise MixlistError for what GE rejects: a type whose edits are none of the 11 templates."""
        bad = self.rejected()
        if bad:
            t, b = bad[0]
            more = f"; {len(bad) - 1} other type(s) too" if len(bad) > 1 else ""
            raise MixlistError(self.source or None, f"op type {t!r}: {rejection(t, b)}{more}")


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

    code: str                # "bad-structure" | "duplicate-key" | "conflict" (no GE template)
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
    problems.extend(_template_problems(arrays))
    return arrays, problems


def _template_problems(arrays: list[_Array]) -> list[_Raw]:
    """GE's VerifyMixlist over the arrays: one problem per type whose bitmap is no template, at the entry that
    last added a new bit to it (the element that completed the rejected combination), in GE's order."""
    bits: dict[str, int] = {}
    at: dict[str, int] = {}
    for a in arrays:
        bit = BIT[(LIST_KEYS[a.key], a.action)]
        for i, t in enumerate(a.types):
            b = bits.get(t, 0)
            if not b & bit:
                bits[t], at[t] = b | bit, a.token + i
    return [_Raw("conflict", rejection(t, b), at[t], op_type=t) for t, b in sorted(bits.items()) if b not in TEMPLATES]


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
    problem (bad structure stops the reading; duplicate keys and types GE rejects are all reported).
    JsonSyntaxError (with line/column) when it is not JSON; InputError for nesting too deep or
    numbers too long.  Comments must have been blanked out (``strip_json_comments``) or it is not JSON."""
    with no_gc():       # millions of small entries, no cycles
        return _document(_decode(text, source), source, text)


def parse_obj(obj: object, source: str = "") -> Mixlist:
    """A Mixlist from already-decoded JSON (run.json's mixlist); MixlistError on a wrong structure
    or a type whose edits GE rejects."""
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
    structure and edits that are no GE template are errors naming the line."""
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
    """Effective lists after applying ``mixlist`` to ``base`` as GE does: MixlistError when GE rejects the file
    (``validate``), else per type ``policy`` (GetPrecisionPolicy) from its list in ``base``.  Warnings: a
    to-remove from a list the type is not in (GE warns, :274-279) and a gray-list to-add (no effect)."""
    mixlist.validate()
    white, black = set(base.white), set(base.black)
    warnings: list[str] = []
    for t, bits in mixlist.bitmaps().items():
        now = base.list_of(t)
        for lst in (BLACK, WHITE, GRAY):
            if bits & _REMOVE_BIT[lst] and lst != now:
                warnings.append(f"{lst}-list to-remove {t!r}: {t!r} is {now}, not {lst}; GE only warns (no effect)")
        if bits & BIT[(GRAY, "to-add")]:
            warnings.append(f"gray-list to-add {t!r}: GE ignores gray-list to-add (no effect)")
        to = policy(bits, now)
        if to != now:
            _move(white, black, t, to)
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
        if to not in (WHITE, BLACK, GRAY):
            raise ValueError(f"target list must be white, black or gray, not {to!r}")
        _move(white, black, t, to)
    return base.with_lists(frozenset(white), frozenset(black))


def _move(white: set, black: set, t: str, to: str) -> None:
    """Put type ``t`` in list ``to`` (gray: in neither set), in place."""
    white.discard(t)
    black.discard(t)
    if to == WHITE:
        white.add(t)
    elif to == BLACK:
        black.add(t)


def compose(base: OpLists, first: Mixlist | None, then: Mixlist) -> Mixlist:
    """One mixlist equivalent to applying ``first`` then ``then`` to ``base``."""
    return between(base, apply(effective(base, first), then).lists)
