"""advisor capture TARGET --out DIR: emulate an Ascend mixed-precision run of a PyTorch workload on the CPU."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AdvisorError
from ..runners.base import DEFAULT_TIMEOUT_S
from .common import CustomizeDtypesOption, KeepDtypeOption, human_report, overrides_of
from .options import CHIP_FIXED, ENGINE, NUMERICS, Chip, EngineChoice, NumericsChoice, uses


def register(app: typer.Typer) -> None:
    @app.command("capture")
    @uses(CHIP_FIXED, NUMERICS, ENGINE)
    def capture(target: str = typer.Argument(..., help="path/to/file.py:function or package.module:function "
                                                       "returning (model, batches[, loss_fn]) or an advisor.Workload, "
                                                       "or an ONNX model file (model.onnx)"),
                out: str = typer.Option(..., "--out", help="Run directory to write (an existing non-empty one is "
                                                           "kept as DIR.bak)."),
                mode: str = typer.Option("mixed_float16", "--mode",
                                         help="Precision mode: mixed_float16, mixed_bfloat16, must_keep_origin_dtype, "
                                              "force_fp32, force_fp16, allow_fp32_to_fp16, ..."),
                mixlist: Optional[str] = typer.Option(None, "--mixlist", help="modify_mixlist JSON to apply."),
                keep_dtype: Optional[str] = KeepDtypeOption, customize_dtypes: Optional[str] = CustomizeDtypesOption,
                inputs: Optional[List[str]] = typer.Option(None, "--inputs", help="ONNX model: an .npz of its inputs "
                                                           "(one array per graph input name); repeat for more batches."),
                input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="ONNX model: generate an "
                                                                "input of this shape, name:1,3,224,224 (repeatable)."),
                chip: Chip = None, numerics: NumericsChoice = None, engine: EngineChoice = None,
                seed: int = typer.Option(0, "--seed", help="RNG seed (step i uses seed + i in both runs)."),
                dump: Optional[str] = typer.Option(None, "--dump", help="tensors | stats (default: tensors for "
                                                                        "models up to 2M parameters)."),
                no_local: bool = typer.Option(False, "--no-local-error", help="Skip local_error.csv."),
                loss_scale: Optional[float] = typer.Option(None, "--loss-scale", help="Static loss scale of a "
                                                           "training workload's backward (both runs; recorded "
                                                           "in run.json)."),
                timeout: float = typer.Option(DEFAULT_TIMEOUT_S["emulator"], "--timeout", help="Seconds before a "
                                              "workload that has not finished is killed with its process tree "
                                              "(exit 2); 0: no limit."),
                as_json: bool = typer.Option(False, "--json", help="Print the run's summary (run.json and its "
                                                                   "run_dir) as JSON.")) -> None:
        """Run TARGET in FP32 and emulated mixed precision -- GE (default), or torch_npu eager (autocast, Apex) for a
        PyTorch workload with --engine torch_npu; write profile, graph, dumps, local error."""
        import sys

        from ..inputs import check_capture_inputs, check_mode, check_timeout, engine_settings, load_mixlist
        from ..progress import VERBOSE, StageLog, note, verbosity
        from ..rundir import check_run_out
        from ..runners.base import Heartbeat
        from ..runners.worker import CaptureWorker
        from ..workload import check_target, is_onnx_target
        try:
            # every input checked before the workload runs: one line, exit 2, nothing written
            limit = check_timeout(timeout)
            check_mode(mode)
            lists = chip.lists()                           # a bad --soc / --cann / ops-info file: one line
            load_mixlist(mixlist, lists, mode=mode)        # as ATC: none outside the mixed modes; a file GE rejects
            engine_settings(engine.capture_kw()["engine"], engine.amp, mode, engine.policy, chip.soc,
                            "onnx" if is_onnx_target(target) else "pytorch",
                            {"mixlist": mixlist, "keep_dtype": keep_dtype, "customize_dtypes": customize_dtypes,
                             "ops_info": chip.ops_info}, target)
            check_run_out(out)
            check_target(target)
            overrides_of(keep_dtype, customize_dtypes)
            check_capture_inputs(inputs, input_shape, dump, loss_scale)
            extra = {k: v for k, v in (("keep_dtype", keep_dtype), ("customize_dtypes", customize_dtypes),
                                       ("inputs", inputs), ("input_shapes", input_shape)) if v}
            extra.update(numerics.extra())
            extra.update(engine.capture_kw())
            log = StageLog()
            log(f"capturing {target} (FP32 and {mode}{', engine ' + engine.engine if engine.engine else ''})")
            with CaptureWorker() as worker:
                reply = worker.capture(target, out, timeout=limit, mode=mode, mixlist=mixlist, soc=chip.soc,
                                       ops_info=chip.ops_info, cann=chip.cann, seed=seed, dump=dump, local=not no_local,
                                       heartbeat=Heartbeat(log.note, "capture", limit), **extra,
                                       **({"loss_scale": loss_scale} if loss_scale is not None else {}))
            log.done()
            if not reply.ok:
                if verbosity() == VERBOSE and reply.error.get("traceback"):
                    sys.stderr.write(reply.error["traceback"])
                raise reply.exception(target)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        for n in reply.notes:
            note(n)
        if as_json:
            run = json.loads((Path(reply.path) / "run.json").read_text(encoding="utf-8"))
            typer.echo(json.dumps({"run_dir": reply.path, **run}, indent=2, ensure_ascii=False))
        with human_report(as_json):
            typer.echo(f"captured {target} -> {out}")
