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
from typing import Hashable, Iterable

import numpy as np
import pandas as pd

from ..analysis import node_positions
from ..costmodel import TimeModel
from ..semantics import Compiled, NodeKind, Plan, cpu_mask, low_mask

_OP, _CAST, _FOLLOW = int(NodeKind.OP), int(NodeKind.CAST), int(NodeKind.FOLLOW)

# RMS relative error of rounding an fp32 tensor to the low dtype (round to nearest: ~u/sqrt(3))
ROUNDING_REL = {"fp16": 2.0 ** -11 / math.sqrt(3.0), "bf16": 2.0 ** -8 / math.sqrt(3.0)}
GAIN_MAX = 1e6
AMPLIFY = 4.0
SCALE_MAX = 20.0


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

    def positions(df: pd.DataFrame) -> np.ndarray:
        """Node position of every row (-1 = no such node): by node key, else by the name attribute."""
        return node_positions(c, _key_series(df).to_numpy(dtype=object).astype(str))

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


def _final_nodes(c: Compiled, finals: Iterable[Hashable] | None, es: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Compiled indices of the final outputs: ``finals``, else the graph's ``outputs``, else the sinks
    among float ops."""
    n = len(c)
    idx = c.index
    if finals is None:
        finals = c.graph.graph.get("outputs") or None
    if finals:
        fi = [idx[f] for f in finals if f in idx]
    else:
        fi = []
    if not fi:  # sinks among float ops
        has_succ = np.zeros(n, bool)
        has_succ[es] = True
        fi = np.flatnonzero(~has_succ & np.isin(kind, (_OP, _CAST, _FOLLOW))).tolist()
    return np.asarray(sorted(fi), dtype=np.int64)


class ErrorModel:
    """Predicts the final error of any plan of the compiled graph from the evidence."""

    def __init__(self, c: Compiled, ev: Evidence | None, times: TimeModel, low_dtype: str = "fp16",
                 measured_plan: Plan | None = None, finals: Iterable[Hashable] | None = None,
                 measured_final: float | None = None):
        """The model's per-node terms (module docstring): own errors and non-finite sources from the
        local re-executions, gains from them and, for a measured run, from its errors; the per-op
        calibration and the global scale that reproduce the measured run."""
        self.c, self.ev, self.times, self.low_dtype = c, ev, times, low_dtype
        n = len(c)
        kind = np.asarray(c.kind)
        self.kind = kind
        es, ed = c.float_edges
        order_e = np.argsort(ed, kind="stable")
        self.p_idx = es[order_e].tolist()                      # CSR: producers of i are
        self.p_ptr = np.concatenate([[0], np.cumsum(np.bincount(ed, minlength=n))]).tolist()  # p_idx[ptr[i]:ptr[i+1]]
        self.finals = _final_nodes(c, finals, es, kind)
        self.enabled = ev is not None and ev.usable
        rnd = ROUNDING_REL.get(low_dtype, ROUNDING_REL["fp16"])
        if not self.enabled:
            self._disable(n, measured_final)
            return
        assert ev is not None
        is_float_op = (kind == _OP)
        gain, r_in = self._local_terms(ev, kind, rnd)
        calib = np.ones(n)
        lowm = low_mask(measured_plan) if measured_plan is not None else np.zeros(n, bool)
        if ev.have_measured:
            gain, amp = self._run_terms(ev, is_float_op, lowm, rnd, gain)
            own_base = np.where(lowm, self.own_low, 0.0)
            gain, gain_prop = self._measured_gains(ev, is_float_op, own_base, rnd, gain, r_in, amp)
            calib = self._calibration(ev, is_float_op, lowm, own_base, gain, gain_prop)
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
            self._scale_to_measured(ev, lowm, measured_final)

    def _disable(self, n: int, measured_final: float | None) -> None:
        """No usable evidence: no own error, unit gains (``evaluate`` then predicts times only)."""
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

    def _local_terms(self, ev: Evidence, kind: np.ndarray, rnd: float) -> tuple[np.ndarray, np.ndarray]:
        """Own error in low precision (local re-execution, else one rounding; a Cast to low rounds once),
        non-finite sources, and (gain, inrnd / rounding error) from the op in fp32 on rounded inputs."""
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
        return np.where(is_float_op, g_in, 1.0), r_in

    def _run_terms(self, ev: Evidence, is_float_op: np.ndarray, lowm: np.ndarray, rnd: float, gain: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """A measured run without local re-execution (real NPU run): what a low op introduces (its
        output error beyond its input error), non-finite sources, and the ops the attribution blames
        on their producer as amplifiers of what they receive.  Returns (gain, amplifier mask)."""
        own = self.own_low
        no_local = np.isnan(ev.local) & ~ev.local_nf & is_float_op & lowm & np.isfinite(ev.out)
        blamed = ev.blamed_elsewhere if ev.blamed_elsewhere is not None else np.zeros(len(own), bool)
        excess = np.maximum(np.sqrt(np.maximum(ev.out ** 2 - np.nan_to_num(ev.inp) ** 2, 0.0)), rnd)
        own = np.where(no_local & ~blamed, excess, own)
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
        self.own_low = np.where(amp, rnd, own)
        return gain, amp

    def _measured_gains(self, ev: Evidence, is_float_op: np.ndarray, own_base: np.ndarray, rnd: float,
                        gain: np.ndarray, r_in: np.ndarray, amp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(gain, gain for errors received through fp32 producers): measured where the received error
        is well determined, else the median determined gain of the op's type (unless inrnd shows a
        clear amplification)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            g_meas = np.sqrt(np.maximum(ev.out ** 2 - own_base ** 2, 0.0)) / ev.inp
        determined = (is_float_op & np.isfinite(g_meas) & (ev.inp > 2 * rnd)
                      & (own_base < 0.87 * ev.out)) & ~amp
        gain = np.where(determined, np.clip(g_meas, 0.0, GAIN_MAX), gain)
        # ops without a determined gain (e.g. downstream of a non-finite value) take the median
        # determined gain of their type when it has one, unless inrnd shows a clear amplification
        use = np.zeros(len(gain), bool)
        if determined.any():
            tcode, tuniq = pd.factorize(pd.Series(self.c.types, dtype=object))
            med = pd.Series(np.where(determined, gain, np.nan)).groupby(tcode).median()
            tmed = med.reindex(range(len(tuniq))).to_numpy()[tcode]
            use = ~determined & is_float_op & np.isfinite(tmed) & ~(r_in > AMPLIFY) & ~amp
            gain = np.where(use, tmed, gain)
        # errors received from an fp32 producer (not a fresh rounding of the op's input) pass with
        # the measured/type gain, else at most 1: inrnd's amplification is that of input rounding
        return gain, np.where(determined | amp | use, gain, np.minimum(gain, 1.0))

    def _calibration(self, ev: Evidence, is_float_op: np.ndarray, lowm: np.ndarray, own_base: np.ndarray,
                     gain: np.ndarray, gain_prop: np.ndarray) -> np.ndarray:
        """Teacher-forced calibration: the factor (clipped to [1/4, 4]) that reproduces each measured
        output from its measured input."""
        es_, ed_ = self.c.float_edges
        rounded_in = np.zeros(len(gain), bool)
        if len(es_):
            np.logical_or.at(rounded_in, ed_, lowm[es_])
        g_eff = np.where(rounded_in, gain, gain_prop)
        pred = np.sqrt(own_base ** 2 + (g_eff * np.nan_to_num(ev.inp)) ** 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            cf = ev.out / pred
        ok = is_float_op & np.isfinite(cf) & (pred > 0) & (ev.out > 0)
        return np.where(ok, np.clip(cf, 0.25, 4.0), 1.0)

    def _scale_to_measured(self, ev: Evidence, lowm: np.ndarray, measured_final: float | None) -> None:
        """The global factor making the model reproduce the measured final error of the run (given, or
        the worst measured final output), unless the two differ by more than ``SCALE_MAX``."""
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
    def _carry_errors(self, low: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
        e = [0.0] * n
        nf = [False] * n
        p_idx, p_ptr = self.p_idx, self.p_ptr
        for i in range(n):
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
        t, ncast, share, lost = self.times.plan_time(low, cpu_mask(p))
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
