"""msprobe dump.json data of one run of one step of the PyTorch emulator (``DumpBuilder``): every executed op's
inputs and outputs in the dtypes it executed them in, the model's outputs, loss and gradients; statistics of every
tensor in one batched pass."""
from __future__ import annotations

from typing import Mapping

import torch

from ..oplists import AUX_FP32_OUTPUTS
from ..rundir import scalar_record, tensor_record
from .engine import FLOAT_DTYPES, ArgRef, StepRecord, dtype_name, exec_pair
from .stats import batched_stats


def static_ptrs(params: dict, round_cache: dict) -> set:
    """Storages that do not change during a capture: parameters and their cached rounded copies."""
    ptrs = {t.untyped_storage().data_ptr() for t in params.get("__tensors__", ())}
    ptrs |= {t.untyped_storage().data_ptr() for t in round_cache.values()}
    return ptrs


def exec_dtype(t: torch.Tensor, prec: str, low_ok: bool) -> str:
    """dtype of a tensor as the op executed it."""
    if t.dtype in FLOAT_DTYPES and prec in ("fp16", "bf16", "fp32") and low_ok:
        return prec
    return dtype_name(t.dtype)


class DumpBuilder:
    """Builds dump.json data for one run of one step; statistics for all tensors in one batched pass."""

    def __init__(self, rec: StepRecord, precs: list[str], ops, files: bool, framework: str = "pytorch",
                 stats_cache: dict | None = None, static_ptrs: set | None = None, tensor_names: frozenset = frozenset(),
                 members: Mapping | None = None):
        self.rec, self.precs, self.ops, self.files = rec, precs, ops, files
        self.tensor_names = tensor_names      # ops dumped with tensors in a statistics dump (msprobe tensor_list)
        self.members = members or {}          # members of fused kernels (fusion.Member): values between them unrounded
        self.stats_cache, self.static_ptrs = stats_cache, static_ptrs
        self.framework = framework

    def build(self) -> tuple[dict, dict]:
        rec = self.rec
        uniq: dict[int, int] = {}
        tensors: list[torch.Tensor] = []

        def slot(t: torch.Tensor) -> int:
            k = uniq.get(id(t))
            if k is None:
                k = uniq[id(t)] = len(tensors)
                tensors.append(t)
            return k
        plan_rows = []
        for i, (struct, tin, tout, _rg) in enumerate(rec.entries):
            plan_rows.append(([slot(t) for t in tin], [slot(t) for t in tout]))
        out_slots = [slot(t) for t in rec.outputs]
        grad_items = [(n, g) for n, g in rec.grads.items()]
        grad_slots = [slot(g) for _, g in grad_items]
        loss_slot = slot(rec.loss) if rec.loss is not None else None
        st = batched_stats(tensors, cache=self.stats_cache, static_ptrs=self.static_ptrs)
        data: dict = {}
        files: dict = {}
        rounded = getattr(rec, "rounded", {})

        def trec(t, k, dt, fname=None, rg=None, always=False):
            # model outputs, loss and gradients are small and statistics cannot show a finite "far off"
            # error, so they keep their tensor files even in --dump stats
            write = fname is not None and (self.files or always)
            if write:
                tt = t.detach()
                if dt in ("fp16", "bf16") and tt.dtype != {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]:
                    tt = tt.to(torch.float16 if dt == "fp16" else torch.bfloat16)
                files[fname] = tt
            rg = bool(getattr(t, "requires_grad", False)) if rg is None else rg
            return tensor_record(dt, list(t.shape), st[k], rg,
                                 fname if write else None, self.framework)

        for i, (struct, tin, tout, rgs) in enumerate(rec.entries):
            op = self.ops[i]
            prec, out_prec = exec_pair(self.precs[i])
            m = self.members.get(op.name)
            inner_in = m.internal_in if m is not None else ()   # fed by another member: not rounded between them
            out_low = m is None or m.round_out                   # an output that never leaves the fused kernel
            name = f"{op.name}.forward"
            in_sl, out_sl = plan_rows[i]
            aux = AUX_FP32_OUTPUTS.get(op.packet, ())
            listed = op.name in self.tensor_names

            def conv(x, _tin=tin, _in_sl=in_sl, _name=name, _prec=prec, _rgs=rgs, _listed=listed, _inner=inner_in):
                if isinstance(x, ArgRef):
                    t = _tin[x.i]
                    return trec(t, _in_sl[x.i], exec_dtype(t, _prec, x.i not in _inner), f"{_name}.input.{x.i}.pt",
                                _rgs[x.i] if x.i < len(_rgs) else None, always=_listed)
                if isinstance(x, list):
                    return [conv(y) for y in x]
                return scalar_record(x)
            args, kwargs = struct
            entry = {"input_args": [conv(a) for a in args],
                     "input_kwargs": {k: conv(v) for k, v in kwargs.items()},
                     "output": [trec(t, out_sl[j], exec_dtype(t, out_prec, out_low and j not in aux),
                                     f"{name}.output.{j}.pt", always=listed) for j, t in enumerate(tout)]}
            data[name] = entry

        def low_of(t):
            r = rounded.get(id(t))
            return r[1] if r is not None and r[0] is t else dtype_name(t.dtype)
        data["Model.output.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": [
            trec(t, out_slots[j], low_of(t), f"Model.output.0.forward.output.{j}.pt", always=True)
            for j, t in enumerate(rec.outputs)]}
        if loss_slot is not None:
            data["Model.loss.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": [
                trec(rec.loss, loss_slot, low_of(rec.loss), "Model.loss.0.forward.output.0.pt", always=True)]}
        for (n, gr), k in zip(grad_items, grad_slots):
            data[f"Grad.{n}"] = {"input_args": [], "input_kwargs": {}, "output": [
                trec(gr, k, low_of(gr), f"Grad.{n}.output.0.pt", always=True)]}
        return data, files
