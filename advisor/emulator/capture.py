"""``capture``: run a PyTorch workload on the CPU the way GE would under a mode and mixlist, and write
a run directory in the real NPU formats (see advisor/rundir.py and docs/formats.md)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from torch.utils._pytree import tree_flatten

from .. import fusion, semantics
from .. import graph as G
from ..errors import AdvisorError, InputError
from ..mixlist import Mixlist
from ..numerics import IEEE, Numerics, resolve as resolve_numerics
from ..oplists import DEFAULT_SOC, ops_info_meta
from ..progress import Progress
from ..inputs import check_capture_inputs, engine_settings
from ..rundir import (RunWriter, StagedRunDir, capture_settings, check_run_out, check_uniform_ports,
                      override_settings, worst_local)
from ..workload import (Workload, describe_user_error, framework_of, is_onnx_model, is_onnx_target, is_tf_model,
                        load_target, normalize, tf_install_hint)
from .dumps import DumpBuilder, static_ptrs
from .engine import EmuMode, KernelGroups, StepRecord, eager_math_attention
from .kernel_rows import kernel_rows
from .local import local_error
from .train import TrainLoop

SMALL_MODEL_PARAMS = 2_000_000   # default --dump tensors at or below this many parameters


# ---------------------------------------------------------------------- one step
def run_step(model, batch: tuple, loss_fn=None, *, graph=None, params: dict | None = None,
             plan: list[str] | None = None, reference=None, keep_entries: bool = True,
             keep_local: bool = False, seed: int = 0, step: int = 0, cache: dict | None = None,
             loss_scale: float | None = None, numerics: Numerics = IEEE, groups: dict | None = None,
             overflow: list | None = None, tracker: Any = None, forward: Any = None) -> StepRecord:
    """Run one step (forward, + loss and backward when ``loss_fn``) under the emulation mode.

    ``loss_scale`` S: backward starts from S (what ``(loss * S).backward()`` computes, without an extra
    op in the graph), so every backward op sees gradients S times larger and in the low dtype fewer of
    them underflow.  The recorded loss is unscaled; the parameter gradients are the scaled ones, as
    msprobe's gradient hooks see them on an NPU before the optimizer unscales them.  ``numerics``: the
    chip's overflow mode and HF32, applied by the mixed run (``plan`` given).  ``groups``: the members of fused
    kernels (``EmuMode``).  Recording a graph also marks the ops whose outputs leave the step (model outputs, loss,
    gradients: ``net_outputs``, what GE's NetOutput reads).  ``overflow``: a list the mixed run appends the
    index of every op that overflowed to (``EmuMode._note_overflow``; training steps).  torch_npu: ``forward()`` is
    the context of the forward and the loss (the autocast key), ``tracker`` records the run (``emulator.torch_npu``)."""
    torch.manual_seed(seed + step)
    if loss_fn is not None and isinstance(model, torch.nn.Module):
        for p in model.parameters():
            p.grad = None
    inputs = {id(t): i for i, t in enumerate(batch) if isinstance(t, torch.Tensor)}
    mode = EmuMode(graph, params, inputs, plan, reference, keep_entries, keep_local, cache=cache, numerics=numerics,
                   groups=groups, overflow=overflow, tracker=tracker)
    fwd = forward if forward is not None else contextlib.nullcontext
    with eager_math_attention():
        if loss_fn is not None:
            with torch.enable_grad(), mode:
                with fwd():
                    out = model(*batch)
                    loss = loss_fn(out, batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise InputError(None, "loss_fn must return a scalar tensor")
                mode.rec.bwd_start = len(mode.rec.ops)
                if tracker is not None:
                    tracker.start_backward()
                if loss_scale is not None:
                    loss.backward(gradient=torch.full_like(loss, float(loss_scale)))
                else:
                    loss.backward()
            mode.rec.loss = loss.detach()
            if isinstance(model, torch.nn.Module):
                mode.rec.grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

        else:
            with torch.no_grad(), mode, fwd():
                out = model(*batch)
    flat, _ = tree_flatten(out)
    mode.rec.outputs = [t for t in flat if isinstance(t, torch.Tensor)]
    if graph is not None:
        graph.graph["training"] = loss_fn is not None
        _mark_net_outputs(graph, mode, mode.rec.outputs + [mode.rec.loss] + list(mode.rec.grads.values()))
    mode.rec.returned = type(out).__name__
    mode.rec.rounded = mode.rounded  # executed low dtype of tensors (mixed run)
    return mode.rec


def _mark_net_outputs(graph, mode: EmuMode, tensors: list) -> None:
    """``net_outputs`` (output indices) on the nodes producing the step's outputs."""
    for t in tensors:
        src = mode.producer.get(id(t)) if t is not None else None
        if src is not None and src[0] is t and src[1] in graph:
            ports = graph.nodes[src[1]].setdefault("net_outputs", [])
            if src[2] not in ports:
                ports.append(src[2])


def param_names(model) -> dict:
    """id(parameter or buffer) -> name, plus ``"__tensors__"``: the parameter tensors (whose rounded
    copies the mixed run caches)."""
    out: dict = {}
    if isinstance(model, torch.nn.Module):
        for n, p in model.named_parameters(remove_duplicate=False):
            out.setdefault(id(p), n)
        for n, b in model.named_buffers(remove_duplicate=False):
            out.setdefault(id(b), n)
        out["__tensors__"] = [p for p in model.parameters()]
    return out


def trace_workload(wl: Workload, step: int = 0, seed: int = 0):
    """(op graph, step record) of the FP32 run of one step — what capture plans on."""
    model = _unwrap(wl.model)[0]
    g = G.new_graph(framework="pytorch", step=step)
    state = _snapshot(model)
    try:
        rec = run_step(model, wl.batches[step], wl.loss_fn, graph=g, params=param_names(model), seed=seed,
                       step=step, keep_entries=False)
    finally:
        _restore(model, state)
    return g, rec


# ---------------------------------------------------------------------- helpers
def check_loss_scale(loss_scale: Any, wl: Workload, target: Any) -> float | None:
    """A loss scale is a finite number > 0 and needs a training workload (``loss_fn``); 1 is no scaling."""
    if loss_scale is None:
        return None
    try:
        s = float(loss_scale)
    except (TypeError, ValueError):
        raise InputError("--loss-scale", f"must be a number, not {loss_scale!r}") from None
    if not (s > 0 and s < float("inf")):
        raise InputError("--loss-scale", f"must be a finite number > 0, not {loss_scale!r}")
    if wl.loss_fn is None:
        raise InputError(target, "--loss-scale needs a training workload (one with a loss_fn): an inference run "
                                 "has no backward to scale")
    return None if s == 1.0 else s


def _check_training(wl: Workload, target: Any, loss_scale: float | None) -> None:
    """Optimizer steps (``Workload.optimizer``) scale through their scaler (PyTorch: ``train.TrainLoop``; Keras:
    ``advisor.tf.train``), not ``--loss-scale``."""
    if not wl.trains:
        return
    if loss_scale is not None:
        raise InputError(target, "--loss-scale is the static scale of a capture without optimizer steps; a workload "
                                 "with an optimizer scales through its scaler (Workload(scaler=\"static\", "
                                 "scaler_options={\"scale\": S}))")


def _load_workload(target_or_workload: Any, batches: int | list | None) -> tuple[Workload, str]:
    """(Workload, the name capture records as its target); ``batches`` as ``capture`` takes it."""
    if isinstance(target_or_workload, str):
        wl = load_target(target_or_workload)
        target = target_or_workload
    else:
        wl = normalize(target_or_workload, "workload")
        target = getattr(target_or_workload, "name", None) or "workload"
    if isinstance(batches, int):
        wl.batches = wl.batches[:max(1, batches)]
    elif batches is not None:
        wl.batches = normalize((wl.model, batches), "batches").batches
    return wl, target


def _check_traced(rec: StepRecord, target: Any) -> None:
    """A forward that returns no tensor (a str, None, ...) or runs no tensor operation gives nothing
    to compare or recommend: one clear error instead of an empty run directory."""
    if not rec.outputs:
        raise InputError(target, f"the model returned {getattr(rec, 'returned', 'nothing')}, not a tensor (or a "
                                 "tuple, list or dict of tensors): nothing to compare")
    if not rec.ops:
        raise InputError(target, "the model ran no tensor operation on its batch: nothing to capture")


def _unwrap(model) -> tuple[Any, list[str]]:
    notes = []
    orig = getattr(model, "_orig_mod", None)
    if orig is not None and type(model).__name__ == "OptimizedModule":
        notes.append("the model was wrapped by torch.compile: captured its original module in eager mode "
                     "(compiled graphs cannot be intercepted per op)")
        model = orig
    return model, notes


def _snapshot(model) -> dict:
    if not isinstance(model, torch.nn.Module):
        return {}
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def _restore(model, state: dict) -> None:
    if not state:
        return
    with torch.no_grad():
        for n, b in model.named_buffers():
            if n in state:
                b.copy_(state[n])


# ---------------------------------------------------------------------- capture
def capture(target_or_workload: Any, out: str | os.PathLike, mode: str = semantics.DEFAULT_MODE,
            mixlist: str | os.PathLike | Mixlist | None = None, soc: str = DEFAULT_SOC,
            ops_info: str | os.PathLike | None = None, seed: int = 0, dump: str | None = None,
            batches: int | list | None = None, local: bool = True, progress: Progress = None,
            keep_dtype: Any = None, customize_dtypes: Any = None, inputs: list[str] | None = None,
            input_shapes: list[str] | None = None, loss_scale: float | None = None, cann: str | None = None,
            overflow_mode: str | None = None, allow_hf32: str | None = None, dump_tensors: Iterable[str] = (),
            engine: str | None = None, amp: str | None = None, policy: Any = None, train_reference: Any = None) -> Path:
    """Capture a workload (TARGET string, Workload, or (model, batches[, loss_fn]) tuple) into ``out``: FP32
    reference run + mixed run applying ``semantics.plan`` exactly.  Returns the run directory.  ``batches``: an int
    keeps the first N batches, a list replaces them.  ``dump``: "tensors" | "stats" (default: tensors for models
    with at most 2M parameters).  ``loss_scale``: the static loss scale of a training workload's backward in both
    runs (``run_step``), recorded in run.json.  ``out`` is built in a hidden folder beside it and renamed into
    place when complete (an interrupted capture leaves ``out`` as it was); an existing non-empty ``out`` is kept
    as ``out.bak`` and ``progress`` (its ``note``) hears it (``rundir.StagedRunDir``).  In-process: a workload
    that hangs or ends the process is not guarded here (``advisor capture`` runs it in a child process).
    ``keep_dtype`` / ``customize_dtypes``: ATC's per-op override files (docs/semantics.md).  An ONNX model (a
    ``model.onnx`` TARGET, or a workload whose model is one) goes to ``advisor.onnx``; ``inputs`` (.npz files) /
    ``input_shapes`` (``name:1,3,224,224``) give its batches.  ``cann``: the tables' version (None: the current),
    ``overflow_mode`` / ``allow_hf32`` override the chip's numerics (``advisor.numerics.resolve``); run.json
    records all.  ``dump_tensors``: ``_Steps``.  ``engine`` / ``amp`` / ``policy``: ``inputs.engine_settings``
    (default ge; "auto" is the command line's; torch_npu plans by ``semantics.torch_npu``).  ``train_reference``:
    ``emulator.train.FP32Steps``, filled by the FP32 run of a workload with an optimizer or, filled, reused."""
    check_run_out(out)
    ge_opts = {"mixlist": mixlist, "keep_dtype": keep_dtype, "customize_dtypes": customize_dtypes, "ops_info": ops_info}
    onnx_kw = dict(mode=mode, mixlist=mixlist, soc=soc, ops_info=ops_info, cann=cann, seed=seed, dump=dump,
                   local=local, progress=progress, keep_dtype=keep_dtype, customize_dtypes=customize_dtypes,
                   inputs=inputs, input_shapes=input_shapes, overflow_mode=overflow_mode, allow_hf32=allow_hf32)
    if is_onnx_target(target_or_workload) or is_onnx_model(target_or_workload):   # model.onnx or a ModelProto
        engine_settings(engine, amp, mode, policy, soc, "onnx", where=str(target_or_workload))
        if loss_scale is not None:
            raise InputError(str(target_or_workload), "--loss-scale needs a training workload; an ONNX model is "
                                                      "inference only")
        return _delegate_onnx(target_or_workload, None, out, None, batches, **onnx_kw)
    wl, target = _load_workload(target_or_workload, batches)
    if is_onnx_model(wl.model):
        engine_settings(engine, amp, mode, policy, soc, "onnx", where=target)
        return _delegate_onnx(wl.model, wl, out, target, batches, **onnx_kw)
    if inputs or input_shapes:
        raise InputError(target, "--inputs / --input-shape give the inputs of an ONNX model; this workload "
                                 "brings its own batches")
    loss_scale = check_loss_scale(loss_scale, wl, target)
    _check_training(wl, target, loss_scale)
    overrides = override_settings(keep_dtype, customize_dtypes)
    if framework_of(wl.model) == "tensorflow":
        if loss_scale:
            raise InputError(target, "a loss scale is emulated for PyTorch training workloads only")
        engine_settings(engine, amp, mode, policy, soc, "tensorflow", where=target)
        return _delegate_tf(wl, out, target=target, train_reference=train_reference,
                            **{k: v for k, v in onnx_kw.items() if k[:5] != "input"})
    eng, low, ml, lists, notes = _settings(engine, amp, policy, mode, dump, ge_opts, soc, cann, wl, target)
    numerics, nnotes = resolve_numerics(soc, overflow_mode, allow_hf32)
    model, unwrap_notes = _unwrap(wl.model)
    notes += nnotes + unwrap_notes
    n_params = sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0
    dump = dump or ("tensors" if n_params <= SMALL_MODEL_PARAMS else "stats")
    with StagedRunDir(out, progress) as stage:
        out_dir = stage.path
        writer = RunWriter(out_dir, {"name": wl.name, "target": target, "mode": mode, "soc": soc,
                                     "ops_info": ops_info_meta(ops_info), **(lists.table_meta() if lists else {}),
                                     "mixlist": ml.to_dict() if ml is not None else None, "seed": seed,
                                     "framework": "pytorch", "emulated": True, **numerics.to_meta(),
                                     **eng.to_meta()}, stage.out)
        if ml is not None:
            writer.write_mixlist(ml.to_json())
        if eng.policy is not None:
            writer.write_policy(eng.policy.to_dict())
        steps = _Steps(model, wl, target, lists, mode, seed, notes, writer, files=dump == "tensors", local=local,
                       low_for_local=low or "fp16", loss_scale=loss_scale, overrides=overrides, numerics=numerics,
                       tensor_names=dump_tensors, engine=eng, train_reference=train_reference)
        with steps.session():
            try:
                counted = steps.run_all()
            finally:
                _restore(model, steps.state0)
        files = writer.write_overrides(overrides, keep_dtype if isinstance(keep_dtype, (str, os.PathLike)) else None,
                                       customize_dtypes)
        _finish(stage, writer, steps, wl, notes, counted, local=local, dump=dump, low=low, loss_scale=loss_scale,
                lists_source=lists.source if lists else None, **files)
    return stage.out


def _settings(engine, amp, policy, mode, dump, ge_opts: dict, soc, cann, wl: Workload, target) -> tuple:
    """(EngineSettings, low dtype, Mixlist, effective lists, notes) of a PyTorch capture: torch_npu takes no GE list
    (``inputs.engine_settings`` refused GE's options) and no optimizer steps yet, ge ``rundir.capture_settings``."""
    notes = []
    if engine == "auto" and wl.trains and amp is None and policy is None:
        engine = "ge"       # the default engine: optimizer steps are emulated on GE only (torch_npu: not yet)
        notes.append("a workload with an optimizer: captured with engine ge (torch_npu training over optimizer "
                     "steps is not emulated yet)")
    eng = engine_settings(engine, amp, mode, policy, soc, "pytorch", ge_opts, target)
    if eng.engine == "torch_npu":
        if wl.trains:
            raise InputError(target, "training over optimizer steps (a workload with an optimizer) is emulated on "
                                     "GE only: capture it with --engine ge, or without its optimizer")
        check_capture_inputs(None, None, dump, None)
        return eng, eng.config.dtype, None, None, []
    low, ml, lists, more = capture_settings(mode, dump, ge_opts["mixlist"], soc, ge_opts["ops_info"], cann)
    return eng, low, ml, lists, notes + list(more)


def _finish(stage: StagedRunDir, writer: RunWriter, steps: "_Steps", wl: Workload, notes: list, counted: dict, *,
            local: bool, dump: str, low: Any, loss_scale: Any, **run_json: Any) -> None:
    """The run directory's profile, graph dump, local error and run.json, once every step ran (``counted``:
    ``_Steps.run_all``'s fields)."""
    writer.write_profile(steps.kernels)
    graph_path = steps.write_graph(notes)
    if local:
        writer.write_local_error(steps.local_error_rows())
    notes += stage.backup_notes()
    writer.write_run_json(**counted, training=wl.loss_fn is not None, dump=dump, low_dtype=low,
                          fusion=fusion.summary(steps.fz0) if steps.fz0 is not None else None,
                          unmapped_ops=sorted(steps.unmapped), notes=notes,
                          graph=str(graph_path.relative_to(stage.path)) if graph_path else None,
                          n_ops=len(steps.g0) if steps.g0 is not None else 0, options=wl.options or {},
                          loss_scale=loss_scale, dump_tensor_list=sorted(steps.tensor_names) or None, **run_json)


class _Steps:
    """The steps of one capture: per batch the FP32 run, the plan, the mixed run, then its kernel
    rows, dumps and local errors; what the run directory's profile, graph and run.json need is kept
    (``kernels``, ``g0``/``plan0`` of step 0, ``unmapped``, ``local_rows``).  ``tensor_names``: ops a
    statistics dump writes with their tensors too (msprobe's ``statistics.tensor_list``; run.json
    ``dump_tensor_list``)."""

    def __init__(self, model, wl: Workload, target: Any, lists, mode: str, seed: int, notes: list[str],
                 writer: RunWriter, *, files: bool, local: bool, low_for_local: str, loss_scale: float | None = None,
                 overrides: Any = None, numerics: Numerics = IEEE, tensor_names: Iterable[str] = (),
                 engine: Any = None, train_reference: Any = None):
        self.model, self.wl, self.target, self.lists, self.mode, self.seed = model, wl, target, lists, mode, seed
        self.loss_scale, self.overrides, self.numerics = loss_scale, overrides, numerics
        self.tensor_names = frozenset(() if files else tensor_names)
        self.notes, self.writer, self.files, self.local, self.low_for_local = notes, writer, files, local, low_for_local
        self.params = param_names(model)
        self.state0 = _snapshot(model)
        self.kernels: list[dict] = []
        self.unmapped: dict[str, str] = {}
        self.ref_sig = None
        self.ref_plan: tuple[list, list[bool]] | None = None
        self.ref_fz: fusion.FusionResult | None = None
        self.g0 = self.plan0 = None
        self.fz0: fusion.FusionResult | None = None
        self.local_rows: dict[str, dict] = {}
        self.round_cache: dict = {}
        self.stats_cache: dict = {}
        self.eng = engine          # inputs.EngineSettings; torch_npu: planned by semantics.torch_npu
        self.sess: Any = None
        self.trace0 = self.ref_tplan = None
        self.train_reference = train_reference   # emulator.train.FP32Steps (capture's train_reference)

    @contextlib.contextmanager
    def session(self):
        """torch_npu: the dispatcher, module and Apex hooks around every run of the capture (``emulator.torch_npu``)."""
        if self.eng is None or self.eng.engine != "torch_npu":
            yield
            return
        from .torch_npu import Session
        with Session(self.model, self.eng.config, self.eng.policy) as sess:
            self.sess = sess
            try:
                yield
            finally:
                self.notes.extend(sess.notes)
                self.sess = None

    def run_all(self) -> dict:
        """Every step (batch i = step i; a workload with an optimizer: its optimizer steps, ``train.TrainLoop``);
        returns run.json's ``steps`` (and ``train``) fields."""
        if self.wl.trains:
            train = TrainLoop(self, self.wl, self.target, self.numerics, self.seed,
                              reference=self.train_reference).run()
            return {"steps": train["steps"], "train": train}
        for step, batch in enumerate(self.wl.batches):
            self.run(step, batch)
        return {"steps": len(self.wl.batches)}

    def run(self, step: int, batch: tuple) -> None:
        """One batch: FP32 run, plan, mixed run (the profiled target run), then its outputs."""
        g = G.new_graph(framework="pytorch", step=step)
        tr = self.sess.tracker if self.sess is not None else None
        fwd = self.sess.forward if self.sess is not None else None
        fp = self._user_run("FP32", step, lambda: run_step(
            self.model, batch, self.wl.loss_fn, graph=g, params=self.params, seed=self.seed, step=step,
            keep_local=self.local, loss_scale=self.loss_scale, tracker=tr, forward=fwd))
        trace = None
        if tr is not None:
            from .torch_npu import leaves_of
            trace = tr.trace(fp.ops, leaves_of(g, self.model))
            tr.end()
        if step == 0:
            _check_traced(fp, self.target)
        _restore(self.model, self.state0)
        precs, cpu, fz = self._plan(step, g, fp, trace)
        for r in fp.ops:
            if not r.mapped:
                self.unmapped[f"aten.{r.packet}.{r.overload}"] = r.type
        groups = self.groups_of(fz)
        mx = self._user_run("mixed", step, lambda: run_step(
            self.model, batch, self.wl.loss_fn, params=self.params, plan=precs, reference=fp.ops, seed=self.seed,
            step=step, cache=self.round_cache, loss_scale=self.loss_scale, numerics=self.numerics, groups=groups,
            forward=fwd))
        _restore(self.model, self.state0)
        if trace is not None:
            from .torch_npu import kernel_rows as eager_kernel_rows
            self.kernels.extend(eager_kernel_rows(step, fp, self.ref_tplan))
        else:
            self.kernels.extend(kernel_rows(step, fp, precs, cpu, fz))
        self._write_dumps(step, fp, mx, precs, fz.members)
        if self.local:  # every step: a hazard may show only in some batches; rows keep the worst
            self._local_errors(fp)

    def _user_run(self, which: str, step: int, fn) -> StepRecord:
        """``fn()`` running the user's model; its failure (or an attempt to end the process) is an
        InputError naming the run and the step."""
        try:
            return fn()
        except AdvisorError:
            raise
        except (Exception, SystemExit) as e:  # user model code failed (or tried to end the process)
            raise InputError(self.target, f"the model failed in the {which} run (step {step}): "
                                          f"{describe_user_error(e)}") from None

    def _plan(self, step: int, g, fp: StepRecord, trace: Any = None) -> tuple[list, list[bool], fusion.FusionResult]:
        """The planned dtypes of every op of the step (``Plan.exec_dtypes``: a precision, or an (input, output)
        pair where they differ), whether it runs on AI CPU, and the step's graph fusion: step 0's when the op
        sequence is the same, else fused and planned separately (with a note).  GE's graph fusion runs before its
        precision judge (advisor.fusion): the plan is the fused graph's, and every op executes the decision (its
        dtypes, its placement) of the (possibly fused) node it belongs to.  torch_npu (``trace`` given):
        ``semantics.torch_npu.plan`` of the step's trace, on the unfused graph (eager torch_npu has no graph
        fusion: ``_plan_eager``)."""
        sig = [r.func for r in fp.ops]
        if self.ref_sig is not None and sig == self.ref_sig:
            self.ref_tplan = self.plan0 if self.trace0 is not None else None
            return (*self.ref_plan, self.ref_fz)
        if trace is not None:
            return self._plan_eager(step, g, sig, trace)
        fz = fusion.fuse(g, self.lists.soc, self.lists)
        p = semantics.plan(fz.graph, self.lists, self.mode, self.overrides)
        check_uniform_ports(p, self.target)
        nodes = [fz.node_of(r.name) for r in fp.ops]
        pairs = [p.exec_dtypes(n) for n in nodes]
        precs = [a if a == b else (a, b) for a, b in pairs]
        cpu = [p.on_ai_cpu(n) for n in nodes]
        if step == 0:
            self.g0, self.plan0, self.fz0 = fz.graph, p, fz
            self.ref_sig, self.ref_plan, self.ref_fz = sig, (precs, cpu), fz
            self.notes.extend(fusion.cast_notes(fz.graph))
        else:
            self.notes.append(f"step {step} has a different op sequence than step 0: planned separately")
        return precs, cpu, fz

    def _plan_eager(self, step: int, g, sig: list, trace: Any) -> tuple[list, list[bool], fusion.FusionResult]:
        """torch_npu: ``semantics.torch_npu.plan`` of the step's trace; every op is its own kernel (no graph
        fusion in eager mode: an identity ``FusionResult``), none on AI CPU."""
        from ..semantics.torch_npu import plan as torch_npu_plan, policy_matches
        tp = torch_npu_plan(trace, self.eng.config, self.eng.policy)
        precs = [d.compute if d.compute == d.out else (d.compute, d.out) for d in tp.decisions]
        cpu = [False] * len(precs)
        fz = fusion.FusionResult(g)
        self.ref_tplan = tp
        if step == 0:
            self.g0, self.plan0, self.trace0 = g, tp, trace
            self.ref_sig, self.ref_plan, self.ref_fz = sig, (precs, cpu), fz
            self.notes.extend(tp.notes)
            if self.eng.policy is not None:
                self.notes.extend(policy_matches(trace, self.eng.policy))
        else:
            self.notes.append(f"step {step} has a different op sequence than step 0: planned separately")
        return precs, cpu, fz

    def _write_dumps(self, step: int, fp: StepRecord, mx: StepRecord, precs: list,
                     members: Mapping | None = None) -> None:
        """The FP32 (golden) and mixed (target) msprobe dumps of the step (one entry per executed op, fused or
        not; ``members``: the members of fused kernels, whose values between members are dumped as executed,
        unrounded)."""
        for which, rec, pr in (("fp32", fp, ["fp32" if r.is_float else "n/a" for r in fp.ops]),
                               ("mixed", mx, precs)):
            static = static_ptrs(self.params, self.round_cache)
            data, fl = DumpBuilder(rec, pr, fp.ops, self.files, stats_cache=self.stats_cache,
                                   static_ptrs=static, tensor_names=self.tensor_names,
                                   members=members if which == "mixed" else None).build()
            self.writer.write_dump(which, step, data, fl or None, task="tensor" if self.files else "statistics")

    def write_graph(self, notes: list[str]):
        """The GE-style graph dump of step 0's graph (GE: fused) annotated with its plan (torch_npu: with kernel
        names and modules too, ``emulator.torch_npu.annotate``); None: no graph."""
        if self.g0 is None:
            return None
        if self.trace0 is not None:
            from ..semantics.torch_npu_trace import write_trace
            from .torch_npu import annotate
            annotate(self.g0, self.plan0, self.trace0)
            write_trace(self.writer.out, self.trace0)     # what replay and the policy search re-plan
            return self.writer.write_graph(self.g0, None, notes)
        semantics.annotate(self.g0, self.plan0)
        return self.writer.write_graph(self.g0, self.plan0, notes)

    def local_error_rows(self):
        """local_error.csv rows: one per float kernel op, plus one per fused node named after none of its ops."""
        return (fusion.local_rows(self.fz0, self.local_rows) if self.fz0 else self.local_rows).values()

    def _local_errors(self, fp: StepRecord) -> None:
        """Every deterministic float kernel re-run alone in the low dtype; rows keep the worst step."""
        for r, inp in zip(fp.ops, fp.local_inputs):
            if not (r.kernel and r.is_float) or r.nondeterministic:
                continue
            try:
                row = local_error(r, inp, self.low_for_local, numerics=self.numerics)
            except Exception:  # an op that cannot be re-run in isolation: no row
                continue
            self.local_rows[row["name"]] = worst_local(self.local_rows.get(row["name"]), row)

    # ------------------------------------------------------------------ what the training loop drives
    # (emulator/train.py: the same steps with optimizer steps between them, two models, dumps every K steps)
    def run_model(self, which: str, model, step: int, batch: tuple, **kw) -> StepRecord:
        """``run_step`` of ``model`` on ``batch`` as run ``which`` ("FP32" / "mixed"); its failure an InputError."""
        return self._user_run(which, step, lambda: run_step(model, batch, self.wl.loss_fn, seed=self.seed,
                                                            step=step, **kw))

    def user_run(self, which: str, step: int, fn) -> StepRecord:
        return self._user_run(which, step, fn)

    def plan_step(self, step: int, g, fp: StepRecord) -> tuple[list, list[bool], fusion.FusionResult]:
        """``_plan`` (step 0 also checks the model traced something); ``g`` may be None when ``fp``'s op
        sequence is step 0's."""
        if step == 0:
            _check_traced(fp, self.target)
        return self._plan(step, g, fp)

    def record_step(self, step: int, fp: StepRecord, mx: StepRecord, precs: list, cpu: list[bool],
                    fz: fusion.FusionResult) -> None:
        """Kernel rows, both dumps and local errors (``fp`` kept its local inputs) of a dumped step."""
        for r in fp.ops:
            if not r.mapped:
                self.unmapped[f"aten.{r.packet}.{r.overload}"] = r.type
        self.kernels.extend(kernel_rows(step, fp, precs, cpu, fz))
        self._write_dumps(step, fp, mx, precs, fz.members)
        if self.local:
            self._local_errors(fp)

    @staticmethod
    def groups_of(fz: fusion.FusionResult) -> dict:
        """The mixed run's fused-kernel members and the Cast pairs GE removes (``EmuMode`` ``groups``)."""
        return KernelGroups(((m, (i.node, i.round_out)) for m, i in fz.members.items()), fusion.cast_through(fz.graph))

    @staticmethod
    def params_of(model) -> dict:
        return param_names(model)


def _delegate_onnx(model: Any, wl: Workload | None, out, target: str, batches: Any, **kw) -> Path:
    from ..onnx.capture import capture_workload   # advisor.onnx: its own extra, imported when needed
    return capture_workload(model, wl, out, target, batches, **kw)


def _delegate_tf(wl: Workload, out, train_reference: Any = None, **kw) -> Path:
    try:
        from ..tf.capture import capture_tf  # type: ignore[import-not-found]
        from ..tf.train import capture_training
    except ImportError:
        if is_tf_model(wl.model):
            raise InputError(kw.get("target"), tf_install_hint()) from None
        raise InputError(kw.get("target"), f"model must be a torch.nn.Module, not {type(wl.model).__name__}") from None
    if wl.trains:      # a Keras model's own optimizer over its steps (advisor.tf.train)
        return capture_training(wl, out, train_reference=train_reference, **kw)
    return capture_tf(wl, out, **kw)


__all__ = ["capture", "run_step", "trace_workload", "param_names"]
