"""advisor capture TARGET --out DIR: emulate an Ascend mixed-precision run of a PyTorch workload on the CPU."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AdvisorError, InputError
from .common import (CannOption, CustomizeDtypesOption, KeepDtypeOption, OpsInfoOption, SocOption, human_report,
                     overrides_of)


def register(app: typer.Typer) -> None:
    @app.command("capture")
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
                soc: str = SocOption, ops_info: Optional[List[str]] = OpsInfoOption,
                cann: Optional[str] = CannOption,
                seed: int = typer.Option(0, "--seed", help="RNG seed (step i uses seed + i in both runs)."),
                dump: Optional[str] = typer.Option(None, "--dump", help="tensors | stats (default: tensors for "
                                                                        "models up to 2M parameters)."),
                no_local: bool = typer.Option(False, "--no-local-error", help="Skip local_error.csv."),
                loss_scale: Optional[float] = typer.Option(None, "--loss-scale", help="Static loss scale of a "
                                                           "training workload's backward (both runs; recorded "
                                                           "in run.json)."),
                timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds before a workload that has "
                                                                                "not finished is killed (exit 2)."),
                as_json: bool = typer.Option(False, "--json", help="Print the run's summary (run.json and its "
                                                                   "run_dir) as JSON.")) -> None:
        """Run TARGET in FP32 and emulated GE mixed precision; write profile, graph, dumps, local error."""
        import sys

        from ..progress import VERBOSE, note, verbosity
        from ..mixlist import load as load_mixlist
        from ..oplists import load_lists
        from ..rundir import check_mixlist_mode, check_run_out
        from ..runners.worker import CaptureWorker
        try:
            if timeout is not None and not timeout > 0:
                raise InputError("--timeout", f"must be a positive number of seconds, not {timeout:g}")
            check_mixlist_mode(mode, mixlist)              # as ATC: no mixlist outside the mixed modes
            if mixlist:
                load_mixlist(mixlist)                      # a file GE rejects: one line before any work
            check_run_out(out)
            overrides_of(keep_dtype, customize_dtypes)     # a malformed file: one line before any work
            load_lists(soc, ops_info, cann)                # a bad --soc / --cann / ops-info file: likewise
            extra = {k: v for k, v in (("keep_dtype", keep_dtype), ("customize_dtypes", customize_dtypes),
                                       ("inputs", inputs), ("input_shapes", input_shape)) if v}
            with CaptureWorker() as worker:
                reply = worker.capture(target, out, timeout=timeout, mode=mode, mixlist=mixlist, soc=soc,
                                       ops_info=ops_info or None, cann=cann, seed=seed, dump=dump, local=not no_local, **extra,
                                       **({"loss_scale": loss_scale} if loss_scale is not None else {}))
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
