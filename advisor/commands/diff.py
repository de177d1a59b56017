"""advisor diff A.json B.json --profile DIR: effective list changes, flipped op instances and why,
predicted error/time change.  Exit 0 on success, 2 on bad input."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import AdvisorError
from ..fsutil import check_out_dir
from ..progress import note
from .common import default_out, human_report, overrides_of
from .options import CHIP_OF_RUN, NUMERICS, TOLERANCE, Chip, NumericsChoice, Tolerance, uses


def register(app: typer.Typer) -> None:
    @app.command("diff")
    @uses(CHIP_OF_RUN, NUMERICS, TOLERANCE)
    def diff_cmd(
        a: str = typer.Argument(..., help="mixlist A (a file, or 'defaults' for the chip defaults)"),
        b: str = typer.Argument(..., help="mixlist B (a file, 'defaults', or 'recommended' = recommend from A)"),
        profile: str = typer.Option(..., "--profile", help="run directory whose op graph the lists apply to"),
        keep_dtype_a: Optional[str] = typer.Option(None, "--keep-dtype-a", help="side A's ATC --keep_dtype file "
                                                   "(default: the run's)"),
        customize_dtypes_a: Optional[str] = typer.Option(None, "--customize-dtypes-a", help="side A's ATC "
                                                         "--customize_dtypes file (default: the run's)"),
        keep_dtype_b: Optional[str] = typer.Option(None, "--keep-dtype-b", help="side B's ATC --keep_dtype file "
                                                   "(default: side A's)"),
        customize_dtypes_b: Optional[str] = typer.Option(None, "--customize-dtypes-b", help="side B's ATC "
                                                         "--customize_dtypes file (default: side A's)"),
        out: Optional[str] = typer.Option(None, "--out", help="write diff.json and diff.html here "
                                          "(default: <profile>/advice; beside the file when --profile is a file)"),
        as_json: bool = typer.Option(False, "--json", help="print diff.json to stdout"),
        chip: Chip = None,
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode (default: run.json's)"),
        numerics: NumericsChoice = None,
        rank: Optional[int] = typer.Option(None, "--rank", help="rank of a multi-rank run"),
        step: Optional[int] = typer.Option(None, "--step", help="profile step to build the graph from"),
        tol: Tolerance = None,
    ) -> None:
        """Show what changes between two mixlists on a run's graph: list changes per type, the op instances
        that flip precision (rule, predecessor, root), predicted error (with activations) and time."""
        from rich.console import Console

        from ..recommend.diffing import diff, write_diff_outputs
        from ..report import print_diff
        from ..inputs import check_run_dir
        try:
            check_run_dir(profile)
            out_dir = check_out_dir(Path(out) if out else default_out(profile))
            res = diff(profile, a, b, tolerance=tol, soc=chip.soc, ops_info=chip.ops_info, cann=chip.cann, mode=mode,
                       rank=rank, step=step,
                       overflow_mode=numerics.overflow_mode, allow_hf32=numerics.allow_hf32,
                       overrides_a=overrides_of(keep_dtype_a, customize_dtypes_a),
                       overrides_b=overrides_of(keep_dtype_b, customize_dtypes_b))
            paths = write_diff_outputs(res, out_dir)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        shown = {k: v for k, v in paths.items() if not k.startswith("kept:")}
        for k, p in paths.items():
            if k.startswith("kept:"):
                note(f"kept the previous {k[5:]} as {p}")
        if as_json:
            typer.echo(Path(paths["diff"]).read_text(encoding="utf-8"), nl=False)
        with human_report(as_json):
            print_diff(res.to_dict(), Console(), shown)
        raise typer.Exit(0)
