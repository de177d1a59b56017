"""The engine a run ran on -- torch_npu eager or GE -- decided from what the run directory holds (docs/formats.md,
"Which engine a run ran on").

* run.json's ``engine`` decides an advisor capture; a run.json without the key (written before advisor knew torch_npu
  eager) is ``ge``, so existing run directories keep their advice.
* A real run (no run.json engine): a GE graph dump means GE.  Otherwise the kernel names tell: torch_npu's eager
  op-api path launches kernels named ``aclnn<Api>_<Kernel>`` (``aclnnMul_MulAiCore_Mul``) and its aclop path
  single-op kernels named ``<Type><counter>`` (``Mul81``, ``MatMul91``), while GE names a kernel after its graph node
  (``bert/encoder/.../MatMul``, ``trans_Cast_3``).  A profile whose AI Core / vector kernels are mostly of those
  two forms is ``torch_npu``; any other profile is ``ge`` (a torchair graph or an ONNX / TF model).
* With no kernel table, an msprobe dump of PyTorch (``framework`` "pytorch", else a ``"type": "torch...`` record:
  msprobe's own ``detect_framework_by_dump_json``) is ``torch_npu``: msprobe's PyTorch adapter hooks eager APIs
  (``Functional.linear.0.forward``, ``Tensor.__mul__.1.forward``).
* ``ACL_PRECISION_MODE`` (torch_npu eager accepts ``allow_fp32_to_fp16`` / ``must_keep_origin_dtype``,
  ``torch_npu/npu/npu_config.py``) is read where the profile records it: a key of that name anywhere in
  ``profiler_info*.json`` or in ``profiler_metadata.json`` (what ``prof.add_metadata`` writes).  torch_npu's profiler
  does not record it by itself (``torch_npu/profiler/profiler_interface.py`` ``_dump_profiler_info``): without it the
  chip's default applies, as torch_npu sets it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fsutil import read_user_json
from .discover import Found, ProfileSource

ACL_KEY = "ACL_PRECISION_MODE"
EAGER_SHARE = 0.5          # choice: more than half of a profile's AI Core / vector kernels named as eager names them
_COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")
_FRAMEWORK_RE = re.compile(rb'"framework"\s*:\s*"([A-Za-z_]+)"')
_TYPE_RE = re.compile(r'"type"\s*:\s*"(torch|mindspore)')
_HEAD = 1 << 16


@dataclass(frozen=True)
class EngineInfo:
    """What a run ran on and why: ``engine`` torch_npu | ge, ``why`` (one line, names the evidence),
    ``acl_precision_mode`` and the file it was read from (None: not recorded; the chip's default applies)."""

    engine: str
    why: str
    acl_precision_mode: str | None = None
    acl_source: str | None = None
    declared: bool = False          # run.json names it (an advisor capture): a fact, not an inference

    def to_dict(self) -> dict:
        return {"engine": self.engine, "why": self.why, "acl_precision_mode": self.acl_precision_mode,
                "acl_precision_mode_source": self.acl_source, "declared": self.declared}


# ---------------------------------------------------------------------- kernel names
def eager_kernels(names: Iterable[Any], types: Iterable[Any], cores: Iterable[Any] | None = None) -> tuple[int, int, int]:
    """(aclnn-named, aclop-named ``<Type><counter>``, all) kernels among the compute kernels of a profile (HCCL,
    MemSet-like bookkeeping of other cores are not counted)."""
    n = pd.Series(list(names), dtype=object).astype(str)
    t = pd.Series(list(types), dtype=object).astype(str)
    if cores is not None:
        c = pd.Series(list(cores), dtype=object).astype(str).str.upper()
        keep = c.isin(_COMPUTE_CORES).to_numpy()
        n, t = n[keep], t[keep]
    if not len(n):
        return 0, 0, 0
    aclnn = n.str.startswith("aclnn").to_numpy()
    na, ta = n.to_numpy(dtype=object), t.to_numpy(dtype=object)
    aclop = np.fromiter((not a and nm.startswith(ty) and nm[len(ty):].isdigit() and len(nm) > len(ty)
                         for nm, ty, a in zip(na, ta, aclnn)), bool, len(na))
    return int(aclnn.sum()), int(aclop.sum()), int(len(n))


def _names_verdict(counts: tuple[int, int, int], where: str) -> EngineInfo | None:
    aclnn, aclop, total = counts
    if not total:
        return None
    if (aclnn + aclop) > EAGER_SHARE * total:
        return EngineInfo("torch_npu", f"{where}: {aclnn + aclop:,} of {total:,} compute kernels have eager torch_npu "
                                       f"names ({aclnn:,} aclnn*, {aclop:,} <Type><n>)")
    return EngineInfo("ge", f"{where}: {total - aclnn - aclop:,} of {total:,} compute kernels are named after graph "
                            "nodes (GE)")


# ---------------------------------------------------------------------- ACL_PRECISION_MODE
def _find_key(obj: Any, key: str, depth: int = 0) -> Any:
    if depth > 6:
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k).upper() == key:
                return v
        for v in obj.values():
            r = _find_key(v, key, depth + 1)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj[:64]:
            r = _find_key(v, key, depth + 1)
            if r is not None:
                return r
    return None


def profile_acl_mode(src: ProfileSource) -> tuple[str | None, Path | None]:
    """(ACL_PRECISION_MODE, the file naming it) of one profile: its profiler_info, else profiler_metadata.json beside
    it; a value torch_npu does not accept is an InputError naming the file."""
    from ..semantics.torch_npu import ACL_MODES
    files = [src.profiler_info] if src.profiler_info is not None else []
    meta = src.root / "profiler_metadata.json"
    if meta.is_file():
        files.append(meta)
    for f in files:
        v = _find_key(read_user_json(f, f"a {f.name}"), ACL_KEY)
        if v is None:
            continue
        if not isinstance(v, str) or v.strip() not in ACL_MODES:
            raise InputError(f, f"{ACL_KEY} {str(v)[:40]!r} is not one torch_npu accepts "
                                f"({' or '.join(ACL_MODES)})")
        return v.strip(), f
    return None, None


# ---------------------------------------------------------------------- msprobe dumps
def dump_framework(dump_json: Path) -> str | None:
    """pytorch | mindspore | None of an msprobe dump.json, as msprobe's ``detect_framework_by_dump_json`` decides
    it: the ``framework`` key, else the first ``"type": "torch..."`` / ``"mindspore..."`` record."""
    try:
        with open(dump_json, "rb") as f:
            head = f.read(_HEAD)
            m = _FRAMEWORK_RE.search(head)
            if m and m.group(1).decode() in ("pytorch", "mindspore"):
                return m.group(1).decode()
            f.seek(0)
            for line in f:
                t = _TYPE_RE.search(line.decode("utf-8", "replace"))
                if t:
                    return "pytorch" if t.group(1) == "torch" else "mindspore"
    except OSError:
        return None
    return None


def _first_dump_json(root: Path) -> Path | None:
    if root.is_file():
        return root
    direct = root / "dump.json"
    if direct.is_file():
        return direct
    return next(iter(sorted(root.glob("step*/*/dump.json"))), None) or next(iter(sorted(root.glob("*/dump.json"))),
                                                                             None)


# ---------------------------------------------------------------------- the decision
def run_engine(meta: dict | None, path: Any = None) -> str:
    """The engine a run directory was made for: run.json's ``engine``; a run.json without the key (written before
    advisor knew torch_npu eager) reads as ``ge``, so its advice does not change."""
    from ..semantics.torch_npu import ENGINES
    e = (meta or {}).get("engine") or "ge"
    if e not in ENGINES:
        raise InputError(path or "run.json", f"engine {e!r} is not torch_npu or ge")
    return e


def decide(found: Found, meta: dict | None, kernels: pd.DataFrame | None = None) -> EngineInfo:
    """The engine of a run (module docstring).  ``kernels``: the run's kernel frame when already read (else the first
    kernel table is read, and checked, as ``load_run`` reads it: a malformed one is the same one-line error)."""
    meta = meta or {}
    if found.run_json is not None and (meta.get("engine") or meta.get("emulated") or meta.get("target")):
        e = run_engine(meta, found.run_json)
        why = f"{found.run_json.name} says so" if meta.get("engine") else \
            f"{found.run_json.name} names no engine (an advisor run written before torch_npu eager: ge)"
        return EngineInfo(e, why, meta.get("acl_precision_mode") if e == "torch_npu" else None,
                          str(found.run_json) if meta.get("acl_precision_mode") else None, declared=True)
    if found.ge_dumps:
        return EngineInfo("ge", f"a GE graph dump ({found.ge_dumps[0].name})")
    info = _from_profiles(found, kernels)
    if info is None:
        info = _from_dumps(found)
    if info is None:
        return EngineInfo("ge", "nothing names the engine (no kernel table, no PyTorch dump): ge")
    if info.engine != "torch_npu":
        return info
    for src in found.profiles:
        mode, f = profile_acl_mode(src)
        if mode is not None:
            return EngineInfo(info.engine, info.why, mode, str(f))
    return info


def _from_profiles(found: Found, kernels: pd.DataFrame | None) -> EngineInfo | None:
    from .profile import read_kernels
    srcs = [s for s in found.profiles if s.kernels is not None]
    if not srcs:
        return None
    if kernels is not None and len(kernels):
        counts = eager_kernels(kernels["name"], kernels["type"], kernels["core"] if "core" in kernels else None)
        where = srcs[0].kernels.name if len(srcs) == 1 else f"{len(srcs)} kernel tables"
        return _names_verdict(counts, where)
    frame = read_kernels(srcs[0].kernels)
    return _names_verdict(eager_kernels(frame["name"], frame["type"], frame["core"]), srcs[0].kernels.name)


def _dump_verdict(fw: str | None, f: Path) -> EngineInfo | None:
    if fw == "pytorch":
        return EngineInfo("torch_npu", f"an msprobe dump of PyTorch eager APIs ({f.name}, framework pytorch)")
    if fw is not None:
        return EngineInfo("ge", f"an msprobe dump of {fw} ({f.name}): not torch_npu eager")
    return None


def _from_dumps(found: Found) -> EngineInfo | None:
    for root in found.dump_roots:
        f = _first_dump_json(root)
        info = _dump_verdict(dump_framework(f), f) if f is not None else None
        if info is not None:
            return info
    return None


def of_dumps(dumps: Iterable[Any]) -> EngineInfo:
    """The engine of a run of msprobe dumps alone (``ingest.msprobe.Dump``s): the first one's framework (its
    ``framework`` field, else as ``dump_framework`` reads the file)."""
    for d in dumps:
        fw = d.framework if d.framework in ("pytorch", "mindspore") else dump_framework(d.path)
        info = _dump_verdict(fw, d.path)
        if info is not None:
            return info
    return EngineInfo("ge", "nothing names the engine (no kernel table, no PyTorch dump): ge")
