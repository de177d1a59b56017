"""A documented roofline cost model of one Ascend 910B op (pure functions of their arguments).

Durations written by the emulator into kernel_details.csv come from here, not from CPU wall time;
recommend/report use the same functions for time shares.  Figures (Ascend 910B, public data sheets
and vendor material; rounded, order-of-magnitude correct):

* cube unit (matrix ops: MatMul*, BatchMatMul*, Conv*, FlashAttention*): fp16/bf16 peak
  ~313 TFLOPS; fp32 inputs on the cube run as HF32/multi-pass at ~1/4 of that (~78 TFLOPS class);
* vector unit (everything else): fp16/bf16 ~2x the fp32 element throughput
  (modelled as 12 TFLOPS-equivalent fp32, 24 fp16);
* HBM bandwidth ~1.6 TB/s, reached at ~70 % in practice;
* fixed launch/scheduling overhead ~3 us per kernel; achieved efficiency ~60 % of peak.

``op_time_us = launch + max(flops / (peak * eff), bytes / (bandwidth * 0.7))``.

AI CPU (an op whose type has no AI Core kernel, or whose kernel takes none of its dtypes): measured, not
modelled.  The real torch_npu profile ``tests/fixtures/real/torch_npu_profile_mstt/kernel_details.csv`` has 7
AI_CPU kernels (scalar ``Cast`` INT32 -> UINT64), median 101.46 us, against a median of 1.20 us for its 115 scalar
AI_VECTOR_CORE kernels: an AI CPU kernel costs ``AICPU_LAUNCH_US`` = 101.46 us plus its AI Core data time
(above the launch) times ``AICPU_RATIO`` = 101.46 / 1.20 (the one relative figure the profile gives).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .oplists import is_cube_type

CUBE_TFLOPS = {"fp16": 313.0, "bf16": 313.0, "fp32": 78.0}
VECTOR_TFLOPS = {"fp16": 24.0, "bf16": 24.0, "fp32": 12.0}
HBM_TBPS = 1.6
BW_EFFICIENCY = 0.7
COMPUTE_EFFICIENCY = 0.6
LAUNCH_US = 3.0
# AI CPU: medians of the real profile's AI_CPU kernels and of its scalar AI_VECTOR_CORE kernels (module docstring)
AICPU_LAUNCH_US = 101.46
AICPU_RATIO = 101.46 / 1.20
BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "int64": 8, "int32": 4, "bool": 1, "int8": 1, "uint8": 1}

# vector ops costing several flops per element (transcendentals, normalisations)
_HEAVY = {"Exp": 8, "Log": 8, "Sigmoid": 10, "Tanh": 10, "Gelu": 14, "GeluGrad": 18, "Swish": 12,
          "SiluGrad": 16, "SoftmaxV2": 12, "LogSoftmaxV2": 14, "SoftmaxGrad": 6, "LogSoftmaxGrad": 6,
          "LayerNormV4": 10, "LayerNorm": 10, "LayerNormV3": 10, "LayerNormGradV3": 16, "Pow": 10,
          "Sqrt": 4, "Rsqrt": 4, "RealDiv": 4, "Div": 4, "BNTrainingUpdate": 10, "BNInfer": 4,
          "BNTrainingUpdateGrad": 12, "FlashAttentionScore": 1, "Erf": 10}


def _numel(shape: Sequence[int] | None) -> int:
    if shape is None:
        return 0
    return int(math.prod(int(d) for d in shape)) if len(shape) else 1


def estimate_flops(op_type: str, in_shapes: Sequence[Sequence[int] | None],
                   out_shapes: Sequence[Sequence[int] | None]) -> float:
    """Floating-point operations of one op from its input/output shapes."""
    ins = [s for s in in_shapes if s is not None]
    outs = [s for s in out_shapes if s is not None]
    out_n = _numel(outs[0]) if outs else 0
    if op_type.startswith(("MatMul", "BatchMatMul", "GEMM", "FullyConnection")) and ins:
        # K = last dim of the first input (transposes fold into the kernel; good to a factor <= 1)
        a = ins[0]
        k = int(a[-1]) if len(a) else 1
        if len(ins) > 1 and len(ins[1]) >= 2 and len(a) >= 1:
            b = ins[1]
            if int(a[-1]) not in (int(b[-2]), int(b[-1])):
                k = int(a[-2]) if len(a) >= 2 else k
        return 2.0 * out_n * k
    if op_type.startswith(("Conv", "DepthwiseConv", "Deconvolution")) and len(ins) >= 2:
        w = ins[1]
        per_out = _numel(w[1:]) if len(w) > 1 else 1  # Cin/groups * kh * kw
        return 2.0 * out_n * per_out
    if op_type.startswith("FlashAttention") and ins:
        q = ins[0]
        kk = ins[1] if len(ins) > 1 else q
        s_k = int(kk[-2]) if len(kk) >= 2 else 1
        return 4.0 * _numel(q) * s_k
    n = max([out_n] + [_numel(s) for s in ins])
    return float(n * _HEAVY.get(op_type, 1))


def estimate_bytes(in_shapes: Sequence[Sequence[int] | None], out_shapes: Sequence[Sequence[int] | None],
                   in_dtypes: Sequence[str] | None = None, out_dtypes: Sequence[str] | None = None) -> float:
    """Bytes moved to/from HBM: every input read once, every output written once."""
    total = 0.0
    for shapes, dts in ((in_shapes, in_dtypes), (out_shapes, out_dtypes)):
        for i, s in enumerate(shapes):
            if s is None:
                continue
            dt = (dts[i] if dts is not None and i < len(dts) else "fp32") or "fp32"
            total += _numel(s) * BYTES.get(str(dt), 4)
    return total


def op_time_us(op_type: str, flops: float, bytes_moved: float, precision: str, ai_cpu: bool = False) -> float:
    """Estimated kernel duration in microseconds on one Ascend 910B AI core cluster (``ai_cpu``: on AI CPU)."""
    prec = precision if precision in ("fp16", "bf16", "fp32") else "fp32"
    peak = (CUBE_TFLOPS if is_cube_type(op_type) else VECTOR_TFLOPS)[prec] * 1e12 * COMPUTE_EFFICIENCY
    t_compute = flops / peak
    t_mem = bytes_moved / (HBM_TBPS * 1e12 * BW_EFFICIENCY)
    t = 1e6 * max(t_compute, t_mem)
    return AICPU_LAUNCH_US + AICPU_RATIO * t if ai_cpu else LAUNCH_US + t


def core_type(op_type: str, ai_cpu: bool = False) -> str:
    """Accelerator Core as written in kernel_details.csv."""
    if ai_cpu:
        return "AI_CPU"
    return "AI_CORE" if is_cube_type(op_type) else "AI_VECTOR_CORE"


# ---------------------------------------------------------------------- plan time and the low-precision share
FLOAT_PRECISIONS = ("fp16", "bf16", "fp32")
LOW_PRECISIONS = ("fp16", "bf16")


def kernel_low_share(precision: Sequence[str], duration_us: Sequence[float]) -> float | None:
    """THE low-precision share (measured): time of the kernels that ran in fp16/bf16 divided by the
    time of all kernels that ran in a float precision (fp16, bf16, fp32); ``precision`` per kernel as
    ``ingest.kernel_precision`` decides it.  None when no float kernel time was recorded."""
    low = tot = 0.0
    for p, d in zip(precision, duration_us):
        if p in FLOAT_PRECISIONS and d == d and d > 0:
            tot += float(d)
            if p in LOW_PRECISIONS:
                low += float(d)
    return low / tot if tot > 0 else None


def _numel_or_nan(shape) -> float:
    return float(_numel(shape)) if shape is not None else float("nan")


def _bytes_at(in_shapes, out_shapes, in_dtypes, out_dtypes, prec: str, aux: Sequence[int] = ()) -> float:
    """Bytes moved when the op runs in ``prec``: its float tensors in that dtype (statistics outputs
    ``aux`` stay fp32), the others as they are."""
    def at(dts, n, keep=()):
        dts = list(dts or [])
        return [("fp32" if j in keep else prec) if (j >= len(dts) or str(dts[j]) in ("fp16", "bf16", "fp32"))
                else dts[j] for j in range(n)]
    ins, outs = list(in_shapes or []), list(out_shapes or [])
    return estimate_bytes(ins, outs, at(in_dtypes, len(ins)), at(out_dtypes, len(outs), aux))


@dataclass
class TimeModel:
    """THE time model: per node of a compiled graph, its kernel time in fp32 and in the low dtype (µs),
    and the cost of a Cast GE inserts on a float edge whose ends differ in precision.

    Times come from the roofline above (shapes, dtypes, flops); wherever the profile measured a kernel
    (``duration_us``), its time at the precision it ran in *is* the measurement and the other precision is
    the measurement times the roofline's ratio (``measured``).  Everything advisor reports about time —
    the low-precision share every search maximises, predicted step time, fp32-by-inheritance findings —
    comes from here."""

    t_fp32: np.ndarray
    t_low: np.ndarray
    kernel: np.ndarray           # bool: a kernel that computes in a float precision (counted in the share)
    is_op: np.ndarray            # bool: a kernel with a precision decision (semantics NodeKind.OP)
    cast_us: np.ndarray          # cost of casting the node's output once
    edge_src: np.ndarray         # float edges between decision ops (compiled indices)
    edge_dst: np.ndarray
    measured: np.ndarray         # bool: a measured duration anchors the node's times
    ran_low: np.ndarray          # bool: the measured kernel ran in low precision
    other_us: float = 0.0        # measured time of kernels without a float precision (int ops, HCCL, ...)
    step_us: float | None = None  # the profile's kernel time of the step, when every decision op was measured
    source: str = "cost model"

    @property
    def t_cpu(self) -> np.ndarray:
        """Per node: its time on AI CPU in fp32 (``op_time_us(..., ai_cpu=True)`` of its AI Core fp32 time)."""
        return AICPU_LAUNCH_US + AICPU_RATIO * np.maximum(self.t_fp32 - LAUNCH_US, 0.0)

    def times(self, low: np.ndarray, cpu: np.ndarray | None = None) -> np.ndarray:
        """Per node: its kernel time under a plan with ``low`` (bool per node) and ``cpu`` (on AI CPU)."""
        t = np.where(low, self.t_low, self.t_fp32)
        return t if cpu is None or not cpu.any() else np.where(cpu, self.t_cpu, t)

    def share(self, low: np.ndarray, cpu: np.ndarray | None = None) -> float:
        """THE low-precision share under a plan with ``low`` (bool per node; ``cpu``: on AI CPU): time of the
        float kernels in fp16/bf16 over the time of all float kernels — ``kernel_low_share``'s quantity,
        predicted."""
        k = self.kernel
        t = self.times(low, cpu)
        lo_m = k & low if cpu is None else k & low & ~cpu
        lo = float(t[lo_m].sum())
        tot = float(t[k].sum())
        return lo / tot if tot > 0 else 0.0

    def measured_at(self, low: np.ndarray) -> np.ndarray:
        """Per node: is its time under a plan with ``low`` a measurement (measured, and the plan runs it in
        the precision it ran in)?"""
        return self.measured & (self.ran_low == low)

    def kernel_time(self, low: np.ndarray, cpu: np.ndarray | None = None) -> float:
        """Kernel time of one step: the profile's (``step_us``) when it measured every op and the plan moves
        none to AI CPU, else every kernel at its precision (and core) under the plan plus the measured kernels
        without a float precision."""
        if self.step_us is not None and (cpu is None or not cpu.any()):
            return self.step_us
        return float(self.times(low, cpu)[self.kernel].sum()) + self.other_us

    def plan_time(self, low: np.ndarray, cpu: np.ndarray | None = None) -> tuple[float, int, float, float]:
        """(kernel µs including the Casts GE inserts, number of those Casts, the low-precision share,
        µs of fp32 time that low precision would save on the ops running fp32)."""
        t = self.times(low, cpu)
        tot = float(t[self.kernel].sum())
        if len(self.edge_src):
            mism = low[self.edge_src] != low[self.edge_dst]
            ncast = int(mism.sum())
            tot += float(self.cast_us[self.edge_src[mism]].sum())
        else:
            ncast = 0
        lost = float(np.maximum(self.t_fp32 - self.t_low, 0.0)[self.is_op & ~low].sum())
        return tot, ncast, self.share(low, cpu), lost


_RAN = {"fp16": 1, "bf16": 1, "fp32": 2, "fp64": 2}


def build_time_model(c: Any, low_dtype: str = "fp16", ran_low: np.ndarray | None = None) -> TimeModel:
    """The TimeModel of a compiled graph (``semantics.Compiled``).  The precision a measured kernel ran
    in is the observed one (``precision_observed``, from the profile's dtypes), else its first output
    dtype, else ``ran_low`` (the measured run's plan)."""
    from .graph import normalize_dtype
    from .graph import shape_ints
    from .oplists import aux_outputs
    from .semantics import NodeKind
    g = c.graph
    n = len(c)
    kind = np.asarray(c.kind)
    t32, tlo, cast = np.zeros(n), np.zeros(n), np.zeros(n)
    dur = np.full(n, np.nan)
    ran = np.zeros(n, dtype=np.int8)          # 1 ran low, 2 ran fp32, 0 unknown
    kernel = np.zeros(n, bool)
    cache: dict = {}
    nodes = g._node            # networkx's node -> attributes (no view call per node of 10^6-node graphs)
    kinds = [int(k) for k in c.kind]
    nonfloat = int(NodeKind.NONFLOAT)  # plain ints: a numpy scalar == enum member costs 3 enum look-ups
    for i, node in enumerate(c.order):
        a = nodes[node]
        if a.get("role", "op") != "op" or not a.get("kernel", True):
            continue
        d = a.get("duration_us")
        try:
            d = float(d) if d is not None else math.nan
        except (TypeError, ValueError):
            d = math.nan
        if kinds[i] == nonfloat:
            if d == d and d > 0:
                dur[i] = d
            continue
        kernel[i] = True
        ins, outs = a.get("in_shapes") or [], a.get("out_shapes") or []
        key = (c.types[i], str(ins), str(outs), str(a.get("in_dtypes")), str(a.get("out_dtypes")), a.get("flops"),
               str(a.get("aten")))
        hit = cache.get(key)
        if hit is None:
            si, so = [shape_ints(x) for x in ins], [shape_ints(x) for x in outs]
            fl = a.get("flops")
            fl = float(fl) if isinstance(fl, (int, float)) else estimate_flops(c.types[i], si, so)
            aux = aux_outputs(a.get("aten"))
            t_hi = op_time_us(c.types[i], fl, _bytes_at(si, so, a.get("in_dtypes"), a.get("out_dtypes"), "fp32", aux),
                              "fp32")
            t_lo = op_time_us(c.types[i], fl, _bytes_at(si, so, a.get("in_dtypes"), a.get("out_dtypes"), low_dtype,
                                                        aux), low_dtype)
            el = _numel_or_nan(so[0]) if so else math.nan
            c_us = op_time_us("Cast", el, el * 6.0, "fp32") if el == el else LAUNCH_US
            hit = cache[key] = (t_hi, t_lo, c_us)
        t32[i], tlo[i], cast[i] = hit
        if d == d and d > 0:
            dur[i] = d
            r = _RAN.get(str(a.get("precision_observed", "")), 0)
            if not r:
                od = a.get("out_dtypes") or []
                r = _RAN.get(normalize_dtype(od[0]), 0) if od else 0
            ran[i] = r
    is_op = kind == NodeKind.OP
    es, ed = c.float_edges
    keep = is_op[es] & is_op[ed] if len(es) else np.zeros(0, bool)
    timed = np.isfinite(dur)
    low_run = ran == 1
    if ran_low is not None:
        low_run = np.where(ran == 0, np.asarray(ran_low, dtype=bool), low_run)
    meas = timed & kernel & ((ran != 0) | (ran_low is not None))
    if not meas.any():
        return TimeModel(t32, tlo, kernel, is_op, cast, es[keep], ed[keep], meas, low_run, 0.0, None,
                         "cost model (roofline of shapes and dtypes)")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t32 > 0, tlo / t32, 1.0)          # modelled low / fp32 time
    t32 = np.where(meas, np.where(low_run, dur / np.where(ratio > 0, ratio, 1.0), dur), t32)
    tlo = np.where(meas, np.where(low_run, dur, dur * ratio), tlo)
    other = float(dur[timed & ~kernel].sum())
    k, nk = int(meas.sum()), int(kernel.sum())
    step = float(dur[timed].sum()) if k == nk else None
    src = (f"measured kernel durations ({k} of {nk} kernels; the other precision scaled by the cost model's "
           "ratio)") if k < nk else "measured kernel durations (the other precision scaled by the cost model's ratio)"
    return TimeModel(t32, tlo, kernel, is_op, cast, es[keep], ed[keep], meas, low_run, other, step, src)
