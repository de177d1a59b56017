"""Training over steps (a Workload with an ``optimizer``): the FP32 reference and the mixed run trained side by
side for N optimizer steps from the same initial weights and data order (batch ``s % len(batches)`` at step s).

* Two copies of the model (the user's and a ``copy.deepcopy``), each with its own optimizer built by
  ``Workload.optimizer(params)``.  Parameters stay fp32 in both (FP32 master weights, as torch autocast and Apex O1
  keep them); the mixed run's ops round to the plan's dtypes (``semantics.plan``, ``engine.EmuMode``) and its
  backward starts from the scaler's scale S (``loss * S``).
* The FP32 run steps its optimizer on plain fp32 gradients every step.  The mixed run's scaler
  (``advisor.scalers``) decides from the chip's overflow mode whether the step overflowed (Inf/NaN gradients in
  inf_nan mode, the float-status flag in saturation mode: an op of its window overflowed); a skipped step is not
  applied, else the gradients are unscaled (times the fp32 reciprocal of S) and the optimizer steps; then the
  scaler updates.
* Per step: both losses, the scale, overflow and skip, gradient norms, per parameter the gradient norms,
  underflow share (non-zero FP32 gradient elements that are zero in the mixed run), overflow share and the weight
  drift between the runs; the mixed run's overflowing ops in execution order.  ``ingest.steps`` writes them
  (train/steps.jsonl, train/params.csv).  Dumps, kernel rows and local errors only every ``dump_every`` steps.

* ``clip_grad_norm``: both runs clip their unscaled gradients to that total L2 norm before the optimizer steps
  (``torch.nn.utils.clip_grad_norm_``'s arithmetic: coefficient ``min(1, max_norm / (norm + 1e-6))``; a skipped step
  is not clipped).  ``lr_scheduler``: built on each run's optimizer, stepped after every step, skipped or not (as a
  training loop calls ``scheduler.step()`` after ``scaler.step(optimizer)``).

The plan is step 0's while the FP32 run's op sequence stays step 0's (else the step is traced again and planned
alone, as a one-step capture does).  The user's model is left as it was (weights and buffers restored).

:class:`FP32Steps` keeps the FP32 run's per-step results (its records, graphs of the traced steps, weights after each
step) so that further captures of the same workload -- recommend's candidate re-runs, which change only the mixed
run -- reuse them instead of training the FP32 run again (``capture(train_reference=...)``).
"""
from __future__ import annotations

import copy
import math
from typing import Any

import torch

from .. import graph as G
from ..compare.training import drift_values, grad_element_flags
from ..errors import InputError
from ..ingest.steps import MAX_ANOMALIES, anomaly, step_row, write_steps
from ..numerics import FLOAT_MAX, Numerics
from ..scalers import SCALERS, TORCH_SCALERS, make_scaler
from ..workload import MAX_DUMPED, Workload, describe_user_error, dump_interval
from .engine import ReplayMismatch, StepRecord, dtype_name, eager_math_attention

CLIP_EPS = 1e-6          # torch.nn.utils.clip_grad_norm_'s: max_norm / (total_norm + 1e-6)
REUSE_BYTES = 512 * 2 ** 20  # FP32Steps keeps at most this many bytes of weights (else it keeps nothing; choice)


class FP32Steps:
    """The FP32 run's per-step results of one workload, filled by the first capture given it and reused by later
    ones (the FP32 run does not depend on the mixed run's lists, mode, scaler or clipping).  The caller vouches
    that every capture given it trains the same workload (model, batches, optimizer, steps, seed, dump steps)."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[StepRecord, Any]] = {}    # step -> (FP32 record, graph of a traced step)
        self.after: dict[int, dict] = {}                         # step -> FP32 state_dict after the step
        self.initial: dict | None = None
        self.disabled = False
        self.reused = 0                                          # steps served from here (not run again)

    def has(self, s: int) -> bool:
        return not self.disabled and s in self.records and s in self.after

    def before(self, s: int) -> dict:
        return self.after[s - 1] if s > 0 else self.initial

    def keep(self, s: int, fp: StepRecord, g: Any, model: Any, n: int) -> None:
        if self.disabled:
            return
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.store(s, (fp, g), state, sum(v.numel() * v.element_size() for v in state.values()) * (n + 1))

    def store(self, s: int, record: Any, state: Any, size: int) -> None:
        """Keep step ``s``'s record and the weights after it (any framework's: the Keras loop keeps numpy arrays);
        ``size`` the bytes all the steps' weights will take -- over ``REUSE_BYTES`` nothing is kept."""
        if self.disabled:
            return
        if size > REUSE_BYTES:
            self.disabled = True
            self.records.clear()
            self.after.clear()
            return
        self.records[s] = record
        self.after[s] = state


class TrainLoop:
    """The N optimizer steps of a capture; ``steps`` is capture's per-step helper (plan, dumps, local errors)."""

    def __init__(self, steps: Any, wl: Workload, target: Any, numerics: Numerics, seed: int = 0,
                 reference: FP32Steps | None = None) -> None:
        if wl.scaler in SCALERS and wl.scaler not in TORCH_SCALERS:
            raise InputError(target, f"scaler {wl.scaler!r} is a TensorFlow one; a PyTorch training loop takes "
                                     f"{', '.join(TORCH_SCALERS)} or None")
        if not isinstance(steps.model, torch.nn.Module):
            raise InputError(target, "training over steps needs a torch.nn.Module (its parameters are optimized)")
        self.s, self.wl, self.target, self.numerics, self.seed = steps, wl, target, numerics, seed
        self.scaler = make_scaler(wl.scaler, wl.scaler_options, what=str(target))
        self.n = wl.steps or len(wl.batches)
        self.every = dump_interval(wl, self.n)
        self.fp_model = steps.model
        self.initial = {k: v.detach().clone() for k, v in self.fp_model.state_dict().items()}
        try:
            self.mx_model = copy.deepcopy(self.fp_model)
        except Exception as e:   # user model state that cannot be copied
            raise InputError(target, "training over steps copies the model for the mixed run (copy.deepcopy), "
                                     f"which failed: {describe_user_error(e)}") from None
        self.mx_params = steps.params_of(self.mx_model)
        self.fp_opt, self.mx_opt = self._optimizer(self.fp_model), self._optimizer(self.mx_model)
        self.fp_sched, self.mx_sched = self._scheduler(self.fp_opt), self._scheduler(self.mx_opt)
        self.ref = reference
        if reference is not None and reference.initial is None:
            reference.initial = {k: v.detach().clone() for k, v in self.initial.items()}
        self.scaler0 = self.scaler.describe()
        self.rows: list[dict] = []
        self.param_rows: list[dict] = []
        self.dumped: list[int] = []
        self.reads: dict[str, list[str]] | None = None     # op name -> parameters it reads (step 0's graph)
        self.ref_ops: list = []                 # step 0's op records: the op sequence of the untraced steps
        self.ref_bwd = -1
        self.fp_buffers: dict = {}

    def _built(self, factory: Any, arg: Any, call: str, what: str) -> Any:
        """``factory(arg)`` of the workload contract (``call`` as the user wrote it): an object with ``step()``
        (``what`` it must be), else one line naming the target."""
        try:
            obj = factory(arg)
        except Exception as e:
            raise InputError(self.target, f"{call} {describe_user_error(e, 'raised ')}") from None
        if not callable(getattr(obj, "step", None)):
            raise InputError(self.target, f"{call} returned {type(obj).__name__}, not {what} (no step())")
        return obj

    def _optimizer(self, model) -> Any:
        return self._built(self.wl.optimizer, model.parameters(), "optimizer(params)", "an optimizer")

    def _scheduler(self, opt) -> Any:
        if self.wl.lr_scheduler is None:
            return None
        return self._built(self.wl.lr_scheduler, opt, "lr_scheduler(optimizer)", "a scheduler")

    def _for_reuse(self, g: Any) -> Any:
        return copy.deepcopy(g) if self.ref is not None and not self.ref.disabled else None

    def is_dumped(self, s: int) -> bool:
        return s % self.every == 0 or s == self.n - 1

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        """All steps; returns run.json's ``train`` object.  The user's model is restored whatever happens."""
        try:
            for s in range(self.n):
                self.step(s)
        finally:
            self.fp_model.load_state_dict(self.initial)
        write_steps(self.s.writer.out, self.rows, self.param_rows)
        out = {"steps": self.n, "batches": len(self.wl.batches), "dump_every": self.every,
               "dumped_steps": self.dumped, "scaler": self.scaler0, "optimizer": _optimizer_text(self.fp_opt),
               "master_weights": "fp32", "files": ["train/steps.jsonl", "train/params.csv"]}
        if self.wl.clip_grad_norm is not None:
            out["clip_grad_norm"] = float(self.wl.clip_grad_norm)
        if self.fp_sched is not None:
            out["lr_scheduler"] = type(self.fp_sched).__name__
        return out

    def step(self, s: int) -> None:
        batch = self.wl.batches[s % len(self.wl.batches)]
        dump = self.is_dumped(s)
        traced = dump or s == 0
        reused = self.ref is not None and self.ref.has(s)
        g_keep = None              # a traced step's graph as traced, for FP32Steps (planning annotates the graph)
        if reused:
            fp, g0 = self.ref.records[s]
            g = copy.deepcopy(g0) if g0 is not None else None
            self.ref.reused += 1
            if s == 0:
                self.ref_ops, self.ref_bwd = fp.ops, fp.bwd_start
        if traced:
            if not reused:
                fp, g = self._fp32(s, batch, dump)
                g_keep = self._for_reuse(g)
            precs, cpu, fz = self.s.plan_step(s, g, fp)
        else:
            if not reused:
                fp = self._fp32_eager(s, batch)
            (precs, cpu), fz = self.s.ref_plan, self.s.ref_fz
        if self.reads is None:
            self.reads = G.param_reads(g, {v for k, v in self.s.params.items() if k != "__tensors__"})
        try:
            mx, flags, scale = self._mixed(s, batch, fp, precs, dump, fz, keep_state=not traced)
        except ReplayMismatch:
            if traced:
                raise
            # the op sequence left step 0's: trace this step and plan it alone, from the state it started in
            if reused:
                self.fp_model.load_state_dict(self.ref.before(s))
                self.fp_buffers = {k: b.detach().clone() for k, b in self.fp_model.named_buffers()}
            fp, g = self._fp32(s, batch, dump, restore=True)
            g_keep = self._for_reuse(g)
            precs, cpu, fz = self.s.plan_step(s, g, fp)
            mx, flags, scale = self._mixed(s, batch, fp, precs, dump, fz)
        if dump:
            self.s.record_step(s, fp, mx, precs, cpu, fz)
            self.dumped.append(s)
        fwd = [i for i in flags if i < mx.bwd_start]
        overflow = self.scaler.overflowed(self.numerics, mx.grads.values(), bool(fwd), len(fwd) < len(flags))
        grads = self._grad_rows(s, fp, mx, scale)
        if not reused:
            if self.wl.clip_grad_norm is not None:
                coef = _clip_coef(fp.grads.values(), self.wl.clip_grad_norm)
                if coef < 1:      # out of place: the record (FP32Steps) keeps the unclipped gradients
                    for p in self.fp_model.parameters():
                        if p.grad is not None:
                            p.grad = p.grad * coef
            self.fp_opt.step()
            _step_scheduler(self.fp_sched)
            if self.ref is not None:
                self.ref.keep(s, fp, g_keep, self.fp_model, self.n)
        taken = self.scaler.update(overflow)
        if not taken.skipped:
            with torch.no_grad():
                if scale != 1.0:
                    inv = torch.tensor(scale, dtype=torch.float32).reciprocal()
                    for gr in mx.grads.values():
                        gr.mul_(inv)
                if self.wl.clip_grad_norm is not None:
                    coef = _clip_coef(mx.grads.values(), self.wl.clip_grad_norm)
                    for gr in mx.grads.values():
                        gr.mul_(coef)
            self.mx_opt.step()
        _step_scheduler(self.mx_sched)
        fp_after = self.ref.after[s] if reused else None
        fin_fp, fin_mx = self._drift_rows(s, grads, fp_after)
        lf, lm = _item(fp.loss), _item(mx.loss)
        self.rows.append(step_row(s, len(self.wl.batches), lf, lm, taken, grads, (fin_fp, fin_mx),
                                  [anomaly(i, fp.ops[i].name, fp.ops[i].type, "fwd" if i < mx.bwd_start else "bwd",
                                           self.reads.get(fp.ops[i].name, [])) for i in flags[:MAX_ANOMALIES]],
                                  len(flags), dump))

    def _mixed(self, s: int, batch: tuple, fp: StepRecord, precs: list, dump: bool, fz, keep_state: bool = False
               ) -> tuple[StepRecord, list, float]:
        """The mixed run of step ``s`` at the scaler's scale: (its record, the ops that overflowed, the scale).
        ``keep_state``: a ``ReplayMismatch`` puts the model's buffers back as they were (the step runs again)."""
        self.s.round_cache.clear()            # the weights moved: their rounded copies are stale
        flags: list[int] = []
        scale = self.scaler.scale
        saved = {k: b.detach().clone() for k, b in self.mx_model.named_buffers()} if keep_state else {}
        try:
            mx = self.s.run_model("mixed", self.mx_model, s, batch, params=self.mx_params, plan=precs,
                                  reference=fp.ops, cache=self.s.round_cache, loss_scale=scale,
                                  numerics=self.numerics, keep_entries=dump, overflow=flags,
                                  groups=self.s.groups_of(fz))
        except ReplayMismatch:
            _load_buffers(self.mx_model, saved)
            raise
        return mx, flags, scale

    def _fp32(self, s: int, batch: tuple, dump: bool, restore: bool = False) -> tuple[StepRecord, Any]:
        """The FP32 run of step ``s`` traced into a graph (step 0, dumped steps, or a step whose op sequence left step
        0's); its loss scale 1 gives it the mixed run's op sequence.  ``restore``: from the state the step started in
        (an eager run of it went before)."""
        if restore:
            _load_buffers(self.fp_model, self.fp_buffers)
        kw = dict(params=self.s.params, keep_local=dump and self.s.local, keep_entries=dump, loss_scale=1.0)
        g = G.new_graph(framework="pytorch", step=s)
        fp = self.s.run_model("FP32", self.fp_model, s, batch, graph=g, **kw)
        if s == 0:
            self.ref_ops, self.ref_bwd = fp.ops, fp.bwd_start
        return fp, g

    def _fp32_eager(self, s: int, batch: tuple) -> StepRecord:
        """The FP32 run of a step that is neither dumped nor step 0, without the dispatch mode: what ``run_step``
        computes for it (same seed, gradients from None, math attention, backward from a loss scale of 1), with step
        0's op records standing for its op sequence (the mixed run checks them op by op: ``ReplayMismatch``)."""
        model, loss_fn = self.fp_model, self.wl.loss_fn
        self.fp_buffers = {k: b.detach().clone() for k, b in model.named_buffers()}

        def run() -> StepRecord:
            torch.manual_seed(self.seed + s)
            for p in model.parameters():
                p.grad = None
            with eager_math_attention(), torch.enable_grad():
                loss = loss_fn(model(*batch), batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise InputError(None, "loss_fn must return a scalar tensor")
                loss.backward(gradient=torch.full_like(loss, 1.0))
            return StepRecord(ops=self.ref_ops, loss=loss.detach(), bwd_start=self.ref_bwd,
                              grads={n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        return self.s.user_run("FP32", s, run)

    # ------------------------------------------------------------------ what a step records
    def _grad_rows(self, s: int, fp: StepRecord, mx: StepRecord, scale: float) -> dict[str, dict]:
        """Per parameter (before either optimizer moves anything): gradient norms (the mixed one unscaled),
        underflow share among the non-zero FP32 elements, overflow share (``compare.training.grad_element_flags``)."""
        out = {}
        rounded = mx.rounded
        with torch.no_grad():
            for name, gf in fp.grads.items():
                gm = mx.grads.get(name)
                if gm is None:
                    continue
                r = rounded.get(id(gm))
                low = r[1] if r is not None and r[0] is gm else dtype_name(gm.dtype)
                lim = FLOAT_MAX.get(low) if self.numerics.saturating and low in ("fp16", "bf16") else None
                f = grad_element_flags(gm, gf, lim)
                nm = float(torch.linalg.vector_norm(gm.double())) / scale if scale else math.nan
                out[name] = {"step": s, "param": name, "grad_norm_fp32": float(torch.linalg.vector_norm(gf.double())),
                             "grad_norm_mixed": nm,
                             "underflow": f.underflow / f.golden_nonzero if f.golden_nonzero else 0.0,
                             "overflow": (f.nonfinite + f.saturated) / gm.numel() if gm.numel() else 0.0}
        return out

    def _drift_rows(self, s: int, grads: dict[str, dict], fp_after: dict | None = None) -> tuple[bool, bool]:
        """Weight drift after both updates, per parameter: ``drift_rel_l2`` = |w_mixed - w_fp32| / |w_fp32|;
        ``drift`` (what compare judges) divides by the larger of |w_fp32| and the norm the parameter would have at the
        model's RMS weight, so a parameter near zero (a fresh bias) is measured against the model's scale."""
        mx = dict(self.mx_model.named_parameters())
        fp = ({n: fp_after[n] for n in mx} if fp_after is not None else dict(self.fp_model.named_parameters()))
        with torch.no_grad():
            norms = {n: float(p.detach().double().norm()) for n, p in fp.items()}
            numel = sum(p.numel() for p in fp.values())
            rms = math.sqrt(sum(v * v for v in norms.values()) / numel) if numel else 0.0
            fin_fp = fin_mx = True
            for n, p in fp.items():
                q = mx[n]
                d = float((q.detach().double() - p.detach().double()).norm())
                fin_fp &= bool(torch.isfinite(p).all())
                fin_mx &= bool(torch.isfinite(q).all())
                row = grads.get(n) or {"step": s, "param": n, "grad_norm_fp32": math.nan, "grad_norm_mixed": math.nan,
                                       "underflow": math.nan, "overflow": math.nan}
                row["drift"], row["drift_rel_l2"] = drift_values(d, norms[n], rms, p.numel())
                self.param_rows.append(row)
        return fin_fp, fin_mx


def _clip_coef(grads, max_norm: float) -> float:
    """``clip_grad_norm_``'s coefficient for these gradients: min(1, max_norm / (total L2 norm + 1e-6))."""
    gs = [g for g in grads if g is not None]
    if not gs:
        return 1.0
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in gs]))
    return float(torch.clamp(max_norm / (total + CLIP_EPS), max=1.0))


def _step_scheduler(sched) -> None:
    if sched is None:
        return
    import warnings
    with warnings.catch_warnings():       # a skipped step's scheduler step comes without optimizer.step()
        warnings.simplefilter("ignore", UserWarning)
        sched.step()


def _load_buffers(model, saved: dict) -> None:
    if saved:
        with torch.no_grad():
            for k, b in model.named_buffers():
                b.copy_(saved[k])


def _item(t: Any) -> float:
    try:
        return float(t.detach().double()) if t is not None else math.nan
    except (TypeError, ValueError, RuntimeError):
        return math.nan


def _optimizer_text(opt: Any) -> str:
    """The optimizer's class and its first group's hyper-parameters (run.json)."""
    groups = getattr(opt, "param_groups", None) or [{}]
    hp = {k: v for k, v in groups[0].items() if k != "params" and isinstance(v, (int, float, bool, str))}
    return f"{type(opt).__name__}({', '.join(f'{k}={v}' for k, v in sorted(hp.items()))})"


__all__ = ["TrainLoop", "FP32Steps", "MAX_DUMPED"]
