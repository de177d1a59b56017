"""advisor compare: FP16/BF16 run vs FP32 run — worst ops, first op over tolerance, culprit types.
Exit 0 within tolerance, 1 outside, 2 bad input."""
from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperCommand

from ..compare.cli_options import (AllowNonfiniteOption, MaxLossRelOption, MaxRelL2Option, MinCosineOption,
                                   MinGradCosineOption, MsprobeRuleOption)
from ..errors import AdvisorError, InputError
from .common import RayOption, WorkersOption, tolerance

class _CompareCommand(TyperCommand):
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
        top: int = typer.Option(15, "--top", help="rows of the worst-ops table"),
        step: Optional[List[int]] = typer.Option(None, "--step", help="only these steps (repeatable)"),
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode for the plan (default: run.json's)"),
        soc: Optional[str] = typer.Option(None, "--soc", help="chip whose default lists apply (default: run.json's, else ascend910b)"),
        ops_info: Optional[str] = typer.Option(None, "--ops-info", help="a real CANN aic-<soc>-ops-info.json to read the lists from"),
        min_cosine: float = MinCosineOption,
        max_rel_l2: float = MaxRelL2Option,
        allow_nonfinite: bool = AllowNonfiniteOption,
        max_loss_rel: float = MaxLossRelOption,
        min_grad_cosine: float = MinGradCosineOption,
        msprobe_rule: bool = MsprobeRuleOption,
        rank: Optional[List[str]] = typer.Option(None, "--rank", help="only these ranks (repeatable; 3, 0,4,8 or 0-63; "
                                                 "default: every rank with both dumps)"),
        workers: Optional[int] = WorkersOption,
        ray: Optional[str] = RayOption,
    ) -> None:
        """Compare a low-precision run against FP32: per-op metrics, first op over tolerance, culprit op types.
        Exit 0 within tolerance, 1 outside, 2 bad input."""
        from rich.console import Console

        from ..cluster import attribute_rank, compare_jobs, other_ranks, rank_comparison, rank_run
        from ..compare.msprobe_table import msprobe_table, write_csv, write_xlsx
        from ..fsutil import atomic_write_json, atomic_write_text, json_text
        from ..ingest.ranks import parse_ranks
        from ..report.ranks import compare_rank_lines
        from ..report.terminal import print_comparison
        from ..tasks import check_workers
        if "legacy_json" in ctx.meta:
            typer.echo(f"advisor: note: --json FILE is deprecated, use --json-out {ctx.meta['legacy_json']} "
                       "(--json alone prints the result on stdout)", err=True)
        try:
            tol = tolerance(min_cosine, max_rel_l2, allow_nonfinite, max_loss_rel, min_grad_cosine, msprobe_rule)
            if run and (target or golden):
                raise InputError(run, "give either --run or --target/--golden, not both")
            if run and not Path(run).is_dir():
                raise InputError(run, "not a run directory")
            if not run and not (target and golden):
                raise InputError("", "give --run RUNDIR, or both --target DUMP and --golden DUMP")
            check_workers(workers, ray)
            # every rank (or --rank's): the lowest in full here, the others by independent tasks
            jobs = compare_jobs(run, target, golden, parse_ranks(rank), tolerance=tol, steps=step, soc=soc,
                                ops_info=ops_info, mode=mode)
            # with its op graph the run's plan says who decided each precision; without, the dumped dtypes
            r, src = rank_run(jobs[0])
            att = attribute_rank(jobs[0], r, src)
            ranks_doc = other_ranks(jobs, rank_comparison(att, r, jobs[0].rank), workers, ray)
            console = Console(stderr=True) if as_json else None
            print_comparison(att, top, console)
            if ranks_doc:
                (console or Console()).print("\n".join(compare_rank_lines(ranks_doc["per_rank"], ranks_doc["cross_rank"],
                                                                         f" on Ray ({ray})" if ray else "")),
                                             highlight=False, markup=False)
            kept = []
            if csv_out:
                buf = io.StringIO()
                att.ops.to_csv(buf, index=True, index_label="node")
                kept.append((csv_out, atomic_write_text(csv_out, buf.getvalue(), keep_existing=True)))
            if json_out:
                kept.append((json_out, atomic_write_json(json_out, {**att.to_dict(), **ranks_doc}, keep_existing=True)))
            if xlsx_out or msprobe_csv:
                table = msprobe_table(r.target_dump, r.golden_dump, sorted(set(step)) if step else None)
                if msprobe_csv:
                    kept.append((msprobe_csv, write_csv(table, msprobe_csv)))
                if xlsx_out:
                    kept.append((xlsx_out, write_xlsx(table, xlsx_out)))
            for path, bak in kept:
                if bak:
                    typer.echo(f"kept the previous {path} as {bak}", err=True)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        if as_json:
            typer.echo(json_text({**att.to_dict(), **ranks_doc}))
        raise typer.Exit(0 if ranks_doc.get("ok", att.verdict.ok) else 1)
