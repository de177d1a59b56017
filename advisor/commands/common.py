"""Options and helpers shared by the command modules."""
from __future__ import annotations

import io
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Iterator, List, Optional

import typer

from ..oplists import DEFAULT_SOC, OpLists, load_lists
from ..progress import QUIET, verbosity

SocOption = typer.Option(DEFAULT_SOC, "--soc", help="Chip whose default lists apply (ascend910, ascend910b, ascend910_93, ascend310p).")
OpsInfoOption = typer.Option(None, "--ops-info", help="Real CANN aic-<soc>-ops-info*.json files to read the lists and "
                             "kernel dtypes from instead (repeatable: a CANN install splits them into legacy, nn, "
                             "math, cv, transformer; merged in the order given).")
CannOption = typer.Option(None, "--cann", help="Default tables' CANN version: 9.2 (CANN 9.2.0, the default) or 8.1 "
                          "(CANN 8.1.RC1). On a run directory the default is its run.json's, 8.1 when it records none.")
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


WorkersOption = typer.Option(None, "--workers", help="Local worker processes analysing ranks in parallel (default: the cores).")
RayOption = typer.Option(None, "--ray", help="Run the per-rank tasks on Ray: local (start one here), auto (the running "
                                             "cluster) or the cluster's address; needs advisor[cluster].")


def chip_lists(soc: str, ops_info: Optional[List[str]], cann: Optional[str] = None) -> OpLists:
    return load_lists(soc, ops_info, cann)


@contextmanager
def human_report(as_json: bool) -> Iterator[None]:
    """Where a command's human-readable report goes: stdout; with ``--json`` (stdout carries only the
    JSON) stderr instead, and nowhere with ``--quiet``."""
    if not as_json:
        yield
        return
    with redirect_stdout(io.StringIO() if verbosity() == QUIET else sys.stderr):
        yield


def tolerance(min_cosine: float = 0.999, max_rel_l2: float = 1e-2, allow_nonfinite: bool = False,
              max_loss_rel: float = 1e-2, min_grad_cosine: float = 0.99, msprobe_rule: bool = False):
    """The shared Tolerance from a command's options; a bad range is one line (exit 2)."""
    from ..compare.tolerance import tolerance_from_options
    from ..errors import InputError
    try:
        return tolerance_from_options(min_cosine, max_rel_l2, allow_nonfinite, max_loss_rel, min_grad_cosine,
                                      msprobe_rule)
    except ValueError as e:
        raise InputError(None, str(e)) from None
