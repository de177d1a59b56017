"""Type-level list edits: what the searches propose and recommendation.json lists."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..mixlist import Mixlist, from_targets, with_targets
from ..oplists import BLACK, GRAY, WHITE, OpLists

_TARGET = {"black-add": BLACK, "white-add": WHITE, "black-remove": GRAY, "white-remove": GRAY}


@dataclass(frozen=True)
class Edit:
    """One type-level list edit: ``kind`` in black-add / white-add / black-remove / white-remove."""

    kind: str
    type: str

    @property
    def target(self) -> str:
        return _TARGET[self.kind]

    @property
    def list(self) -> str:
        return self.kind.split("-")[0]

    @property
    def action(self) -> str:
        return "to-add" if self.kind.endswith("add") else "to-remove"

    def __str__(self) -> str:
        return f"{self.list}-list {self.action} {self.type}"


def lists_with(base: OpLists, edits: Iterable[Edit]) -> OpLists:
    """Effective lists after ``edits`` (mixlist.with_targets: the one way lists are moved)."""
    return with_targets(base, {e.type: e.target for e in edits})


def edits_mixlist(base: OpLists, edits: Iterable[Edit]) -> Mixlist:
    """The mixlist (relative to ``base``) realising ``edits``."""
    return from_targets(base, {e.type: e.target for e in edits})
