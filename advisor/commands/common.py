"""Options and helpers shared by the command modules."""
from __future__ import annotations

import io
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Iterator, Optional

import typer

from ..oplists import DEFAULT_SOC, OpLists, load_lists
from ..progress import QUIET, verbosity

SocOption = typer.Option(DEFAULT_SOC, "--soc", help="Chip whose default lists apply (ascend910, ascend910b, ascend910_93, ascend310p).")
OpsInfoOption = typer.Option(None, "--ops-info", help="A real CANN aic-<soc>-ops-info.json to read the lists from instead.")


def chip_lists(soc: str, ops_info: Optional[str]) -> OpLists:
    return load_lists(soc, ops_info)


@contextmanager
def human_report(as_json: bool) -> Iterator[None]:
    """Where a command's human-readable report goes: stdout; with ``--json`` (stdout carries only the
    JSON) stderr instead, and nowhere with ``--quiet``."""
    if not as_json:
        yield
        return
    with redirect_stdout(io.StringIO() if verbosity() == QUIET else sys.stderr):
        yield
