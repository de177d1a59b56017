"""Trace -> plan -> execute, at the aten level (``TorchDispatchMode``).

One step = one batch: ``model(*batch)`` (+ ``loss_fn(output, batch)`` and ``loss.backward()`` for a
training capture).  Every aten call with a tensor output becomes one op record / graph node, named
``Aten.<op>.<overload>.<k>`` (k counts calls of that overload, restarting every step).

* **FP32 run** (``EmuMode(plan=None)``): executes unchanged and records the op graph with true
  dataflow (producer tensor -> consumer input index; parameters and batch tensors -> ``Data`` nodes (role
  ``data``: torchair makes every graph input, parameters included, a ``ge.Data``,
  ``fx2ge_converter.py:1309-1345``), other leaf tensors -> ``Const``; int/bool tensors -> ``float=False`` edges).
* **Mixed run** (``EmuMode(plan=...)``): replays the same op sequence; op k gets exactly the
  dtypes ``semantics.plan`` gave node k (``Plan.exec_dtypes``: its float inputs' dtype, its float outputs'
  dtype).  Float inputs in fp16/bf16 are rounded to it, the op computes in fp32 (= fp32 accumulation of the
  cube unit), float outputs in fp16/bf16 are rounded to it (an fp16-in / fp32-out cube op: inputs rounded,
  output not).  FP32 ports: values used as they are (already exact in fp32).  int/bool tensors are never touched.  Storage stays
  in the original dtype, so the model's Python code sees the same dtypes and the aten sequence is
  identical to the FP32 run (rounding is value emulation); dumps and kernel_details report the
  executed dtype.  Every rounding goes through ``advisor.numerics`` under the run's ``Numerics``: an fp16
  overflow gives inf in INF_NAN mode (the 910B default) and ±65504 in saturation mode (ascend910/310P), where
  fp32 kernels also saturate their inputs and outputs (±fp32 max, NaN -> 0); fp32 Conv (and MatMul when
  allowed) reads its operands as HF32 on A2/A3.  The FP32 run is the IEEE fp32 reference (``numerics.IEEE``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Collection

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .. import graph as G
from ..errors import AdvisorError
from ..numerics import IEEE, Numerics, hf32_tensor, round_tensor, round_tensor_
from ..oplists import AUX_FP32_OUTPUTS
from . import opmap

LOW_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_DT_NAME = {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}
_ALLOC = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided"})
# ops without tensor data semantics: not graph nodes
_SKIP = {"_local_scalar_dense", "sym_size", "sym_numel", "sym_stride", "sym_storage_offset", "is_same_size",
         "_has_compatible_shallow_copy_type", "is_nonzero", "equal", "set_", "record_stream", "_version"}




def mutated_positions(func) -> tuple:
    """Positional argument indices an aten overload writes in place (its schema's alias info)."""
    return _mutated_arg_positions(func) if func._schema.is_mutable else ()


def exec_pair(prec) -> tuple[str, str]:
    """(input dtype, output dtype) of a plan entry: a precision name (both ports) or such a pair."""
    return (prec, prec) if isinstance(prec, str) else (prec[0], prec[1])


def execute_op(func, args: tuple, kwargs: dict, prec: str, *, kernel: bool = True, aux: tuple = (),
               mutated: tuple = (), exact: Collection[int] = (), round_outputs: bool = True,
               out_prec: str | None = None, numerics: Numerics = IEEE, hf32: bool = False) -> list:
    """Run one op the way the engine runs it with float inputs in ``prec`` and float outputs in ``out_prec``
    (default ``prec``) and return its output tensors (flattened).  A kernel takes its float inputs rounded to
    an fp16/bf16 ``prec``, computes in fp32 (= the cube unit's fp32 accumulation) and rounds its float outputs
    to an fp16/bf16 ``out_prec``, except the statistics outputs ``aux`` (e.g. LayerNorm's mean/rstd), which
    stay fp32.  fp32 ports and ops without a kernel (views) use the values unchanged.  Inputs are never
    modified: arguments the op writes in place (``mutated`` positions) are cloned first.  ``exact``: ids of
    input tensors already exactly representable in the low dtype (rounding them again would change nothing).
    ``round_outputs=False``: the op in fp32 on inputs rounded to low (local error's ``inrnd``).
    ``numerics``: the chip's overflow mode (``numerics.round_tensor``: in saturation mode an fp32 kernel
    also saturates what it reads and writes); ``hf32``: an fp32 kernel reading its operands as HF32."""
    low_t = LOW_TORCH.get(prec) if kernel else None
    out_t = LOW_TORCH.get(prec if out_prec is None else out_prec) if kernel else None
    sat = kernel and numerics.saturating and prec in ("fp16", "bf16", "fp32")
    hf32 = hf32 and kernel and prec == "fp32"
    ov = numerics.overflow
    if mutated:
        args = tuple(a.detach().clone() if i in mutated and isinstance(a, torch.Tensor) else a
                     for i, a in enumerate(args))

    def rnd(x):
        if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_DTYPES or id(x) in exact:
            return x
        if low_t is not None:
            return round_tensor(x, low_t, ov) if (x.dtype != low_t or sat) else x
        y = round_tensor(x, None, ov) if sat else x
        return hf32_tensor(y) if hf32 else y
    if low_t is not None or sat or hf32:
        args = tuple(a if i in mutated else map_tree(rnd, a) for i, a in enumerate(args))
        kwargs = {k: map_tree(rnd, v) for k, v in kwargs.items()}
    with torch.no_grad():
        out = func(*args, **kwargs)
    tout = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
    if round_outputs and (out_t is not None or sat):
        tout = [round_tensor(t, out_t if j not in aux else None, ov) if t.dtype in FLOAT_DTYPES else t
                for j, t in enumerate(tout)]
    return tout


class KernelGroups(dict):
    """The mixed run's view of the fused graph (``EmuMode`` ``groups``): op name -> (fused node, its outputs leave
    the kernel) for the members of fused kernels, and ``through``: each Cast GE's TransNodeMerging removes after
    its judge (advisor.fusion.transnodes) -> the Cast whose input it passes on unrounded."""

    def __init__(self, members=(), through: dict | None = None):
        super().__init__(members)
        self.through = dict(through or {})


class ReplayMismatch(AdvisorError):
    exit_code = 1


def dtype_name(dt: torch.dtype) -> str:
    return _DT_NAME.get(dt, str(dt).replace("torch.", ""))


@dataclass
class OpRecord:
    index: int
    name: str
    func: Any
    packet: str
    overload: str
    type: str
    kernel: bool
    mapped: bool
    is_float: bool
    in_shapes: list = field(default_factory=list)      # per tensor leaf
    in_dtypes: list = field(default_factory=list)      # origin dtype names per tensor leaf
    out_shapes: list = field(default_factory=list)
    out_dtypes: list = field(default_factory=list)
    nondeterministic: bool = False
    mutates: tuple = ()


@dataclass
class StepRecord:
    """What one run of one step produced (tensors are kept for batched statistics and dumps)."""

    ops: list[OpRecord] = field(default_factory=list)
    # per op: (arg structure with tensor placeholders, list of input tensors, list of output tensors)
    entries: list[tuple] = field(default_factory=list)
    exec_prec: list[str] = field(default_factory=list)
    outputs: list = field(default_factory=list)
    loss: Any = None
    grads: dict = field(default_factory=dict)
    local_inputs: list = field(default_factory=list)   # fp32 run: (args, kwargs) per op, for local error
    bwd_start: int = -1                                 # index of the first op of loss.backward() (-1: none)


class ArgRef:
    """Placeholder for the i-th tensor of an entry in the stored argument structure."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _mutated_arg_positions(func) -> tuple:
    out = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            out.append(i)
    return tuple(out)


class EmuMode(TorchDispatchMode):
    """Records (plan=None) or replays with a precision plan (by op index: a precision, or its (input dtype,
    output dtype) pair, ``exec_pair``)."""

    def __init__(self, graph=None, params: dict | None = None, inputs: dict | None = None,
                 plan: list[str] | None = None, reference: list[OpRecord] | None = None,
                 keep_entries: bool = True, keep_local_inputs: bool = False, low: str | None = None,
                 cache: dict | None = None, numerics: Numerics = IEEE, groups: dict | None = None,
                 overflow: list | None = None, tracker: Any = None):
        super().__init__()
        # training steps (emulator/train.py): indices of the mixed run's ops that overflowed (``_note_overflow``)
        self.overflow = overflow
        # torch_npu: what the recording run sees beyond the ops (emulator.torch_npu.Tracker)
        self.tracker = tracker
        if tracker is not None and plan is None:
            tracker.begin(self)
        self.numerics = numerics          # the chip's overflow mode and HF32 (mixed run; the FP32 run is IEEE)
        # members of fused kernels (mixed run): op name -> (fused node, its outputs leave the kernel); a value one
        # member hands another inside the kernel is neither rounded nor saturated (advisor.fusion)
        self.groups = groups or {}
        # inverse Cast pairs GE removes: Cast -> the Cast whose input it passes on; that Cast's input (mixed run)
        self.through: dict[str, str] = getattr(groups, "through", None) or {}
        self.pair_heads = frozenset(self.through.values())
        self.pair_in: dict[str, Any] = {}
        # rounded copies of parameters (and their views), reused across ops and steps: keyed by
        # storage, geometry and version counter, so an updated parameter is rounded again
        self.cache = cache if cache is not None else {}
        self.param_ptrs = {t.untyped_storage().data_ptr() for t in (params or {}).get("__tensors__", ())}
        self.g = graph
        self.params = {k: v for k, v in (params or {}).items() if k != "__tensors__"}  # id -> name
        self.inputs = inputs or {}          # id(tensor) -> model input index
        self.plan = plan
        self.reference = reference
        self.keep_entries = keep_entries
        self.keep_local_inputs = keep_local_inputs
        self.low = low
        self.rec = StepRecord()
        self.producer: dict[int, tuple[Any, str, int]] = {}   # id -> (tensor, node, out index)
        self.rounded: dict[int, tuple[Any, str]] = {}         # id -> (tensor, low dtype name) exact in low
        self.counters: dict[str, int] = {}
        self.n_const = 0

    # ------------------------------------------------------------------ graph helpers
    def source_of(self, t: torch.Tensor) -> tuple[str, int]:
        """(node, output index) a tensor comes from: the op that produced it, else its Data/Const leaf."""
        p = self.producer.get(id(t))
        if p is None or p[0] is not t:
            return self._leaf_node(t), 0
        return p[1], p[2]

    def _leaf_node(self, t: torch.Tensor) -> str:
        tid = id(t)
        if tid in self.params:  # torchair: parameters are graph inputs (ge.Data), fx2ge_converter.py:1309-1345
            name, role, typ = self.params[tid], "data", "Data"
        elif tid in self.inputs:
            name, role, typ = f"Model.input.{self.inputs[tid]}", "data", "Data"
        else:
            name, role, typ = f"Const.{self.n_const}", "const", "Const"
            self.n_const += 1
        if self.g is not None and name not in self.g:
            G.add_op(self.g, name, typ, role=role, dtype=dtype_name(t.dtype), kernel=False,
                     out_shapes=[list(t.shape)], out_dtypes=[dtype_name(t.dtype)])
        self.producer[tid] = (t, name, 0)
        return name

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        """Every aten call of the step: check it against the FP32 reference (mixed run), round its float
        inputs and outputs to the planned low dtype, keep local-error inputs, and record the op (graph node,
        edges, dump entry).  Long because: it runs once per aten call on the capture's hot path; split into
        helpers it pays their call and argument overhead on every op of every step."""
        kwargs = kwargs or {}
        packet = func._schema.name.split("::")[-1]
        if packet in _SKIP:
            return func(*args, **kwargs)
        overload = func._overloadname or "default"
        flat_in, _ = tree_flatten((args, kwargs))
        tin = [x for x in flat_in if isinstance(x, torch.Tensor)]
        idx = len(self.rec.ops)
        replay = self.plan is not None
        if replay:
            if self.reference is None or idx >= len(self.reference) or self.reference[idx].func is not func:
                want = self.reference[idx].name if self.reference is not None and idx < len(self.reference) else "end of step"
                raise ReplayMismatch(f"the mixed run diverged from the FP32 run at op {idx} "
                                     f"({packet}.{overload}, expected {want}); data-dependent control flow "
                                     "cannot be emulated")
            rec = self.reference[idx]
            prec, out_prec = exec_pair(self.plan[idx])
            grp = self.groups.get(rec.name) if self.groups else None
        else:
            rec = grp = None
            prec = out_prec = "fp32"
        mutates = _mutated_arg_positions(func) if func._schema.is_mutable else ()
        # ---- execute
        low_t = LOW_TORCH.get(prec)
        run_args, run_kwargs = args, kwargs
        rounded_inputs: dict[int, torch.Tensor] = {}
        kernel = rec.kernel if rec is not None else (opmap.lookup(packet, overload)[1] and packet not in _ALLOC)
        if replay and self.through and tin:
            if rec.name in self.pair_heads:
                self.pair_in[rec.name] = tin[0]
            src = self.pair_in.get(self.through.get(rec.name, ""))
            if src is not None:          # GE removed this Cast and the one it undoes: the value passes unrounded
                run_args = args = (src,) + tuple(args[1:])
                tin, kernel = [src], False
        nm = self.numerics
        sat = replay and kernel and nm.saturating and prec in ("fp16", "bf16", "fp32")
        hf32 = replay and kernel and prec == "fp32" and nm.hf32_on(rec.type)
        if replay and kernel and (low_t is not None or sat or hf32):
            mut_ids = {id(args[i]) for i in mutates if i < len(args) and isinstance(args[i], torch.Tensor)}
            ov = nm.overflow
            how = prec if low_t is not None else ("hf32" if hf32 else "sat")

            def rnd(x):
                if isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES and (x.dtype != low_t or sat) \
                        and id(x) not in mut_ids:
                    if grp is not None:
                        src = self.producer.get(id(x))
                        if src is not None and src[0] is x and self.groups.get(src[1], _NO_GROUP)[0] == grp[0]:
                            return x       # inside one fused kernel: neither rounded nor saturated between members
                    r = self.rounded.get(id(x))
                    if r is not None and r[0] is x and ((low_t is not None and r[1] == prec)
                                                        or (low_t is None and not hf32)):
                        return x          # already exact in this dtype (and saturated in saturation mode)
                    key = None
                    if self.param_ptrs:
                        ptr = x.untyped_storage().data_ptr()
                        if ptr in self.param_ptrs:
                            key = (ptr, tuple(x.shape), x.stride(), x.storage_offset(), x._version, how)
                    y = self.cache.get(key) if key is not None else None
                    if y is None:
                        y = round_tensor(x, low_t, ov) if (low_t is not None or sat) else x
                        if hf32:
                            y = hf32_tensor(y)
                        if key is not None:
                            self.cache[key] = y
                    if low_t is not None:   # a Cast GE inserts: the op's dumped input is the rounded value
                        rounded_inputs[id(x)] = y
                    return y
                return x
            run_args = tuple(map_tree(rnd, a) for a in args)
            run_kwargs = {k: map_tree(rnd, v) for k, v in kwargs.items()}
        if self.keep_local_inputs and not replay:
            # keep the exact inputs (clone what the op overwrites) for local error
            def snap(x):
                return x.detach().clone() if isinstance(x, torch.Tensor) else x
            self.rec.local_inputs.append((tuple(map_tree(snap, a) for a in args),
                                          {k: map_tree(snap, v) for k, v in kwargs.items()}))
        if self.keep_entries and mutates:
            self._snapshot_mutated(args, mutates)
            # this op's own record of what it overwrites: the value before the op
            for i in mutates:
                if i < len(args) and isinstance(args[i], torch.Tensor) and id(args[i]) not in rounded_inputs:
                    rounded_inputs[id(args[i])] = args[i].detach().clone()
        out = func(*run_args, **run_kwargs)
        flat_out, _ = tree_flatten(out)
        tout = [x for x in flat_out if isinstance(x, torch.Tensor)]
        out_t = LOW_TORCH.get(out_prec)
        if self.overflow is not None and replay and kernel:
            self._note_overflow(idx, tin if low_t is not None else (), low_t, tout, out_t, packet)
        if replay and kernel and (out_t is not None or sat) and (grp is None or grp[1]):
            aux = AUX_FP32_OUTPUTS.get(packet, ())
            for j, t in enumerate(tout):
                if t.dtype in FLOAT_DTYPES and (t.dtype != out_t or sat):
                    to = out_t if j not in aux else None
                    if to is not None or sat:
                        round_tensor_(t, to, nm.overflow)
                        self.rounded[id(t)] = (t, out_prec if to is not None else dtype_name(t.dtype))
        elif replay and not kernel:
            # views follow their input: exact in low if the input was
            src = tin[0] if tin else None
            r = self.rounded.get(id(src)) if src is not None else None
            for t in tout:
                if r is not None and r[0] is src:
                    self.rounded[id(t)] = (t, r[1])
        if not tout:
            return out
        # ---- record
        if rec is None:
            typ, kernel, mapped = opmap.resolve(packet, overload, args, kwargs)   # the call's GE type
            if packet in _ALLOC:
                kernel = False  # memory allocation: no kernel in GE
            k = self.counters.get(f"{packet}.{overload}", 0)
            self.counters[f"{packet}.{overload}"] = k + 1
            name = f"Aten.{packet}.{overload}.{k}"
            is_float = any(t.dtype in FLOAT_DTYPES for t in tin + tout)
            rec = OpRecord(idx, name, func, packet, overload, typ, kernel, mapped, is_float,
                           in_shapes=[list(t.shape) for t in tin], in_dtypes=[dtype_name(t.dtype) for t in tin],
                           out_shapes=[list(t.shape) for t in tout], out_dtypes=[dtype_name(t.dtype) for t in tout],
                           nondeterministic=torch.Tag.nondeterministic_seeded in func.tags, mutates=mutates)
            srcs = [self.source_of(t) for t in tin] if self.g is not None or self.tracker is not None else []
            if self.tracker is not None:
                self.tracker.on_op(rec, tin, srcs, kwargs)
            if self.g is not None:
                origin = next((dtype_name(t.dtype) for t in tout if t.dtype in FLOAT_DTYPES), "fp32")
                attrs = dict(kernel=kernel, float=is_float, origin_dtype=origin, aten=f"aten.{packet}.{overload}",
                             order=idx, dump=name, in_shapes=rec.in_shapes, out_shapes=rec.out_shapes,
                             in_dtypes=rec.in_dtypes, out_dtypes=rec.out_dtypes, mapped=mapped)
                if typ == "Cast":
                    dst = next((dtype_name(t.dtype) for t in tout), None)
                    if dst:
                        attrs["cast_to"] = dst
                G.add_op(self.g, name, typ, role="op", **attrs)
                for pos, (t, (src, src_out)) in enumerate(zip(tin, srcs)):
                    G.connect(self.g, src, name, src_out, pos, float=t.dtype in FLOAT_DTYPES)
        self.rec.ops.append(rec)
        self.rec.exec_prec.append(prec if prec == out_prec else (prec, out_prec))
        for j, t in enumerate(tout):
            self.producer[id(t)] = (t, rec.name, j)
        if self.keep_entries:
            self.rec.entries.append(_entry(args, kwargs, rounded_inputs, tout))
        return out

    def _note_overflow(self, idx: int, tin: Any, low_t: Any, tout: list, out_t: Any, packet: str) -> None:
        """Op ``idx`` overflowed when a float input rounded to its low dtype (the Cast GE inserts) or a float output
        before it is rounded is non-finite or beyond the range of that dtype: what sets the chip's float-status
        flag (docs/semantics.md "Loss scalers")."""
        aux = AUX_FP32_OUTPUTS.get(packet, ())
        checks = [(t, low_t) for t in tin] + [(t, out_t if out_t is not None and j not in aux else t.dtype)
                                              for j, t in enumerate(tout)]
        for t, dt in checks:
            if t.dtype in FLOAT_DTYPES and t.numel() and not bool(t.detach().abs().amax() <= torch.finfo(dt).max):
                self.overflow.append(idx)
                return

    def _snapshot_mutated(self, args, mutates) -> None:
        """An op about to overwrite a tensor recorded earlier: freeze the earlier record's value."""
        ids = {id(args[i]) for i in mutates if i < len(args) and isinstance(args[i], torch.Tensor)}
        if not ids:
            return
        for e in self.rec.entries[-64:]:  # recent producers/consumers are the ones that matter
            tensors = e[1]
            for k, t in enumerate(tensors):
                if id(t) in ids:
                    tensors[k] = t.detach().clone()
            outs = e[2]
            for k, t in enumerate(outs):
                if id(t) in ids:
                    outs[k] = t.detach().clone()


_NO_GROUP = (None, True)


def map_tree(fn, x):
    if isinstance(x, (list, tuple)):
        return type(x)(map_tree(fn, y) for y in x)
    return fn(x)


def _entry(args, kwargs, rounded: dict, tout: list) -> tuple:
    """(structure of input_args/input_kwargs with ArgRef placeholders, input tensors as executed, outputs)."""
    tensors: list = []

    def conv(x):
        if isinstance(x, torch.Tensor):
            tensors.append(rounded.get(id(x), x))
            return ArgRef(len(tensors) - 1)
        if isinstance(x, (list, tuple)):
            return [conv(y) for y in x]
        return x
    a = [conv(x) for x in args]
    kw = {k: conv(v) for k, v in kwargs.items()}
    # requires_grad as the framework saw the inputs (rounded copies are detached values)
    rg = [x.requires_grad for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
    return ((a, kw), tensors, list(tout), rg)


@contextlib.contextmanager
def eager_math_attention():
    """Disable fused fast paths so attention decomposes into aten ops GE types map to: the
    nn.MultiheadAttention / TransformerEncoderLayer fastpath and fused SDPA kernels (math backend)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(prev)
