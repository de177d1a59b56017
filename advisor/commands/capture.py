"""advisor capture TARGET --out DIR: emulate an Ascend mixed-precision run of a PyTorch workload on the CPU."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import AdvisorError, InputError
from .common import OpsInfoOption, SocOption, human_report


def register(app: typer.Typer) -> None:
    @app.command("capture")
    def capture(target: str = typer.Argument(..., help="path/to/file.py:function or package.module:function "
                                                       "returning (model, batches[, loss_fn]) or an advisor.Workload"),
                out: str = typer.Option(..., "--out", help="Run directory to write (an existing non-empty one is "
                                                           "kept as DIR.bak)."),
                mode: str = typer.Option("mixed_float16", "--mode",
                                         help="Precision mode: mixed_float16, mixed_bfloat16, must_keep_origin_dtype, "
                                              "force_fp32, force_fp16, allow_fp32_to_fp16, ..."),
                mixlist: Optional[str] = typer.Option(None, "--mixlist", help="modify_mixlist JSON to apply."),
                soc: str = SocOption, ops_info: Optional[str] = OpsInfoOption,
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
        from ..rundir import check_run_out
        from ..runners.worker import CaptureWorker
        try:
            if timeout is not None and not timeout > 0:
                raise InputError("--timeout", f"must be a positive number of seconds, not {timeout:g}")
            check_run_out(out)
            with CaptureWorker() as worker:
                reply = worker.capture(target, out, timeout=timeout, mode=mode, mixlist=mixlist, soc=soc,
                                       ops_info=ops_info, seed=seed, dump=dump, local=not no_local,
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
