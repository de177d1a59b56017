"""Edit sets as tune journals them: ``(list, action, op type)`` tuples, relative to the chip defaults, and per-op
keeps as ``("keep_dtype", "keep", line)`` (a line of ATC's --keep_dtype file: an op name or ``OpType::T``)."""
from __future__ import annotations

from typing import Iterable, Sequence

from ..mixlist import Mixlist

Edit = tuple[str, str, str]  # (list, action, op type) e.g. ("black", "to-add", "Exp")
KEEP_LIST, KEEP_ACTION = "keep_dtype", "keep"


def edits_of(m: Mixlist | None, keeps: Iterable[str] = ()) -> frozenset[Edit]:
    """The edits of a list and its per-op keep lines."""
    out = frozenset() if m is None else frozenset(m.entries())
    return out | {(KEEP_LIST, KEEP_ACTION, ln) for ln in keeps}


def keeps_of(edits: Iterable[Edit]) -> tuple[str, ...]:
    """The keep_dtype lines among ``edits`` (sorted)."""
    return tuple(sorted(e[2] for e in edits if e[0] == KEEP_LIST))


def list_edits(edits: Iterable[Edit]) -> frozenset[Edit]:
    return frozenset(e for e in edits if e[0] != KEEP_LIST)


def mixlist_from_edits(edits: Iterable[Edit]) -> Mixlist | None:
    """The mixlist of the list edits among ``edits`` (keeps are not list edits)."""
    parts: dict[str, list[str]] = {}
    for lst, action, t in sorted(list_edits(edits)):
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
