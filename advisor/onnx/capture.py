"""``capture_onnx``: run an ONNX model on the CPU the way ATC compiles it under a precision mode, mixlist and
per-op overrides, and write the same run directory as the PyTorch capture.

Execution: ``onnx.reference.ReferenceEvaluator`` (the ONNX project's own numpy reference implementation of
every standard op), driven node by node over its ``rt_nodes_`` so each node can run under its own
precision: every port of a node is rounded to the dtype the plan gives it (``semantics.Plan.port_dtypes``: float
inputs in the node's compute dtype, float outputs in its output dtype, customized ports (--customize_dtypes) in
their own dtype), the node computing in fp32 in between (= fp32 accumulation of the cube unit; the rule of
``advisor.emulator.engine.execute_op``), so an fp16-in / fp32-out MatMul has its inputs rounded and its output
not; fp32 ports use their values as they are; AI CPU nodes run in their original dtype; int/bool values are never
touched; nodes without a kernel (views) pass values through.  Every rounding is ``advisor.numerics``' rule
under the run's overflow mode (saturation: ±max, NaN -> 0, also for fp32 kernels), and an fp32 Conv (MatMul
when allowed) reads its inputs as HF32 on A2/A3.  Storage stays in the model's dtypes (value emulation), so
every node sees the arrays it expects.

Pipeline: model + batches (``model``) -> FP32 run of step 0 -> op graph with GE types -> the semantics
module's plan (``semantics.plan``, never decided here) -> per step an FP32 and a mixed run -> ``RunWriter``:
kernel_details.csv (dtypes as executed, cost-model durations), GE-style graph dump, msprobe-format dumps
(``framework: onnx``, ``.npy`` tensors) and local_error.csv (the worst over all steps).
"""
from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .. import costmodel, fusion, semantics
from .. import graph as G
from ..errors import AdvisorError, InputError
from ..mixlist import Mixlist
from ..numerics import IEEE, INF_NAN, Numerics, hf32_array, np_float, round_array, to_dtype_array
from ..numerics import resolve as resolve_numerics
from ..oplists import DEFAULT_SOC, ops_info_meta
from ..rundir import (RunWriter, StagedRunDir, capture_settings, check_run_out, override_settings, tensor_record,
                      versions, worst_local)
from . import require_onnx
from .model import Model, batches_for, build_graph, dtype_name, is_float_array, parse_input_shapes, read_model

SMALL_MODEL_PARAMS = 2_000_000   # default --dump tensors at or below this many parameters
_FLOAT = frozenset(G.FLOAT_DTYPES)
MAX_REPLAY_NODE_BYTES = 1 << 16  # nodes serialized into the graph dump for replay (no subgraphs, small attrs)


# ---------------------------------------------------------------------- numerics
np_dtype = np_float   # numpy dtype of a canonical float dtype name


def round_to(a: Any, dt: str, overflow: str = INF_NAN) -> Any:
    """``a`` with its values rounded to the float dtype ``dt`` under the overflow mode (``numerics.round_array``:
    inf_nan: round to nearest even, overflow gives inf; saturation: ±max, NaN -> 0, also when ``dt`` is
    ``a``'s own dtype), stored in its own dtype.  Non-float values and non-float ``dt`` pass through."""
    if dt not in _FLOAT or not isinstance(a, np.ndarray) or not is_float_array(a):
        return a
    if dtype_name(a) == dt and overflow == INF_NAN:
        return a
    return round_array(a, dt, overflow)


def as_executed(a: np.ndarray, dt: str) -> np.ndarray:
    """The array in the dtype the node executed it in (what a dump's tensor file holds); bf16 is widened
    to fp32 (exact) because .npy has no bfloat16 type readable without pickle."""
    if dt not in _FLOAT or not is_float_array(a):
        return a
    if dt == "bf16":
        return np.asarray(a, dtype=np.float32)
    return to_dtype_array(a, dt)


class Executor:
    """The ONNX reference runtime's per-node kernels, in graph order."""

    def __init__(self, model: Model, target: Any = None):
        from onnx.reference import ReferenceEvaluator
        try:
            self.ev = ReferenceEvaluator(model.proto)
        except Exception as e:  # noqa: BLE001 - an op the reference runtime does not implement
            raise InputError(target, f"the ONNX reference runtime cannot run this model: {type(e).__name__}: "
                                     f"{_first(e)}") from None
        self.rt = list(self.ev.rt_nodes_)
        if len(self.rt) != len(model.nodes):
            raise InputError(target, "the ONNX reference runtime did not build one kernel per node")
        self.model = model

    def node(self, k: int, args: list, context: dict) -> list:
        rt = self.rt[k]
        with np.errstate(all="ignore"):      # overflow to inf / NaN is what the emulation reproduces
            outs = rt.run(*args, context=context) if rt.need_context() else rt.run(*args)
        return [np.asarray(o) if isinstance(o, (np.ndarray, np.generic)) else o for o in outs]

    def run(self, feed: dict, ports: dict | None = None, seed: int = 0, numerics: Numerics = IEEE) -> dict:
        """Every value of one run by ONNX value name.  ``ports``: node index -> ``Ports`` of the nodes with a
        float kernel to run under the plan; None = the FP32 run.  ``numerics``: the chip's overflow mode and HF32
        (``advisor.numerics``) the planned nodes run under."""
        np.random.seed(seed)   # the reference runtime's random ops draw from numpy's global generator
        vals: dict[str, Any] = dict(self.model.initializers)
        vals.update(feed)
        ov = numerics.overflow
        for nd in self.model.nodes:
            args = [vals.get(i) if i else None for i in nd.inputs]
            pr = ports.get(nd.index) if ports is not None else None
            if pr is not None and pr.through is not None:      # an inverse Cast pair GE removed: identity
                for o in nd.outputs[:1]:
                    vals[o] = vals.get(pr.through)
                continue
            if pr is not None:
                raw = pr.raw_in          # fed by another member of its fused kernel: neither rounded nor saturated
                args = [round_to(a, pr.ins[j], ov) if j < len(pr.ins) and j not in raw else a
                        for j, a in enumerate(args)]
                if numerics.hf32_on(pr.ge_type or nd.ge.type):      # fp32 operands read as HF32 inside the cube
                    args = [hf32_array(a) if j < len(pr.ins) and pr.ins[j] == "fp32" and j not in raw
                            and isinstance(a, np.ndarray) else a for j, a in enumerate(args)]
            outs = self.node(nd.index, args, vals)
            if pr is not None and not pr.raw_out:
                outs = [round_to(o, pr.outs[j], ov) if j < len(pr.outs) else o for j, o in enumerate(outs)]
            for o, v in zip(nd.outputs, outs):
                if o:
                    vals[o] = v
        return vals


def _first(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:300]


# ---------------------------------------------------------------------- capture
def capture_onnx(model: Any, out: str | os.PathLike, mode: str = semantics.DEFAULT_MODE,
                 mixlist: str | os.PathLike | Mixlist | None = None, soc: str = DEFAULT_SOC,
                 ops_info: Any = None, seed: int = 0, dump: str | None = None, cann: str | None = None,
                 batches: int | list | None = None, inputs: list[str] | None = None,
                 input_shapes: list[str] | None = None, keep_dtype: Any = None, customize_dtypes: Any = None,
                 target: str | None = None, name: str | None = None, local: bool = True, progress=None,
                 overflow_mode: str | None = None, allow_hf32: str | None = None) -> Path:
    """Capture an ONNX model (a path or an ``onnx.ModelProto``) into ``out``: FP32 reference run + a run
    executing ``semantics.plan`` exactly.  Batches: ``batches`` as a list (a Python workload's: dicts
    name -> array or tuples in input order), else one per ``inputs`` .npz file, else one generated from
    ``input_shapes`` (``name:1,3,224,224``) or the model's static shapes; an int ``batches`` keeps the
    first N.  ``keep_dtype`` / ``customize_dtypes``: ATC's per-op override files (or an ``Overrides`` as
    ``keep_dtype``); ``overflow_mode`` / ``allow_hf32``: the chip's (``numerics.resolve``).  Returns the run dir."""
    require_onnx(target or model)
    check_run_out(out)
    target = target or (str(model) if isinstance(model, (str, os.PathLike)) else "onnx model")
    low, ml, lists, notes = capture_settings(mode, dump, mixlist, soc, ops_info, cann)
    numerics, nnotes = resolve_numerics(soc, overflow_mode, allow_hf32)
    overrides = override_settings(keep_dtype, customize_dtypes)
    m = read_model(model, target)
    notes += nnotes + m.notes
    data = batches_for(m, inputs, parse_input_shapes(input_shapes), batches if isinstance(batches, list) else None,
                       seed, target)
    if isinstance(batches, int):
        data = data[:max(1, batches)]
    notes += [f"ONNX op {op} has no CANN ATC parser plugin (ONNX operator list): emulated as the unknown, gray "
              f"type 'onnx:{op}'" for op in m.unmapped()]
    ex = Executor(m, target)
    dump = dump or ("tensors" if m.n_params <= SMALL_MODEL_PARAMS else "stats")
    files_on = dump == "tensors"
    low_for_local = low or "fp16"
    run_name = name or (Path(str(model)).stem if isinstance(model, (str, os.PathLike)) else "model")

    with StagedRunDir(out, progress) as stage:
        out_dir = stage.path
        writer = RunWriter(out_dir, {"name": run_name, "target": target, "mode": mode, "soc": soc,
                                     "ops_info": ops_info_meta(ops_info), **lists.table_meta(),
                                     "mixlist": ml.to_dict() if ml is not None else None, "seed": seed,
                                     "framework": "onnx", "emulated": True, **numerics.to_meta(),
                                     "versions": {**versions(), "onnx": require_onnx().__version__}},
                           final_dir=stage.out)
        if ml is not None:
            writer.write_mixlist(ml.to_json())
        kernels: list[dict] = []
        local_rows: dict[str, dict] = {}
        g = p = ports = fz = pre = None
        for step, feed in enumerate(data):
            v32 = _run(ex, feed, None, seed + step, target, f"the FP32 run (step {step})")
            if g is None:
                pre, fz, p, ports = _fused_plan(m, v32, run_name, lists, mode, overrides)
                g = fz.graph
                notes += _override_notes(overrides, g) + fusion.cast_notes(g)
            vmx = _run(ex, feed, {k: v for k, v in ports.items() if v[2]}, seed + step, target,
                       f"the mixed run (step {step})", numerics)
            kernels.extend(_kernels(m, fz, p, ports, vmx, step))
            for which, vals, pr in (("fp32", v32, None), ("mixed", vmx, ports)):
                d, fl = _dump_data(m, vals, pr, files_on, numerics.overflow)
                writer.write_dump(which, step, d, fl or None, task="tensor" if files_on else "statistics")
            if local:   # every step: a hazard may show only in some batches; rows keep the worst
                for row in _local_errors(ex, m, pre, v32, low_for_local, numerics.overflow):
                    local_rows[row["name"]] = worst_local(local_rows.get(row["name"]), row)
        writer.write_profile(kernels)
        _executed_dtypes(m, fz, ports)        # the graph dump shows the dtypes as executed
        semantics.annotate(g, p)
        graph_path = writer.write_graph(g, p, notes)
        if local:
            writer.write_local_error(fusion.local_rows(fz, local_rows).values())
        files = writer.write_overrides(overrides, keep_dtype if isinstance(keep_dtype, (str, os.PathLike)) else None,
                                       customize_dtypes)
        notes += stage.backup_notes()
        writer.write_run_json(steps=len(data), training=False, dump=dump, low_dtype=low, lists_source=lists.source,
                              unmapped_ops=m.unmapped(), notes=notes,
                              graph=str(graph_path.relative_to(out_dir)) if graph_path else None,
                              n_ops=sum(1 for _ in G.op_nodes(g)), options={}, **files, fusion=fusion.summary(fz),
                              onnx={"opset": m.opset, "inputs": [n for n, _, _ in m.inputs], "outputs": m.outputs,
                                    "ge_types": _ge_source()})
    return stage.out


def capture_workload(model: Any, wl: Any, out: str | os.PathLike, target: str | None, batches: Any, **kw) -> Path:
    """``advisor.emulator.capture``'s ONNX branch: a ``model.onnx`` TARGET (``wl`` None) or a Python workload
    whose model is an ONNX model (its batches, name); inference only."""
    if wl is not None and wl.loss_fn is not None:
        raise InputError(target, "an ONNX model is captured for inference only: return (model, batches)")
    data = wl.batches if wl is not None and wl.batches else None
    if data is not None and isinstance(batches, int):
        data = data[:max(1, batches)]
    elif isinstance(batches, list):
        data = batches
    return capture_onnx(model, out, batches=data if data is not None else batches, target=target,
                        name=wl.name if wl is not None and wl.name != "model" else None, **kw)


def _run(ex: Executor, feed: dict, ports: dict | None, seed: int, target: Any, what: str,
         numerics: Numerics = IEEE) -> dict:
    try:
        return ex.run(feed, ports, seed, numerics)
    except AdvisorError:
        raise
    except Exception as e:  # noqa: BLE001 - the model fails on its input
        raise InputError(target, f"the model failed in {what}: {type(e).__name__}: {_first(e)}") from None


def _fused_plan(m: Model, v32: dict, run_name: str, lists, mode: str, overrides) -> tuple:
    """(pre-fusion graph, ``fusion.FusionResult``, plan, ``_ports``) from step 0's FP32 run: GE's graph fusion runs
    before its precision judge, so the plan is the fused graph's."""
    pre = _graph(m, v32, run_name)
    fz = fusion.fuse(pre, lists.soc, lists)
    p = semantics.plan(fz.graph, lists, mode, overrides)
    return pre, fz, p, _ports(m, pre, fz, p)


def _graph(m: Model, v32: dict, run_name: str):
    """The op graph of step 0's FP32 run, each node carrying what replay needs to re-execute it."""
    g = build_graph(m, v32, run_name)
    for nd in m.nodes:
        blob = None if nd.const else node_blob(m, nd.index)
        if blob is not None and nd.name in g:
            g.nodes[nd.name]["onnx_node"] = blob
            g.nodes[nd.name]["onnx_opset"] = m.opset
    return g


def _ge_source() -> str:
    from .opmap import source
    return source()


class Ports(NamedTuple):
    """How one ONNX node executes in the mixed run: its input and output dtypes as executed, whether it runs under
    the plan, the inputs and outputs that stay inside a fused kernel (never rounded nor saturated: ``raw_in``,
    ``raw_out``), the GE type whose HF32 rule applies (the post-fusion type; a fused kernel's member: its own) and,
    for a Cast GE's TransNodeMerging removes (advisor.fusion.transnodes), the ONNX value it passes on instead."""

    ins: list
    outs: list
    planned: bool
    raw_in: frozenset = frozenset()
    raw_out: bool = False
    ge_type: str | None = None
    through: str | None = None      # a Cast GE removes after its judge: the value it passes on, unrounded


def _ports(m: Model, pre, fz: fusion.FusionResult, p) -> dict[int, Ports]:
    """node index -> ``Ports``: the plan's port dtypes (``semantics.Plan.port_dtypes``: float inputs in the compute
    dtype, float outputs in the output dtype) of the (fused) node each ONNX node belongs to; inside a fused kernel
    the values one member hands another keep their dtype (not rounded).  Constants are not op nodes."""
    out = {}
    by_name = {nd.name: nd for nd in m.nodes}
    for nd in m.nodes:
        if nd.const or nd.name not in pre:
            continue
        a, node = pre.nodes[nd.name], fz.node_of(nd.name)
        partner = by_name.get(fz.graph.nodes[node].get("merged_with"))
        ins, outs = p.port_dtypes(node, list(a["in_dtypes"]), list(a["out_dtypes"]), nd.aux)
        mem = fz.members.get(nd.name)
        raw_in, raw_out = frozenset(), False
        if mem is not None:
            raw_in, raw_out = mem.internal_in, not mem.round_out
            ins = [a["in_dtypes"][j] if j in raw_in else d for j, d in enumerate(ins)]
            if raw_out:
                outs = list(a["out_dtypes"])
        planned = (bool(a.get("kernel", True)) and bool(a.get("float", True))
                   and bool(fz.graph.nodes[node].get("kernel", True)))
        typ = nd.ge.type if mem is not None else str(fz.graph.nodes[node].get("type", nd.ge.type))
        through = partner.inputs[0] if partner is not None and partner.inputs else None
        out[nd.index] = Ports(ins, outs, planned, raw_in, raw_out, typ, through)
    return out


def _executed_dtypes(m: Model, fz: fusion.FusionResult, ports: dict) -> None:
    """The fused graph's in/out dtypes as executed (a fused node's from its members' ports)."""
    g = fz.graph
    idx = {nd.name: nd.index for nd in m.nodes if not nd.const}
    for n, a in g.nodes(data=True):
        if a.get("members"):
            a["in_dtypes"] = [_port_dt(ports, idx, mm, j, 0) for mm, j in a.get("ports_in", ())]
            a["out_dtypes"] = [_port_dt(ports, idx, mm, j, 1) for mm, j in a.get("ports_out", ())]
        elif n in idx and idx[n] in ports:
            a["in_dtypes"], a["out_dtypes"] = ports[idx[n]][0], ports[idx[n]][1]


def _port_dt(ports: dict, idx: dict, member: str, j: int, side: int) -> str:
    pr = ports.get(idx.get(member, -1))
    return pr[side][j] if pr is not None and j < len(pr[side]) else "n/a"


def _override_notes(ov, g) -> list[str]:
    """What the overrides name that is not in the model (GE only warns) and customized dtypes the emulator
    does not execute (integer ports): said in run.json's notes, never silently ignored."""
    if ov is None or ov.is_empty():
        return []
    names = {str(a.get("name", n)) for n, a in g.nodes(data=True) if a.get("role", "op") == "op"}
    types = {a.get("type") for n, a in g.nodes(data=True) if a.get("role", "op") == "op"}
    out = []
    for n in sorted(ov.keep_names - names):
        out.append(f"keep_dtype: no op named {n!r} in the model (GE only warns; it keeps nothing)")
    for t in sorted(ov.keep_types - types):
        out.append(f"keep_dtype: no op of type {t!r} in the model (GE only warns; it keeps nothing)")
    for kind, k, c in ov.customize:
        if (kind == "name" and k not in names) or (kind == "type" and k not in types):
            out.append(f"customize_dtypes: no op {'named' if kind == 'name' else 'of type'} {k!r} in the model")
        bad = sorted({d for d in c.inputs + c.outputs if d is not None and d not in _FLOAT})
        if bad:
            out.append(f"customize_dtypes: {k!r} asks for {', '.join(bad)}: integer ports are not emulated (they run "
                       "in the op's precision)")
    return out


def _kernels(m: Model, fz: fusion.FusionResult, p, ports, vals, step: int) -> list[dict]:
    """kernel_details rows of the mixed (target) run: one per kernel of the fused graph, typed as GE judges it (a
    fused kernel's row comes at its last member, with its external inputs and outputs), dtypes as executed."""
    g = fz.graph
    by_name = {nd.name: nd for nd in m.nodes if not nd.const}
    rows = []
    for nd in m.nodes:
        if nd.const or not nd.ge.kernel:
            continue
        node = fz.node_of(nd.name)
        a = g.nodes[node]
        mem = fz.members.get(nd.name)
        if mem is not None:
            if not mem.last:
                continue
            ins = [(by_name[mm], j) for mm, j in a.get("ports_in", ()) if mm in by_name]
            outs = [(by_name[mm], j) for mm, j in a.get("ports_out", ()) if mm in by_name]
        elif not a.get("kernel", True) or a.get("trans_removed"):
            continue
        else:
            skip = set(a.get("attr_inputs") or ())     # constants a ConstToAttr pass made attributes
            ins = [(nd, j) for j in range(len(nd.inputs)) if j not in skip]
            outs = [(nd, j) for j in range(len(nd.outputs))]

        def val(x, j, side):
            names = x.outputs if side else x.inputs
            v = vals.get(names[j]) if j < len(names) and names[j] else None
            return list(np.shape(v)) if v is not None else None, ports[x.index][side][j] if j < len(
                ports[x.index][side]) else "n/a"
        pin, pout = [val(x, j, 0) for x, j in ins], [val(x, j, 1) for x, j in outs]
        in_shapes, ind = [s for s, _ in pin], [d for _, d in pin]
        out_shapes, outd = [s for s, _ in pout], [d for _, d in pout]
        typ = str(a.get("type", nd.ge.type))
        flops = costmodel.estimate_flops(typ, in_shapes, out_shapes)
        nbytes = costmodel.estimate_bytes(in_shapes, out_shapes, ind, outd)
        cpu = p.on_ai_cpu(node)
        rows.append({"step": step, "name": str(a.get("name", node)), "type": typ, "core": costmodel.core_type(typ, cpu),
                     "duration_us": costmodel.op_time_us(typ, flops, nbytes, p[node], ai_cpu=cpu),
                     "in_shapes": in_shapes, "in_dtypes": ind, "out_shapes": out_shapes, "out_dtypes": outd})
    return rows


def _file_name(entry: str, role: str, j: int, taken: set) -> str:
    """``<entry>.<input|output>.<j>.npy`` with characters a file name cannot hold ("/" in ONNX node
    names) replaced by "_", made unique within the dump."""
    base = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{entry}.{role}.{j}")
    out, k = f"{base}.npy", 1
    while out in taken:
        out, k = f"{base}_{k}.npy", k + 1
    taken.add(out)
    return out


def _dump_data(m: Model, vals: dict, ports: dict | None, files_on: bool, overflow: str = INF_NAN) -> tuple[dict, dict]:
    """dump.json data of one run of one step (``ports`` None: the FP32 run) and its tensor files.  An input
    consumed in another dtype is recorded as the Cast GE inserts gives it (``overflow``); one consumed in its own
    dtype as it is (HF32 and saturation inside a kernel do not change the tensor a dump shows)."""
    pending: list[tuple] = []       # (container, key, array, executed dtype, file name or None)
    files: dict[str, np.ndarray] = {}
    taken: set[str] = set()
    data: dict = {}
    exec_dt: dict[str, str] = {}

    def rec(container, key, a, dt, entry, role, j, always=False):
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub":
            container[key] = None
            return
        fname = _file_name(entry, role, j, taken) if (files_on or always) else None
        if fname:
            files[fname] = as_executed(a, dt)
        pending.append((container, key, a, dt, fname))
        container[key] = None
    for nd in m.nodes:
        if nd.const:
            continue
        entry = f"{nd.name}.forward"
        pr = ports.get(nd.index) if ports is not None else None
        args: list = [None] * len(nd.inputs)
        outs: list = [None] * len(nd.outputs)
        for j, i in enumerate(nd.inputs):
            a = vals.get(i) if i else None
            dt = pr[0][j] if pr is not None and j < len(pr[0]) else (dtype_name(a) if a is not None else "n/a")
            cast = pr is not None and a is not None and dt != dtype_name(a)
            rec(args, j, round_to(a, dt, overflow) if cast else a, dt, entry, "input", j)
        for j, o in enumerate(nd.outputs):
            a = vals.get(o)
            dt = pr[1][j] if pr is not None and j < len(pr[1]) else (dtype_name(a) if a is not None else "n/a")
            exec_dt[o] = dt
            rec(outs, j, a, dt, entry, "output", j)
        data[entry] = {"input_args": args, "input_kwargs": {}, "output": outs}
    mo: list = [None] * len(m.outputs)
    for j, o in enumerate(m.outputs):
        a = vals.get(o)
        rec(mo, j, a, exec_dt.get(o, dtype_name(a)), "Model.output.0.forward", "output", j, always=True)
    data["Model.output.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": mo}
    st = [_stats(a) for _, _, a, _, _ in pending]
    for (container, key, a, dt, fname), s in zip(pending, st):
        container[key] = tensor_record(dt if dt in _FLOAT else dtype_name(a), list(a.shape), s, False, fname, "onnx")
    return data, files


def _stats(a: np.ndarray) -> tuple[float, float, float, float]:
    """msprobe's Max, Min, Mean, Norm of the stored values (fp32 storage holds the executed values exactly);
    fp64 accumulation for the mean, BLAS for the norm."""
    x = np.asarray(a, dtype=np.float64 if a.dtype == np.float64 else np.float32).ravel()
    if x.size == 0:
        return (float("nan"),) * 4
    with np.errstate(all="ignore"):
        return float(x.max()), float(x.min()), float(x.mean(dtype=np.float64)), float(np.linalg.norm(x))


def _local_errors(ex: Executor, m: Model, g, v32: dict, low: str, overflow: str = INF_NAN) -> list[dict]:
    """local_error.csv rows: every float kernel node re-executed in the low dtype (inputs and outputs
    rounded under the overflow mode, statistics outputs kept) and in fp32 on rounded inputs, on the FP32 run's
    exact inputs."""
    from ..tf.capture import metrics
    rows = []
    for nd in m.nodes:
        if nd.const or not nd.ge.kernel or nd.random or nd.name not in g or not g.nodes[nd.name].get("float", True):
            continue
        args = [v32.get(i) if i else None for i in nd.inputs]
        refs = [v32.get(o) for o in nd.outputs]
        j0 = next((j for j, r in enumerate(refs) if is_float_array(r)), None)
        if j0 is None:
            continue
        rnd = [round_to(a, low, overflow) for a in args]
        try:
            ir = ex.node(nd.index, rnd, v32)[j0]       # fp32 compute on rounded inputs
        except Exception:  # noqa: BLE001 - a node that does not run on rounded inputs: no row
            continue
        lo = round_to(ir, low, overflow) if j0 not in nd.aux else round_to(ir, dtype_name(ir), overflow)
        r1, c1, m1, nf1 = metrics(lo, refs[j0])
        r2, _, _, nf2 = metrics(ir, refs[j0])
        rows.append({"name": nd.name, "type": nd.ge.type, "low_dtype": low, "local_rel_l2": r1, "local_cosine": c1,
                     "local_max_abs": m1, "local_nonfinite": nf1, "inrnd_rel_l2": r2, "inrnd_nonfinite": nf2})
    return rows


def node_blob(m: Model, k: int) -> str | None:
    """The ONNX node k serialized (base64) for replay, when it is small and has no subgraph."""
    n = m.proto.graph.node[k]
    if any(a.type in (5, 10, 11, 13) for a in n.attribute):   # GRAPH, GRAPHS, SPARSE_TENSOR(S): not replayed
        return None
    b = n.SerializeToString()
    return base64.b64encode(b).decode("ascii") if len(b) <= MAX_REPLAY_NODE_BYTES else None


__all__ = ["capture_onnx", "capture_workload", "Executor", "round_to", "as_executed", "np_dtype", "node_blob"]
