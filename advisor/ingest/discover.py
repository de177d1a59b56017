"""Find every readable Ascend artefact under a directory (see docs/formats.md, "Discovery")."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_STEP = re.compile(r"^step\d+$")
_RANKDIR = re.compile(r"^(rank|proc)\d+$")
_GE = re.compile(r"^ge_onnx_.*\.pbtxt$|^ge_proto_.*\.txt$")
_OPSUM = re.compile(r"^op_summary.*\.csv$")
_PINFO = re.compile(r"^profiler_info(_\d+)?\.json$")


@dataclass
class ProfileSource:
    """One profile: a torch_npu ``*_ascend_pt`` dir, an msprof ``PROF_*`` device, or a bare file."""

    kind: str                          # "torch_npu" | "msprof" | "bare"
    root: Path
    kernels: Path | None = None        # kernel_details.csv or op_summary_*.csv
    op_statistic: Path | None = None
    trace_view: Path | None = None
    profiler_info: Path | None = None
    device: int | None = None          # msprof device_N

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


@dataclass
class Found:
    root: Path
    profiles: list[ProfileSource] = field(default_factory=list)
    ge_dumps: list[Path] = field(default_factory=list)
    dump_roots: list[Path] = field(default_factory=list)     # folders holding step*/rank*|proc*/dump.json (or dump.json)
    run_json: Path | None = None
    mixlist: Path | None = None
    local_error: Path | None = None

    @property
    def empty(self) -> bool:
        return not (self.profiles or self.ge_dumps or self.dump_roots)

    def to_dict(self) -> dict:
        return {"root": str(self.root), "profiles": [p.to_dict() for p in self.profiles],
                "ge_dumps": [str(p) for p in self.ge_dumps], "dump_roots": [str(p) for p in self.dump_roots],
                "run_json": str(self.run_json) if self.run_json else None,
                "mixlist": str(self.mixlist) if self.mixlist else None,
                "local_error": str(self.local_error) if self.local_error else None}


def dump_root_of(dump_json: Path) -> Path:
    """The msprobe dump root of a dump.json: above ``step*/rank*|proc*`` when present."""
    d = dump_json.parent
    if _RANKDIR.match(d.name) and _STEP.match(d.parent.name):
        return d.parent.parent
    if _STEP.match(d.name) or _RANKDIR.match(d.name):
        return d.parent
    return d


def _pick_kernel_file(files: list[Path]) -> Path | None:
    kd = [f for f in files if f.name == "kernel_details.csv"]
    if kd:
        return kd[0]
    ops = sorted(f for f in files if _OPSUM.match(f.name))
    return ops[-1] if ops else None


def discover(path: str | os.PathLike) -> Found:
    """Walk ``path`` (a directory or a single file) once; tensor folders are not descended."""
    root = Path(path)
    found = Found(root)
    if root.is_file():
        n = root.name
        if n == "kernel_details.csv" or _OPSUM.match(n) or n.endswith(".csv"):
            found.profiles.append(ProfileSource("bare", root.parent, kernels=root))
        elif _GE.match(n) or n.endswith((".pbtxt", ".txt")):
            found.ge_dumps.append(root)
        elif n == "dump.json":
            found.dump_roots.append(root.parent)
        elif n == "trace_view.json":
            found.profiles.append(ProfileSource("bare", root.parent, trace_view=root))
        return found
    claimed: set[Path] = set()
    dump_roots: dict[Path, None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(x for x in dirnames if x != "dump_tensor_data" and not x.startswith("."))
        files = sorted(d / f for f in filenames)
        names = set(filenames)
        if d.name.endswith("_ascend_pt"):
            out = d / "ASCEND_PROFILER_OUTPUT"
            ofiles = sorted(out.iterdir()) if out.is_dir() else []
            pinfo = sorted(f for f in files if _PINFO.match(f.name))
            src = ProfileSource("torch_npu", d, kernels=_pick_kernel_file(ofiles),
                                op_statistic=out / "op_statistic.csv" if (out / "op_statistic.csv").is_file() else None,
                                trace_view=out / "trace_view.json" if (out / "trace_view.json").is_file() else None,
                                profiler_info=pinfo[0] if pinfo else None)
            found.profiles.append(src)
            claimed.update(ofiles)
        if d.name in ("mindstudio_profiler_output", "summary") and any(_OPSUM.match(f) for f in names):
            m = re.match(r"device_(\d+)$", d.parent.name) if d.name == "summary" else _only_device(d.parent)
            kf = _pick_kernel_file(files)
            if kf not in claimed:
                found.profiles.append(ProfileSource("msprof", d.parent if d.name == "summary" else d.parent,
                                                    kernels=kf, device=int(m.group(1)) if m else None,
                                                    op_statistic=next((f for f in files if f.name.startswith("op_statistic")), None)))
                claimed.update(files)
        for f in files:
            if f in claimed:
                continue
            n = f.name
            if n == "kernel_details.csv" or _OPSUM.match(n):
                src = ProfileSource("bare", d, kernels=f,
                                    op_statistic=d / "op_statistic.csv" if "op_statistic.csv" in names else None,
                                    trace_view=d / "trace_view.json" if "trace_view.json" in names else None)
                found.profiles.append(src)
                claimed.update(x for x in (f, src.op_statistic, src.trace_view) if x is not None)
            elif _GE.match(n):
                found.ge_dumps.append(f)
            elif n == "dump.json":
                dump_roots[dump_root_of(f)] = None
        if "trace_view.json" in names and d / "trace_view.json" not in claimed:  # a trace without a kernel table
            found.profiles.append(ProfileSource("bare", d, trace_view=d / "trace_view.json"))
            claimed.add(d / "trace_view.json")
        if d == root:
            if "run.json" in names:
                found.run_json = d / "run.json"
            if "mixlist.json" in names:
                found.mixlist = d / "mixlist.json"
            if "local_error.csv" in names:
                found.local_error = d / "local_error.csv"
    found.dump_roots = list(dump_roots)
    return found


def _only_device(prof: Path):
    """The ``device_N`` match of a CANN 8 ``PROF_*`` folder holding exactly one device folder (the rank of
    its ``mindstudio_profiler_output``), else None."""
    try:
        devs = [m for x in prof.iterdir() if (m := re.match(r"device_(\d+)$", x.name)) and x.is_dir()]
    except OSError:
        return None
    return devs[0] if len(devs) == 1 else None


def source_rank(src: ProfileSource) -> int:
    """Rank of a profile: ``rank_id`` in its profiler_info, else the ``_<rank>`` of that file's name, else
    msprof's ``device_N``, else -1 (docs/formats.md, "Discovery")."""
    from .profile import read_profiler_info
    if src.profiler_info is not None:
        r = read_profiler_info(src.profiler_info)["rank"]
        if r >= 0:
            return r
    if src.device is not None:
        return int(src.device)
    return -1


def pick_ge_dump(paths: list[Path]) -> Path | None:
    """The dump to use: the last (highest sequence) ``*_Build`` graph, else the last file."""
    if not paths:
        return None
    build = [p for p in paths if re.search(r"_Build\.(pbtxt|txt)$", p.name)]
    key = lambda p: (int(m.group(1)) if (m := re.search(r"_(\d+)_graph_", p.name)) else -1, p.name)  # noqa: E731
    return sorted(build or paths, key=key)[-1]
