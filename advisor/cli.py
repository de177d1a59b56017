"""The ``advisor`` command line: thin.  Each command lives in ``advisor/commands/<name>.py`` and
exposes ``register(app)``; commands only assemble arguments and call the library."""
from __future__ import annotations

import importlib
import sys
import traceback

import typer

from . import __version__
from .commands.helptext import AdvisorCommand, AdvisorGroup
from .errors import AdvisorError
from .progress import NORMAL, QUIET, VERBOSE, set_verbosity, verbosity

COMMAND_MODULES = ("lint", "inspect", "capture", "compare", "recommend", "diff", "replay", "tune")


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=AdvisorGroup,
                  help="Recommend Ascend mixed-precision mixlist edits from evidence.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"advisor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors on stderr: no progress, no notes "
                                                                   "(overrides ADVISOR_PROGRESS)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Progress even when stderr is not a terminal, "
                                                                       "every stage's time, and details (overrides "
                                                                       "ADVISOR_PROGRESS).")) -> None:
    """advisor: which op types to move between the Ascend mixed-precision black, white and gray lists."""
    if quiet and verbose:
        raise typer.BadParameter("choose one of --quiet and --verbose", param_hint="--quiet/--verbose")
    set_verbosity(QUIET if quiet else VERBOSE if verbose else NORMAL)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"advisor.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"advisor.commands.{name}":
                continue  # command not built yet
            raise
        mod.register(app)
    for info in app.registered_commands:   # a command with a class of its own derives from AdvisorCommand
        if info.cls is None or not issubclass(info.cls, AdvisorCommand):
            info.cls = AdvisorCommand


_register_all()


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as e:  # typer/click exit
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        return code
    except AdvisorError as e:
        typer.echo(f"advisor: error: {e}", err=True)
        return e.exit_code
    except OSError as e:  # the system refused a file operation no reader or writer turned into one line
        if verbosity() == VERBOSE:
            traceback.print_exc()
        where = f"{e.filename}: " if e.filename else ""
        typer.echo(f"advisor: error: {where}{e.strerror or e}", err=True)
        return 2
    finally:
        set_verbosity(NORMAL)
    return 0


def entry() -> None:
    sys.exit(main())
