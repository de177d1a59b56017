"""advisor diff A.json B.json --profile DIR: effective list changes, flipped op instances and why,
predicted error/time change.  Exit 0 on success, 2 on bad input."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AdvisorError
from ..fsutil import check_out_dir
from ..progress import note
from .common import CannOption, OpsInfoOption, human_report, overrides_of


def register(app: typer.Typer) -> None:
    @app.command("diff")
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
                                          "(default: <profile>/advice)"),
        as_json: bool = typer.Option(False, "--json", help="print diff.json to stdout"),
        soc: Optional[str] = typer.Option(None, "--soc", help="chip (default: run.json's, else ascend910b)"),
        ops_info: Optional[List[str]] = OpsInfoOption, cann: Optional[str] = CannOption,
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode (default: run.json's)"),
        rank: Optional[int] = typer.Option(None, "--rank", help="rank of a multi-rank run"),
        step: Optional[int] = typer.Option(None, "--step", help="profile step to build the graph from"),
        min_cosine: float = typer.Option(0.999, "--min-cosine", help="final outputs: minimum cosine vs FP32"),
        max_rel_l2: float = typer.Option(1e-2, "--max-rel-l2", help="final outputs: maximum relative L2 vs FP32"),
        allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", help="do not require finite outputs"),
    ) -> None:
        """Show what changes between two mixlists on a run's graph: list changes per type, the op instances
        that flip precision (rule, predecessor, root), predicted error (with activations) and time."""
        from rich.console import Console

        from ..recommend.diffing import diff, write_diff_outputs
        from ..report import print_diff
        from .common import tolerance
        try:
            tol = tolerance(min_cosine, max_rel_l2, allow_nonfinite, 1e-2, 0.99)
            out_dir = check_out_dir(Path(out) if out else Path(profile) / "advice")
            res = diff(profile, a, b, tolerance=tol, soc=soc, ops_info=ops_info or None, cann=cann, mode=mode,
                       rank=rank, step=step,
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
