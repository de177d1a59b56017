"""The tuning loop: run a list -> judge it on the calibration and the held-out batches -> decide the next
list (policy.py), journalled after every step (journal.py) so that ``--resume`` continues with the first step
not done and completed runs are never redone.

Run counting: ``runs`` = the FP32 reference, counted once, + one per mixed-precision execution (failed and
timed-out ones included).  The emulator re-executes the FP32 reference inside every capture so that each run
directory is self-contained; those deterministic repeats are not counted again in ``runs`` (they are in
``executions``).  A user command that writes no golden dump gets one separate reference run (``reference/``),
counted once as well.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AdvisorError, InputError
from ..fsutil import atomic_write_json, atomic_write_text, resolve_inside
from ..mixlist import Mixlist
from ..recommend.edits import edits_of, edits_summary, edits_to_json
from ..runners.base import OK, Runner, RunResult
from ..compare.training import scale_text
from .journal import STATE_FILE, Iteration, TuneState, read_journal, save_journal
from .policy import Policy
from .stages import Stages
from .surrogate import Surrogate


@dataclass
class TuneConfig:
    out: Path
    mode: str = "mixed_float16"
    max_runs: int = 6
    holdout: int | None = None       # None = 1 when the workload has >= 2 batches, else 0
    learn: bool = True
    perf: bool = True                # after a pass, try recommend's performance edits if budget allows
    base_mixlist: Mixlist | None = None
    identity: dict = field(default_factory=dict)   # runner/target description checked on resume
    parallel: int = 1                # runs at once (--parallel): each slot has its own runner
    loss_scale: float | None = None  # --loss-scale: the static loss scale of the first run (None: the workload's)
    measure_minimality: bool = False  # --measure-minimality: run the one-smaller lists even when replay proved them
    count_embedded_reference: bool = True   # False: a run's own FP32 golden is not counted in ``runs`` (torch_npu
                                            # tune counts one run per capture: tune.policy_loop)


class Tuner:
    """One tune: the runner, the stages, the journal and the policy (see the module docstring)."""

    def __init__(self, runner: Runner, stages: Stages, config: TuneConfig, progress=None):
        self.runner, self.stages, self.cfg = runner, stages, config
        self.say = progress or (lambda msg: None)
        self.note = getattr(progress, "note", self.say)  # results (StageLog.note), else the same callable
        self.out = Path(config.out)
        self.state: TuneState | None = None
        self._runs_cache: dict[int, Any] = {}
        self.surrogate = Surrogate()
        self._slots: list[Runner] | None = None
        self.policy: Policy | None = None      # built once the journal exists (start)

    # ------------------------------------------------------------------ journal
    @property
    def state_path(self) -> Path:
        return self.out / STATE_FILE

    def _identity(self) -> dict:
        ident = {"mode": self.cfg.mode, "holdout": self.cfg.holdout, "learn": self.cfg.learn, "perf": self.cfg.perf,
                 "base_mixlist": (self.cfg.base_mixlist or Mixlist()).to_dict(), "runner": self.runner.describe(),
                 **({"loss_scale": self.cfg.loss_scale} if self.cfg.loss_scale is not None else {}),
                 **({"measure_minimality": True} if self.cfg.measure_minimality else {}),
                 **self.cfg.identity}
        return json.loads(json.dumps(ident, default=str))

    def _save(self) -> None:
        save_journal(self.state_path, self.state)

    def folder(self, rel: str) -> Path:
        """A folder named in the journal, confined to --out (a journal is a user's file too)."""
        try:
            return resolve_inside(self.out, rel, "folder")
        except InputError:
            raise InputError(self.state_path, f"names the folder {rel!r}, outside --out {self.out}; refusing "
                                              "to use it") from None

    def _done(self, step: str) -> None:
        self.state.event(step)
        self._save()

    def start(self, resume: bool = False) -> None:
        if self.state_path.exists():
            if not resume:
                raise InputError(self.out, "already holds a tune journal (tune_state.json); pass --resume to "
                                           "continue it or choose another --out")
            self.state = read_journal(self.state_path)
            for it in self.state.iterations:
                self.folder(it.dir)
            if self.state.reference and self.state.reference["kind"] == "separate":
                self.folder(self.state.reference["dir"])
            want = self._identity()
            if self.state.identity != want:
                # --holdout may change while no run was judged yet (e.g. after "--holdout 99: only 4 batches")
                judged = any("judge" in it.done for it in self.state.iterations)
                if judged or {**self.state.identity, "holdout": None} != {**want, "holdout": None}:
                    raise InputError(self.state_path, "the journal was written for a different target/runner/mode/"
                                                      "holdout; resume with the same arguments or choose another --out")
                self.state.identity = want
            self.runner.prepare(self.out)
            for it in self.state.iterations:
                if it.measured:
                    self.surrogate.add(it.edits, it.measured.get("rel_l2"), it.measured.get("finite"))
            self._save()           # the journal on disk is strict JSON again (an older one may hold NaN)
            self.policy = self.decision_policy()
            return
        if self.out.exists() and any(p for p in self.out.iterdir() if not p.name.startswith(".")):
            raise InputError(self.out, "exists and is not empty; tune writes a fresh directory (or --resume)")
        self.out.mkdir(parents=True, exist_ok=True)
        self.runner.prepare(self.out)
        self.state = TuneState(self._identity())
        self.first_iteration()
        self._save()
        self.policy = self.decision_policy()

    # the hooks a loop over other candidates (tune.policy_loop: precision policies) replaces
    def first_iteration(self) -> None:
        """Schedule iter_00: the starting list."""
        self.state.new_iteration(edits_of(self.cfg.base_mixlist), "default lists" if self.cfg.base_mixlist is None
                                 else "starting list (--mixlist)", None, loss_scale=self.cfg.loss_scale)

    def decision_policy(self) -> Any:
        """What decides the next runs (``tune.policy.Policy``), built once the journal exists."""
        return Policy(self.state, self.stages, self.surrogate, self.cfg.learn, self.cfg.perf, self.load_run,
                      self.calib_steps, self.cfg.measure_minimality, self.runner.scoped_dumps())

    # ------------------------------------------------------------------ steps
    def run(self) -> dict:
        """Run (or continue) the loop to the end; returns the summary.  The iterations not yet run (one, or up
        to ``parallel`` scheduled together) run first, at once; then each is judged in order; then one decision
        for all of them schedules the next ones."""
        try:
            while self.state.status == "running":
                its = self.state.iterations
                todo = [it for it in its if "run" not in it.done]
                if todo:
                    self._run_batch(todo)
                elif any(self._needs_reference(it) for it in its):
                    self._step_reference()
                elif any("judge" not in it.done for it in its):
                    self._step_judge(next(it for it in its if "judge" not in it.done))
                else:
                    self.decide([it for it in its if "decide" not in it.done])
        finally:
            for r in (self._slots or [])[1:]:
                r.close()
        return self.finish()

    def slots(self) -> list[Runner]:
        """One runner per concurrent slot (``parallel``), as many as the runner can give (runners.base.slot)."""
        if self._slots is None:
            self._slots = [self.runner]
            for i in range(1, max(1, self.cfg.parallel)):
                r = self.runner.slot(i)
                if r is None:
                    break
                r.prepare(self.out)
                self._slots.append(r)
        return self._slots

    def _run_batch(self, todo: list[Iteration]) -> None:
        """Run the scheduled iterations, up to one per slot at once; each result is journalled as it arrives."""
        slots = self.slots()
        if len(todo) == 1 or len(slots) == 1:
            for it in todo:
                self._record_run(it, self.start_run(it, slots[0]))
            return
        from concurrent.futures import ThreadPoolExecutor, as_completed
        with ThreadPoolExecutor(max_workers=min(len(slots), len(todo))) as pool:
            futures = {}
            for k, it in enumerate(todo[:len(slots)]):
                futures[pool.submit(self.start_run, it, slots[k], k)] = it
            for f in as_completed(futures):
                self._record_run(futures[f], f.result())
        if len(todo) > len(slots):
            self._run_batch(todo[len(slots):])

    def budget_left(self) -> int:
        need_ref = 0 if self.state.reference else 1
        return self.cfg.max_runs - self.state.runs - need_ref

    def start_run(self, it: Iteration, runner: Runner, ahead: int = 0) -> RunResult:
        """Run iteration ``it`` on ``runner`` (slot ``ahead`` of its batch) into ``iter_NN/run``."""
        d = self.folder(it.dir)
        d.mkdir(parents=True, exist_ok=True)
        n = len(it.edits) - len(it.keeps) - len(it.customize)
        what = f"{n} list edit{'s' if n != 1 else ''}" if n else "the starting lists"
        if it.loss_scale is not None:
            what += f", loss scale {scale_text(it.loss_scale)}"
        if it.keeps:
            what += f", {len(it.keeps)} keep_dtype line{'s' if len(it.keeps) != 1 else ''}"
        if it.customize:
            what += f", {len(it.customize)} customize_dtypes line{'s' if len(it.customize) != 1 else ''}"
        self.say(f"run {self.state.runs + 1 + ahead} of at most {self.cfg.max_runs}: {it.dir} ({what})")
        # loss_scale / keep_dtype / customize_dtypes / dump_tensors only when set: a Runner written before them
        # keeps working
        kw = {**({"loss_scale": it.loss_scale} if it.loss_scale is not None else {}),
              **({"keep_dtype": it.keeps} if it.keeps else {}),
              **({"customize_dtypes": it.customize} if it.customize else {}),
              **({"dump_tensors": tuple(it.dump_tensors)} if it.dump_tensors else {})}
        return runner.run(it.as_mixlist(), self.cfg.mode, d / "run", **kw)

    def _record_run(self, it: Iteration, res: RunResult) -> None:
        st = self.state
        st.captures += 1
        st.executions += res.executions
        st.runs += 1
        if res.ok and res.has_reference and not st.reference:
            st.reference = {"kind": "embedded", "iteration": it.index}
            st.runs += 1 if self.cfg.count_embedded_reference else 0
        it.result = res.to_dict()
        it.runs_after = st.runs
        it.done.append("run")
        self._done(f"{it.dir}:run")

    def _needs_reference(self, it: Iteration) -> bool:
        r = it.result or {}
        return r.get("status") == OK and not r.get("has_reference") and not self.state.reference

    def _step_reference(self) -> None:
        """The FP32 reference for runners whose runs carry no golden: one run, its own step."""
        self.say(f"run {self.state.runs + 1} of at most {self.cfg.max_runs}: the FP32 reference")
        res = self.runner.reference(self.out / "reference" / "run")
        self.state.runs += 1
        self.state.captures += 1
        self.state.executions += res.executions
        self.state.reference = {"kind": "separate", "dir": "reference/run", "result": res.to_dict()}
        self._done("reference:run")

    def _attach_golden(self, run_dir: Path) -> None:
        """Copy the separate reference's dump in as ``dump/fp32`` of a run without a golden (copied,
        not symlinked: readers glob with ``**``, which does not follow directory symlinks)."""
        ref = self.state.reference or {}
        if ref.get("kind") != "separate" or ref["result"]["status"] != OK:
            return
        golden = self.folder(ref["dir"]) / "dump" / "mixed"
        dest = run_dir / "dump" / "fp32"
        if golden.exists() and not dest.exists():
            tmp = dest.with_name(".fp32.partial")
            if tmp.exists():
                shutil.rmtree(tmp)
            shutil.copytree(golden, tmp)
            os.replace(tmp, dest)

    def load_run(self, it: Iteration) -> Any:
        if it.index not in self._runs_cache:
            self._runs_cache[it.index] = self.stages.load(self.folder(it.dir) / "run")
        return self._runs_cache[it.index]

    def _unjudged(self, it: Iteration, reason: str) -> None:
        it.verdict = {"ok": False, "calibration": None, "holdout": None, "reasons": [reason]}
        it.measured = None

    def _step_judge(self, it: Iteration) -> None:
        d = self.folder(it.dir)
        res = RunResult.from_dict(it.result)
        ref = (self.state.reference or {}).get("result", {})
        if not res.ok:
            self._unjudged(it, f"run {res.status}: {res.message}")
        elif not res.has_reference and ref.get("status", OK) != OK:
            self._unjudged(it, f"the FP32 reference run {ref['status']}: {ref['message']}")
        else:
            if not res.has_reference:
                self._attach_golden(d / "run")
            try:
                run = self.load_run(it)
                steps = self.stages.steps(run)
            except AdvisorError as e:
                steps, run = None, None
                self._unjudged(it, f"could not read the run: {e}")
            if steps is not None:
                self._judge_steps(it, run, steps)
                try:
                    first = self.stages.write_comparison(run, d / "comparison", self.calib_steps(it))
                    if first is not None:
                        it.measured["first_departure"] = str(first)
                except AdvisorError as e:
                    it.notes.append(f"comparison outputs not written: {e}")
                it.low_precision_time_share = self.stages.low_precision_time_share(run)
                self.learn(it)
        atomic_write_json(d / "iteration.json", it.to_dict())
        v, m = it.verdict or {}, it.measured or {}
        self.note(f"{it.dir}: {'meets' if v.get('ok') else 'misses'} the tolerance"
                  + (f" (cosine {m['cosine']:.6f}, rel L2 {m['rel_l2']:.2e})"
                     if isinstance(m.get("cosine"), float) and isinstance(m.get("rel_l2"), float) else "")
                  + (f"; predicted {'pass' if it.predicted.get('ok') else 'fail'} ({it.predicted.get('how')}): a miss"
                     if it.miss else ""))
        it.done.append("judge")
        self._done(f"{it.dir}:judge")

    def learn(self, it: Iteration) -> None:
        """What a judged run teaches: the surrogate's data point, the prediction's check (a miss)."""
        self.surrogate.add(it.edits, it.measured.get("rel_l2"), it.measured.get("finite"))
        self.policy.check_prediction(it)

    def calib_steps(self, it: Iteration) -> list[int] | None:
        """Steps recommend may see: the calibration steps -- or all steps once a list passed the calibration
        steps but failed the held-out ones (the held-out batches then carry the only evidence of the remaining
        hazard; ``holdout_consumed`` is recorded in the summary)."""
        if self.state.holdout_consumed:
            return None
        m = it.measured or {}
        return list(m["calibration_steps"]) if "calibration_steps" in m else None

    def _judge_steps(self, it: Iteration, run: Any, steps: list[int]) -> None:
        """The run's verdicts on its calibration and held-out steps: each set of steps judged once (recommend and
        the comparison reuse the calibration steps' items)."""
        steps = sorted(steps)
        k = self.cfg.holdout
        if k is None:
            k = 1 if len(steps) >= 2 else 0
        elif k > len(steps) - 1:
            raise InputError("--holdout", f"{k} held-out batches, but the run has {len(steps)} batches (steps "
                                          f"{', '.join(map(str, steps))}) and needs one for calibration: at most "
                                          f"{len(steps) - 1}; continue with --resume --holdout N (the run is kept)")
        hold = set(steps[len(steps) - k:]) if k else set()
        self.state.holdout_steps = sorted(hold)
        calib = self.stages.final_metrics(run, [s for s in steps if s not in hold])
        held = self.stages.final_metrics(run, sorted(hold)) if hold else []
        per_step = sorted(calib + held, key=lambda x: x.get("step", 0))
        vc = self.stages.verdict(calib)
        vh = self.stages.verdict(held) if held else None
        it.verdict = {"ok": bool(vc["ok"]) and (vh is None or bool(vh["ok"])), "calibration": vc, "holdout": vh,
                      "reasons": list(vc.get("reasons", [])) + list((vh or {}).get("reasons", []))}
        if vc["ok"] and vh is not None and not vh["ok"]:
            self.state.holdout_consumed = True
        outs = [x.get("output") or x for x in per_step]
        it.measured = {"rel_l2": _nanmax([o.get("rel_l2") for o in outs]),
                       "cosine": _nanmin([o.get("cosine") for o in outs]),
                       "finite": all(o.get("finite", True) for o in outs), "steps": len(steps),
                       "holdout_steps": sorted(hold), "calibration_steps": [s for s in steps if s not in hold]}
        atomic_write_json(self.folder(it.dir) / "final_metrics.json",
                          {"steps": per_step, "holdout_steps": sorted(hold), "verdict": it.verdict})

    def decide(self, batch: list[Iteration]) -> None:
        """One decision for the iterations judged since the last one: failures are excluded; the best passing
        one (else the last) decides what runs next -- up to ``parallel`` lists, within the budget."""
        for it in batch:
            if not it.ok:
                why = "; ".join((it.verdict or {}).get("reasons", [])[:2]) or "failed"
                self.state.exclude(it.edits, f"measured: {why}", it.index, it.loss_scale)
        passing = [it for it in batch if it.ok]
        it = max(passing, key=lambda p: ((p.low_precision_time_share or 0.0), -len(p.edits))) if passing else batch[-1]
        d = self.folder(it.dir)
        nxt: list = []
        stop = None
        if not it.ok and it.index == 0 and it.measured is None and not self.state.passing():
            stop = "the run with the starting list failed; nothing to measure (see iter_00)"
        else:
            nxt, stop = self.policy.next(it, d, max(1, min(len(self.slots()), self.cfg.parallel)))
        if nxt and self.budget_left() < len(nxt):
            skipped = nxt[max(self.budget_left(), 0):]
            nxt = nxt[:max(self.budget_left(), 0)]
            it.next_skipped = {"edits": edits_to_json(skipped[0].edits), "reason": skipped[0].reason}
            if not nxt:
                stop = "run budget spent"
        for c in nxt:
            it.next = {"edits": edits_to_json(c.edits), "reason": c.reason}
            self.state.new_iteration(c.edits, c.reason, c.predicted, parent=it.index, loss_scale=c.loss_scale,
                                     dump_tensors=c.dump_tensors)
        if not nxt:
            self.state.status = "confirmed" if self.state.passing() else "exhausted"
            self.state.stop_reason = stop or ""
        for b in batch:
            if b is not it:
                b.notes.append(f"decided together with {it.dir}")
            atomic_write_json(self.folder(b.dir) / "iteration.json", b.to_dict())
            b.done.append("decide")
            self.state.event(f"{b.dir}:decide")
        self._save()

    # ------------------------------------------------------------------ outputs
    def best(self) -> Iteration | None:
        passing = self.state.passing()
        if passing:
            return max(passing, key=lambda it: ((it.low_precision_time_share or 0.0), -len(it.edits), -it.index))
        measured = [it for it in self.state.iterations if it.measured]
        if not measured:
            return None
        return min(measured, key=lambda it: (Surrogate.capped(it.measured["rel_l2"], it.measured["finite"]),
                                             len(it.edits)))

    def minimality(self, b: Iteration | None) -> dict:
        """Whether the confirmed list is 1-minimal: by measurement (the list minus each edit was run and failed),
        or by replay (recommend replayed each one-smaller list on the same FP32 data, every one failing, and the
        list passed as predicted: docs/tune.md "Stopping at the first confirmation")."""
        if b is None or not b.ok:
            return {"proved": False, "statement": "no confirmed list"}
        if not b.edits:
            return {"proved": True, "statement": "the starting lists pass: no edit to trim", "checks": []}
        runs = {it.edits: it for it in self.state.iterations if "judge" in it.done and it.loss_scale == b.loss_scale}
        checks = []
        for e in sorted(b.edits, key=lambda x: x.entry):
            w = runs.get(b.edits - {e})
            checks.append({"edit": "/".join(e.entry), "measured": w is not None,
                           "meets_tolerance_without_it": None if w is None else w.ok,
                           "iteration": None if w is None else w.index})
        proved = all(c["measured"] and c["meets_tolerance_without_it"] is False for c in checks)
        if proved:
            return {"proved": True, "how": "measured", "checks": checks,
                    "statement": "1-minimal by measurement: the list without any one of its edits was run and failed"}
        if any(c["meets_tolerance_without_it"] for c in checks):
            return {"proved": False, "statement": "not 1-minimal: a smaller list passed too (see the checks)",
                    "checks": checks}
        if self.policy.minimal_by_replay(b):
            replayed = self._replay_checks(self.state.iterations[b.parent])
            for c in checks:
                if not c["measured"]:
                    c.update(replayed=True, meets_tolerance_without_it=False, **replayed.get(c["edit"], {}))
            return {"proved": True, "how": "replayed", "checks": checks,
                    "statement": "1-minimal by replay: recommend replayed the list without each of its edits on the "
                                 f"FP32 data of {self.state.iterations[b.parent].dir} (the same batches) and every one "
                                 "fails; the list itself passed as replayed (--measure-minimality runs them)",
                    "replay_checks": f"{self.state.iterations[b.parent].dir}/recommendation/recommendation.json"}
        return {"proved": False, "checks": checks,
                "statement": "1-minimality not measured for every edit (the run budget ran out): see the checks"}

    def _replay_checks(self, src: Iteration) -> dict[str, dict]:
        """The replayed one-smaller lists of the recommendation ``src`` proposed from, read back from its
        recommendation.json (``Recommendation.from_dict``): journal edit name -> what the replay measured."""
        from ..fsutil import read_user_json
        from ..recommend.edits import Edit
        from ..recommend.result import Recommendation
        path = self.folder(src.dir) / "recommendation" / "recommendation.json"
        if not path.is_file():
            return {}
        rec = Recommendation.from_dict(read_user_json(path, "a recommendation.json"), str(path))
        out = {}
        for c in rec.minimality.checks:
            e = Edit.parse(c.edit).journal_identity
            w = c.without_it or {}
            out["/".join(e.entry)] = {"how": c.how, "replayed_rel_l2": w.get("worst_rel_l2"),
                                      "replayed_non_finite": w.get("non_finite")}
        return out

    def runs_to_first_confirmation(self) -> int | None:
        """Runs spent (FP32 reference included) when the first list that passes had run: what the answer cost;
        ``runs`` is what the tune spent in all (with its minimality and performance runs)."""
        first = next((it for it in self.state.iterations if it.ok), None)
        return first.runs_after if first is not None else None

    def summary(self) -> dict:
        b = self.best()
        meas = (b.measured if b else None) or {}
        hist = []
        for it in self.state.iterations:
            v, m, r = it.verdict or {}, it.measured or {}, it.result or {}
            hist.append({
                "iteration": it.index, "dir": it.dir, "reason": it.reason, "edits": edits_summary(it.edits),
                **({"keep_dtype": list(it.keeps)} if it.keeps else {}),
                **({"customize_dtypes": list(it.customize)} if it.customize else {}),
                "status": r.get("status", "pending"), "message": r.get("message", ""),
                "ok": v.get("ok"), "calibration_ok": (v.get("calibration") or {}).get("ok"),
                "holdout_ok": (v.get("holdout") or {}).get("ok") if v.get("holdout") else None,
                "reasons": v.get("reasons", []),
                "cosine": m.get("cosine"), "rel_l2": m.get("rel_l2"), "finite": m.get("finite"),
                "low_precision_time_share": it.low_precision_time_share, "predicted": it.predicted or {},
                "miss": it.miss, "runs_after": it.runs_after, "proposals": it.proposals,
                **({"loss_scale": it.loss_scale} if it.loss_scale is not None else {}),
                **({"dump_tensors": len(it.dump_tensors)} if it.dump_tensors else {})})
        predicted_runs = [it for it in self.state.iterations if "ok" in (it.predicted or {}) and it.measured]
        replayed = [it for it in predicted_runs if str(it.predicted.get("how", "")).startswith("replayed")]
        return {
            "confirmed": self.state.status == "confirmed", "status": self.state.status,
            "stop_reason": self.state.stop_reason, "runs": self.state.runs,
            "runs_to_first_confirmation": self.runs_to_first_confirmation(),
            "run_counting": "FP32 reference once + one per mixed-precision execution (failed ones included)",
            "captures": self.state.captures, "executions": self.state.executions,
            "max_runs": self.cfg.max_runs, "mode": self.cfg.mode, "measure_minimality": self.cfg.measure_minimality,
            "best_iteration": b.index if b else None, "edits": edits_summary(b.edits if b else frozenset()),
            "keep_dtype": list(b.keeps) if b else [],
            **({"customize_dtypes": list(b.customize)} if b and b.customize else {}),
            "loss_scale": b.loss_scale if b else None,
            "final": {"cosine": meas.get("cosine"), "rel_l2": meas.get("rel_l2"), "finite": meas.get("finite")},
            "low_precision_time_share": b.low_precision_time_share if b else None,
            "minimality": self.minimality(b),
            "predictions": {"runs_with_a_prediction": len(predicted_runs), "misses": len(self.state.misses),
                            "replayed": len(replayed), "replay_misses": sum(1 for it in replayed if it.miss),
                            "replay_miss_rate": (sum(1 for it in replayed if it.miss) / len(replayed)
                                                 if replayed else None)},
            "misses": self.state.misses,
            "holdout_steps": self.state.holdout_steps, "holdout_consumed": self.state.holdout_consumed,
            "tolerance": self.stages.tolerance.to_dict(),
            "learning": {"enabled": self.cfg.learn, "edit_effects": self.surrogate.effects() if self.cfg.learn else {}},
            "excluded": self.state.excluded, "history": hist}

    def finish(self) -> dict:
        from ..recommend.outputs import write_list_files
        from ..report.tune import render_html
        s = self.summary()
        b = self.best()
        # the confirmed list (and, with per-op advice, ATC's --keep_dtype / --customize_dtypes files) through
        # recommend's writer
        write_list_files(self.out, b.as_mixlist() if b else None, b.keeps if b else (), b.customize if b else ())
        atomic_write_json(self.out / "summary.json", s)
        atomic_write_text(self.out / "report.html", render_html(s, self.out), keep_existing=False)
        return s


def _nanmax(xs: list) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return None
    return math.inf if any(math.isnan(x) or math.isinf(x) for x in xs) else max(xs)


def _nanmin(xs: list) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return None
    return math.nan if any(math.isnan(x) for x in xs) else min(xs)


def tune(runner: Runner, out: str | os.PathLike, mode: str = "mixed_float16", max_runs: int = 6,
         holdout: int | None = None, resume: bool = False, tolerance=None, learn: bool = True,
         base_mixlist: Mixlist | None = None, stages: Stages | None = None, soc: str | None = None,
         ops_info: Any = None, perf: bool = True, progress=None, parallel: int = 1,
         loss_scale: float | None = None, granularity: str = "type", measure_minimality: bool = False,
         cann: str | None = None) -> dict:
    """Run the tuning loop; returns the summary (also written to ``out/summary.json``).
    ``progress(msg)`` hears each run as it starts and its verdict; ``parallel``: runs at once;
    ``loss_scale``: the static loss scale of the first run (a training workload's; later runs may raise it);
    ``granularity``: recommend's (``type``: list edits; ``op``/``auto``: per-op keep lines too, which the runner
    applies with each run -- ``Runner.run(keep_dtype=...)``); ``measure_minimality``: run the list without each of
    its edits even when replay already showed every one failing (docs/tune.md)."""
    from ..inputs import check_tune_options   # the CLI checks the same before anything is written
    check_tune_options(mode, max_runs, holdout, parallel, loss_scale)
    st = stages or Stages(tolerance, soc=soc, ops_info=ops_info, mode=mode, granularity=granularity, cann=cann)
    t = Tuner(runner, st, TuneConfig(Path(out), mode, max_runs, holdout, learn, perf, base_mixlist,
                                     parallel=parallel, loss_scale=loss_scale,
                                     measure_minimality=measure_minimality), progress)
    t.start(resume=resume)
    return t.run()
