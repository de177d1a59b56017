"""Edit sets as tune journals them: ``(list, action, op type)`` tuples, relative to the chip defaults."""
from __future__ import annotations

from typing import Iterable, Sequence

from ..mixlist import Mixlist

Edit = tuple[str, str, str]  # (list, action, op type) e.g. ("black", "to-add", "Exp")


def edits_of(m: Mixlist | None) -> frozenset[Edit]:
    return frozenset() if m is None else frozenset(m.entries())


def mixlist_from_edits(edits: Iterable[Edit]) -> Mixlist | None:
    parts: dict[str, list[str]] = {}
    for lst, action, t in sorted(edits):
        parts.setdefault(f"{lst}_{'add' if action == 'to-add' else 'remove'}", []).append(t)
    if not parts:
        return None
    return Mixlist(**{k: tuple(v) for k, v in parts.items()})


def edit_key(e: Edit) -> str:
    return f"{e[0]}:{e[1]}:{e[2]}"


def edits_to_json(edits: Iterable[Edit]) -> list[list[str]]:
    return [list(e) for e in sorted(edits)]


def edits_from_json(x: Iterable[Sequence[str]]) -> frozenset[Edit]:
    return frozenset(tuple(e) for e in x)  # type: ignore[misc]


def edits_summary(edits: Iterable[Edit]) -> dict:
    """{"black-list": {"to-add": [...], "to-remove": [...]}, "white-list": {...}} (gray only if used)."""
    m = mixlist_from_edits(edits)
    return (m or Mixlist()).to_dict()
