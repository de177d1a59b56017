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
"""
from __future__ import annotations

import math
from typing import Sequence

from .oplists import is_cube_type

CUBE_TFLOPS = {"fp16": 313.0, "bf16": 313.0, "fp32": 78.0}
VECTOR_TFLOPS = {"fp16": 24.0, "bf16": 24.0, "fp32": 12.0}
HBM_TBPS = 1.6
BW_EFFICIENCY = 0.7
COMPUTE_EFFICIENCY = 0.6
LAUNCH_US = 3.0
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


def op_time_us(op_type: str, flops: float, bytes_moved: float, precision: str) -> float:
    """Estimated kernel duration in microseconds on one Ascend 910B AI core cluster."""
    prec = precision if precision in ("fp16", "bf16", "fp32") else "fp32"
    peak = (CUBE_TFLOPS if is_cube_type(op_type) else VECTOR_TFLOPS)[prec] * 1e12 * COMPUTE_EFFICIENCY
    t_compute = flops / peak
    t_mem = bytes_moved / (HBM_TBPS * 1e12 * BW_EFFICIENCY)
    return LAUNCH_US + 1e6 * max(t_compute, t_mem)


def core_type(op_type: str) -> str:
    """Accelerator Core as written in kernel_details.csv."""
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


def _bytes_at(in_shapes, out_shapes, in_dtypes, out_dtypes, prec: str, aux: Sequence[int] = ()) -> float:
    """Bytes moved when the op runs in ``prec``: its float tensors in that dtype (statistics outputs
    ``aux`` stay fp32), the others as they are."""
    def at(dts, n, keep=()):
        dts = list(dts or [])
        return [("fp32" if j in keep else prec) if (j >= len(dts) or str(dts[j]) in ("fp16", "bf16", "fp32"))
                else dts[j] for j in range(n)]
    ins, outs = list(in_shapes or []), list(out_shapes or [])
    return estimate_bytes(ins, outs, at(in_dtypes, len(ins)), at(out_dtypes, len(outs), aux))


def node_time_us(op_type: str, attrs: dict, prec: str, aux: Sequence[int] = ()) -> float:
    """Predicted time of one graph node in ``prec``: the roofline above, scaled so that at the
    precision the node was measured in it equals the measured ``duration_us`` (when the node has one)."""
    ins, outs = attrs.get("in_shapes") or [], attrs.get("out_shapes") or []
    flops = attrs.get("flops")
    if flops is None:
        flops = estimate_flops(op_type, ins, outs)
    model = op_time_us(op_type, float(flops), _bytes_at(ins, outs, attrs.get("in_dtypes"), attrs.get("out_dtypes"),
                                                         prec, aux), prec)
    d = attrs.get("duration_us")
    seen = attrs.get("precision_observed")
    if d is not None and d == d and d > 0 and seen in FLOAT_PRECISIONS:
        at_seen = op_time_us(op_type, float(flops), _bytes_at(ins, outs, attrs.get("in_dtypes"),
                                                               attrs.get("out_dtypes"), seen, aux), seen)
        if at_seen > 0:
            return float(d) * model / at_seen
    return model
