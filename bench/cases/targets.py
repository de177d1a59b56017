"""Capture targets for the generated cases: ``bench/cases/targets.py:case_dev_07`` (7th development case),
``case_holdout_03``, ``case_seed_12`` (any seed), e.g.

    advisor capture bench/cases/targets.py:case_dev_07 --out runs/dev07
    advisor tune bench/cases/targets.py:case_holdout_03 --out out/holdout03

Each name resolves to the case's zero-argument workload function (module ``__getattr__``).
"""
from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:            # loaded by file path (advisor capture FILE.py:NAME): make bench importable
    sys.path.insert(0, _ROOT)

from bench.cases.suite import SETS, resolve, target_names  # noqa: E402


def __getattr__(name: str):
    case = resolve(name)
    if case is None:
        raise AttributeError(name)
    return case.workload


def __dir__() -> list[str]:
    return [n for s in SETS for n in target_names(s)]
