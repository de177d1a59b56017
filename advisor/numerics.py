"""How the chip rounds a value: the float overflow mode and HF32 -- one rule, in a torch and a numpy form.

Every emulator (PyTorch, ONNX, TensorFlow), the replay and the local error round values through this module
(the TF rewrite builds the same rule from TF ops with the constants defined here); none has a copy of it.
Sources and line numbers: docs/semantics.md, "Overflow mode" and "HF32".

**Overflow mode** (``Numerics.overflow``).  ``inf_nan``: IEEE 754 -- a value beyond a dtype's range rounds to
±inf, NaN stays NaN.  ``saturation``: an overflow gives the dtype's largest finite value (±65504 for fp16,
±3.3895e38 for bf16, ±3.4028e38 for fp32) and NaN gives 0, both for values an op computes and for Inf/NaN
values it reads (torch_npu ``INF_NAN_MODE_ENABLE``: "饱和模式：Inf置为max，NaN置为0"; "对应数据类型的最大值和0值").
Atlas training (ascend910) and Atlas inference (ascend310p) support saturation only; A2/A3 (ascend910b,
ascend910_93) default to inf_nan and can be switched (``INF_NAN_MODE_FORCE_DISABLE=1``; GE
``ge.exec.float_overflow_mode``; CANN ``aclrtSetDeviceSatMode``).

**HF32** (``Numerics.hf32``: the families ``conv`` / ``matmul`` it is allowed for).  On chips whose cube has the
``h322f32`` mmad intrinsic (A2/A3), an fp32 Conv (and MatMul when allowed) reads its fp32 operands as HF32: the
fp32 bit pattern with the low 12 of its 23 mantissa bits rounded away (11 mantissa bits kept, ties away from
zero on the magnitude), computes and accumulates in fp32 and writes fp32.  Default: conv on, matmul off
(GE ``kAllowHF32DefaultMode = "10"``; torch_npu ``npu.conv.allow_hf32`` True, ``npu.matmul.allow_hf32`` False).

The FP32 reference run of a capture is the IEEE fp32 program (``IEEE``: inf_nan, no HF32): it is what the
chip's run is measured against, so HF32 and saturation show as error (docs/semantics.md says why).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InputError

INF_NAN = "inf_nan"
SATURATION = "saturation"
OVERFLOW_MODES = (INF_NAN, SATURATION)
# chips that support saturation only (INF_NAN_MODE_ENABLE.md:10); every other chip defaults to inf_nan
SATURATION_ONLY_SOCS = frozenset({"ascend910", "ascend310p"})
# chips whose cube reads HF32 (the platform's Intrinsic_mmad lists h322f32; platform_utils.cc:415-429)
HF32_SOCS = frozenset({"ascend910b", "ascend910_93"})

# largest finite value per canonical float dtype (what saturation clamps to)
FLOAT_MAX = {"fp16": 65504.0, "bf16": 3.3895313892515355e38, "fp32": 3.4028234663852886e38,
             "fp64": 1.7976931348623157e308}

# HF32: the fp32 mantissa bits rounded away (23 - 11 kept; ops-nn goldens, Ascend910B branch)
HF32_DROPPED_BITS = 12
HF32_FAMILIES = ("conv", "matmul")
HF32_DEFAULT = frozenset({"conv"})
# GE types in each family: GE's impl_mode tables (allow_hf32_matmul_*_conv_*.ini) plus the Conv3D and
# MatMulV3 kernels whose ops-nn goldens apply HF32 (conv3d*_v2, mat_mul_v3)
HF32_TYPES: dict[str, frozenset[str]] = {
    "conv": frozenset({
        "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropFilterD", "Conv2DBackpropInput", "Conv2DBackpropInputD",
        "Conv2DTranspose", "Conv2DTransposeD", "DepthwiseConv2D", "DepthwiseConv2DBackpropFilter",
        "DepthwiseConv2DBackpropFilterD", "DepthwiseConv2DBackpropInput", "DepthwiseConv2DBackpropInputD",
        "Conv3D", "Conv3DBackpropFilter", "Conv3DBackpropInput", "Conv3DTranspose"}),
    "matmul": frozenset({"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3",
                         "FullyConnection", "GEMM"}),
}


@dataclass(frozen=True)
class Numerics:
    """How the chip of one run rounds: its overflow mode and the op families allowed HF32."""

    overflow: str = INF_NAN
    hf32: frozenset = frozenset()

    @property
    def saturating(self) -> bool:
        return self.overflow == SATURATION

    def hf32_on(self, ge_type: Any) -> bool:
        """Whether an fp32 kernel of this GE type reads its operands as HF32."""
        return bool(self.hf32) and any(str(ge_type) in HF32_TYPES[f] for f in self.hf32)

    @property
    def hf32_text(self) -> str:
        """The ``--allow-hf32`` spelling of the families (``none`` when empty)."""
        return ",".join(f for f in HF32_FAMILIES if f in self.hf32) or "none"

    def to_meta(self) -> dict:
        """The run.json fields (``overflow_mode``, ``allow_hf32``)."""
        return {"overflow_mode": self.overflow, "allow_hf32": self.hf32_text}


IEEE = Numerics()   # the FP32 reference: IEEE 754 fp32, no HF32


def default_overflow(soc: str | None) -> str:
    """The overflow mode a chip runs in unless switched: saturation on ascend910 / ascend310p, else inf_nan."""
    return SATURATION if str(soc or "").lower() in SATURATION_ONLY_SOCS else INF_NAN


def default_hf32(soc: str | None) -> frozenset:
    """The families HF32 is on for by default: conv on A2/A3, none elsewhere."""
    return HF32_DEFAULT if str(soc or "").lower() in HF32_SOCS else frozenset()


def parse_allow_hf32(text: Any, what: str = "--allow-hf32") -> frozenset:
    """``conv,matmul`` | ``conv`` | ``matmul`` | ``none`` (also ``true``/``false`` as ATC spells all/none)."""
    s = str(text).strip().lower()
    if s in ("none", "false", "0", "00", ""):
        return frozenset()
    if s in ("true", "1", "11", "all"):
        return frozenset(HF32_FAMILIES)
    parts = {p.strip() for p in s.replace("+", ",").split(",") if p.strip()}
    bad = sorted(parts - set(HF32_FAMILIES))
    if bad:
        raise InputError(what, f"expected conv,matmul | conv | matmul | none, not {text!r}")
    return frozenset(parts)


def resolve(soc: str | None, overflow_mode: str | None = None, allow_hf32: Any = None,
            meta: Mapping | None = None) -> tuple[Numerics, list[str]]:
    """The run's Numerics and notes: an explicit option, else what run.json recorded (``meta``), else the chip's
    default.  A mode the chip does not have is ignored with a note, as the chip ignores it (torch_npu: the
    environment variable "不生效" on ascend910/ascend310p; GE: HF32 only where the cube has h322f32)."""
    meta = meta or {}
    chip = str(soc or "").lower()
    notes: list[str] = []
    mode = overflow_mode if overflow_mode is not None else meta.get("overflow_mode")
    if mode is None:
        mode = default_overflow(chip)
    mode = str(mode).strip().lower()
    if mode not in OVERFLOW_MODES:
        raise InputError("--overflow-mode", f"expected inf_nan or saturation, not {mode!r}")
    if mode == INF_NAN and chip in SATURATION_ONLY_SOCS:
        if overflow_mode is not None:
            notes.append(f"{chip} supports saturation mode only (torch_npu INF_NAN_MODE_ENABLE: no effect there): "
                         "--overflow-mode inf_nan ignored")
        mode = SATURATION
    given = allow_hf32 if allow_hf32 is not None else meta.get("allow_hf32")
    hf32 = default_hf32(chip) if given is None else parse_allow_hf32(given)
    if hf32 and chip not in HF32_SOCS:
        if allow_hf32 is not None:
            notes.append(f"{chip} has no HF32 (its cube lacks the h322f32 intrinsic; GE ignores allow_hf32 there): "
                         "--allow-hf32 ignored")
        hf32 = frozenset()
    return Numerics(mode, hf32), notes


# ---------------------------------------------------------------------- the rule, torch form
def round_tensor(x: Any, low: Any = None, overflow: str = INF_NAN) -> Any:
    """``x``'s values rounded to the torch float dtype ``low`` (None: ``x``'s own dtype), stored in ``x``'s dtype.
    inf_nan: round to nearest even, an overflow gives ±inf.  saturation: ±inf and values beyond ``low``'s range
    give ±its max, NaN gives 0.  Returns ``x`` itself when nothing changes (its own dtype, inf_nan or all finite)."""
    import torch
    if low is None or low == x.dtype:
        if overflow != SATURATION or bool(torch.isfinite(x).all()):
            return x
        return torch.nan_to_num(x, nan=0.0)         # ±inf -> ±max of x's dtype
    if overflow == SATURATION:
        m = torch.finfo(low).max
        x = torch.nan_to_num(x, nan=0.0, posinf=m, neginf=-m).clamp(-m, m)
    return x.to(low).to(x.dtype)


def round_tensor_(t: Any, low: Any = None, overflow: str = INF_NAN) -> Any:
    """``round_tensor`` in place: ``t`` (an op's output) overwritten with its rounded values; returns ``t``."""
    import torch
    with torch.no_grad():
        if low is not None and low != t.dtype and overflow != SATURATION:
            t.copy_(t.to(low))                      # the common case: one cast, no temporary in t's dtype
        else:
            y = round_tensor(t, low, overflow)
            if y is not t:
                t.copy_(y)
    return t


def hf32_tensor(x: Any) -> Any:
    """An fp32 tensor's values as HF32 reads them (other dtypes unchanged): the low ``HF32_DROPPED_BITS`` mantissa
    bits rounded away, ties away from zero (ops-nn ``simulate_hf32_precision``, Ascend910B branch)."""
    import torch
    if x.dtype != torch.float32:
        return x
    b = x.contiguous().view(torch.int32)
    k = HF32_DROPPED_BITS
    return ((((b >> (k - 1)) + 1) >> 1) << k).view(torch.float32)


# ---------------------------------------------------------------------- the rule, numpy form
def np_float(dt: str):
    """numpy dtype of a canonical float dtype name (bf16: ml_dtypes.bfloat16)."""
    import numpy as np
    if dt == "bf16":
        import ml_dtypes  # a dependency of onnx and tensorflow  # noqa: PLC0415
        return ml_dtypes.bfloat16
    return {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[dt]


def to_dtype_array(a: Any, dt: str, overflow: str = INF_NAN) -> Any:
    """A float array's values in the float dtype ``dt`` (an array of that dtype), by ``round_tensor``'s rule."""
    import numpy as np
    a = np.asarray(a)
    if overflow == SATURATION:
        m = FLOAT_MAX[dt]
        if a.dtype.itemsize <= 2:                 # fp16/bf16 storage: compare in fp32
            a = a.astype(np.float32)
        a = np.clip(np.nan_to_num(a, nan=0.0, posinf=m, neginf=-m), -m, m)
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(np_float(dt))


def round_array(a: Any, dt: str, overflow: str = INF_NAN) -> Any:
    """``round_tensor`` for a numpy float array: its values rounded to ``dt``, stored in its own dtype."""
    import numpy as np
    own = a.dtype
    if np.dtype(own) == np.dtype(np_float(dt)):
        if overflow != SATURATION or bool(np.isfinite(a.astype(np.float32) if own.itemsize <= 2 else a).all()):
            return a
    with np.errstate(over="ignore", invalid="ignore"):
        return to_dtype_array(a, dt, overflow).astype(own)


def hf32_array(a: Any) -> Any:
    """``hf32_tensor`` for a numpy array (fp32 only; others unchanged)."""
    import numpy as np
    if a.dtype != np.float32:
        return a
    b = np.ascontiguousarray(a).view(np.int32)
    k = HF32_DROPPED_BITS
    return ((((b >> (k - 1)) + 1) >> 1) << k).view(np.float32).reshape(a.shape)


def hf32_note(ge_type: str, numerics: Numerics, soc: str | None) -> str:
    """The sentence advice that keeps an op in fp32 adds when that fp32 is HF32 on the run's chip ('' if not)."""
    if not numerics.hf32_on(ge_type):
        return ""
    fam = next(f for f in HF32_FAMILIES if f in numerics.hf32 and ge_type in HF32_TYPES[f])
    return (f"On {soc or 'this chip'} an fp32 {ge_type} runs in HF32 (11 mantissa bits; allow_hf32 is on for {fam}), "
            f"so it keeps HF32's error, which the replay includes; true fp32 needs torch_npu "
            f"torch.npu.{fam}.allow_hf32 = False or ATC --allow_hf32=false.")


__all__ = ["INF_NAN", "SATURATION", "OVERFLOW_MODES", "FLOAT_MAX", "HF32_TYPES", "HF32_DROPPED_BITS", "Numerics",
           "IEEE", "default_overflow", "default_hf32", "parse_allow_hf32", "resolve", "round_tensor", "round_tensor_",
           "hf32_tensor",
           "np_float", "to_dtype_array", "round_array", "hf32_array", "hf32_note"]
