"""The fixed torch_npu case suite: a development set and a held-out set, both from ``generator.make_case``.

The seeds were fixed before any case was generated or measured: the development set is seeds 0-17, the held-out
set seeds 1000-1017 (the same generator, other seeds).  The kind follows the seed (``seed % 3``: hazard, control,
hazard), so each set holds 12 hazards and 6 controls.  Calibrate against the development set only; the held-out
set is for reporting (look at its counts, not its cases).
"""
from __future__ import annotations

from .generator import NpuCase, make_case

DEV_SEEDS = tuple(range(0, 18))
HOLDOUT_SEEDS = tuple(range(1000, 1018))
SETS = {"dev": DEV_SEEDS, "holdout": HOLDOUT_SEEDS}


def cases(set_name: str) -> list[NpuCase]:
    return [make_case(s) for s in SETS[set_name]]
