"""A real PyTorch msprobe dump as semantics' torch_npu ``Trace``: what a real torch_npu run's policy advice re-plans
when the run has no torch_npu_trace.json (only advisor's captures write one).  docs/formats.md, "A torch_npu trace
from an msprobe dump".

* **Calls.**  Every forward API entry of the FP32 (golden) dump, in dump order, is one ``Call``: msprobe names an
  entry ``<prefix>.<api>.<n>.forward`` (``ApiTemplate.prefix_api_name``, msprobe
  ``pytorch/dump/api_dump/api_register.py:172``; ``hook_manager.py:229``), with the prefixes ``Functional``
  (``torch.nn.functional``), ``Tensor``, ``Torch``, ``VF``, ``NPU``, ``Aten`` (``core/common/const.py:439-447``).
  Only the outermost hooked API of a nest is dumped (``inner_api_count``, ``core/dump/hook_manager.py:225-227``), so
  each recorded call is one the program made itself and its aten op reaches torch_npu's autocast key.  ``API_ATEN``
  (below) names the aten op of an API whose Python name is not the op's; every other API is the aten op of its own
  name.  The overload is chosen from the call's arguments where the autocast table keys an overload
  (``overload_of``).  Backward entries are not calls: a backward op runs in its forward op's dtype (semantics) and
  is not replayed on its own.
* **Dtypes** are the golden dump's records (the program's own dtypes, as a capture records them); the mixed
  (target) dump's dtypes are what the run measured and are compared with the plan (``dtype_disagreements``).
* **Data flow** is the op graph's: a tensor dump's graph is built from content links (``replay.graph_from_recording``:
  an input equal to an earlier output, bytes and all), its tensors that no recorded call produced are the leaves
  (``Param.*`` -- requires_grad --, ``Model.input.*``, ``Const.*``).
* **Frames.**  A call whose aten op is in torch_npu's autocast table gets an ``autocast`` frame around it (as a
  capture records the marker at the autocast key); a ``Tensor.float`` / ``half`` / ``bfloat16`` / ``double`` /
  ``to`` / ``type`` / ``type_as`` call is a ``cast`` frame with its ``_to_copy``.
* **Modules** come from construct.json (written beside dump.json at level ``mix`` / ``L0``): an API entry's parent
  ``Module.<name>.<Class>.forward.<n>`` (``pytorch/dump/module_dump/module_processor.py:224-226, 260``) gives its
  module as ``named_modules()`` names it, and each module call is a ``module`` frame its calls' outside inputs
  pass.  A level ``L1`` dump has none: every call is the model's own (module ``""``), and the notes say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError
from ..graph import normalize_dtype
from ..semantics import torch_npu as S

API_PREFIXES = ("Functional", "Tensor", "Torch", "VF", "NPU", "Aten")
# msprobe API (without its prefix) -> the aten op it dispatches to, where the names differ (choice: read from
# PyTorch's Python bindings; an operator's dunder calls the op of its name: ``x * y`` is aten::mul)
API_ATEN = {
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_", "__add__": "add", "__radd__": "add",
    "__iadd__": "add_", "__sub__": "sub", "__rsub__": "rsub", "__isub__": "sub_", "__truediv__": "div",
    "__rtruediv__": "div", "__itruediv__": "div_", "__div__": "div", "__matmul__": "matmul",
    "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow", "__ipow__": "pow_", "__neg__": "neg",
    "__abs__": "abs", "__mod__": "remainder", "__floordiv__": "floor_divide", "__and__": "bitwise_and",
    "__or__": "bitwise_or", "__xor__": "bitwise_xor", "__invert__": "bitwise_not", "__eq__": "eq", "__ne__": "ne",
    "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge", "__getitem__": "index",
    "__setitem__": "index_put_",
    # torch.nn.functional wrappers whose aten op has another name
    "cross_entropy": "cross_entropy_loss", "dropout": "dropout", "pad": "constant_pad_nd",
    "interpolate": "upsample_nearest2d", "normalize": "linalg_vector_norm",
}
# Tensor casting methods -> the dtype their _to_copy produces (None: the golden dump's output dtype; "like": the
# last tensor argument's, type_as)
CAST_APIS = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "double": "fp64", "to": None, "type": None,
             "type_as": "like"}
# aten ops whose autocast entry is an overload chosen by the arguments (AutoCastOps.cpp keys)
_DIM_OVERLOADS = {"sum": "dim_IntList", "prod": "dim_int", "norm": "ScalarOpt_dim"}
_NO_DIM_OVERLOADS = {"norm": "Scalar"}
_FIXED_OVERLOADS = {"softmax": "int", "log_softmax": "int", "conv_transpose2d": "input", "conv_transpose3d": "input"}
ATEN_LEVEL = ("the dump records aten ops (msprobe level L2): an op inside another autocast op's call (addmm inside "
              "linear) cannot be told from one the program called itself, and is read as called itself; advice "
              "naming such an op may not reach it at the autocast key (dump level L1 or mix to see the API calls)")
ROOT = 0                    # the trace's frame of the model's own forward (module "")
OPTIMIZER = "optimizer"      # construct.json's scope of optimizer calls (msprobe core/common/const.py:580)
NO_MODULES = ("the dump has no module scope (no Module entries in construct.json: msprobe level L1 or L2): every call "
              "is read as the model's own forward (module ''); dump with level mix for advice by module")


@dataclass
class DumpTrace:
    """The trace of one step of a real dump, what it could not know (``notes``) and where each call came from."""

    trace: S.Trace
    entries: dict[str, str] = field(default_factory=dict)      # call name -> its forward entry
    notes: list[str] = field(default_factory=list)
    has_modules: bool = False


def split_entry(entry: str) -> tuple[str, str, int, str] | None:
    """(prefix, api, call counter, direction) of an API entry ``Functional.linear.0.forward`` (None: not one)."""
    head, _, direction = entry.rpartition(".")
    if direction not in ("forward", "backward"):
        return None
    api, _, counter = head.rpartition(".")
    prefix, _, name = api.partition(".")
    if prefix not in API_PREFIXES or not counter.isdigit() or not name:
        return None
    return prefix, name, int(counter), direction


def _value(arg: Any) -> Any:
    return arg.get("value") if isinstance(arg, dict) and "value" in arg else arg


def _is_tensor(arg: Any) -> bool:
    return isinstance(arg, dict) and "dtype" in arg and "shape" in arg and "Tensor" in str(arg.get("type", ""))


def overload_of(op: str, args: list, kwargs: dict) -> str:
    """The aten overload a call dispatches to, where the autocast table keys one (choice, from PyTorch's bindings:
    ``softmax(x, dim)`` is ``softmax.int``, ``sum(x, dim)`` ``sum.dim_IntList``, ``pow(x, 2)``
    ``pow.Tensor_Scalar``); every other op: ``default``."""
    if op in _FIXED_OVERLOADS:
        return _FIXED_OVERLOADS[op]
    if op in _DIM_OVERLOADS:
        dim = kwargs.get("dim") if "dim" in kwargs else (args[1] if len(args) > 1 and op != "norm" else
                                                          args[2] if len(args) > 2 else None)
        return _DIM_OVERLOADS[op] if _value(dim) is not None else _NO_DIM_OVERLOADS.get(op, "default")
    if op == "pow":
        if args and not _is_tensor(args[0]):
            return "Scalar"
        exp = args[1] if len(args) > 1 else kwargs.get("exponent")
        return "Tensor_Tensor" if _is_tensor(exp) else "Tensor_Scalar"
    return "default"


def aten_of(prefix: str, api: str, args: list, kwargs: dict) -> tuple[str, str]:
    """(aten op, overload) of an msprobe API call (``Aten.<op>.<overload>`` entries name theirs)."""
    if prefix == "Aten":
        op, _, ov = api.partition(".")
        return op, ov or "default"
    if prefix == "Tensor" and api in CAST_APIS:
        return "_to_copy", "default"
    op = API_ATEN.get(api, api)
    return op, overload_of(op, args, kwargs)


def _dtype_arg(args: list, kwargs: dict) -> str | None:
    """An explicit float ``dtype=`` argument (``softmax(x, -1, dtype=torch.float32)``)."""
    d = _value(kwargs.get("dtype"))
    if isinstance(d, str) and d.startswith("torch."):
        n = normalize_dtype(d)
        return n if n in S.FLOATS else None
    return None


def _module_of(entry: str) -> str | None:
    """The module name of a ``Module.<name>.<Class>.forward.<n>`` entry (None: not a module call)."""
    parts = entry.split(".")
    if parts[0] not in ("Module", "Cell") or "forward" not in parts[2:]:
        return None
    i = len(parts) - 1 - parts[::-1].index("forward")
    return ".".join(parts[1:i - 1])


def read_construct(dump_json: Path) -> dict[str, str | None]:
    """construct.json beside a dump.json: entry -> its parent entry (empty without the file or with ``{}``)."""
    p = Path(dump_json).parent / "construct.json"
    if not p.is_file():
        return {}
    from ..fsutil import read_user_json
    d = read_user_json(p, "an msprobe construct.json")
    if not isinstance(d, dict):
        raise InputError(p, "expected an object mapping entries to their parent module")
    return {str(k): (str(v) if v is not None else None) for k, v in d.items()}


def module_chain(entry: str, construct: dict[str, str | None]) -> list[str]:
    """The module entries around ``entry``, outermost first (construct.json's parent links)."""
    out: list[str] = []
    cur = construct.get(entry)
    while cur is not None and cur not in out and _module_of(cur) is not None:
        out.append(cur)
        cur = construct.get(cur)
    return out[::-1]


class _Builder:
    def __init__(self, graph: Any, golden: Any, construct: dict):
        self.g, self.golden, self.construct = graph, golden, construct
        self.calls: list[S.Call] = []
        self.frames: list[S.Frame] = [S.Frame("module", "")]     # the model's own forward (ROOT): its inputs pass it
        self.leaves: dict[str, S.Leaf] = {}
        self.module_frame: dict[str, int] = {}       # module entry -> its frame
        self.call_modules: dict[str, list[str]] = {}  # call name -> its module entries, outermost first

    def srcs(self, node: str, n_in: int) -> list[tuple[str, int] | None]:
        out: list[tuple[str, int] | None] = [None] * n_in
        for src, _, d in self.g.in_edges(node, data=True):
            for so, di in d.get("ports") or ():
                if 0 <= di < n_in:
                    out[di] = (str(src), int(so))
        return out

    def leaf(self, name: str, module: str) -> None:
        if name in self.leaves or name not in self.g:
            return
        a = self.g.nodes[name]
        kind = "param" if name.startswith("Param.") else "input" if name.startswith("Model.input.") else "const"
        self.leaves[name] = S.Leaf(name, str(a.get("dtype", "fp32")), kind, module if kind == "param" else None)

    def frames_of_modules(self, chain: list[str]) -> list[int]:
        out = []
        for m in chain:
            fid = self.module_frame.get(m)
            if fid is None:
                parent = out[-1] if out else ROOT
                fid = self.module_frame[m] = len(self.frames)
                self.frames.append(S.Frame("module", _module_of(m) or "", self.frames[parent].op, parent=parent))
            out.append(fid)
        return out

    def add(self, node: str, entry: str) -> None:
        prefix, api, _, _ = split_entry(entry) or ("", "", 0, "")
        body = self.golden.entries.get(entry)
        args = list(body.input_args or []) if body is not None and isinstance(body.input_args, list) else []
        kwargs = dict(body.input_kwargs or {}) if body is not None and isinstance(body.input_kwargs, dict) else {}
        ins = list(body.inputs) if body is not None else []
        outs = list(body.outputs) if body is not None else []
        op, ov = aten_of(prefix, api, args, kwargs)
        chain = module_chain(entry, self.construct)
        self.call_modules[node] = chain
        module = _module_of(chain[-1]) if chain else ""
        mframes = self.frames_of_modules(chain)
        srcs = self.srcs(node, len(ins))
        port_frames = []
        for s in srcs:
            inside = s is not None and s[0] in self.call_modules
            outer = self.call_modules.get(s[0], []) if inside else []
            # a module's frame is passed by inputs from outside that module call (its forward's arguments)
            passed = tuple(f for m, f in zip(chain, mframes) if m not in outer)
            # a model input enters through the model's own forward first (Apex O2 casts it there)
            port_frames.append(((ROOT,) if s is not None and s[0].startswith("Model.input.") else ()) + passed)
        in_dtypes = tuple(r.dtype for r in ins)
        for s in srcs:
            if s is not None and s[0] not in self.call_modules:
                self.leaf(s[0], module)
        srcs_t = tuple(s if s is not None else (f"{node}.arg{i}", 0) for i, s in enumerate(srcs))
        for i, s in enumerate(srcs):
            if s is None:     # a tensor the graph has no node for: a leaf of the recorded dtype
                self.leaves[srcs_t[i][0]] = S.Leaf(srcs_t[i][0], in_dtypes[i], "const")
        parent = mframes[-1] if mframes else ROOT
        frame = parent
        dt = _dtype_arg(args, kwargs)
        floats = [(s, pf) for s, d, pf in zip(srcs_t, in_dtypes, port_frames) if d in S.FLOATS]
        first = bool(in_dtypes) and in_dtypes[0] in S.FLOATS and bool(args) and _is_tensor(args[0])
        kind = None
        if op == "_to_copy" and prefix == "Tensor" and api in CAST_APIS:
            tgt = CAST_APIS[api] or next((r.dtype for r in outs if r.dtype in S.FLOATS), None)
            kind = S.Frame("cast", api, module, tuple(s for s, _ in floats), tuple(p for _, p in floats),
                           first_float=first, target=tgt, parent=parent)
        elif S.autocast_category(op, ov) is not None:
            kind = S.Frame("autocast", S.table_key(op, ov), module, tuple(s for s, _ in floats),
                           tuple(p for _, p in floats), first_float=first, dtype_arg=dt, parent=parent)
        if kind is not None:
            frame = len(self.frames)
            self.frames.append(kind)
            port_frames = [tuple(p) + (frame,) if d in S.FLOATS else tuple(p) for d, p in zip(in_dtypes, port_frames)]
        a = self.g.nodes[node]
        self.calls.append(S.Call(node, op, ov, srcs_t, in_dtypes, tuple(len(r.shape) for r in ins),
                                 tuple(r.dtype for r in outs), tuple(port_frames), module,
                                 bool(a.get("kernel", True)), False, -1, frame, dt))


def trace_of_dump(graph: Any, golden: Any, construct: dict[str, str | None] | None = None) -> DumpTrace:
    """The ``DumpTrace`` of one step: ``graph`` the op graph built from the golden tensor dump
    (``replay.graph_from_recording``: node = entry prefix, content edges, leaf nodes), ``golden`` that step's
    ``ingest.msprobe.Dump``, ``construct`` its construct.json (``read_construct``; default: read beside it)."""
    construct = read_construct(golden.path) if construct is None else construct
    b = _Builder(graph, golden, construct)
    nodes = sorted((n for n, a in graph.nodes(data=True) if a.get("role") == "op"),
                   key=lambda n: graph.nodes[n].get("order", 0))
    entries = {}
    optimizer = 0
    for n in nodes:
        entry = f"{n}.forward"
        if split_entry(entry) is None or entry not in golden.entries:
            continue
        if construct.get(entry) == OPTIMIZER:
            optimizer += 1
            continue
        b.add(str(n), entry)
        entries[str(n)] = entry
    if not b.calls:
        raise InputError(golden.path, "no forward API entry (Functional.* / Tensor.* / Torch.* / Aten.* ...) to "
                                      "rebuild the program from")
    has_modules = any(b.call_modules.values())
    notes = [] if has_modules else [NO_MODULES]
    if any(e.startswith("Aten.") for e in entries.values()):
        notes.append(ATEN_LEVEL)
    if optimizer:
        notes.append(f"{optimizer} optimizer call(s) (construct.json scope 'optimizer') run outside the forward and "
                     "its autocast: not re-planned")
    if any(e.endswith(".backward") for e in golden.entries):
        notes.append("backward API entries are not replayed (a backward call cannot be re-executed on its own): "
                     "gradients, and what an optimizer computes from them, keep their FP32 values in every replay")
    return DumpTrace(S.Trace(b.calls, b.frames, b.leaves), entries, notes, has_modules)


def dtype_disagreements(dt: DumpTrace, plan: S.TorchPlan, target: Any) -> list[tuple[str, str, str]]:
    """(call, the mixed dump's output dtype, the plan's) where the measured run's first float output is not the
    dtype torch_npu's plan gives it: the run was cast otherwise than the trace's config says (another device's
    autocast, casts the dump does not show) -- said, never hidden."""
    out = []
    for c, d in zip(dt.trace.calls, plan.decisions):
        e = target.entries.get(dt.entries.get(c.name, "")) if target is not None else None
        if e is None or not d.kernel:
            continue
        got = next((r.dtype for r in e.outputs if r.dtype in S.FLOATS), None)
        if got is not None and d.out in S.FLOATS and got != d.out:
            out.append((c.name, got, d.out))
    return out


def low_outputs(dt: DumpTrace, target: Any) -> dict[str, bool]:
    """call -> whether the mixed dump's first float output of it is fp16/bf16 (what the real run ran low)."""
    out = {}
    for c in dt.trace.calls:
        e = target.entries.get(dt.entries.get(c.name, "")) if target is not None else None
        got = next((r.dtype for r in e.outputs if r.dtype in S.FLOATS), None) if e is not None else None
        out[c.name] = c.kernel and got in S.LOW
    return out


def measured_low_dtype(target: Any) -> str | None:
    """The low float dtype the mixed dump's tensors have (bf16 before fp16: a bf16 run may hold fp16 nowhere), None
    when it holds neither."""
    seen = {r.dtype for e in target.entries.values() for r in e.records()} if target is not None else set()
    return "bf16" if "bf16" in seen else "fp16" if "fp16" in seen else None


def half_parameters(dt: DumpTrace, target: Any) -> int:
    """How many parameter inputs (``requires_grad`` leaves of the trace) of API calls the mixed dump records as fp16:
    a program whose weights are fp16 was made half (``model.half()``, Apex O2), not autocast, which keeps weights fp32
    and casts them inside the API (an ``Aten.*`` entry, below autocast, sees the cast copy: not counted)."""
    n = 0
    for c in dt.trace.calls:
        entry = dt.entries.get(c.name, "")
        e = target.entries.get(entry) if target is not None else None
        if e is None or entry.startswith("Aten."):
            continue
        for (src, _), r in zip(c.srcs, e.inputs):
            leaf = dt.trace.leaves.get(src)
            n += leaf is not None and leaf.kind == "param" and r.dtype == "fp16"
    return n


def summary(items: Iterable[tuple[str, str, str]], limit: int = 4) -> str:
    items = list(items)
    head = ", ".join(f"{n}: dump {a}, torch_npu {b}" for n, a, b in items[:limit])
    return head + (f" and {len(items) - limit} more" if len(items) > limit else "")


__all__ = ["DumpTrace", "trace_of_dump", "aten_of", "overload_of", "split_entry", "read_construct", "module_chain",
           "dtype_disagreements", "low_outputs", "measured_low_dtype", "half_parameters", "summary", "API_ATEN", "CAST_APIS", "API_PREFIXES",
           "NO_MODULES"]
