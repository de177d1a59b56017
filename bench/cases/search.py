"""Brute force over black-list edit sets: the pieces shared by bench/bruteforce.py and the case oracle.

* ``low_precision_share(run_dir)`` -- THE definition of the low-precision share used by the oracle.
* ``candidate_types(run_dir, soc)`` -- the op types a black-list edit can act on.
* ``judge_run(run_dir, tolerance)`` -- the verdict ``advisor compare --run`` gives.
* ``search_black_subsets(types, judge, max_size)`` -- every subset up to ``max_size``, smallest first, with
  superset pruning.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Iterable, Sequence

LOW = ("fp16", "bf16")
FLOAT = LOW + ("fp32", "fp64")


def kernel_frame(run_dir: str | Path):
    """kernel_details.csv of a run directory as ingest's kernel frame."""
    from advisor.ingest import read_kernels
    files = sorted(Path(run_dir).glob("profile/**/kernel_details.csv"))
    if not files:
        raise FileNotFoundError(f"{run_dir}: no profile/**/kernel_details.csv")
    return read_kernels(files[0])


def low_precision_share(run_dir: str | Path) -> float | None:
    """Low-precision share of measured kernel time, advisor's own definition (``costmodel.kernel_low_share``:
    fp16/bf16 kernel time over fp16/bf16/fp32 kernel time, every step of the run's kernel_details.csv; a
    kernel's precision is ingest's ``kernel_precision``, kernels without a float input or output count in
    neither sum).  None when the run has no float kernel time."""
    from advisor.costmodel import kernel_low_share
    k = kernel_frame(run_dir)
    return kernel_low_share(k["precision"].astype(str).tolist(), k["duration_us"].astype(float).tolist())


def candidate_types(run_dir: str | Path, soc: str = "ascend910b", ops_info: str | None = None,
                    limit: int | None = None) -> list[str]:
    """The float op types present in the run (at least one kernel with a float precision) that are not
    already on the black list of the chip's default lists, the most kernel time first (ties by name);
    ``limit``: only that many of them."""
    from advisor.oplists import load_lists
    lists = load_lists(soc, ops_info)
    k = kernel_frame(run_dir)
    k = k[k["precision"].isin(FLOAT)]
    time = k.assign(type=k["type"].astype(str)).groupby("type")["duration_us"].sum()
    types = sorted((t for t in time.index if lists.list_of(t) != "black"), key=lambda t: (-float(time[t]), t))
    return types[:limit] if limit is not None else types


def judge_run(run_dir: str | Path, tolerance=None) -> dict:
    """The verdict ``advisor compare --run`` gives (compare's attribution on every common step: final outputs
    of every batch, loss and gradients for training runs) as ``Verdict.to_dict()``."""
    from advisor.compare import Tolerance
    from advisor.comparison import run_attribution
    att, _ = run_attribution(str(run_dir), tolerance or Tolerance())
    return att.verdict.to_dict()


def search_black_subsets(types: Sequence[str], judge: Callable[[frozenset], bool],
                         max_size: int | None = None) -> tuple[list[frozenset], list[frozenset]]:
    """Judge black-list subsets of ``types`` smallest first (then in the order of ``types``), the empty set
    first; ``judge(set) -> passes?``.  A strict superset of a passing set is never judged: it black-lists
    more, so it can neither need fewer edits nor keep more low-precision time.  Returns (judged sets in
    order, passing sets)."""
    judged: list[frozenset] = []
    passing: list[frozenset] = []
    top = len(types) if max_size is None else min(max_size, len(types))
    for k in range(0, top + 1):
        for combo in itertools.combinations(types, k):
            s = frozenset(combo)
            if any(p < s for p in passing):
                continue
            judged.append(s)
            if judge(s):
                passing.append(s)
    return judged, passing


def minimal_by(passing: Iterable[frozenset], key: Callable[[frozenset], float]) -> list[frozenset]:
    """The sets of ``passing`` with the smallest ``key`` (all ties)."""
    sets = list(passing)
    if not sets:
        return []
    best = min(key(s) for s in sets)
    return [s for s in sets if key(s) == best]
