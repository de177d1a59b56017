"""kernel_details rows of the PyTorch emulator's mixed (profiled) run: one per kernel of the fused graph, dtypes as
executed, the core each ran on and cost-model durations."""
from __future__ import annotations

from .. import costmodel, fusion
from ..oplists import AUX_FP32_OUTPUTS
from .engine import StepRecord, exec_pair


def exec_dtype_name(d: str, prec: str, low_ok: bool) -> str:
    """The dtype a tensor recorded by its dtype name ``d`` executed in (float ports in ``prec`` when ``low_ok``)."""
    return prec if d in ("fp32", "fp64", "fp16", "bf16") and prec in ("fp16", "bf16", "fp32") and low_ok else d


def _port(r, i: int, kind: str, prec: str) -> tuple:
    """(shape, executed dtype) of input or output ``i`` of the recorded op ``r`` in a kernel row (``n/a`` when the
    op was not recorded): float ports in ``prec``, statistics outputs (``AUX_FP32_OUTPUTS``) keep theirs."""
    if r is None or i >= len(getattr(r, f"{kind}_dtypes")):
        return None, "n/a"
    aux = kind == "out" and i in AUX_FP32_OUTPUTS.get(r.packet, ())
    return getattr(r, f"{kind}_shapes")[i], exec_dtype_name(getattr(r, f"{kind}_dtypes")[i], prec, not aux)


def kernel_rows(step: int, fp: StepRecord, precs: list, cpu: list[bool], fz: fusion.FusionResult) -> list[dict]:
    """kernel_details rows of the mixed (profiled) run: one per kernel of the fused graph, typed as GE judges it (a
    fused kernel's row comes at its last member, with its external inputs and outputs), dtypes as executed (the
    (possibly fused) node's input / output dtypes, ``exec_pair``), the core it ran on and cost-model durations."""
    gf = fz.graph
    by_name = {r.name: r for r in fp.ops} if fz.members else {}
    rows = []
    for r, prec, on_cpu in zip(fp.ops, precs, cpu):
        node = fz.node_of(r.name)
        a = gf.nodes[node] if node in gf else {}
        m = fz.members.get(r.name)
        if m is not None:
            if not m.last:
                continue
            ins = [(by_name.get(mm), i) for mm, i in a.get("ports_in", ())]
            outs = [(by_name.get(mm), j) for mm, j in a.get("ports_out", ())]
        elif not r.kernel or not a.get("kernel", True) or a.get("trans_removed"):
            continue
        else:
            skip = set(a.get("attr_inputs") or ())     # constants a ConstToAttr pass made attributes
            ins = [(r, i) for i in range(len(r.in_dtypes)) if i not in skip]
            outs = [(r, j) for j in range(len(r.out_dtypes))]
        pin, pout = exec_pair(prec)
        pi = [_port(rr, i, "in", pin) for rr, i in ins]
        po = [_port(rr, j, "out", pout) for rr, j in outs]
        in_shapes, ind = [x for x, _ in pi], [d for _, d in pi]
        out_shapes, outd = [x for x, _ in po], [d for _, d in po]
        typ = str(a.get("type", r.type))
        flops = costmodel.estimate_flops(typ, in_shapes, out_shapes)
        nbytes = costmodel.estimate_bytes(in_shapes, out_shapes, ind, outd)
        rows.append({"step": step, "name": str(a.get("name", node)) if a else r.name, "type": typ,
                     "core": costmodel.core_type(typ, on_cpu),
                     "duration_us": costmodel.op_time_us(typ, flops, nbytes, pin, ai_cpu=on_cpu),
                     "in_shapes": in_shapes, "in_dtypes": ind, "out_shapes": out_shapes,
                     "out_dtypes": outd, "framework_op": f"aten::{r.packet}",
                     "phase": "bwd" if 0 <= fp.bwd_start <= r.index else "fwd"})
    return rows
