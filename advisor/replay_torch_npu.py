"""Replay of a torch_npu run under a precision policy: the run's step-0 trace (torch_npu_trace.json) re-planned by
``semantics.torch_npu.plan`` under the policy, and the run's FP32 tensor dump re-executed op by op under that plan
(``replay.Recording.replay``, exactly as the emulator's mixed run executes a plan: ``emulator.engine.execute_op``).

No rule is decided here: the policy's effect on each op is ``semantics.torch_npu``'s (a policy naming an aten op
gets that op's autocast frames first, ``semantics.torch_npu_trace.with_op_frames``, as a capture with the policy
records them).  An op that had to run again but could not (``ReplayResult.not_replayed``) keeps its FP32 outputs
and the result says "replayed, incomplete": the number is then estimated for those ops.

A real torch_npu run has no torch_npu_trace.json: ``policy_run`` reads it (refused in one line without an FP32 tensor
dump, ``missing_for_policy``; planned on the dump's dataflow even beside a profile) and ``real_run_trace`` rebuilds
the trace from that dump (``ingest.msprobe_trace``), with notes for what the dump cannot say.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Hashable, Iterable

import numpy as np

from .errors import InputError
from .ingest.msprobe_trace import (dtype_disagreements, half_parameters, low_outputs, measured_low_dtype, summary,
                                   trace_of_dump)
from .ingest.run import load_run
from .precision_policy import PolicyRules, PrecisionPolicy, read_policy
from .semantics import torch_npu as S
from .semantics.torch_npu_trace import FILE as TRACE_FILE, read_trace, with_op_frames

REPLAYED = "replayed"
INCOMPLETE = "replayed, incomplete: estimated for the ops not replayed (their FP32 outputs used)"
TIME_HOW = "estimated (cost model anchored to the profile's kernel times)"


def config_of(meta: dict, where: Any) -> S.AmpConfig:
    """The run's AmpConfig from run.json (``amp``, ``low_dtype``, ``soc``, ``acl_precision_mode``)."""
    try:
        return S.AmpConfig(str(meta.get("amp") or "autocast"), str(meta.get("low_dtype") or "fp16"),
                           str(meta.get("soc") or "ascend910b"), meta.get("acl_precision_mode"))
    except InputError as e:
        raise InputError(where, f"run.json: {e}") from None


def run_policy(run_dir: Path, meta: dict, cfg: S.AmpConfig) -> PrecisionPolicy:
    """The policy the run was captured with (its precision_policy.json), else the empty one of its amp."""
    if meta.get("policy"):
        p = run_dir / str(meta["policy"])
        if p.is_file():
            return read_policy(p)
    return PrecisionPolicy(amp=cfg.amp, dtype=cfg.dtype)


NO_TRACE_TENSORS = ("{have}, and policy advice replays each candidate policy from the FP32 run's tensors: dump the "
                    "FP32 run and the mixed run with msprobe (PrecisionDebugger task \"tensor\", level \"mix\" for "
                    "module names; the FP32 one in a folder whose name says fp32 or golden) and give the folder "
                    "holding both, or capture the workload with advisor capture --engine torch_npu")


def missing_for_policy(run: Any) -> str | None:
    """Why a torch_npu run without torch_npu_trace.json cannot be re-planned from its dumps (None: it can): the
    advice needs an FP32 tensor dump (a profile alone, or statistics only, holds no values to replay)."""
    gold = run.golden_dump or {}
    if any(d.has_tensors for d in gold.values()):
        return None
    if gold:
        have = "its FP32 dump holds statistics only (msprobe task \"statistics\")"
    elif run.target_dump:
        stats = "" if any(d.has_tensors for d in run.target_dump.values()) else ", statistics only,"
        have = f"it has one dump (the mixed run's){stats} and no FP32 one beside it"
    elif run.kernels is not None and len(run.kernels):
        have = ("it has a profile only (kernel names, dtypes and times; no tensor values and no data flow between "
                "API calls)")
    else:
        have = "it has no msprobe dump"
    return NO_TRACE_TENSORS.format(have=have)


def policy_run(path: str | Path, step: int | None = None) -> Any:
    """The ``ingest.Run`` a torch_npu run's policy replay reads: a capture as it is; a real run (no
    torch_npu_trace.json) refused in one line when it has no FP32 tensor dump (``missing_for_policy``), and planned on
    the dump's dataflow even when a profile is beside it (the profile's kernels are not the dump's API calls)."""
    run = load_run(path, step=step)
    info = run.engine_info
    if (Path(path) / TRACE_FILE).is_file() or (info is not None and info.declared):
        return run                  # a capture (TorchNpuReplay refuses one written before the trace existed)
    missing = missing_for_policy(run)
    if missing is not None:
        why = f" (read as a torch_npu run: {info.why})" if info is not None else ""
        raise InputError(path, f"no {TRACE_FILE}{why}: {missing}; --engine ge gives GE list advice instead")
    run.graph = None            # analyze builds the op graph from the FP32 dump's dataflow
    return run


def real_run_trace(analysis: Any, meta: dict, amp: str | None = None) -> tuple[Any, dict]:
    """(``ingest.msprobe_trace.DumpTrace`` of the first step, run.json-like settings: ``amp`` (given, else autocast),
    ``low_dtype`` (the mixed dump's), the chip and ACL_PRECISION_MODE read from the profile) of a real torch_npu
    run with an FP32 tensor dump; an InputError saying what is missing otherwise."""
    run = analysis.run
    path = Path(analysis.path)
    info = getattr(run, "engine_info", None)
    if info is not None and info.declared:
        raise InputError(path, f"no {TRACE_FILE}: this torch_npu capture (written before captures saved their trace) "
                               "cannot be re-planned under a policy; capture the workload again with advisor capture "
                               "--engine torch_npu")
    why = f" (read as a torch_npu run: {info.why})" if info is not None else ""
    missing = missing_for_policy(run)
    if missing is None and not str(analysis.graph.graph.get("source", "")).startswith("msprobe dump"):
        missing = ("its op graph comes from its profile, whose kernels are not the dump's API calls: read it with "
                   "replay_torch_npu.policy_run")
    if missing is not None:
        raise InputError(path, f"no {TRACE_FILE}{why}: {missing}; --engine ge gives GE list advice instead")
    step = first_step(analysis)
    target = (run.target_dump or {}).get(step)
    dt = trace_of_dump(analysis.graph, run.golden_dump[step])
    if run.kernels is not None and len(run.kernels):
        dt.notes.append("the op graph is the FP32 dump's dataflow, not the profile's kernels (they are not the "
                        "dump's API calls): times are the cost model's")
    low = measured_low_dtype(target)
    given = bool(amp or meta.get("amp"))
    amp = amp or meta.get("amp") or "autocast"
    whence = " (the mixed dump's)" if low else " (the mixed dump holds no fp16/bf16 tensor)"
    if amp.startswith("apex") and low == "bf16":
        low, whence = "fp16", " (Apex casts to float16 only; the mixed dump holds bf16)"
    out = dict(meta, engine="torch_npu", amp=amp, low_dtype=low or "fp16",
               soc=meta.get("soc") or analysis.defaults.soc)      # --soc, else the default chip (analyze's)
    if info is not None and info.acl_precision_mode:
        out["acl_precision_mode"] = info.acl_precision_mode
    dt.notes.insert(0, f"re-planned from the FP32 msprobe dump of step {step} ({len(dt.trace.calls)} API calls, no "
                       f"{TRACE_FILE}): program read as {out['amp']}" + ("" if given else
                       " (a dump does not say how the program cast: --amp to say)") +
                    f", low dtype {out['low_dtype']}{whence}")
    half = half_parameters(dt, target)
    if half and out["amp"] == "autocast":
        dt.notes.append(f"the mixed dump holds {half} fp16 parameter input(s): autocast keeps weights fp32, so the "
                        "program looks made half (model.half(), Apex O2): --amp apex-o2 advises it so")
    return dt, out


def first_step(analysis: Any) -> int:
    """The step a real run's trace is rebuilt from: the first with both dumps (else the FP32 dump's first)."""
    return min(analysis.steps) if analysis.steps else min(analysis.run.golden_dump)


def dtype_notes(analysis: Any, dt: Any, tp: S.TorchPlan) -> list[str]:
    """Where the mixed dump's output dtypes are not the plan's, as one note (the measured run is judged as it ran;
    the candidates are torch_npu's)."""
    diff = dtype_disagreements(dt, tp, (analysis.run.target_dump or {}).get(first_step(analysis)))
    if not diff:
        return []
    return [f"the mixed dump's dtypes are not torch_npu {tp.config.amp}'s at {len(diff)} of {len(dt.trace.calls)} "
            f"call(s) ({summary(diff)}): the run was cast otherwise (another device's autocast, or casts the dump "
            "does not show); 'measured' is the run as it ran, 'base' and every candidate are replayed as torch_npu "
            "runs them"]


@dataclass(frozen=True)
class OpChange:
    """An op whose dtype a policy changes: its kernel's compute dtype before and after, and why (semantics)."""

    node: str
    type: str
    module: str
    before: str
    after: str
    why_before: str
    why_after: str


class TorchNpuReplay:
    """A torch_npu run (its ``analysis.Analysis`` and trace) replayed under policies.  A real run without
    torch_npu_trace.json is re-planned from its FP32 msprobe tensor dump (``real_run_trace``); ``amp`` says how
    such a run's program cast (a dump cannot tell: default autocast), its low dtype is the mixed dump's."""

    def __init__(self, analysis: Any, trace: S.Trace | None = None, amp: str | None = None):
        self.a = analysis
        path = Path(analysis.path)
        meta = dict(analysis.run.meta or {})
        self.notes: list[str] = []
        self.trace = trace if trace is not None else read_trace(path)
        real = None
        if self.trace is None:
            real, meta = real_run_trace(analysis, meta, amp)
            self.trace, self.notes = real.trace, list(real.notes)
        self.config = config_of(meta, path / "run.json" if real is None else path)
        self.policy = run_policy(path, meta, self.config)
        self._plans: dict = {}
        g = analysis.graph
        self.types = {c.name: str(g.nodes[c.name].get("type", "")) if c.name in g else "" for c in self.trace.calls}
        self.measured_low = None if real is None else \
            low_outputs(real, (analysis.run.target_dump or {}).get(first_step(analysis)))
        if real is not None:
            self.notes += dtype_notes(analysis, real, self.plan())

    # ------------------------------------------------------------------ plans
    def empty_policy(self, dtype: str | None = None) -> PrecisionPolicy:
        return PrecisionPolicy(amp=self.config.amp, dtype=dtype or self.config.dtype, rules=PolicyRules())

    def plan(self, policy: PrecisionPolicy | None = None) -> S.TorchPlan:
        """semantics' plan of the run's trace under ``policy`` (default: the run's own)."""
        pol = self.policy if policy is None else policy
        key = (pol.amp, pol.dtype, pol.rules)
        hit = self._plans.get(key)
        if hit is None:
            if pol.amp != self.config.amp:
                raise InputError(pol.source or "precision_policy.json",
                                 f"the policy is for amp {pol.amp}, the run used {self.config.amp}")
            cfg = replace(self.config, dtype=pol.dtype) if pol.amp == "autocast" else self.config
            tr = with_op_frames(self.trace, pol.op_names()) if pol.amp == "autocast" and pol.op_names() \
                else self.trace
            hit = self._plans[key] = S.plan(tr, cfg, pol)
        return hit

    @staticmethod
    def precisions(tp: S.TorchPlan) -> dict[Hashable, Any]:
        """node -> what it executes (``Recording.replay``'s form, as the emulator's mixed run takes it)."""
        return {n: d.compute if d.compute == d.out else (d.compute, d.out) for n, d in zip(tp.names, tp.decisions)}

    def changes(self, policy: PrecisionPolicy, base: PrecisionPolicy | None = None) -> list[OpChange]:
        """The kernels whose compute dtype ``policy`` changes against ``base`` (default: the run's policy)."""
        p0, p1 = self.plan(base), self.plan(policy)
        out = []
        for c, d0, d1 in zip(self.trace.calls, p0.decisions, p1.decisions):
            if d0.kernel and d1.kernel and d0.compute != d1.compute and d1.compute in S.FLOATS:
                out.append(OpChange(c.name, self.types.get(c.name, ""), c.module, d0.compute, d1.compute,
                                    S.describe(d0), S.describe(d1)))
        return out

    # ------------------------------------------------------------------ replay
    def replay(self, policy: PrecisionPolicy | None = None, steps: Iterable[int] | None = None):
        """``replay.ReplayResult`` of the run under ``policy`` (default: the run's own)."""
        rec = self.a.recording
        if rec is None:
            raise InputError(self.a.path, "no FP32 tensor dump to replay (capture with --dump tensors)")
        return rec.replay(self.precisions(self.plan(policy)), steps, numerics=self.a.numerics)

    # ------------------------------------------------------------------ time
    def _low(self, tp: S.TorchPlan) -> np.ndarray:
        return self._mask(tp.names, tp.low_mask())

    def _mask(self, names: list[str], low_of: list[bool]) -> np.ndarray:
        from .analysis import node_positions
        pos = node_positions(self.a.compiled, names)
        low = np.zeros(len(self.a.compiled), bool)
        ok = pos >= 0
        low[pos[ok]] = np.asarray(low_of, bool)[ok]
        return low

    def measured_time(self) -> tuple[float, float] | None:
        """A real run's (float kernel time µs, low-precision share) with its calls whose mixed-dump output is
        fp16/bf16 low (the time model's); None for a capture (its measured plan is its own policy's)."""
        if self.measured_low is None:
            return None
        names = list(self.measured_low)
        low = self._mask(names, [self.measured_low[n] for n in names])
        t = self.a.times
        return float(t.times(low)[t.kernel].sum()), t.share(low)

    def low_share(self, tp: S.TorchPlan) -> float:
        """The low-precision share of float kernel time under the plan (``costmodel.TimeModel.share``)."""
        return self.a.times.share(self._low(tp))

    def time_us(self, tp: S.TorchPlan) -> float:
        """Predicted float kernel time of one step under the plan (µs, the time model)."""
        t = self.a.times
        return float(t.times(self._low(tp))[t.kernel].sum())


def replay_report(r: TorchNpuReplay, policy: PrecisionPolicy, tolerance: Any,
                  steps: Iterable[int] | None = None) -> tuple[dict, bool]:
    """``advisor replay --policy``'s JSON document and whether the replayed run meets the tolerance."""
    res = r.replay(policy, steps)
    per_step = res.final_metrics(tolerance=tolerance)
    verdict = tolerance.judge(per_step)
    tp = r.plan(policy)
    out = {"run": str(r.a.path), "engine": "torch_npu", "amp": r.config.amp, "mode": f"torch_npu {r.config.amp} "
           f"{policy.dtype if r.config.amp == 'autocast' else r.config.dtype}",
           "policy": policy.to_dict(), **r.a.numerics.to_meta(),
           "how": REPLAYED if res.complete else INCOMPLETE,
           "verdict": verdict.to_dict(), "steps": per_step, "coverage": res.coverage_dict(),
           "changed_ops": [vars(c) for c in r.changes(policy)][:200],
           "low_precision_share": {"value": r.low_share(tp), "how": TIME_HOW},
           "notes": list(r.notes) + list(tp.notes), "tolerance": tolerance.to_dict()}
    return out, verdict.ok


__all__ = ["TRACE_FILE", "TorchNpuReplay", "policy_run", "OpChange", "missing_for_policy", "real_run_trace",
           "dtype_notes", "first_step", "config_of", "run_policy", "replay_report", "REPLAYED", "INCOMPLETE",
           "TIME_HOW"]
