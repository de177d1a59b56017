"""Shared helpers of the ingest readers: GE dtype names, bookkeeping-op detection, shape strings."""
from __future__ import annotations

from typing import Any, Iterable

from ..graph import normalize_dtype, shape_ints  # noqa: F401 - shape_ints re-exported for the readers

# GE DataType enum (graph/types.h) <-> serial names used in GE dumps
GE_DTYPE_ENUM = {
    0: "DT_FLOAT", 1: "DT_FLOAT16", 2: "DT_INT8", 3: "DT_INT32", 4: "DT_UINT8", 6: "DT_INT16",
    7: "DT_UINT16", 8: "DT_UINT32", 9: "DT_INT64", 10: "DT_UINT64", 11: "DT_DOUBLE", 12: "DT_BOOL",
    13: "DT_STRING", 16: "DT_COMPLEX64", 17: "DT_COMPLEX128", 27: "DT_BF16", 28: "DT_UNDEFINED",
}
GE_DTYPE_VALUE = {v: k for k, v in GE_DTYPE_ENUM.items()}

# normalized name (advisor.graph.normalize_dtype) -> GE serial name
_TO_GE = {"fp32": "DT_FLOAT", "fp16": "DT_FLOAT16", "bf16": "DT_BF16", "fp64": "DT_DOUBLE",
          "bool": "DT_BOOL", "n/a": "DT_UNDEFINED", "undefined": "DT_UNDEFINED"}


def to_ge_dtype(name: Any) -> str:
    """``fp16`` / ``torch.float16`` / ``FLOAT16`` -> ``DT_FLOAT16``; ints -> ``DT_INT64`` etc."""
    n = normalize_dtype(name)
    if n in _TO_GE:
        return _TO_GE[n]
    s = "DT_" + n.upper()
    return s if s in GE_DTYPE_VALUE else "DT_" + n.upper()


def from_ge_dtype(value: Any) -> str:
    """A GE dtype (serial name ``DT_FLOAT16`` or enum int as text) -> normalized name."""
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        s = GE_DTYPE_ENUM.get(int(s), "DT_UNDEFINED")
    return normalize_dtype(s)


# Op types kept in the graph but excluded from precision decisions (communication, memory,
# runtime bookkeeping).  Matched on the type; AI_CPU/HCCL/DSA cores are matched on the core.
BOOKKEEPING_TYPES = frozenset({
    "MemSet", "MemsetAsync", "MemcpyAsync", "MemcpyAddrAsync", "AtomicAddrClean", "DynamicAtomicAddrClean",
    "LabelSet", "LabelGoto", "LabelGotoEx", "LabelSwitch", "LabelSwitchByIndex", "StreamActive",
    "StreamSwitch", "Send", "Recv", "NoOp", "NetOutput", "Identity", "IdentityN",
    "GetNext", "DynamicGetNext", "ModelExit", "EndOfSequence", "DropOutGenMaskV3",
})
# Graph outputs: GE's NetOutput (whole graph) and End (a partitioned subgraph's output, paired with
# PlaceHolder inputs; GE's PLACE_OR_END_SET).  Kept as nodes, never ops: no kernel, no decision.
GRAPH_OUTPUT_TYPES = frozenset({"NetOutput", "End"})
BOOKKEEPING_PREFIXES = ("Hcom", "Hccl", "hcom", "hccl", "Mem", "Notify", "Event", "Stream")
BOOKKEEPING_CORES = frozenset({"HCCL", "AI_CPU", "DSA_SQE", "COMMUNICATION", "MEMCPY"})


def is_bookkeeping(op_type: str, core: str | None = None) -> bool:
    """True for op types kept as nodes but excluded from precision decisions (``decides=False``); kernel
    rows also by their core (``core`` in ``BOOKKEEPING_CORES``; ``infer`` checks it vectorised)."""
    if core and str(core).strip().upper() in BOOKKEEPING_CORES:
        return True
    t = str(op_type)
    return t in BOOKKEEPING_TYPES or t.startswith(BOOKKEEPING_PREFIXES)


def shape_str(shape: Any) -> str:
    """A shape as the comma-separated string kernel_details.csv uses ("" for a scalar)."""
    if shape is None:
        return ""
    if isinstance(shape, str):
        return shape.strip().strip("[]()").replace(" ", "")
    return ",".join(str(int(d)) for d in shape)


def numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n
