"""The one edit type: what the searches propose, recommendation.json lists and tune journals -- a type-level
list edit (modify_mixlist), a per-op keep (an ATC ``--keep_dtype`` line: an op by name, or every op of a type
with ``OpType::``) or a per-op customize (an ATC ``--customize_dtypes`` line giving one op, by name, its port
dtypes: fp16 inputs with an fp32 output, the per-op form of ``cube_fp16in_fp32out``) -- and the one rule for the
op types a search may never propose.  Keeps and customizes are *per-op overrides* (``Edit.is_override``), never
list edits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..mixlist import Mixlist, from_targets, with_targets
from ..oplists import BLACK, GRAY, WHITE, OpLists, precision_free
from ..overrides import NO_OVERRIDES, OPTYPE_PREFIX, CustomDtypes, Overrides, read_customize_text
from ..semantics import mode_info

_TARGET = {"black-add": BLACK, "white-add": WHITE, "black-remove": GRAY, "white-remove": GRAY, "gray-add": GRAY,
           "gray-remove": GRAY}
KEEP = "keep"
KEEP_LIST, KEEP_ACTION = "keep_dtype", "keep"          # a keep's journal entry: ["keep_dtype", "keep", line]
CUSTOMIZE = "customize"
# a customize's journal entry: ["customize_dtypes", "customize", "Name::InputDtype:...,OutputDtype:..."]
CUSTOM_LIST, CUSTOM_ACTION = "customize_dtypes", "customize"
LIST_ACTIONS = ("to-add", "to-remove")

# graph inputs, constants and the Casts GE inserts are never a search's edit; nor are precision-free types
NEVER_EDITED = frozenset({"", "Cast", "Data", "Const"})


def proposable(op_type: str, exclude: Iterable[str] = ()) -> bool:
    """May a search propose an edit of ``op_type``?  Not for ``exclude`` (--exclude, tune's learned
    exclusions), graph inputs / constants / Casts (``NEVER_EDITED``), nor types whose output precision means
    nothing (``oplists.precision_free``: ZerosLike, Less, ...).  The one place this rule lives."""
    return op_type not in NEVER_EDITED and op_type not in exclude and not precision_free(op_type)


@dataclass(frozen=True)
class Edit:
    """One edit: ``kind`` in black-add / white-add / black-remove / white-remove (gray-add / gray-remove only
    when read from a user's mixlist) -- a list edit of ``type`` -- or ``keep`` (a keep_dtype line: the op named
    ``op``, of GE type ``type``, "" when unknown; with ``op`` empty every op of ``type``, an ``OpType::``
    line) or ``customize`` (a customize_dtypes line: the op named ``op`` gets the port dtypes ``custom``)."""

    kind: str
    type: str
    op: str = ""
    custom: CustomDtypes | None = None

    @property
    def is_keep(self) -> bool:
        return self.kind == KEEP

    @property
    def is_customize(self) -> bool:
        return self.kind == CUSTOMIZE

    @property
    def is_override(self) -> bool:
        """A per-op override (keep_dtype or customize_dtypes line), not a list edit."""
        return self.kind == KEEP or self.kind == CUSTOMIZE

    @property
    def per_op(self) -> bool:
        """A per-instance edit (one op by name)."""
        return (self.is_keep and bool(self.op)) or self.is_customize

    @property
    def target(self) -> str:
        return _TARGET[self.kind]

    @property
    def list(self) -> str:
        return KEEP_LIST if self.is_keep else CUSTOM_LIST if self.is_customize else self.kind.split("-")[0]

    @property
    def action(self) -> str:
        if self.is_override:
            return KEEP_ACTION if self.is_keep else CUSTOM_ACTION
        return "to-add" if self.kind.endswith("add") else "to-remove"

    @property
    def line(self) -> str:
        """A keep's keep_dtype line; a customize's customize_dtypes line."""
        if self.is_customize:
            return f"{self.op}::{(self.custom or CustomDtypes()).text()}"
        return self.op if self.op else OPTYPE_PREFIX + self.type

    @property
    def slot(self) -> str:
        """What the edit decides: an op (per-op keep) or a type; a set holds at most one edit per slot."""
        return f"op:{self.op}" if self.op else self.type

    @property
    def entry(self) -> tuple[str, str, str]:
        """The journal's ``[list, action, op type]`` (``["keep_dtype", "keep", line]`` for a keep,
        ``["customize_dtypes", "customize", line]`` for a customize)."""
        return (self.list, self.action, self.line if self.is_override else self.type)

    @property
    def key(self) -> str:
        """``list:action:type`` (the learned model's feature name, and how tune's reasons name an edit)."""
        return ":".join(self.entry)

    @property
    def journal_identity(self) -> "Edit":
        """The edit as a journal entry reads back: a per-op override is its line (the op's type is not
        journalled)."""
        if self.is_customize:
            return customize_line_edit(self.line)
        return keep_line_edit(self.line) if self.per_op else self

    @classmethod
    def of_entry(cls, lst: str, action: str, name: str) -> "Edit":
        """The edit of a journal / mixlist entry ``(list, action, op type or keep line)``."""
        if lst == KEEP_LIST:
            return keep_line_edit(name)
        if lst == CUSTOM_LIST:
            return customize_line_edit(name)
        return cls(f"{lst}-{'add' if action == 'to-add' else 'remove'}", name)

    @classmethod
    def parse(cls, text: str) -> "Edit":
        """The edit ``str(edit)`` wrote (recommendation.json)."""
        if text.startswith(f"{CUSTOM_LIST} "):
            rest = text[len(CUSTOM_LIST) + 1:]
            line, _, t = rest.rpartition(" (")
            if not (line and t.endswith(")")):
                line, t = rest, ")"
            e = customize_line_edit(line)
            return cls(CUSTOMIZE, t[:-1], e.op, e.custom)
        if text.startswith(f"{KEEP_LIST} "):
            rest = text[len(KEEP_LIST) + 1:]
            if rest.startswith(OPTYPE_PREFIX):
                return cls(KEEP, rest[len(OPTYPE_PREFIX):])
            op, _, t = rest.rpartition(" (")
            return cls(KEEP, t[:-1], op) if op and t.endswith(")") else cls(KEEP, "", rest)
        head, _, t = text.partition(" ")
        action, _, t = t.partition(" ")
        if head not in ("black-list", "white-list", "gray-list") or action not in LIST_ACTIONS or not t:
            raise ValueError(f"not an edit: {text!r}")
        return cls.of_entry(head[: -len("-list")], action, t)

    def __str__(self) -> str:
        if self.is_customize:
            return f"{CUSTOM_LIST} {self.line} ({self.type})" if self.type else f"{CUSTOM_LIST} {self.line}"
        if self.is_keep:
            return f"keep_dtype {self.op} ({self.type})" if self.op else f"keep_dtype {OPTYPE_PREFIX}{self.type}"
        return f"{self.list}-list {self.action} {self.type}"


def entry_order(e: Edit) -> tuple[str, str, str]:
    """The order tune lists edits in (its journal's, sorted by entry)."""
    return e.entry


def keeps_apply(mode: str) -> bool:
    """Whether GE honours keep_dtype in ``mode``: not under must_keep_origin_dtype (everything keeps its
    dtype anyway) nor in a mode without a low dtype (docs/semantics.md, "Per-op overrides")."""
    family, low = mode_info(mode)
    return family != "origin" and low is not None


def keep_line_edit(line: str) -> Edit:
    """The keep edit of a keep_dtype line (an op name, or ``OpType::T``)."""
    if line.startswith(OPTYPE_PREFIX):
        return Edit(KEEP, line[len(OPTYPE_PREFIX):])
    return Edit(KEEP, "", line)


def customize_line_edit(line: str) -> Edit:
    """The customize edit of one customize_dtypes name line (``Name::InputDtype:...,OutputDtype:...``, as ATC's
    parser reads it: ``overrides.read_customize_text``); ValueError for anything else (a type entry, a line GE
    rejects)."""
    from ..errors import InputError
    try:
        doc = read_customize_text(line, "customize_dtypes line")
    except InputError as e:
        raise ValueError(f"not a customize_dtypes line: {line!r} ({e.problem})") from None
    if len(doc.entries) != 1 or doc.entries[0].kind != "name" or "\n" in line:
        raise ValueError(f"not a customize_dtypes line naming one op: {line!r}")
    en = doc.entries[0]
    return Edit(CUSTOMIZE, "", en.key, en.dtypes)


def mixed_mode_of(mode: str) -> str:
    """The mixed mode (the modes that apply a mixlist) with ``mode``'s low dtype."""
    return "mixed_bfloat16" if mode_info(mode)[1] == "bf16" else "mixed_float16"


def list_edits(edits: Iterable[Edit]) -> frozenset[Edit]:
    """The list edits among ``edits`` (per-op overrides -- keeps, customizes -- are not list edits)."""
    return frozenset(e for e in edits if not e.is_override)


def keep_lines(edits: Iterable[Edit]) -> tuple[str, ...]:
    """The keep_dtype lines among ``edits`` (sorted)."""
    return tuple(sorted(e.line for e in edits if e.is_keep))


def customize_lines(edits: Iterable[Edit]) -> tuple[str, ...]:
    """The customize_dtypes lines among ``edits`` (sorted)."""
    return tuple(sorted(e.line for e in edits if e.is_customize))


def override_edits(edits: Iterable[Edit]) -> frozenset[Edit]:
    """The per-op overrides among ``edits`` (keeps and customizes)."""
    return frozenset(e for e in edits if e.is_override)


def edits_of(m: Mixlist | None, keeps: Iterable[str] = (), customize: Iterable[str] = ()) -> frozenset[Edit]:
    """The edits of a mixlist (relative to whatever it is applied to), of keep_dtype lines and of
    customize_dtypes lines."""
    out = frozenset() if m is None else frozenset(Edit.of_entry(*x) for x in m.entries())
    return out | {keep_line_edit(ln) for ln in keeps} | {customize_line_edit(ln) for ln in customize}


def mixlist_of(edits: Iterable[Edit]) -> Mixlist | None:
    """The mixlist of the list edits among ``edits`` as written (None when there is none)."""
    parts: dict[str, list[str]] = {}
    for e in sorted(list_edits(edits), key=entry_order):
        parts.setdefault(f"{e.list}_{'add' if e.action == 'to-add' else 'remove'}", []).append(e.type)
    if not parts:
        return None
    return Mixlist(**{k: tuple(v) for k, v in parts.items()})


def lists_with(base: OpLists, edits: Iterable[Edit]) -> OpLists:
    """Effective lists after the list edits among ``edits`` (mixlist.with_targets: the one way lists are
    moved; keeps do not touch the lists)."""
    return with_targets(base, {e.type: e.target for e in list_edits(edits)})


def overrides_with(base: Overrides | None, edits: Iterable[Edit]) -> Overrides:
    """``base`` overrides plus the keeps and customizes among ``edits`` (a customize: ``Overrides.with_custom``
    of the op's name, which replaces an entry ``base`` has for it)."""
    edits = list(edits)
    keeps = [e for e in edits if e.is_keep]
    ov = base or NO_OVERRIDES
    if keeps:
        ov = ov.with_keep(names=[e.op for e in keeps if e.op], types=[e.type for e in keeps if not e.op])
    for e in edits:
        if e.is_customize:
            ov = ov.with_custom("name", e.op, e.custom)
    return ov


def edits_mixlist(base: OpLists, edits: Iterable[Edit]) -> Mixlist:
    """The mixlist (relative to ``base``) realising the list edits among ``edits``."""
    return from_targets(base, {e.type: e.target for e in list_edits(edits)})


def edits_to_json(edits: Iterable[Edit]) -> list[list[str]]:
    """The journal's form of an edit set: ``[[list, action, op type or keep line], ...]`` sorted."""
    return [list(e.entry) for e in sorted(edits, key=entry_order)]


def edits_from_json(x: Iterable[Sequence[str]]) -> frozenset[Edit]:
    return frozenset(Edit.of_entry(*e) for e in x)


def edits_summary(edits: Iterable[Edit]) -> dict:
    """{"black-list": {"to-add": [...], "to-remove": [...]}, "white-list": {...}} (gray only if used)."""
    return (mixlist_of(edits) or Mixlist()).to_dict()
