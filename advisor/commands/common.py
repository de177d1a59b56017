"""Options and helpers shared by the command modules."""
from __future__ import annotations

import io
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Iterator, Optional

import typer

from ..progress import QUIET, verbosity

KeepDtypeOption = typer.Option(None, "--keep-dtype", help="ATC --keep_dtype file: lines OpName or OpType::TypeName "
                                                          "whose ops keep the original model's precision.")
CustomizeDtypesOption = typer.Option(None, "--customize-dtypes", help="ATC --customize_dtypes file: lines "
                                     "OpName::InputDtype:...,OutputDtype:... or OpType::Type:InputDtype:...")


def overrides_of(keep_dtype: Optional[str], customize_dtypes: Optional[str]):
    """The Overrides of a command's --keep-dtype / --customize-dtypes (None when neither is given)."""
    if not keep_dtype and not customize_dtypes:
        return None
    from ..overrides import load
    return load(keep_dtype, customize_dtypes)


def default_out(profile: str):
    """recommend's and diff's default ``--out``: ``<profile>/advice``, beside the file when ``--profile`` names a
    file (a bare kernel_details.csv)."""
    from pathlib import Path
    p = Path(profile)
    return (p.parent if p.is_file() else p) / "advice"


WorkersOption = typer.Option(None, "--workers", help="Local worker processes analysing ranks in parallel (default: the cores).")
RayOption = typer.Option(None, "--ray", help="Run the per-rank tasks on Ray: local (start one here), auto (the running "
                                             "cluster) or the cluster's address; needs advisor[cluster].")


@contextmanager
def human_report(as_json: bool) -> Iterator[None]:
    """Where a command's human-readable report goes: stdout; with ``--json`` (stdout carries only the
    JSON) stderr instead, and nowhere with ``--quiet``."""
    if not as_json:
        yield
        return
    with redirect_stdout(io.StringIO() if verbosity() == QUIET else sys.stderr):
        yield
