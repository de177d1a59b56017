"""Training signals from dumped parameter gradients: msprobe's ``<prefix>.<Class>.parameters_grad[.N]``
entries (``Module.fc1.Linear.parameters_grad`` -> ``{"weight": [record], "bias": [record]}``, parameter
``fc1.weight``) and the emulator's ``Grad.<param>`` entries (``{"output": [record]}``).

Per parameter: the underflow ratio (share of elements that are zero in the target but non-zero in
the golden) against the seed's 1 % rule, overflow (non-finite target gradients, and in saturation mode
-- Atlas training/inference chips, docs/semantics.md "Overflow mode" -- elements at exactly ±max of a
low-dtype target where the golden is not: ``target_saturated``), cosine and relative L2.  A loss-scale
recommendation from the golden gradients' magnitudes:

* the static scale is the smallest power of two S for which fewer than 1 % of all gradient elements
  have a non-zero golden value with |g|·S below the low dtype's smallest normal (6.1e-5 for fp16),
  provided max |g|·S stays below max/``HEADROOM`` (65504/16 for fp16);
* when no such S exists (the magnitudes span more than the low dtype's normal range allows) or the
  target already overflows, dynamic loss scaling is recommended.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..ingest.msprobe import PARAM_GRAD_ENTRY, param_grad_name
from .dumps import DumpView
from .metrics import LOW_MAX, LOW_TINY, tensor_metrics, to_numpy

GRAD_PREFIX = "Grad."
HEADROOM = 16.0
MAX_LOG2_SCALE = 32


def grad_records(d: DumpView) -> dict[str, Any]:
    """Parameter name -> its gradient record, from both namings (module docstring)."""
    out: dict[str, Any] = {}
    for e in d.entries:
        if e.startswith(GRAD_PREFIX):
            o = d.outputs(e)
            if o:
                out[e[len(GRAD_PREFIX):]] = o[0][1]
        elif PARAM_GRAD_ENTRY.match(e):
            for key, rec in d.param_grads(e):
                out[param_grad_name(e, key)] = rec
    return out


@dataclass(frozen=True)
class GradFlags:
    """Element counts of a target (low-precision) gradient against its golden (FP32) one."""

    underflow: int       # zero in the target, non-zero (and finite) in the golden
    golden_nonzero: int  # non-zero finite golden elements
    nonfinite: int       # non-finite in the target where the golden is finite
    saturated: int       # saturation mode: at exactly ±max of the target's low dtype where the golden is not


def grad_element_flags(at: Any, ag: Any, lim: float | None = None) -> GradFlags:
    """The one rule of gradient underflow and overflow by element (compare's training signals, the training
    steps' per-parameter shares): ``lim`` the largest value of the target's low dtype in saturation mode, where an
    overflow reads as ±max (docs/semantics.md "Overflow mode"), else None.  ``at`` / ``ag``: numpy arrays, or torch
    tensors (the emulator's training loop: no copy to numpy)."""
    xp = np if isinstance(at, np.ndarray) else _torch()
    gf = xp.isfinite(ag)
    nz = (ag != 0) & gf
    sat = int(((xp.abs(at) == lim) & (xp.abs(ag) != lim)).sum()) if lim is not None else 0
    return GradFlags(int(((at == 0) & nz).sum()), int(nz.sum()), int((~xp.isfinite(at) & gf).sum()), sat)


def drift_values(d: float, norm: float, rms: float, numel: int) -> tuple[float, float]:
    """(``drift``, ``drift_rel_l2``) of a parameter whose runs' weights differ by the L2 norm ``d`` (train/params.csv,
    both training loops): ``d`` over the larger of the FP32 weight's norm and the norm the parameter would have at
    the model's RMS weight ``rms`` (so a parameter near zero, a fresh bias, is measured against the model's scale),
    and ``d`` over the FP32 norm."""
    ref = max(norm, rms * math.sqrt(numel))
    drift = d / ref if ref > 0 else (0.0 if d == 0 else math.inf)
    return drift, d / norm if norm > 0 else (0.0 if d == 0 else math.inf)


def _torch() -> Any:
    import torch
    return torch


def scale_text(s: float) -> str:
    """A loss scale for people: ``1048576 (2^20)``, ``1000``."""
    v = float(s)
    txt = str(int(v)) if v.is_integer() and abs(v) < 1e18 else f"{v:g}"
    k = math.log2(v) if v > 0 else 0.0
    return f"{txt} (2^{int(k)})" if k.is_integer() and k > 0 else txt


def recommend_loss_scale(golden_abs: np.ndarray, low_dtype: str = "fp16", max_underflow: float = 0.01,
                         total: int | None = None) -> dict:
    """Smallest power-of-two loss scale moving the underflowing share below ``max_underflow``.
    ``golden_abs``: |golden gradient| values (all elements, zeros included) pooled over parameters."""
    a = np.abs(np.asarray(golden_abs, dtype=np.float64).reshape(-1))
    a = a[np.isfinite(a)]
    n = int(total if total is not None else a.size)
    tiny, big = LOW_TINY.get(low_dtype, LOW_TINY["fp16"]), LOW_MAX.get(low_dtype, LOW_MAX["fp16"])
    nz = np.sort(a[a > 0])
    amax = float(nz[-1]) if nz.size else 0.0
    if n == 0 or nz.size == 0:
        return {"static": 1, "log2": 0, "dynamic": False, "predicted_underflow": 0.0, "low_dtype": low_dtype,
                "reason": "no non-zero golden gradients"}
    allowed = int(math.floor(max_underflow * n))
    if allowed >= nz.size:
        need = 0.0
    else:
        need = float(nz[allowed])  # at most `allowed` elements lie strictly below this magnitude
    # |g|*S >= tiny for every g >= need  <=>  S >= tiny / need
    k = 0 if need == 0.0 or need >= tiny else int(math.ceil(math.log2(tiny / need)))
    k = max(k, 0)
    scale = 2.0 ** k
    pred = float(np.count_nonzero(nz * scale < tiny)) / n
    while pred >= max_underflow and k < MAX_LOG2_SCALE:  # guard rounding at the boundary
        k += 1
        scale = 2.0 ** k
        pred = float(np.count_nonzero(nz * scale < tiny)) / n
    fits = amax * scale <= big / HEADROOM
    out = {"static": int(scale) if k < 63 else scale, "log2": k, "predicted_underflow": pred,
           "max_scaled": amax * scale, "low_dtype": low_dtype, "dynamic": not fits or pred >= max_underflow}
    out["reason"] = ("gradient magnitudes span more than the low dtype's range: a static scale that avoids "
                     "underflow overflows; use dynamic loss scaling") if out["dynamic"] else \
        f"2^{k} keeps {100 * (1 - pred):.2f} % of gradient elements at or above {tiny:.3g} and max |g|*S below {big / HEADROOM:.4g}"
    return out


def training_signals(ts: Mapping[int, DumpView], gs: Mapping[int, DumpView], steps: list[int],
                     tol: Any = None, low_dtype: str | None = None) -> dict | None:
    """Gradient signals of all steps, or None when no gradients were dumped."""
    from .tolerance import Tolerance
    tol = tol if tol is not None else Tolerance()
    tally = _GradTally(tol)
    for s in steps:
        tally.add_step(s, ts[s], gs[s])
    if not tally.params:
        return None
    return tally.summary(tol.max_grad_underflow, low_dtype)


@dataclass
class _Pair:
    """One parameter's gradient pair at one step, reduced to the sums the rules need."""

    name: str
    numel: int                  # elements (0: unknown, statistics without a shape)
    golden_sq: float            # sum of the golden's squares (its Norm squared)
    err_sq: float               # sum of squared differences (inf: the target is non-finite where the golden is not);
                                # statistics only: the lower bound (|Norm_t| - |Norm_g|)^2
    cosine: float | None = None
    golden_abs: np.ndarray | None = None
    underflow: int = 0


class _GradTally:
    """Per-parameter gradient signals accumulated over the steps (``training_signals``).  Each step's pairs are
    reduced first; then the step's gradient scale decides, per parameter, whether its gradient is judged by cosine
    or -- negligible against the scale (``Tolerance.grad_is_negligible``) -- by absolute error against it."""

    def __init__(self, tol: Any) -> None:
        self.tol = tol
        self.params: dict[str, dict] = {}
        self.golden_abs: list[np.ndarray] = []
        self.per_step_cos: dict[int, tuple[float, str]] = {}
        self.per_step_abs: dict[int, tuple[float, str]] = {}
        self.scale: dict[int, float] = {}
        self.seen_low: str | None = None
        self.total = 0
        self.underflow = 0

    def add_step(self, s: int, t: DumpView, g: DumpView) -> None:
        """Every parameter gradient dumped in both runs of step ``s``: tensors where both sides
        have them, else what the statistics show."""
        golden = grad_records(g)
        pairs: list[_Pair] = []
        for name, rt in grad_records(t).items():
            rg = golden.get(name)
            if rg is None:
                continue
            xt = t.tensor(rt) if t.has_tensors(rt) else None
            xg = g.tensor(rg) if g.has_tensors(rg) else None
            p = self.params.setdefault(name, {"param": name, "numel": 0, "underflow_elems": 0, "target_nonfinite": 0,
                                              "target_saturated": 0, "min_cosine": 1.0, "max_rel_l2": 0.0,
                                              "tensors": False})
            lim = LOW_MAX.get(self._note_dtype(rt) or "")
            pair = self._stats_pair(p, name, rt, rg, lim) if xt is None or xg is None else \
                self._tensor_pair(p, name, to_numpy(xt).reshape(-1), to_numpy(xg).reshape(-1), lim)
            if pair is not None:
                pairs.append(pair)
        self._judge_step(s, pairs)

    def _note_dtype(self, rt: Mapping) -> str | None:
        """The low dtype the target's gradients show (bf16 wins over fp16); returns this record's (or None)."""
        d = str(rt.get("dtype", "")).lower()
        if "bfloat16" in d or "bf16" in d:
            self.seen_low = "bf16"
            return "bf16"
        if "float16" in d or "fp16" in d:
            if self.seen_low is None:
                self.seen_low = "fp16"
            return "fp16"
        return None

    def _stats_pair(self, p: dict, name: str, rt: Mapping, rg: Mapping, lim: float | None = None) -> _Pair | None:
        """Statistics only: the Norms give the golden's size exactly and a lower bound of the error; a gradient
        whose Norm is 0 in the target but not in the golden flushed to zero entirely (its element share cannot be
        known from statistics) -- unless the golden is negligible (decided with the step's scale).  In saturation
        mode an overflow reads as ±max of the low dtype (``lim``) in the target's Max/Min."""
        p["stats_only"] = True
        try:
            nt, ng = float(rt.get("Norm")), float(rg.get("Norm"))
            if math.isfinite(nt) and lim is not None and any(
                    rt.get(k) is not None and abs(float(rt[k])) == lim and (
                        rg.get(k) is None or abs(float(rg[k])) != lim) for k in ("Max", "Min")):
                p["target_saturated"] += 1
        except (TypeError, ValueError):
            return None
        if not math.isfinite(nt):
            p["target_nonfinite"] += 1
        shape = rg.get("shape")
        numel = int(np.prod(shape)) if isinstance(shape, (list, tuple)) else 0
        err = (nt - ng) ** 2 if math.isfinite(nt) else math.inf
        return _Pair(name, numel, ng * ng if math.isfinite(ng) else 0.0, err,
                     cosine=0.0 if nt == 0.0 and ng > 0.0 else None)

    def _tensor_pair(self, p: dict, name: str, at: np.ndarray, ag: np.ndarray, lim: float | None = None
                     ) -> _Pair | None:
        """Tensors on both sides: underflowed and non-finite elements, cosine and relative L2."""
        if at.size != ag.size:
            return None
        p["tensors"] = True
        p["numel"] += int(at.size)
        f = grad_element_flags(at, ag, lim)
        under = f.underflow
        p["underflow_elems"] += under
        p["target_nonfinite"] += f.nonfinite
        p["target_saturated"] += f.saturated
        m = tensor_metrics(at, ag, "fp32")
        p["max_rel_l2"] = max(p["max_rel_l2"], m["rel_l2"])
        gf = np.isfinite(ag)
        gsq = float(np.vdot(ag[gf], ag[gf]))
        err = math.inf if not m["finite"] else float(m["euc_dist"]) ** 2
        return _Pair(name, int(at.size), gsq, err, m["cosine"], np.abs(ag), under)

    def _judge_step(self, s: int, pairs: list[_Pair]) -> None:
        """The step's gradient scale (RMS of every FP32 gradient element), then each parameter by the rule it falls
        under: cosine (its worst is the step's ``grad_min_cosine``) or absolute error against the scale
        (``grad_abs_error``: RMS error over the scale)."""
        sized = [q for q in pairs if q.numel]
        n = sum(q.numel for q in sized)
        scale = math.sqrt(sum(q.golden_sq for q in sized) / n) if n else 0.0
        self.scale[s] = scale
        for q in pairs:
            p = self.params[q.name]
            rms = math.sqrt(q.golden_sq / q.numel) if q.numel else math.nan
            if q.numel and self.tol.grad_is_negligible(rms, scale):
                err = math.sqrt(q.err_sq / q.numel) / scale if math.isfinite(q.err_sq) else math.inf
                p["negligible_steps"] = p.get("negligible_steps", 0) + 1
                p["golden_rms_over_scale"] = max(p.get("golden_rms_over_scale", 0.0), rms / scale)
                p["max_abs_error_over_scale"] = max(p.get("max_abs_error_over_scale", 0.0), err)
                c = self.per_step_abs.get(s)
                if c is None or not err <= c[0]:
                    self.per_step_abs[s] = (err, q.name)
                continue
            if q.golden_abs is not None:          # judged by cosine: its elements count for underflow and scaling
                self.golden_abs.append(q.golden_abs)
                self.total += q.numel
                self.underflow += q.underflow
            if q.cosine is None:
                continue
            if q.cosine == 0.0 and q.golden_abs is None:
                p["all_zero_in_target"] = True      # statistics: a zero vector against a non-zero one
            p["min_cosine"] = min(p["min_cosine"], q.cosine)
            c = self.per_step_cos.get(s)
            if c is None or q.cosine < c[0]:
                self.per_step_cos[s] = (q.cosine, q.name)

    def summary(self, max_uf: float, low_dtype: str | None) -> dict:
        """The parameters worst underflow first, the overall ratios and verdicts, the loss-scale advice.  Gradients
        judged by absolute error (negligible against the scale: zero up to rounding) are left out of the overall
        underflow ratio and of the loss scale (their underflow is rounding noise flushed to zero)."""
        total = self.total
        low = low_dtype or self.seen_low or "fp16"
        rows = []
        for p in self.params.values():
            p["underflow_ratio"] = p["underflow_elems"] / p["numel"] if p["numel"] else math.nan
            p["underflow_exceeds"] = bool(p["numel"] and p["underflow_ratio"] > max_uf)
            p["judged_by"] = "absolute error" if p.get("negligible_steps") else "cosine"
            rows.append(p)
        rows.sort(key=lambda r: -(r["underflow_ratio"] if r["numel"] else -1))
        overall = self.underflow / total if total else math.nan
        overflow = sum(p["target_nonfinite"] + p.get("target_saturated", 0) for p in rows)
        all_zero = [p["param"] for p in rows if p.get("all_zero_in_target")]
        negligible = [p["param"] for p in rows if p.get("negligible_steps")]
        out: dict[str, Any] = {"params": rows, "underflow_ratio": overall, "overflow_elems": overflow,
                               "max_underflow": max_uf, "low_dtype": low,
                               "grad_min_cosine_per_step": self.per_step_cos,
                               "grad_abs_error_per_step": self.per_step_abs,
                               "grad_scale_per_step": self.scale,
                               "negligible": negligible,
                               "grad_negligible": self.tol.grad_negligible, "max_grad_abs": self.tol.max_grad_abs,
                               "underflow_exceeds": bool(total and overall > max_uf) or bool(all_zero),
                               "all_zero_in_target": all_zero, "overflow": overflow > 0}
        if self.golden_abs:
            rec = recommend_loss_scale(np.concatenate(self.golden_abs), low, max_uf, total)
            if overflow > 0 and not out["underflow_exceeds"]:
                rec = {**rec, "dynamic": True,
                       "reason": "target gradients overflow (inf/nan, or ±max in saturation mode): use dynamic loss "
                                 "scaling (it halves the scale and skips the step) or a smaller static scale"}
            out["loss_scale"] = rec
        return out
