"""advisor lint MIXLIST... : exit 0 clean, 1 findings, 2 unreadable."""
from __future__ import annotations

import json
from typing import List, Optional

import typer

from ..errors import InputError
from ..lint import SEVERITY_ORDER, lint_file
from .common import OpsInfoOption, SocOption, chip_lists, human_report


def register(app: typer.Typer) -> None:
    @app.command("lint")
    def lint(mixlists: List[str] = typer.Argument(..., help="modify_mixlist JSON files"),
             soc: str = SocOption, ops_info: Optional[str] = OpsInfoOption,
             as_json: bool = typer.Option(False, "--json", help="Print findings as JSON.")) -> None:
        """Check mixlist files: JSON errors, unknown op types (with did-you-mean), edits that change nothing, conflicts."""
        lists = chip_lists(soc, ops_info)
        results, unreadable = {}, []
        for path in mixlists:
            try:
                results[path] = sorted(lint_file(path, lists), key=lambda f: (SEVERITY_ORDER[f.severity], f.line or 0))
            except InputError as e:
                unreadable.append(str(e))
        if as_json:
            typer.echo(json.dumps({"soc": lists.soc, "files": {p: [f.to_dict() for f in fs] for p, fs in results.items()},
                                   "unreadable": unreadable}, indent=2, ensure_ascii=False))
        with human_report(as_json):
            for p, fs in results.items():
                for f in fs:
                    typer.echo(str(f))
                if not fs:
                    typer.echo(f"{p}: ok")
        for u in unreadable:
            typer.echo(f"advisor: error: {u}", err=True)
        if unreadable:
            raise typer.Exit(2)
        raise typer.Exit(1 if any(results.values()) else 0)
