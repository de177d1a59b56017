"""advisor replay --run DIR --mixlist M.json: the verdict a candidate list would get, by re-executing the run's
recorded FP32 ops under its plan (advisor/replay.py); a torch_npu run takes --policy P.json instead
(advisor/replay_torch_npu.py).  Exit 0 predicted within tolerance, 1 outside, 2 bad input."""
from __future__ import annotations

import json
from typing import Optional

import typer

from ..errors import AdvisorError, InputError
from ..fsutil import json_safe
from .common import human_report, overrides_of
from .options import CHIP_OF_RUN, ENGINE, NUMERICS, TOLERANCE, Chip, EngineChoice, NumericsChoice, Tolerance, uses


def register(app: typer.Typer) -> None:
    @app.command("replay")
    @uses(CHIP_OF_RUN, NUMERICS, ENGINE, TOLERANCE)
    def replay_cmd(
        run: str = typer.Option(..., "--run", help="run directory with an FP32 tensor dump (capture, tune or msprobe)"),
        mixlist: Optional[str] = typer.Option(None, "--mixlist", help="the candidate modify_mixlist JSON "
                                              "(default: the run's own list)"),
        keep_dtype: Optional[str] = typer.Option(None, "--keep-dtype", help="the candidate ATC --keep_dtype file "
                                                 "(default: the run's own)"),
        customize_dtypes: Optional[str] = typer.Option(None, "--customize-dtypes", help="the candidate ATC "
                                                       "--customize_dtypes file (default: the run's own)"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        chip: Chip = None,
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode (default: run.json's)"),
        numerics: NumericsChoice = None, engine: EngineChoice = None,
        step: Optional[list[int]] = typer.Option(None, "--step", help="only these steps (repeatable)"),
        tol: Tolerance = None,
    ) -> None:
        """Predict a candidate list's verdict by replaying the run's FP32 ops under its plan."""
        from .. import mixlist as mx
        from ..analysis import analyze
        from ..report.terminal import print_replay
        from ..inputs import check_run_dir
        try:
            check_run_dir(run, "--run")
            if engine.for_run(run, "replay", torch_npu=True) == "torch_npu":
                _replay_policy(run, engine, mixlist or keep_dtype or customize_dtypes, chip, numerics, step, tol,
                               as_json)
            ov = overrides_of(keep_dtype, customize_dtypes)      # the user's files read before the run is
            cand = mx.load(mixlist) if mixlist else None            # (malformed: one line, nothing read)
            a = analyze(run, tolerance=tol, soc=chip.soc, ops_info=chip.ops_info, cann=chip.cann, mode=mode,
                        overflow_mode=numerics.overflow_mode, allow_hf32=numerics.allow_hf32)
            if cand is not None:      # the one rule of recommend and diff: a type that exists nowhere is refused
                mx.check_op_types(cand, a.defaults, set(a.compiled.types))
            cand = cand if cand is not None else a.run_mixlist
            plan = a.plan_of(a.lists_with(cand)) if ov is None else a.compiled.what_if(a.plan, a.lists_with(cand), ov)
            _check_steps(run, step, a)
            res = a.replay(plan, step or None)
            per_step = res.final_metrics()
            verdict = tol.judge(per_step)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        out = {"run": str(a.path), "mixlist": (cand or mx.Mixlist()).to_dict(), "mode": a.mode,
               **a.numerics.to_meta(),
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


def _check_steps(run: str, step: Optional[list[int]], a) -> None:
    """``--step`` names steps the run's FP32 dump has (one line, exit 2, otherwise)."""
    steps = a.recording.steps if a.recording is not None else []
    missing = sorted(set(step or ()) - set(steps))
    if missing:
        raise InputError(run, f"no step {', '.join(map(str, missing))} in the FP32 dump; "
                              f"steps: {', '.join(map(str, steps)) or 'none'}")


def _replay_policy(run: str, engine: EngineChoice, ge_file: Optional[str], chip: Chip, numerics: NumericsChoice,
                   step: Optional[list[int]], tol: Tolerance, as_json: bool) -> None:
    """A torch_npu run under ``--policy`` (default: the run's own policy); raises typer.Exit with the verdict."""
    from ..analysis import analyze
    from ..precision_policy import read_policy
    from ..replay_torch_npu import TorchNpuReplay, policy_run, replay_report
    from ..report.terminal import print_replay
    if ge_file:
        raise InputError(ge_file, "is a GE file (mixlist / keep_dtype / customize_dtypes); a torch_npu run takes "
                                  "--policy precision_policy.json")
    pol = read_policy(engine.policy) if engine.policy else None
    a = analyze(policy_run(run), tolerance=tol, soc=chip.soc, overflow_mode=numerics.overflow_mode,
                allow_hf32=numerics.allow_hf32)
    r = TorchNpuReplay(a, amp=engine.amp or (pol.amp if pol is not None else None))   # a real run: the policy's
    _check_steps(run, step, a)
    out, ok = replay_report(r, pol if pol is not None else r.policy, tol, step or None)
    if as_json:
        typer.echo(json.dumps(json_safe(out), indent=2))
    with human_report(as_json):
        print_replay(out)
    raise typer.Exit(0 if ok else 1)
