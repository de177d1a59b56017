"""advisor recommend: the smallest mixlist edits that bring a run within tolerance.
Exit 0 recommendation exists (or nothing needed), 1 no edit set within limits meets tolerance, 2 bad input."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AdvisorError
from ..fsutil import check_out_dir
from .common import RayOption, WorkersOption, default_out, human_report, overrides_of
from .options import CHIP_OF_RUN, ENGINE, NUMERICS, TOLERANCE, Chip, EngineChoice, NumericsChoice, Tolerance, uses


def register(app: typer.Typer) -> None:
    @app.command("recommend")
    @uses(CHIP_OF_RUN, NUMERICS, ENGINE, TOLERANCE)
    def recommend_cmd(
        profile: str = typer.Option(..., "--profile", help="run directory (emulator capture, tune run, or a real "
                                    "NPU run with a profile and optionally msprobe dumps)"),
        out: Optional[str] = typer.Option(None, "--out", help="output folder (default: <profile>/advice; beside the "
                                          "file when --profile is a file)"),
        as_json: bool = typer.Option(False, "--json", help="print recommendation.json to stdout"),
        mixlist: Optional[str] = typer.Option(None, "--mixlist", help="start from this mixlist instead of the run's"),
        keep_dtype: Optional[str] = typer.Option(None, "--keep-dtype", help="start from this ATC --keep_dtype file "
                                                 "instead of the run's"),
        customize_dtypes: Optional[str] = typer.Option(None, "--customize-dtypes", help="start from this ATC "
                                                       "--customize_dtypes file instead of the run's"),
        exclude: Optional[List[str]] = typer.Option(None, "--exclude", help="never edit this op type (repeatable)"),
        max_edits: int = typer.Option(4, "--max-edits", min=1, help="largest edit set searched"),
        chip: Chip = None,
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode (default: run.json's)"),
        numerics: NumericsChoice = None, engine: EngineChoice = None,
        rank: Optional[int] = typer.Option(None, "--rank", help="only this rank of a multi-rank run (default: "
                                           "every rank's evidence)"),
        workers: Optional[int] = WorkersOption, ray: Optional[str] = RayOption,
        step: Optional[int] = typer.Option(None, "--step", help="profile step to build the graph from"),
        no_perf: bool = typer.Option(False, "--no-perf", help="do not look for performance edits"),
        granularity: str = typer.Option("auto", "--granularity", help="op: per-op keep_dtype / customize_dtypes "
                                        "lines where they keep more compute low than list edits (keep_dtype.cfg, "
                                        "customize_dtypes.cfg); type: list edits only; "
                                        "auto: op for ONNX models, force_fp16-like modes and runs using keep_dtype"),
        tol: Tolerance = None,
    ) -> None:
        """Recommend the smallest op-type list edits (modify_mixlist.json) that keep the run within tolerance
        while keeping the most compute in low precision; writes modify_mixlist.json, recommendation.json and
        report.html.  Exit 0 recommendation (or nothing needed), 1 nothing within limits meets the tolerance,
        2 bad input."""
        from rich.console import Console

        from .. import mixlist as mx
        from ..progress import StageLog, note
        from ..recommend import write_outputs
        from ..recommend.ranks import recommend_run
        from ..tasks import check_workers
        from ..report import print_recommendation
        from ..inputs import check_run_dir
        try:
            check_run_dir(profile)
            torch_npu = engine.for_run(profile, "recommend", torch_npu=True) == "torch_npu"
            check_workers(workers, ray)
            base = mx.load(mixlist) if mixlist and not torch_npu else None
            out_dir = check_out_dir(Path(out) if out else default_out(profile))
            log = StageLog()
            if torch_npu:      # a torch_npu run's advice is a precision policy (recommend/policy_search.py)
                from ..recommend.policy_search import recommend_cli
                rec, paths = recommend_cli(profile, tol, engine.policy, mixlist or keep_dtype or customize_dtypes,
                                           chip.soc, tuple(exclude or ()), max_edits, step, out_dir, log,
                                           amp=engine.amp)
            else:
                rec = recommend_run(profile, tol, base_mixlist=base, exclude=tuple(exclude or ()), max_edits=max_edits,
                                    soc=chip.soc, ops_info=chip.ops_info, cann=chip.cann, mode=mode, rank=rank, step=step,
                                    perf=not no_perf,
                                    progress=log, overrides=overrides_of(keep_dtype, customize_dtypes),
                                    workers=workers, ray=ray, granularity=granularity, out_dir=out_dir,
                                    **numerics.extra())
                log("writing outputs")
                paths = write_outputs(rec, out_dir)
            log.done()
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        for k, p in paths.items():
            if k.startswith("kept:"):
                note(f"kept the previous {k[5:]} as {p}")
        if as_json:
            typer.echo(Path(paths["recommendation"]).read_text(encoding="utf-8"), nl=False)
        with human_report(as_json):
            print_recommendation(rec.to_dict(), Console(),
                                 {k: v for k, v in paths.items() if not k.startswith("kept:")})
        raise typer.Exit(rec.exit_code)
