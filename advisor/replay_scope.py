"""Replay from the measured run where only some ops were dumped with tensors.

A model too large for whole-model tensor dumps is dumped with statistics, and with tensors only for the ops
around its first departure (msprobe ``statistics.tensor_list``; ``advisor tune``'s next run, the emulator's
``dump_tensors``).  Replaying that region from the FP32 values would drop every error made upstream of it, so
``scoped`` turns the FP32 recording into one whose baseline is the **measured run**: every dumped op keeps the
outputs the mixed run recorded (at the precision it ran), and a candidate plan re-executes exactly the ops whose
precision it changes and those downstream of them, from the measured values of their producers.  The region's
inputs from outside it are the measured run's own (the values the region received, upstream error included);
parameters and model inputs are the FP32 originals.  What cannot be known is said (``ReplayResult.not_replayed``,
``coverage`` < 1): an op outside the region whose precision changes, or a region op re-run at another precision
whose input from outside is known only as the measured run rounded it.  Replaying the measured plan itself
reproduces the measured run.
"""
from __future__ import annotations

import copy
from typing import Any, Hashable, Mapping

from .compare.dumps import DumpView
from .emulator.engine import exec_pair
from .replay import MODEL_LOSS, MODEL_OUTPUT, Recording
from .replay_args import input_tensors, tensor_of

LOW = ("fp16", "bf16")


def scoped(rec: Recording, targets: Mapping[int, DumpView], measured: Mapping[Hashable, Any], graph: Any = None
           ) -> Recording:
    """The recording ``rec`` (FP32 dump, partly tensors) with the measured run as its baseline (module
    docstring).  ``targets``: the mixed run's dump per step; ``measured``: node -> the precision it ran, or its
    (input, output) dtypes where they differ (``replay.precisions`` of the measured plan); ``graph``: the op graph (which inputs come from ops)."""
    out = Recording({}, rec.source)
    for s, prog in rec.programs.items():
        view = targets.get(s)
        p = copy.copy(prog)
        p.ops = [copy.copy(op) for op in prog.ops]
        for op in p.ops:
            op.base_prec = measured.get(op.node, "fp32") if op.node is not None else "fp32"
            if op.func is None or view is None:
                continue
            outs = [tensor_of(view, r) for _, r in view.outputs(op.entry)]
            if len(outs) != len(op.out_values) or any(v is None for v in outs):
                op.func, op.why_not = None, "not dumped with tensors in the measured run"
                continue
            outs = [_as(t, g) for t, g in zip(outs, op.out_values)]
            op.fp32_out, op.out_values = op.out_values, outs
            op.nonfinite = None                        # of the measured values from now on (replay's _nonfinite)
            op.out_records = [{"tensor": t, "dtype": str(r.get("dtype", "")), "shape": list(t.shape)}
                              for t, (_, r) in zip(outs, view.outputs(op.entry))]
        for op in p.ops:
            if op.func is not None:
                _measured_inputs(op, p.ops, view, measured, graph)
        p.sinks = {e: [(lbl, src, r, _sink_value(view, e, k, v)) for k, (lbl, src, r, v) in enumerate(items)]
                   for e, items in prog.sinks.items()}
        out.programs[s] = p
    return out


def _measured_inputs(op: Any, ops: list, view: DumpView, measured: Mapping, graph: Any) -> None:
    """An op's inputs as the measured run gave them: its producers' measured outputs; an input from outside
    the dumped region (an op's, not a parameter's) is the value the op received in the measured run."""
    recorded = input_tensors(view, op.entry)
    from_ops = _op_input_slots(op.node, graph, op.entry[: -len(".forward")] if op.fused else None)
    vals = list(op.in_values)
    for j, src in enumerate(op.inputs):
        prod = ops[src[0]] if src is not None else None
        if prod is not None and (prod.fp32_out is not None or prod.static):
            vals[j] = prod.out_values[src[1]]          # the producer's measured output (a view of leaves: as is)
            continue
        producer = prod.node if prod is not None else from_ops.get(j)
        if prod is None and producer is None:
            continue                                   # a parameter, constant or model input: the FP32 original
        if j >= len(recorded) or recorded[j] is None:
            op.func, op.why_not = None, "an input from outside the dumped ops has no tensor in the measured run"
            return
        vals[j] = _as(recorded[j], op.in_values[j])
        if op.fused and producer == op.node:
            continue                                   # from another member of its fused kernel: never rounded
        # recorded as the op received it, rounded to its input dtype: exact at another precision only if its
        # producer emitted that same low dtype
        got = exec_pair(op.base_prec)[0]
        if got in LOW and exec_pair(measured.get(producer, "fp32"))[1] != got:
            op.rounded_boundary = True
    op.in_values = vals


def _op_input_slots(node: Hashable, graph: Any, member: str | None = None) -> dict[int, Hashable]:
    """Input position -> producing op, for the inputs of ``node`` that an op (not a parameter, constant or model
    input) produced (the graph's edge ports).  ``member``: the inputs of that member of the fused ``node``
    (a fused node's port k is its member's port ``ports_in[k]``, advisor.fusion)."""
    if graph is None or node is None or node not in graph:
        return {}
    ports_in = graph.nodes[node].get("ports_in") if member is not None else None
    out = {}
    for p in graph.predecessors(node):
        if graph.nodes[p].get("role", "op") != "op":
            continue
        for _, ci in graph.edges[p, node].get("ports") or []:
            if ports_in is None:
                out[int(ci)] = p
            elif int(ci) < len(ports_in) and str(ports_in[int(ci)][0]) == member:
                out[int(ports_in[int(ci)][1])] = p
    return out


def _sink_value(view: DumpView, entry: str, k: int, fp32: Any) -> Any:
    """The measured run's model output / loss / gradient ``k`` of ``entry`` (the FP32 one when not dumped)."""
    items = view.outputs(entry) if entry in view.entries else []
    if k < len(items):
        t = tensor_of(view, items[k][1])
        if t is not None:
            return _as(t, fp32)
    return fp32


def _as(t: Any, like: Any) -> Any:
    """A measured tensor in the dtype the FP32 run holds it in (dumps store low-precision values in their low
    dtype; the emulator and the replay carry them in the original dtype, values rounded)."""
    if like is None or t is None or not (t.is_floating_point() and like.is_floating_point()) or t.dtype == like.dtype:
        return t
    return t.to(like.dtype)


__all__ = ["scoped", "MODEL_OUTPUT", "MODEL_LOSS"]
