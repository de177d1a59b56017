"""advisor compare: FP16/BF16 run vs FP32 run — worst ops, first op over tolerance, culprit types.
Exit 0 within tolerance, 1 outside, 2 bad input."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import AdvisorError, InputError
from .common import RayOption, WorkersOption
from .helptext import AdvisorCommand
from .options import CHIP_OF_RUN, TOLERANCE, Chip, Tolerance, uses


class _CompareCommand(AdvisorCommand):
    """``--json`` is a flag (JSON on stdout) like on every command; ``--json FILE`` -- its meaning before
    ``--json-out`` -- still writes FILE, with a deprecation note.  compare takes no positional argument,
    so ``--json`` followed by a word not starting with ``-`` is that old form."""

    def parse_args(self, ctx, args):
        out, rest = [], list(args)
        while rest:
            a = rest.pop(0)
            if a.startswith("--json="):
                rest.insert(0, a[len("--json="):])
                a = "--json"
            if a == "--json" and rest and not rest[0].startswith("-"):
                ctx.meta["legacy_json"] = rest[0]
                out += ["--json-out", rest.pop(0)]
            else:
                out.append(a)
        return super().parse_args(ctx, out)


def register(app: typer.Typer) -> None:
    @app.command("compare", cls=_CompareCommand)
    @uses(CHIP_OF_RUN, TOLERANCE)
    def compare(
        ctx: typer.Context,
        target: Optional[str] = typer.Option(None, "--target", help="msprobe dump of the FP16/BF16 run (dump.json, rank folder or dump root)"),
        golden: Optional[str] = typer.Option(None, "--golden", help="msprobe dump of the FP32 run"),
        run: Optional[str] = typer.Option(None, "--run", help="a capture/tune run directory (instead of --target/--golden)"),
        csv_out: Optional[str] = typer.Option(None, "--csv", help="write advisor's per-op table (metrics and attribution) as CSV"),
        as_json: bool = typer.Option(False, "--json", help="print the full result as JSON on stdout (the table goes to stderr)"),
        json_out: Optional[str] = typer.Option(None, "--json-out", help="write the full result as JSON to this file"),
        xlsx_out: Optional[str] = typer.Option(None, "--xlsx", help="write msprobe's compare result table (its columns and "
                                               "'Accuracy Reached or Not' rule) as an Excel workbook"),
        msprobe_csv: Optional[str] = typer.Option(None, "--msprobe-csv", help="write msprobe's compare result table as CSV"),
        html_out: Optional[str] = typer.Option(None, "--html", help="a run with training steps: write both loss "
                                               "curves, the loss-scale trajectory, skipped steps and weight drift "
                                               "as an HTML report"),
        top: int = typer.Option(15, "--top", help="rows of the worst-ops table"),
        step: Optional[List[int]] = typer.Option(None, "--step", help="only these steps (repeatable)"),
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode for the plan (default: run.json's)"),
        chip: Chip = None,
        tol: Tolerance = None,
        rank: Optional[List[str]] = typer.Option(None, "--rank", help="only these ranks (repeatable; 3, 0,4,8 or 0-63; "
                                                 "default: every rank with both dumps)"),
        workers: Optional[int] = WorkersOption,
        ray: Optional[str] = RayOption,
    ) -> None:
        """Compare a low-precision run against FP32: per-op metrics, first op over tolerance, culprit op types.
        Exit 0 within tolerance, 1 outside, 2 bad input."""
        from rich.console import Console

        from ..comparison import compare_ranks_of, training_steps, write_outputs
        from ..fsutil import json_text
        from ..ingest.ranks import parse_ranks
        from ..report.ranks import compare_rank_lines
        from ..report.terminal import print_comparison, print_training_steps
        if "legacy_json" in ctx.meta:
            typer.echo(f"advisor: note: --json FILE is deprecated, use --json-out {ctx.meta['legacy_json']} "
                       "(--json alone prints the result on stdout)", err=True)
        try:
            if run and (target or golden):
                raise InputError(run, "give either --run or --target/--golden, not both")
            att, r, ranks_doc = compare_ranks_of(run, target, golden, tol, ranks=parse_ranks(rank), steps=step,
                                                 soc=chip.soc, ops_info=chip.ops_info, cann=chip.cann, mode=mode,
                                                 workers=workers, ray=ray)
            trained = training_steps(run, tol) if run else None     # a run with optimizer steps
            if html_out and trained is None:
                raise InputError(run or target, "--html draws training steps: give --run with a run directory that "
                                                "has train/steps.jsonl (a capture of a workload with an optimizer)")
            steps_doc = {"training_steps": trained[0].to_dict()} if trained is not None else {}
            console = Console(stderr=True) if as_json else None
            print_comparison(att, top, console)
            if trained is not None:
                print_training_steps(steps_doc["training_steps"], console)
            if ranks_doc:
                (console or Console()).print("\n".join(compare_rank_lines(ranks_doc["per_rank"], ranks_doc["cross_rank"],
                                                                          f" on Ray ({ray})" if ray else "")),
                                             highlight=False, markup=False)
            kept = write_outputs(att, r, csv_out=csv_out, json_out=json_out, xlsx_out=xlsx_out,
                                 msprobe_csv=msprobe_csv, steps=step, extra={**ranks_doc, **steps_doc})
            if html_out:
                from ..fsutil import atomic_write_text
                from ..report.html import render_training
                kept.append((html_out, atomic_write_text(html_out, render_training(steps_doc["training_steps"],
                                                                                   trained[1]), keep_existing=True)))
            for path, bak in kept:
                if bak:
                    typer.echo(f"kept the previous {path} as {bak}", err=True)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        if as_json:
            typer.echo(json_text({**att.to_dict(), **ranks_doc, **steps_doc}))
        steps_ok = steps_doc.get("training_steps", {}).get("ok", True)
        raise typer.Exit(0 if ranks_doc.get("ok", att.verdict.ok) and steps_ok else 1)
