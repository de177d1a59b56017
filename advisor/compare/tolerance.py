"""The one definition of "within tolerance", shared by compare, recommend and tune.

Default (docs/compare.md): on every step (batch), the model's final outputs are finite, their cosine
similarity to the FP32 run is >= 0.999 and their relative L2 error <= 1e-2; for training, in
addition, the loss relative difference is <= 1e-2 and every gradient's cosine is >= 0.99 -- except a
gradient that is negligible against the model's gradient scale (``grad_is_negligible``: zero up to
rounding, where a cosine is noise), whose RMS error must instead be <= 0.1 of that scale.
``use_msprobe_rule`` additionally applies msprobe's pass rule to the final outputs.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping



@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...] = ()
    worst: dict | None = None          # the worst step's figures {step, cosine, rel_l2, ...}

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reasons": list(self.reasons), "worst": self.worst}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Verdict":
        return cls(bool(d["ok"]), tuple(d.get("reasons", ())), d.get("worst"))


@dataclass(frozen=True)
class Tolerance:
    min_cosine: float = 0.999
    max_rel_l2: float = 1e-2
    require_finite: bool = True
    max_loss_rel: float = 1e-2
    min_grad_cosine: float = 0.99
    use_msprobe_rule: bool = False
    max_grad_underflow: float = 0.01     # the seed's 1 % rule (training signals)
    grad_negligible: float = 1e-3        # a gradient whose FP32 RMS is <= this x the step's gradient scale ...
    max_grad_abs: float = 0.1            # ... passes when its RMS error is <= this x that scale (not by cosine)
    max_weight_drift: float = 0.1        # training over steps: a parameter's weight drift from the FP32 run
    min_loss_scale: float = 1.0          # training over steps: a dynamic loss scale below this has collapsed

    @property
    def finite(self) -> bool:
        """Alias of ``require_finite``."""
        return self.require_finite

    def predicted_ok(self, rel_l2: float, nonfinite: bool) -> bool:
        """A *predicted* final error (the error model's: a relative L2 and whether the output turns
        non-finite) within tolerance; cosine predicted as 1 - e^2/2 (an error uncorrelated with the signal)."""
        if nonfinite and self.require_finite:
            return False
        if not math.isfinite(rel_l2):
            return False
        return rel_l2 <= self.max_rel_l2 and (1.0 - 0.5 * rel_l2 ** 2) >= self.min_cosine

    def grad_is_negligible(self, golden_rms: float, scale: float) -> bool:
        """The one rule of which gradients cosine cannot judge: a parameter whose FP32 gradient RMS is at most
        ``grad_negligible`` times the model's gradient scale (the RMS of every FP32 gradient element of the step)
        is zero up to rounding -- its direction is noise -- and is judged by its RMS error against the scale
        (``max_grad_abs``) instead.  Every judge reaches it through ``compare.training``."""
        return scale > 0.0 and self.grad_negligible > 0.0 and golden_rms <= self.grad_negligible * scale

    # ------------------------------------------------------------------ per-tensor test
    def tensor_reasons(self, m: Mapping, label: str = "") -> list[str]:
        pre = f"{label}: " if label else ""
        out = []
        if self.require_finite and not m.get("finite", True):
            out.append(f"{pre}non-finite values")
        cos = m.get("cosine")
        if cos is not None and not _isnan(cos) and cos < self.min_cosine:
            out.append(f"{pre}cosine {cos:.6g} < {self.min_cosine:g}")
        rel = m.get("rel_l2")
        if rel is None and m.get("kind") == "stats":
            rel = m.get("norm_rel_diff")
        if rel is not None and not _isnan(rel) and rel > self.max_rel_l2:
            out.append(f"{pre}relative L2 {rel:.3g} > {self.max_rel_l2:g}")
        if self.use_msprobe_rule and m.get("kind", "tensor") == "tensor" and "max_abs" in m:
            from .metrics import msprobe_pass   # not at import: option parsing needs Tolerance, not numpy/networkx
            if not msprobe_pass(m.get("cosine", math.nan), m.get("max_abs", math.nan)):
                out.append(f"{pre}fails msprobe's pass rule")
        return out

    # ------------------------------------------------------------------ final verdict
    def judge(self, final_metrics_per_step: Iterable[Mapping]) -> Verdict:
        """Judge a run from its per-step final metrics.  Each item: {"step": i, "output": tensor
        metrics of Model.output (or None), "loss": {"rel_diff": x, "finite": b} (training, optional),
        "grad_min_cosine": c (training, optional)}.  A bare tensor-metrics dict is accepted as the
        step's output."""
        reasons: list[str] = []
        worst: dict | None = None
        worst_key = None
        n = 0
        for i, item in enumerate(final_metrics_per_step):
            n += 1
            item = dict(item)
            if "output" not in item and ("rel_l2" in item or "cosine" in item):
                item = {"step": item.get("step", i), "output": item}
            step = item.get("step", i)
            out = item.get("output")
            step_reasons: list[str] = []
            if out is not None:
                step_reasons += self.tensor_reasons(out, f"step {step} output")
            loss = item.get("loss")
            if loss is not None:
                if self.require_finite and not loss.get("finite", True):
                    step_reasons.append(f"step {step} loss: non-finite")
                lr = loss.get("rel_diff")
                if lr is not None and not _isnan(lr) and lr > self.max_loss_rel:
                    step_reasons.append(f"step {step} loss relative difference {lr:.3g} > {self.max_loss_rel:g}")
            gc, ga = item.get("grad_min_cosine"), item.get("grad_abs_error")
            if out is None and loss is None and gc is None and ga is None:
                step_reasons.append(f"step {step}: nothing to judge (no float final output in both runs)")
            if gc is not None and not _isnan(gc) and gc < self.min_grad_cosine:
                who = item.get("grad_worst") or "a gradient"
                step_reasons.append(f"step {step} gradient {who} cosine {gc:.6g} < {self.min_grad_cosine:g}")
            if ga is not None and not _isnan(ga) and ga > self.max_grad_abs:
                who = item.get("grad_abs_worst") or "a gradient"
                step_reasons.append(f"step {step} gradient {who} (FP32 gradient negligible: judged by absolute "
                                    f"error) RMS error {ga:.3g} of the model's gradient scale > {self.max_grad_abs:g}")
            reasons += step_reasons
            o = out or {}
            key = (len(step_reasons), not o.get("finite", True), _nan_low(o.get("rel_l2")))
            if worst_key is None or key > worst_key:
                worst_key = key
                worst = {"step": step, **{k: o.get(k) for k in ("cosine", "rel_l2", "max_abs", "finite") if k in o}}
                if loss is not None:
                    worst["loss_rel_diff"] = loss.get("rel_diff")
                if gc is not None:
                    worst["grad_min_cosine"] = gc
                if ga is not None:
                    worst["grad_abs_error"] = ga
        if n == 0:
            return Verdict(False, ("no final outputs to judge (Model.output entries missing)",), None)
        return Verdict(not reasons, tuple(reasons), worst)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Tolerance":
        if not d:
            return cls()
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown tolerance field(s): {', '.join(sorted(unknown))}")
        return cls(**dict(d))

    def describe(self) -> str:
        s = (f"finite={'required' if self.require_finite else 'not required'}, cosine >= {self.min_cosine:g}, "
             f"relative L2 <= {self.max_rel_l2:g}; training: loss rel diff <= {self.max_loss_rel:g}, "
             f"gradient cosine >= {self.min_grad_cosine:g} (a gradient negligible against the model's gradient "
             f"scale, <= {self.grad_negligible:g} of it: RMS error <= {self.max_grad_abs:g} of the scale); over "
             f"steps: weight drift <= {self.max_weight_drift:g}, loss scale >= {self.min_loss_scale:g}")
        return s + (", msprobe pass rule" if self.use_msprobe_rule else "")


def loss_rel_diff(target: float, golden: float) -> float:
    """The one definition of a loss's relative difference (``max_loss_rel``): |target - golden| / |golden| (a zero
    golden counts as 1e-30); a non-finite target is inf."""
    if not math.isfinite(target):
        return math.inf
    return abs(target - golden) / max(abs(golden), 1e-30)


def _isnan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _nan_low(x: Any) -> float:
    return -1.0 if x is None or _isnan(x) else float(x)


def tolerance_from_options(min_cosine: float = 0.999, max_rel_l2: float = 1e-2, allow_nonfinite: bool = False,
                           max_loss_rel: float = 1e-2, min_grad_cosine: float = 0.99,
                           msprobe_rule: bool = False, grad_negligible: float = 1e-3,
                           max_grad_abs: float = 0.1, max_weight_drift: float = 0.1,
                           min_loss_scale: float = 1.0) -> Tolerance:
    """Build a Tolerance from the CLI option values (``compare.cli_options``); validates ranges."""
    for name, v in (("--min-cosine", min_cosine), ("--min-grad-cosine", min_grad_cosine)):
        if not (-1.0 <= v <= 1.0):
            raise ValueError(f"{name} must be within [-1, 1]")
    for name, v in (("--max-rel-l2", max_rel_l2), ("--max-loss-rel", max_loss_rel), ("--max-grad-abs", max_grad_abs),
                    ("--max-weight-drift", max_weight_drift), ("--min-loss-scale", min_loss_scale)):
        if not (v >= 0):
            raise ValueError(f"{name} must be >= 0")
    if not (0 <= grad_negligible < 1):
        raise ValueError("--grad-negligible must be within [0, 1) (0: judge every gradient by cosine)")
    return Tolerance(min_cosine=min_cosine, max_rel_l2=max_rel_l2, require_finite=not allow_nonfinite,
                     max_loss_rel=max_loss_rel, min_grad_cosine=min_grad_cosine, use_msprobe_rule=msprobe_rule,
                     grad_negligible=grad_negligible, max_grad_abs=max_grad_abs, max_weight_drift=max_weight_drift,
                     min_loss_scale=min_loss_scale)


# the per-step items' gradient figures (``judge.judged_steps``): a verdict of the forward outputs alone drops them
GRADIENT_KEYS = ("grad_min_cosine", "grad_worst", "grad_abs_error", "grad_abs_worst")
