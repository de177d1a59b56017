"""Training over steps in a run directory: ``train/steps.jsonl`` (one JSON object per optimizer step) and
``train/params.csv`` (one row per step and parameter) -- the format's one definition, its writer (the emulator's
training loop) and its reader (compare).  docs/formats.md "Training steps" documents every field.

Numbers follow advisor's JSON convention (``fsutil.json_safe``): a non-finite loss is ``null`` in steps.jsonl
(``loss_*_finite`` says so); params.csv writes ``inf`` / ``nan`` as such.  Readers go by key and column name and
tolerate missing optional ones (NaN), so a file written by an older version reads the same.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from ..errors import InputError

TRAIN_DIR = "train"
STEPS_FILE = f"{TRAIN_DIR}/steps.jsonl"
PARAMS_FILE = f"{TRAIN_DIR}/params.csv"

# steps.jsonl: key -> (meaning); "step" is required, the rest optional
STEP_KEYS = ("step", "batch", "loss_fp32", "loss_mixed", "loss_fp32_finite", "loss_mixed_finite", "scale",
             "next_scale", "overflow", "skipped", "grad_norm_fp32", "grad_norm_mixed", "weights_fp32_finite",
             "weights_mixed_finite", "anomalies", "n_anomalies", "dumped")
PARAM_COLUMNS = ("step", "param", "grad_norm_fp32", "grad_norm_mixed", "underflow", "overflow", "drift",
                 "drift_rel_l2")
ANOMALY_KEYS = ("index", "op", "type", "phase", "params")   # a mixed-run op that overflowed (execution order)
MAX_ANOMALIES = 8                                   # ops kept per step (n_anomalies counts them all)


@dataclass
class StepLog:
    """A run's training steps: ``steps`` one row per step (``STEP_KEYS``; ``anomalies`` a list per row), ``params``
    one row per step and parameter (``PARAM_COLUMNS``), ``meta`` run.json's ``train`` object."""

    steps: pd.DataFrame
    params: pd.DataFrame
    meta: dict = field(default_factory=dict)
    path: Path | None = None


def has_steps(run_dir: str | Path) -> bool:
    return (Path(run_dir) / STEPS_FILE).is_file()


def step_row(step: int, n_batches: int, loss_fp32: float, loss_mixed: float, taken: Any, grads: Mapping,
             weights_finite: tuple, anomalies: list, n_anomalies: int, dumped: bool) -> dict:
    """One train/steps.jsonl record, as both training loops (PyTorch, Keras) write it: ``taken`` is the scaler's
    step (scale, next_scale, overflow, skipped), ``grads`` the per-parameter rows (their grad norms add up in
    quadrature), ``weights_finite`` (FP32, mixed)."""
    def total(key: str) -> float:
        return math.sqrt(sum(r[key] * r[key] for r in grads.values()))
    return {"step": step, "batch": step % n_batches, "loss_fp32": loss_fp32, "loss_mixed": loss_mixed,
            "loss_fp32_finite": math.isfinite(loss_fp32), "loss_mixed_finite": math.isfinite(loss_mixed),
            "scale": taken.scale, "next_scale": taken.next_scale, "overflow": taken.overflow,
            "skipped": taken.skipped, "grad_norm_fp32": total("grad_norm_fp32"),
            "grad_norm_mixed": total("grad_norm_mixed"),
            "weights_fp32_finite": weights_finite[0], "weights_mixed_finite": weights_finite[1],
            "anomalies": anomalies, "n_anomalies": n_anomalies, "dumped": dumped}


def write_steps(out: Path, steps: Iterable[Mapping], params: Iterable[Mapping]) -> list[Path]:
    """Write both files into the run directory ``out`` (atomically); returns their paths."""
    from ..fsutil import atomic_write_text, json_safe
    d = Path(out) / TRAIN_DIR
    d.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(json_safe({k: r[k] for k in STEP_KEYS if k in r}), allow_nan=False) for r in steps]
    atomic_write_text(Path(out) / STEPS_FILE, "".join(ln + "\n" for ln in lines))
    frame = pd.DataFrame(list(params), columns=list(PARAM_COLUMNS))
    atomic_write_text(Path(out) / PARAMS_FILE, frame.to_csv(index=False))
    return [Path(out) / STEPS_FILE, Path(out) / PARAMS_FILE]


def read_steps(run_dir: str | Path, meta: Mapping | None = None) -> StepLog | None:
    """The run's StepLog, or None when it has no ``train/steps.jsonl``.  A malformed file is an InputError naming it
    and the line."""
    run_dir = Path(run_dir)
    p = run_dir / STEPS_FILE
    if not p.is_file():
        return None
    rows = []
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(p, f"cannot read: {e}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(p, f"line {n}: not JSON ({e.msg})") from None
        if not isinstance(r, dict) or not isinstance(r.get("step"), int):
            raise InputError(p, f"line {n}: a step object needs an integer \"step\"")
        rows.append(r)
    if not rows:
        raise InputError(p, "no steps")
    steps = pd.DataFrame(rows)
    for k in STEP_KEYS:
        if k not in steps:
            steps[k] = None if k == "anomalies" else math.nan
    steps["anomalies"] = [a if isinstance(a, list) else [] for a in steps["anomalies"]]
    for k in ("loss_fp32", "loss_mixed", "scale", "next_scale", "grad_norm_fp32", "grad_norm_mixed"):
        steps[k] = pd.to_numeric(steps[k], errors="coerce").astype(float)
    for k in ("loss_fp32", "loss_mixed"):   # null = non-finite; the flag keeps what it was
        fin = steps[f"{k}_finite"]
        steps[f"{k}_finite"] = [bool(f) if isinstance(f, bool) else math.isfinite(v) for f, v in zip(fin, steps[k])]
    steps = steps.sort_values("step", kind="stable").reset_index(drop=True)
    return StepLog(steps, _read_params(run_dir / PARAMS_FILE), dict(meta or {}), p)


def _read_params(p: Path) -> pd.DataFrame:
    if not p.is_file():
        return pd.DataFrame(columns=list(PARAM_COLUMNS))
    try:
        f = pd.read_csv(p)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise InputError(p, f"not a CSV table: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = [c for c in ("step", "param") if c not in f]
    if missing:
        raise InputError(p, f"missing column(s) {', '.join(missing)}")
    for c in PARAM_COLUMNS[2:]:
        f[c] = pd.to_numeric(f[c], errors="coerce").astype(float) if c in f else math.nan
    f["param"] = f["param"].astype(str)
    return f


def anomaly(index: int, op: str, typ: str, phase: str, params: list[str] = ()) -> dict:
    """One anomalous op of a step (``ANOMALY_KEYS``): its index in the step's execution order, name, GE type, phase
    ("fwd" / "bwd") and the parameters it reads."""
    return {"index": int(index), "op": op, "type": typ, "phase": phase, "params": list(params)}


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


__all__ = ["StepLog", "has_steps", "read_steps", "write_steps", "anomaly", "finite", "STEPS_FILE", "PARAMS_FILE",
           "STEP_KEYS", "PARAM_COLUMNS", "ANOMALY_KEYS", "MAX_ANOMALIES"]
