"""advisor lint MIXLIST... [--keep-dtype FILE] [--customize-dtypes FILE] [--profile DIR]: exit 0 clean, 1 findings,
2 unreadable."""
from __future__ import annotations

import json
from typing import List, Optional

import typer

from ..errors import InputError
from ..lint import SEVERITY_ORDER, lint_file, lint_overrides_file
from .common import human_report
from .options import CHIP_FIXED, Chip, uses


def register(app: typer.Typer) -> None:
    @app.command("lint")
    @uses(CHIP_FIXED)
    def lint(mixlists: Optional[List[str]] = typer.Argument(None, help="modify_mixlist JSON files"),
             keep_dtype: Optional[List[str]] = typer.Option(None, "--keep-dtype", help="ATC --keep_dtype files to "
                                                            "check (repeatable)"),
             customize_dtypes: Optional[List[str]] = typer.Option(None, "--customize-dtypes", help="ATC "
                                                                  "--customize_dtypes files to check (repeatable)"),
             profile: Optional[str] = typer.Option(None, "--profile", help="run directory whose op graph the "
                                                   "keep_dtype / customize_dtypes names must be in"),
             chip: Chip = None,
             as_json: bool = typer.Option(False, "--json", help="Print findings as JSON.")) -> None:
        """Check mixlist files (JSON errors, unknown op types with did-you-mean, edits that change nothing,
        conflicts) and ATC --keep_dtype / --customize_dtypes files (syntax GE rejects, unknown op types, op
        names not in the --profile run's graph with did-you-mean)."""
        from ..errors import AdvisorError
        if not (mixlists or keep_dtype or customize_dtypes):
            typer.echo("advisor: error: give MIXLIST files, --keep-dtype or --customize-dtypes files", err=True)
            raise typer.Exit(2)
        graph, notes = None, []
        try:
            lists = chip.lists()
            if profile:
                from ..ingest import load_run
                from ..oplists import table_note
                graph = load_run(profile).graph
                if graph is not None:
                    notes = [n for n in [table_note(lists, (a.get("type") for _, a in graph.nodes(data=True)))] if n]
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(2)
        results, unreadable = {}, []
        jobs = [(p, None) for p in mixlists or ()] + [(p, "keep_dtype") for p in keep_dtype or ()] \
            + [(p, "customize_dtypes") for p in customize_dtypes or ()]
        for path, kind in jobs:
            try:
                found = lint_file(path, lists) if kind is None else lint_overrides_file(path, kind, lists, graph)
                results[path] = sorted(found, key=lambda f: (SEVERITY_ORDER[f.severity], f.line or 0, f.column or 0))
            except InputError as e:
                unreadable.append(str(e))
        if as_json:
            text = json.dumps({"soc": lists.soc, "cann": lists.cann or None,
                               "files": {p: [f.to_dict() for f in fs] for p, fs in results.items()},
                               "unreadable": unreadable, "notes": notes}, indent=2, ensure_ascii=False)
            # a lone surrogate ("\ud800" in the file) cannot be written as UTF-8: keep it as its JSON escape
            typer.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"))
        with human_report(as_json):
            lines = [f"note: {n}" for n in notes]
            for p, fs in results.items():
                lines.extend(map(str, fs))
                if not fs:
                    lines.append(f"{p}: ok")
            if lines:
                typer.echo("\n".join(lines))
        for u in unreadable:
            typer.echo(f"advisor: error: {u}", err=True)
        if unreadable:
            raise typer.Exit(2)
        raise typer.Exit(1 if any(results.values()) else 0)
