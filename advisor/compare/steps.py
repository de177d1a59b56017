"""compare over training steps (a run with ``train/steps.jsonl``): the first step where the mixed run departs from
the FP32 run, the op and parameter that lead there, and whether it is a precision problem at all.

A step *departs* (docs/compare.md "Over steps"; every rule a choice unless its line says otherwise), checked in this
order at each step, the first step that meets any of them being the departure:

1. ``non-finite`` -- the mixed run's loss or weights are non-finite;
2. ``scale-collapse`` -- the scale a step used fell below ``Tolerance.min_loss_scale`` (and below the first step's);
3. ``skipped`` -- more than ``MAX_CONSECUTIVE_SKIPS`` consecutive skipped steps after an applied step (departing
   at the first of them): one halving absorbs a passing spike or a growth probe (how dynamic scaling works), and
   the calibration skips from the initial scale down happen before any step is applied -- neither counts;
4. ``loss`` -- the loss relative difference (``tolerance.loss_rel_diff``) above ``Tolerance.max_loss_rel`` for
   ``LOSS_PATIENCE`` consecutive steps (or up to the last step): a lag a skipped step causes closes again;
5. ``drift`` -- a parameter's weight drift (``train/params.csv`` ``drift``) above ``Tolerance.max_weight_drift``.

The op leading there is the first anomaly of the departure step in execution order -- msprobe's monitor sorts its
anomalies by step, then training stage (forward before backward), then call id (docs/semantics.md "Loss
scalers") -- i.e. the first op of the mixed run whose output overflowed (``EmuMode._note_overflow``); the parameter
is one that op reads (directly or through views), else the one whose gradient overflowed most at that step (ties:
the one registered last, which a sequential model's backward reaches first; choice), else the one drifting most.

*Not a precision problem*: the FP32 run diverges too -- a non-finite FP32 loss or weight, or an FP32 loss above
``FP32_DIVERGE`` times its first step's, anywhere in the steps: the reference itself fails (choice).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..ingest.steps import StepLog
from .tolerance import Tolerance, loss_rel_diff

LOSS_PATIENCE = 5        # consecutive steps a loss difference must last (choice)
MAX_CONSECUTIVE_SKIPS = 1  # skipped steps in a row after training started that are still normal (choice)
FP32_DIVERGE = 10.0      # an FP32 loss this many times its first step's is divergence (choice)
REASONS = ("non-finite", "scale-collapse", "skipped", "loss", "drift")


@dataclass
class Departure:
    """The first step where the mixed run departs, why, and what leads there."""

    step: int
    reason: str                      # one of REASONS
    detail: str
    op: str | None = None            # the first anomalous op of the step (execution order)
    op_type: str | None = None
    phase: str | None = None         # "fwd" | "bwd"
    param: str | None = None
    precision: bool = True           # False: the FP32 run diverges too (at or before this step)


@dataclass
class StepsVerdict:
    """compare's result over the steps of a training run (``to_dict``: its JSON under ``training_steps``)."""

    steps: int
    skipped: int
    overflow_steps: int
    first_scale: float
    min_scale: float
    last_scale: float
    last_loss_fp32: float
    last_loss_mixed: float
    max_drift: float
    departure: Departure | None = None
    fp32_diverges_at: int | None = None
    skipped_steps: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No departure that is a precision problem."""
        return self.departure is None or not self.departure.precision

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok, "summary": self.sentence()}

    def sentence(self) -> str:
        d = self.departure
        head = (f"{self.steps} steps: {self.skipped} skipped, scale {self.first_scale:g} -> {self.last_scale:g} "
                f"(min {self.min_scale:g}), last loss FP32 {self.last_loss_fp32:.6g} / mixed {self.last_loss_mixed:.6g}")
        if d is None:
            tail = "no departure" + (f"; the FP32 run diverges at step {self.fp32_diverges_at}"
                                     if self.fp32_diverges_at is not None else "")
            return f"{head}: {tail}."
        lead = ", ".join(x for x in (f"op {d.op} ({d.op_type}, {d.phase})" if d.op else "",
                                      f"parameter {d.param}" if d.param else "") if x)
        prec = "" if d.precision else (f"; not a precision problem: the FP32 run diverges too (step "
                                       f"{self.fp32_diverges_at})")
        return f"{head}: departs at step {d.step} ({d.reason}: {d.detail})" + (f", led by {lead}" if lead else "") + \
            prec + "."


def judge_steps(log: StepLog, tol: Tolerance | None = None) -> StepsVerdict:
    """The verdict over a run's steps (module docstring)."""
    tol = tol or Tolerance()
    st = log.steps
    scales = st["scale"].to_numpy(float)
    skipped = st["skipped"].fillna(False).astype(bool).to_numpy()
    drift = _max_drift(log)
    found = _first_departure(st, drift, tol)
    fp32_at = _fp32_divergence(st)
    dep = None
    if found is not None:
        i, reason, detail = found
        dep = _lead(log, i, reason, detail)
        dep.precision = fp32_at is None
    return StepsVerdict(
        steps=len(st), skipped=int(skipped.sum()), overflow_steps=int(st["overflow"].fillna(False).astype(bool).sum()),
        first_scale=float(scales[0]), min_scale=float(np.nanmin(scales)), last_scale=float(st["next_scale"].iloc[-1]),
        last_loss_fp32=float(st["loss_fp32"].iloc[-1]), last_loss_mixed=float(st["loss_mixed"].iloc[-1]),
        max_drift=float(np.nanmax(drift)) if len(drift) and not np.isnan(drift).all() else 0.0,
        departure=dep, fp32_diverges_at=fp32_at,
        skipped_steps=[int(s) for s in st["step"][skipped][:50]])


def _max_drift(log: StepLog) -> np.ndarray:
    """Per step row: the largest parameter drift (inf for a non-finite one), NaN without params.csv rows."""
    p = log.params
    steps = log.steps["step"].to_numpy()
    if p.empty:
        return np.full(len(steps), np.nan)
    d = p["drift"].to_numpy(float)
    d = np.where(np.isnan(d), np.inf, d)
    per = pd.Series(d).groupby(p["step"].to_numpy()).max()
    return per.reindex(steps).to_numpy(float)


def _first_departure(st: pd.DataFrame, drift: np.ndarray, tol: Tolerance) -> tuple[int, str, str] | None:
    """(row, reason, detail) of the first departing step, or None."""
    n = len(st)
    lm, lf = st["loss_mixed"].to_numpy(float), st["loss_fp32"].to_numpy(float)
    fin_l = st["loss_mixed_finite"].astype(bool).to_numpy()
    fin_w = st["weights_mixed_finite"].fillna(True).astype(bool).to_numpy()
    scale = st["scale"].to_numpy(float)
    skipped = st["skipped"].fillna(False).astype(bool).to_numpy()
    rel = np.array([loss_rel_diff(a, b) if fin else math.inf for a, b, fin in zip(lm, lf, fin_l)])
    over = rel > tol.max_loss_rel
    run = np.zeros(n, dtype=int)            # consecutive steps over tolerance ending at each row
    for i in range(n):
        run[i] = run[i - 1] + 1 if over[i] and i else int(over[i])
    applied = np.cumsum(~skipped)           # applied steps up to and including each row
    for i in range(n):
        s = int(st["step"].iloc[i])
        if not fin_l[i] or not fin_w[i]:
            what = "loss" if not fin_l[i] else "weights"
            return i, "non-finite", f"the mixed run's {what} non-finite at step {s}"
        if scale[i] < tol.min_loss_scale and scale[i] < scale[0]:
            return i, "scale-collapse", f"loss scale {scale[i]:g} below the floor {tol.min_loss_scale:g}"
        if skipped[i] and applied[i] > 0 and (i == 0 or not skipped[i - 1]):
            j = i
            while j + 1 < n and skipped[j + 1]:
                j += 1
            if j - i + 1 > MAX_CONSECUTIVE_SKIPS:
                return i, "skipped", (f"{j - i + 1} consecutive steps skipped on overflow from step {s} (scale "
                                      f"{scale[i]:g} -> {scale[j]:g}) after training had started")
        if over[i]:
            j = i
            while j + 1 < n and over[j + 1] and j - i + 1 < LOSS_PATIENCE:
                j += 1
            if j - i + 1 >= LOSS_PATIENCE or j == n - 1:
                return i, "loss", (f"loss relative difference {rel[i]:.3g} > {tol.max_loss_rel:g} from step {s} "
                                   f"({j - i + 1} consecutive steps)")
        if drift[i] > tol.max_weight_drift:
            return i, "drift", f"weight drift {drift[i]:.3g} > {tol.max_weight_drift:g}"
    return None


def _fp32_divergence(st: pd.DataFrame) -> int | None:
    """The first step where the FP32 run itself diverges (module docstring), or None."""
    lf = st["loss_fp32"].to_numpy(float)
    fin = st["loss_fp32_finite"].astype(bool).to_numpy() & st["weights_fp32_finite"].fillna(True).astype(bool).to_numpy()
    first = next((abs(v) for v, f in zip(lf, fin) if f), None)
    for i in range(len(st)):
        if not fin[i] or (first is not None and first > 0 and abs(lf[i]) > FP32_DIVERGE * first):
            return int(st["step"].iloc[i])
    return None


def _lead(log: StepLog, i: int, reason: str, detail: str) -> Departure:
    """The departure of row ``i`` with the op and parameter leading there."""
    row = log.steps.iloc[i]
    s = int(row["step"])
    dep = Departure(s, reason, detail)
    anomalies = row["anomalies"] or []
    if anomalies:          # execution order: forward before backward, then call order
        a = min(anomalies, key=lambda x: int(x.get("index", 0)))
        dep.op, dep.op_type, dep.phase = a.get("op"), a.get("type"), a.get("phase")
        if a.get("params"):
            dep.param = str(a["params"][0])
            return dep
    p = log.params[log.params["step"] == s].iloc[::-1]      # registered last first
    if not p.empty:
        ov = np.nan_to_num(p["overflow"].to_numpy(float), nan=0.0)
        key = ov if ov.max() > 0 else np.nan_to_num(p["drift"].to_numpy(float), nan=np.inf)
        dep.param = str(p["param"].iloc[int(np.argmax(key))])
    return dep


def steps_summary(log: StepLog) -> dict[str, Any]:
    """The curves report.html plots: step, both losses, the scale, skipped steps, per-parameter drift."""
    st = log.steps
    p = log.params
    drift = {}
    if not p.empty:
        for name, g in p.groupby("param", sort=False):
            drift[str(name)] = g.sort_values("step")["drift"].astype(float).tolist()
    return {"step": st["step"].astype(int).tolist(), "loss_fp32": st["loss_fp32"].astype(float).tolist(),
            "loss_mixed": st["loss_mixed"].astype(float).tolist(), "scale": st["scale"].astype(float).tolist(),
            "skipped": st["skipped"].fillna(False).astype(bool).tolist(), "drift": drift}


__all__ = ["Departure", "StepsVerdict", "judge_steps", "steps_summary", "LOSS_PATIENCE", "FP32_DIVERGE", "REASONS",
           "MAX_CONSECUTIVE_SKIPS"]
