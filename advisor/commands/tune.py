"""advisor tune TARGET --out DIR: capture -> compare -> recommend -> re-capture until confirmed."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

import typer

from ..errors import AdvisorError, InputError
from .common import CustomizeDtypesOption, KeepDtypeOption, human_report, overrides_of
from .options import CHIP_FIXED, ENGINE, NUMERICS, TOLERANCE, Chip, EngineChoice, NumericsChoice, Tolerance, uses


_Out = typer.Option(..., "--out", help="Directory for the iterations, journal and final outputs (an existing "
                                       "non-empty one is kept as DIR.bak).")
_Mode = typer.Option("mixed_float16", "--mode", help="mixed_float16 or mixed_bfloat16 (the modes GE applies a "
                                                     "mixlist in; torch_npu: the autocast dtype).")
_MaxRuns = typer.Option(6, "--max-runs", help="Budget: FP32 reference + mixed runs, failed ones included.")
_Holdout = typer.Option(None, "--holdout", help="Judge the last K batches as held out (default 1 when there are "
                                                ">= 2).")
_Cmd = typer.Option(None, "--cmd", help="Command for --runner command, e.g. \"python train.py\" (gets "
                                        "ADVISOR_MIXLIST, ADVISOR_MODE, ADVISOR_RUN_DIR; with --engine torch_npu "
                                        "ADVISOR_POLICY).")
_Timeout = typer.Option(None, "--timeout", help="Seconds before a run (emulator capture or command) is killed with "
                                                "its whole process tree and recorded as timed out (default: 3600 "
                                                "for an emulator capture, 86400 for a command; 0: no limit).")
_Mixlist = typer.Option(None, "--mixlist", help="Start from this modify_mixlist instead of the default lists.")
_Dump = typer.Option(None, "--dump", help="Emulator runs: tensors | stats (default as capture: tensors up to 2M "
                                         "parameters). Tensor dumps let recommend replay candidates on larger models.")
_Granularity = typer.Option("auto", "--granularity", help="type: list edits only; op: per-op keep_dtype / "
                            "customize_dtypes lines too where they keep more compute low (each run applies them: the "
                            "emulator itself, a command through ADVISOR_KEEP_DTYPE / ADVISOR_CUSTOMIZE_DTYPES); auto: "
                            "op for ONNX models with the emulator runner")
_Inputs = typer.Option(None, "--inputs", help="ONNX model TARGET: .npz of its inputs (repeat for more batches).")
_InputShape = typer.Option(None, "--input-shape", help="ONNX model TARGET: generated input of this shape, "
                                                       "name:1,3,224,224.")
_Parallel = typer.Option(1, "--parallel", help="Run up to K candidate lists or policies at once (each emulator run "
                                               "in its own child process; with --runner command one per --devices "
                                               "entry).")
_Devices = typer.Option(None, "--devices", help="NPUs for --runner command, one per concurrent run: e.g. 0,1,2,3 "
                                                "(each run gets its own ASCEND_RT_VISIBLE_DEVICES).")
_Ray = typer.Option(None, "--ray", help="Run every candidate as a Ray task asking for --npus-per-run NPUs, on "
                                        "whichever node has them free: local, auto or the cluster's address (--out "
                                        "and the current folder on storage every node shares).")
_NpusPerRun = typer.Option(None, "--npus-per-run", help="NPUs each run asks Ray for (with --ray; default 1).")
_MeasureMinimality = typer.Option(False, "--measure-minimality", help="Run the confirmed list without each of its "
                                  "edits even when replay already showed every one failing on the same data "
                                  "(default: stop at the first confirmation, 1-minimal by replay).")
_LossScale = typer.Option(None, "--loss-scale", help="Static loss scale of the first run (training); tune raises it "
                                                     "when only the gradients fail by underflow.")


def _runner(runner: str, target: str | None, cmd: str | None, timeout: float | None, devices: str | None,
            soc: str, ops_info: Sequence[str] | None, seed: int, fixed: dict, ray: str | None = None,
            npus_per_run: int | None = None, cann: str | None = None):
    """The runner the options describe (one-line errors for combinations that cannot work)."""
    from ..runners import make_runner
    if ray is not None and not ray.strip():
        raise InputError("--ray", "empty address (use local, auto or the cluster's address)")
    if npus_per_run is not None and not ray:
        raise InputError("--npus-per-run", "applies to --ray (Ray gives each run its NPUs)")
    if devices and ray:
        raise InputError("--devices", "give --devices or --ray, not both (Ray assigns each run its NPUs)")
    if runner == "emulator" and not target:
        raise InputError("TARGET", "the emulator runner needs a workload, e.g. examples/mlp_exp.py:workload")
    devs = [d.strip() for d in devices.split(",") if d.strip()] if devices else None
    if devs is not None and runner != "command":
        raise InputError("--devices", "applies to --runner command (the emulator runs on the CPU)")
    overrides_of(fixed.get("keep_dtype"), fixed.get("customize_dtypes"))   # a malformed file: one line first
    fixed = {k: v for k, v in fixed.items() if v}
    if fixed and runner != "emulator":
        raise InputError("--runner", "--keep-dtype/--customize-dtypes/--inputs/--input-shape/--dump/--overflow-mode/"
                                     "--allow-hf32 are applied by the emulator runner; a command applies its own "
                                     "(ATC options, INF_NAN_MODE_FORCE_DISABLE)")
    r = make_runner(runner, target=target, cmd=cmd, timeout=timeout, devices=devs, soc=soc, ops_info=ops_info,
                    seed=seed, cann=cann, **fixed)
    if ray:
        from ..runners.ray_runner import RayRunner
        return RayRunner(r, ray, 1 if npus_per_run is None else npus_per_run)
    return r


def _granularity(value: str, runner: str) -> str:
    """recommend's granularity inside tune: ``auto`` is recommend's auto with the emulator runner (it applies
    keep lines itself) and ``type`` with a command (whose script may not pass ADVISOR_KEEP_DTYPE to ATC)."""
    from ..recommend.core import GRANULARITIES
    if value not in GRANULARITIES:
        raise InputError("--granularity", f"expected one of {', '.join(GRANULARITIES)}, not {value!r}")
    return "type" if value == "auto" and runner != "emulator" else value


def _tune_training(target, out, mode, chip, tol, holdout, max_skipped_share, seed, numerics, as_json) -> None:
    """tune of a workload with an optimizer (``tune.training``): prints its summary and exits 0 confirmed, 1 not."""
    from ..fsutil import json_text
    from ..progress import StageLog, note
    from ..rundir import keep_previous_out
    from ..tune.training import summary_lines, tune_training
    kept = keep_previous_out(out)
    if kept is not None:
        note(f"kept the previous contents of {out} as {kept}")
    log = StageLog()
    doc = tune_training(target, out, mode=mode, soc=chip.soc, cann=chip.cann, tolerance=tol, holdout=holdout,
                        max_skipped_share=max_skipped_share, seed=seed, progress=log, **numerics.extra())
    log.done()
    if as_json:
        typer.echo(json_text(doc))
    with human_report(as_json):
        typer.echo("\n".join(summary_lines(doc, out)))
    raise typer.Exit(0 if doc["confirmed"] else 1)


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @uses(CHIP_FIXED, NUMERICS, ENGINE, TOLERANCE)
    def tune(target: Optional[str] = typer.Argument(None, help="Workload path/to/file.py:function (emulator runner); "
                                                               "optional with --runner command."),
             out: str = _Out, mode: str = _Mode, max_runs: int = _MaxRuns, holdout: Optional[int] = _Holdout,
             resume: bool = typer.Option(False, "--resume", help="Continue an interrupted tune in --out."),
             runner: str = typer.Option("emulator", "--runner", help="emulator | command"),
             cmd: Optional[str] = _Cmd, timeout: Optional[float] = _Timeout,
             chip: Chip = None, mixlist: Optional[str] = _Mixlist,
             keep_dtype: Optional[str] = KeepDtypeOption, customize_dtypes: Optional[str] = CustomizeDtypesOption,
             inputs: Optional[List[str]] = _Inputs, input_shape: Optional[List[str]] = _InputShape,
             dump: Optional[str] = _Dump, numerics: NumericsChoice = None, engine: EngineChoice = None,
             granularity: str = _Granularity, seed: int = typer.Option(0, "--seed", help="Emulator seed."),
             no_learn: bool = typer.Option(False, "--no-learn", help="Do not use the learned edit-effect model."),
             no_perf: bool = typer.Option(False, "--no-perf", help="Do not try performance edits after a pass."),
             parallel: int = _Parallel, devices: Optional[str] = _Devices, ray: Optional[str] = _Ray,
             npus_per_run: Optional[int] = _NpusPerRun, loss_scale: Optional[float] = _LossScale,
             measure_minimality: bool = _MeasureMinimality,
             max_skipped_share: float = typer.Option(0.05, "--max-skipped-share", help="Training over steps: the "
                                                     "largest share of skipped steps a confirmed run may have."),
             tol: Tolerance = None,
             as_json: bool = typer.Option(False, "--json", help="Print summary.json to stdout.")) -> None:
        """Tune the precision with re-run confirmation on calibration and held-out batches: a torch_npu precision
        policy for a PyTorch workload (default), GE lists for ONNX / TensorFlow models, a command and --engine ge."""
        from ..inputs import check_timeout, check_tune_options, load_mixlist
        from ..progress import StageLog, note
        from ..rundir import check_run_out, keep_previous_out
        r = None
        try:
            # every input checked before the first run: one line, exit 2, no --out written or moved aside
            check_timeout(timeout)
            ge_given = {"--mixlist": mixlist, "--keep-dtype": keep_dtype, "--customize-dtypes": customize_dtypes,
                        "--ops-info": chip.ops_info, "--inputs": inputs, "--input-shape": input_shape,
                        "--granularity": granularity != "auto"}
            choice, why = _engine_choice(engine, target, runner, resume, out, ge_given)
            gran = _granularity(granularity, runner)
            refused = {"--loss-scale": loss_scale is not None, "--measure-minimality": measure_minimality,
                       "--ray": ray is not None, "--npus-per-run": npus_per_run is not None}
            if choice == "torch_npu":
                _refuse_for_torch_npu(target, ge_given, refused, engine, mode, chip)
            # as ATC: no mixlist outside the mixed modes (its words, before tune's own mode check); a file GE rejects
            base = load_mixlist(mixlist, chip.lists(), mode=mode)
            check_tune_options(mode, max_runs, holdout, parallel, loss_scale)
            check_run_out(out)
            r = _runner(runner, target, cmd, timeout, devices, chip.soc, chip.ops_info, seed,
                        {"keep_dtype": keep_dtype, "customize_dtypes": customize_dtypes, "inputs": inputs,
                         "input_shapes": input_shape, "dump": dump, **numerics.extra()}, ray, npus_per_run, chip.cann)
            log = StageLog()
            facts = _checked_workload(r, runner, out, resume and choice != "auto", holdout, inputs, input_shape, dump,
                                      loss_scale, log)
            choice = _engine_of_workload(choice, facts, target, refused, engine, mode, chip)
            if why:
                note(why)                           # once every input passed: a refusal stays one line
            if choice == "ge" and facts and facts["trains"]:
                r.close()
                r = None                            # training over optimizer steps (advisor/tune/training.py)
                _tune_training(target, out, mode, chip, tol, holdout, max_skipped_share, seed, numerics, as_json)
            kept = None if resume else keep_previous_out(out)   # a fresh tune: the previous contents are kept
            if kept is not None:
                note(f"kept the previous contents of {out} as {kept}")
            if choice == "torch_npu":
                s = _tune_policy(r, out, mode, max_runs, holdout, resume, chip, engine, tol, parallel, log)
            else:
                from ..tune import tune as do_tune
                s = do_tune(r, out, mode=mode, max_runs=max_runs, holdout=holdout, resume=resume, tolerance=tol,
                            learn=not no_learn, perf=not no_perf, base_mixlist=base, soc=chip.soc,
                            ops_info=chip.ops_info, cann=chip.cann, progress=log, parallel=parallel,
                            loss_scale=loss_scale, granularity=gran, measure_minimality=measure_minimality)
            log.done()
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        finally:
            if r is not None:
                r.close()
        _print_summary(s, out, as_json, choice == "torch_npu")


def _checked_workload(r, runner: str, out: str, resume: bool, holdout, inputs, input_shape, dump, loss_scale,
                      log) -> dict | None:
    """The checks that need the workload, before any run: the capture child loads it (not runs it) and says how
    many batches it has (``--holdout`` against them), whether it trains over optimizer steps and its framework
    (returned: ``{"batches", "trains", "framework"}``; None when not known before a run: a command, a resume)."""
    from ..inputs import check_capture_inputs, check_holdout
    inner = getattr(r, "inner", r)          # a Ray runner's local runner knows the workload
    inner.progress = log.note
    facts = None
    if not resume and hasattr(inner, "workload_facts"):
        inner.prepare(Path(out))            # a missing target: one line before the workload is loaded
        facts = inner.workload_facts()      # the capture child loads the workload meanwhile
    if runner == "emulator":
        check_capture_inputs(inputs, input_shape, dump, loss_scale)
    if facts is None:
        return None
    known = facts()
    if not known["trains"] and holdout is not None:
        check_holdout(holdout, known["batches"])
    if inner is not r:
        inner.close()                       # with Ray the runs start their own capture child on their node
    return known


def _engine_choice(engine: EngineChoice, target, runner: str, resume: bool, out: str,
                   ge_given: dict) -> tuple[str, str | None]:
    """(torch_npu | ge | auto, the note for a GE option that picks ge): ``inputs.tune_engine``."""
    from ..inputs import tune_engine
    from ..tune.journal import journal_identity
    from ..workload import is_onnx_target
    ident = journal_identity(Path(out)) if resume else None
    return tune_engine(engine.engine, engine.amp, engine.policy, onnx=bool(target) and is_onnx_target(str(target)),
                       command=runner == "command", journal_engine=None if ident is None else ident.get("engine", "ge"),
                       ge_given=[k for k, v in ge_given.items() if v])


def _refuse_for_torch_npu(target, ge_given: dict, refused: dict, engine: EngineChoice, mode: str, chip: Chip) -> None:
    """What a torch_npu tune does not take: one line, exit 2, before any run (``inputs.TORCH_NPU_TUNE_REFUSES``;
    GE's options and an ONNX target as ``inputs.engine_settings`` refuses them)."""
    from ..inputs import TORCH_NPU_TUNE_REFUSES, check_mode, engine_settings
    from ..workload import is_onnx_target
    given = [k for k, v in refused.items() if v]
    if given:
        raise InputError(given[0], f"is not available with --engine torch_npu, the default for a PyTorch workload "
                                   f"({TORCH_NPU_TUNE_REFUSES[given[0]]}); --engine ge tunes GE lists with it")
    ge = [k for k, v in ge_given.items() if v]
    if ge:
        raise InputError(ge[0], "is GE's (a torch_npu tune runs precision policies: no mixlist, per-op dtype file, "
                                "ONNX input or list granularity): use --engine ge, or --policy START.json")
    check_mode(mode, needs_mixlist=True)    # tune's modes, in its own words, before torch_npu's
    engine_settings("torch_npu", engine.amp, mode, engine.policy, chip.soc,
                    "onnx" if target and is_onnx_target(str(target)) else "pytorch", where=target)


def _engine_of_workload(choice: str, facts: dict | None, target, refused: dict, engine: EngineChoice, mode: str,
                        chip: Chip) -> str:
    """The engine once the workload is known: "auto" by ``inputs.auto_engine`` (an optimizer: ge, with a note, as
    capture); torch_npu refused for a workload it does not emulate (an optimizer, TensorFlow)."""
    from ..progress import note
    if facts is None:
        return "ge" if choice == "auto" else choice
    fw = facts.get("framework", "pytorch")
    if choice == "auto":
        from ..inputs import auto_engine
        if fw == "pytorch" and facts["trains"]:
            note("a workload with an optimizer: tuned with engine ge (torch_npu training over optimizer steps is not "
                 "emulated yet)")
            return "ge"
        choice = auto_engine(fw)
        if choice == "torch_npu":
            _refuse_for_torch_npu(target, {}, refused, engine, mode, chip)
        return choice
    if choice == "torch_npu" and facts["trains"]:
        raise InputError(target, "training over optimizer steps (a workload with an optimizer) is emulated on GE "
                                 "only: tune it with --engine ge, or without its optimizer")
    if choice == "torch_npu" and fw != "pytorch":
        from ..inputs import engine_settings
        engine_settings("torch_npu", engine.amp, mode, engine.policy, chip.soc, fw, where=target)
    return choice


def _tune_policy(r, out, mode, max_runs, holdout, resume, chip, engine, tol, parallel, log) -> dict:
    """tune --engine torch_npu: candidates are precision policies (advisor/tune/policy_loop.py) on the runner
    ``r`` (the emulator, or a command given ``ADVISOR_POLICY``)."""
    from ..inputs import engine_settings
    from ..tune.policy_loop import tune_policy
    eng = engine_settings("torch_npu", engine.amp, mode, engine.policy, chip.soc)
    return tune_policy(r, out, amp=eng.config.amp, mode=mode, soc=chip.soc, start=eng.policy, max_runs=max_runs,
                       holdout=holdout, tolerance=tol, progress=log, resume=resume, parallel=parallel)


def _print_summary(s: dict, out: str, as_json: bool, policy: bool) -> None:
    """summary.json on stdout with --json, the table (to stderr with --json); exit 0 confirmed, 1 not."""
    from ..fsutil import json_text
    from ..report.terminal import print_policy_tune, print_tune_summary
    if as_json:
        typer.echo(json_text(s))
    with human_report(as_json):
        (print_policy_tune if policy else print_tune_summary)(s, out)
    raise typer.Exit(0 if s["confirmed"] else 1)
