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
    max_uf = tol.max_grad_underflow if tol is not None else 0.01
    tally = _GradTally()
    for s in steps:
        tally.add_step(s, ts[s], gs[s])
    if not tally.params:
        return None
    return tally.summary(max_uf, low_dtype)


class _GradTally:
    """Per-parameter gradient signals accumulated over the steps (``training_signals``)."""

    def __init__(self) -> None:
        self.params: dict[str, dict] = {}
        self.golden_abs: list[np.ndarray] = []
        self.per_step_cos: dict[int, tuple[float, str]] = {}
        self.seen_low: str | None = None
        self.total = 0

    def add_step(self, s: int, t: DumpView, g: DumpView) -> None:
        """Every parameter gradient dumped in both runs of step ``s``: tensors where both sides
        have them, else what the statistics show."""
        golden = grad_records(g)
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
            if xt is None or xg is None:
                self._add_stats(p, s, name, rt, rg, lim)
            else:
                self._add_tensors(p, s, name, to_numpy(xt).reshape(-1), to_numpy(xg).reshape(-1), lim)

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

    def _add_stats(self, p: dict, s: int, name: str, rt: Mapping, rg: Mapping, lim: float | None = None) -> None:
        """Statistics only: a gradient whose Norm is 0 in the target but not in the golden flushed to
        zero entirely (its element share cannot be known from statistics)."""
        nt, ng = rt.get("Norm"), rg.get("Norm")
        p["stats_only"] = True
        try:
            if nt is not None and ng is not None and float(nt) == 0.0 and float(ng) > 0.0:
                p["all_zero_in_target"] = True
                p["min_cosine"] = 0.0          # a zero vector against a non-zero one
                self.per_step_cos[s] = (0.0, name)
            if nt is not None and not math.isfinite(float(nt)):
                p["target_nonfinite"] += 1
            elif lim is not None and any(rt.get(k) is not None and abs(float(rt[k])) == lim and (
                    rg.get(k) is None or abs(float(rg[k])) != lim) for k in ("Max", "Min")):
                p["target_saturated"] += 1          # saturation mode: an overflow reads as ±max
        except (TypeError, ValueError):
            pass

    def _add_tensors(self, p: dict, s: int, name: str, at: np.ndarray, ag: np.ndarray, lim: float | None = None
                     ) -> None:
        """Tensors on both sides: underflowed and non-finite elements, cosine and relative L2."""
        if at.size != ag.size:
            return
        p["tensors"] = True
        p["numel"] += int(at.size)
        self.total += int(at.size)
        p["underflow_elems"] += int(np.count_nonzero((at == 0) & (ag != 0) & np.isfinite(ag)))
        p["target_nonfinite"] += int(np.count_nonzero(~np.isfinite(at) & np.isfinite(ag)))
        if lim is not None:         # saturation mode: an overflow reads as ±max of the low dtype
            p["target_saturated"] += int(np.count_nonzero((np.abs(at) == lim) & (np.abs(ag) != lim)))
        m = tensor_metrics(at, ag, "fp32")
        p["min_cosine"] = min(p["min_cosine"], m["cosine"])
        p["max_rel_l2"] = max(p["max_rel_l2"], m["rel_l2"])
        self.golden_abs.append(np.abs(ag))
        c = self.per_step_cos.get(s)
        if c is None or m["cosine"] < c[0]:
            self.per_step_cos[s] = (m["cosine"], name)

    def summary(self, max_uf: float, low_dtype: str | None) -> dict:
        """The parameters worst underflow first, the overall ratios and verdicts, the loss-scale advice."""
        total = self.total
        low = low_dtype or self.seen_low or "fp16"
        rows = []
        uf_total = 0
        for p in self.params.values():
            p["underflow_ratio"] = p["underflow_elems"] / p["numel"] if p["numel"] else math.nan
            p["underflow_exceeds"] = bool(p["numel"] and p["underflow_ratio"] > max_uf)
            uf_total += p["underflow_elems"]
            rows.append(p)
        rows.sort(key=lambda r: -(r["underflow_ratio"] if r["numel"] else -1))
        overall = uf_total / total if total else math.nan
        overflow = sum(p["target_nonfinite"] + p.get("target_saturated", 0) for p in rows)
        all_zero = [p["param"] for p in rows if p.get("all_zero_in_target")]
        out: dict[str, Any] = {"params": rows, "underflow_ratio": overall, "overflow_elems": overflow,
                               "max_underflow": max_uf, "low_dtype": low,
                               "grad_min_cosine_per_step": self.per_step_cos,
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
