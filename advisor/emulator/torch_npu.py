"""Emulating torch_npu eager on the CPU: what the dispatcher, the modules and Apex do to a PyTorch program, recorded
for ``advisor.semantics.torch_npu`` (the one place that decides), and torch_npu-looking kernel rows.

``Session`` wraps one capture (both runs of every step, so their aten sequences stay identical):

* the dispatcher's autocast key.  Each forward (with the loss) runs under ``torch.autocast("cpu")`` whose key
  carries advisor's kernels instead of PyTorch's CPU ones (those become fallthroughs): a *marker* for every op of
  torch_npu's autocast table (and every op a policy names) opens an ``autocast`` frame and runs the op with the key
  excluded -- as torch_npu's ``WrapFunction_`` does, so whatever Python spelling reached it (``h * h``,
  ``torch.mul``, ``Tensor.mul_``, ``F.linear``) is covered; ``binary_cross_entropy`` raises torch_npu's error.
  ``Tensor.to(dtype)`` / ``type_as`` become a ``_to_copy`` inside a ``cast`` frame even where the storage dtype
  already matches (a ``.float()`` of a tensor torch_npu would have in fp16 is a real Cast there).  Backward runs
  outside autocast, as training scripts run it.
* module hooks: every ``named_modules()`` entry opens a ``module`` frame (its tensor inputs) and, when it returns,
  an ``exit`` frame (its outputs); each op records the innermost module it ran in.
* Apex O1 (``--amp apex-o1``): the functions of Apex's lists (and a policy's ``register_float_function`` names) are
  patched like Apex patches them -- here to open an ``apex`` frame.
* backward ops are owned by the forward op whose autograd node runs them (``torch._C._current_autograd_node``).

Nothing here casts: storage stays in the original dtype and the mixed run rounds values by the plan (as for GE).
"""
from __future__ import annotations

import contextlib
import importlib
import warnings
from typing import Any, Callable, Iterable

import torch
from torch.utils._pytree import tree_flatten

from .. import costmodel
from ..oplists import AUX_FP32_OUTPUTS
from ..precision_policy import PrecisionPolicy
from ..semantics import torch_npu as S
from .engine import FLOAT_DTYPES, dtype_name

_AUTOCAST_KEY = "AutocastCPU"
# Tensor.to / type_as overloads that change a dtype: the forms a user's cast takes at the dispatcher
_CAST_OVERLOADS = (("to", "dtype"), ("to", "dtype_layout"), ("to", "other"), ("type_as", "default"))
_MODULES = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional}


def _exclude_autocast():
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU))


def _float_tensors(args: Any, kwargs: dict | None = None) -> list[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs or {}))
    return [x for x in flat if isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES]


class Tracker:
    """What one recording run saw beyond the aten ops: frames, the module stack, each op's module, frame, the frames
    its inputs passed and its owner.  ``mode`` (the recording ``EmuMode``) names tensor sources."""

    def __init__(self, model: Any):
        self.recording = False
        self.mode: Any = None
        self.frames: list[S.Frame] = []
        self.stack: list[int] = []
        self.inputs: dict[int, dict[int, torch.Tensor]] = {}   # active frame -> id -> tensor (kept alive)
        self.exited: dict[int, tuple[torch.Tensor, list[int]]] = {}
        self.modules: list[str] = []
        self.info: list[tuple] = []
        self.owner_of: dict[Any, int] = {}
        self.backward = False
        self.bn_modules = frozenset(n for n, m in model.named_modules()
                                    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.affine) \
            if isinstance(model, torch.nn.Module) else frozenset()

    def begin(self, mode: Any) -> None:
        """A recording run starts (the FP32 run of a step)."""
        self.recording, self.mode = True, mode
        self.frames, self.stack, self.inputs, self.exited, self.info = [], [], {}, {}, []
        self.modules, self.owner_of, self.backward = [], {}, False

    def end(self) -> None:
        self.recording, self.mode = False, None
        self.inputs, self.exited, self.owner_of = {}, {}, {}

    # ------------------------------------------------------------------ frames
    def _passed(self, t: torch.Tensor) -> tuple[int, ...]:
        """The frames tensor ``t`` passed so far: active frames it is an input of, and exits it left through."""
        tid = id(t)
        fr = [f for f in self.stack if self.inputs.get(f, {}).get(tid) is t]
        e = self.exited.get(tid)
        if e is not None and e[0] is t:
            fr += e[1]
        return tuple(sorted(fr))

    def open(self, kind: str, op: str, args: Any = (), kwargs: dict | None = None, *, target: str | None = None,
             dtype_arg: str | None = None) -> int:
        if not self.recording:
            return -1
        ts = _float_tensors(args, kwargs)
        first = args[0] if isinstance(args, (tuple, list)) and args else None
        f = S.Frame(kind, op, self.modules[-1] if self.modules else "",
                    tuple(self.mode.source_of(t) for t in ts), tuple(self._passed(t) for t in ts),
                    first_float=isinstance(first, torch.Tensor) and first.dtype in FLOAT_DTYPES,
                    dtype_arg=dtype_arg, target=target, parent=self.stack[-1] if self.stack else -1)
        fid = len(self.frames)
        self.frames.append(f)
        self.inputs[fid] = {id(t): t for t in ts}
        self.stack.append(fid)
        return fid

    def close(self, fid: int) -> None:
        if fid >= 0 and self.stack and self.stack[-1] == fid:
            self.stack.pop()
            self.inputs.pop(fid, None)

    def enter_module(self, name: str, args: Any, kwargs: dict) -> None:
        if self.recording:
            self.open("module", name, args, kwargs)
            self.modules.append(name)

    def exit_module(self, name: str, output: Any) -> None:
        if not self.recording:
            return
        if self.modules and self.modules[-1] == name:
            self.modules.pop()
        if self.stack and self.frames[self.stack[-1]].kind == "module":
            self.close(self.stack[-1])
        ts = _float_tensors(output)
        if not ts:
            return
        fid = self.open("exit", name, output)
        self.close(fid)
        for t in ts:
            prev = self.exited.get(id(t))
            self.exited[id(t)] = (t, (prev[1] if prev is not None and prev[0] is t else []) + [fid])

    # ------------------------------------------------------------------ ops
    def start_backward(self) -> None:
        """Map each forward output's autograd node to the op that produced it (backward ops are owned by it)."""
        if not self.recording:
            return
        self.backward = True
        idx = {r.name: i for i, r in enumerate(self.mode.rec.ops)}
        for t, node, _ in self.mode.producer.values():
            fn = getattr(t, "grad_fn", None)
            if fn is not None and node in idx:
                self.owner_of[fn] = idx[node]

    def on_op(self, rec: Any, tin: list, srcs: list, kwargs: dict) -> None:
        if not self.recording:
            return
        owner = -1
        if self.backward:
            node = torch._C._current_autograd_node()
            owner = self.owner_of.get(node, -1) if node is not None else -1
        dt = kwargs.get("dtype")
        self.info.append((self.modules[-1] if self.modules else "", self.stack[-1] if self.stack else -1,
                          tuple(self._passed(t) for t in tin), owner, self.backward,
                          dtype_name(dt) if isinstance(dt, torch.dtype) else None, tuple(srcs)))

    def trace(self, ops: list, leaves: dict[str, S.Leaf]) -> S.Trace:
        """The recorded step as semantics' ``Trace``."""
        calls = []
        for r, (mod, frame, pf, owner, bwd, dt, srcs) in zip(ops, self.info):
            calls.append(S.Call(r.name, r.packet, r.overload, srcs, tuple(r.in_dtypes),
                                tuple(len(s) for s in r.in_shapes), tuple(r.out_dtypes), pf, mod, r.kernel, bwd,
                                owner, frame, dt))
        return S.Trace(calls, list(self.frames), leaves, self.bn_modules)


def leaves_of(graph: Any, model: Any) -> dict[str, S.Leaf]:
    """The graph's Data/Const nodes as semantics' leaves (parameters and buffers with the module owning them)."""
    params = {n for n, _ in model.named_parameters()} if isinstance(model, torch.nn.Module) else set()
    buffers = {n for n, _ in model.named_buffers()} if isinstance(model, torch.nn.Module) else set()
    out = {}
    for n, a in graph.nodes(data=True):
        if a.get("role") not in ("data", "const"):
            continue
        kind = "param" if n in params else "buffer" if n in buffers else "input" if str(n).startswith("Model.input.") \
            else "const"
        mod = n.rsplit(".", 1)[0] if kind in ("param", "buffer") and "." in n else ("" if kind in ("param", "buffer")
                                                                                   else None)
        out[n] = S.Leaf(n, str(a.get("dtype", "fp32")), kind, mod)
    return out


# ---------------------------------------------------------------------- the session
class Session:
    """The hooks of one torch_npu capture (``with Session(model, cfg, policy) as s``; ``s.forward()`` around each
    forward).  ``extra_ops``: aten ops (``op`` / ``op.overload``) to give autocast frames besides the table's."""

    def __init__(self, model: Any, config: S.AmpConfig, policy: PrecisionPolicy | None = None,
                 extra_ops: Iterable[str] = (), extra_functions: Iterable[str] = ()):
        self.model, self.config, self.policy = model, config, policy
        self.tracker = Tracker(model)
        self.extra_ops = tuple(extra_ops) + (policy.op_names() if policy is not None else ())
        self.extra_functions = tuple(extra_functions) + (policy.rules.register_float_function if policy else ())
        self._stack = contextlib.ExitStack()
        self.notes: list[str] = []

    def __enter__(self) -> "Session":
        try:
            self._stack.enter_context(self._dispatcher())
            self._stack.enter_context(self._module_hooks())
            if self.config.amp == "apex-o1":
                self._stack.enter_context(self._apex_patches())
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def forward(self):
        """The context of one forward (with its loss): the autocast key, carrying advisor's kernels."""
        low = torch.bfloat16 if self.config.dtype == "bf16" else torch.float16
        return torch.autocast("cpu", dtype=low)

    # ------------------------------------------------------------------ dispatcher
    @contextlib.contextmanager
    def _dispatcher(self):
        lib = torch.library.Library("aten", "IMPL")
        covered: set[str] = set()
        tr = self.tracker
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if self.config.amp == "autocast":
                    ops = [(o, ov, c) for o, ov, c in S.autocast_ops()]
                    ops += [(e.partition(".")[0], e.partition(".")[2], None) for e in self.extra_ops]  # "": every
                    for op, ov, cat in ops:
                        for handle in _overloads(op, ov):
                            qual = _qualname(handle)
                            if qual in covered:
                                continue
                            key = S.table_key(op, handle._overloadname or "default")
                            kernel = _banned(op) if cat == "banned" else _marker(tr, key, handle)
                            lib.impl(qual, kernel, _AUTOCAST_KEY)
                            covered.add(qual)
                for op, ov in _CAST_OVERLOADS:
                    for handle in _overloads(op, ov):
                        lib.impl(_qualname(handle), _cast_marker(tr, f"{op}.{ov}", handle), _AUTOCAST_KEY)
                        covered.add(_qualname(handle))
                for full in torch._C._dispatch_get_all_op_names():
                    if full.startswith("aten::") and full[6:] not in covered and \
                            torch._C._dispatch_has_kernel_for_dispatch_key(full, _AUTOCAST_KEY):
                        lib.impl(full[6:], torch.library.fallthrough_kernel, _AUTOCAST_KEY)
            yield
        finally:
            lib._destroy()

    # ------------------------------------------------------------------ modules
    @contextlib.contextmanager
    def _module_hooks(self):
        handles = []
        tr = self.tracker
        if isinstance(self.model, torch.nn.Module):
            for name, m in self.model.named_modules():
                def pre(_m, args, kwargs, _name=name):
                    tr.enter_module(_name, args, kwargs)

                def post(_m, args, kwargs, output, _name=name):
                    tr.exit_module(_name, output)
                handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
                handles.append(m.register_forward_hook(post, with_kwargs=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    # ------------------------------------------------------------------ Apex O1
    @contextlib.contextmanager
    def _apex_patches(self):
        saved = []
        tr = self.tracker
        funcs = [(m, n) for m, n, _ in S.apex_functions()]
        for f in self.extra_functions:
            mod, _, name = f.rpartition(".")
            funcs.append((mod, name))
        try:
            for mod_name, name in dict.fromkeys(funcs):
                mod = _MODULES.get(mod_name)
                if mod is None:
                    try:
                        mod = importlib.import_module(mod_name)
                    except ImportError:
                        self.notes.append(f"register_float_function {mod_name}.{name}: no module {mod_name}")
                        continue
                orig = getattr(mod, name, None)
                if orig is None:
                    continue
                saved.append((mod, name, mod.__dict__.get(name, _MISSING) if isinstance(mod, type) else orig))
                setattr(mod, name, _apex_wrapper(tr, f"{mod_name}.{name}", orig))
            yield
        finally:
            for mod, name, orig in reversed(saved):
                if orig is _MISSING:
                    delattr(mod, name)
                else:
                    setattr(mod, name, orig)


_MISSING = object()


def _overloads(op: str, overload: str) -> list:
    packet = getattr(torch.ops.aten, op, None)
    if packet is None:
        return []
    try:
        names = packet.overloads()
    except (AttributeError, RuntimeError):
        return []
    if not overload:                       # every overload of the op
        return [getattr(packet, n) for n in names]
    return [getattr(packet, overload)] if overload in names else []


def _qualname(handle) -> str:
    name = handle._schema.name.split("::", 1)[1]
    ov = handle._schema.overload_name
    return f"{name}.{ov}" if ov else name


def _marker(tr: Tracker, key: str, handle) -> Callable:
    def kernel(*args, **kwargs):
        dt = kwargs.get("dtype")
        if dt is None:
            dt = next((a for a in args if isinstance(a, torch.dtype)), None)
        fid = tr.open("autocast", key, args, kwargs, dtype_arg=dtype_name(dt) if isinstance(dt, torch.dtype)
                      else None)
        try:
            with _exclude_autocast():
                return handle(*args, **kwargs)
        finally:
            tr.close(fid)
    return kernel


def _banned(op: str) -> Callable:
    msg = S.autocast_table()["ops"].get(op, {}).get("message", f"{op} is unsafe to autocast")

    def kernel(*args, **kwargs):
        raise RuntimeError(msg)
    return kernel


def _cast_marker(tr: Tracker, what: str, handle) -> Callable:
    """``x.to(dtype)`` / ``x.to(other)`` / ``x.type_as(other)`` of a float tensor to a float dtype: always a
    ``_to_copy`` (even where the storage dtype already matches), inside a ``cast`` frame."""
    def kernel(*args, **kwargs):
        x = args[0] if args else kwargs.get("self")
        other = None
        if what in ("to.other", "type_as.default"):
            other = args[1] if len(args) > 1 else kwargs.get("other")
            dt = other.dtype if isinstance(other, torch.Tensor) else None
        else:
            dt = args[1] if what == "to.dtype" and len(args) > 1 else kwargs.get("dtype")
        if isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES and dt in FLOAT_DTYPES:
            fid = tr.open("cast", what, (x,) if other is None else (x, other),
                          target="like" if other is not None else dtype_name(dt))
            try:
                with _exclude_autocast():
                    mf = kwargs.get("memory_format")
                    return torch.ops.aten._to_copy.default(x, dtype=dt, **({"memory_format": mf} if mf else {}))
            finally:
                tr.close(fid)
        with _exclude_autocast():
            return handle(*args, **kwargs)
    return kernel


def _apex_wrapper(tr: Tracker, function: str, orig: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        fid = tr.open("apex", function, args, kwargs)
        try:
            return orig(*args, **kwargs)
        finally:
            tr.close(fid)
    wrapper.__name__ = getattr(orig, "__name__", function.rsplit(".", 1)[-1])
    wrapper.__wrapped__ = orig
    return wrapper


# ---------------------------------------------------------------------- kernel rows
def kernel_name(packet: str, overload: str, ge_type: str) -> str:
    """``aclnn<Api>_<Type><AiCore|Common>_<Type>``: the shape of an eager torch_npu kernel name (``aclnnAdd_AddAiCore_Add``,
    ``aclnnMatmul_MatMulCommon_MatMulV2`` in real profiles); the API is op-plugin's (``semantics.torch_npu.aclnn_api``)."""
    impl = "Common" if S.cube_family(packet, overload) else "AiCore"
    return f"{S.aclnn_api(packet, overload)}_{ge_type}{impl}_{ge_type}"


def kernel_rows(step: int, fp: Any, plan: S.TorchPlan) -> list[dict]:
    """kernel_details rows of the mixed run as torch_npu writes them: one per launched kernel, its dtypes as the
    kernel read and wrote them, an aclnn name (``kernel_name``; ``node`` names the op it is)."""
    rows = []
    for r, d in zip(fp.ops, plan.decisions):
        if not (r.kernel and d.kernel):
            continue
        aux = AUX_FP32_OUTPUTS.get(r.packet, ())
        ind = [x if x in S.FLOATS else x for x in d.reads] or list(r.in_dtypes)
        outd = [("fp32" if j in aux and d.out in S.LOW else d.out) if od in S.FLOATS else od
                for j, od in enumerate(r.out_dtypes)]
        flops = costmodel.estimate_flops(r.type, r.in_shapes, r.out_shapes)
        nbytes = costmodel.estimate_bytes(r.in_shapes, r.out_shapes, ind, outd)
        rows.append({"step": step, "name": kernel_name(r.packet, r.overload, r.type), "node": r.name, "type": r.type,
                     "core": costmodel.core_type(r.type, False),
                     "duration_us": costmodel.op_time_us(r.type, flops, nbytes, d.compute if d.compute in S.FLOATS
                                                         else "fp32"),
                     "in_shapes": r.in_shapes, "in_dtypes": ind, "out_shapes": r.out_shapes, "out_dtypes": outd,
                     "framework_op": f"aten::{r.packet}", "phase": "bwd" if 0 <= fp.bwd_start <= r.index else "fwd"})
    return rows


def annotate(graph: Any, plan: S.TorchPlan, trace: S.Trace) -> None:
    """Node attributes for the run's graph dump: ``precision`` / ``why`` (the decision), ``kernel_name`` (the
    kernel row it is), ``module`` (the named module it ran in) and ``kernel`` false for a cast that changes nothing."""
    nodes = graph._node
    for c, d in zip(trace.calls, plan.decisions):
        a = nodes.get(c.name)
        if a is None:
            continue
        a["precision"] = d.compute
        a["why"] = S.describe(d)
        a["module"] = c.module
        if a.get("kernel", True) and not d.kernel:
            a["kernel"] = False
        if a.get("kernel", True):
            a["kernel_name"] = kernel_name(c.op, c.overload, a.get("type", ""))


__all__ = ["Tracker", "Session", "leaves_of", "kernel_rows", "kernel_name", "annotate"]
