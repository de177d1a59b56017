"""recommend on a run trained over optimizer steps (``train/steps.jsonl``, GE engine): the change of training
settings that fixes the first departure (``compare.steps``), chosen by re-running the steps -- measured, never
estimated (docs/recommend.md "Training over steps").

Candidates (each one *change*; every rule a choice unless its line says otherwise):

* ``fp32-type`` -- black-list an op type that leads to the departure: the first anomalous op of the departure step
  (execution order, forward before backward), the other op types that overflowed at that step (at most
  ``MAX_TYPES``), and the types the one-step advice (``core.recommend`` on the run's dumps of the first dumped step
  at or after the departure, else the last) moves to the black list -- a drift without an overflow has no anomaly
  to name its op.  A loss-scale death spiral caused by one op's overflowing gradient is fixed here: that op's type
  computes in fp32, where its gradient fits.
* ``low-dtype`` -- the mode's fp16 <-> bf16 partner (``LOW_PARTNER``), bf16 only on a chip that has it (not on
  ``NO_BF16_SOCS``); a switch to fp16 brings the framework's default scaler (``scalers.DEFAULTS``: the torch_npu
  GradScaler, a Keras run's NpuLossScaleOptimizer) with its defaults when the run had no scaler.
* ``scaler`` -- after a scale collapse or a run of skipped steps: a dynamic scale starting at the largest scale the
  run applied a step at, a shorter growth interval (``GROWTH_INTERVAL``), a static scale at that scale, a floor
  (Apex ``min_loss_scale``); never a scale below ``Tolerance.min_loss_scale`` (below it the scale has collapsed by
  definition) and never a larger one (a spiral overflows at every larger scale).  An fp16 run without a scaler gets
  the framework's default scaler (its defaults).  Each scaler by its own parameter names (``SCALER_KNOBS``); the
  static scale of a TF scaler is its framework's (``tf_keras`` ``dynamic=False``, ``tf1_fixed``).
* ``clip`` -- gradient clipping at the largest FP32 gradient norm of the run: the FP32 run is unchanged by it (its
  reference stays valid: ``clip_grad_norm_`` multiplies by exactly 1), the mixed run's spikes above it are clipped;
  proposed only where the mixed run's gradient norm exceeded it.

Each candidate (then pairs of the singles that moved the departure latest, while none fixes and the budget lasts) is
re-run from the same initial weights and data order over the steps up to and past the departure (``horizon``), the
FP32 run computed once and reused (``emulator.train.FP32Steps``), and judged by ``compare.steps.judge_steps`` with
the same tolerance.  A candidate *fixes* the departure when its re-run has no departure and its skipped share
(``skipped_share``: the skipped steps after the first applied one -- the scaler's calibration from its initial scale
is exempt, as compare exempts it -- over all steps; 1 when no step was applied) is at most ``max_skipped_share``: a
floor that keeps the scale up while every step is skipped stalls training, no departure by the scale but no fix.  Ranking: fixes the departure, then fewest changes, then most
low-precision time kept (measured: ``costmodel.kernel_low_share`` of the re-run's profile), then the latest departure.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..compare.steps import LOSS_PATIENCE, judge_steps
from ..compare.tolerance import Tolerance, loss_rel_diff
from ..errors import InputError
from ..ingest.steps import STEPS_FILE, read_steps
from ..mixlist import Mixlist, compose, effective, from_targets, parse_obj
from ..oplists import BLACK, load_lists
from ..scalers import DEFAULTS
from ..workload import is_tf_model
from .edits import Edit, proposable
from .result import (HOW_TRAINING as HOW, EditEvidence, EditReport, PlanSummary, Predicted, Recommendation,
                     ToleranceLimits, TrainingAdvice, TrainingCandidate)

MAX_TYPES = 3              # op types proposed from one departure step (choice)
GROWTH_INTERVAL = 100      # the shorter growth interval proposed after a collapse (choice; the sources' 2000)
MAX_RERUNS = 12            # re-runs one recommendation may spend (choice)
MAX_SKIPPED_SHARE = 0.05   # skipped steps a fixed (and a confirmed) run may have (choice: sporadic overflows only)
NO_BF16_SOCS = frozenset({"ascend910", "ascend310p"})      # chips without bf16 (docs/semantics.md, kernel tables)
# a dynamic scaler's start and growth-interval parameters, and its static form at a scale g (its framework's)
SCALER_KNOBS = {"torch_npu": ("init_scale", "growth_interval"), "apex": ("init_scale", "scale_window"),
                "tf_keras": ("initial_scale", "dynamic_growth_steps"), "keras": ("initial_scale", "dynamic_growth_steps"),
                "tf1": ("init_loss_scale", "incr_every_n_steps")}
STATIC_FORM = {"torch_npu": lambda g: ("static", (("scale", g),)), "apex": lambda g: ("static", (("scale", g),)),
               "keras": lambda g: ("static", (("scale", g),)),
               "tf_keras": lambda g: ("tf_keras", (("dynamic", False), ("initial_scale", g))),
               "tf1": lambda g: ("tf1_fixed", (("loss_scale", g),))}
LOW_PARTNER = {"mixed_float16": "mixed_bfloat16", "allow_mix_precision": "allow_mix_precision_bf16",
               "allow_mix_precision_fp16": "allow_mix_precision_bf16", "allow_fp32_to_fp16": "allow_fp32_to_bf16",
               "mixed_bfloat16": "mixed_float16", "allow_mix_precision_bf16": "allow_mix_precision_fp16",
               "allow_fp32_to_bf16": "allow_fp32_to_fp16"}


@dataclass(frozen=True)
class Settings:
    """What a candidate changes of the training run: its precision mode, op types moved to the black list, the
    mixed run's scaler and options, gradient clipping."""

    mode: str
    black: frozenset = frozenset()
    scaler: str | None = None
    scaler_options: tuple = ()           # sorted (name, value) pairs
    clip_grad_norm: float | None = None

    @property
    def options(self) -> dict:
        return dict(self.scaler_options)


@dataclass(frozen=True)
class Change:
    kind: str                            # fp32-type | low-dtype | scaler | clip
    text: str
    apply: Callable[[Settings], Settings] = field(compare=False, hash=False)


def has_training_steps(run: Any) -> bool:
    """Is ``run`` (a run directory) a run trained over optimizer steps?"""
    return isinstance(run, (str, Path)) and (Path(run) / STEPS_FILE).is_file()


# ---------------------------------------------------------------------- entry point
def recommend_training(run: str | Path, tolerance: Tolerance | None = None, *, workload: Callable | None = None,
                       max_reruns: int = MAX_RERUNS, progress: Any = None, base_mixlist: Mixlist | None = None,
                       exclude: tuple = (), soc: str | None = None, mode: str | None = None,
                       batches: list | None = None, reuse_fp32: bool = True, one_step: Callable | None = None,
                       max_skipped_share: float = MAX_SKIPPED_SHARE, **_: Any) -> Recommendation:
    """The training-settings advice for a run with ``train/steps.jsonl``.  ``workload``: a function building a fresh
    Workload of the run (default: run.json's ``target`` loaded again); ``batches``: the batches the re-runs train on
    (tune's calibration batches; default the workload's).  ``reuse_fp32``: the re-runs reuse the first one's FP32
    run (``emulator.train.FP32Steps``); False runs it in every re-run (the cost benchmark's baseline).
    ``one_step``: ``core.recommend`` (the one-step advice on the run's dumps; None: not asked).  Callers outside
    recommend use ``core.recommend_steps``, which passes it."""
    tol = tolerance or Tolerance()
    say = progress or (lambda msg: None)
    run = Path(run)
    meta = _meta(run)
    log = read_steps(run, meta)
    verdict = judge_steps(log, tol)
    soc = soc or meta.get("soc") or "ascend910b"
    mode = mode or meta.get("mode") or "mixed_float16"
    defaults = load_lists(soc, None, meta.get("cann"))
    start = base_mixlist if base_mixlist is not None else (
        parse_obj(meta["mixlist"], str(run / "run.json")) if meta.get("mixlist") else None)
    rec = Recommendation(status="no-change-needed", ok=True, mode=mode, soc=soc, tolerance=ToleranceLimits.of(tol),
                         modify_mixlist=compose(defaults, None, start or Mixlist()), start_mixlist=start)
    dep = verdict.departure
    advice = TrainingAdvice(steps=verdict.steps, horizon=verdict.steps,
                            departure=None if dep is None else {**dep.__dict__, "summary": verdict.sentence()},
                            precision=dep is None or dep.precision)
    rec.training = advice
    if dep is None:
        rec.notes.append(f"training over {verdict.steps} steps: no departure from the FP32 run; nothing to change")
        return rec
    if not dep.precision:
        rec.notes.append(f"not a precision problem: the FP32 run diverges too (step {verdict.fp32_diverges_at}); "
                         "no precision setting can fix it")
        return rec
    build = workload or _loader(meta, run)
    t0 = time.perf_counter()
    search = _Search(run, build, meta, log, tol, soc, mode, defaults, start, set(exclude), batches, say, one_step)
    search.max_skipped = max_skipped_share
    if not reuse_fp32:
        search.ref.disabled = True
    search.run(max_reruns)
    advice.horizon, advice.reruns, advice.seconds = search.horizon, len(search.tried), time.perf_counter() - t0
    advice.fp32_reused_steps = search.ref.reused
    advice.candidates = [c for _, c in search.tried]
    best = search.best()
    if best is None or not best[1].fixes:
        rec.status, rec.ok = "no-solution", False
        rec.notes.append(f"none of the {len(search.tried)} re-run candidates fixes the departure at step {dep.step} "
                         f"({dep.reason}); the closest moves it to step "
                         f"{best[1].departure_step if best else dep.step}")
        return rec
    chosen, cand = best
    s = search.settings_of(chosen)
    advice.chosen, advice.kinds = cand.changes, cand.kinds
    advice.settings = {"mode": s.mode, "black_add": sorted(s.black), "scaler": s.scaler,
                       "scaler_options": s.options, "clip_grad_norm": s.clip_grad_norm}
    advice.snippet = training_snippet(s, search.base, meta.get("framework") or "pytorch")
    rec.status, rec.mode = "recommended", s.mode
    edits = [Edit("black-add", t) for t in sorted(s.black - search.base.black)]
    rec.edits = [EditReport(e, explanation=f"{t} leads to the departure at step {dep.step} ({dep.reason}); "
                                              f"in fp32 the re-run over {search.horizon} steps does not depart "
                                              f"({HOW})", evidence=_evidence(cand))
                 for e, t in zip(edits, sorted(s.black - search.base.black))]
    if s.black != search.base.black:
        rec.modify_mixlist = compose(defaults, start, from_targets(effective(defaults, start),
                                                                    {t: BLACK for t in s.black}))
    base_c = search.baseline()
    rec.predicted = Predicted(base=_summary(base_c, False), recommended=_summary(cand, True),
                              base_meets_tolerance=False, recommended_meets_tolerance=True, how=HOW)
    rec.snippets["training"] = advice.snippet
    rec.notes.append(f"training advice: {'; '.join(cand.changes)} -- the departure at step {dep.step} ({dep.reason}) "
                     f"is gone over the {search.horizon} steps re-run, {HOW}; {len(search.tried)} candidates re-run "
                     f"({', '.join(f'{c.departure_step}' if not c.fixes else 'fixed' for _, c in search.tried)})")
    return rec


# ---------------------------------------------------------------------- the search
class _Search:
    def __init__(self, run_dir, build, meta, log, tol, soc, mode, defaults, start, exclude, batches, say, one_step):
        from ..emulator.train import FP32Steps
        self.run_dir, self.one_step = run_dir, one_step
        self.build, self.meta, self.log, self.tol, self.soc = build, meta, log, tol, soc
        self.defaults, self.start, self.exclude, self.batches, self.say = defaults, start, exclude, batches, say
        wl = self._workload()
        # every re-run starts from these weights and trains on these batches, whatever the builder does
        self.state0 = _weights_of(wl.model)
        self.batches0 = list(wl.batches)
        self.default_scaler = DEFAULTS["tensorflow" if meta.get("framework") == "tensorflow" else "pytorch"]
        ran = ((meta.get("train") or {}).get("scaler") or {}).get("name")   # the scaler the run used (its default)
        self.verdict = judge_steps(log, tol)
        dep = self.verdict.departure
        self.horizon = min(len(log.steps), max(2 * dep.step + 2, dep.step + 1 + 2 * LOSS_PATIENCE))
        self.base = Settings(mode, frozenset(), wl.scaler if wl.scaler is not None or ran in (None, "none") else ran,
                             tuple(sorted((wl.scaler_options or {}).items())), wl.clip_grad_norm)
        self.ref = FP32Steps()
        self.tried: list[tuple[tuple, TrainingCandidate]] = []
        self.changes = self._changes()
        self._base_c: TrainingCandidate | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="advisor_train_rec_"))
        self.max_skipped = MAX_SKIPPED_SHARE

    def _workload(self):
        try:
            wl = self.build()
        except InputError:
            raise
        except Exception as e:   # the user's builder
            raise InputError(self.meta.get("target"), f"building the workload again failed: {e}") from None
        from ..workload import normalize
        wl = normalize(wl, str(self.meta.get("target") or "workload"))
        if not wl.trains:
            raise InputError(self.meta.get("target"), "the workload has no optimizer: the training steps cannot be "
                                                      "re-run")
        if self.batches is not None:
            wl.batches = list(self.batches)
        return wl

    # --- candidates
    def _changes(self) -> list[Change]:
        dep, st, out = self.verdict.departure, self.log.steps, []
        row = st[st["step"] == dep.step]
        anomalies = list(row["anomalies"].iloc[0] or []) if len(row) else []
        types: list[str] = []
        for t in [dep.op_type] + [a.get("type") for a in sorted(anomalies, key=lambda a: int(a.get("index", 0)))]:
            if t and t not in types and proposable(t, self.exclude) and self.defaults.list_of(t) != BLACK:
                types.append(t)
        types = types[:MAX_TYPES]
        types += [t for t in self._dump_advice(dep.step) if t not in types and proposable(t, self.exclude)]
        for t in types:
            out.append(Change("fp32-type", f"black-list to-add {t} (compute {t} in fp32)",
                              lambda s, t=t: replace(s, black=s.black | {t})))
        partner = LOW_PARTNER.get(self.base.mode)
        if partner is not None and not (_low(partner) == "bf16" and self.soc in NO_BF16_SOCS):
            add_scaler = _low(partner) == "fp16" and self.base.scaler is None
            out.append(Change("low-dtype", f"precision mode {partner} ({_low(partner)})"
                              + (f" with the {self.default_scaler} scaler" if add_scaler else ""),
                              lambda s, m=partner, a=add_scaler, d=self.default_scaler: replace(s, mode=m, **(
                                  {"scaler": d, "scaler_options": ()} if a else {}))))
        out += self._scaler_changes(dep.reason)
        gf, gm = st["grad_norm_fp32"].astype(float), st["grad_norm_mixed"].astype(float)
        cap = float(gf[gf.map(math.isfinite)].max()) if gf.map(math.isfinite).any() else math.nan
        over = ((gm > cap) | ~gm.map(math.isfinite)).any() if math.isfinite(cap) else False
        if math.isfinite(cap) and cap > 0 and over and dep.reason in ("non-finite", "loss", "drift"):
            out.append(Change("clip", f"clip gradients to max-norm {cap:.4g} (the largest FP32 gradient norm: the "
                                      "FP32 run is unchanged)", lambda s, c=cap: replace(s, clip_grad_norm=c)))
        return out

    def _dump_advice(self, step: int) -> list[str]:
        """The types the one-step advice on the run's dumps of a step at or after ``step`` black-lists ([] when it
        cannot say: no dumps, nothing within tolerance)."""
        from ..analysis import analyze
        from ..errors import AdvisorError
        if self.one_step is None:
            return []
        try:
            a = analyze(self.run_dir, tolerance=self.tol, soc=self.soc)
            later = [s for s in a.steps if s >= step] or list(a.steps)[-1:]
            if not later:
                return []
            self.say(f"the one-step advice on the dumps of step {later[0]}")
            rec = self.one_step(a, self.tol, steps=[later[0]], perf=False, exclude=tuple(self.exclude))
        except AdvisorError:
            return []
        return [e.edit.type for e in rec.edits if e.edit.kind == "black-add"]

    def _scaler_changes(self, reason: str) -> list[Change]:
        st, floor, b = self.log.steps, self.tol.min_loss_scale, self.base
        out: list[Change] = []
        if _low(b.mode) == "fp16" and b.scaler is None:
            out.append(Change("scaler", f"the {self.default_scaler} scaler (dynamic, its defaults)",
                              lambda s, d=self.default_scaler: replace(s, scaler=d, scaler_options=())))
        if reason not in ("scale-collapse", "skipped") or b.scaler is None:
            return out
        applied = st.loc[~st["skipped"].fillna(False).astype(bool), "scale"].astype(float)
        applied = applied[applied >= floor]
        good = float(applied.max()) if len(applied) else None
        if b.scaler in SCALER_KNOBS and b.options.get("dynamic", True):
            start, interval = SCALER_KNOBS[b.scaler]
            if good is not None:
                out.append(Change("scaler", f"{b.scaler} scaler starting at {good:g} (the largest scale a step was "
                                            "applied at)", lambda s, g=good, k=start: _opts(s, **{k: g})))
                name, opts = STATIC_FORM[b.scaler](good)
                out.append(Change("scaler", f"a static scale {good:g}", lambda s, n=name, o=opts: replace(
                    s, scaler=n, scaler_options=o)))
            out.append(Change("scaler", f"{b.scaler} scaler with {interval}={GROWTH_INTERVAL}",
                              lambda s, k=interval: _opts(s, **{k: GROWTH_INTERVAL})))
        if b.scaler == "apex":
            out.append(Change("scaler", f"a floor: Apex min_loss_scale={floor:g}",
                              lambda s: _opts(s, min_loss_scale=floor)))
        return out

    def settings_of(self, idx: tuple) -> Settings:
        s = self.base
        for i in idx:
            s = self.changes[i].apply(s)
        return s

    # --- re-runs
    def run(self, budget: int) -> None:
        self.say(f"re-running {len(self.changes)} training-setting candidates over {self.horizon} steps")
        try:
            singles = [(i,) for i in range(len(self.changes))]
            for idx in singles[:budget]:
                self._try(idx)
            if any(c.fixes for _, c in self.tried):
                return
            order = sorted(self.tried, key=lambda x: -(x[1].departure_step if x[1].departure_step is not None
                                                       else self.horizon))
            top = [idx[0] for idx, _ in order[:4]]
            pairs = [(a, b) for k, a in enumerate(top) for b in top[k + 1:]
                     if self.changes[a].kind != self.changes[b].kind or self.changes[a].kind == "fp32-type"]
            for idx in pairs:
                if len(self.tried) >= budget:
                    break
                if self._try(tuple(sorted(idx))).fixes:
                    break
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def baseline(self) -> TrainingCandidate:
        """The run as it was, over the horizon (from the run's own steps: no re-run)."""
        st = self.log.steps[self.log.steps["step"] < self.horizon]
        dep = self.verdict.departure
        return TrainingCandidate([], [], False, dep.step, dep.reason,
                                 skipped_share(st),
                                 _last_rel(st), None, len(st), how="measured (the run)")

    def _try(self, idx: tuple) -> TrainingCandidate:
        from ..emulator import capture
        s = self.settings_of(idx)
        wl = self._workload()
        _load_weights(wl.model, self.state0)
        wl.batches = list(self.batches0)
        wl.steps, wl.dump_every = self.horizon, self.horizon
        wl.scaler, wl.scaler_options, wl.clip_grad_norm = s.scaler, s.options, s.clip_grad_norm
        ml = None
        if s.black or self.start is not None:
            ml = compose(self.defaults, self.start, from_targets(effective(self.defaults, self.start),
                                                                  {t: BLACK for t in s.black}))
        out = self.tmp / f"c{len(self.tried)}"
        m = self.meta
        kw = {k: m[k] for k in ("overflow_mode", "allow_hf32") if m.get(k)}
        capture(wl, out, mode=s.mode, mixlist=ml if ml is not None and not ml.is_empty() else None, soc=self.soc,
                seed=int(m.get("seed") or 0), dump="stats", local=False, cann=m.get("cann"),
                train_reference=self.ref, **kw)
        log = read_steps(out)
        v = judge_steps(log, self.tol)
        st = log.steps
        changes = [self.changes[i] for i in idx]
        skipped = skipped_share(st)
        c = TrainingCandidate([ch.text for ch in changes], [ch.kind for ch in changes],
                              v.departure is None and skipped <= self.max_skipped,
                              None if v.departure is None else v.departure.step,
                              None if v.departure is None else v.departure.reason,
                              skipped, _last_rel(st),
                              _low_share(out), len(st))
        self.say(f"  {' + '.join(c.changes)}: " + (
            "fixed" if c.fixes else f"departs at step {c.departure_step} ({c.departure_reason})" if v.departure
            else f"no departure, but {skipped:.0%} of the steps skipped"))
        self.tried.append((idx, c))
        shutil.rmtree(out, ignore_errors=True)
        return c

    def best(self) -> tuple[tuple, TrainingCandidate] | None:
        if not self.tried:
            return None
        return min(self.tried, key=lambda x: (not x[1].fixes, len(x[0]), -(x[1].low_precision_share or 0.0),
                                              -(x[1].departure_step if x[1].departure_step is not None
                                                else self.horizon)))


# ---------------------------------------------------------------------- helpers
def training_snippet(s: Settings, base: Settings, framework: str = "pytorch") -> str:
    """The chosen settings as code: the Workload fields, and the training loop's scaler / clipping lines (PyTorch's,
    or a Keras model's: ``_keras_lines``)."""
    lines = ["# advisor recommend: training settings (recommendation.json \"training\"; measured by re-running the "
             "steps)"]
    if s.mode != base.mode:
        lines.append(f"# precision mode: {s.mode}  (GE precision_mode / advisor --mode {s.mode})")
    if s.black != base.black:
        lines.append(f"# op types in fp32: {', '.join(sorted(s.black))}  (modify_mixlist.json)")
    wl = []
    if (s.scaler, s.scaler_options) != (base.scaler, base.scaler_options):
        wl.append(f"scaler={s.scaler!r}, scaler_options={s.options!r}")
    if framework == "tensorflow":
        lines += _keras_lines(s, base)
        if s.clip_grad_norm != base.clip_grad_norm and s.clip_grad_norm is not None:
            wl.append(f"clip_grad_norm={s.clip_grad_norm:.6g}")
    elif (s.scaler, s.scaler_options) != (base.scaler, base.scaler_options):
        if s.scaler == "torch_npu":
            args = ", ".join(f"{k}={v!r}" for k, v in s.options.items())
            lines.append(f"scaler = torch_npu.npu.amp.GradScaler({args})")
        elif s.scaler == "static":
            lines.append(f"scaler = torch_npu.npu.amp.GradScaler(init_scale={s.options.get('scale')!r}, "
                         "dynamic=False)")
        elif s.scaler == "apex":
            args = ", ".join(f"{k}={v!r}" for k, v in s.options.items() if k != "init_scale")
            lines.append(f"model, optimizer = amp.initialize(model, optimizer, opt_level='O1', loss_scale='dynamic'"
                         f"{', ' + args if args else ''})  # Apex")
    if framework != "tensorflow" and s.clip_grad_norm != base.clip_grad_norm and s.clip_grad_norm is not None:
        wl.append(f"clip_grad_norm={s.clip_grad_norm:.6g}")
        lines += ["scaler.unscale_(optimizer)  # clip the unscaled gradients, then step",
                  f"torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm={s.clip_grad_norm:.6g})"]
    if wl:
        lines.append(f"# advisor workload: Workload(..., {', '.join(wl)})")
    return "\n".join(lines) + "\n"


def _keras_lines(s: Settings, base: Settings) -> list[str]:
    """A Keras training script's lines for the chosen scaler and clipping (the loss-scale optimizer wraps the
    model's optimizer; clipping is the optimizer's ``global_clipnorm``)."""
    out = []
    args = ", ".join(f"{k}={v!r}" for k, v in s.options.items())
    if (s.scaler, s.scaler_options) != (base.scaler, base.scaler_options):
        if s.scaler == "tf_keras":
            out.append(f"optimizer = npu.train.optimizer.NpuLossScaleOptimizer(optimizer{', ' + args if args else ''})"
                       "  # import npu_device as npu (TF2 on Ascend)")
        elif s.scaler == "keras":
            out.append(f"optimizer = keras.optimizers.LossScaleOptimizer(optimizer{', ' + args if args else ''})")
        elif s.scaler == "tf1":
            out.append(f"manager = ExponentialUpdateLossScaleManager({args})  # npu_bridge, under "
                       "NPULossScaleOptimizer(optimizer, manager)")
        elif s.scaler == "tf1_fixed":
            out.append(f"manager = FixedLossScaleManager({args})  # npu_bridge, under "
                       "NPULossScaleOptimizer(optimizer, manager)")
    if s.clip_grad_norm != base.clip_grad_norm and s.clip_grad_norm is not None:
        out.append(f"optimizer.global_clipnorm = {s.clip_grad_norm:.6g}  # or keras.optimizers.X(..., "
                   f"global_clipnorm={s.clip_grad_norm:.6g}): clips the unscaled gradients")
    return out


def _weights_of(model: Any) -> Any:
    """The model's weights, to start every re-run from (a Keras model's ``get_weights``, a torch ``state_dict``)."""
    if is_tf_model(model):
        return [w.copy() for w in model.get_weights()]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _load_weights(model: Any, state: Any) -> None:
    if is_tf_model(model):
        model.set_weights(state)
    else:
        model.load_state_dict(state)


def skipped_share(st) -> float:
    """The share of a run's steps (``StepLog.steps``) skipped after its first applied step; 1.0 when none was
    applied (training stalled), 0.0 without steps."""
    sk = st["skipped"].fillna(False).astype(bool).to_numpy() if len(st) else []
    if not len(sk):
        return 0.0
    if sk.all():
        return 1.0
    first = int((~sk).argmax())
    return float(sk[first:].sum()) / len(sk)


def _opts(s: Settings, **kw: Any) -> Settings:
    return replace(s, scaler_options=tuple(sorted({**s.options, **kw}.items())))


def _low(mode: str) -> str | None:
    from ..semantics import mode_info
    return mode_info(mode)[1]


def _meta(run: Path) -> dict:
    p = run / "run.json"
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(p, f"cannot read run.json: {e}") from None


def _loader(meta: dict, run: Path) -> Callable:
    target = meta.get("target")
    if not isinstance(target, str) or ":" not in target:
        raise InputError(run / "run.json", f"recommend re-runs the training steps, but the run's target {target!r} "
                                           "is not a loadable workload (path/to/file.py:function)")
    from ..workload import load_target
    return lambda: load_target(target)


def _last_rel(st) -> float | None:
    if not len(st):
        return None
    r = loss_rel_diff(float(st["loss_mixed"].iloc[-1]), float(st["loss_fp32"].iloc[-1]))
    return r if math.isfinite(r) else None


def _low_share(run: Path) -> float | None:
    from ..costmodel import kernel_low_share
    from ..ingest.profile import read_kernels
    p = next(run.rglob("kernel_details.csv"), None)
    if p is None:
        return None
    k = read_kernels(p)
    return kernel_low_share(k["precision"].astype(str).tolist(), k["duration_us"].astype(float).tolist())


def _summary(c: TrainingCandidate, ok: bool) -> PlanSummary:
    return PlanSummary(low_precision_share=c.low_precision_share or 0.0, how=c.how, meets_tolerance=ok,
                       reasons=None if ok else [f"departs at step {c.departure_step} ({c.departure_reason})"])


def _evidence(c: TrainingCandidate) -> EditEvidence:
    return EditEvidence(reason=f"re-run over {c.steps} steps: no departure, {c.skipped_share:.0%} skipped",
                        how=c.how)


__all__ = ["recommend_training", "has_training_steps", "training_snippet", "TrainingAdvice", "TrainingCandidate",
           "Settings", "HOW", "LOW_PARTNER", "MAX_SKIPPED_SHARE", "skipped_share", "NO_BF16_SOCS", "MAX_RERUNS"]
