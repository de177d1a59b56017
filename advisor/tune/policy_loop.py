"""tune on a torch_npu workload: run a precision policy -> judge it on the calibration and the held-out batches ->
ask recommend's policy search (``recommend.policy_search``) for the next policy -> run it, until a policy passes
both or the budget is spent.  Every candidate runs with ``Runner.run(policy=...)``: the emulator captures with it
(as ``advisor capture --policy`` applies it), a command gets it as ``ADVISOR_POLICY`` (``cfg.apply_policy(model)``),
so what tune confirms is the precision_policy.json the user applies with ``advisor.npu.apply_policy``.

The loop is GE tune's (``loop.Tuner``): the same journal (``tune_state.json``; an iteration's candidate is its
``policy``), ``--resume``, ``--parallel`` slots, the separate FP32 reference of a command without a golden, the same
judging; only the candidates and the decision differ (``PolicyTuner.decide``).  With ``parallel`` K the slots
beyond the first run the search's next policies, each found with the targets of the ones before excluded; the
first passing policy in schedule order is confirmed, so a tune whose first proposal passes confirms what
``parallel`` 1 confirms.

Output (``--out``): ``tune_state.json``, ``iter_NN/`` (``precision_policy_used.json``, ``run/``, ``advice/``,
``final_metrics.json``, ``iteration.json``), ``summary.json`` and, once confirmed, ``precision_policy.json`` +
``apply_policy.py`` (recommend's writers).  Runs are counted one per capture (each emulator capture carries its own
FP32 reference, not counted again); a command's separate FP32 reference counts once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..fsutil import atomic_write_json, atomic_write_text, json_text
from ..precision_policy import DTYPE_NAMES, PolicyRules, PrecisionPolicy
from ..recommend.policy_edits import POLICY_NAME, SNIPPET_NAME, apply_snippet, write_policy_outputs
from ..runners.base import Runner, RunResult
from .journal import Iteration, save_journal
from .loop import TuneConfig, Tuner
from .stages import Stages

SUMMARY_SCHEMA = "advisor.tune_policy/1"


def policy_mode(policy: PrecisionPolicy, mode: str) -> str:
    """The run's --mode for a policy: its autocast dtype (a recommended dtype change runs as advised)."""
    if policy.amp == "autocast" and mode in ("mixed_float16", "mixed_bfloat16"):
        return "mixed_bfloat16" if policy.dtype == "bf16" else "mixed_float16"
    return mode


def edit_targets(new: PrecisionPolicy, old: PrecisionPolicy) -> set[str]:
    """What ``new`` changes relative to ``old``, as the search's ``exclude`` names it: the op (else the module) of
    each added keep rule, each added float function, ``dtype`` for a dtype change."""
    out = {r.op or r.module for r in set(new.rules.keep_fp32) - set(old.rules.keep_fp32) if r.op or r.module}
    out |= set(new.rules.register_float_function) - set(old.rules.register_float_function)
    return out | ({"dtype"} if new.dtype != old.dtype else set())


class PolicyTuner(Tuner):
    """``Tuner`` whose candidates are precision policies (module docstring)."""

    def __init__(self, runner: Runner, config: TuneConfig, *, start: PrecisionPolicy, tolerance: Any,
                 soc: str | None, max_edits: int = 3, progress: Any = None):
        super().__init__(runner, Stages(tolerance, soc=soc), config, progress)
        self.start_policy, self.max_edits = start, max_edits
        self.low = start.dtype

    # ------------------------------------------------------------------ the hooks
    def first_iteration(self) -> None:
        self.state.new_iteration(frozenset(), "starting policy", None, policy=self.start_policy.to_dict())

    def decision_policy(self) -> None:
        return None                        # decide() asks recommend's policy search itself

    def learn(self, it: Iteration) -> None:
        """No edit-effect model over policies."""

    def policy_of(self, it: Iteration) -> PrecisionPolicy:
        return PrecisionPolicy.from_dict(it.policy, f"{self.state_path} {it.dir}")

    def start_run(self, it: Iteration, runner: Runner, ahead: int = 0) -> RunResult:
        pol = self.policy_of(it)
        d = self.folder(it.dir)
        d.mkdir(parents=True, exist_ok=True)
        self.say(f"run {self.state.runs + 1 + ahead} of at most {self.cfg.max_runs}: {it.dir} "
                 f"({', '.join(self.rules_of(pol)) or 'the policy unchanged'})")
        return runner.run(None, policy_mode(pol, self.cfg.mode), d / "run", policy=pol)

    def rules_of(self, pol: PrecisionPolicy) -> list[str]:
        dtype = [f"autocast {DTYPE_NAMES[pol.dtype]}"] if pol.amp == "autocast" and pol.dtype != self.low else []
        return dtype + pol.lines()

    def decide(self, batch: list[Iteration]) -> None:
        """The first passing policy of the batch (schedule order) is confirmed; else the search on the first measured
        run of the batch proposes the next policy (and, for more slots, the next ones with the targets of those
        before excluded), never one already run."""
        passing = [it for it in batch if it.ok]
        src = next((it for it in batch if it.measured is not None), None)
        nxt: list[tuple[PrecisionPolicy, dict]] = []
        stop = None
        if passing:
            self.state.status, self.state.stop_reason = "confirmed", f"{passing[0].dir} meets the tolerance"
        elif src is None:
            r = RunResult.from_dict(batch[0].result or {})
            stop = f"the run failed ({r.status}: {r.message}); nothing to measure"
        else:
            nxt, stop = self.proposals(src, max(1, min(len(self.slots()), self.cfg.parallel)))
        if nxt and self.budget_left() < len(nxt):
            nxt = nxt[:max(self.budget_left(), 0)]
            stop = None if nxt else "run budget spent"
        for pol, proposed in nxt:
            self.state.new_iteration(frozenset(), "proposed by the policy search", proposed.pop("predicted"),
                                     parent=src.index, policy=pol.to_dict())
        if src is not None and nxt:
            src.next = {"policies": [n[1] for n in nxt]}
        if not passing and not nxt:
            self.state.status, self.state.stop_reason = "exhausted", stop or "no new policy"
        for b in batch:
            atomic_write_json(self.folder(b.dir) / "iteration.json", b.to_dict())
            b.done.append("decide")
            self.state.event(f"{b.dir}:decide")
        save_journal(self.state_path, self.state)

    def proposals(self, src: Iteration, k: int) -> tuple[list[tuple[PrecisionPolicy, dict]], str | None]:
        """Up to ``k`` new policies from the search on ``src``'s run (its advice in ``src/advice``)."""
        from ..recommend.policy_search import recommend_policy
        a = self.load_run(src)
        cur = self.policy_of(src)
        calib_ok = bool(((src.verdict or {}).get("calibration") or {}).get("ok"))
        steps = None if calib_ok else self.calib_steps(src)
        seen = {json_text(it.policy) for it in self.state.iterations}
        out: list[tuple[PrecisionPolicy, dict]] = []
        exclude: set[str] = set()
        stop = None
        for i in range(k):
            self.say(f"{src.dir}: searching the next policy (replay)" + (f", slot {i + 1}" if i else ""))
            rec = recommend_policy(a, self.stages.tolerance, max_edits=self.max_edits, exclude=sorted(exclude),
                                   out_dir=self.folder(src.dir) / "advice" if i == 0 else None, steps=steps)
            if i == 0:
                write_policy_outputs(rec, self.folder(src.dir) / "advice")
            nxt = PrecisionPolicy.from_dict(rec.precision_policy.policy, f"{src.dir}/advice/{POLICY_NAME}")
            key = json_text(nxt.to_dict())
            if not rec.ok or key in seen:
                if i == 0:
                    stop = ("no new policy within tolerance on replay" if not rec.ok else
                            "the search proposes a policy already run")
                break
            seen.add(key)
            exclude |= edit_targets(nxt, cur)
            out.append((nxt, {"status": rec.status, "edits": [e.edit for e in rec.precision_policy.edits],
                              "predicted": {"ok": bool(rec.predicted.recommended_meets_tolerance),
                                            "how": rec.predicted.how}}))
        return out, stop

    # ------------------------------------------------------------------ outputs
    def row(self, it: Iteration) -> dict:
        """summary.json's history row of one iteration (docs/formats.md "tune summary.json (torch_npu)")."""
        pol = self.policy_of(it)
        res = it.result or {}
        row: dict = {"iteration": it.dir, "policy": it.policy, "rules": self.rules_of(pol),
                     "status": res.get("status", "pending")}
        if res.get("status") not in (None, "ok"):
            row["message"] = res.get("message", "")
        if it.measured is not None:
            v, m = it.verdict or {}, it.measured
            row["calibration"] = _verdict_row(v.get("calibration"), m.get("calibration_steps"))
            row["held_out"] = _verdict_row(v.get("holdout"), m.get("holdout_steps"))
            row["ok"] = bool(v.get("ok"))
        if it.next:
            row["proposed"] = it.next["policies"][0]
        if it.parent is not None:
            row["parent"] = self.state.iterations[it.parent].dir
        return row

    def summary(self) -> dict:
        st = self.state
        history = [self.row(it) for it in st.iterations]
        confirmed = next((it for it in st.iterations if it.ok), None) if st.status == "confirmed" else None
        if confirmed is None and history:
            history[-1]["stopped"] = st.stop_reason
        return {"schema": SUMMARY_SCHEMA, "engine": "torch_npu", "amp": self.start_policy.amp,
                "confirmed": confirmed is not None, "status": st.status, "stop_reason": st.stop_reason,
                "runs": st.runs, "max_runs": self.cfg.max_runs, "captures": st.captures, "executions": st.executions,
                "parallel": self.cfg.parallel, "history": history, "tolerance": self.stages.tolerance.to_dict(),
                "policy": confirmed.policy if confirmed else None, "confirmed_iteration": confirmed.dir if confirmed
                else None, "how": "measured (a fresh run with the policy, calibration and held-out batches)"}

    def finish(self) -> dict:
        s = self.summary()
        if s["policy"] is not None:
            pol = PrecisionPolicy.from_dict(s["policy"])
            atomic_write_json(self.out / POLICY_NAME, pol.to_dict(), keep_existing=True)
            atomic_write_text(self.out / SNIPPET_NAME, apply_snippet(pol, str((self.out / POLICY_NAME).resolve())),
                              keep_existing=True)
            s["files"] = {"policy": str(self.out / POLICY_NAME), "snippet": str(self.out / SNIPPET_NAME)}
        atomic_write_json(self.out / "summary.json", s)
        return s


def _verdict_row(v: dict | None, steps: list | None) -> dict | None:
    if not v or not steps:
        return None
    w = v.get("worst") or {}
    return {"ok": bool(v.get("ok")), "steps": list(steps), "final_rel_l2": w.get("rel_l2"),
            "final_nonfinite": w.get("finite") is False, "reasons": list(v.get("reasons", []))[:4], "how": "measured"}


def tune_policy(runner: Runner, out: str | Path, *, amp: str, mode: str, soc: str | None,
                start: PrecisionPolicy | None, max_runs: int = 6, holdout: int | None = None, tolerance: Any = None,
                max_edits: int = 3, progress: Any = None, resume: bool = False, parallel: int = 1) -> dict:
    """The torch_npu tune (module docstring); returns summary.json's content.  ``runner``: any runner whose ``run``
    takes ``policy`` (the emulator, a command); ``start``: the starting policy (None: the empty policy of ``amp``
    in ``mode``'s dtype); ``resume``: continue the journal in ``out``; ``parallel``: runs at once."""
    import inspect

    from ..compare.tolerance import Tolerance
    from ..errors import InputError
    from ..inputs import check_tune_options
    check_tune_options(mode, max_runs, holdout, parallel, None)
    params = inspect.signature(runner.run).parameters
    if "policy" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        raise InputError("--runner", f"{type(runner).__name__} cannot apply a precision policy (a torch_npu tune "
                                     "runs on the emulator or a command)")
    tol = tolerance if tolerance is not None else Tolerance()
    low = "bf16" if mode == "mixed_bfloat16" else "fp16"
    cur = start if start is not None else PrecisionPolicy(amp=amp, dtype=low if amp == "autocast" else "fp16",
                                                          rules=PolicyRules())
    ident = {"engine": "torch_npu", "amp": amp, "start_policy": cur.to_dict(), "max_edits": max_edits}
    cfg = TuneConfig(Path(out), mode, max_runs, holdout, learn=False, perf=False, identity=ident, parallel=parallel,
                     count_embedded_reference=False)
    t = PolicyTuner(runner, cfg, start=cur, tolerance=tol, soc=soc, max_edits=max_edits, progress=progress)
    t.start(resume=resume)
    return t.run()


__all__ = ["tune_policy", "PolicyTuner", "policy_mode", "SUMMARY_SCHEMA"]
