"""The ``advisor`` command line: thin.  Each command lives in ``advisor/commands/<name>.py`` and
exposes ``register(app)``; commands only assemble arguments and call the library."""
from __future__ import annotations

import importlib
import sys

import typer

from .errors import AdvisorError

COMMAND_MODULES = ("lint", "inspect", "capture", "compare", "recommend", "diff", "replay", "tune")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Recommend Ascend mixed-precision mixlist edits from evidence.")


@app.callback()
def _root() -> None:
    """advisor: which op types to move between the Ascend mixed-precision black, white and gray lists."""


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"advisor.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"advisor.commands.{name}":
                continue  # command not built yet
            raise
        mod.register(app)


_register_all()


def fail(err: AdvisorError) -> "typer.Exit":
    """Print one clear line to stderr and return the Exit to raise."""
    typer.echo(f"advisor: error: {err}", err=True)
    return typer.Exit(err.exit_code)


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as e:  # typer/click exit
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        return code
    except AdvisorError as e:
        typer.echo(f"advisor: error: {e}", err=True)
        return e.exit_code
    return 0


def entry() -> None:
    sys.exit(main())
