"""``advisor tune``: propose -> re-run with the list -> confirm, repeated until the tolerance holds
on calibration *and* held-out batches, with a journal so nothing is lost if it is interrupted.

Loop (docs/tune.md)::

    iter_00: run the default lists            -> judge (calibration + held-out steps)
             recommend on the measured run    -> proposal P1 (screened by the learned surrogate)
    iter_01: run P1                           -> judge; pass -> maybe trim an over-fix; else
             exclude P1's edit set, recommend again on the new measurements (base = P1) ...
    stop when a passing list has nothing left to try, or the run budget is spent.

Journal: ``DIR/tune_state.json`` is rewritten atomically after every step (``run``, ``judge``,
``decide`` of each iteration); ``--resume`` reloads it and continues with the first step not
marked done, so completed captures are never redone.  ``events`` in the journal lists every
completed step with the pid that completed it.

Run counting: ``runs`` = the FP32 reference, counted once, + one per mixed-precision execution
(failed and timed-out ones included).  The emulator re-executes the FP32 reference inside every
capture so that each run directory is self-contained; those deterministic repeats are not counted
again in ``runs`` (they are in ``executions``).  A user command that writes no golden dump gets one
separate reference run (``reference/``), counted once as well.

The upstream stages are reached through ``Stages`` (one place): ingest ``load_run``, compare's
final metrics + ``Tolerance.judge``, ``recommend``.  Tests substitute a fake ``Stages``.
"""
from __future__ import annotations

import html
import json
import math
import numbers
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import AdvisorError, InputError
from .fsutil import atomic_write_json, atomic_write_text, read_user_json, resolve_inside
from .mixlist import Mixlist, parse_obj
from .runners.base import OK, Runner, RunResult

STATE_FILE = "tune_state.json"
STATE_VERSION = 1
MAX_SCREEN = 6               # proposals the surrogate may reject per decision (no run spent)


# ====================================================================== edit sets
Edit = tuple[str, str, str]  # (list, action, op type) e.g. ("black", "to-add", "Exp")


def edits_of(m: Mixlist | None) -> frozenset[Edit]:
    return frozenset() if m is None else frozenset(m.entries())


def mixlist_from_edits(edits: Iterable[Edit]) -> Mixlist | None:
    parts: dict[str, list[str]] = {}
    for lst, action, t in sorted(edits):
        parts.setdefault(f"{lst}_{'add' if action == 'to-add' else 'remove'}", []).append(t)
    if not parts:
        return None
    return Mixlist(**{k: tuple(v) for k, v in parts.items()})


def edit_key(e: Edit) -> str:
    return f"{e[0]}:{e[1]}:{e[2]}"


def edits_to_json(edits: Iterable[Edit]) -> list[list[str]]:
    return [list(e) for e in sorted(edits)]


def edits_from_json(x: Iterable[Sequence[str]]) -> frozenset[Edit]:
    return frozenset(tuple(e) for e in x)  # type: ignore[misc]


def edits_summary(edits: Iterable[Edit]) -> dict:
    """{"black-list": {"to-add": [...], "to-remove": [...]}, "white-list": {...}} (gray only if used)."""
    m = mixlist_from_edits(edits)
    return (m or Mixlist()).to_dict()


# ====================================================================== adapters to the stages
@dataclass
class Proposal:
    """What recommend proposed for the next run (normalised from its Recommendation)."""

    mixlist: Mixlist | None
    predicted: dict = field(default_factory=dict)   # {"rel_l2", "nonfinite", "cosine", "low_share"}
    ok: bool = True
    raw: Any = None
    perf_mixlist: Mixlist | None = None             # the list with performance edits too (if any)
    perf_predicted: dict = field(default_factory=dict)

    @property
    def edits(self) -> frozenset[Edit]:
        return edits_of(self.mixlist)


class Stages:
    """Adapters to ingest / compare / recommend.  Subclass (tests) or replace one method when an
    upstream signature moves; nothing else in this module touches those packages."""

    def __init__(self, tolerance=None, soc: str | None = None, ops_info: str | None = None, mode: str | None = None):
        from .compare.tolerance import Tolerance
        self.tolerance = tolerance or Tolerance()
        self.soc, self.ops_info, self.mode = soc, ops_info, mode

    # --- ingest (through compare's run reader, which uses ingest.load_run when present)
    def load(self, run_dir: Path) -> Any:
        from .compare.run import from_run_dir
        return from_run_dir(run_dir)

    # --- compare
    def final_metrics(self, run: Any) -> list[dict]:
        """Per-step items as Tolerance.judge takes them -- {"step": i, "output": {cosine, rel_l2,
        finite, ...}, "loss": ..., "grad_min_cosine": ...}: compare's ``judged_steps``, the same
        figures compare and recommend judge (final outputs, loss, gradients on every step)."""
        from .compare.attribution import judged_steps
        steps = sorted(set(run.target_dump) & set(run.golden_dump))
        if not steps:
            raise InputError(getattr(run, "path", None), "the mixed and FP32 dumps share no step")
        final, _training, _notes = judged_steps(run.target_dump, run.golden_dump, steps, self.tolerance)
        return [dict(x) for x in final]

    def judge(self, per_step: list[dict]) -> dict:
        return self.tolerance.judge(per_step).to_dict()

    def attribution(self, run: Any, steps: Sequence[int] | None = None) -> Any:
        """compare's attribution of the run on ``steps`` (the calibration steps), cached per run."""
        key = (id(run), tuple(steps) if steps is not None else None)
        cache = self.__dict__.setdefault("_att_cache", {})
        if key not in cache:
            from .compare import attribute
            try:
                cache.clear()
                cache[key] = attribute(run, self.tolerance, steps=list(steps) if steps is not None else None)
            except ValueError as e:
                raise InputError(getattr(run, "path", None), f"attribution failed: {e}") from None
        return cache[key]

    def write_comparison(self, run: Any, out_dir: Path, steps: Sequence[int] | None = None) -> None:
        """The iteration's comparison: attribution on the calibration steps (per-op errors, culprit
        ranking) as JSON."""
        att = self.attribution(run, steps)
        atomic_write_json(Path(out_dir) / "comparison.json", {"steps": list(steps) if steps is not None else "all",
                                                             **att.to_dict()})

    # --- recommend
    def recommend(self, run: Any, base: Mixlist | None, exclude_types: Sequence[str],
                  steps: Sequence[int] | None = None) -> Proposal:
        """recommend on a measured run, starting from ``base`` (the list that run used), never
        editing ``exclude_types``."""
        import inspect

        from .recommend import recommend
        kw: dict[str, Any] = {"tolerance": self.tolerance, "base_mixlist": base, "exclude": tuple(exclude_types)}
        params = inspect.signature(recommend).parameters
        if "attribution" in params:   # held-out steps stay unseen: attribution on calibration steps only
            kw["attribution"] = self.attribution(run, steps)
        for k, v in (("soc", self.soc), ("ops_info", self.ops_info), ("mode", self.mode)):
            if v is not None and k in params:
                kw[k] = v
        rec = recommend(run, **kw)
        pred = (rec.predicted or {}).get("recommended") or {}
        m = rec.mixlist if rec.mixlist is not None and not rec.mixlist.is_empty() else None
        perf = getattr(rec, "perf_mixlist", None)
        pp = (rec.predicted or {}).get("with_performance_edits") or {}
        return Proposal(m, _norm_pred(pred), bool(rec.ok), rec,
                        perf if perf is not None and not perf.is_empty() else None, _norm_pred(pp) if pp else {})

    def write_recommendation(self, proposal: Proposal, out_dir: Path) -> None:
        if proposal.raw is None:
            atomic_write_json(Path(out_dir) / "proposal.json", {"mixlist": (proposal.mixlist or Mixlist()).to_dict(),
                                                                "predicted": proposal.predicted, "ok": proposal.ok})
            return
        from .recommend import write_outputs
        write_outputs(proposal.raw, out_dir)

    # --- profile figures
    def low_precision_time_share(self, run: Any) -> float | None:
        """Share of kernel time spent in fp16/bf16 kernels (kernel_details.csv, first step)."""
        root = getattr(run, "path", None)
        if root is None:
            return None
        files = sorted(Path(root).glob("profile/**/kernel_details.csv"))
        if not files:
            return None
        from .ingest import read_kernels
        k = read_kernels(files[0])
        if len(k) == 0:
            return None
        if (k["step"] >= 0).any():
            k = k[k["step"] == k.loc[k["step"] >= 0, "step"].min()]
        dur = k["duration_us"].fillna(0.0).astype(float)
        tot = float(dur.sum())
        if tot <= 0:
            return None
        return float(dur[k["precision"].isin(["fp16", "bf16"])].sum() / tot)


def _norm_pred(p: dict) -> dict:
    """recommend's prediction dict -> {"rel_l2", "nonfinite", "cosine", "low_share"}."""
    if not p:
        return {}
    return {"rel_l2": p.get("final_rel_l2", p.get("rel_l2")), "nonfinite": p.get("final_nonfinite", p.get("nonfinite")),
            "cosine": p.get("final_cosine"), "low_share": p.get("low_precision_share", p.get("low_share"))}


# ====================================================================== learning across runs
class Surrogate:
    """What the measured runs teach about edit sets (scikit-learn ridge regression).

    Model: the measured final error of a tried list, ``err = min(rel_l2, CAP)``, regressed on edit
    indicators (one feature per edit seen in a tried list, intercept = the starting list's error),
    fitted on the runs with a finite output only (a non-finite output masks every other hazard).
    Errors of independent hazards add, so each coefficient is the measured effect of one edit
    (negative = it removes error).  An edit is *identified* when finite runs with and without it
    exist.  Used four ways:

    * **exclude**: op types whose identified edit changed the error by less than a tenth of the
      tolerance are passed to recommend as ``exclude`` -- it will not propose them again;
    * **combine**: after a failure, if the identified edits that each removed error are predicted to
      pass together (2x margin) and that set was never run, it is run before asking recommend;
    * **screen**: a proposal made only of *identified* edits (each seen both present and absent
      among measured runs) is predicted by the regression; if that prediction fails the tolerance
      the proposal is excluded without spending a run.  Proposals with a new edit are trusted to
      recommend's own error model (built from the latest measurements).
    * **trim**: in a passing list, edits whose measured effect is negligible (the prediction
      without them still passes with a 2x margin) are dropped -- the over-fix -- and confirmed.
    """

    CAP = 10.0

    def __init__(self, alpha: float = 1e-3):
        self.alpha = alpha
        self.points: list[dict] = []   # {"edits": frozenset, "err": capped error}

    @classmethod
    def capped(cls, rel_l2: float | None, finite: bool | None) -> float:
        if finite is False or rel_l2 is None or not math.isfinite(rel_l2):
            return cls.CAP
        return min(float(rel_l2), cls.CAP)

    def add(self, edits: frozenset[Edit], rel_l2, finite) -> None:
        self.points.append({"edits": frozenset(edits), "err": self.capped(rel_l2, finite)})

    def _finite(self) -> list[dict]:
        # non-finite runs are left out of the fit: a NaN masks every other hazard (two hazards each
        # leave the output non-finite alone), so they say nothing about one edit's effect
        return [p for p in self.points if p["err"] < self.CAP]

    def _fit(self):
        pts = self._finite()
        if len(pts) < 2:
            return None, []
        import numpy as np
        from sklearn.linear_model import Ridge
        feats = sorted({edit_key(e) for p in pts for e in p["edits"]})
        if not feats:
            return None, []
        X = np.array([[1.0 if f in {edit_key(e) for e in p["edits"]} else 0.0 for f in feats] for p in pts])
        y = np.array([p["err"] for p in pts])
        return Ridge(alpha=self.alpha, fit_intercept=True).fit(X, y), feats

    def identified(self, e: Edit) -> bool:
        have = [e in p["edits"] for p in self._finite()]
        return any(have) and not all(have)

    def useless_types(self, max_rel_l2: float) -> set[str]:
        """Op types whose edit was measured (identified among finite runs) to change the final
        error by less than a tenth of the tolerance: recommend is told not to propose them again."""
        eff = self.effects()
        out = set()
        for p in self._finite():
            for e in p["edits"]:
                c = eff.get(edit_key(e))
                if c is not None and self.identified(e) and c > -0.1 * max_rel_l2:
                    out.add(e[2])
        return out

    def effects(self) -> dict[str, float]:
        model, feats = self._fit()
        if model is None:
            return {}
        return {f: float(c) for f, c in zip(feats, model.coef_)}

    def predict(self, edits: frozenset[Edit]) -> float | None:
        """Predicted capped error of a list, or None when an edit is not identified by the data."""
        if not all(self.identified(e) for e in edits):
            return None
        model, feats = self._fit()
        if model is None:
            return None
        import numpy as np
        keys = {edit_key(e) for e in edits}
        return float(model.predict(np.array([[1.0 if f in keys else 0.0 for f in feats]]))[0])

    def screen(self, edits: frozenset[Edit], max_rel_l2: float) -> tuple[bool, float | None]:
        """(worth a run, learned prediction or None)."""
        if len(self._finite()) < 3:
            return True, None
        p = self.predict(edits)
        if p is None:
            return True, None
        return p <= max_rel_l2, p

    def combine(self, max_rel_l2: float) -> frozenset[Edit] | None:
        """The set of identified edits that each measurably removed error (effect below -a tenth of
        the tolerance), when the regression predicts it passes with a 2x margin; else None."""
        eff = self.effects()
        helpful = frozenset(e for p in self._finite() for e in p["edits"]
                            if self.identified(e) and eff.get(edit_key(e), 0.0) < -0.1 * max_rel_l2)
        if not helpful:
            return None
        pred = self.predict(helpful)
        return helpful if pred is not None and pred <= 0.5 * max_rel_l2 else None

    def trim(self, edits: frozenset[Edit], measured: float, max_rel_l2: float) -> frozenset[Edit] | None:
        """A strict subset of a passing list predicted to pass with a 2x margin, or None."""
        if len(edits) < 2:
            return None
        eff = self.effects()
        keep, err = set(edits), measured
        for e in sorted(edits, key=lambda e: -eff.get(edit_key(e), -math.inf)):
            c = eff.get(edit_key(e))
            if c is None or not self.identified(e) or len(keep) <= 1:
                continue
            if err - c <= 0.5 * max_rel_l2:
                keep.discard(e)
                err -= c
        return frozenset(keep) if keep != set(edits) else None


# ====================================================================== the loop
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


class Tuner:
    def __init__(self, runner: Runner, stages: Stages, config: TuneConfig, progress=None):
        self.runner, self.stages, self.cfg = runner, stages, config
        self.say = progress or (lambda msg: None)
        self.note = getattr(progress, "note", self.say)  # results (StageLog.note), else the same callable
        self.out = Path(config.out)
        self.state: dict = {}
        self._runs_cache: dict[int, Any] = {}
        self.surrogate = Surrogate()

    # ------------------------------------------------------------------ journal
    @property
    def state_path(self) -> Path:
        return self.out / STATE_FILE

    def _identity(self) -> dict:
        return {"mode": self.cfg.mode, "holdout": self.cfg.holdout, "learn": self.cfg.learn, "perf": self.cfg.perf,
                "base_mixlist": (self.cfg.base_mixlist or Mixlist()).to_dict(), "runner": self.runner.describe(),
                **self.cfg.identity}

    def _save(self) -> None:
        self.state["updated"] = time.time()
        nonfinite_to_null(self.state)     # in memory too: a resumed process sees exactly what this one saw
        atomic_write_json(self.state_path, self.state)

    def _folder(self, rel: str) -> Path:
        """A folder named in the journal, confined to --out (a journal is a user's file too)."""
        try:
            return resolve_inside(self.out, rel, "folder")
        except InputError:
            raise InputError(self.state_path, f"names the folder {rel!r}, outside --out {self.out}; refusing "
                                              "to use it") from None

    def _done(self, step: str) -> None:
        self.state["events"].append({"step": step, "pid": os.getpid(), "time": time.time()})
        self._save()

    def start(self, resume: bool = False) -> None:
        if self.state_path.exists():
            if not resume:
                raise InputError(self.out, "already holds a tune journal (tune_state.json); pass --resume to "
                                           "continue it or choose another --out")
            self.state = read_journal(self.state_path)
            for it in self.state["iterations"]:
                self._folder(it["dir"])
            if self.state["reference"] and self.state["reference"]["kind"] == "separate":
                self._folder(self.state["reference"]["dir"])
            want = json.loads(json.dumps(self._identity(), default=str))
            if self.state["identity"] != want:
                # --holdout may change while no run was judged yet (e.g. after "--holdout 99: only 4 batches")
                judged = any("judge" in it["done"] for it in self.state["iterations"])
                if judged or {**self.state["identity"], "holdout": None} != {**want, "holdout": None}:
                    raise InputError(self.state_path, "the journal was written for a different target/runner/mode/"
                                                      "holdout; resume with the same arguments or choose another --out")
                self.state["identity"] = want
            self.runner.prepare(self.out)
            for it in self.state["iterations"]:
                if it.get("measured"):
                    m = it["measured"]
                    self.surrogate.add(edits_from_json(it["edits"]), m.get("rel_l2"), m.get("finite"))
            return
        if self.out.exists() and any(p for p in self.out.iterdir() if not p.name.startswith(".")):
            raise InputError(self.out, "exists and is not empty; tune writes a fresh directory (or --resume)")
        self.out.mkdir(parents=True, exist_ok=True)
        self.runner.prepare(self.out)
        self.state = {"version": STATE_VERSION, "identity": json.loads(json.dumps(self._identity(), default=str)),
                      "status": "running", "runs": 0, "executions": 0, "captures": 0, "reference": None,
                      "holdout_steps": None, "iterations": [], "excluded": [], "events": [], "started": time.time()}
        self._new_iteration(self.cfg.base_mixlist, "default lists" if self.cfg.base_mixlist is None else
                            "starting list (--mixlist)", None)
        self._save()

    def _new_iteration(self, mixlist: Mixlist | None, reason: str, predicted: dict | None,
                       parent: int | None = None) -> dict:
        i = len(self.state["iterations"])
        it = {"index": i, "dir": f"iter_{i:02d}", "edits": edits_to_json(edits_of(mixlist)),
              "mixlist": (mixlist or Mixlist()).to_dict(), "reason": reason, "predicted": predicted or {},
              "parent": parent, "done": []}
        self.state["iterations"].append(it)
        return it

    # ------------------------------------------------------------------ steps
    def run(self) -> dict:
        """Run (or continue) the loop to the end; returns the summary."""
        while self.state["status"] == "running":
            it = self.state["iterations"][-1]
            if "run" not in it["done"]:
                self._step_run(it)
            elif self._needs_reference(it):
                self._step_reference()
            elif "judge" not in it["done"]:
                self._step_judge(it)
            elif "decide" not in it["done"]:
                self._step_decide(it)
        return self.finish()

    def _budget_left(self) -> int:
        need_ref = 0 if self.state["reference"] else 1
        return self.cfg.max_runs - self.state["runs"] - need_ref

    def _step_run(self, it: dict) -> None:
        d = self._folder(it["dir"])
        d.mkdir(parents=True, exist_ok=True)
        run_dir = d / "run"
        mixlist = _mixlist_or_none(it["mixlist"])
        n_edits = len(it.get("edits") or [])
        what = f"{n_edits} list edit{'s' if n_edits != 1 else ''}" if n_edits else "the starting lists"
        self.say(f"run {self.state['runs'] + 1} of at most {self.cfg.max_runs}: {it['dir']} ({what})")
        res = self.runner.run(mixlist, self.cfg.mode, run_dir)
        self.state["captures"] += 1
        self.state["executions"] += res.executions
        self.state["runs"] += 1
        if res.ok and res.has_reference and not self.state["reference"]:
            self.state["reference"] = {"kind": "embedded", "iteration": it["index"]}
            self.state["runs"] += 1
        it["result"] = res.to_dict()
        it["runs_after"] = self.state["runs"]
        it["done"].append("run")
        self._done(f"{it['dir']}:run")

    def _needs_reference(self, it: dict) -> bool:
        r = it.get("result") or {}
        return r.get("status") == OK and not r.get("has_reference") and not self.state["reference"]

    def _step_reference(self) -> None:
        """The FP32 reference for runners whose runs carry no golden: one run, its own step."""
        rdir = self.out / "reference" / "run"
        self.say(f"run {self.state['runs'] + 1} of at most {self.cfg.max_runs}: the FP32 reference")
        res = self.runner.reference(rdir)
        self.state["runs"] += 1
        self.state["captures"] += 1
        self.state["executions"] += res.executions
        self.state["reference"] = {"kind": "separate", "dir": "reference/run", "result": res.to_dict()}
        self._done("reference:run")

    def _attach_golden(self, run_dir: Path) -> None:
        """Copy the separate reference's dump in as ``dump/fp32`` of a run without a golden (copied,
        not symlinked: readers glob with ``**``, which does not follow directory symlinks)."""
        ref = self.state["reference"] or {}
        if ref.get("kind") != "separate" or ref["result"]["status"] != OK:
            return
        golden = self._folder(ref["dir"]) / "dump" / "mixed"
        dest = run_dir / "dump" / "fp32"
        if golden.exists() and not dest.exists():
            tmp = dest.with_name(".fp32.partial")
            if tmp.exists():
                shutil.rmtree(tmp)
            shutil.copytree(golden, tmp)
            os.replace(tmp, dest)

    def _load(self, it: dict) -> Any:
        i = it["index"]
        if i not in self._runs_cache:
            self._runs_cache[i] = self.stages.load(self._folder(it["dir"]) / "run")
        return self._runs_cache[i]

    def _step_judge(self, it: dict) -> None:
        d = self._folder(it["dir"])
        res = RunResult.from_dict(it["result"])
        if not res.ok:
            it["verdict"] = {"ok": False, "calibration": None, "holdout": None,
                             "reasons": [f"run {res.status}: {res.message}"]}
            it["measured"] = None
        elif not res.has_reference and (self.state["reference"] or {}).get("result", {}).get("status", OK) != OK:
            r = self.state["reference"]["result"]
            it["verdict"] = {"ok": False, "calibration": None, "holdout": None,
                             "reasons": [f"the FP32 reference run {r['status']}: {r['message']}"]}
            it["measured"] = None
        else:
            if not res.has_reference:
                self._attach_golden(d / "run")
            try:
                run = self._load(it)
                per_step = self.stages.final_metrics(run)
            except AdvisorError as e:
                per_step, run = None, None
                it["verdict"] = {"ok": False, "calibration": None, "holdout": None,
                                 "reasons": [f"could not read the run: {e}"]}
                it["measured"] = None
            if per_step is not None:
                self._judge_steps(it, per_step)
                try:
                    self.stages.write_comparison(run, d / "comparison", self._calib_steps(it))
                except AdvisorError as e:
                    it.setdefault("notes", []).append(f"comparison outputs not written: {e}")
                it["low_precision_time_share"] = self.stages.low_precision_time_share(run)
                m = it["measured"]
                self.surrogate.add(edits_from_json(it["edits"]), m.get("rel_l2"), m.get("finite"))
        atomic_write_json(d / "iteration.json", json_safe(it))
        v, m = it.get("verdict") or {}, it.get("measured") or {}
        self.note(f"{it['dir']}: {'meets' if v.get('ok') else 'misses'} the tolerance"
                 + (f" (cosine {m['cosine']:.6f}, rel L2 {m['rel_l2']:.2e})"
                    if isinstance(m.get("cosine"), float) and isinstance(m.get("rel_l2"), float) else ""))
        it["done"].append("judge")
        self._done(f"{it['dir']}:judge")

    def _calib_steps(self, it: dict) -> list[int] | None:
        """Steps recommend may see: the calibration steps -- or all steps once a list passed the
        calibration steps but failed the held-out ones (the held-out batches then carry the only
        evidence of the remaining hazard; ``holdout_consumed`` is recorded in the summary)."""
        if self.state.get("holdout_consumed"):
            return None
        m = it.get("measured") or {}
        if "calibration_steps" in m:
            return list(m["calibration_steps"])
        return None

    def _judge_steps(self, it: dict, per_step: list[dict]) -> None:
        d = self._folder(it["dir"])
        per_step = sorted(per_step, key=lambda x: x.get("step", 0))
        steps = [x.get("step", i) for i, x in enumerate(per_step)]
        k = self.cfg.holdout
        if k is None:
            k = 1 if len(steps) >= 2 else 0
        elif k > len(steps) - 1:
            raise InputError("--holdout", f"{k} held-out batches, but the run has {len(steps)} batches (steps "
                                          f"{', '.join(map(str, steps))}) and needs one for calibration: at most "
                                          f"{len(steps) - 1}; continue with --resume --holdout N (the run is kept)")
        hold = set(steps[len(steps) - k:]) if k else set()
        self.state["holdout_steps"] = sorted(hold)
        calib = [x for x, s in zip(per_step, steps) if s not in hold]
        held = [x for x, s in zip(per_step, steps) if s in hold]
        vc = self.stages.judge(calib)
        vh = self.stages.judge(held) if held else None
        ok = bool(vc["ok"]) and (vh is None or bool(vh["ok"]))
        it["verdict"] = {"ok": ok, "calibration": vc, "holdout": vh,
                         "reasons": list(vc.get("reasons", [])) + list((vh or {}).get("reasons", []))}
        if vc["ok"] and vh is not None and not vh["ok"]:
            self.state["holdout_consumed"] = True
        outs = [x.get("output") or x for x in per_step]
        rels = [o.get("rel_l2") for o in outs if o.get("rel_l2") is not None]
        coss = [o.get("cosine") for o in outs if o.get("cosine") is not None]
        finite = all(o.get("finite", True) for o in outs)
        it["measured"] = {
            "rel_l2": _nanmax(rels), "cosine": _nanmin(coss), "finite": finite,
            "steps": len(steps), "holdout_steps": sorted(hold),
            "calibration_steps": [s for s in steps if s not in hold]}
        atomic_write_json(d / "final_metrics.json", json_safe({"steps": per_step, "holdout_steps": sorted(hold),
                                                               "verdict": it["verdict"]}))

    # ------------------------------------------------------------------ decisions
    def _tried(self) -> set[frozenset[Edit]]:
        return {edits_from_json(it["edits"]) for it in self.state["iterations"]}

    def _excluded(self) -> list[frozenset[Edit]]:
        return [edits_from_json(e["edits"]) for e in self.state["excluded"]]

    def _exclude(self, edits: frozenset[Edit], why: str, iteration: int | None) -> None:
        if edits and edits not in self._excluded():
            self.state["excluded"].append({"edits": edits_to_json(edits), "why": why, "iteration": iteration})

    def _passing(self) -> list[dict]:
        return [it for it in self.state["iterations"] if (it.get("verdict") or {}).get("ok")]

    def _step_decide(self, it: dict) -> None:
        d = self._folder(it["dir"])
        edits = edits_from_json(it["edits"])
        verdict = it.get("verdict") or {}
        nxt: tuple[Mixlist | None, str, dict] | None = None
        stop = None
        if verdict.get("ok"):
            nxt, stop = self._after_pass(it, edits, d)
        else:
            why = "; ".join(verdict.get("reasons", [])[:2]) or "failed"
            self._exclude(edits, f"measured: {why}", it["index"])
            if it["index"] == 0 and it.get("measured") is None and not self._passing():
                stop = "the run with the starting list failed; nothing to measure (see iter_00)"
            else:
                nxt, stop = self._after_fail(it, edits, d)
        if nxt is not None and self._budget_left() < 1:
            it["next_skipped"] = {"edits": edits_to_json(edits_of(nxt[0])), "reason": nxt[1]}
            nxt, stop = None, "run budget spent"
        if nxt is not None:
            m, reason, pred = nxt
            it["next"] = {"edits": edits_to_json(edits_of(m)), "reason": reason}
            self._new_iteration(m, reason, pred, parent=it["index"])
        else:
            self.state["status"] = "confirmed" if self._passing() else "exhausted"
            self.state["stop_reason"] = stop or ""
        atomic_write_json(d / "iteration.json", json_safe(it))
        it["done"].append("decide")
        self._done(f"{it['dir']}:decide")

    def _after_pass(self, it: dict, edits: frozenset[Edit], d: Path):
        tol = self.stages.tolerance
        if self.cfg.learn and it.get("measured"):
            trimmed = self.surrogate.trim(edits, Surrogate.capped(it["measured"]["rel_l2"], it["measured"]["finite"]),
                                          tol.max_rel_l2)
            if trimmed is not None and trimmed not in self._tried() and trimmed not in self._excluded():
                dropped = ", ".join(edit_key(e) for e in sorted(edits - trimmed))
                return (mixlist_from_edits(trimmed), f"trim over-fix: drop {dropped} (measured effect negligible)",
                        {}), None
        if not self.cfg.perf:
            return None, "confirmed"
        # a passing list: does recommend see more that can run in low precision (performance edits)?
        best_share = max((p.get("low_precision_time_share") or 0.0) for p in self._passing())
        prop = self._propose(it, d, want_perf=True)
        if prop is None:
            return None, "confirmed: recommend proposes no further edit"
        ps = prop.predicted.get("low_share")
        if ps is not None and it.get("low_precision_time_share") is not None and ps <= best_share + 1e-9:
            return None, "confirmed: no proposal with more low-precision time"
        return (prop.mixlist, "performance edits on a passing list", prop.predicted), None

    def _after_fail(self, it: dict, edits: frozenset[Edit], d: Path):
        if self.cfg.learn:
            combo = self.surrogate.combine(self.stages.tolerance.max_rel_l2)
            if combo is not None and combo not in self._tried() and combo not in self._excluded():
                return (mixlist_from_edits(combo), "learned: combine the edits measured to remove error "
                        f"({', '.join(edit_key(e) for e in sorted(combo))})",
                        {"surrogate_rel_l2": self.surrogate.predict(combo)}), None
        # recommend from the latest measured run (the failing one if it was measured, else its parent)
        src = it if it.get("measured") else self._measured_ancestor(it)
        if src is None:
            return None, "no measured run to recommend from"
        prop = self._propose(src, d)
        if prop is None:
            if any(x.get("status") == "loss-scale" for x in src["proposals"][-1]["log"]):
                return None, ("only the gradients fail (they underflow in low precision): no list edit fixes that; "
                              f"raise the loss scale ({src['dir']}/recommendation/recommendation.json: loss_scale)")
            return None, "recommend found no further untried edit set within limits"
        return (prop.mixlist, "fix: recommended on the measurements of " + src["dir"], prop.predicted), None

    def _measured_ancestor(self, it: dict) -> dict | None:
        p = it.get("parent")
        while p is not None:
            cand = self.state["iterations"][p]
            if cand.get("measured"):
                return cand
            p = cand.get("parent")
        return None

    def _propose(self, src: dict, d: Path, want_perf: bool = False) -> Proposal | None:
        """Recommend on ``src``'s run (starting from the list it used).  A proposal already tried or
        excluded, or one the surrogate predicts to fail (excluded without a run), is answered by
        asking again with its new edit types excluded from recommend's search -- at most
        MAX_SCREEN times.  Returns a proposal whose ``mixlist`` is the full list to run next."""
        run = self._load(src)
        base = _mixlist_or_none(src["mixlist"])
        base_edits = edits_of(base)
        steps = self._calib_steps(src)
        exclude_types: set[str] = set()
        if self.cfg.learn:
            learned = self.surrogate.useless_types(self.stages.tolerance.max_rel_l2) - {e[2] for e in base_edits}
            exclude_types |= learned
        log: list[dict] = [{"learned_exclude": sorted(exclude_types)}] if exclude_types else []
        out = None
        for attempt in range(MAX_SCREEN + 1):
            rec = self.stages.recommend(run, base, sorted(exclude_types), steps)
            if attempt == 0:
                self.stages.write_recommendation(rec, d / "recommendation")
            if want_perf and rec.perf_mixlist is not None:
                prop = Proposal(rec.perf_mixlist, rec.perf_predicted or rec.predicted, rec.ok, rec.raw)
            else:
                prop = rec
            if prop.edits == base_edits:
                log.append({"attempt": attempt, "result": "no new edit", "status": getattr(rec.raw, "status", None)})
                break
            new_types = {e[2] for e in (prop.edits - base_edits) or (base_edits - prop.edits)}
            if prop.edits in self._tried() or prop.edits in self._excluded():
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "already tried"})
            elif self.cfg.learn and not (ok := self.surrogate.screen(prop.edits, self.stages.tolerance.max_rel_l2))[0]:
                self._exclude(prop.edits, f"surrogate: measured effects of these edits predict rel_l2 {ok[1]:.3g}",
                              None)
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "surrogate rejected",
                            "predicted_rel_l2": ok[1]})
            else:
                if self.cfg.learn and ok[1] is not None:
                    prop.predicted = {**prop.predicted, "surrogate_rel_l2": ok[1]}
                log.append({"attempt": attempt, "edits": edits_to_json(prop.edits), "result": "proposed"})
                out = prop
                break
            if not new_types - exclude_types and log[-2:-1] and log[-2].get("edits") == log[-1].get("edits"):
                break                     # recommend answers the same even with these types excluded
            exclude_types |= new_types
        src.setdefault("proposals", []).append({"from": src["dir"], "perf": want_perf, "log": log})
        return out

    # ------------------------------------------------------------------ outputs
    def best(self) -> dict | None:
        passing = self._passing()
        if passing:
            return max(passing, key=lambda it: ((it.get("low_precision_time_share") or 0.0), -len(it["edits"]),
                                                -it["index"]))
        measured = [it for it in self.state["iterations"] if it.get("measured")]
        if not measured:
            return None
        return min(measured, key=lambda it: (Surrogate.capped(it["measured"]["rel_l2"], it["measured"]["finite"]),
                                             len(it["edits"])))

    def summary(self) -> dict:
        b = self.best()
        edits = edits_from_json(b["edits"]) if b else frozenset()
        meas = (b or {}).get("measured") or {}
        hist = []
        for it in self.state["iterations"]:
            v = it.get("verdict") or {}
            m = it.get("measured") or {}
            hist.append({
                "iteration": it["index"], "dir": it["dir"], "reason": it["reason"],
                "edits": edits_summary(edits_from_json(it["edits"])),
                "status": (it.get("result") or {}).get("status", "pending"),
                "message": (it.get("result") or {}).get("message", ""),
                "ok": v.get("ok"), "calibration_ok": (v.get("calibration") or {}).get("ok"),
                "holdout_ok": (v.get("holdout") or {}).get("ok") if v.get("holdout") else None,
                "reasons": v.get("reasons", []),
                "cosine": m.get("cosine"), "rel_l2": m.get("rel_l2"), "finite": m.get("finite"),
                "low_precision_time_share": it.get("low_precision_time_share"),
                "predicted": it.get("predicted") or {}, "runs_after": it.get("runs_after"),
                "proposals": it.get("proposals", []),
            })
        return {
            "confirmed": self.state["status"] == "confirmed",
            "status": self.state["status"], "stop_reason": self.state.get("stop_reason", ""),
            "runs": self.state["runs"],
            "run_counting": "FP32 reference once + one per mixed-precision execution (failed ones included)",
            "captures": self.state["captures"], "executions": self.state["executions"],
            "max_runs": self.cfg.max_runs, "mode": self.cfg.mode,
            "best_iteration": b["index"] if b else None,
            "edits": edits_summary(edits),
            "final": {"cosine": meas.get("cosine"), "rel_l2": meas.get("rel_l2"), "finite": meas.get("finite")},
            "low_precision_time_share": (b or {}).get("low_precision_time_share"),
            "holdout_steps": self.state.get("holdout_steps"),
            "holdout_consumed": bool(self.state.get("holdout_consumed")),
            "tolerance": self.stages.tolerance.to_dict() if hasattr(self.stages.tolerance, "to_dict") else None,
            "learning": {"enabled": self.cfg.learn, "edit_effects": self.surrogate.effects()
                         if self.cfg.learn else {}},
            "excluded": self.state["excluded"],
            "history": hist,
        }

    def finish(self) -> dict:
        s = self.summary()
        b = self.best()
        m = _mixlist_or_none(b["mixlist"]) if b else None
        atomic_write_text(self.out / "modify_mixlist.json", (m or Mixlist()).to_json(), keep_existing=True)
        atomic_write_json(self.out / "summary.json", json_safe(s))
        atomic_write_text(self.out / "report.html", render_html(s, self.out), keep_existing=False)
        return s


def _nonfinite(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and not math.isfinite(v)


def nonfinite_to_null(o: Any) -> Any:
    """Replace every non-finite number in a JSON-like structure by None, in place (tuples become
    lists): the journal's one convention for NaN / Infinity is JSON ``null`` (docs/formats.md)."""
    keys = list(o) if isinstance(o, dict) else range(len(o)) if isinstance(o, list) else ()
    for k in keys:
        v = o[k]
        if isinstance(v, tuple):
            v = o[k] = list(v)
        if _nonfinite(v):
            o[k] = None
        elif isinstance(v, (dict, list)):
            nonfinite_to_null(v)
    return o


# ---------------------------------------------------------------------- journal reader
_STATUSES = ("running", "confirmed", "exhausted")
_STEPS = ("run", "judge", "decide")
_RUN_STATUSES = ("ok", "failed", "timeout", "no-output")


class _Journal:
    """Type checks of a journal read back from disk (a user's file: never trusted)."""

    def __init__(self, path: Path):
        self.path = path

    def bad(self, where: str, problem: str) -> None:
        raise InputError(self.path, f"not a tune journal advisor can resume: {where} {problem}; start a new --out "
                                    "(or restore the file)")

    def get(self, d: dict, key: str, where: str, ok, what: str, optional: bool = False) -> Any:
        if key not in d:
            if optional:
                return None
            self.bad(f"{where}.{key}", "is missing")
        if not ok(d[key]):
            self.bad(f"{where}.{key}", f"must be {what}")
        return d[key]

    # value tests
    @staticmethod
    def int_(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    @classmethod
    def count(cls, x) -> bool:
        return cls.int_(x) and x >= 0

    @staticmethod
    def num(x) -> bool:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))

    @staticmethod
    def str_(x) -> bool:
        return isinstance(x, str)

    @staticmethod
    def opt_str(x) -> bool:
        return x is None or isinstance(x, str)

    @staticmethod
    def bool_(x) -> bool:
        return isinstance(x, bool)

    @staticmethod
    def dict_(x) -> bool:
        return isinstance(x, dict)

    def list_of(self, test):
        return lambda x: isinstance(x, list) and all(test(v) for v in x)

    @staticmethod
    def edit(x) -> bool:
        return (isinstance(x, list) and len(x) == 3 and all(isinstance(v, str) for v in x)
                and x[0] in ("black", "white", "gray") and x[1] in ("to-add", "to-remove"))

    def result(self, d: Any, where: str) -> None:
        if not isinstance(d, dict):
            self.bad(where, "must be an object")
        self.get(d, "status", where, lambda x: x in _RUN_STATUSES, f"one of {', '.join(_RUN_STATUSES)}")
        self.get(d, "message", where, self.str_, "a string")
        self.get(d, "has_reference", where, self.bool_, "true or false")
        self.get(d, "executions", where, self.count, "a count")
        for k in ("run_dir", "stdout", "stderr"):
            self.get(d, k, where, self.opt_str, "a string or null", optional=True)
        self.get(d, "returncode", where, lambda x: x is None or self.int_(x), "an integer or null", optional=True)
        self.get(d, "duration_s", where, self.num, "a number", optional=True)
        self.get(d, "extra", where, self.dict_, "an object", optional=True)

    def verdict(self, d: Any, where: str, top: bool) -> None:
        if not isinstance(d, dict):
            self.bad(where, "must be an object")
        self.get(d, "ok", where, self.bool_, "true or false")
        self.get(d, "reasons", where, self.list_of(self.str_), "a list of strings", optional=not top)
        self.get(d, "worst", where, lambda x: x is None or isinstance(x, dict), "an object or null", optional=True)
        if top:
            for k in ("calibration", "holdout"):
                v = self.get(d, k, where, lambda x: x is None or isinstance(x, dict), "an object or null")
                if v is not None:
                    self.verdict(v, f"{where}.{k}", False)

    def iteration(self, it: Any, i: int, last: bool, running: bool) -> None:
        w = f"iterations[{i}]"
        if not isinstance(it, dict):
            self.bad(w, "must be an object")
        self.get(it, "index", w, lambda x: x == i and self.int_(x), f"{i}")
        if it.get("dir") != f"iter_{i:02d}":
            self.bad(f"{w}.dir", f"is {it.get('dir')!r}, not the folder 'iter_{i:02d}' inside --out (a folder "
                                 "outside it is never used)")
        edits = self.get(it, "edits", w, self.list_of(self.edit), "a list of [list, action, op type] edits")
        ml = self.get(it, "mixlist", w, self.dict_, "a modify_mixlist object")
        try:
            m = parse_obj(ml, f"{w}.mixlist")
        except InputError as e:
            self.bad(f"{w}.mixlist", f"is not a valid modify_mixlist ({e.problem})")
        if edits_of(m) != edits_from_json(edits):
            self.bad(f"{w}.edits", "differ from its mixlist")
        self.get(it, "reason", w, self.str_, "a string")
        pred = self.get(it, "predicted", w, self.dict_, "an object")
        if not all(self.num(v) or isinstance(v, bool) for v in pred.values()):
            self.bad(f"{w}.predicted", "must hold numbers and true/false")
        self.get(it, "parent", w, lambda x: x is None or (self.int_(x) and 0 <= x < i), "null or an earlier index")
        done = self.get(it, "done", w, lambda x: isinstance(x, list) and x == list(_STEPS[:len(x)]),
                        "'run', 'judge', 'decide' in that order")
        if (not last or not running) and len(done) < 3:
            self.bad(f"{w}.done", "must be complete for a finished iteration")
        if "run" in done:
            self.result(self.get(it, "result", w, self.dict_, "an object"), f"{w}.result")
            self.get(it, "runs_after", w, self.count, "a count", optional=True)
        if "judge" in done:
            self.verdict(self.get(it, "verdict", w, self.dict_, "an object"), f"{w}.verdict", True)
            m = self.get(it, "measured", w, lambda x: x is None or isinstance(x, dict), "an object or null")
            if m is not None:
                for k in ("rel_l2", "cosine"):
                    self.get(m, k, f"{w}.measured", self.num, "a number or null")
                self.get(m, "finite", f"{w}.measured", self.bool_, "true or false")
                for k in ("holdout_steps", "calibration_steps"):
                    self.get(m, k, f"{w}.measured", self.list_of(self.int_), "a list of steps")
            self.get(it, "low_precision_time_share", w, self.num, "a number or null", optional=True)
            self.get(it, "notes", w, self.list_of(self.str_), "a list of strings", optional=True)
        props = self.get(it, "proposals", w, self.list_of(self.dict_), "a list of objects", optional=True)
        for j, pr in enumerate(props or []):
            self.get(pr, "log", f"{w}.proposals[{j}]", self.list_of(self.dict_), "a list of objects")
        for k in ("next", "next_skipped"):
            self.get(it, k, w, self.dict_, "an object", optional=True)

    def check(self, st: Any) -> dict:
        if not isinstance(st, dict):
            self.bad("the file", f"must hold a JSON object, not {type(st).__name__}")
        if st.get("version") != STATE_VERSION:
            self.bad("version", f"{st.get('version')!r} is not {STATE_VERSION}")
        self.get(st, "identity", "journal", self.dict_, "an object")
        status = self.get(st, "status", "journal", lambda x: x in _STATUSES, f"one of {', '.join(_STATUSES)}")
        for k in ("runs", "executions", "captures"):
            self.get(st, k, "journal", self.count, "a count")
        self.get(st, "holdout_steps", "journal", lambda x: x is None or self.list_of(self.int_)(x),
                 "null or a list of steps")
        self.get(st, "holdout_consumed", "journal", self.bool_, "true or false", optional=True)
        self.get(st, "stop_reason", "journal", self.str_, "a string", optional=True)
        its = self.get(st, "iterations", "journal", lambda x: isinstance(x, list) and len(x) > 0,
                       "a non-empty list")
        for i, it in enumerate(its):
            self.iteration(it, i, i == len(its) - 1, status == "running")
        ref = self.get(st, "reference", "journal", lambda x: x is None or isinstance(x, dict), "an object or null")
        if ref is not None:
            kind = self.get(ref, "kind", "reference", lambda x: x in ("embedded", "separate"), "embedded or separate")
            if kind == "embedded":
                self.get(ref, "iteration", "reference", lambda x: self.int_(x) and 0 <= x < len(its), "an iteration")
            else:
                self.get(ref, "dir", "reference", lambda x: x == "reference/run", "'reference/run'")
                self.result(ref.get("result"), "reference.result")
        for j, ex in enumerate(self.get(st, "excluded", "journal", self.list_of(self.dict_), "a list of objects")):
            self.get(ex, "edits", f"excluded[{j}]", self.list_of(self.edit), "a list of edits")
            self.get(ex, "why", f"excluded[{j}]", self.str_, "a string")
            self.get(ex, "iteration", f"excluded[{j}]", lambda x: x is None or self.int_(x), "an index or null")
        for j, ev in enumerate(self.get(st, "events", "journal", self.list_of(self.dict_), "a list of objects")):
            self.get(ev, "step", f"events[{j}]", self.str_, "a string")
        return st


def read_journal(path: Path) -> dict:
    """The tune journal, checked before anything in it is used: a regular UTF-8 file of strict JSON
    (older journals' NaN / Infinity are read as null), every field of the type the loop needs and
    consistent (iteration indexes, folders ``iter_NN``, steps done in order, edits = mixlist).
    Anything else is one InputError naming the file."""
    return _Journal(path).check(nonfinite_to_null(read_user_json(path, "a tune journal (tune_state.json)")))


def json_safe(o: Any) -> Any:
    """A copy with non-finite numbers as None, so summary.json and the iteration files are strict
    JSON (the same convention as the journal's, ``nonfinite_to_null``)."""
    if _nonfinite(o):
        return None
    if isinstance(o, dict):
        return {k: json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    return o


def _mixlist_or_none(d: dict | None) -> Mixlist | None:
    if not d:
        return None
    m = parse_obj(d)
    return None if m.is_empty() else m


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


# ====================================================================== report
def render_html(s: dict, out: Path | None = None) -> str:
    """HTML with everything inline (verdict, final list, every iteration's edits, verdicts and all
    their reasons, figures, error and low-precision-share plots from advisor.report's SVG) except the
    links to each iteration's files, relative to the page: it stays beside its ``iter_NN/`` folders.
    Hooks: ``#summary``, ``#status[data-status]``, ``table#iterations`` with ``tr.iteration
    [data-iteration][data-ok]``, ``#links-note``, ``#error-plot``, ``#share-plot``, ``#mixlist``, ``#excluded``."""
    e = html.escape
    try:
        from .report.html import CSS
        from .report.svg import line_plot, share_bars
    except ImportError:  # pragma: no cover - report stage absent
        CSS, line_plot, share_bars = "table{border-collapse:collapse}td,th{border:1px solid #ccc}", None, None

    def fmt(x, spec=".4g"):
        if x is None:
            return "–"
        if isinstance(x, bool):
            return "yes" if x else "no"
        if isinstance(x, float):
            return format(x, spec)
        return e(str(x))

    def edits_txt(ed: dict) -> str:
        parts = []
        for lst, v in ed.items():
            for action in ("to-add", "to-remove"):
                for t in v.get(action, []):
                    parts.append(f"{lst} {action} <code>{e(t)}</code>")
        return "<br>".join(parts) or "<i>default lists</i>"

    def links(h: dict) -> str:
        out_l = []
        for rel, label in (("recommendation/report.html", "recommendation"), ("comparison/comparison.json",
                           "comparison"), ("final_metrics.json", "final metrics"), ("stdout.txt", "stdout"),
                           ("stderr.txt", "stderr")):
            p = f"{h['dir']}/{rel}"
            if out is None or (out / p).exists():
                out_l.append(f"<a href='{e(p)}'>{label}</a>")
        return " · ".join(out_l)

    def reasons(h: dict) -> str:
        rs = [e(r) for r in h["reasons"]] or [e(h["message"])]
        more = f"<details><summary>{len(rs) - 3} more</summary>{'<br>'.join(rs[3:])}</details>" if len(rs) > 3 else ""
        return "<br>".join(rs[:3]) + more

    rows = []
    for h in s["history"]:
        cls = "ok" if h["ok"] else ("pending" if h["ok"] is None else "bad")
        rows.append(
            f"<tr class='iteration {cls}' data-iteration='{h['iteration']}' data-ok='{str(bool(h['ok'])).lower()}'>"
            f"<td>{h['iteration']}</td><td>{e(h['dir'])}<br>{links(h)}</td><td>{e(h['reason'])}</td>"
            f"<td>{edits_txt(h['edits'])}</td><td>{e(h['status'])}</td><td class='{cls}'>{fmt(h['ok'])}</td>"
            f"<td>{fmt(h['calibration_ok'])}</td><td>{fmt(h['holdout_ok'])}</td><td>{fmt(h['cosine'], '.6f')}</td>"
            f"<td>{fmt(h['rel_l2'])}</td><td>{fmt(h['finite'])}</td><td>{fmt(h['low_precision_time_share'], '.1%')}</td>"
            f"<td>{fmt((h['predicted'] or {}).get('rel_l2'))}</td><td>{fmt(h['runs_after'])}</td>"
            f"<td>{reasons(h)}</td></tr>")
    head = ("<tr><th>#</th><th>folder</th><th>why this run</th><th>edits vs default</th><th>run</th><th>pass</th>"
            "<th>calibration</th><th>held-out</th><th>cosine (min)</th><th>rel L2 (max)</th><th>finite</th>"
            "<th>low-precision time</th><th>predicted rel L2</th><th>runs so far</th><th>notes</th></tr>")
    plots = ""
    if line_plot is not None and s["history"]:
        tol = (s.get("tolerance") or {}).get("max_rel_l2")
        meas = [h["rel_l2"] if h["finite"] is not False else float("inf") for h in s["history"]]
        pred = [(h["predicted"] or {}).get("rel_l2") for h in s["history"]]
        plots += "<div id='error-plot-wrap'>" + line_plot(
            {"measured": meas, "predicted": pred}, {"measured": "#1f6feb", "predicted": "#d29922"},
            title="final relative L2 per iteration (dot on the top edge: non-finite; gap: not run)", threshold=tol,
            svg_id="error-plot", y_label="rel. L2 (log10)", x_label="iteration") + "</div>"
        bars = [(h["dir"], h["low_precision_time_share"]) for h in s["history"]
                if h["low_precision_time_share"] is not None]
        if bars:
            plots += share_bars(bars, svg_id="share-plot", title="low-precision kernel time share")
    f = s["final"]
    status = "confirmed" if s["confirmed"] else "not-confirmed"
    verdict = "confirmed" if s["confirmed"] else "NOT confirmed"
    ml = json.dumps(s["edits"], indent=2)
    excl = "".join(f"<li>{e(json.dumps(x['edits']))}: {e(x['why'])}</li>" for x in s["excluded"]) or "<li>none</li>"
    eff = s.get("learning", {}).get("edit_effects") or {}
    eff_html = "".join(f"<tr><td><code>{e(k)}</code></td><td>{v:+.4g}</td></tr>" for k, v in sorted(eff.items()))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>advisor tune</title><style>{CSS}
tr.ok td{{background:#eef8ee}}tr.bad td{{background:#fbeeee}}</style></head><body>
<h1>advisor tune: <span id="status" data-status="{status}" class="{'ok' if s['confirmed'] else 'bad'}">{verdict}</span></h1>
<div id="summary"><p>{e(s.get('stop_reason', ''))}</p>
<p>runs: <b>{s['runs']}</b> of {s['max_runs']} ({e(s['run_counting'])}); runner calls {s['captures']},
model executions {s['executions']}; mode {e(s['mode'])}; held-out steps {e(str(s.get('holdout_steps')))}</p>
<p>final (iteration {fmt(s['best_iteration'])}): cosine {fmt(f['cosine'], '.6f')}, relative L2 {fmt(f['rel_l2'])},
finite {fmt(f['finite'])}; low-precision time share {fmt(s['low_precision_time_share'], '.1%')}</p></div>
<h2>modify_mixlist.json</h2><pre id="mixlist">{e(ml)}</pre>
<h2>Iterations</h2><p id="links-note" class="muted">Everything on this page is inline except the links in the
folder column: they point into the <code>iter_NN/</code> folders beside this file (comparison, recommendation,
final metrics, logs), so keep report.html in the tune folder with them.</p>
<table id="iterations">{head}{''.join(rows)}</table>
{plots}
<h2>Excluded edit sets</h2><ul id="excluded">{excl}</ul>
<h2>Learned edit effects</h2><p class="muted">ridge regression of the measured final relative L2 on edit
indicators (finite runs only); negative = the edit removed error</p><table id="effects">{eff_html or '<tr><td>none yet</td></tr>'}</table>
</body></html>
"""


# ====================================================================== entry point
def tune(runner: Runner, out: str | os.PathLike, mode: str = "mixed_float16", max_runs: int = 6,
         holdout: int | None = None, resume: bool = False, tolerance=None, learn: bool = True,
         base_mixlist: Mixlist | None = None, stages: Stages | None = None, soc: str | None = None,
         ops_info: str | None = None, perf: bool = True, progress=None) -> dict:
    """Run the tuning loop; returns the summary (also written to ``out/summary.json``).
    ``progress(msg)`` hears each run as it starts and its verdict."""
    from .semantics import mode_info, uses_mixlist
    try:
        mode_info(mode)
    except ValueError as e:
        raise InputError("--mode", str(e)) from None
    if not uses_mixlist(mode):
        raise InputError("--mode", f"{mode} does not apply a mixlist; tune needs mixed_float16 or mixed_bfloat16")
    if max_runs < 2:
        raise InputError("--max-runs", "needs at least 2 (the FP32 reference and one mixed run)")
    if holdout is not None and holdout < 0:
        raise InputError("--holdout", "must be >= 0")
    st = stages or Stages(tolerance, soc=soc, ops_info=ops_info, mode=mode)
    t = Tuner(runner, st, TuneConfig(Path(out), mode, max_runs, holdout, learn, perf, base_mixlist), progress)
    t.start(resume=resume)
    return t.run()
