"""typer options for the shared Tolerance, for every command that judges a run (compare, recommend,
tune).  Usage::

    from advisor.compare.cli_options import MinCosineOption, MaxRelL2Option, ...
    def cmd(min_cosine: float = MinCosineOption, max_rel_l2: float = MaxRelL2Option, ...):
        tol = tolerance_from_options(min_cosine, max_rel_l2, allow_nonfinite, max_loss_rel,
                                     min_grad_cosine, msprobe_rule)   # ValueError on bad ranges
"""
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

# every tolerance option by its parameter name
TOLERANCE_OPTIONS = {"min_cosine": MinCosineOption, "max_rel_l2": MaxRelL2Option,
                     "allow_nonfinite": AllowNonfiniteOption, "max_loss_rel": MaxLossRelOption,
                     "min_grad_cosine": MinGradCosineOption, "msprobe_rule": MsprobeRuleOption}
