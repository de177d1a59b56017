"""``load_run``: one run directory (emulator capture or real Ascend output) -> graph, kernels, dumps.

For emulator run directories (docs/architecture.md) the graph is the GE dump's (true dataflow),
joined to kernel rows by name; ``dump/mixed`` is the target and ``dump/fp32`` the golden.  For
real directories whatever exists is used: no GE dump -> the graph is inferred from the kernels
(``infer.graph_from_kernels``); one msprobe root -> target only (a root whose path names
``fp32``/``golden``/``bench`` is the golden).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd

from ..errors import InputError
from ..fsutil import check_user_file, read_user_json, resolve_inside
from ..graph import no_gc, normalize_dtype
from ..progress import Progress
from .common import shape_ints
from .discover import Found, discover, pick_ge_dump, source_rank
from .engine import EngineInfo, decide, of_dumps, run_engine
from .ge_dump import read_ge_dump
from .infer import first_iteration, graph_from_kernels
from .msprobe import Dump, dump_files, dump_steps, load_dumps
from .profile import read_kernels, read_op_statistic


@dataclass
class Run:
    path: Path
    graph: nx.DiGraph | None
    kernels: pd.DataFrame                       # kernel frame (all steps; the chosen rank, or all ranks)
    target_dump: dict[int, Dump] | None = None  # step -> Dump
    golden_dump: dict[int, Dump] | None = None
    meta: dict = field(default_factory=dict)    # run.json
    local_errors: pd.DataFrame | None = None
    sources: dict = field(default_factory=dict)  # what was read from where
    mixlist: Any = None
    op_statistic: pd.DataFrame | None = None
    ranks: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    rank: int | None = None
    step: int | None = None
    found: Found | None = None
    trace: dict | None = None                   # read_trace_view() of the first readable trace_view.json
    engine_info: EngineInfo | None = None       # what the run ran on and why (ingest.engine.decide)

    @property
    def engine(self) -> str:
        """torch_npu | ge: ``engine_info``'s (``ingest.engine.decide``), else ``run_engine`` (run.json's, else ge)."""
        return self.engine_info.engine if self.engine_info is not None else run_engine(self.meta, self.path)


# ------------------------------------------------------------------------------ FLOPs

def _fallback_flops(op_type: str, ins: list[list[int]], outs: list[list[int]]) -> float:
    def numel(s):
        n = 1
        for d in s:
            n *= max(int(d), 0)
        return n
    out_n = numel(outs[0]) if outs else 0
    if op_type.startswith(("MatMul", "BatchMatMul")) and ins and ins[0]:
        return 2.0 * out_n * int(ins[0][-1])
    return float(out_n)


def _flops_fn():
    try:
        from ..costmodel import estimate_flops
        return estimate_flops
    except ImportError:
        return _fallback_flops


def _bytes_fn():
    try:
        from ..costmodel import estimate_bytes
        return estimate_bytes
    except ImportError:
        return None


def annotate_flops(g: nx.DiGraph) -> None:
    """Set ``flops`` (and ``bytes``) on op nodes with shapes (advisor.costmodel.estimate_flops /
    estimate_bytes when present, else a minimal estimator; cached per signature)."""
    fn = _flops_fn()
    bfn = _bytes_fn()
    cache: dict = {}
    bcache: dict = {}
    for n, a in g.nodes(data=True):
        if a.get("role", "op") != "op" or "in_shapes" not in a and "out_shapes" not in a:
            continue
        key = (a.get("type", ""), tuple(a.get("in_shapes") or ()), tuple(a.get("out_shapes") or ()))
        v = cache.get(key)
        if v is None:
            ins = [shape_ints(s) for s in key[1]]
            outs = [shape_ints(s) for s in key[2]]
            try:
                v = float(fn(key[0], ins, outs))
            except Exception:  # noqa: BLE001 - an estimate must never break ingest
                v = float(_fallback_flops(key[0], ins, outs))
            cache[key] = v
        a["flops"] = v
        if bfn is not None:
            bkey = key[1:] + (tuple(a.get("in_dtypes") or ()), tuple(a.get("out_dtypes") or ()))
            b = bcache.get(bkey)
            if b is None:
                try:
                    b = float(bfn([shape_ints(x) for x in key[1]], [shape_ints(x) for x in key[2]],
                                  list(bkey[2]), list(bkey[3])))
                except Exception:  # noqa: BLE001
                    b = 0.0
                bcache[bkey] = b
            a["bytes"] = b


# ------------------------------------------------------------------------------ loading

# run.json fields advisor reads, with the JSON types they may have (None = null)
_META_TYPES: dict[str, tuple[type, ...]] = {
    "target": (str,), "mode": (str,), "precision_mode": (str,), "soc": (str,), "ops_info": (str, list),
    "mixlist": (str, dict), "emulated": (bool,), "name": (str,), "framework": (str,),
    "keep_dtype": (str,), "customize_dtypes": (str,), "cann": (str,), "lists_source": (str,),
    "overflow_mode": (str,), "allow_hf32": (str,), "engine": (str,), "amp": (str,), "acl_precision_mode": (str,),
    "policy": (str,),
}
_META_PATHS = ("ops_info", "mixlist", "keep_dtype", "customize_dtypes", "policy")   # resolved inside the run dir


def engine_of(path: str | Path) -> EngineInfo:
    """The engine of the run at ``path`` (a run directory, profiler output or one file; ``ingest.engine.decide``),
    read without building its graph: run.json, the first kernel table, a dump.json's head."""
    found = discover(Path(path))
    return decide(found, read_run_json(found.run_json) if found.run_json else {})


def read_run_json(p: Path) -> dict:
    """run.json as a dict whose known fields have their JSON types; ``ops_info`` / ``mixlist``
    file names are resolved inside the run directory (absolute paths there, an InputError if one
    points outside it)."""
    d = read_user_json(p, "a run.json")
    if not isinstance(d, dict):
        raise InputError(p, "expected a JSON object in run.json")
    for k, types in _META_TYPES.items():
        v = d.get(k)
        if v is not None and (not isinstance(v, types) or (bool not in types and isinstance(v, bool))):
            want = " or ".join({str: "a string", dict: "an object", bool: "true/false", list: "an array of file "
                                "names"}[t] for t in types)
            raise InputError(p, f"field {k!r} is {type(v).__name__} {str(v)[:40]}; expected {want} or null")
    for k in _META_PATHS:
        v = d.get(k)
        if isinstance(v, list):      # ops_info: several files
            if not all(isinstance(x, str) and x for x in v):
                raise InputError(p, f"field {k!r} must be an array of file names")
            d[k] = [_inside(p, x, k) for x in v]
        elif isinstance(v, str) and v:
            d[k] = _inside(p, v, k)
    return d


def _inside(p: Path, name: str, key: str) -> str:
    """A run.json file name resolved inside the run directory (InputError naming run.json if it points outside)."""
    try:
        return str(resolve_inside(p.parent, name, what=f"field {key!r}"))
    except InputError as e:
        raise InputError(p, e.problem.replace("the folder", "the run directory")) from None


LOCAL_ERROR_TEXT = ("name", "type", "low_dtype")   # every other local_error.csv column is a number


def read_local_errors(p: Path) -> pd.DataFrame:
    """local_error.csv (docs/architecture.md): ``name``, ``type``, ``low_dtype`` and numbers
    (``inf``/``nan`` are numbers here: a local error may overflow); text in a number column is an
    InputError naming line and column."""
    check_user_file(p, "a local_error.csv")
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(p, f"cannot read local_error.csv ({type(e).__name__})") from None
    if "name" not in df.columns:
        raise InputError(p, "local_error.csv lacks the 'name' column")
    for c in (c for c in df.columns if c not in LOCAL_ERROR_TEXT):
        cell = df[c].str.strip()
        v = pd.to_numeric(cell.where(cell != "", "nan"), errors="coerce")
        bad = v.isna() & ~cell.str.lower().isin(["", "nan"])
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise InputError(p, f"line {i + 2}, column {c!r}: {cell.iloc[i][:40]!r} is not a number")
        df[c] = v.astype("int64") if cell.str.fullmatch(r"[-+]?\d{1,18}").all() else v.astype(float)  # as read_csv
    return df


def _per_step(root: Path, rank: int | None, step: int | None) -> dict[int, Dump]:
    """step -> Dump of one rank of a dump root (``rank``, else the lowest); only that rank's files are read."""
    files = dump_files(root, rank) if rank is not None else {}
    if not any(r == rank for (_, r) in files):  # not there: every rank's files, the lowest is read
        files = dump_files(root)
    ranks = sorted({r for (_, r) in files})
    want = rank if rank is not None and rank in ranks else (ranks[0] if ranks else -1)
    keep = {k: f for k, f in sorted(files.items()) if k[1] == want and (step is None or k[0] == step)}
    return {max(s, 0): d for (s, _), d in load_dumps(keep).items()}


def is_golden_root(base: Path, root: Path) -> bool:
    """A dump root below ``base`` whose path (from ``base`` on) names fp32/golden/bench: the golden run."""
    parts = [x.lower() for x in root.parts[len(base.parts) - (0 if base.is_dir() else 1):]]
    words = {w for x in parts for w in re.split(r"[_\-.]", x)}
    return bool(words & {"fp32", "golden", "bench", "benchmark"})


def load_run(path: str | Path, rank: int | None = None, step: int | None = None, progress: Progress = None,
             found: Found | None = None) -> Run:
    """Read everything under ``path`` into a Run (see module docstring).  ``rank``/``step`` select
    one rank / one step; by default all kernel rows are kept and the graph is built from the
    lowest rank's first step.  ``progress(msg)`` is told each stage as it starts.  ``found``: what to
    read instead of discovering ``path`` (``ingest.ranks`` hands each rank only its own files)."""
    say = progress or (lambda msg: None)
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    found = found if found is not None else discover(p)
    sources: dict[str, Any] = {}
    meta, mix = _read_settings(found, sources)
    kernels, trace, opstats = _read_profiles(found, sources, say)
    kernels, ranks, steps = _select_kernels(p, kernels, rank, step)
    sources["kernels"] = [str(s.kernels) for s in found.profiles if s.kernels is not None]
    graph_rank = rank if rank is not None else (ranks[0] if ranks else None)
    gk = kernels if graph_rank is None else kernels[kernels["rank"] == graph_rank]
    pos = sorted(s for s in pd.unique(gk["step"]) if s >= 0) if len(gk) else []
    graph_step = step if step is not None else (int(pos[0]) if pos else None)
    graph, graph_step = _read_graph(found, gk, step, graph_step, sources, say, meta)
    target, golden = _read_dumps(found, p, rank, step, sources, say)
    if graph is not None and target:
        _link_dumps(graph, target)
    local = read_local_errors(found.local_error) if found.local_error else None
    if found.local_error:
        sources["local_errors"] = str(found.local_error)
    return Run(path=p, graph=graph, kernels=kernels, target_dump=target or None, golden_dump=golden or None,
               meta=meta, local_errors=local, sources=sources, mixlist=mix,
               op_statistic=pd.concat(opstats, ignore_index=True) if opstats else None,
               ranks=ranks, steps=steps, rank=graph_rank, step=graph_step, found=found, trace=trace,
               engine_info=decide(found, meta, kernels))


def _read_settings(found: Found, sources: dict) -> tuple[dict, Any]:
    """run.json and the run's mixlist (each noted in ``sources``)."""
    meta = read_run_json(found.run_json) if found.run_json else {}
    if found.run_json:
        sources["meta"] = str(found.run_json)
    mix = None
    if found.mixlist:
        from .. import mixlist as mx
        mix = mx.load(found.mixlist)
        sources["mixlist"] = str(found.mixlist)
    return meta, mix


def _read_profiles(found: Found, sources: dict, say) -> tuple[pd.DataFrame, dict | None, list[pd.DataFrame]]:
    """(kernel frame of every profile, the first readable trace, op_statistic frames): kernels with
    framework ops from trace_view.json where one exists beside them."""
    frames = []
    trace = None
    opstats = []
    for src in found.profiles:
        if src.kernels is None:
            if src.trace_view is not None and trace is None:  # a trace alone: its framework ops, no kernel rows
                say(f"reading {src.trace_view}")
                trace = _read_trace(src.trace_view, sources)
            continue
        r = source_rank(src)
        say(f"reading {src.kernels}")
        frame = read_kernels(src.kernels, rank=r)
        if src.trace_view is not None:
            say(f"reading {src.trace_view} and linking kernels to framework ops")
            tv = _read_trace(src.trace_view, sources)
            if tv is not None:
                frame = _attach_trace(frame, tv)
                if trace is None:
                    trace = tv
        frames.append(frame)
        if src.op_statistic is not None:
            opstats.append(read_op_statistic(src.op_statistic).assign(rank=r))
    if frames:
        kernels = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    else:
        kernels = pd.DataFrame({c: pd.Series(dtype=object) for c in
                                ("step", "rank", "name", "type", "core", "start_us", "duration_us", "precision")})
    return kernels, trace, opstats


def _select_kernels(p: Path, kernels: pd.DataFrame, rank: int | None, step: int | None
                    ) -> tuple[pd.DataFrame, list[int], list[int]]:
    """(the kernel rows of ``rank``/``step`` when given, the ranks found, the steps of those ranks);
    a rank or step the profile does not have is an InputError."""
    ranks = sorted(int(x) for x in pd.unique(kernels["rank"])) if len(kernels) else []
    if rank is not None and ranks and rank not in ranks:
        raise InputError(p, f"no profile for rank {rank}; ranks found: {', '.join(map(str, ranks))}")
    if rank is not None and len(kernels):
        kernels = kernels[kernels["rank"] == rank].reset_index(drop=True)
    steps = sorted(int(x) for x in pd.unique(kernels["step"])) if len(kernels) else []
    if step is not None and steps and step not in steps:
        raise InputError(p, f"no kernels for step {step}; steps found: {', '.join(map(str, steps))}")
    if step is not None and len(kernels):
        kernels = kernels[kernels["step"] == step].reset_index(drop=True)
    return kernels, ranks, steps


def _read_graph(found: Found, gk: pd.DataFrame, step: int | None, graph_step: int | None, sources: dict, say,
                meta: dict | None = None) -> tuple[nx.DiGraph | None, int | None]:
    """(op graph, the step it stands for): the GE dump's with the kernels' timings joined (one graph
    for every step; a dump from before GE's graph fusion is fused first, ``advisor.fusion``), else inferred
    from the kernels of ``graph_step`` (already-fused kernels: no fusion pass runs); FLOPs annotated."""
    ge = pick_ge_dump(found.ge_dumps)
    graph = None
    if ge is not None:
        say(f"reading GE graph dump {ge}")
        graph = read_ge_dump(ge)
        sources["graph"] = str(ge)
        graph = _fused(graph, ge, meta or {}, sources)
        if len(gk):
            # one graph for every step (GE builds it once): timings averaged over the steps kept
            _join_kernels(graph, gk)
            graph_step = step
    elif len(gk):
        one = first_iteration(gk) if graph_step is None else gk  # no step ids: one iteration when they repeat
        say(f"building the op graph from {len(one) if graph_step is None else int((gk['step'] == graph_step).sum()):,} "
            "kernels (edges inferred)")
        graph = graph_from_kernels(one, step=graph_step)
        sources["graph"] = "inferred from kernels (execution order + shapes)" + (
            f"; the first of the {len(gk) / len(one):,.1f} identical iterations of a table without step ids"
            if len(one) < len(gk) else "")
    if graph is not None:
        with no_gc():
            annotate_flops(graph)
    return graph, graph_step


def _fused(graph: nx.DiGraph, path: Path, meta: dict, sources: dict) -> nx.DiGraph:
    """The graph GE judges: a pre-fusion dump (its stage, or an emulator run from before fusion was modelled)
    goes through ``advisor.fusion`` for the run's chip; a post-fusion one as it is."""
    from .. import fusion
    if not fusion.is_pre_fusion_dump(path, graph, meta):
        return graph
    from ..oplists import DEFAULT_SOC, load_lists
    soc = meta.get("soc") or DEFAULT_SOC
    try:
        lists = load_lists(soc, meta.get("ops_info"))
    except (InputError, ValueError):
        lists = None
    fz = fusion.fuse(graph, soc, lists, training=bool(meta.get("training")) if "training" in meta else None)
    stage = fusion.dump_stage(path)
    why = f"stage {stage} is before GE's graph fusion" if stage in fusion.PRE_FUSION_STAGES else \
        "an emulator run written before graph fusion was modelled"
    sources["fusion"] = {"applied": True, "why": why, **fusion.summary(fz)}
    return fz.graph


def _read_dumps(found: Found, p: Path, rank: int | None, step: int | None, sources: dict, say
                ) -> tuple[dict[int, Dump] | None, dict[int, Dump] | None]:
    """(target, golden) msprobe dumps per step: the first root whose path names fp32/golden/bench
    is the golden, the first other one the target."""
    target = golden = None
    roots = list(found.dump_roots)
    gold = [r for r in roots if is_golden_root(p, r)]
    targ = [r for r in roots if not is_golden_root(p, r)]
    if targ:
        say(f"reading dump {targ[0]}")
        target = _per_step(targ[0], rank, step)
        sources["target_dump"] = str(targ[0])
    if gold:
        say(f"reading dump {gold[0]}")
        golden = _per_step(gold[0], rank, step)
        sources["golden_dump"] = str(gold[0])
    return target, golden


def _link_dumps(graph: nx.DiGraph, target: dict[int, Dump]) -> None:
    """``dump`` attribute of every node with a ``<name>.forward``/``.backward`` entry in the target."""
    names = set()
    for d in target.values():
        names.update(d.entries)
    for n, a in graph.nodes(data=True):
        nm = a.get("name", n)
        if f"{nm}.forward" in names or f"{nm}.backward" in names:
            a["dump"] = nm


def run_from_dumps(target: str | Path, golden: str | Path) -> Run:
    """A Run of two msprobe dumps alone (a dump.json, its rank folder or a root with step*/rank*|proc*/):
    target and golden per step, no graph, no profile."""
    return run_of_dumps(target, dump_steps(target), dump_steps(golden))


def run_of_dumps(path: str | Path, t: dict[int, Dump], g: dict[int, Dump], rank: int | None = None) -> Run:
    """A Run of target and golden dumps (step -> Dump) alone: no graph, no profile."""
    if not set(t) & set(g):
        raise InputError(path, f"target steps {sorted(t)} and golden steps {sorted(g)} do not overlap")
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in ("step", "rank", "name", "type", "core", "start_us",
                                                                 "duration_us", "precision")})
    return Run(path=Path(path), graph=None, kernels=empty, target_dump=t, golden_dump=g,
               steps=sorted(set(t) & set(g)), rank=rank, ranks=[] if rank is None else [rank],
               engine_info=of_dumps(t.values()))


TRACE_MAX_BYTES = 512 << 20  # a bigger trace_view.json is not linked (json parsing would dominate)


def _read_trace(path: Path, sources: dict) -> dict | None:
    """read_trace_view, or None with a note in ``sources`` (the trace is optional enrichment: a
    broken or huge one must not stop the analysis that does not need it)."""
    from .trace import read_trace_view
    try:
        size = path.stat().st_size
    except OSError as e:
        sources.setdefault("notes", []).append(f"{path}: cannot read ({e.strerror or e}); kernels not linked to framework ops")
        return None
    if size > TRACE_MAX_BYTES:
        sources.setdefault("notes", []).append(
            f"{path}: {size / 2**20:,.0f} MiB is over {TRACE_MAX_BYTES >> 20} MiB; kernels not linked to framework ops")
        return None
    try:
        tv = read_trace_view(path)
    except InputError as e:
        sources.setdefault("notes", []).append(f"{e}; kernels not linked to framework ops")
        return None
    sources.setdefault("trace_view", []).append(str(path))
    return tv


def _attach_trace(frame: pd.DataFrame, tv: dict) -> pd.DataFrame:
    """Kernel rows + framework_op / phase / call_stack of the op that launched them (joined on the
    kernel name and its exact start time)."""
    from .trace import kernel_links
    links = kernel_links(tv)
    if links.empty or not len(frame):
        return frame
    links = links.astype({"name": object, "start_ns": "int64"})
    key = frame[["name", "start_ns"]].astype({"name": object})
    m = key.merge(links, on=["name", "start_ns"], how="left")
    out = frame.copy()
    for c in ("framework_op", "phase", "call_stack"):
        out[c] = m[c].to_numpy()
    return out


def eager_names(g: nx.DiGraph, k: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows named as eager torch_npu names them (``aclnnMul_MulAiCore_Mul`` for every Mul) renamed to the
    graph nodes they are: nodes carrying a ``kernel_name`` (an emulated torch_npu run), the k-th row of a name in a
    step is the k-th node of that kernel name in execution order.  Rows of a GE-named profile (name = node) and
    rows no node claims keep their names."""
    kn = [(a.get("order", float("inf")), a["kernel_name"], a.get("name", n)) for n, a in g.nodes(data=True)
          if isinstance(a.get("kernel_name"), str)]
    if not kn or not len(k):
        return k
    seen: dict[str, int] = {}
    alias = {}
    for _, kname, node in sorted(kn, key=lambda x: (x[0] if isinstance(x[0], (int, float)) else float("inf"))):
        i = seen.get(kname, 0)
        seen[kname] = i + 1
        alias[f"{kname}#{i}"] = node
    occ = k.groupby(["step", "name"], sort=False).cumcount().astype(str)
    key = k["name"].astype(str) + "#" + occ
    out = k.copy()
    out["name"] = key.map(alias).fillna(k["name"]).to_numpy(dtype=object)
    return out


def _join_kernels(g: nx.DiGraph, k: pd.DataFrame) -> None:
    """Timing and observed dtypes from kernel rows onto GE-dump nodes with the same name
    (duration = mean over the steps present; other fields from the first row); eager torch_npu names first
    renamed to their nodes (``eager_names``)."""
    if not len(k):
        return
    k = eager_names(g, k)
    agg = k.groupby(["name", "step"], sort=False)["duration_us"].sum().groupby(level=0, sort=False).mean()
    first = k.drop_duplicates("name")
    info = dict(zip(first["name"].to_numpy(dtype=object),
                    zip(first["core"].to_numpy(dtype=object), first["precision"].to_numpy(dtype=object),
                        first["in_dtypes"].to_numpy(dtype=object), first["out_dtypes"].to_numpy(dtype=object))))
    fw = {}
    if "framework_op" in first.columns:
        has = first["framework_op"].notna().to_numpy()
        fw = {nm: {"framework_op": o, "phase": ph, "call_stack": cs} for nm, o, ph, cs in
              zip(first["name"].to_numpy(dtype=object)[has], first["framework_op"].to_numpy(dtype=object)[has],
                  first["phase"].to_numpy(dtype=object)[has], first["call_stack"].to_numpy(dtype=object)[has])}
    dur = agg.to_dict()
    for n, a in g.nodes(data=True):
        nm = a.get("name", n)
        if nm not in info and a.get("members"):
            # a kernel fused from pre-fusion ops whose rows the profile has (a run profiled per op): one kernel
            # taking their summed time, the last member's facts
            ms = [m for m in a["members"] if m in info]
            if ms:
                info[nm] = info[ms[-1]]
                dur[nm] = float(sum(dur[m] for m in ms))
        if nm in info:
            core, prec, idt, odt = info[nm]
            a["duration_us"] = float(dur[nm])
            a["core"] = core
            a["precision_observed"] = prec
            if nm in fw:
                a.update(fw[nm])
            ki = [normalize_dtype(x) for x in str(idt).split(";")] if idt and idt != "N/A" else []
            ko = [normalize_dtype(x) for x in str(odt).split(";")] if odt and odt != "N/A" else []
            # in/out dtypes "as executed" come from the profile; the GE dump's stay as ge_*
            if ki:
                a["ge_in_dtypes"] = a.get("in_dtypes", [])
                a["in_dtypes"] = ki
            if ko:
                a["ge_out_dtypes"] = a.get("out_dtypes", [])
                a["out_dtypes"] = ko
