"""Write a run directory in the real NPU file formats (framework-neutral: plain values and arrays in).

Used by the PyTorch emulator (``advisor.emulator``) and the TensorFlow capture (``advisor.tf``).
Layout (docs/formats.md, "Run directory")::

    run.json, mixlist.json
    profile/<name>_ascend_pt/profiler_info.json
    profile/<name>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv, op_statistic.csv
    graph/ge_onnx_00000_graph_0_Build.pbtxt
    dump/<mixed|fp32>/step<i>/rank0/dump.json (+ dump_tensor_data/)
    local_error.csv
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from . import __version__
from .errors import InputError
from .fsutil import atomic_write_json, atomic_write_text, free_backup_name

# kernel_details.csv columns exactly as torch_npu writes them (sample: torch_npu_profile_mstt)
KERNEL_COLUMNS = ["Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "Accelerator Core",
                  "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim",
                  "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
                  "Output Formats", "Context ID"]
OP_STAT_COLUMNS = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                   "Max Time(us)", "Ratio(%)"]
LOCAL_ERROR_COLUMNS = ["name", "type", "low_dtype", "local_rel_l2", "local_cosine", "local_max_abs",
                       "local_nonfinite", "inrnd_rel_l2", "inrnd_nonfinite"]

# canonical dtype name -> kernel_details spelling
KD_DTYPE = {"fp16": "FLOAT16", "bf16": "DT_BF16", "fp32": "FLOAT", "fp64": "DOUBLE", "int64": "INT64",
            "int32": "INT32", "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}
# canonical dtype name -> msprobe dump.json spelling per framework
_MSPROBE_DTYPE = {
    "pytorch": {"fp16": "torch.float16", "bf16": "torch.bfloat16", "fp32": "torch.float32", "fp64": "torch.float64"},
    "tensorflow": {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"},
}


def kd_dtype(name: str) -> str:
    return KD_DTYPE.get(name, name.upper() if name else "UNDEFINED")


def msprobe_dtype(name: str, framework: str = "pytorch") -> str:
    m = _MSPROBE_DTYPE.get(framework, _MSPROBE_DTYPE["pytorch"])
    if name in m:
        return m[name]
    return f"torch.{name}" if framework == "pytorch" else name


def _shape_cell(shapes: Sequence[Sequence[int] | None]) -> str:
    return ";".join("" if s is None else ",".join(str(int(d)) for d in s) for s in shapes)


def _num(x: float) -> Any:
    """JSON-safe statistic (msprobe writes inf/nan as strings)."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def tensor_record(dtype: str, shape: Sequence[int], stats: Sequence[float], requires_grad: bool = False,
                  data_name: str | None = None, framework: str = "pytorch") -> dict:
    """One tensor of a dump.json entry (msprobe layout)."""
    rec = {"type": "torch.Tensor" if framework == "pytorch" else "tensorflow.Tensor",
           "dtype": msprobe_dtype(dtype, framework), "shape": [int(d) for d in shape],
           "Max": _num(stats[0]), "Min": _num(stats[1]), "Mean": _num(stats[2]), "Norm": _num(stats[3]),
           "requires_grad": bool(requires_grad)}
    if data_name is not None:
        rec["data_name"] = data_name
    return rec


def scalar_record(v: Any) -> Any:
    """A non-tensor argument as msprobe records it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        return {"type": "float", "value": _num(v)}
    if isinstance(v, (list, tuple)):
        return [scalar_record(x) for x in v]
    if isinstance(v, str):
        return {"type": "str", "value": v}
    return {"type": type(v).__module__.split(".")[0] + "." + type(v).__name__ if type(v).__module__ != "builtins"
            else type(v).__name__, "value": str(v)}


def versions() -> dict:
    out = {"advisor": __version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch
        out["torch"] = torch.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


class RunWriter:
    """Writes one run directory.  ``meta``: target, mode, soc, mixlist (dict or None), seed, name,
    framework ("pytorch" | "tensorflow"), plus anything else to keep in run.json."""

    def __init__(self, out_dir: str | os.PathLike, meta: dict):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.meta = dict(meta)
        self.meta.setdefault("framework", "pytorch")
        self.meta.setdefault("emulated", True)
        self.meta.setdefault("name", "model")
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(self.meta["name"])) or "model"
        self.framework = self.meta["framework"]
        self.profile_dir = self.out / "profile" / f"{self.name}_ascend_pt"

    # ------------------------------------------------------------------ run.json / mixlist
    def write_run_json(self, **extra: Any) -> Path:
        d = {"target": None, "mode": None, "soc": None, "mixlist": None, "seed": 0}
        d.update(self.meta)
        d.update(extra)
        d.setdefault("versions", versions())
        d["emulated"] = bool(d.get("emulated", True))
        d.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if isinstance(d.get("ops_info"), str) and d["ops_info"]:
            # readers resolve run.json's file names inside the run directory: keep a copy there
            src = Path(d["ops_info"])
            dst = self.out / "ops_info" / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            d["ops_info"] = dst.relative_to(self.out).as_posix()
        p = self.out / "run.json"
        atomic_write_json(p, d)
        return p

    def write_mixlist(self, text: str) -> Path:
        p = self.out / "mixlist.json"
        atomic_write_text(p, text)
        return p

    # ------------------------------------------------------------------ profile
    def write_profile(self, kernels: Iterable[dict], start_us: float = 1_700_000_000_000_000.0) -> Path:
        """kernels: dicts with step, name, type, core, duration_us, in_shapes, in_dtypes, out_shapes,
        out_dtypes (canonical dtype names), optional block_dim.  Writes kernel_details.csv,
        op_statistic.csv and profiler_info.json; returns the ASCEND_PROFILER_OUTPUT folder."""
        out_dir = self.profile_dir / "ASCEND_PROFILER_OUTPUT"
        out_dir.mkdir(parents=True, exist_ok=True)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(KERNEL_COLUMNS)
        t = start_us
        stats: dict[tuple[str, str], list[float]] = {}
        task = 0
        trace = _TraceBuilder()
        for k in kernels:
            dur = float(k["duration_us"])
            if k.get("framework_op"):
                trace.add(k, t, dur)
            n_in, n_out = len(k.get("in_shapes", [])), len(k.get("out_shapes", []))
            w.writerow([k.get("step", 0), 4294967295, task, k.get("stream", 2), k["name"], k["type"], k["core"],
                        f"{t:.3f}\t", f"{dur:.3f}", "0", k.get("block_dim", 24 if k["core"] == "AI_CORE" else 48), 0,
                        _shape_cell(k.get("in_shapes", [])), ";".join(kd_dtype(x) for x in k.get("in_dtypes", [])),
                        ";".join(["FORMAT_ND"] * n_in), _shape_cell(k.get("out_shapes", [])),
                        ";".join(kd_dtype(x) for x in k.get("out_dtypes", [])), ";".join(["FORMAT_ND"] * n_out), "N/A"])
            t += dur + 1.0
            task += 1
            stats.setdefault((k["type"], k["core"]), []).append(dur)
        atomic_write_text(out_dir / "kernel_details.csv", buf.getvalue())
        if trace.events:
            atomic_write_text(out_dir / "trace_view.json", trace.text())
        total = sum(sum(v) for v in stats.values()) or 1.0
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(OP_STAT_COLUMNS)
        for (typ, core), v in sorted(stats.items(), key=lambda kv: -sum(kv[1])):
            s = sum(v)
            w.writerow([typ, core, len(v), f"{s:.3f}", f"{min(v):.3f}", f"{s / len(v):.3f}", f"{max(v):.3f}",
                        f"{100.0 * s / total:.4f}"])
        atomic_write_text(out_dir / "op_statistic.csv", buf.getvalue())
        info = {"config": {"common_config": {"activities": ["ProfilerActivity.NPU"], "record_shapes": True},
                           "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "AiCoreNone"}},
                "start_info": {"syscnt_enable": False, "start_time_ns": int(start_us * 1000)},
                "end_info": {"end_time_ns": int(t * 1000)},
                "rank_id": 0, "emulated": True, "emulator": f"advisor {__version__} CPU emulator",
                "framework": self.framework}
        atomic_write_json(self.profile_dir / "profiler_info.json", info)
        return out_dir

    # ------------------------------------------------------------------ GE graph dump
    def write_graph(self, g, plan=None, notes: list | None = None) -> Path | None:
        """GE-style ONNX text graph dump via advisor.ingest.ge_dump.  A failure never loses the run:
        it returns None and, with ``notes``, says why there."""
        from .ingest.ge_dump import write_ge_onnx
        d = self.out / "graph"
        d.mkdir(parents=True, exist_ok=True)
        try:
            return write_ge_onnx(g, d / "ge_onnx_00000_graph_0_Build.pbtxt", plan)
        except Exception as e:  # noqa: BLE001 - reported in run.json notes instead
            if notes is not None:
                notes.append(f"GE graph dump not written: {e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            return None

    # ------------------------------------------------------------------ msprobe dumps
    def dump_dir(self, which: str, step: int) -> Path:
        return self.out / "dump" / which / f"step{int(step)}" / "rank0"

    def write_dump(self, which: str, step: int, data: dict, files: dict | None = None,
                   level: str = "L2", task: str | None = None) -> Path:
        """dump.json (msprobe layout) for ``which`` ("mixed" | "fp32") and ``step``; ``files`` maps
        data_name -> array/tensor written under dump_tensor_data/ (.pt for PyTorch, .npy otherwise)."""
        d = self.dump_dir(which, step)
        d.mkdir(parents=True, exist_ok=True)
        tdir = d / "dump_tensor_data"
        task = task or ("tensor" if files else "statistics")
        if files:
            tdir.mkdir(exist_ok=True)
            if self.framework == "pytorch":
                import torch
                for fname, arr in files.items():
                    t = arr if isinstance(arr, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(arr))
                    torch.save(t.detach().contiguous().clone(), tdir / fname)
            else:
                for fname, arr in files.items():
                    np.save(tdir / fname, np.asarray(arr), allow_pickle=False)
        dj = {"task": task, "level": level, "framework": self.framework,
              "dump_data_dir": str(tdir.resolve()) if files else None, "data": data}
        atomic_write_json(d / "dump.json", dj)
        atomic_write_json(d / "stack.json", {})
        atomic_write_json(d / "construct.json", {})
        return d / "dump.json"

    # ------------------------------------------------------------------ local error
    def write_local_error(self, rows: Iterable[dict]) -> Path:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=LOCAL_ERROR_COLUMNS, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        p = self.out / "local_error.csv"
        atomic_write_text(p, buf.getvalue())
        return p


class _TraceBuilder:
    """trace_view.json as torch_npu writes it, for kernels that name the framework op that launched
    them: a ``cpu_op`` per kernel on the Python process (forward thread 1; backward thread 2 inside
    one ``autograd::engine::evaluate_function: backward`` op per step), the kernel on the "Ascend
    Hardware" process, and an ``async_npu`` flow from the op to the kernel.  Kernel ``ts`` = its
    ``Start Time(us)`` in kernel_details.csv, exactly."""

    def __init__(self):
        self.events: list[dict] = []
        self._bwd: dict | None = None
        self._step = None
        self._id = 0

    def add(self, k: dict, t: float, dur: float) -> None:
        if not self.events:
            self.events += [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Python"}},
                            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Ascend Hardware"}}]
        bwd = k.get("phase") == "bwd"
        if k.get("step") != self._step or not bwd:
            self._bwd = None
            self._step = k.get("step")
        tid = 2 if bwd else 1
        if bwd and self._bwd is None:
            self._bwd = {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: backward",
                         "pid": 1, "tid": tid, "ts": f"{t - 0.9:.3f}", "dur": 0.0, "args": {}}
            self.events.append(self._bwd)
        self._id += 1
        self.events += [
            {"ph": "X", "cat": "cpu_op", "name": k["framework_op"], "pid": 1, "tid": tid, "ts": f"{t - 0.5:.3f}",
             "dur": 0.3, "args": {"Sequence number": self._id}},
            {"ph": "X", "name": k["name"], "pid": 2, "tid": 2, "ts": f"{t:.3f}", "dur": round(dur, 3),
             "args": {"Task Type": k.get("core", "")}},
            {"ph": "s", "cat": "async_npu", "id": str(self._id), "name": "async_npu", "pid": 1, "tid": tid,
             "ts": f"{t - 0.4:.3f}"},
            {"ph": "f", "cat": "async_npu", "id": str(self._id), "name": "async_npu", "pid": 2, "tid": 2,
             "ts": f"{t:.3f}", "bp": "e"},
        ]
        if self._bwd is not None:
            self._bwd["dur"] = round(t + dur - float(self._bwd["ts"]), 3)

    def text(self) -> str:
        return "[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in self.events) + "\n]\n"


def prepare_run_dir(out: str | os.PathLike) -> tuple[Path, str | None]:
    """Create the run directory ``out``.  A previous run directory there is kept as ``<out>.bak[N]``;
    a non-empty folder that is not a run directory is refused (never overwrite a user's files).
    Returns (directory, path of the kept previous run or None)."""
    p = Path(out)
    kept = None
    if p.exists() and not p.is_dir():
        raise InputError(p, "--out exists and is not a directory")
    if p.is_dir() and any(p.iterdir()):
        if not (p / "run.json").is_file():
            raise InputError(p, "--out exists, is not empty and is not a run directory; choose a new folder")
        p = p.resolve()
        cand = free_backup_name(p)
        shutil.move(str(p), str(cand))
        kept = str(cand)
    p.mkdir(parents=True, exist_ok=True)
    return p, kept


def worst_local(a: dict | None, b: dict) -> dict:
    """Merge two steps' local-error rows of one op: the worst of each figure."""
    if a is None:
        return b
    out = dict(a)
    for k in ("local_rel_l2", "local_max_abs", "inrnd_rel_l2", "local_nonfinite", "inrnd_nonfinite"):
        vals = [v for v in (a.get(k), b.get(k)) if v is not None and v == v]
        nan = any(v is not None and v != v for v in (a.get(k), b.get(k)))
        out[k] = float("nan") if nan else (max(vals) if vals else None)
    cos = [v for v in (a.get("local_cosine"), b.get("local_cosine")) if v is not None]
    out["local_cosine"] = min(cos) if cos else None
    return out


def capture_settings(mode: str, dump: str | None, mixlist: Any, soc: str, ops_info: Any):
    """What both emulators check and resolve before a capture: (low dtype or None, the Mixlist or
    None, effective lists, notes).  A mixlist is applied only in the mixed modes, as GE does."""
    from . import semantics
    from .mixlist import effective, load as load_mixlist
    from .oplists import load_lists
    try:
        _, low = semantics.mode_info(mode)
    except ValueError as e:
        raise InputError(None, str(e)) from None
    if dump not in (None, "tensors", "stats"):
        raise InputError(None, f"--dump must be tensors or stats, not {dump!r}")
    ml = load_mixlist(mixlist) if isinstance(mixlist, (str, os.PathLike)) else mixlist
    base = load_lists(soc, ops_info)
    notes: list[str] = []
    if ml is not None and not semantics.uses_mixlist(mode):
        notes.append(f"mode {mode} does not apply a mixlist (GE applies it only in the mixed modes): ignored")
    return low, ml, (effective(base, ml) if semantics.uses_mixlist(mode) else base), notes
