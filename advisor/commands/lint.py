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
                results[path] = sorted(lint_file(path, lists),
                                       key=lambda f: (SEVERITY_ORDER[f.severity], f.line or 0, f.column or 0))
            except InputError as e:
                unreadable.append(str(e))
        if as_json:
            text = json.dumps({"soc": lists.soc, "files": {p: [f.to_dict() for f in fs] for p, fs in results.items()},
                               "unreadable": unreadable}, indent=2, ensure_ascii=False)
            # a lone surrogate ("\ud800" in the file) cannot be written as UTF-8: keep it as its JSON escape
            typer.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"))
        with human_report(as_json):
            lines = []
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
