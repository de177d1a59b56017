"""Local error of one op: the error it introduces by itself, separated from the error it receives.

``local_*``: the op re-executed in the low dtype (float inputs rounded to fp16/bf16, computed in fp32
= fp32 accumulation, float output rounded to low) on the FP32 run's exact inputs, against its FP32
output.  ``inrnd_*``: the op in FP32 on inputs rounded to the low dtype (no output rounding): the
error its producers' output rounding alone would cause.  Contract: docs/architecture.md "Local error".
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..numerics import IEEE, Numerics
from .engine import FLOAT_DTYPES, LOW_TORCH, execute_op, mutated_positions

_TDT = {"fp16": torch.float16, "bf16": torch.bfloat16, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _first_float(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.dtype in FLOAT_DTYPES else None
    if isinstance(out, (list, tuple)):
        for o in out:
            r = _first_float(o)
            if r is not None:
                return r
    return None


def _metrics(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float, int]:
    """(rel_l2, cosine, max_abs, nonfinite count of a) of a against reference b."""
    a64, b64 = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    nonfinite = int((~torch.isfinite(a64)).sum())
    fin = torch.isfinite(a64) & torch.isfinite(b64)
    if a64.numel() == 0:
        return 0.0, 1.0, 0.0, 0
    d = torch.where(fin, a64 - b64, torch.zeros_like(a64))
    nb = float(torch.linalg.vector_norm(torch.where(fin, b64, torch.zeros_like(b64))))
    nd = float(torch.linalg.vector_norm(d))
    rel = nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf)
    if nonfinite:
        rel = math.inf
    na = float(torch.linalg.vector_norm(torch.where(fin, a64, torch.zeros_like(a64))))
    cos = float((torch.where(fin, a64, 0) * torch.where(fin, b64, 0)).sum() / (na * nb)) if na > 0 and nb > 0 else (
        1.0 if na == nb else 0.0)
    mx = float(d.abs().max()) if d.numel() else 0.0
    return rel, cos, mx, nonfinite


def _run(op_record: Any, args: tuple, kwargs: dict, low: str | None, round_out: bool,
         numerics: Numerics = IEEE) -> torch.Tensor | None:
    """The op's first float output, run by the one executor (engine.execute_op) in ``low`` (None: fp32)."""
    func = op_record.func
    mutated = mutated_positions(func) if hasattr(func, "_schema") else ()
    outs = execute_op(func, args, kwargs, low or "fp32", kernel=True, mutated=mutated, round_outputs=round_out,
                      numerics=numerics)
    return _first_float(outs)


def local_error(op_record: Any, fp32_inputs: tuple, low_dtype: str | torch.dtype,
                fp32_output: torch.Tensor | None = None, numerics: Numerics = IEEE) -> dict:
    """Local error of one recorded op (``op_record.func`` = the aten overload; ``fp32_inputs`` =
    ``(args, kwargs)`` exactly as the FP32 run called it).  Returns a local_error.csv row.  ``numerics``:
    the chip's overflow mode, applied to the low-precision runs (the reference is the IEEE fp32 op)."""
    low = low_dtype if isinstance(low_dtype, torch.dtype) else _TDT[str(low_dtype)]
    low_name = "bf16" if low == torch.bfloat16 else "fp16"
    args, kwargs = fp32_inputs
    ref = fp32_output if fp32_output is not None else _run(op_record, args, kwargs, None, False)
    row = {"name": getattr(op_record, "name", str(op_record.func)), "type": getattr(op_record, "type", ""),
           "low_dtype": low_name}
    if ref is None:
        return row
    lo = _run(op_record, args, kwargs, low_name, True, numerics)
    rn = _run(op_record, args, kwargs, low_name, False, numerics)
    r = _metrics(lo, ref)
    row.update(local_rel_l2=r[0], local_cosine=r[1], local_max_abs=r[2], local_nonfinite=r[3])
    r = _metrics(rn, ref)
    row.update(inrnd_rel_l2=r[0], inrnd_nonfinite=r[3])
    return row


__all__ = ["local_error", "LOW_TORCH"]
