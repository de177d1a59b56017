"""typer options for the shared Tolerance, for every command that judges a run.  Commands take them as one
group (``advisor.commands.options.TOLERANCE``: ``@uses(TOLERANCE)`` hands the command the built Tolerance);
``TOLERANCE_OPTIONS`` maps each option to its ``tolerance_from_options`` parameter."""
from __future__ import annotations

import typer

from .tolerance import Tolerance

_D = Tolerance()

MinCosineOption = typer.Option(_D.min_cosine, "--min-cosine", help="final outputs: minimum cosine vs FP32 on every batch")
MaxRelL2Option = typer.Option(_D.max_rel_l2, "--max-rel-l2", help="final outputs: maximum relative L2 error vs FP32 on every batch")
AllowNonfiniteOption = typer.Option(False, "--allow-nonfinite", help="do not require finite final outputs")
MaxLossRelOption = typer.Option(_D.max_loss_rel, "--max-loss-rel", help="training: maximum loss relative difference")
MinGradCosineOption = typer.Option(_D.min_grad_cosine, "--min-grad-cosine", help="training: minimum cosine of every parameter gradient")
MsprobeRuleOption = typer.Option(False, "--msprobe-rule", help="also apply msprobe's pass rule to final outputs")
GradNegligibleOption = typer.Option(_D.grad_negligible, "--grad-negligible", help="training: a gradient whose FP32 "
                                    "RMS is at most this fraction of the model's gradient scale (RMS of every "
                                    "gradient element) is zero up to rounding and judged by absolute error, not "
                                    "cosine (0: every gradient by cosine)")
MaxGradAbsOption = typer.Option(_D.max_grad_abs, "--max-grad-abs", help="training: such a gradient's maximum RMS "
                                "error, as a fraction of the model's gradient scale")
MaxWeightDriftOption = typer.Option(_D.max_weight_drift, "--max-weight-drift", help="training over steps: maximum "
                                   "weight drift of a parameter from the FP32 run (train/params.csv drift)")
MinLossScaleOption = typer.Option(_D.min_loss_scale, "--min-loss-scale", help="training over steps: a dynamic loss "
                                  "scale below this has collapsed (a departure)")

# every tolerance option by its parameter name (the tolerance option group, commands/options.py)
TOLERANCE_OPTIONS = {"min_cosine": MinCosineOption, "max_rel_l2": MaxRelL2Option,
                     "allow_nonfinite": AllowNonfiniteOption, "max_loss_rel": MaxLossRelOption,
                     "min_grad_cosine": MinGradCosineOption, "msprobe_rule": MsprobeRuleOption,
                     "grad_negligible": GradNegligibleOption, "max_grad_abs": MaxGradAbsOption,
                     "max_weight_drift": MaxWeightDriftOption, "min_loss_scale": MinLossScaleOption}
