"""Adapter to the shared tolerance (advisor.compare.tolerance.Tolerance).

The search only predicts a final relative L2 error (and whether the output becomes non-finite);
it judges a prediction with the shared Tolerance's limits: finite outputs, rel-L2 <= ``rel_l2``
and cosine >= ``cosine`` (cosine predicted as 1 - e^2/2, the small-error relation for an error
uncorrelated with the signal).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FallbackTolerance:
    """Used only when advisor.compare has not landed: the documented default tolerance."""

    rel_l2: float = 1e-2
    cosine: float = 0.999
    finite: bool = True


def default_tolerance() -> Any:
    try:
        from ..compare.tolerance import Tolerance  # type: ignore
        return Tolerance()
    except Exception:  # noqa: BLE001 - compare stage not available
        return FallbackTolerance()


def _first_attr(obj: Any, names: tuple[str, ...], default: float) -> float:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    if isinstance(obj, dict):
        for n in names:
            if isinstance(obj.get(n), (int, float)):
                return float(obj[n])
    return default


def limits(tol: Any) -> tuple[float, float, bool]:
    """(max rel-L2, min cosine, require finite) of any tolerance object."""
    rel = _first_attr(tol, ("rel_l2", "max_rel_l2", "rel_l2_max", "rtol_l2"), 1e-2)
    cos = _first_attr(tol, ("cosine", "min_cosine", "cosine_min", "cos"), 0.999)
    fin = getattr(tol, "finite", True)
    if not isinstance(fin, bool):
        fin = True
    return rel, cos, fin


def meets(tol: Any, rel_l2: float, nonfinite: bool) -> bool:
    rel, cos, fin = limits(tol)
    if nonfinite and fin:
        return False
    if not math.isfinite(rel_l2):
        return False
    return rel_l2 <= rel and (1.0 - 0.5 * rel_l2 ** 2) >= cos


def describe(tol: Any) -> dict:
    rel, cos, fin = limits(tol)
    d = {"rel_l2_max": rel, "cosine_min": cos, "finite": fin}
    to_dict = getattr(tol, "to_dict", None)
    if callable(to_dict):
        try:
            d["shared"] = to_dict()
        except Exception:  # noqa: BLE001
            pass
    return d
