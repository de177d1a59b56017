"""Replay: measure a candidate precision plan on a recorded run instead of estimating it.

A run directory holds the FP32 (golden) msprobe tensor dump of every step.  ``Recording`` turns it
into a program: per step, the recorded ops in execution order, each with the callable it names, its
non-tensor arguments (from the dump records) and, for every tensor input, where the value came from —
the output of an earlier op (found by content: an input tensor equals an earlier entry's output,
same dtype, shape and bytes; the latest such output wins, which is right for views and in-place ops)
or a leaf (model input, parameter, constant) whose recorded value is used as it is.

``Recording.replay(precisions)`` re-executes the program under any plan (``{node: "fp16" | "bf16" |
"fp32" | ... | (input dtype, output dtype)}``, always from ``semantics.plan``): an op runs again when the plan
gives a port of it a low dtype or one of its inputs changed; every other op keeps its recorded FP32 outputs.  An
op runs exactly as the emulator runs it (``emulator.engine.execute_op``: inputs rounded to their dtype, fp32
accumulation, outputs rounded to theirs), so replaying a plan equals a fresh capture with that plan.
The result is a target dump per step (in-memory ``compare.dumps.DumpView``: every replayed entry, the
model outputs, loss and gradients), judged by compare's ``final_metrics`` and the shared ``Tolerance``
like a measured run.

What cannot be replayed is said, never hidden: an op whose callable is unknown (a backward API entry,
``NPU.*`` fused ops, an unknown aten overload), whose arguments cannot be decoded, whose tensors were
not dumped (statistics-only dumps, missing files) or which draws random numbers.  When such an op would
have to run again, its recorded FP32 outputs are used instead and it is listed in
``ReplayResult.not_replayed``; ``coverage`` is the share of the ops that had to run again which did.
A result with coverage < 1 is a lower bound on the error there: the search adds the error model's
estimate for the missing ops and labels the number *estimated*.

Entry names and callables (``resolve``): ``Aten.<op>.<overload>.<k>`` -> ``torch.ops.aten.<op>.<overload>``
(advisor's emulator and msprobe L2 dumps); the msprobe API levels ``Functional.<f>`` ->
``torch.nn.functional.<f>``, ``Torch.<f>`` -> ``torch.<f>``, ``Tensor.<m>`` -> ``torch.Tensor.<m>``; an ONNX run's node (its graph node carries the serialized ONNX node,
``onnx_node``) -> ``advisor.onnx.replay.node_callable`` (the ONNX reference runtime's kernel).
GE op types of API entries (``API_GE_TYPES``) are given only where the mapping is unambiguous.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping

import networkx as nx

from .compare.dumps import DumpView, as_steps, flat_tensors
from .errors import InputError
from .replay_args import Undecodable, decode, relink, tensor_of

MODEL_OUTPUT = "Model.output.0.forward"
MODEL_LOSS = "Model.loss.0.forward"
GRAD_PREFIX = "Grad."
NOT_DUMPED_IN = "input tensor not dumped (statistics-only dump or file missing)"
NOT_DUMPED_OUT = "output tensor not dumped (statistics-only dump or file missing)"

# msprobe API-level entries whose GE op type is unambiguous (torchair / ATC converters: linear -> MatMulV2,
# layer_norm -> LayerNormV4, softmax -> SoftmaxV2, sum -> ReduceSum, elementwise -> the same GE type)
API_GE_TYPES: dict[str, str] = {
    "Functional.linear": "MatMulV2", "Torch.matmul": "BatchMatMul", "Torch.mm": "MatMul", "Torch.bmm": "BatchMatMul",
    "Tensor.matmul": "BatchMatMul", "Tensor.__matmul__": "BatchMatMul",
    "Functional.layer_norm": "LayerNormV4", "Functional.softmax": "SoftmaxV2", "Torch.softmax": "SoftmaxV2",
    "Tensor.softmax": "SoftmaxV2", "Functional.log_softmax": "LogSoftmaxV2", "Torch.log_softmax": "LogSoftmaxV2",
    "Functional.gelu": "Gelu", "Functional.relu": "Relu", "Torch.relu": "Relu", "Functional.silu": "Swish",
    "Functional.sigmoid": "Sigmoid", "Torch.sigmoid": "Sigmoid", "Tensor.sigmoid": "Sigmoid",
    "Torch.tanh": "Tanh", "Tensor.tanh": "Tanh", "Functional.tanh": "Tanh",
    "Torch.exp": "Exp", "Tensor.exp": "Exp", "Torch.log": "Log", "Tensor.log": "Log",
    "Torch.sqrt": "Sqrt", "Tensor.sqrt": "Sqrt", "Torch.rsqrt": "Rsqrt", "Tensor.rsqrt": "Rsqrt",
    "Tensor.__mul__": "Mul", "Tensor.__rmul__": "Mul", "Torch.mul": "Mul", "Tensor.mul": "Mul",
    "Tensor.__add__": "Add", "Tensor.__radd__": "Add", "Torch.add": "Add", "Tensor.add": "Add",
    "Tensor.__sub__": "Sub", "Torch.sub": "Sub", "Tensor.sub": "Sub",
    "Tensor.__truediv__": "RealDiv", "Torch.div": "RealDiv", "Tensor.div": "RealDiv",
    "Tensor.sum": "ReduceSum", "Torch.sum": "ReduceSum", "Tensor.mean": "ReduceMean", "Torch.mean": "ReduceMean",
    "Tensor.pow": "Pow", "Torch.pow": "Pow", "Tensor.__pow__": "Pow", "Torch.cumsum": "Cumsum",
    "Tensor.cumsum": "Cumsum", "Functional.embedding": "GatherV2", "Functional.dropout": "Dropout",
}


# ---------------------------------------------------------------------- callables
def _entry_base(entry: str) -> tuple[str, str]:
    """(API name without the call counter, direction) of ``Functional.linear.0.forward``."""
    head, _, direction = entry.rpartition(".")
    api, _, counter = head.rpartition(".")
    return (api, direction) if counter.isdigit() else (head, direction)


def resolve(entry: str) -> tuple[Callable | None, str | None]:
    """(callable, None) for a replayable forward entry, else (None, why not)."""
    api, direction = _entry_base(entry)
    if direction != "forward":
        return None, f"{direction} entry (a backward API call cannot be re-executed on its own)"
    kind, _, rest = api.partition(".")
    import torch
    try:
        if kind == "Aten":
            op, _, overload = rest.partition(".")
            packet = getattr(torch.ops.aten, op)
            return getattr(packet, overload or "default"), None
        if kind == "Functional":
            return getattr(torch.nn.functional, rest), None
        if kind == "Torch":
            return getattr(torch, rest), None
        if kind == "Tensor":
            return getattr(torch.Tensor, rest), None
    except (AttributeError, RuntimeError):
        return None, f"unknown {kind.lower()} function {rest!r}"
    return None, f"{kind}.* entries are not replayable (no CPU implementation)"


def ge_type(entry: str, args: tuple = (), kwargs: dict | None = None) -> str | None:
    """GE op type of a dump entry: the aten->GE table for ``Aten.*`` (its call rule applied to ``args`` /
    ``kwargs`` when given: ``emulator.opmap.resolve``), API_GE_TYPES for API entries."""
    api, _ = _entry_base(entry)
    if api.startswith("Aten."):
        from .emulator import opmap
        op, _, overload = api[5:].partition(".")
        typ, _kernel, mapped = opmap.resolve(op, overload or "default", args, kwargs)
        return typ if mapped else None
    return API_GE_TYPES.get(api)


# ---------------------------------------------------------------------- the recorded program
@dataclass
class ROp:
    """One recorded op of one step."""

    entry: str                        # dump entry name (``<node>.forward``)
    node: Hashable | None             # graph node whose plan precision applies (None: not in the graph)
    func: Callable | None
    why_not: str | None               # why the op cannot be re-executed (None: it can)
    args: Any = None                  # decoded input_args / input_kwargs (tensors as Slot)
    kwargs: Any = None
    inputs: list = field(default_factory=list)     # per slot: (op index, output index) or None (a leaf)
    in_values: list = field(default_factory=list)  # per slot: the recorded FP32 value
    out_values: list = field(default_factory=list)  # the recorded FP32 outputs (flattened)
    out_keys: list = field(default_factory=list)    # output labels (``0``, ``1`` ...)
    out_records: list = field(default_factory=list)
    aux: tuple = ()
    mutated: tuple = ()
    kernel: bool = True               # False: a view / no-kernel op (never rounded; always re-run for layout)
    static: bool = False              # a view of leaves only: the same outputs in every replay (computed once)
    fused: bool = False               # a member of a fused kernel (advisor.fusion): inputs from other members
    inner: bool = False               # are not rounded; ``inner``: its outputs never leave the kernel (unrounded)
    type: str | None = None           # the graph node's GE type (HF32 applies by type; a fused member: its own)
    nonfinite: bool | None = None     # a recorded input or output holds inf/NaN (saturation changes it); lazy
    base_prec: Any = "fp32"           # what the recorded outputs were computed at, a precision or an (input,
    # output) pair (replay_scope: the measured run's); an op runs again when a plan gives it another one
    fp32_out: list | None = None      # the FP32 outputs when ``out_values`` are the measured run's (replay_scope)
    rounded_boundary: bool = False    # an input known only as the measured run rounded it: not re-run at another
    # precision (replay_scope)
    through: int | None = None        # a Cast GE's TransNodeMerging removes: the op index of the Cast it undoes,
    # whose input it passes on unrounded under every plan (advisor.fusion.transnodes)

    @property
    def golden_outputs(self) -> list:
        """The op's FP32 outputs (what its replayed outputs are compared with)."""
        return self.fp32_out if self.fp32_out is not None else self.out_values


def _link_through(ops: list[ROp], through: Mapping[str, str]) -> None:
    """Each removed Cast's op (entry prefix in ``through``) -> the index of the latest earlier op of the Cast it
    undoes (``ROp.through``)."""
    if not through:
        return
    last: dict[str, int] = {}
    for i, op in enumerate(ops):
        if not op.entry.endswith(".forward"):
            continue
        prefix = op.entry[: -len(".forward")]
        if through.get(prefix) in last and op.out_values:
            op.through = last[through[prefix]]
        last[prefix] = i


@dataclass
class StepProgram:
    step: int
    ops: list[ROp]
    golden: DumpView
    # sink entries (model outputs, loss, gradients): entry -> [(label, source or None, record, value)]
    sinks: dict[str, list] = field(default_factory=dict)


@dataclass
class ReplayResult:
    """What a replay predicts for one plan."""

    targets: dict[int, DumpView]            # step -> replayed target dump (in memory)
    goldens: dict[int, DumpView]
    executed: int                           # op executions
    needed: int                             # ops that had to run again (low precision or changed inputs)
    not_replayed: dict[str, str]            # entry -> why (ops that had to run again but could not)
    seconds: float
    steps: list[int]

    @property
    def coverage(self) -> float:
        """Share of the ops that had to run again which were re-executed (1.0 = an exact replay)."""
        return 1.0 if self.needed == 0 else (self.needed - len(self.not_replayed)) / self.needed

    @property
    def complete(self) -> bool:
        return not self.not_replayed

    def final_metrics(self, steps: Iterable[int] | None = None, tolerance: Any = None) -> list[dict]:
        """Per step what the verdict is judged on (model outputs, loss, every gradient), computed exactly
        as compare computes it for a measured run (``compare.judge.judged_steps``)."""
        from .compare.judge import judged_steps
        st = sorted(self.targets) if steps is None else [s for s in steps if s in self.targets]
        return judged_steps(self.targets, self.goldens, st, tolerance)[0]

    def verdict(self, tolerance: Any, steps: Iterable[int] | None = None):
        """The shared Tolerance's verdict on the replayed outputs (a ``Verdict``)."""
        return tolerance.judge(self.final_metrics(steps, tolerance))

    def coverage_dict(self) -> dict:
        return {"coverage": round(self.coverage, 6), "replayed": self.needed - len(self.not_replayed),
                "needed": self.needed, "not_replayed": dict(list(self.not_replayed.items())[:50]),
                "not_replayed_count": len(self.not_replayed), "executions": self.executed,
                "seconds": round(self.seconds, 4)}


def _digest(t) -> tuple:
    import torch
    a = t.detach()
    if a.dtype == torch.bfloat16:
        a = a.view(torch.int16)
    a = a.contiguous().cpu().numpy()
    return (str(t.dtype), tuple(t.shape), hashlib.blake2b(a.tobytes(), digest_size=16).digest())


class Recording:
    """The FP32 run of every step as a replayable program (see the module docstring)."""

    def __init__(self, programs: dict[int, StepProgram], source: str = ""):
        self.programs = programs
        self.source = source
        self._rounded: dict[tuple[int, str], Any] = {}   # (id of a static value, low dtype) -> rounded copy
        self._static: dict[tuple[int, int], list] = {}   # (step, op index) -> outputs of a static view

    def _low_leaf(self, v, prec: str, overflow: str = "inf_nan"):
        """A static input (leaf or view of leaves) rounded to the low dtype once for all replays
        (rounding parameters would otherwise dominate the cost), by the one rule (``numerics.round_tensor``)."""
        key = (id(v), prec, overflow)
        r = self._rounded.get(key)
        if r is None:
            from .emulator.engine import FLOAT_DTYPES, LOW_TORCH
            from .numerics import SATURATION, round_tensor
            low = LOW_TORCH[prec]
            r = round_tensor(v, low, overflow) if v.dtype in FLOAT_DTYPES and (
                v.dtype != low or overflow == SATURATION) else v
            self._rounded[key] = r
        return r

    # ------------------------------------------------------------------ building
    @classmethod
    def from_golden(cls, golden: Any, graph: nx.DiGraph | None = None, source: str = "") -> "Recording":
        """Build from the golden dumps (``{step: dump}``, a DumpView, an ingest Dump, ...) and, when
        given, the run's op graph (its nodes name the precision decisions: node ``dump`` attribute or
        name = the entry prefix)."""
        views = as_steps(golden)
        if not views:
            raise InputError(source or None, "no FP32 dump to replay")
        prefix_node: dict[str, Hashable] = {}
        kernel: dict[Hashable, bool] = {}
        onnx_nodes: dict[str, tuple] = {}
        fused: dict[str, bool] = {}         # a fused kernel's member entry prefix -> its outputs stay inside
        types: dict[str, str] = {}          # entry prefix -> GE type (HF32 applies by type; a member: its own)
        through: dict[str, str] = {}        # a removed Cast's entry prefix -> the prefix of the Cast it undoes
        if graph is not None:
            prefix_of = {str(a.get("name", n)): str(a.get("dump") or a.get("name") or n)
                         for n, a in graph.nodes(data=True) if a.get("merged_by")}
            for n, a in graph.nodes(data=True):
                prefix = str(a.get("dump") or a.get("name") or n)
                prefix_node[prefix] = n
                if a.get("merged_with") in prefix_of:
                    through[prefix] = prefix_of[a["merged_with"]]
                kernel[n] = bool(a.get("kernel", True))
                types[prefix] = str(a.get("type", ""))
                if a.get("onnx_node"):      # an ONNX run's node: re-executed by advisor.onnx.replay
                    onnx_nodes[prefix] = (a["onnx_node"], a.get("onnx_opset"))
                if a.get("members"):        # a fused kernel: each member's entry executes the node's decision
                    inner = set(a.get("internal") or ())
                    for m, t in zip(a["members"], a.get("member_types") or [None] * len(a["members"])):
                        prefix_node.setdefault(str(m), n)
                        fused[str(m)] = str(m) in inner
                        types[str(m)] = str(t or a.get("type", ""))
                    for m, blob in (a.get("member_onnx") or {}).items():
                        onnx_nodes[str(m)] = (blob, a.get("onnx_opset"))
        leaves: dict = {}
        programs = {s: cls._program(s, v, prefix_node if graph is not None else None, kernel, leaves, onnx_nodes,
                                    fused, types) for s, v in sorted(views.items())}
        for prog in programs.values():
            _link_through(prog.ops, through)
        return cls(programs, source)

    @staticmethod
    def _program(step: int, view: DumpView, prefix_node: dict | None, kernel: dict, leaves: dict,
                 onnx_nodes: dict | None = None, fused: dict | None = None, types: dict | None = None) -> StepProgram:
        onnx_nodes, fused = onnx_nodes or {}, fused or {}
        from .emulator.engine import AUX_FP32_OUTPUTS, mutated_positions
        producers: dict[tuple, tuple[int, int]] = {}
        ops: list[ROp] = []
        sinks: dict[str, list] = {}
        for entry, body in view.entries.items():
            if not isinstance(body, Mapping):
                continue
            if entry == MODEL_OUTPUT or entry == MODEL_LOSS or entry.startswith(GRAD_PREFIX):
                sinks[entry] = [(lbl, rec) for lbl, rec in view.outputs(entry)]
                continue
            if entry.startswith(("Module.", "Cell.")) or not entry.endswith((".forward", ".backward")):
                continue   # module-level entries repeat the API calls inside them
            prefix = entry[: -len(".forward")] if entry.endswith(".forward") else None
            node = None if prefix is None else prefix_node.get(prefix) if prefix_node is not None else prefix
            func, why = resolve(entry)
            onnx_aux = None
            if prefix in onnx_nodes:
                from .onnx.replay import node_callable
                func, why, onnx_aux = node_callable(*onnx_nodes[prefix])
            op = ROp(entry, node, func, why)
            if prefix in fused:
                op.fused, op.inner = True, fused[prefix]
            op.kernel = kernel.get(node, True) if prefix_node is not None else _aten_kernel(entry)
            op.type = (types or {}).get(prefix) if prefix_node is not None else ge_type(entry)
            outs = view.outputs(entry)
            op.out_keys = [lbl for lbl, _ in outs]
            op.out_records = [rec for _, rec in outs]
            op.out_values = [tensor_of(view, rec) for _, rec in outs]
            if func is not None:
                slots: list = []
                try:
                    op.args = tuple(decode(a, slots) for a in (body.get("input_args") or []))
                    op.kwargs = {k: decode(v, slots) for k, v in (body.get("input_kwargs") or {}).items()}
                except Undecodable as e:
                    op.why_not, op.func = f"cannot decode {e}", None
                    slots = []
                recs = [r for _, r in view.inputs(entry)] if "_inputs" in body else slots
                if op.func is not None and len(recs) != len(slots):
                    op.why_not, op.func = f"{len(slots)} tensor arguments but {len(recs)} tensor records", None
                op.in_values = [tensor_of(view, r) for r in recs]
                if op.func is not None and any(v is None for v in op.in_values):
                    op.why_not, op.func = NOT_DUMPED_IN, None
                if op.func is not None and any(v is None for v in op.out_values):
                    op.why_not, op.func = NOT_DUMPED_OUT, None
                if op.func is not None and hasattr(op.func, "_schema"):
                    import torch
                    if torch.Tag.nondeterministic_seeded in op.func.tags:
                        op.why_not, op.func = "draws random numbers", None
                    else:
                        op.mutated = mutated_positions(op.func)
                        packet = op.func._schema.name.split("::")[-1]
                        op.aux = AUX_FP32_OUTPUTS.get(packet, ())
                elif op.func is not None and onnx_aux is not None:
                    op.aux = onnx_aux
                keys = [_digest(v) if v is not None else None for v in op.in_values]
                op.inputs = [producers.get(k) if k is not None else None for k in keys]
                # leaves (parameters, constants, model inputs): one tensor per content across steps
                op.in_values = [leaves.setdefault(k, v) if src is None and k is not None else v
                                for k, src, v in zip(keys, op.inputs, op.in_values)]
            op.static = (not op.kernel and op.func is not None and not op.mutated
                         and all(src is None or ops[src[0]].static for src in op.inputs))
            i = len(ops)
            ops.append(op)
            for j, v in enumerate(op.out_values):
                if v is not None:
                    producers[_digest(v)] = (i, j)
        prog = StepProgram(step, ops, view)
        for entry, items in sinks.items():
            linked = []
            for lbl, rec in items:
                v = tensor_of(view, rec)
                src = producers.get(_digest(v)) if v is not None else None
                linked.append((lbl, src, rec, v))
            prog.sinks[entry] = linked
        return prog

    # ------------------------------------------------------------------ facts
    @property
    def steps(self) -> list[int]:
        return sorted(self.programs)

    def nodes(self) -> set:
        return {op.node for p in self.programs.values() for op in p.ops if op.node is not None}

    def partial(self) -> bool:
        """Some forward ops were dumped with tensors and others with statistics only (msprobe's ``tensor_list``,
        ``advisor tune``'s scoped dumps): the run is replayed from its measured values (``replay_scope``)."""
        ops = [op for p in self.programs.values() for op in p.ops if op.entry.endswith(".forward")]
        return (any(op.why_not in (NOT_DUMPED_IN, NOT_DUMPED_OUT) for op in ops)
                and any(op.func is not None and op.kernel for op in ops))

    def replayable_share(self) -> float:
        ops = [op for p in self.programs.values() for op in p.ops if op.entry.endswith(".forward")]
        return sum(op.func is not None for op in ops) / len(ops) if ops else 0.0

    # ------------------------------------------------------------------ replay
    def replay(self, precision: Mapping[Hashable, str], steps: Iterable[int] | None = None,
               numerics: Any = None) -> ReplayResult:
        """Re-execute under ``precision`` (node -> "fp16"/"bf16"/"fp32"/"n/a"; nodes not in the map
        run fp32) on ``steps`` (default: all), rounding as the run's chip does (``numerics``: a
        ``numerics.Numerics``, default IEEE): an fp32 kernel that reads HF32 (``Numerics.hf32_on``) or, in
        saturation mode, holds a recorded inf/NaN runs again too.  Long because: one loop over every recorded
        op of every step, run once per plan the search tries; its per-op state (new outputs, dirty and exact
        sets) stays in locals instead of being passed to helpers on every op."""
        from .emulator.engine import exec_pair, execute_op
        from .numerics import IEEE
        nm = numerics if numerics is not None else IEEE
        t0 = time.perf_counter()
        want = self.steps if steps is None else [s for s in steps if s in self.programs]
        targets: dict[int, DumpView] = {}
        goldens: dict[int, DumpView] = {}
        not_replayed: dict[str, str] = {}
        executed = needed = 0
        for s in want:
            prog = self.programs[s]
            new: dict[int, list] = {}        # op index -> outputs computed by the replay
            dirty: set[int] = set()          # ops whose outputs differ from the recorded FP32 ones
            exact_of: dict[int, str] = {}    # op index -> low dtype its outputs are exact in
            entries: dict[str, dict] = {}
            for i, op in enumerate(prog.ops):
                if op.through is not None:      # GE removed this Cast and the one it undoes: its input, unrounded
                    head = prog.ops[op.through]
                    src, v = (head.inputs[0], head.in_values[0]) if head.inputs else (None, None)
                    if v is not None:
                        v = new[src[0]][src[1]] if src is not None and src[0] in new else v
                        new[i] = [v.to(op.out_values[0].dtype)]
                        dirty.add(i)
                        entries[op.entry] = {"_outputs": [(op.out_keys[0], {"tensor": new[i][0],
                                                           "dtype": str(op.out_records[0].get("dtype", "")),
                                                           "shape": list(new[i][0].shape)})]}
                        continue
                prec, out_prec = exec_pair(precision.get(op.node, "fp32") if op.node is not None else "fp32")
                low = op.kernel and (prec in ("fp16", "bf16") or out_prec in ("fp16", "bf16"))
                moved = low if op.base_prec == "fp32" else op.kernel and (prec, out_prec) != exec_pair(op.base_prec)
                changed = any(src is not None and src[0] in dirty for src in op.inputs)
                hf32 = op.kernel and prec == "fp32" and nm.hf32_on(op.type)
                if nm.saturating and op.kernel and not low:
                    changed = changed or _nonfinite(op)
                changed = changed or hf32
                if moved or changed:
                    needed += 1
                    if op.func is None or (moved and op.rounded_boundary):
                        not_replayed.setdefault(op.entry, op.why_not or (
                            "an input known only as the measured run rounded it" if op.rounded_boundary else
                            "not replayable"))
                        continue
                elif op.kernel or op.func is None:
                    continue
                elif op.static:
                    outs = self._static.get((s, i))
                    if outs is None:
                        outs = self._static[(s, i)] = execute_op(
                            op.func, tuple(relink(a, op.in_values) for a in op.args),
                            {k: relink(v, op.in_values) for k, v in op.kwargs.items()}, "fp32", kernel=False)
                    new[i] = outs
                    continue
                # views run again even when nothing changed: their outputs keep the eager run's strides,
                # which decide the summation order of the kernels that read them (dumps store contiguous copies)
                vals = []
                for src, v in zip(op.inputs, op.in_values):
                    if src is not None and src[0] in new:
                        v = new[src[0]][src[1]]
                    if low and prec in ("fp16", "bf16") and (src is None or prog.ops[src[0]].static):
                        v = self._low_leaf(v, prec, nm.overflow)
                    vals.append(v)
                args = tuple(relink(a, vals) for a in op.args)
                kwargs = {k: relink(v, vals) for k, v in op.kwargs.items()}
                if low or op.fused:
                    # inside a fused kernel a member's values reach the next member unrounded (nor saturated)
                    exact = {id(v) for src, v in zip(op.inputs, vals)
                             if (op.fused and src is not None and prog.ops[src[0]].node == op.node)
                             or (low and (src is None or prog.ops[src[0]].static or exact_of.get(src[0]) == prec))}
                else:
                    exact = ()
                try:
                    outs = execute_op(op.func, args, kwargs, prec, kernel=op.kernel, aux=op.aux, mutated=op.mutated,
                                      exact=exact, out_prec=out_prec, numerics=nm, hf32=hf32,
                                      round_outputs=not op.inner)
                except Exception as e:  # noqa: BLE001 - an op that does not run on the CPU as recorded
                    why = f"re-execution failed ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
                    op.func, op.why_not = None, why
                    if moved or changed:
                        not_replayed.setdefault(op.entry, why)
                    continue
                executed += 1
                if len(outs) != len(op.out_values):
                    if moved or changed:
                        not_replayed.setdefault(op.entry, f"{len(outs)} outputs, {len(op.out_values)} recorded")
                    continue
                new[i] = outs
                if low and not op.aux and not op.inner and out_prec in ("fp16", "bf16"):
                    exact_of[i] = out_prec
                if not (moved or changed):
                    continue
                dirty.add(i)
                entries[op.entry] = {"_outputs": [(k, {"tensor": t, "dtype": _dt(t, out_prec, j in op.aux or op.inner),
                                                       "shape": list(t.shape)})
                                                  for j, (k, t) in enumerate(zip(op.out_keys, outs))]}
            # unchanged forward entries keep their recorded records (statistics / files of the golden)
            for op in prog.ops:
                if op.entry not in entries:
                    entries[op.entry] = {"_outputs": list(zip(op.out_keys, op.out_records))}
            for entry, items in prog.sinks.items():
                recs = []
                for lbl, src, rec, v in items:
                    t = new[src[0]][src[1]] if src is not None and src[0] in dirty else v
                    recs.append((lbl, {"tensor": t, "dtype": str(rec.get("dtype", "")), "shape": list(t.shape)}
                                 if t is not None else rec))
                entries[entry] = {"_outputs": recs}
            targets[s] = DumpView(entries, source=f"replay of {self.source or 'the FP32 run'} (step {s})")
            goldens[s] = prog.golden
        return ReplayResult(targets, goldens, executed, needed, not_replayed, time.perf_counter() - t0, want)


def _nonfinite(op: ROp) -> bool:
    """Whether a recorded float input or output of ``op`` holds inf/NaN (computed once, on first need)."""
    if op.nonfinite is None:
        import torch
        op.nonfinite = any(v is not None and v.is_floating_point() and not bool(torch.isfinite(v).all())
                           for v in list(op.in_values) + list(op.out_values))
    return op.nonfinite


def _dt(t, prec: str, aux: bool) -> str:
    import torch
    if t.dtype in (torch.float32, torch.float64) and prec in ("fp16", "bf16") and not aux:
        return prec
    return str(t.dtype).replace("torch.", "")


def graph_from_recording(rec: Recording, step: int | None = None) -> nx.DiGraph:
    """The op graph of a dump that came without one (a real msprobe tensor dump): one node per
    forward entry (its GE type from ``ge_type``, ``Unknown:<api>`` where no unambiguous type exists),
    true dataflow edges from the content links, and a leaf node per tensor that no entry produced —
    ``data`` for the first argument of an op that does not require grad (a model input), ``variable``
    for tensors that require grad (weights), ``const`` otherwise.  Node keys are the entry prefixes,
    so ``Recording.replay`` takes ``semantics.plan`` of this graph directly."""
    from . import graph as G
    from .graph import normalize_dtype
    s = rec.steps[0] if step is None else step
    prog = rec.programs[s]
    g = G.new_graph(framework="pytorch", step=s, source=f"msprobe dump {rec.source}".strip())
    leaf_names: dict[int, str] = {}
    for i, op in enumerate(prog.ops):
        if not op.entry.endswith(".forward") or op.node is None:
            continue
        decoded = op.func is not None and op.args is not None
        typ = ge_type(op.entry, tuple(relink(a, op.in_values) for a in op.args) if decoded else (),
                      {k: relink(v, op.in_values) for k, v in op.kwargs.items()} if decoded else None)
        api, _ = _entry_base(op.entry)
        floats = [v for v in op.in_values + op.out_values if v is not None]
        is_float = any(v.is_floating_point() for v in floats) if floats else True
        G.add_op(g, op.node, typ or f"Unknown:{api}", role="op", kernel=op.kernel, float=is_float,
                 mapped=typ is not None, dump=str(op.node), order=i,
                 out_shapes=[list(v.shape) for v in op.out_values if v is not None],
                 out_dtypes=[normalize_dtype(str(v.dtype)) for v in op.out_values if v is not None])
        recs = [r for _, r in prog.golden.inputs(op.entry)]
        for pos, (src, v) in enumerate(zip(op.inputs, op.in_values)):
            if v is None:
                continue
            fl = v.is_floating_point()
            if src is not None and prog.ops[src[0]].node in g:
                G.connect(g, prog.ops[src[0]].node, op.node, src[1], pos, float=fl)
                continue
            name = leaf_names.get(id(v))
            if name is None:
                r = recs[pos] if pos < len(recs) else {}
                rg = bool(r.get("requires_grad", getattr(r.get("_rec"), "requires_grad", False)))
                # parameters are graph inputs as torchair builds the graph (ge.Data: fx2ge_converter.py:1309-1345)
                role = "data" if rg or pos == 0 else "const"
                kind = "Param" if rg else ("Model.input" if role == "data" else "Const")
                name = leaf_names[id(v)] = f"{kind}.{len(leaf_names)}"
                G.add_op(g, name, {"data": "Data", "const": "Const"}[role], role=role,
                         kernel=False, dtype=normalize_dtype(str(v.dtype)), out_shapes=[list(v.shape)])
            G.connect(g, name, op.node, 0, pos, float=fl)
    return g


def precisions(plan: Any) -> dict[Hashable, Any]:
    """node -> what it executes under a ``semantics.Plan`` (the only source of precisions for a replay): its
    precision, or (input dtype, output dtype) where the two differ (``Plan.exec_dtypes``)."""
    return {n: (p if p == e else (p, e)) for n, p, e in zip(plan.compiled.order, plan.precision_list, plan.emit_list)}


def _aten_kernel(entry: str) -> bool:
    """Whether an ``Aten.*`` entry is a kernel (the aten->GE table); API entries count as kernels."""
    api, _ = _entry_base(entry)
    if not api.startswith("Aten."):
        return True
    from .emulator import opmap
    op, _, overload = api[5:].partition(".")
    return bool(opmap.lookup(op, overload or "default")[1])

