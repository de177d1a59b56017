"""One typed analysis per run, built once and handed to every stage (compare, recommend, diff, replay, tune).

``analyze(path)`` reads the run (``ingest.load_run``, the only reader), resolves the effective lists once
(``effective_lists``: chip defaults or a CANN ops-info file, then the run's mixlist), compiles the op graph and
plans it (``semantics``, the only module deciding precisions) and holds the shared ``Tolerance``.  What is
expensive and not always needed is computed on first use and kept: the measured per-step final metrics and
verdict (compare), the attribution, the replay recording of the FP32 run, the time model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from . import mixlist as mx
from . import semantics
from .compare.dumps import DumpView, as_steps
from .compare.tolerance import Tolerance, Verdict
from .errors import InputError
from .oplists import DEFAULT_SOC, OpLists, load_lists, run_cann
from .costmodel import TimeModel, build_time_model
from .numerics import IEEE, Numerics, resolve as resolve_numerics
from .semantics import Compiled, Plan, cpu_mask, low_mask


def effective_lists(meta: Mapping, run_mixlist: mx.Mixlist | None, soc: str | None = None,
                    ops_info: Any = None, cann: str | None = None) -> tuple[OpLists, OpLists]:
    """(chip defaults, effective lists of the run): ``soc``/``ops_info``/``cann`` override run.json's (a run.json
    without ``cann`` keeps CANN 8.1.RC1's tables: ``oplists.run_cann``), the run's mixlist is applied on top.
    The one place that resolves a run's lists."""
    defaults = load_lists(soc or meta.get("soc") or DEFAULT_SOC, ops_info or meta.get("ops_info"),
                          run_cann(cann, meta))
    return defaults, mx.effective(defaults, run_mixlist)


def node_positions(c: Compiled, keys: Iterable[Any]) -> np.ndarray:
    """The compiled index of each key (-1: no such node), matched against the node key, else the node's
    ``name`` attribute; vectorised (``Index.get_indexer``).  How measured per-op rows (local_error.csv,
    attribution ops) find their nodes."""
    g = c.graph
    nodes = pd.Index([str(k) for k in c.order])
    names = pd.Index([str(g.nodes[k].get("name", k)) for k in c.order])
    ks = pd.Index([str(k) for k in keys])
    pos = nodes.get_indexer(ks) if nodes.is_unique else np.full(len(ks), -1)
    if (pos < 0).any() and names.is_unique:
        pos = np.where(pos < 0, names.get_indexer(ks), pos)
    return np.asarray(pos, dtype=np.int64)


@dataclass
class LocalErrors:
    """local_error.csv aligned to the compiled graph (NaN / False: not measured): each op re-executed alone in
    low precision on the FP32 run's inputs (``local``), and in FP32 on inputs rounded to low (``inrnd``)."""

    local: np.ndarray
    local_nf: np.ndarray
    inrnd: np.ndarray
    inrnd_nf: np.ndarray
    inp: None = None               # a measured run's received / output errors: not in local_error.csv
    out: None = None

    @property
    def have_local(self) -> bool:
        return bool(np.isfinite(self.local).any() or self.local_nf.any())


@dataclass
class Analysis:
    """Everything the stages need about one run (see the module docstring)."""

    run: Any                          # ingest.Run
    defaults: OpLists                 # chip default lists (or the --ops-info file's)
    run_mixlist: mx.Mixlist | None    # the mixlist the run used
    lists: OpLists                    # the run's effective lists
    mode: str
    compiled: Compiled
    plan: Plan                        # the measured plan: what the run executed
    tolerance: Tolerance
    notes: list[str] = field(default_factory=list)
    numerics: Numerics = IEEE         # how the run's chip rounds (overflow mode, HF32): what replay applies
    memo: dict = field(default_factory=dict, repr=False, compare=False)   # judged / attribution per steps

    # ------------------------------------------------------------------ basic facts
    @property
    def path(self) -> Path:
        return Path(self.run.path)

    @property
    def graph(self):
        return self.compiled.graph

    @property
    def low_dtype(self) -> str:
        return semantics.mode_info(self.mode)[1] or "fp16"

    @cached_property
    def targets(self) -> dict[int, DumpView]:
        return as_steps(self.run.target_dump)

    @cached_property
    def goldens(self) -> dict[int, DumpView]:
        return as_steps(self.run.golden_dump)

    @property
    def steps(self) -> list[int]:
        """Steps with both a target and a golden dump."""
        return sorted(set(self.targets) & set(self.goldens))

    @property
    def has_dumps(self) -> bool:
        return bool(self.steps)

    @property
    def loss_scale(self) -> float:
        """The static loss scale the run's backward used (run.json ``loss_scale``; 1 when not recorded): its
        dumped parameter gradients are that many times the true ones."""
        s = (self.run.meta or {}).get("loss_scale")
        return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 else 1.0

    # ------------------------------------------------------------------ plans
    def lists_with(self, mixlist: mx.Mixlist | None) -> OpLists:
        """Effective lists of a candidate mixlist (relative to the chip defaults, like every mixlist)."""
        return mx.effective(self.defaults, mixlist)

    def plan_of(self, lists: OpLists) -> Plan:
        """The plan of other effective lists, incrementally from the measured one."""
        if lists == self.plan.lists:
            return self.plan
        return self.compiled.what_if(self.plan, lists)

    # ------------------------------------------------------------------ measured
    def judged(self, steps: Iterable[int] | None = None) -> tuple[list[dict], dict | None, list[str]]:
        """(per-step items the verdict is judged on: final outputs, loss, every gradient; the training
        signals; notes) of the measured run, exactly as compare judges it.  Computed once per set of steps:
        tune's verdict, the attribution and recommend's measured verdict share it."""
        from .compare.judge import judged_steps
        st = self.steps if steps is None else [s for s in steps if s in self.steps]
        key = ("judged", tuple(st))
        if key not in self.memo:
            self.memo[key] = judged_steps(self.targets, self.goldens, st, self.tolerance, low_dtype=self.low_dtype)
        return self.memo[key]

    def final_metrics(self, steps: Iterable[int] | None = None) -> list[dict]:
        """Per-step items the measured run is judged on (``judged``'s first element)."""
        return self.judged(steps)[0]

    def verdict(self, steps: Iterable[int] | None = None) -> Verdict:
        """The measured verdict (it always wins over any prediction)."""
        return self.tolerance.judge(self.final_metrics(steps))

    def attribution(self, steps: Iterable[int] | None = None):
        """compare's attribution of the measured run (``compare.attribution.Attribution``) on ``steps``, computed
        once per set of steps, on the run's judged items (``judged``) where they are the attribution's own: every
        step has the model outputs and the mode a low dtype."""
        from .compare.attribution import attribute
        from .replay import MODEL_OUTPUT
        key = ("attribution", None if steps is None else tuple(sorted(set(steps))))
        if key not in self.memo:
            st = self.steps if steps is None else sorted(set(steps))
            own = (semantics.mode_info(self.mode)[1] is not None and set(st) <= set(self.steps)
                   and all(MODEL_OUTPUT in self.targets[s].entries for s in st))
            try:
                self.memo[key] = attribute(self.run, self.tolerance, steps, plan=self.plan,
                                           judged=self.judged(st) if own else None)
            except ValueError as e:
                raise InputError(self.path, str(e)) from None
        return self.memo[key]

    # ------------------------------------------------------------------ replay
    @cached_property
    def recording(self):
        """The FP32 run as a replayable program (``replay.Recording``), or None without a golden dump.  A run
        dumped with tensors for some ops only is replayed from its measured values (``replay_scope``)."""
        if not self.goldens:
            return None
        from .replay import Recording, precisions
        rec = Recording.from_golden(self.goldens, self.graph, str(self.path))
        if rec.partial() and self.targets:
            from .replay_scope import scoped
            rec = scoped(rec, self.targets, precisions(self.plan), self.graph)
        return rec

    def replay(self, plan: Plan, steps: Iterable[int] | None = None):
        """Replay a candidate plan on the recorded FP32 run (``replay.ReplayResult``)."""
        if self.recording is None:
            raise InputError(self.path, "no FP32 tensor dump to replay (dump/fp32 or a golden msprobe dump)")
        from .replay import precisions
        return self.recording.replay(precisions(plan), steps, numerics=self.numerics)

    # ------------------------------------------------------------------ time
    @cached_property
    def times(self) -> TimeModel:
        """THE time model of the run's graph (costmodel), anchored to its measured kernel times."""
        return build_time_model(self.compiled, self.low_dtype, ran_low=low_mask(self.plan))

    def low_share(self, plan: Plan) -> float:
        """Predicted low-precision share of float kernel time under ``plan`` (costmodel.kernel_low_share's
        quantity; anchored to the measured kernel times where the profile has them)."""
        return self.times.share(low_mask(plan), cpu_mask(plan))

    @cached_property
    def local_errors(self) -> LocalErrors | None:
        """The run's local_error.csv on the graph's nodes (emulator runs), None without one."""
        df = self.run.local_errors
        if not isinstance(df, pd.DataFrame) or not len(df) or "name" not in df.columns:
            return None
        n = len(self.compiled)
        pos = node_positions(self.compiled, df["name"].astype(str))
        ok = pos >= 0

        def col(name: str) -> np.ndarray:
            out = np.full(n, np.nan)
            if name in df.columns:
                out[pos[ok]] = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)[ok]
            return out
        loc, inr = col("local_rel_l2"), col("inrnd_rel_l2")
        return LocalErrors(np.where(np.isinf(loc), np.nan, loc), (np.nan_to_num(col("local_nonfinite")) > 0) | np.isinf(loc),
                           np.where(np.isinf(inr), np.nan, inr), (np.nan_to_num(col("inrnd_nonfinite")) > 0) | np.isinf(inr))

    @cached_property
    def measured_low_share(self) -> float | None:
        """The low-precision share measured in the run's profile (all steps)."""
        from .costmodel import kernel_low_share
        k = self.run.kernels
        if k is None or not len(k) or "precision" not in k.columns:
            return None
        return kernel_low_share(k["precision"].astype(str).tolist(), k["duration_us"].astype(float).tolist())


def analyze(run: Any, *, tolerance: Tolerance | None = None, mixlist: mx.Mixlist | None = None,
            soc: str | None = None, ops_info: str | None = None, mode: str | None = None,
            rank: int | None = None, step: int | None = None, progress: Any = None,
            overrides: Any = None, cann: str | None = None, overflow_mode: str | None = None,
            allow_hf32: str | None = None) -> Analysis:
    """Build the Analysis of a run directory (or an already loaded ``ingest.Run``).  ``mixlist`` replaces
    the run's own mixlist (the list the run is said to have used), ``overrides`` its per-op overrides
    (run.json's keep_dtype / customize_dtypes files); ``soc``/``ops_info``/``cann``/``mode`` override run.json's,
    and ``overflow_mode``/``allow_hf32`` its ``overflow_mode``/``allow_hf32`` (absent there: the chip's default,
    ``numerics.resolve``)."""
    from .ingest.run import Run, load_run
    if isinstance(run, (str, Path)):
        p = Path(run)
        if not p.exists():
            raise InputError(p, "no such run directory")
        if not p.is_dir():
            raise InputError(p, "expected a run / profile directory")
        run = load_run(p, rank=rank, step=step, progress=progress)
    elif not isinstance(run, Run):
        raise TypeError(f"analyze() takes a run directory or an ingest.Run, not {type(run).__name__}")
    meta = dict(run.meta or {})
    run_ml = mixlist if mixlist is not None else run.mixlist
    if run_ml is None and isinstance(meta.get("mixlist"), Mapping):
        run_ml = mx.parse_obj(dict(meta["mixlist"]), f"{run.path}/run.json mixlist")
    defaults, lists = effective_lists(meta, run_ml, soc, ops_info, cann)
    mode = mode or meta.get("mode") or semantics.DEFAULT_MODE
    try:
        semantics.mode_info(mode)
    except ValueError as e:
        raise InputError(run.path, str(e)) from None
    recording = None
    notes: list[str] = []
    if (run.graph is None or run.graph.number_of_nodes() == 0) and run.golden_dump:
        # a dump-only run (e.g. msprobe tensor dumps): the graph is the dump's own dataflow
        from .replay import Recording, graph_from_recording
        recording = Recording.from_golden(run.golden_dump, None, str(run.path))
        run.graph = graph_from_recording(recording)
        notes.append("op graph built from the FP32 tensor dump's dataflow (no GE graph dump or profile)")
    if run.graph is None or run.graph.number_of_nodes() == 0:
        raise InputError(run.path, "no op graph: the run has neither a GE graph dump nor kernel_details.csv "
                                   "nor an FP32 tensor dump")
    try:
        compiled = semantics.compile_graph(run.graph)
    except ValueError as e:          # a cyclic graph
        raise InputError(run.path, str(e)) from None
    if overrides is None:
        from .overrides import from_files_in
        overrides = from_files_in(meta)
    numerics, nnotes = resolve_numerics(soc or meta.get("soc") or DEFAULT_SOC, overflow_mode, allow_hf32, meta)
    a = Analysis(run, defaults, run_ml, lists, mode, compiled, compiled.plan(lists, mode, overrides),
                 tolerance or Tolerance(), notes + nnotes, numerics)
    if recording is not None:
        a.recording = recording      # built above; the cached property is not computed twice
    return a

