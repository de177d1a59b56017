"""advisor replay --run DIR --mixlist M.json: the verdict a candidate list would get, by re-executing the run's
recorded FP32 ops under its plan (advisor/replay.py).  Exit 0 predicted within tolerance, 1 outside, 2 bad input."""
from __future__ import annotations

import json
from typing import List, Optional

import typer

from ..compare.cli_options import (AllowNonfiniteOption, MaxLossRelOption, MaxRelL2Option, MinCosineOption,
                                   MinGradCosineOption, MsprobeRuleOption)
from ..errors import AdvisorError, InputError
from ..fsutil import json_safe
from .common import CannOption, OpsInfoOption, human_report, overrides_of


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_cmd(
        run: str = typer.Option(..., "--run", help="run directory with an FP32 tensor dump (capture, tune or msprobe)"),
        mixlist: Optional[str] = typer.Option(None, "--mixlist", help="the candidate modify_mixlist JSON "
                                              "(default: the run's own list)"),
        keep_dtype: Optional[str] = typer.Option(None, "--keep-dtype", help="the candidate ATC --keep_dtype file "
                                                 "(default: the run's own)"),
        customize_dtypes: Optional[str] = typer.Option(None, "--customize-dtypes", help="the candidate ATC "
                                                       "--customize_dtypes file (default: the run's own)"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        soc: Optional[str] = typer.Option(None, "--soc", help="chip (default: run.json's, else ascend910b)"),
        ops_info: Optional[List[str]] = OpsInfoOption, cann: Optional[str] = CannOption,
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode (default: run.json's)"),
        step: Optional[list[int]] = typer.Option(None, "--step", help="only these steps (repeatable)"),
        min_cosine: float = MinCosineOption, max_rel_l2: float = MaxRelL2Option,
        allow_nonfinite: bool = AllowNonfiniteOption, max_loss_rel: float = MaxLossRelOption,
        min_grad_cosine: float = MinGradCosineOption, msprobe_rule: bool = MsprobeRuleOption,
    ) -> None:
        """Predict a candidate list's verdict by replaying the run's FP32 ops under its plan."""
        from .. import mixlist as mx
        from ..analysis import analyze
        from ..compare.tolerance import tolerance_from_options
        from ..report.terminal import print_replay
        try:
            try:
                tol = tolerance_from_options(min_cosine, max_rel_l2, allow_nonfinite, max_loss_rel,
                                             min_grad_cosine, msprobe_rule)
            except ValueError as e:
                raise InputError(None, str(e)) from None
            cand = mx.load(mixlist) if mixlist else None       # a file GE rejects: one line before any work
            a = analyze(run, tolerance=tol, soc=soc, ops_info=ops_info or None, cann=cann, mode=mode)
            cand = cand if mixlist else a.run_mixlist
            ov = overrides_of(keep_dtype, customize_dtypes)
            plan = a.plan_of(a.lists_with(cand)) if ov is None else a.compiled.what_if(a.plan, a.lists_with(cand), ov)
            steps = a.recording.steps if a.recording is not None else []
            if step:
                missing = sorted(set(step) - set(steps))
                if missing:
                    raise InputError(run, f"no step {', '.join(map(str, missing))} in the FP32 dump; "
                                          f"steps: {', '.join(map(str, steps)) or 'none'}")
            res = a.replay(plan, step or None)
            per_step = res.final_metrics()
            verdict = tol.judge(per_step)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        out = {"run": str(a.path), "mixlist": (cand or mx.Mixlist()).to_dict(), "mode": a.mode,
               "overrides": plan.overrides.to_dict(),
               "how": "replayed" if res.complete else "replayed, incomplete (see coverage)",
               "verdict": verdict.to_dict(), "steps": per_step, "coverage": res.coverage_dict(),
               "low_precision_share": {"value": a.low_share(plan), "how": "estimated (cost model calibrated "
                                       "to the run's measured kernel times)"},
               "tolerance": tol.to_dict()}
        if as_json:
            typer.echo(json.dumps(json_safe(out), indent=2))
        with human_report(as_json):
            print_replay(out)
        raise typer.Exit(0 if verdict.ok else 1)
