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
import errno
import io
import json
import math
import os
import platform
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from . import __version__
from .errors import InputError, OutputError
from .fsutil import (atomic_write_json, atomic_write_text, backup_names, check_out_dir, keep_dir_as_backup,
                     make_out_dir)

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
    "onnx": {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"},
}
_TENSOR_TYPE = {"pytorch": "torch.Tensor", "tensorflow": "tensorflow.Tensor", "onnx": "onnx.Tensor"}


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
    rec = {"type": _TENSOR_TYPE.get(framework, "tensorflow.Tensor"),
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
    framework ("pytorch" | "tensorflow" | "onnx"), plus anything else to keep in run.json.  ``final_dir``: where
    the folder will be once complete (a ``StagedRunDir``'s ``out``), for the absolute paths files name."""

    def __init__(self, out_dir: str | os.PathLike, meta: dict, final_dir: str | os.PathLike | None = None):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.final = Path(os.path.abspath(final_dir if final_dir is not None else out_dir))
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
        if d.get("ops_info"):
            # readers resolve run.json's file names inside the run directory: keep a copy there (several files:
            # each its own, in order, a name used twice numbered)
            kept = []
            for i, src in enumerate(map(Path, [d["ops_info"]] if isinstance(d["ops_info"], str) else d["ops_info"])):
                dst = self.out / "ops_info" / (src.name if not any(Path(k).name == src.name for k in kept)
                                               else f"{i}_{src.name}")
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                kept.append(dst.relative_to(self.out).as_posix())
            d["ops_info"] = kept[0] if isinstance(d["ops_info"], str) else kept
        p = self.out / "run.json"
        atomic_write_json(p, d)
        return p

    def write_overrides(self, overrides: Any, keep_dtype: Any = None, customize_dtypes: Any = None) -> dict:
        """Keep the per-op override files the run applied inside the run directory (``keep_dtype.cfg``,
        ``customize_dtypes.cfg``: the user's files verbatim, else written from ``overrides``) and return
        the run.json fields naming them (relative; readers resolve them inside the run directory)."""
        out: dict = {"keep_dtype": None, "customize_dtypes": None}
        if overrides is None or overrides.is_empty():
            return out
        for key, src, text in (("keep_dtype", keep_dtype, overrides.keep_dtype_text()),
                               ("customize_dtypes", customize_dtypes, overrides.customize_text())):
            dst = self.out / f"{key}.cfg"
            if isinstance(src, (str, os.PathLike)) and src:
                shutil.copyfile(src, dst)
            elif text:
                atomic_write_text(dst, text)
            else:
                continue
            out[key] = dst.name
        return out

    def write_mixlist(self, text: str) -> None:
        atomic_write_text(self.out / "mixlist.json", text)

    def write_policy(self, doc: dict) -> None:
        """precision_policy.json: the policy a torch_npu capture applied (run.json ``policy`` names it)."""
        atomic_write_json(self.out / "precision_policy.json", doc)

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
                "framework": self.framework, "ACL_PRECISION_MODE": self.meta.get("acl_precision_mode")}  # ingest.engine
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
              "dump_data_dir": str(self.final / tdir.relative_to(self.out)) if files else None, "data": data}
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


class StagedRunDir:
    """A run directory built in a hidden folder beside ``out`` (``.<name>.<pid>.<random>.partial``) and
    renamed into place when complete, so an interrupted capture (kill -9, a crash, a full disk) leaves
    ``out`` as it was.  An existing non-empty ``out`` -- a previous run or any other folder -- is kept
    as ``<out>.bak`` (``.bak1``, ...), never deleted; ``kept`` names it and ``progress.note`` (or
    ``progress``) hears it.  A context manager: the partial folder is removed on any exception.

    Refused with one OutputError line: ``out`` is a file (or a FIFO, device, symlink to one), the
    current folder, the home folder or a folder containing either (moving it aside would pull the
    ground from under the user), or its parent cannot be created or written."""

    def __init__(self, out: str | os.PathLike, progress: Any = None):
        self.out = Path(out)
        self.progress = progress
        self.kept: str | None = None
        self._reserved: Path | None = None
        check_run_out(self.out)
        make_out_dir(self.out.parent)
        remove_partial_runs(self.out)
        while True:
            cand = self.out.parent / f".{self.out.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
            try:
                os.mkdir(cand)
                break
            except FileExistsError:
                continue
            except OSError as e:
                raise OutputError(self.out.parent, f"cannot create a folder here: {e.strerror or e}") from None
        self.path = cand

    def __enter__(self) -> "StagedRunDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
            return
        self.abort()
        if isinstance(exc, OSError):  # writing the run failed (a full disk, a vanished folder): one line
            raise OutputError(exc.filename or self.out, f"cannot write the run directory: {exc.strerror or exc}") \
                from None

    def backup_notes(self) -> list[str]:
        """Claim the backup name of a non-empty ``out`` now (just before run.json is written), so
        run.json can say where the previous contents went; [] when there is nothing to keep."""
        if self._reserved is None and _non_empty(self.out):
            for cand in backup_names(self.out):
                try:
                    os.mkdir(cand)
                except FileExistsError:
                    continue
                self._reserved = cand
                return [f"previous contents of the output folder kept in {cand}"]
        return []

    def commit(self) -> Path:
        """Move a non-empty ``out`` aside and rename the complete run into place (atomic)."""
        try:
            for _ in range(100):  # another capture into the same --out may land first: keep it too
                if _non_empty(self.out):
                    self._keep_out()
                try:
                    os.rename(self.path, self.out)   # also replaces an empty folder
                    break
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                        raise
            else:
                raise OutputError(self.out, "other processes keep writing this folder; the run is left in "
                                            f"{self.path}")
        except OSError as e:
            self.abort()
            raise OutputError(self.out, f"cannot move the finished run into place: {e.strerror or e}") from None
        finally:
            if self._reserved is not None:
                _rmdir_quiet(self._reserved)
        if self.kept:
            say = getattr(self.progress, "note", self.progress)
            if say is not None:
                say(f"kept the previous contents of {self.out} as {self.kept}")
        return self.out

    def _keep_out(self) -> None:
        reserved, self._reserved = self._reserved, None
        if reserved is not None and not os.path.islink(self.out):
            try:
                os.rename(self.out, reserved)   # replaces the empty folder claimed for it
                self.kept = str(reserved)
                return
            except OSError as e:
                _rmdir_quiet(reserved)
                if e.errno == errno.ENOENT:
                    return
        elif reserved is not None:
            _rmdir_quiet(reserved)
        kept = keep_dir_as_backup(self.out)
        if kept is not None:
            self.kept = str(kept)

    def abort(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._reserved is not None:
            _rmdir_quiet(self._reserved)
            self._reserved = None


def keep_previous_out(out: str | os.PathLike) -> Path | None:
    """Move a non-empty ``out`` aside as ``<out>.bak[N]`` (a folder that is written in place, e.g. a
    fresh tune's ``--out``); the kept path, or None when there was nothing to keep."""
    return keep_dir_as_backup(Path(out)) if _non_empty(Path(out)) else None


def remove_partial_runs(out: str | os.PathLike, pid: int | None = None) -> None:
    """Remove the partial folders of captures into ``out`` that can no longer finish: those of process
    ``pid`` (killed by a timeout), or, without ``pid``, of processes that no longer exist."""
    out = Path(out)
    prefix = f".{out.name}."
    try:
        names = os.listdir(out.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".partial")):
            continue
        owner = name[len(prefix):].split(".")[0]
        if not owner.isdigit():
            continue
        if (pid is not None and int(owner) == pid) or (pid is None and not _alive(int(owner))):
            shutil.rmtree(out.parent / name, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _non_empty(p: Path) -> bool:
    if os.path.islink(p):
        return True
    try:
        with os.scandir(p) as it:
            return next(it, None) is not None
    except (FileNotFoundError, NotADirectoryError):
        return False


def _rmdir_quiet(p: Path) -> None:
    try:
        os.rmdir(p)
    except OSError:
        pass


def check_run_out(out: str | os.PathLike) -> None:
    """What ``StagedRunDir`` refuses, checked before any work (one OutputError line)."""
    out = Path(out)
    try:
        st = os.stat(out)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise OutputError(out, f"cannot use as --out: {e.strerror or e}") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(out, "exists and is not a directory; --out must be a folder")
    check_out_dir(out.parent)
    real = Path(os.path.realpath(out))
    for keep in {Path(os.path.realpath(os.getcwd())), Path(os.path.realpath(os.path.expanduser("~")))}:
        if real == keep or real in keep.parents:
            raise OutputError(out, "is the current or home folder, or contains it; choose a new folder for --out")


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


def override_settings(keep_dtype: Any = None, customize_dtypes: Any = None):
    """The per-op overrides of a capture (``advisor.overrides.Overrides``) from --keep_dtype /
    --customize_dtypes file paths (or an Overrides given as ``keep_dtype``); InputError on a bad file."""
    from .overrides import NO_OVERRIDES, Overrides, load
    if isinstance(keep_dtype, Overrides):
        return keep_dtype.merged(load(None, customize_dtypes)) if customize_dtypes else keep_dtype
    if not keep_dtype and not customize_dtypes:
        return NO_OVERRIDES
    return load(keep_dtype or None, customize_dtypes or None)


def check_uniform_ports(plan: Any, target: Any = None) -> None:
    """The PyTorch and TensorFlow emulators run an op with one dtype for its float inputs and one for its float
    outputs (``Plan.exec_dtypes``: an fp16-in / fp32-out cube op is such a pair).  A --customize_dtypes entry giving
    one op's float inputs (or outputs) different dtypes, or leaving an output of an fp16-in / fp32-out op empty, is
    emulated only for ONNX models (per port, ``Plan.port_dtypes``); refused here in one line."""
    floats = ("fp16", "bf16", "fp32", "fp64")
    for i, cd in (plan.ctx.custom or {}).items():
        p, q = plan.precision_list[i], plan.emit_list[i]
        ins, outs = {d for d in cd.inputs if d in floats}, {d for d in cd.outputs if d in floats}
        n_out = sum(str(d) in floats for d in plan.compiled.graph.nodes[plan.compiled.order[i]].get("out_dtypes") or ())
        if ins - {p} or outs - {q} or (p != q and len(cd.outputs) < max(n_out, 1)):
            raise InputError(target, f"customize_dtypes gives op {plan.compiled.names[i]!r} different dtypes per "
                                     f"port ({', '.join(sorted(ins | outs | {p}))}); this emulator runs an op with "
                                     "one dtype for its inputs and one for its outputs: per-port dtypes are emulated "
                                     "for ONNX models only")


# precision_mode_v2 spellings among advisor's modes (the others are precision_mode ones): ATC words its refusal by
# the option that was set
_MODE_V2 = frozenset({"mixed_float16", "mixed_bfloat16", "origin", "fp16", "cube_fp16in_fp32out"})


def check_mixlist_mode(mode: str, mixlist: Any) -> None:
    """Refuse a mixlist in a mode that does not apply one, as ATC and the TF adapter do (one InputError line naming
    the file and ATC's words): hicann/ge ``compiler/api/aclgrph/option_utils.cc:81-86, 1384-1410``
    (``CheckModifyMixlistParamValid``, called by ATC ``api/atc/main_impl.cc:867`` and sessions
    ``api/session/session/inner_session.cc:197``); hicann/tensorflow ``tf_adapter/util/npu_attrs.cc:2424-2476``."""
    from . import semantics
    if mixlist is None:
        return
    try:
        if semantics.uses_mixlist(mode):
            return
    except ValueError as e:
        raise InputError("--mode", str(e)) from None
    where = mixlist if isinstance(mixlist, (str, os.PathLike)) else getattr(mixlist, "source", "") or "--mixlist"
    if mode in _MODE_V2:
        atc = ("Modify_mixlist is set. Please ensure that precision_mode_v2 is set to any of {mixed_float16, "
               "mixed_bfloat16, mixed_hif8(if available)}.")
    else:
        atc = ("Modify_mixlist is set. Please ensure that precision_mode is set to any of {allow_mix_precision, "
               "allow_mix_precision_fp16, allow_mix_precision_bf16(if available}.")
    raise InputError(where, f"mode {mode} applies no mixlist and ATC refuses one there: \"{atc}\" (the TF adapter "
                            "refuses it too); drop --mixlist or use mixed_float16 / mixed_bfloat16")


def capture_settings(mode: str, dump: str | None, mixlist: Any, soc: str, ops_info: Any, cann: str | None = None):
    """What both emulators check and resolve before a capture: (low dtype or None, the Mixlist or
    None, effective lists, notes).  A mixlist in a mode that applies none is refused (``check_mixlist_mode``)."""
    from . import semantics
    from .mixlist import effective, load as load_mixlist
    from .oplists import load_lists
    try:
        _, low = semantics.mode_info(mode)
    except ValueError as e:
        raise InputError(None, str(e)) from None
    if dump not in (None, "tensors", "stats"):
        raise InputError(None, f"--dump must be tensors or stats, not {dump!r}")
    check_mixlist_mode(mode, mixlist)
    ml = load_mixlist(mixlist) if isinstance(mixlist, (str, os.PathLike)) else mixlist
    base = load_lists(soc, ops_info, cann)
    return low, ml, effective(base, ml), []
