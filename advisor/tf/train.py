"""Training a TensorFlow/Keras workload over optimizer steps under GE's lists (a Workload with an ``optimizer``): the
FP32 reference and the mixed run trained side by side for N steps from the same initial weights and data order
(batch ``s % len(batches)`` at step s), written in the same ``train/`` records as the PyTorch loop
(``emulator.train``, docs/formats.md "Training steps").

* One training step is traced and frozen once (``freeze(steps=True)``: ``out = model(x, training=True)``, the loss,
  and the gradients of ``loss * S`` -- the scaled loss of a loss-scale optimizer, S a scalar input); it is planned by
  ``semantics.plan`` and rewritten exactly as a one-step capture (``capture_tf``: the weights are still constants
  then, as GE sees variables).  The trainable variables' constants are then made placeholders in both GraphDefs and
  fed every step with the run's current weights (FP32 master weights in both runs, as Keras mixed precision and GE
  keep them); non-trainable variables (BatchNormalization's moving statistics) stay at their initial values.
* The optimizer is the Keras one (``Workload.optimizer``: ``"compile"`` -- the model's compile() optimizer --, a Keras
  optimizer, or ``optimizer(variables)``), one fresh copy per run (``from_config(get_config())``) over its own
  ``keras.Variable`` copies of the weights; the user's model and optimizer are never changed.  Its own ``clipnorm`` /
  ``global_clipnorm`` / ``clipvalue`` / weight decay apply inside ``apply_gradients`` as in ``model.fit``;
  ``Workload.clip_grad_norm`` sets ``global_clipnorm`` on both copies.  No loss_fn: compile()'s loss
  (``model.compute_loss`` on the batch's labels, the element after the model inputs).
* The mixed run's scaler (``advisor.scalers``; default ``scalers.default_scaler``: ``tf_keras`` -- TF2
  ``NpuLossScaleOptimizer`` -- under an fp16 mode, none under bf16; a compiled Keras ``LossScaleOptimizer`` brings
  ``keras`` with its settings) decides from the chip's overflow mode whether the step overflowed (``LossScaler.
  overflowed``: Inf/NaN gradients in inf_nan mode, the float-status flag over the whole step in saturation mode); a
  skipped step is not applied, else the gradients, cast to fp32 for the fp32 variables and unscaled as the scaler's
  framework does (:func:`unscaled`), are applied; then the scaler updates.
* An op *overflowed* (the chip's flag, a step's anomalies) when a float input as it consumed it (after the Cast to its
  dtype) or an output is non-finite or beyond its dtype's range -- in saturation mode an output at its dtype's
  maximum (saturated) -- the PyTorch loop's rule on the values the session fetched.  Execution order: the forward
  ops, then the backward ones (``gradient_tape/``), each in graph order.
* Dumps, kernel rows and local errors every ``dump_every`` steps (and the last), like the PyTorch loop.
* ``FP32Steps`` (recommend's re-runs, ``capture(train_reference=)``): the first capture keeps its FP32 run's steps
  (:class:`FP32Step`, the weights after each), later ones that train the same steps reuse them instead of running
  the FP32 session and optimizer again -- the FP32 run does not depend on the mixed run's lists, mode or scaler
  (a ``clip_grad_norm`` at or above every FP32 gradient norm, the clip candidate's, leaves it as it was up to the
  rounding of Keras's ``clip_norm * min(1/norm, 1/clip_norm)``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import graph as G
from ..compare.training import grad_element_flags
from ..compare.training import drift_values
from ..errors import InputError
from ..ingest.steps import MAX_ANOMALIES, anomaly, step_row, write_steps
from ..numerics import FLOAT_MAX, Numerics
from ..rundir import RunWriter, worst_local
from ..scalers import SCALERS, TF_SCALERS, default_scaler, make_scaler
from ..workload import COMPILED, Workload, describe_user_error, dump_interval
from . import one_line
from .capture import Session, capture_tf, const_value, dump_data, kernel_rows, local_errors, reset_keras_naming, user_run
from .freeze import n_model_inputs, to_feed
from .rewrite import ENUM_NAME

BACKWARD_PREFIXES = ("gradient_tape/", "gradients/")    # TF's names of the backward ops (GradientTape, tf.gradients)


def capture_training(wl: Workload, out: Any, train_reference: Any = None, **kw: Any) -> Any:
    """``capture_tf`` of a workload with an optimizer: its N steps by :class:`TrainLoop`.  ``train_reference``:
    recommend's ``emulator.train.FP32Steps``, filled by the first capture's FP32 run and reused by the next ones."""
    prepare(wl, kw.get("target"))
    return capture_tf(wl, out, step_loop=lambda *a, **k: TrainLoop(*a, reference=train_reference, **k), **kw)


@dataclass
class FP32Step:
    """One step of the FP32 run, kept for reuse (``FP32Steps.store``): its loss and gradients, every tensor's value
    on a dumped step (else None) and the feed it ran on."""

    loss: Any
    grads: list
    values: dict | None
    feed: dict


def prepare(wl: Workload, target: Any) -> None:
    """Before freezing: a TF scaler only, and compile()'s loss when the workload gives none."""
    if wl.scaler in SCALERS and wl.scaler not in TF_SCALERS:
        raise InputError(target, f"scaler {wl.scaler!r} is a PyTorch one; a Keras training loop takes "
                                 f"{', '.join(TF_SCALERS)}, \"none\" or None (the default for the mode)")
    if wl.loss_fn is None:
        model = wl.model
        n_in = n_model_inputs(model, len(wl.batches[0]), wl.options or {}, True)

        def compiled_loss(out, batch):
            rest = list(batch[n_in:])
            return model.compute_loss(x=None, y=rest[0] if rest else None, y_pred=out,
                                      sample_weight=rest[1] if len(rest) > 1 else None)
        wl.loss_fn = compiled_loss


def feedable(tf, graph_def, names: set[str]):
    """A copy of ``graph_def`` whose Const nodes ``names`` are Placeholders of the same dtype and shape."""
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    for nd in out.node:
        if nd.name in names and nd.op == "Const":
            dt, shape = nd.attr["dtype"].type, [d.size for d in nd.attr["value"].tensor.tensor_shape.dim]
            nd.op = "Placeholder"
            nd.attr.clear()
            nd.attr["dtype"].type = dt
            nd.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
    return out


class TrainLoop:
    """The N optimizer steps of a Keras capture (module docstring); ``run()`` -> (kernel rows, local error rows,
    run.json's ``train``)."""

    def __init__(self, tf, wl: Workload, fr, gd, graph: tuple, rw, fused: tuple, writer: RunWriter, *, target: Any,
                 files_on: bool, local: bool, low_dtype: str, numerics: Numerics, mode: str,
                 reference: Any = None) -> None:
        import keras  # noqa: PLC0415
        self.tf, self.keras, self.wl, self.fr, self.rw, self.fused, self.writer = tf, keras, wl, fr, rw, fused, writer
        self.mode = mode
        self.g, self.info = graph
        self.target, self.files_on, self.local, self.low_dtype, self.numerics = target, files_on, local, low_dtype, \
            numerics
        self.n = wl.steps or len(wl.batches)
        self.every = dump_interval(wl, self.n)
        proto, scaler, options = self._optimizer_proto()
        self.scaler = make_scaler(scaler, options, what=str(target))
        self.scaler0 = self.scaler.describe()
        self.names = [p for p, _ in fr.weights]
        self.consts = [c for _, c in fr.weights]
        nodes = {n.name: n for n in gd.node}
        init = [const_value(tf, nodes[c]) for c in self.consts]
        self.fp_vars = [keras.Variable(w, name=_var_name(p)) for p, w in zip(self.names, init)]
        self.mx_vars = [keras.Variable(w, name=_var_name(p)) for p, w in zip(self.names, init)]
        self.fp_opt, self.mx_opt = self._optimizer(proto, self.fp_vars), self._optimizer(proto, self.mx_vars)
        self.gd = feedable(tf, gd, set(self.consts))
        self.mx_gd = feedable(tf, rw.graph_def, set(self.consts))
        self.other = {n: const_value(tf, nodes[n]) for n in self.info.order
                      if self.g.nodes[n]["role"] == "const" and n not in set(self.consts)}
        self._orders()
        self.rows: list[dict] = []
        self.param_rows: list[dict] = []
        self.kernels: list[dict] = []
        self.local_rows: dict[str, dict] = {}
        self.dumped: list[int] = []
        self.apply_fns: dict[int, Any] = {}
        self.ref = reference
        self.reuse = reference is not None and not reference.disabled and all(
            reference.has(s) and (not self.is_dumped(s) or reference.records[s][0].values is not None)
            for s in range(self.n))
        self.n_bytes = sum(w.nbytes for w in init) * 2 * (self.n + 1)    # weights and gradients of every step

    # ------------------------------------------------------------------ setup
    def _optimizer_proto(self) -> tuple[Any, str | None, dict]:
        """(the optimizer to copy or the user's factory, the scaler's name, its options)."""
        wl, keras = self.wl, self.keras
        spec = wl.model.optimizer if wl.optimizer == COMPILED else wl.optimizer
        scaler, options = wl.scaler, dict(wl.scaler_options or {})
        if isinstance(spec, keras.optimizers.LossScaleOptimizer):     # compile(optimizer=LossScaleOptimizer(...))
            if scaler is None:
                scaler, options = "keras", {"initial_scale": float(spec.initial_scale),
                                            "dynamic_growth_steps": int(spec.dynamic_growth_steps)}
            spec = spec.inner_optimizer
        if scaler is None:
            from ..semantics import mode_info  # noqa: PLC0415
            scaler = default_scaler("tensorflow", mode_info(self.mode)[1])
        return spec, scaler, options

    def _optimizer(self, spec: Any, variables: list) -> Any:
        """A fresh Keras optimizer for one run: a copy of ``spec`` (its config) or ``spec(variables)``."""
        try:
            if callable(getattr(spec, "apply_gradients", None)):
                cfg = spec.get_config()
                opt = type(spec).from_config(cfg)
            else:
                opt = spec(variables)
        except Exception as e:  # noqa: BLE001 - the user's optimizer
            raise InputError(self.target, f"building the Keras optimizer failed: {describe_user_error(e)}") from None
        if not callable(getattr(opt, "apply_gradients", None)):
            raise InputError(self.target, f"optimizer(variables) returned {type(opt).__name__}, not a Keras "
                                          "optimizer (no apply_gradients)")
        if self.wl.clip_grad_norm is not None:
            opt.clipnorm, opt.clipvalue, opt.global_clipnorm = None, None, float(self.wl.clip_grad_norm)
        return opt

    def _orders(self) -> None:
        g, info, rw = self.g, self.info, self.rw
        self.keys = [(n, k) for n in info.order for k in range(len(info.out_dtypes[n]))
                     if g.nodes[n]["role"] != "const" and info.out_dtypes[n][k] not in ("resource", "variant")]
        self.fp_fetch = [f"{n}:{k}" for n, k in self.keys]
        self.mx_fetch = [rw.tensor.get((n, k), f"{n}:{k}") for n, k in self.keys]
        self.model_fetch = self.fr.outputs + [self.fr.loss] + [t for _, t in self.fr.grads]
        self.model_keys = [info.source(t) for t in self.model_fetch]
        ops = [n for n in info.order if g.nodes[n]["role"] == "op" and g.nodes[n].get("kernel", True)]
        bwd = [n for n in ops if n.startswith(BACKWARD_PREFIXES)]
        self.exec_order = [n for n in ops if n not in set(bwd)] + bwd
        self.n_fwd = len(self.exec_order) - len(bwd)
        by_const = dict(zip(self.consts, self.names))
        self.reads = {op: [by_const[c] for c in cs] for op, cs in G.param_reads(g, set(self.consts)).items()}

    def is_dumped(self, s: int) -> bool:
        return s % self.every == 0 or s == self.n - 1

    # ------------------------------------------------------------------ the loop
    def run(self) -> tuple[list[dict], dict[str, dict], dict]:
        tf = self.tf
        self.s32, self.smx = Session(tf, self.gd), Session(tf, self.mx_gd)
        try:
            for s in range(self.n):
                self.step(s)
        finally:
            self.s32.close()
            self.smx.close()
            reset_keras_naming()
        write_steps(self.writer.out, self.rows, self.param_rows)
        out = {"steps": self.n, "batches": len(self.wl.batches), "dump_every": self.every,
               "dumped_steps": self.dumped, "scaler": self.scaler0, "optimizer": _optimizer_text(self.fp_opt),
               "master_weights": "fp32", "framework_optimizer": "keras",
               "files": ["train/steps.jsonl", "train/params.csv"]}
        if self.wl.clip_grad_norm is not None:
            out["clip_grad_norm"] = float(self.wl.clip_grad_norm)
        return self.kernels, self.local_rows, out

    def _feed(self, batch: tuple, weights: list, scale: float) -> dict:
        arrays = to_feed(batch)
        feed = {t: arrays[i] for t, i in zip(self.fr.inputs, self.fr.input_indices)}
        feed.update({f"{c}:0": w for c, w in zip(self.consts, weights)})
        feed[self.fr.loss_scale] = np.float32(scale)
        return feed

    def step(self, s: int) -> None:
        batch = self.wl.batches[s % len(self.wl.batches)]
        dump = self.is_dumped(s)
        scale = self.scaler.scale
        w_mx = [v.numpy() for v in self.mx_vars]
        fp = self.ref.records[s][0] if self.reuse else self._fp32(s, batch, dump)
        if self.reuse:
            self.ref.reused += 1
        fmx = self._feed(batch, w_mx, scale)
        valmx = dict(zip(self.keys, user_run(self.smx, self.mx_fetch, fmx, self.target, "mixed", s)))
        for n, c in self.other.items():
            valmx[(n, 0)] = c
        for c, b in zip(self.consts, w_mx):
            valmx[(c, 0)] = b
        n_out = len(self.fr.outputs)
        loss32, g32 = fp.loss, fp.grads
        mx_model = [valmx.get(k) for k in self.model_keys]
        lossmx, gmx = mx_model[n_out], [np.asarray(x) for x in mx_model[n_out + 1:]]
        if dump:
            self._record(s, dict(fp.values), valmx, fp.feed)
        flags = self._overflows(valmx)
        fwd = [i for i in flags if i < self.n_fwd]
        overflow = self.scaler.overflowed(self.numerics, gmx, bool(fwd), len(fwd) < len(flags))
        grads = self._grad_rows(s, g32, gmx, scale)
        if not self.reuse:
            self._apply(self.fp_opt, g32, self.fp_vars, "FP32", s)
            if self.ref is not None:
                self.ref.store(s, (fp, None), [v.numpy() for v in self.fp_vars], self.n_bytes)
        taken = self.scaler.update(overflow)
        if not taken.skipped:
            self._apply(self.mx_opt, unscaled(gmx, scale, self.scaler.name), self.mx_vars, "mixed", s)
        fin_fp, fin_mx = self._drift_rows(s, grads, self.ref.after[s] if self.reuse else None)
        lf, lm = _item(loss32), _item(lossmx)
        self.rows.append(step_row(s, len(self.wl.batches), lf, lm, taken, grads, (fin_fp, fin_mx),
                                  [self._anomaly(i) for i in flags[:MAX_ANOMALIES]], len(flags), dump))

    def _anomaly(self, i: int) -> dict:
        """Op ``i`` of the execution order as a step's anomaly: the kernel it belongs to (a fused kernel's name and the
        type GE judges), its phase and the parameters it reads."""
        n = self.exec_order[i]
        fz = self.fused[0]
        node = fz.node_of(n)
        a = fz.graph.nodes[node] if node in fz.graph else self.g.nodes[n]
        return anomaly(i, str(a.get("name", node)), str(a["type"]), "fwd" if i < self.n_fwd else "bwd",
                       self.reads.get(n, []))

    def _fp32(self, s: int, batch: tuple, dump: bool) -> FP32Step:
        """The FP32 run of step ``s`` at the FP32 run's current weights (every tensor on a dumped step)."""
        w_fp = [v.numpy() for v in self.fp_vars]
        f32 = self._feed(batch, w_fp, 1.0)
        got = user_run(self.s32, self.model_fetch + (self.fp_fetch if dump else []), f32, self.target, "FP32", s)
        n_m, n_out = len(self.model_fetch), len(self.fr.outputs)
        values = None
        if dump:
            values = dict(zip(self.keys, got[n_m:]))
            values.update({(n, 0): c for n, c in self.other.items()})
            values.update({(c, 0): a for c, a in zip(self.consts, w_fp)})
        return FP32Step(got[n_out], [np.asarray(x, np.float32) for x in got[n_out + 1:n_m]], values, f32)

    def _apply(self, opt, grads: list, variables: list, which: str, s: int) -> None:
        """``opt.apply_gradients`` as Keras's own train step runs it: inside a ``tf.function`` (traced once per
        run; the optimizer's slots are built eagerly first)."""
        tf = self.tf
        try:
            fn = self.apply_fns.get(id(opt))
            if fn is None:
                opt.build(variables)
                fn = self.apply_fns[id(opt)] = tf.function(lambda gs: opt.apply_gradients(zip(gs, variables)))
            fn([tf.convert_to_tensor(g) for g in grads])
        except Exception as e:  # noqa: BLE001 - the user's optimizer
            raise InputError(self.target, f"the Keras optimizer failed in the {which} run (step {s}): "
                                          f"{one_line(e)}") from None

    def _record(self, s: int, val32: dict, valmx: dict, f32: dict) -> None:
        """A dumped step: its kernel rows, both runs' dumps and the local errors (the worst over dumped steps)."""
        g, info, rw = self.g, self.info, self.rw
        self.kernels.extend(kernel_rows(g, info, rw, self.fused, valmx, s))
        for which, vals in (("fp32", val32), ("mixed", valmx)):
            data, files = dump_data(g, info, rw if which == "mixed" else None, vals, self.fr, self.model_keys,
                                    self.files_on, self.numerics.overflow)
            self.writer.write_dump(which, s, data, files or None, task="tensor" if self.files_on else "statistics")
        if self.local:
            for row in local_errors(self.tf, self.gd, info, g, self.low_dtype, f32, val32, self.numerics):
                self.local_rows[row["name"]] = worst_local(self.local_rows.get(row["name"]), row)
        self.dumped.append(s)

    def _overflows(self, valmx: dict) -> list[int]:
        """Indices (``exec_order``) of the mixed run's ops that overflowed this step (module docstring)."""
        info, rw, sat = self.info, self.rw, self.numerics.saturating
        amax: dict = {}

        def peak(key) -> float:
            if key not in amax:
                v = valmx.get(key)
                a = np.asarray(v) if v is not None else None
                amax[key] = (float(np.max(np.abs(a.astype(np.float32)))) if a is not None and a.size and
                             (np.issubdtype(a.dtype, np.floating) or str(a.dtype) == "bfloat16") else 0.0)
            return amax[key]
        out = []
        for i, n in enumerate(self.exec_order):
            ins = [(s, ENUM_NAME.get(e)) for s, e in zip(info.inputs.get(n, []), rw.in_dtypes.get(n, []))]
            outs = [((n, k), ENUM_NAME.get(e)) for k, e in enumerate(rw.out_dtypes.get(n, []))]
            hit = any(dt in FLOAT_MAX and not peak(s) <= FLOAT_MAX[dt] for s, dt in ins)
            hit = hit or any(dt in FLOAT_MAX and (not peak(k) <= FLOAT_MAX[dt] or sat and peak(k) >= FLOAT_MAX[dt])
                             for k, dt in outs)
            if hit:
                out.append(i)
        return out

    # ------------------------------------------------------------------ what a step records
    def _grad_rows(self, s: int, g32: list, gmx: list, scale: float) -> dict[str, dict]:
        """Per parameter, before either optimizer moves anything: gradient norms (the mixed one unscaled), underflow
        and overflow shares (``compare.training.grad_element_flags`` on the gradient as the mixed run computed it)."""
        out = {}
        for name, gf, gm in zip(self.names, g32, gmx):
            low = G.normalize_dtype(str(gm.dtype))
            lim = FLOAT_MAX.get(low) if self.numerics.saturating and low in ("fp16", "bf16") else None
            gm32 = gm.astype(np.float32)
            f = grad_element_flags(gm32, gf, lim)
            nm = _norm(gm32) / scale if scale else math.nan
            out[name] = {"step": s, "param": name, "grad_norm_fp32": _norm(gf),
                         "grad_norm_mixed": nm,
                         "underflow": f.underflow / f.golden_nonzero if f.golden_nonzero else 0.0,
                         "overflow": (f.nonfinite + f.saturated) / gm.size if gm.size else 0.0}
        return out

    def _drift_rows(self, s: int, grads: dict[str, dict], fp_after: list | None = None) -> tuple[bool, bool]:
        """Weight drift after both updates, per parameter (``compare.training.drift_values``); ``fp_after``: the FP32
        weights after the step when the FP32 run is reused."""
        fp = [w.astype(np.float64) for w in (fp_after if fp_after is not None else [v.numpy() for v in self.fp_vars])]
        mx = [v.numpy().astype(np.float64) for v in self.mx_vars]
        norms = [_norm(p) for p in fp]
        numel = sum(p.size for p in fp)
        rms = math.sqrt(sum(v * v for v in norms) / numel) if numel else 0.0
        fin_fp, fin_mx = all(bool(np.isfinite(p).all()) for p in fp), all(bool(np.isfinite(q).all()) for q in mx)
        for name, p, q, nrm in zip(self.names, fp, mx, norms):
            row = grads.get(name) or {"step": s, "param": name, "grad_norm_fp32": math.nan,
                                      "grad_norm_mixed": math.nan, "underflow": math.nan, "overflow": math.nan}
            d = _norm(q - p) if np.isfinite(q).all() and np.isfinite(p).all() else math.inf
            row["drift"], row["drift_rel_l2"] = drift_values(d, nrm, rms, p.size)
            self.param_rows.append(row)
        return fin_fp, fin_mx


def unscaled(grads: list, scale: float, scaler: str) -> list[np.ndarray]:
    """The gradients the optimizer applies: cast to fp32 (the variables' dtype), then Keras 3's
    ``LossScaleOptimizer`` divides them by the scale, tf.keras's (TF2's ``NpuLossScaleOptimizer``) and the TF1
    managers' optimizer multiply by its fp32 reciprocal (docs/semantics.md "Loss scalers"); equal for the powers of
    two a dynamic scale takes."""
    g32 = [np.asarray(g, np.float32) for g in grads]
    if scale == 1.0:
        return g32
    if scaler == "keras":
        return [g / np.float32(scale) for g in g32]
    inv = np.float32(1.0) / np.float32(scale)
    return [g * inv for g in g32]


def _norm(a: np.ndarray) -> float:
    """L2 norm accumulated in fp64, without BLAS (whose threads contend with TensorFlow's on a small machine)."""
    return float(np.sqrt(np.square(a, dtype=np.float64).sum()))


def _var_name(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", path) or "w"


def _item(v: Any) -> float:
    try:
        return float(np.asarray(v, np.float64).reshape(-1)[0]) if v is not None else math.nan
    except (TypeError, ValueError, IndexError):
        return math.nan


def _optimizer_text(opt: Any) -> str:
    """The Keras optimizer's class and its hyper-parameters (run.json)."""
    try:
        cfg = opt.get_config()
    except Exception:  # noqa: BLE001 - an odd optimizer
        return type(opt).__name__
    hp = {k: v for k, v in cfg.items() if isinstance(v, (int, float, bool, str)) and k != "name"}
    return f"{type(opt).__name__}({', '.join(f'{k}={v}' for k, v in sorted(hp.items()))})"


__all__ = ["TrainLoop", "capture_training", "prepare", "feedable", "BACKWARD_PREFIXES"]
