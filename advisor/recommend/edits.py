"""The edits the searches propose and recommendation.json lists: type-level list edits (modify_mixlist) and
per-op keeps (ATC ``--keep_dtype`` lines: an op by name, or every op of a type with ``OpType::``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..mixlist import Mixlist, from_targets, with_targets
from ..oplists import BLACK, GRAY, WHITE, OpLists
from ..overrides import NO_OVERRIDES, OPTYPE_PREFIX, Overrides
from ..semantics import mode_info

_TARGET = {"black-add": BLACK, "white-add": WHITE, "black-remove": GRAY, "white-remove": GRAY}
KEEP = "keep"


@dataclass(frozen=True)
class Edit:
    """One edit: ``kind`` in black-add / white-add / black-remove / white-remove (a list edit of ``type``), or
    ``keep`` (a keep_dtype line: the op named ``op``, of GE type ``type``; with ``op`` empty every op of
    ``type``, an ``OpType::`` line)."""

    kind: str
    type: str
    op: str = ""

    @property
    def is_keep(self) -> bool:
        return self.kind == KEEP

    @property
    def per_op(self) -> bool:
        """A per-instance edit (one op by name)."""
        return self.is_keep and bool(self.op)

    @property
    def target(self) -> str:
        return _TARGET[self.kind]

    @property
    def list(self) -> str:
        return "keep_dtype" if self.is_keep else self.kind.split("-")[0]

    @property
    def action(self) -> str:
        return "keep" if self.is_keep else ("to-add" if self.kind.endswith("add") else "to-remove")

    @property
    def line(self) -> str:
        """A keep's keep_dtype line."""
        return self.op if self.op else OPTYPE_PREFIX + self.type

    @property
    def slot(self) -> str:
        """What the edit decides: an op (per-op keep) or a type; a set holds at most one edit per slot."""
        return f"op:{self.op}" if self.op else self.type

    def __str__(self) -> str:
        if self.is_keep:
            return f"keep_dtype {self.op} ({self.type})" if self.op else f"keep_dtype {OPTYPE_PREFIX}{self.type}"
        return f"{self.list}-list {self.action} {self.type}"


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


def mixed_mode_of(mode: str) -> str:
    """The mixed mode (the modes that apply a mixlist) with ``mode``'s low dtype."""
    return "mixed_bfloat16" if mode_info(mode)[1] == "bf16" else "mixed_float16"


def list_edits(edits: Iterable[Edit]) -> list[Edit]:
    return [e for e in edits if not e.is_keep]


def lists_with(base: OpLists, edits: Iterable[Edit]) -> OpLists:
    """Effective lists after the list edits among ``edits`` (mixlist.with_targets: the one way lists are
    moved; keeps do not touch the lists)."""
    return with_targets(base, {e.type: e.target for e in list_edits(edits)})


def overrides_with(base: Overrides | None, edits: Iterable[Edit]) -> Overrides:
    """``base`` overrides plus the keeps among ``edits``."""
    keeps = [e for e in edits if e.is_keep]
    ov = base or NO_OVERRIDES
    if not keeps:
        return ov
    return ov.with_keep(names=[e.op for e in keeps if e.op], types=[e.type for e in keeps if not e.op])


def edits_mixlist(base: OpLists, edits: Iterable[Edit]) -> Mixlist:
    """The mixlist (relative to ``base``) realising the list edits among ``edits``."""
    return from_targets(base, {e.type: e.target for e in list_edits(edits)})
