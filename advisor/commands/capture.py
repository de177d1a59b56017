"""advisor capture TARGET --out DIR: emulate an Ascend mixed-precision run of a PyTorch workload on the CPU."""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import AdvisorError
from .common import OpsInfoOption, SocOption


def register(app: typer.Typer) -> None:
    @app.command("capture")
    def capture(target: str = typer.Argument(..., help="path/to/file.py:function or package.module:function "
                                                       "returning (model, batches[, loss_fn]) or an advisor.Workload"),
                out: str = typer.Option(..., "--out", help="Run directory to write."),
                mode: str = typer.Option("mixed_float16", "--mode",
                                         help="Precision mode: mixed_float16, mixed_bfloat16, must_keep_origin_dtype, "
                                              "force_fp32, force_fp16, allow_fp32_to_fp16, ..."),
                mixlist: Optional[str] = typer.Option(None, "--mixlist", help="modify_mixlist JSON to apply."),
                soc: str = SocOption, ops_info: Optional[str] = OpsInfoOption,
                seed: int = typer.Option(0, "--seed", help="RNG seed (step i uses seed + i in both runs)."),
                dump: Optional[str] = typer.Option(None, "--dump", help="tensors | stats (default: tensors for "
                                                                        "models up to 2M parameters)."),
                no_local: bool = typer.Option(False, "--no-local-error", help="Skip local_error.csv.")) -> None:
        """Run TARGET in FP32 and emulated GE mixed precision; write profile, graph, dumps, local error."""
        from ..emulator import capture as do_capture
        try:
            path = do_capture(target, out, mode=mode, mixlist=mixlist, soc=soc, ops_info=ops_info, seed=seed,
                              dump=dump, local=not no_local)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        typer.echo(f"captured {target} -> {path}")
