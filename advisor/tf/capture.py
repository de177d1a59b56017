"""``capture_tf``: run a TensorFlow/Keras workload on the CPU the way GE (through the Ascend TF adapter)
would under a mode and mixlist, and write the same run directory as the PyTorch capture.

Pipeline: freeze the workload (``freeze``) -> op graph with GE types (``graph``) -> GE's graph fusion
(``advisor.fusion``) -> the semantics module's plan of the fused graph (``advisor.semantics.plan``, never
decided here) -> GraphDef rewritten to execute the plan, each TF node at the decision of the (fused) node
it belongs to (``rewrite``; the members of a fused kernel run one by one in fp32, only the values that
leave the kernel rounded) -> one FP32 and one mixed session run per batch, fetching every node's outputs ->
``advisor.rundir.RunWriter``: kernel_details.csv (dtypes as executed = the plan, cost-model durations), GE-style
graph dump, msprobe-format dumps (``framework: tensorflow``, ``.npy`` tensor files) and local_error.csv (the
worst over all steps).
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from .. import costmodel, fusion, semantics
from .. import graph as G
from ..errors import AdvisorError, InputError
from ..mixlist import Mixlist
from ..numerics import IEEE, INF_NAN, Numerics, to_dtype_array
from ..numerics import resolve as resolve_numerics
from ..oplists import DEFAULT_SOC, ops_info_meta
from ..rundir import (RunWriter, StagedRunDir, capture_settings, check_uniform_ports, override_settings,
                      tensor_record, versions, worst_local)
from . import one_line, opmap, require_tf
from .freeze import Frozen, freeze, quiet_tf, to_feed
from .graph import FLOAT_TF, build, prune, split_tensor
from .rewrite import ENUM_NAME, apply_plan, local_graph

SMALL_MODEL_PARAMS = 2_000_000   # default --dump tensors at or below this many parameters


# ---------------------------------------------------------------------- numpy helpers
def as_dtype(a: np.ndarray, dt: str, overflow: str = INF_NAN) -> np.ndarray:
    """``a`` rounded to the canonical float dtype ``dt`` (round-to-nearest-even, like TF's Cast; in saturation
    mode as the chip's Cast gives it: ``numerics.to_dtype_array``)."""
    if not np.issubdtype(np.asarray(a).dtype, np.floating) and str(np.asarray(a).dtype) != "bfloat16":
        return a
    if dt in ("fp16", "bf16", "fp32"):
        if _canon(np.asarray(a)) == dt:
            return np.asarray(a)
        return to_dtype_array(a, dt, overflow)
    return a


def _stats(a: np.ndarray) -> tuple[float, float, float, float]:
    """Max, Min, Mean, Norm (msprobe statistics); fp32 data, fp64 accumulation for the mean, BLAS norm."""
    x = np.asarray(a)
    if x.size == 0:
        return (math.nan,) * 4
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    x = x.ravel()
    return float(x.max()), float(x.min()), float(x.mean(dtype=np.float64)), float(np.linalg.norm(x))


def _canon(a: np.ndarray) -> str:
    s = str(np.asarray(a).dtype)
    return G.normalize_dtype(s)


def _file_array(a: np.ndarray) -> np.ndarray:
    """What a .npy tensor file holds: fp16/fp32 as they are, bf16 widened to fp32 (exact) because
    .npy has no bfloat16 type readable without pickle."""
    x = np.asarray(a)
    if str(x.dtype) == "bfloat16":
        return x.astype(np.float32)
    return x


def metrics(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, int]:
    """(rel_l2, cosine, max_abs, nonfinite count of a) of ``a`` against the reference ``b`` (vectorised
    fp32 with BLAS reductions; non-finite elements are masked out of the norms)."""
    a32 = np.asarray(a).astype(np.float32, copy=False).ravel()
    b32 = np.asarray(b).astype(np.float32, copy=False).ravel()
    if a32.size == 0:
        return 0.0, 1.0, 0.0, 0
    fa, fb = np.isfinite(a32), np.isfinite(b32)
    nonfinite = int(a32.size - np.count_nonzero(fa))
    if nonfinite or not fb.all():
        fin = fa & fb
        a32, b32 = np.where(fin, a32, 0.0).astype(np.float32), np.where(fin, b32, 0.0).astype(np.float32)
    d = a32 - b32
    nb, nd, na = float(np.linalg.norm(b32)), float(np.linalg.norm(d)), float(np.linalg.norm(a32))
    rel = math.inf if nonfinite else (nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf))
    cos = float(np.dot(a32.astype(np.float64), b32.astype(np.float64)) / (na * nb)) if na > 0 and nb > 0 else (
        1.0 if na == nb else 0.0)
    return rel, cos, float(np.abs(d).max()), nonfinite


# ---------------------------------------------------------------------- workload
def _workload(obj: Any):
    from ..workload import Workload  # noqa: PLC0415
    if isinstance(obj, Workload):
        return obj
    if isinstance(obj, tuple) and len(obj) in (2, 3):
        bs = obj[1]
        if isinstance(bs, tuple) and bs and not isinstance(bs[0], (tuple, list)):
            bs = [bs]
        bs = [tuple(b) if isinstance(b, (tuple, list)) else (b,) for b in bs]
        return Workload(model=obj[0], batches=bs, loss_fn=obj[2] if len(obj) == 3 else None)
    raise InputError(None, "a TensorFlow workload must return (model, batches) or (model, batches, loss_fn)")


def _fix_seeds(graph_def, seed: int) -> None:
    """Stateful random ops with no op seed would draw differently in the two runs: pin them."""
    for k, n in enumerate(graph_def.node):
        if n.op in opmap.RANDOM_OPS and "seed" in n.attr and n.attr["seed"].i == 0 and n.attr["seed2"].i == 0:
            n.attr["seed"].i = seed + 1
            n.attr["seed2"].i = k + 1


class Session:
    """One tf.compat.v1 session over a GraphDef, fetching a fixed list of tensors."""

    def __init__(self, tf, graph_def):
        self.tf = tf
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)
        # grappler would constant-fold, remap and auto-mix the graph: run it exactly as written
        cfg.graph_options.rewrite_options.disable_meta_optimizer = True
        self.sess = tf.compat.v1.Session(graph=self.graph, config=cfg)

    def run(self, fetches: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.sess.run(fetches, feed_dict=feed)

    def close(self) -> None:
        self.sess.close()


# ---------------------------------------------------------------------- capture
def capture_tf(workload: Any, out: str | os.PathLike, mode: str = semantics.DEFAULT_MODE,
               mixlist: str | os.PathLike | Mixlist | None = None, soc: str = DEFAULT_SOC,
               ops_info: Any = None, seed: int = 0, dump: str | None = None, cann: str | None = None,
               batches: int | list | None = None, target: str | None = None, local: bool = True,
               progress=None, keep_dtype: Any = None, customize_dtypes: Any = None,
               overflow_mode: str | None = None, allow_hf32: str | None = None, step_loop: Any = None) -> Path:
    """Capture a TF/Keras workload (a ``Workload`` or the ``(model, batches[, loss_fn])`` a TARGET
    function returned) into ``out``: FP32 reference run + mixed run executing ``semantics.plan``
    exactly.  ``batches``: an int keeps the first N, a list replaces them.  ``dump``: "tensors" |
    "stats" (default: tensors for models with at most 2M parameters).  Returns the run directory,
    built beside ``out`` and renamed into place when complete (``rundir.StagedRunDir``; ``progress``
    hears a previous ``out`` kept as ``.bak``).  ``overflow_mode`` / ``allow_hf32``: override the chip's
    (``advisor.numerics``).  ``step_loop``: training over optimizer steps (``advisor.tf.train.capture_training``
    passes its loop: built with the frozen, planned and rewritten step, ``run()`` -> (kernel rows, local error rows,
    run.json's ``train``))."""
    tf = require_tf(target)
    quiet_tf()
    wl = _workload(workload)
    if wl.trains and step_loop is None:
        raise InputError(target, "a workload with an optimizer trains over steps: capture it with "
                                 "advisor.emulator.capture (or advisor.tf.train.capture_training)")
    _select_batches(wl, batches, target)
    low, ml, lists, notes = capture_settings(mode, dump, mixlist, soc, ops_info, cann)
    numerics, nnotes = resolve_numerics(soc, overflow_mode, allow_hf32)
    notes += nnotes
    overrides = override_settings(keep_dtype, customize_dtypes)

    tf.random.set_seed(seed)
    fr = _freeze(wl, target, step_loop is not None)
    fetch_nodes = [split_tensor(t)[0] for t in fr.outputs + ([fr.loss] if fr.loss else []) + [t for _, t in fr.grads]
                   + ([fr.loss_scale] if fr.loss_scale else [])]
    gd = prune(fr.graph_def, fetch_nodes + [split_tensor(t)[0] for t in fr.inputs])
    _fix_seeds(gd, seed)
    g, info = build(tf, gd, name=wl.name)
    fz = fusion.fuse(g, lists.soc, lists)
    p = semantics.plan(fz.graph, lists, mode, overrides)
    check_uniform_ports(p, target)
    low_dtype = low or "fp16"
    precision, emit, types = _node_plan(g, fz, p)
    rw = apply_plan(tf, gd, info, precision, low_dtype, g, emit, numerics, members=fz.members, types=types,
                    through=fusion.cast_through(fz.graph))

    dump = dump or _default_dump(g)
    files_on = dump == "tensors"

    with StagedRunDir(out, progress) as stage:
        out_dir = stage.path
        vers = versions()
        vers["tensorflow"] = tf.__version__
        writer = RunWriter(out_dir, {"name": wl.name, "target": target, "mode": mode, "soc": soc,
                                     "ops_info": ops_info_meta(ops_info), **lists.table_meta(),
                                     "mixlist": ml.to_dict() if ml is not None else None, "seed": seed,
                                     "framework": "tensorflow", "emulated": True, "versions": vers,
                                     **numerics.to_meta()}, final_dir=stage.out)
        if ml is not None:
            writer.write_mixlist(ml.to_json())
        kw = dict(target=target, files_on=files_on, local=local, low_dtype=low_dtype, numerics=numerics)
        train = None
        if step_loop is not None:
            kernels, local_rows, train = step_loop(tf, wl, fr, gd, (g, info), rw, (fz, p), writer, mode=mode,
                                                   **kw).run()
        else:
            kernels, local_rows = _run_steps(tf, wl, fr, gd, g, info, rw, (fz, p), writer, **kw)
        graph_path = _write_executed(tf, writer, kernels, (g, rw), (fz, p), notes,
                                     fusion.local_rows(fz, local_rows).values() if local else None)
        unknown = sorted({g.nodes[n]["type"] for n in G.op_nodes(g)
                          if g.nodes[n].get("kernel", True) and not lists.is_known(g.nodes[n]["type"])})
        cube_style = sorted({g.nodes[n]["type"] for n, s in rw.style.items() if s == "cube-style"})
        files = writer.write_overrides(overrides, keep_dtype if isinstance(keep_dtype, (str, os.PathLike)) else None,
                                       customize_dtypes)
        notes += fusion.cast_notes(fz.graph) + stage.backup_notes()
        writer.write_run_json(steps=train["steps"] if train else len(wl.batches), training=fr.training,
                              **({"train": train} if train else {}), dump=dump, low_dtype=low, **files,
                              lists_source=lists.source, unmapped_ops=unknown, notes=notes,
                              graph=str(graph_path.relative_to(out_dir)) if graph_path else None,
                              n_ops=sum(1 for _ in G.op_nodes(g)), options=wl.options or {},
                              tf={"cube_style_types": cube_style, "inputs": fr.inputs}, fusion=fusion.summary(fz))
    return stage.out


def _write_executed(tf, writer: RunWriter, kernels: list, ran: tuple, fused: tuple, notes: list,
                    local_rows: Any) -> Path | None:
    """The profile, the GE graph dump with the dtypes as executed (``ran``: the op graph and the rewrite) and the
    local errors (None: not measured); returns the graph dump's path."""
    (g, rw), (fz, p) = ran, fused
    writer.write_profile(kernels)
    _executed_dtypes(tf, g, rw)
    for n, a in fz.graph.nodes(data=True):   # the fused graph's nodes that kept their TF node
        if n in g and not a.get("members"):
            a["in_dtypes"], a["out_dtypes"] = g.nodes[n].get("in_dtypes"), g.nodes[n].get("out_dtypes")
    semantics.annotate(fz.graph, p)
    graph_path = writer.write_graph(fz.graph, p, notes)
    if local_rows is not None:
        writer.write_local_error(local_rows)
    return graph_path


def _select_batches(wl, batches: int | list | None, target: Any) -> None:
    """``batches`` as capture_tf takes it: an int keeps the first N, a list replaces them."""
    if isinstance(batches, int):
        wl.batches = wl.batches[:max(1, batches)]
    elif batches is not None:
        wl.batches = _workload((wl.model, batches)).batches
    if not wl.batches:
        raise InputError(target, "batches is empty: give at least one batch (a tuple of arrays)")


def _default_dump(g) -> str:
    """--dump's default: tensors for models with at most ``SMALL_MODEL_PARAMS`` float weights, else statistics."""
    n_params = sum(int(np.prod(g.nodes[n].get("out_shapes", [[0]])[0] or [0])) for n in g
                   if g.nodes[n]["role"] == "const" and g.nodes[n].get("dtype") in ("fp32", "fp16", "bf16"))
    return "tensors" if n_params <= SMALL_MODEL_PARAMS else "stats"


def _freeze(wl, target: Any, steps: bool) -> Frozen:
    """The workload frozen to one GraphDef; a failure of the user's model code is an InputError."""
    try:
        return freeze(wl.model, wl.batches, wl.loss_fn, wl.options or {}, steps=steps)
    except AdvisorError:
        raise
    except Exception as e:  # user model code
        raise InputError(target, f"freezing the TensorFlow model failed: {one_line(e)}") from None


def _node_plan(g, fz: fusion.FusionResult, p) -> tuple[dict, dict, dict]:
    """Per TF node of ``g``, from the (fused) node it belongs to: its precision, its output dtype
    (``Plan.exec_dtypes``) and the GE type it executes as (post-fusion; a fused kernel's member: its own, which
    decides HF32)."""
    nodes = {n: fz.node_of(n) for n in g if fz.node_of(n) in fz.graph}
    types = {n: str(fz.graph.nodes[v].get("type")) for n, v in nodes.items() if n not in fz.members}
    return {n: p[v] for n, v in nodes.items()}, {n: p.exec_dtypes(v)[1] for n, v in nodes.items()}, types


def _run_steps(tf, wl, fr: Frozen, gd, g, info, rw, p, writer: RunWriter, *, target: Any, files_on: bool,
               local: bool, low_dtype: str, numerics: Numerics = IEEE) -> tuple[list[dict], dict[str, dict]]:
    """Every batch through the FP32 and the mixed session, fetching every output of every op-graph
    node: kernel rows and dumps of each step written, local errors kept (the worst over all steps).
    Returns (kernel rows, local error rows by node)."""
    # every output of every op-graph node, in both runs
    keys = [(n, k) for n in info.order for k in range(len(info.out_dtypes[n]))
            if g.nodes[n]["role"] != "const" and info.out_dtypes[n][k] not in ("resource", "variant")]
    fp32_fetch = [f"{n}:{k}" for n, k in keys]
    mixed_fetch = [rw.tensor.get((n, k), f"{n}:{k}") for n, k in keys]
    model_fetch = fr.outputs + ([fr.loss] if fr.loss else []) + [t for _, t in fr.grads]
    model_keys = [info.source(t) for t in model_fetch]
    consts = {n: const_value(tf, info.nodes[n]) for n in info.order if g.nodes[n]["role"] == "const"}

    s32 = Session(tf, gd)
    smx = Session(tf, rw.graph_def)
    kernels: list[dict] = []
    local_rows: dict[str, dict] = {}
    try:
        for step, batch in enumerate(wl.batches):
            arrays = to_feed(batch)
            feed = {t: arrays[i] for t, i in zip(fr.inputs, fr.input_indices)}
            v32 = user_run(s32, fp32_fetch, feed, target, "FP32", step)
            vmx = user_run(smx, mixed_fetch, feed, target, "mixed", step)
            val32 = dict(zip(keys, v32))
            valmx = dict(zip(keys, vmx))
            for n, c in consts.items():
                val32[(n, 0)] = valmx[(n, 0)] = c
            kernels.extend(kernel_rows(g, info, rw, p, valmx, step))
            for which, vals in (("fp32", val32), ("mixed", valmx)):
                data, files = dump_data(g, info, rw if which == "mixed" else None, vals, fr, model_keys,
                                         files_on, numerics.overflow)
                writer.write_dump(which, step, data, files or None, task="tensor" if files_on else "statistics")
            if local:  # every step: a hazard may show only in some batches; rows keep the worst
                for row in local_errors(tf, gd, info, g, low_dtype, feed, val32, numerics):
                    local_rows[row["name"]] = worst_local(local_rows.get(row["name"]), row)
    finally:
        s32.close()
        smx.close()
        reset_keras_naming()
    return kernels, local_rows


def user_run(sess: Session, fetch: list[str], feed: dict, target: Any, which: str, step: int) -> list:
    """One session run of the user's model; its failure is an InputError naming the run and step."""
    try:
        return sess.run(fetch, feed)
    except Exception as e:
        raise InputError(target, f"the model failed in the {which} run (step {step}): "
                                 f"{one_line(e)}") from None


def _executed_dtypes(tf, g, rw) -> None:
    """In/out dtypes of the rewritten ops as the mixed run executed them, onto the op graph."""
    for n in g:
        a = g.nodes[n]
        if a["role"] == "op" and n in rw.out_dtypes:
            a["in_dtypes"] = [_enum_canon(tf, e) for e in rw.in_dtypes[n]]
            a["out_dtypes"] = [_enum_canon(tf, e) for e in rw.out_dtypes[n]]


def _enum_canon(tf, e: int) -> str:
    return ENUM_NAME.get(e) or G.normalize_dtype(tf.dtypes.as_dtype(e).name)


def const_value(tf, nd) -> np.ndarray:
    try:
        return tf.make_ndarray(nd.attr["value"].tensor)
    except Exception:  # noqa: BLE001 - non-tensor const
        return np.zeros((0,), np.float32)


def reset_keras_naming() -> None:
    """Keras names layers and models from process-wide counters (sequential, sequential_1, ...), so a
    second workload() call in the same process (``advisor tune`` re-captures in-process) would get
    different node names than the first, unlike a real NPU job that starts a fresh process per run.
    Clearing the Keras session after each capture restarts the counters: every capture's node, kernel
    and dump names are those of a fresh process."""
    import sys  # noqa: PLC0415
    keras = sys.modules.get("keras")
    if keras is None:
        return
    try:
        keras.backend.clear_session()
    except Exception:  # noqa: BLE001 - best effort; names then merely differ between captures
        pass


def kernel_rows(g, info, rw, fused, vals, step: int) -> list[dict]:
    """kernel_details rows of the mixed (target) run: one per kernel of the fused graph, typed as GE judges it (a
    fused kernel's row comes at its last member, under the fused node's name, with its external inputs and
    outputs), dtypes as executed, the core it ran on (the fused node's placement) and cost-model durations."""
    fz, p = fused
    rows = []
    for n in info.order:
        a = g.nodes[n]
        if a["role"] != "op" or not a.get("kernel", True):
            continue
        node = fz.node_of(n)
        fa = fz.graph.nodes[node] if node in fz.graph else a
        m = fz.members.get(n)
        if (m is not None and not m.last) or not fa.get("kernel", True) or fa.get("trans_removed"):
            continue
        if m is not None:
            ins, outs = [tuple(x) for x in fa.get("ports_in", ())], [tuple(x) for x in fa.get("ports_out", ())]
        else:
            skip = set(fa.get("attr_inputs") or ())  # constants a ConstToAttr pass made attributes
            ins = [(n, i) for i in range(len(info.inputs[n])) if i not in skip]
            outs = [(n, k) for k in range(len(info.out_dtypes[n]))]
        in_shapes, ind = _kernel_ports(info, rw, vals, ins, True)
        out_shapes, outd = _kernel_ports(info, rw, vals, outs, False)
        prec, cpu = (p[node], p.on_ai_cpu(node)) if node in fz.graph else ("fp32", False)
        typ = fa["type"]
        flops = costmodel.estimate_flops(typ, in_shapes, out_shapes)
        nbytes = costmodel.estimate_bytes(in_shapes, out_shapes, ind, outd)
        rows.append({"step": step, "name": str(fa.get("name", n)), "type": typ, "core": costmodel.core_type(typ, cpu),
                     "duration_us": costmodel.op_time_us(typ, flops, nbytes, prec, ai_cpu=cpu),
                     "in_shapes": in_shapes, "in_dtypes": ind, "out_shapes": out_shapes, "out_dtypes": outd})
    return rows


def _kernel_ports(info, rw, vals, ports: list, inputs: bool) -> tuple[list, list[str]]:
    """(shapes, executed dtypes) of a kernel row's ports, each ``(TF node, its input / output index)``."""
    shapes, dts = [], []
    for n, j in ports:
        if inputs:
            srcs = info.inputs.get(n, [])
            key = srcs[j] if j < len(srcs) else None
        else:
            key = (n, j)
        got = (rw.in_dtypes if inputs else rw.out_dtypes).get(n, [])
        shapes.append(list(np.shape(vals[key])) if key in vals else None)
        dts.append(_enum_name_np(got[j]) if j < len(got) else "n/a")
    return shapes, dts


_ENUM_CANON = {1: "fp32", 2: "fp64", 14: "bf16", 19: "fp16", 3: "int32", 9: "int64", 10: "bool", 4: "uint8",
               6: "int8", 5: "int16", 7: "string", 17: "uint16", 22: "uint32", 23: "uint64"}


def _enum_name_np(e: int) -> str:
    return _ENUM_CANON.get(int(e), f"dt_{int(e)}")


def _safe_file(name: str, taken: dict) -> str:
    """A tensor file name without path separators (TF node names contain "/"), unique in the dump."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    out, k = base, 1
    while out in taken:
        stem, dot, ext = base.rpartition(".")
        out = f"{stem}_{k}.{ext}" if dot else f"{base}_{k}"
        k += 1
    return out


def dump_data(g, info, rw, vals, fr: Frozen, model_keys, files_on: bool, overflow: str = INF_NAN
               ) -> tuple[dict, dict]:
    """dump.json data of one run of one step.  ``rw`` None = the FP32 run (tensors as fetched).  An input
    consumed in another dtype is recorded as the Cast gives it under the overflow mode."""
    data: dict = {}
    files: dict = {}

    def rec(arr, fname, always=False):
        # model outputs, loss and gradients keep their tensor files even in --dump stats (statistics
        # cannot show a finite "far off" output), as in the PyTorch capture
        arr = np.asarray(arr)
        fname = _safe_file(fname, files)
        write = files_on or always
        if write:
            files[fname] = _file_array(arr)
        return tensor_record(_canon(arr), list(arr.shape), _stats(arr), False, fname if write else None,
                             "tensorflow")

    for n in info.order:
        a = g.nodes[n]
        if a["role"] != "op":
            continue
        name = f"{n}.forward"
        args = []
        consumed = rw.in_dtypes.get(n, []) if rw is not None else []
        for i, s in enumerate(info.inputs[n]):
            v = vals.get(s)
            if v is None:
                args.append(None)
                continue
            if i < len(consumed):
                v = as_dtype(v, _enum_name_np(consumed[i]), overflow)
            args.append(rec(v, f"{name}.input.{i}.npy"))
        outs = []
        for k in range(len(info.out_dtypes[n])):
            v = vals.get((n, k))
            outs.append(None if v is None else rec(v, f"{name}.output.{k}.npy"))
        data[name] = {"input_args": args, "input_kwargs": {}, "output": outs}
    n_out = len(fr.outputs)
    data["Model.output.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": [
        rec(vals[k], f"Model.output.0.forward.output.{j}.npy", True) for j, k in enumerate(model_keys[:n_out]) if k in vals]}
    rest = model_keys[n_out:]
    if fr.loss is not None and rest:
        k = rest[0]
        if k in vals:
            data["Model.loss.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": [
                rec(vals[k], "Model.loss.0.forward.output.0.npy", True)]}
        for (pname, _), k in zip(fr.grads, rest[1:]):
            if k in vals:
                data[f"Grad.{pname}"] = {"input_args": [], "input_kwargs": {}, "output": [
                    rec(vals[k], f"Grad.{pname}.output.0.npy", True)]}
    return data, files


def local_errors(tf, gd, info, g, low_dtype: str, feed, val32, numerics: Numerics = IEEE) -> list[dict]:
    """local_error.csv rows: every float kernel op re-executed in the low dtype (and in fp32 on rounded
    inputs) on the FP32 run's exact inputs under the chip's overflow mode, all clones in one session run."""
    lgd, clones = local_graph(tf, gd, info, g, low_dtype, numerics)
    if not clones:
        return []
    names, fetch = [], []
    for n, (lo, ir) in clones.items():
        k = next((k for k, d in enumerate(info.out_dtypes[n]) if d in FLOAT_TF), None)
        if k is None or k >= len(lo) or (n, k) not in val32:
            continue
        names.append((n, k))
        fetch.extend([lo[k], ir[k]])
    if not fetch:
        return []
    s = Session(tf, lgd)
    try:
        vals = s.run(fetch, feed)
    except Exception:  # noqa: BLE001 - an op that cannot be cloned: no local errors rather than no run
        return []
    finally:
        s.close()
    rows = []
    for j, (n, k) in enumerate(names):
        ref = val32[(n, k)]
        lo, ir = vals[2 * j], vals[2 * j + 1]
        r1, c1, m1, nf1 = metrics(lo, ref)
        r2, _, _, nf2 = metrics(ir, ref)
        rows.append({"name": n, "type": g.nodes[n]["type"], "low_dtype": low_dtype, "local_rel_l2": r1,
                     "local_cosine": c1, "local_max_abs": m1, "local_nonfinite": nf1,
                     "inrnd_rel_l2": r2, "inrnd_nonfinite": nf2})
    return rows


__all__ = ["capture_tf", "metrics", "as_dtype"]
