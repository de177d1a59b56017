"""Evidence, time model and error model used by the search (docs/recommend.md).

Everything here works on the *compiled* graph of the semantics module (``Compiled``): arrays are
indexed by the compiled topological index, precisions come only from ``Plan`` objects.

Error model (per node i, relative L2 error of its output against FP32):

    e_i = sqrt((c_i own_i)^2 + (c_i g_i r_i)^2)   r_i = max over float producers p of e_p
    own_i = local_i  if plan runs i in low precision, else 0
    nf_i  = (low_i and local_nonfinite_i) or (some producer low and inrnd_nonfinite_i)
            or (some producer nf and i propagates non-finite values)

``local_i`` is the measured error of the op re-executed in low precision on FP32 inputs
(local_error.csv / attribution), ``g_i`` the op's error gain: measured as
sqrt(out^2 - own^2)/in in the run when the received error is well determined, else derived from
``inrnd_i`` (the op in FP32 on inputs rounded to low: gain = inrnd / rounding error of the low
dtype) for freshly rounded inputs and at most 1 for errors arriving through fp32 producers,
else 1.  ``c_i`` is a per-op calibration factor (teacher forcing on the measured run,
clipped to [1/4, 4]) and a final global factor makes the model reproduce the measured final error
of the run it was built from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable

import numpy as np
import pandas as pd

from ..graph import normalize_dtype
from ..oplists import is_cube_type
from ..semantics import LOW, Compiled, Plan

# node kinds of semantics.Compiled (read-only use of its public-by-convention arrays)
_OP, _DATA, _CONST, _NONFLOAT, _FOLLOW, _CAST = range(6)

# RMS relative error of rounding an fp32 tensor to the low dtype (round to nearest: ~u/sqrt(3))
ROUNDING_REL = {"fp16": 2.0 ** -11 / math.sqrt(3.0), "bf16": 2.0 ** -8 / math.sqrt(3.0)}
GAIN_MAX = 1e6
AMPLIFY = 4.0
SCALE_MAX = 20.0


# ---------------------------------------------------------------------- shared graph arrays
import weakref

_EDGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def float_edges(c: Compiled) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) compiled indices of the float edges, computed once per compiled graph."""
    hit = _EDGES.get(c)
    if hit is not None:
        return hit
    idx = c.index
    es, ed = [], []
    for u, v, d in c.graph.edges(data=True):
        if d.get("float", True):
            es.append(idx[u])
            ed.append(idx[v])
    res = (np.asarray(es, dtype=np.int64), np.asarray(ed, dtype=np.int64))
    _EDGES[c] = res
    return res


# ---------------------------------------------------------------------- evidence
@dataclass
class Evidence:
    """Per-node measurements, aligned to a Compiled graph (NaN = not measured)."""

    local: np.ndarray            # local_rel_l2 (op in low precision on FP32 inputs)
    local_nf: np.ndarray         # bool: local run produced non-finite values
    inrnd: np.ndarray            # inrnd_rel_l2 (op in FP32 on inputs rounded to low)
    inrnd_nf: np.ndarray         # bool
    out: np.ndarray              # measured output error of the run (out_rel_l2)
    inp: np.ndarray              # measured worst input error of the run (in_rel_l2)
    out_nf: np.ndarray           # bool: measured output non-finite (target only)
    in_nf: np.ndarray            # bool
    blamed_elsewhere: np.ndarray | None = None   # bool: attribution blames the op's producer
    have_local: bool = False
    have_measured: bool = False
    source: str = ""

    @property
    def usable(self) -> bool:
        return self.have_local or self.have_measured


def _col(df: pd.DataFrame, *names: str) -> pd.Series | None:
    for n in names:
        if n in df.columns:
            return df[n]
    return None


def _key_series(df: pd.DataFrame) -> pd.Series:
    for n in ("node", "name", "op", "op_name"):
        if n in df.columns:
            return df[n].astype(str)
    return pd.Series(df.index.astype(str), index=df.index)


def build_evidence(c: Compiled, ops: pd.DataFrame | None = None, local: pd.DataFrame | None = None,
                   source: str = "") -> Evidence:
    """Align an attribution ``ops`` frame and/or a ``local_error.csv`` frame to ``c``'s nodes.

    Rows are matched to nodes by the ``node``/``name`` column (or the index) against the node key
    and the node's ``name`` attribute.  Vectorised: one reindex per column."""
    n = len(c)
    g = c.graph
    keys = pd.Index([str(k) for k in c.order])
    name_attr = [g.nodes[k].get("name") for k in c.order]
    names = pd.Index([str(a) if a is not None else str(k) for a, k in zip(name_attr, c.order)])

    def positions(df: pd.DataFrame) -> np.ndarray:
        """Node position of every row (-1 = no such node): by node key, else by the name attribute."""
        ks = pd.Index(_key_series(df).to_numpy(dtype=object).astype(str))
        pos = keys.get_indexer(ks) if keys.is_unique else np.full(len(ks), -1)
        if (pos < 0).any() and names.is_unique:
            pos2 = names.get_indexer(ks)
            pos = np.where(pos < 0, pos2, pos)
        return pos

    pos_cache: dict[int, np.ndarray] = {}

    def aligned(df: pd.DataFrame | None, *cols: str, fill: float = np.nan) -> np.ndarray:
        out = np.full(n, fill)
        if df is None or len(df) == 0:
            return out
        s = _col(df, *cols)
        if s is None:
            return out
        pos = pos_cache.get(id(df))
        if pos is None:
            pos = pos_cache[id(df)] = positions(df)
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        ok = pos >= 0
        out[pos[ok]] = v[ok]          # last row wins for duplicates
        return out

    def merged(*cols: str) -> np.ndarray:
        a = aligned(ops, *cols)
        b = aligned(local, *cols)
        return np.where(np.isnan(a), b, a)

    loc = merged("local_rel_l2")
    loc_nf_raw = merged("local_nonfinite")
    inr = merged("inrnd_rel_l2")
    inr_nf_raw = merged("inrnd_nonfinite")
    out = aligned(ops, "out_rel_l2")
    inp = aligned(ops, "in_rel_l2")
    out_nf_raw = aligned(ops, "out_nonfinite", "nonfinite")
    in_nf_raw = aligned(ops, "in_nonfinite")
    # a non-finite error value also means non-finite values
    out_nf = (np.nan_to_num(out_nf_raw) > 0) | np.isinf(out)
    in_nf = (np.nan_to_num(in_nf_raw) > 0) | np.isinf(inp)
    loc_nf = (np.nan_to_num(loc_nf_raw) > 0) | np.isinf(loc)
    inr_nf = (np.nan_to_num(inr_nf_raw) > 0) | np.isinf(inr)
    blamed = np.zeros(n, bool)
    if ops is not None and len(ops) and "blamed_on" in ops.columns:
        pos = pos_cache.get(id(ops))
        if pos is None:
            pos = pos_cache[id(ops)] = positions(ops)
        b = ops["blamed_on"].astype(object).to_numpy()
        own = _key_series(ops).to_numpy(dtype=object).astype(str)
        ok = pos >= 0
        bs = np.array([str(x) for x in b], dtype=object)
        elsewhere = (bs != own) & ~pd.isna(b) & (bs != "nan") & (bs != "None")
        blamed[pos[ok]] = elsewhere[ok]
    return Evidence(
        blamed_elsewhere=np.asarray(blamed, dtype=bool),
        local=np.where(np.isinf(loc), np.nan, loc), local_nf=loc_nf,
        inrnd=np.where(np.isinf(inr), np.nan, inr), inrnd_nf=inr_nf,
        out=np.where(np.isinf(out), np.nan, out), inp=np.where(np.isinf(inp), np.nan, inp),
        out_nf=out_nf, in_nf=in_nf,
        have_local=bool(np.isfinite(loc).any() or loc_nf.any()),
        have_measured=bool(np.isfinite(out).any() or out_nf.any()),
        source=source)


# ---------------------------------------------------------------------- time model
_CUBE_FP32_FACTOR = 8.0      # fp32 cube throughput ~1/8 of fp16 on 910B (no HF32)
_VECTOR_FP32_FACTOR = 2.0    # vector ops are bandwidth bound: twice the bytes
_HBM_BYTES_PER_US = 1.6e6    # 1.6 TB/s
_LAUNCH_US = 1.0


def _elems(shapes: Any) -> float:
    """Element count of the first tensor in a shapes string / list ("8,128;128,64" or [[8,128]])."""
    if shapes is None:
        return float("nan")
    try:
        if isinstance(shapes, str):
            first = shapes.strip().strip('"').split(";")[0]
            dims = [int(x) for x in first.split(",") if x.strip()]
        else:
            first = shapes[0] if shapes and isinstance(shapes[0], (list, tuple)) else shapes
            dims = [int(x) for x in first]
        return float(np.prod(dims)) if dims else 1.0
    except (ValueError, TypeError, IndexError):
        return float("nan")


def _shapes(x: Any) -> list[list[int]]:
    """Shapes as lists of ints from a list of lists, a list of "d0,d1" strings or "a,b;c,d"."""
    if x is None:
        return []
    if isinstance(x, str):
        x = [p for p in x.strip().strip('"').split(";")]
    out = []
    for s in x:
        try:
            if isinstance(s, str):
                out.append([int(d) for d in s.split(",") if d.strip()])
            elif s is None:
                continue
            else:
                out.append([int(d) for d in s])
        except (TypeError, ValueError):
            continue
    return out


@dataclass
class TimeModel:
    """Per-node kernel time at fp32 and at low precision (µs), plus the cost of a Cast GE inserts on
    a float edge whose ends differ in precision.  Where the profile measured a kernel, its time at
    the precision it ran in *is* the measurement (``measured``); only the other precision is the
    measurement scaled by the cost model's low/fp32 ratio."""

    t_fp32: np.ndarray
    t_low: np.ndarray
    cast_us: np.ndarray          # per compiled node: cost of casting its output once
    edge_src: np.ndarray         # float edges (compiled indices)
    edge_dst: np.ndarray
    is_op: np.ndarray            # nodes that are real kernels with a precision decision
    source: str = "cost model"
    measured: np.ndarray | None = None   # bool per node: a measured duration anchors its times
    ran_low: np.ndarray | None = None    # bool per node: the measured kernel ran in low precision
    other_us: float = 0.0                # measured time of kernels without a precision decision (HCCL, Cast, ...)
    step_us: float | None = None         # the profile's kernel time of the step, when every op was measured

    def measured_at(self, low: np.ndarray) -> np.ndarray:
        """Per node: is its time under a plan with ``low`` a measurement (measured, and the plan
        runs it in the precision it ran in)?"""
        if self.measured is None:
            return np.zeros(len(self.is_op), bool)
        return self.measured & (self.ran_low == low)

    def kernel_time(self, low: np.ndarray) -> float:
        """Kernel time of one step: the profile's (``step_us``) when it measured every op, else every
        op at its precision under a plan with ``low`` plus the measured kernels without a decision."""
        if self.step_us is not None:
            return self.step_us
        return float(np.where(low, self.t_low, self.t_fp32)[self.is_op].sum()) + self.other_us

    def plan_time(self, low: np.ndarray) -> tuple[float, int, float, float]:
        """(total µs including casts, number of casts, low-precision share of compute, µs of
        low-precision savings forfeited by the ops that run in fp32).  The share weights every op
        by what low precision saves on it (fp32 time - low time): cube ops count far more than
        vector ops, launch overhead counts for nothing."""
        t = np.where(low, self.t_low, self.t_fp32)
        tot = float(t[self.is_op].sum())
        if len(self.edge_src):
            mism = low[self.edge_src] != low[self.edge_dst]
            ncast = int(mism.sum())
            tot += float(self.cast_us[self.edge_src[mism]].sum())
        else:
            ncast = 0
        w = np.maximum(self.t_fp32 - self.t_low, 0.0)[self.is_op]
        lw = low[self.is_op]
        tw = float(w.sum())
        lost = float(w[~lw].sum())
        share = (1.0 - lost / tw) if tw > 0 else float(lw.mean()) if len(lw) else 1.0
        return tot, ncast, share, lost


def build_time_model(c: Compiled, low_dtype: str = "fp16", ran_low: np.ndarray | None = None) -> TimeModel:
    """Per-node times at fp32 and at low precision.  Modelled by the project cost model
    (advisor.costmodel) from shapes, else from the measured ``duration_us`` scaled by a cube/vector
    precision factor, else a flops/bytes estimate; then, wherever the profile measured the kernel
    (``duration_us``), the time at the precision it ran in is replaced by the measurement and the
    other precision by the measurement times the modelled ratio.  The precision a kernel ran in is
    the observed one (``precision_observed``, else its output dtype), else ``ran_low`` (the measured
    run's plan)."""
    g = c.graph
    n = len(c)
    kind = np.asarray(c.kind)
    is_op = (kind == _OP)
    t32 = np.zeros(n)
    tlo = np.zeros(n)
    cast = np.full(n, _LAUNCH_US)
    dur = np.full(n, np.nan)
    ran = np.zeros(n, dtype=np.int8)      # 1 ran low, 2 ran fp32, 0 unknown
    try:  # the emulator developer's cost model, when it has landed
        from .. import costmodel as cm  # type: ignore
    except Exception:  # noqa: BLE001
        cm = None
    src = "cost model (advisor.costmodel)" if cm is not None else "measured durations x precision factor"
    cache: dict = {}
    for i, node in enumerate(c.order):
        a = g.nodes[node]
        osh = a.get("out_shapes")
        modelled = cm is not None and (osh is not None or a.get("in_shapes") is not None)
        key = (c.types[i], bool(is_op[i]), _hkey(a.get("in_shapes")), _hkey(osh), a.get("flops"), a.get("bytes"),
               None if modelled else a.get("duration_us"), None if modelled else _hkey(a.get("out_dtypes")))
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = _node_times(cm, c.types[i], a, bool(is_op[i]), low_dtype)
        cast[i], t32[i], tlo[i] = hit
        d = a.get("duration_us")
        if d is not None:
            dur[i] = _as_float(d)
            ran[i] = _ran(a)
    es_a, ed_a = float_edges(c)
    # casts are only inserted between kernels with a precision (not around views/consts)
    keep = (kind[es_a] == _OP) & (kind[ed_a] == _OP) if len(es_a) else np.zeros(0, bool)
    timed = np.isfinite(dur) & (dur > 0)
    if not timed.any():
        return TimeModel(t32, tlo, cast, es_a[keep], ed_a[keep], is_op, src)
    low_run = ran == 1
    if ran_low is not None:
        low_run = np.where(ran == 0, np.asarray(ran_low, dtype=bool), low_run)
    meas = timed & is_op & ((ran != 0) | (ran_low is not None))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t32 > 0, tlo / t32, 1.0)        # modelled low / fp32 time
    t32 = np.where(meas, np.where(low_run, dur / np.where(ratio > 0, ratio, 1.0), dur), t32)
    tlo = np.where(meas, np.where(low_run, dur, dur * ratio), tlo)
    other = float(dur[timed & ~is_op].sum())
    k = int(meas.sum())
    step = float(dur[timed].sum()) if k == int(is_op.sum()) else None
    src = (f"measured kernel durations ({k} of {int(is_op.sum())} ops; the other precision scaled by the "
           f"{'cost model' if cm is not None else 'cube/vector precision factor'})")
    return TimeModel(t32, tlo, cast, es_a[keep], ed_a[keep], is_op, src, meas, low_run, other, step)


def _as_float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


_RAN = {"fp16": 1, "bf16": 1, "fp32": 2, "fp64": 2}


def _ran(a: dict) -> int:
    """The precision a measured kernel ran in: 1 low, 2 fp32, 0 unknown (observed, else output dtype)."""
    r = _RAN.get(str(a.get("precision_observed", "")), 0)
    if r:
        return r
    outs = a.get("out_dtypes") or []
    return _RAN.get(normalize_dtype(outs[0]), 0) if outs else 0


# ---------------------------------------------------------------------- error model
@dataclass
class Prediction:
    final_rel_l2: float
    final_nonfinite: bool
    time_us: float
    casts: int
    low_share: float
    lost_us: float = 0.0
    errors: np.ndarray | None = None      # per compiled node
    nonfinite: np.ndarray | None = None

    @property
    def final_cosine(self) -> float:
        if self.final_nonfinite or not math.isfinite(self.final_rel_l2):
            return float("nan")
        return max(-1.0, 1.0 - 0.5 * self.final_rel_l2 ** 2)


def low_mask(p: Plan) -> np.ndarray:
    a = np.array(p.precision_list, dtype=object)
    m = a == LOW[0]
    for x in LOW[1:]:
        m |= a == x
    return np.asarray(m, dtype=bool)


class ErrorModel:
    """Predicts the final error of any plan of the compiled graph from the evidence."""

    def __init__(self, c: Compiled, ev: Evidence | None, times: TimeModel, low_dtype: str = "fp16",
                 measured_plan: Plan | None = None, finals: Iterable[Hashable] | None = None,
                 measured_final: float | None = None):
        self.c, self.ev, self.times, self.low_dtype = c, ev, times, low_dtype
        n = len(c)
        kind = np.asarray(c.kind)
        self.kind = kind
        g = c.graph
        idx = c.index
        es, ed = float_edges(c)
        order_e = np.argsort(ed, kind="stable")
        self.p_idx = es[order_e].tolist()                      # CSR: producers of i are
        self.p_ptr = np.concatenate([[0], np.cumsum(np.bincount(ed, minlength=n))]).tolist()  # p_idx[ptr[i]:ptr[i+1]]
        if finals is None:
            finals = g.graph.get("outputs") or None
        if finals:
            fi = [idx[f] for f in finals if f in idx]
        else:
            fi = []
        if not fi:  # sinks among float ops
            has_succ = np.zeros(n, bool)
            has_succ[es] = True
            fi = np.flatnonzero(~has_succ & np.isin(kind, (_OP, _CAST, _FOLLOW))).tolist()
        self.finals = np.asarray(sorted(fi), dtype=np.int64)
        self.enabled = ev is not None and ev.usable
        rnd = ROUNDING_REL.get(low_dtype, ROUNDING_REL["fp16"])
        self.rounding = rnd
        if not self.enabled:
            self.own_low = np.zeros(n)
            self.gain = np.ones(n)
            self.gain_prop = np.ones(n)
            self.calib = np.ones(n)
            self.absorbs = np.zeros(n, bool)
            self.local_nf = np.zeros(n, bool)
            self.inrnd_nf = np.zeros(n, bool)
            self.scale = 1.0
            self.base_pred = None
            self.measured_final = measured_final
            return
        assert ev is not None
        is_float_op = (kind == _OP)
        own = np.where(np.isnan(ev.local), rnd, ev.local)
        own = np.where(is_float_op, own, 0.0)
        own = np.where(kind == _CAST, rnd, own)  # a Cast to low rounds once
        self.own_low = own
        self.local_nf = ev.local_nf & is_float_op
        self.inrnd_nf = ev.inrnd_nf & is_float_op
        # gain from inrnd (op in fp32 on rounded inputs)
        # gain from inrnd: only a clear amplification (> AMPLIFY x the rounding error) counts above 1,
        # so that noise-level gains do not compound over deep chains
        r_in = np.where(np.isnan(ev.inrnd), 1.0, ev.inrnd / rnd)
        g_in = np.where(r_in > AMPLIFY, r_in, np.minimum(r_in, 1.0))
        g_in = np.clip(g_in, 0.0, GAIN_MAX)
        gain = np.where(is_float_op, g_in, 1.0)
        calib = np.ones(n)
        lowm = low_mask(measured_plan) if measured_plan is not None else np.zeros(n, bool)
        if ev.have_measured:
            # no local re-execution (real NPU run): estimate what a low op introduces from the run
            no_local = np.isnan(ev.local) & ~ev.local_nf & is_float_op & lowm & np.isfinite(ev.out)
            blamed = ev.blamed_elsewhere if ev.blamed_elsewhere is not None else np.zeros(n, bool)
            excess = np.maximum(np.sqrt(np.maximum(ev.out ** 2 - np.nan_to_num(ev.inp) ** 2, 0.0)), rnd)
            own = np.where(no_local & ~blamed, excess, own)
            self.own_low = own
            nf_src = np.isnan(ev.local) & ~ev.local_nf & is_float_op & lowm & ev.out_nf & ~ev.in_nf
            self.local_nf = self.local_nf | nf_src
            # an fp32 op turning finite inputs non-finite: its low producers' rounding did it
            rnd_src = (np.isnan(ev.inrnd) & ~ev.inrnd_nf & is_float_op & ~lowm & ev.out_nf & ~ev.in_nf)
            self.inrnd_nf = self.inrnd_nf | rnd_src
            # the attribution blames the producer: the op amplifies what it receives
            with np.errstate(divide="ignore", invalid="ignore"):
                g_recv = ev.out / ev.inp
            amp = no_local & blamed & np.isfinite(g_recv) & (ev.inp > 0)
            gain = np.where(amp, np.clip(g_recv, 0.0, GAIN_MAX), gain)
            own = np.where(amp, rnd, own)
            self.own_low = own
            own_base = np.where(lowm, own, 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                g_meas = np.sqrt(np.maximum(ev.out ** 2 - own_base ** 2, 0.0)) / ev.inp
            determined = (is_float_op & np.isfinite(g_meas) & (ev.inp > 2 * rnd)
                          & (own_base < 0.87 * ev.out)) & ~amp
            gain = np.where(determined, np.clip(g_meas, 0.0, GAIN_MAX), gain)
            # ops without a determined gain (e.g. downstream of a non-finite value) take the median
            # determined gain of their type when it has one, unless inrnd shows a clear amplification
            use = np.zeros(n, bool)
            if determined.any():
                tcode, tuniq = pd.factorize(pd.Series(c.types, dtype=object))
                med = pd.Series(np.where(determined, gain, np.nan)).groupby(tcode).median()
                tmed = med.reindex(range(len(tuniq))).to_numpy()[tcode]
                use = ~determined & is_float_op & np.isfinite(tmed) & ~(r_in > AMPLIFY) & ~amp
                gain = np.where(use, tmed, gain)
            # errors received from an fp32 producer (not a fresh rounding of the op's input) pass with
            # the measured/type gain, else at most 1: inrnd's amplification is that of input rounding
            gain_prop = np.where(determined | amp | use, gain, np.minimum(gain, 1.0))
            es_, ed_ = float_edges(c)
            rounded_in = np.zeros(n, bool)
            if len(es_):
                np.logical_or.at(rounded_in, ed_, lowm[es_])
            g_eff = np.where(rounded_in, gain, gain_prop)
            # teacher-forced calibration: reproduce each measured output from its measured input
            pred = np.sqrt(own_base ** 2 + (g_eff * np.nan_to_num(ev.inp)) ** 2)
            with np.errstate(divide="ignore", invalid="ignore"):
                cf = ev.out / pred
            ok = is_float_op & np.isfinite(cf) & (pred > 0) & (ev.out > 0)
            calib = np.where(ok, np.clip(cf, 0.25, 4.0), 1.0)
            self.absorbs = ev.in_nf & ~ev.out_nf
        else:
            self.absorbs = np.zeros(n, bool)
            gain_prop = np.minimum(gain, 1.0)
        self.gain = gain
        self.gain_prop = gain_prop
        self.calib = calib
        self.scale = 1.0
        self.scale_note = ""
        self.base_pred = None
        self.measured_final = measured_final
        if measured_plan is not None:
            e, nf = self._carry_errors(lowm)
            raw = self._final(e)
            self.base_pred = raw
            meas = measured_final
            if meas is None and ev.have_measured and len(self.finals):
                fo = ev.out[self.finals]
                if np.isfinite(fo).any():
                    meas = float(np.nanmax(fo))
            self.measured_final = meas
            self.scale_note = ""
            if meas is not None and math.isfinite(meas) and raw > 0 and math.isfinite(raw) and meas > 0:
                ratio = meas / raw
                if 1.0 / SCALE_MAX <= ratio <= SCALE_MAX:
                    self.scale = float(ratio)
                else:   # e.g. training graphs whose sinks are gradients, not the judged outputs
                    self.scale_note = (f"measured final error {meas:.3g} and the model's {raw:.3g} differ by more "
                                       f"than {SCALE_MAX:g}x: not scaled (the graph outputs may not be the judged ones)")

    # --------------------------------------------------------------
    def _carry_errors(self, low: np.ndarray, start: int = 0, base: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.c)
        own = np.where(low, self.own_low, 0.0)
        # per-op terms as Python lists for a tight loop
        own_l = own.tolist()
        gain_l = (self.gain * self.calib).tolist()
        gprop_l = (self.gain_prop * self.calib).tolist()
        cal_l = self.calib.tolist()
        lnf = (self.local_nf & low).tolist()
        inf_l = self.inrnd_nf.tolist()
        absorbs = self.absorbs.tolist()
        low_l = low.tolist()
        if base is not None and start > 0:
            e = base[0].tolist()
            nf = base[1].tolist()
        else:
            e = [0.0] * n
            nf = [False] * n
            start = 0
        p_idx, p_ptr = self.p_idx, self.p_ptr
        for i in range(start, n):
            a, b = p_ptr[i], p_ptr[i + 1]
            if b > a:
                ps = p_idx[a:b]
                r = 0.0
                anf = False
                anylow = False
                for p in ps:
                    ep = e[p]
                    if ep > r:
                        r = ep
                    if nf[p]:
                        anf = True
                    if low_l[p]:
                        anylow = True
                o = own_l[i] * cal_l[i]
                q = (gain_l[i] if anylow else gprop_l[i]) * r
                e[i] = (o * o + q * q) ** 0.5
                nf[i] = lnf[i] or (anf and not absorbs[i]) or (anylow and inf_l[i])
            else:
                e[i] = own_l[i] * cal_l[i]
                nf[i] = lnf[i]
        return np.asarray(e), np.asarray(nf, dtype=bool)

    def _final(self, e: np.ndarray) -> float:
        if not len(self.finals):
            return 0.0
        return float(np.max(e[self.finals]))

    def evaluate(self, p: Plan, keep_arrays: bool = False, low: np.ndarray | None = None) -> Prediction:
        if low is None:
            low = low_mask(p)
        t, ncast, share, lost = self.times.plan_time(low)
        if not self.enabled:
            return Prediction(float("nan"), False, t, ncast, share, lost)
        e, nf = self._carry_errors(low)
        e = e * self.scale
        fin_nf = bool(nf[self.finals].any()) if len(self.finals) else False
        return Prediction(self._final(e), fin_nf, t, ncast, share, lost,
                          e if keep_arrays else None, nf if keep_arrays else None)

    def contributions(self, p: Plan) -> np.ndarray:
        """Each node's own error times its path gain to the final outputs under ``p`` (the share of
        the final error it would remove if it ran in fp32), non-finite sources as +inf."""
        low = low_mask(p)
        n = len(self.c)
        gam = np.zeros(n)
        if len(self.finals):
            gam[self.finals] = 1.0
        gl = (self.gain * self.calib).tolist()
        gam_l = gam.tolist()
        p_idx, p_ptr = self.p_idx, self.p_ptr
        for i in range(n - 1, -1, -1):
            gi = gam_l[i]
            if gi <= 0.0:
                continue
            v = gl[i] * gi
            if v > 1e30:
                v = 1e30
            for p_ in p_idx[p_ptr[i]:p_ptr[i + 1]]:
                if v > gam_l[p_]:
                    gam_l[p_] = v
        gam = np.asarray(gam_l)
        contrib = np.where(low, self.own_low * self.calib, 0.0) * gam * self.scale
        reach = gam > 0
        nf_src = (self.local_nf & low) & reach
        contrib = np.where(nf_src, np.inf, contrib)
        # an fp32 op whose low producer's rounding makes it non-finite: the producer is the source
        for i in np.flatnonzero(self.inrnd_nf & reach):
            for p_ in self.p_idx[self.p_ptr[i]:self.p_ptr[i + 1]]:
                if low[p_]:
                    contrib[p_] = np.inf
        return contrib


def _hkey(x: Any) -> Any:
    if x is None or isinstance(x, (str, int, float)):
        return x
    try:
        return tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in x)
    except TypeError:
        return str(x)


def _node_times(cm: Any, t: str, a: dict, is_op: bool, low_dtype: str) -> tuple[float, float, float]:
    """(cast cost of the output, fp32 time, low time) of one node (0 times for non-kernels)."""
    el = _elems(a.get("out_shapes"))
    cast = _LAUNCH_US + el * 6.0 / _HBM_BYTES_PER_US if el == el else _LAUNCH_US
    if not is_op:
        return cast, 0.0, 0.0
    cube = is_cube_type(t)
    f32 = flo = None
    if cm is not None:
        try:
            ins, outs = _shapes(a.get("in_shapes")), _shapes(a.get("out_shapes"))
            fl = a.get("flops")
            if fl is None and (ins or outs):
                fl = cm.estimate_flops(t, ins, outs)
            by = a.get("bytes")
            if by is None and (ins or outs):
                by = cm.estimate_bytes(ins, outs)   # fp32 bytes
            if fl is not None and by is not None:
                f32 = float(cm.op_time_us(t, float(fl), float(by), "fp32"))
                flo = float(cm.op_time_us(t, float(fl), float(by) / 2.0, low_dtype))
        except Exception:  # noqa: BLE001 - fall back below
            f32 = flo = None
    if f32 is None:
        factor = _CUBE_FP32_FACTOR if cube else _VECTOR_FP32_FACTOR
        d = a.get("duration_us")
        try:
            d = float(d) if d is not None else float("nan")
        except (TypeError, ValueError):
            d = float("nan")
        if d == d and d > 0:
            outs = a.get("out_dtypes") or []
            ex = str(outs[0]).lower() if outs else ""
            ran_low = ex in ("fp16", "bf16", "float16", "dt_bf16", "bfloat16", "dt_float16")
            flo = d if ran_low else d / factor
            f32 = d * factor if ran_low else d
        else:
            fl = a.get("flops")
            if fl is not None:
                flo = _LAUNCH_US + float(fl) / (2.5e8 if cube else 1.0e7)
            elif el == el:
                flo = _LAUNCH_US + el * 4.0 / _HBM_BYTES_PER_US
            else:
                flo = 20.0 if cube else 2.0
            f32 = _LAUNCH_US + (flo - _LAUNCH_US) * factor
    return cast, f32, flo
