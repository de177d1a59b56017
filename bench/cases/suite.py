"""The fixed case suite: a development set and a held-out set, both from ``generator.make_case``.

The seeds were fixed before any case was generated or measured: the development set is seeds 0-39, the
held-out set seeds 1000-1039 (the same generator, other seeds).  The generator derives the kind from the seed
(``seed % 4``: hazard, control, hazard, training), so each set holds 20 hazards, 10 controls and 10 training
cases.  Tune and calibrate against the development set only; the held-out set is for reporting.

Capture targets (bench/cases/targets.py): ``case_dev_NN`` / ``case_holdout_NN`` (NN = index in the set) and
``case_seed_N`` (any seed).
"""
from __future__ import annotations

import re

from .generator import Case, make_case

DEV_SEEDS = tuple(range(0, 40))
HOLDOUT_SEEDS = tuple(range(1000, 1040))
SETS = {"dev": DEV_SEEDS, "holdout": HOLDOUT_SEEDS}
_TARGET = re.compile(r"case_(?:(dev|holdout)_(\d+)|seed_(\d+))")


def cases(set_name: str) -> list[Case]:
    return [make_case(s) for s in SETS[set_name]]


def target_names(set_name: str) -> list[str]:
    return [f"case_{set_name}_{i:02d}" for i in range(len(SETS[set_name]))]


def resolve(name: str) -> Case | None:
    """The case a target name stands for (``case_dev_07``, ``case_holdout_3``, ``case_seed_12``), else None."""
    m = _TARGET.fullmatch(name)
    if m is None:
        return None
    if m.group(3) is not None:
        return make_case(int(m.group(3)))
    seeds = SETS[m.group(1)]
    i = int(m.group(2))
    return make_case(seeds[i]) if i < len(seeds) else None
