"""Error metrics of one aligned tensor pair: target (FP16/BF16 run) against golden (FP32 run).

Every metric is computed in one vectorised pass over the tensors (numpy, float64).  Definitions
(docs/compare.md has the full table):

``cosine``        <t, g> / (|t| |g|); 1.0 when both are all-zero, 0.0 when exactly one is; NaN
                  when the target is non-finite where the golden is finite (``cosine_finite`` then
                  holds the value over the elements finite in both).
``rel_l2``        |t - g|_2 / |g|_2 over elements where the golden is finite; ``inf`` when the
                  target is non-finite where the golden is finite (0 when both are zero).
``sqnr_db``       10 log10(|g|^2 / |t - g|^2) = -20 log10(rel_l2).
``euc_dist``      |t - g|_2 over elements finite in both (msprobe EucDist); ``inf`` as ``rel_l2``.
``max_abs``       max |t - g| over elements finite in both (msprobe MaxAbsErr).
``max_rel``       max |t - g| / |g|, with |g| replaced by ``MSPROBE_EPS`` where g == 0 (msprobe
                  MaxRelativeErr).
``one_thousandth`` / ``five_thousandth``
                  share of elements whose relative error (same definition) is < 0.001 / < 0.005
                  (msprobe One/Five Thousandth Err Ratio).
``target_nan`` / ``target_inf``
                  NaN / Inf elements of the target where the golden is finite ("in target only").
``saturated``     elements of an fp16 target exactly at +-65504 (Ascend saturation mode's overflow
                  signal); 0 for other dtypes.
``overflow_risk`` share of golden elements whose magnitude exceeds the low dtype's max (65504 for
                  fp16, 3.39e38 for bf16).
``underflow``     share of golden non-zero elements that are zero in the target.
``subnormal``     share of golden non-zero elements below the low dtype's smallest normal
                  (6.10e-5 fp16, 1.18e-38 bf16): values the low dtype stores with reduced precision.

Statistics-only dumps (no tensor files) get ``stats_metrics``: relative differences of
Max/Min/Mean/Norm, non-finite statistics and saturation, labelled ``kind: "stats"``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..graph import normalize_dtype

FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38
FP16_TINY = 6.103515625e-05            # smallest normal fp16
BF16_TINY = 1.1754943508222875e-38     # smallest normal bf16 (= fp32)
MSPROBE_EPS = float(np.finfo(np.float32).eps)   # eps replacing a zero golden in relative errors

LOW_MAX = {"fp16": FP16_MAX, "bf16": BF16_MAX}
LOW_TINY = {"fp16": FP16_TINY, "bf16": BF16_TINY}



def to_numpy(x: Any) -> np.ndarray:
    """A float64 numpy view of a numpy array, torch tensor (any dtype incl. bf16) or scalar."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64, copy=False)
    try:
        import torch
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", torch.float64).numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x, dtype=np.float64)


def _flat32(x: Any) -> np.ndarray:
    """Flattened numpy array, float32 for float16/bf16/float32 inputs (exact), float64 otherwise:
    halves the memory traffic; every chunk is widened to float64 before any arithmetic."""
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu")
            if x.dtype in (torch.float16, torch.bfloat16, torch.float32):
                return x.to(torch.float32).reshape(-1).numpy()
            return x.to(torch.float64).reshape(-1).numpy()
    except ImportError:  # pragma: no cover
        pass
    a = np.asarray(x)
    if a.dtype in (np.float16, np.float32):
        return a.astype(np.float32, copy=False).reshape(-1)
    return a.astype(np.float64, copy=False).reshape(-1)


def dtype_of(x: Any) -> str:
    """fp32/fp16/bf16/... of an array or tensor."""
    d = getattr(x, "dtype", None)
    return normalize_dtype(str(d)) if d is not None else "n/a"


CHUNK = 1 << 18     # elements per pass: chunks stay in cache, every metric is one sweep over memory


_EMPTY = dict(cosine=1.0, cosine_finite=1.0, rel_l2=0.0, sqnr_db=math.inf, euc_dist=0.0, max_abs=0.0, max_rel=0.0,
              one_thousandth=1.0, five_thousandth=1.0, target_nan=0, target_inf=0, golden_nonfinite=0,
              saturated=0, overflow_risk=0.0, underflow=0.0, subnormal=0.0, finite=True)


def tensor_metrics(target: Any, golden: Any, low_dtype: str | None = None) -> dict:
    """All tensor metrics of one pair (see module docstring).  ``low_dtype`` is the target's dtype
    as dumped (``fp16``/``bf16``/``fp32``; any spelling); taken from the target when omitted.
    Shapes must hold the same number of elements (flattened compare), else ValueError.
    Vectorised and chunked (float64 arithmetic on cache-sized chunks)."""
    low = normalize_dtype(low_dtype) if low_dtype is not None else dtype_of(target)
    t_all = _flat32(target)
    g_all = _flat32(golden)
    if t_all.size != g_all.size:
        raise ValueError(f"target has {t_all.size} elements, golden {g_all.size}")
    n = int(t_all.size)
    out: dict[str, Any] = {"kind": "tensor", "numel": n, "low_dtype": low}
    if n == 0:
        out.update(_EMPTY)
        return out
    sums = _Sums(low)
    for s in range(0, n, CHUNK):
        sums.add(t_all[s:s + CHUNK].astype(np.float64), g_all[s:s + CHUNK].astype(np.float64))
    out.update(sums.metrics(n))
    return out


class _Sums:
    """Running sums of one tensor pair over its chunks; ``metrics`` turns them into the metric values."""

    __slots__ = ("low", "lim", "tiny", "dot", "nt2", "ng2", "nd2", "max_abs", "max_rel", "c1", "c5", "n_gf",
                 "t_nan", "t_inf", "g_only", "sat", "over", "nnz", "under", "sub")

    def __init__(self, low: str):
        self.low = low
        self.lim = LOW_MAX.get(low)
        self.tiny = LOW_TINY.get(low)
        self.dot = self.nt2 = self.ng2 = self.nd2 = 0.0
        self.max_abs = self.max_rel = 0.0
        self.c1 = self.c5 = self.n_gf = self.t_nan = self.t_inf = self.g_only = 0
        self.sat = self.over = self.nnz = self.under = self.sub = 0

    def add(self, t: np.ndarray, g: np.ndarray) -> None:
        """One chunk (float64 copies, overwritten): non-finite counts, then the sums over the
        elements finite in both, then the range counts over the golden's finite elements."""
        tf = np.isfinite(t)
        gf = np.isfinite(g)
        if tf.all() and gf.all():
            tb, gb = t, g
            self.n_gf += t.size
        else:
            both = tf & gf
            gnf = ~tf & gf
            self.t_nan += int(np.count_nonzero(np.isnan(t) & gf))
            self.t_inf += int(np.count_nonzero(np.isinf(t) & gf))
            self.g_only += int(np.count_nonzero(gnf))
            self.n_gf += int(np.count_nonzero(gf))
            tb, gb = t[both], g[both]
            g = g[gf]
            t = t[gf]
        self._add_differences(tb, gb)
        self._add_ranges(t, g)

    def _add_differences(self, tb: np.ndarray, gb: np.ndarray) -> None:
        """Dot products, norms, the largest absolute and relative differences and the relative error
        thresholds over elements finite in both."""
        d = tb - gb
        self.dot += float(np.vdot(tb, gb))
        self.nt2 += float(np.vdot(tb, tb))
        self.ng2 += float(np.vdot(gb, gb))
        self.nd2 += float(np.vdot(d, d))
        np.abs(d, out=d)
        if d.size:
            self.max_abs = max(self.max_abs, float(d.max()))
        ag = np.abs(gb)
        zero = ag == 0.0
        ag[zero] = MSPROBE_EPS
        np.divide(d, ag, out=d)          # d is now the relative error
        if d.size:
            self.max_rel = max(self.max_rel, float(d.max()))
        self.c1 += int(np.count_nonzero(d < 0.001))
        self.c5 += int(np.count_nonzero(d < 0.005))

    def _add_ranges(self, t: np.ndarray, g: np.ndarray) -> None:
        """Saturation, overflow risk, underflow and subnormal counts over the golden's finite
        elements (``t`` aligned to them)."""
        if self.low == "fp16":
            self.sat += int(np.count_nonzero(np.abs(t) == FP16_MAX))
        ga = np.abs(g)
        if self.lim is not None:
            self.over += int(np.count_nonzero(ga > self.lim))
        nzm = ga != 0.0
        self.nnz += int(np.count_nonzero(nzm))
        self.under += int(np.count_nonzero(nzm & (t == 0.0)))
        if self.tiny:
            self.sub += int(np.count_nonzero(nzm & (ga < self.tiny)))

    def metrics(self, n: int) -> dict:
        """The metric values of ``n`` elements from the sums (key order as ``tensor_metrics`` returns)."""
        out: dict[str, Any] = {}
        g_only = self.g_only
        out["target_nan"], out["target_inf"], out["golden_nonfinite"] = self.t_nan, self.t_inf, n - self.n_gf
        nt, ng, nd = math.sqrt(self.nt2), math.sqrt(self.ng2), math.sqrt(self.nd2)
        if nt == 0.0 and ng == 0.0:
            cos = 1.0
        elif nt == 0.0 or ng == 0.0:
            cos = 0.0
        else:
            cos = max(-1.0, min(1.0, self.dot / (nt * ng)))
        out["cosine_finite"] = cos          # over the elements finite in both
        out["cosine"] = math.nan if g_only else cos
        if g_only:
            rel = math.inf
        elif ng == 0.0:
            rel = 0.0 if nd == 0.0 else math.inf
        else:
            rel = nd / ng
        out["rel_l2"] = rel
        out["sqnr_db"] = math.inf if rel == 0.0 else (-math.inf if math.isinf(rel) else -20.0 * math.log10(rel))
        out["euc_dist"] = math.inf if g_only else nd
        out["max_abs"] = math.inf if g_only else self.max_abs
        out["max_rel"] = math.inf if g_only else self.max_rel
        denom = max(self.n_gf, 1)
        out["one_thousandth"] = self.c1 / denom
        out["five_thousandth"] = self.c5 / denom
        out["saturated"] = self.sat
        out["overflow_risk"] = self.over / denom if self.lim is not None else 0.0
        out["underflow"] = self.under / self.nnz if self.nnz else 0.0
        out["subnormal"] = self.sub / self.nnz if (self.tiny and self.nnz) else 0.0
        out["finite"] = not g_only
        return out


def _f(rec: Mapping, key: str) -> float | None:
    v = rec.get(key)
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        s = str(v).strip().lower()
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}.get(s)


def _rel(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return math.nan
    if not (math.isfinite(a) and math.isfinite(b)):
        return 0.0 if (a == b) else math.inf
    return abs(a - b) / (abs(b) if b != 0 else MSPROBE_EPS)


def stats_metrics(target: Mapping, golden: Mapping, low_dtype: str | None = None) -> dict:
    """The subset a statistics-only dump allows: relative differences |t - g| / |g| of Max, Min, Mean
    and Norm (eps for a zero golden), non-finite statistics, saturation (|Max| or |Min| = 65504 in an
    fp16 target) and overflow risk (golden |Max|/|Min| beyond the low dtype's max).  ``kind`` is
    ``"stats"``: ``norm_rel_diff`` is only a lower bound of ``rel_l2``."""
    low = normalize_dtype(low_dtype if low_dtype is not None else target.get("dtype"))
    tv = {k: _f(target, k) for k in ("Max", "Min", "Mean", "Norm")}
    gv = {k: _f(golden, k) for k in ("Max", "Min", "Mean", "Norm")}
    out: dict[str, Any] = {"kind": "stats", "low_dtype": low}
    for k in ("Max", "Min", "Mean", "Norm"):
        out[f"{k.lower()}_rel_diff"] = _rel(tv[k], gv[k])

    def nonfinite(v: dict) -> int:
        return int(any(x is not None and not math.isfinite(x) for x in v.values()))

    out["target_nonfinite"] = nonfinite(tv) and not nonfinite(gv)
    out["golden_nonfinite"] = nonfinite(gv)
    out["saturated"] = int(low == "fp16" and any(x is not None and abs(x) == FP16_MAX for x in (tv["Max"], tv["Min"])))
    lim = LOW_MAX.get(low)
    out["overflow_risk"] = float(lim is not None and any(
        x is not None and math.isfinite(x) and abs(x) > lim for x in (gv["Max"], gv["Min"])))
    out["finite"] = not out["target_nonfinite"]
    out["target_nonfinite"] = int(out["target_nonfinite"])
    return out


def msprobe_pass(cosine: float, max_abs: float) -> bool:
    """msprobe compare's pass rule: fail if (cos < 0.99 and max_abs > 0.001) or cos < 0.9 or
    max_abs > 1.  NaN metrics fail."""
    if cosine is None or max_abs is None or math.isnan(cosine) or math.isnan(max_abs):
        return False
    return not ((cosine < 0.99 and max_abs > 0.001) or cosine < 0.9 or max_abs > 1.0)


def headline(m: Mapping) -> dict:
    """The uniform columns every pair gets whatever its kind: rel_l2 (norm_rel_diff for stats),
    cosine (NaN for stats), max_abs (NaN for stats), finite."""
    if m.get("kind") == "stats":
        return {"kind": "stats", "rel_l2": m.get("norm_rel_diff", math.nan), "cosine": math.nan,
                "max_abs": math.nan, "finite": bool(m.get("finite", True))}
    return {"kind": "tensor", "rel_l2": m["rel_l2"], "cosine": m["cosine"], "max_abs": m["max_abs"],
            "finite": bool(m["finite"])}


def worse(a: Mapping | None, b: Mapping | None) -> Mapping | None:
    """The worse of two metric dicts: non-finite first, then larger relative L2 (stats proxy)."""
    if a is None:
        return b
    if b is None:
        return a
    ka = (not headline(a)["finite"], _nan0(headline(a)["rel_l2"]))
    kb = (not headline(b)["finite"], _nan0(headline(b)["rel_l2"]))
    return b if kb > ka else a


def _nan0(x: float) -> float:
    return -1.0 if x is None or (isinstance(x, float) and math.isnan(x)) else x
