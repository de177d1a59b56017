"""AI Core kernels as their ops-info declares them: the dtype combinations each op type's kernel supports.

GE chooses an op's port dtypes only among the combinations its ops-info lists: each port's ``dtype`` is a
comma-separated list, column *j* of every port together being combination *j*
(``input0.dtype: "float16,float,bfloat16"``, ``output0.dtype: "float16,float,bfloat16"`` = three
combinations).  A type absent from the AI Core ops-info has no AI Core kernel: GE never judges it and it runs on
AI CPU in its original dtype.  This module holds the data only; the rules that choose among the combinations
(exact, rise, reduce matching) are in ``advisor.semantics``.

Ports whose ``dtype`` the ops-info does not declare (``dynamicFormat`` ops such as MatMulV2, Mul, SoftmaxV2,
Conv2D: their op-select function decides at build time) are ``None``: every float dtype is taken as supported
there (choice: GE asks the op's select function, which we cannot run).

Dtype names are advisor's canonical ones (``graph.normalize_dtype``: ``fp32``, ``fp16``, ``bf16``, ``fp64``,
``int32``, ``bool``, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .graph import normalize_dtype

FLOAT_DTYPES = frozenset({"fp32", "fp16", "bf16", "fp64"})


@dataclass(frozen=True)
class Kernel:
    """One op type's AI Core kernel.

    ``inputs`` / ``outputs``: per port (ops-info ``input<i>`` / ``output<i>`` in index order), the dtype of
    each combination (a tuple, one entry per combination), or ``None`` when the ops-info declares no dtype
    list for that port.  ``no_kernel``: the ops-info's ``opFile`` is ``Null`` (Reshape, Squeeze, Identity, ...:
    GE handles these without a compiled kernel)."""

    op_type: str
    inputs: tuple[tuple[str, ...] | None, ...] = ()
    outputs: tuple[tuple[str, ...] | None, ...] = ()
    no_kernel: bool = False

    @property
    def declared(self) -> bool:
        """True when at least one port lists its dtypes."""
        return any(p is not None for p in self.inputs + self.outputs)

    @property
    def n_combos(self) -> int:
        """Number of dtype combinations (0 when no port declares its dtypes)."""
        return max((len(p) for p in self.inputs + self.outputs if p is not None), default=0)

    def combos(self) -> list[tuple[tuple[str | None, ...], tuple[str | None, ...]]]:
        """Every combination as (input dtypes, output dtypes); an undeclared port is ``None`` in each."""
        n = self.n_combos

        def col(ports, j):
            return tuple(None if p is None else (p[j] if j < len(p) else p[-1]) for p in ports)
        return [(col(self.inputs, j), col(self.outputs, j)) for j in range(n)]

    def float_dtypes(self, port: int = 0, output: bool = False) -> frozenset[str] | None:
        """The float dtypes one port supports over all combinations (``None``: undeclared = every float)."""
        ports = self.outputs if output else self.inputs
        if port >= len(ports) or ports[port] is None:
            return None
        return frozenset(d for d in ports[port] if d in FLOAT_DTYPES)

    def supports(self, dtype: str) -> bool:
        """True when some combination runs the op's first float port in ``dtype`` (undeclared ports: any float).
        The first float port is the first input (else output) whose dtype list has a float entry."""
        for ports in (self.inputs, self.outputs):
            for p in ports:
                if p is None:
                    return dtype in FLOAT_DTYPES
                if any(d in FLOAT_DTYPES for d in p):
                    return dtype in p
        return False

    def to_dict(self) -> dict:
        """Compact JSON form (package data): ports as comma-joined dtype strings, ``null`` when undeclared."""
        d: dict = {"in": [None if p is None else ",".join(p) for p in self.inputs],
                   "out": [None if p is None else ",".join(p) for p in self.outputs]}
        if self.no_kernel:
            d["no_kernel"] = True
        return d

    @classmethod
    def from_dict(cls, op_type: str, d: Mapping) -> "Kernel":
        def ports(xs):
            return tuple(None if x is None else tuple(normalize_dtype(s) for s in str(x).split(",")) for x in xs)
        return cls(op_type, ports(d.get("in", ())), ports(d.get("out", ())), bool(d.get("no_kernel", False)))


def _port_list(info: Mapping, prefix: str) -> tuple[tuple[str, ...] | None, ...]:
    """``input0``, ``input1``, ... (or ``output<i>``) of one ops-info entry, in index order, up to the last
    port present (a gap is an undeclared port)."""
    idx = sorted(int(k[len(prefix):]) for k in info if k.startswith(prefix) and k[len(prefix):].isdigit())
    if not idx:
        return ()
    out: list[tuple[str, ...] | None] = []
    for i in range(idx[-1] + 1):
        port = info.get(f"{prefix}{i}")
        dt = port.get("dtype") if isinstance(port, Mapping) else None
        if not isinstance(dt, str) or not dt.strip():
            out.append(None)
        else:
            out.append(tuple(normalize_dtype(s) for s in dt.split(",")))
    return tuple(out)


def kernel_from_ops_info(op_type: str, info: Mapping) -> Kernel:
    """One ops-info entry (``{"input0": {"dtype": ...}, "output0": ..., "opFile": {"value": ...}}``) as a Kernel."""
    op_file = info.get("opFile")
    no_kernel = isinstance(op_file, Mapping) and str(op_file.get("value", "")).strip().lower() == "null"
    return Kernel(op_type, _port_list(info, "input"), _port_list(info, "output"), no_kernel)


@dataclass(frozen=True)
class KernelTable:
    """The AI Core kernels of one chip (ops-info types -> ``Kernel``).  ``source`` says where they were read."""

    kernels: Mapping[str, Kernel] = field(default_factory=dict)
    source: str = ""

    def __contains__(self, op_type: object) -> bool:
        return op_type in self.kernels

    def __len__(self) -> int:
        return len(self.kernels)

    def __hash__(self) -> int:  # tables are compared by identity of their source (they are large)
        return hash((self.source, len(self.kernels)))

    def get(self, op_type: str) -> Kernel | None:
        return self.kernels.get(op_type)

    def on_ai_core(self, op_type: str) -> bool:
        """True when the type has an AI Core kernel (an ops-info entry)."""
        return op_type in self.kernels

    def types(self) -> frozenset[str]:
        return frozenset(self.kernels)

    def to_dict(self) -> dict:
        return {t: k.to_dict() for t, k in sorted(self.kernels.items())}

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "") -> "KernelTable":
        return cls({t: Kernel.from_dict(t, v) for t, v in d.items()}, source)

    @classmethod
    def from_ops_info(cls, infos: Iterable[tuple[str, Mapping]] | Mapping, source: str = "") -> "KernelTable":
        """From ops-info entries (a mapping op type -> info, or (type, info) pairs; later entries win)."""
        items = infos.items() if isinstance(infos, Mapping) else infos
        return cls({t: kernel_from_ops_info(t, info) for t, info in items if isinstance(info, Mapping)}, source)
