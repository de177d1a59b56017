"""Options and helpers shared by the command modules."""
from __future__ import annotations

from typing import Optional

import typer

from ..oplists import DEFAULT_SOC, OpLists, load_lists

SocOption = typer.Option(DEFAULT_SOC, "--soc", help="Chip whose default lists apply (ascend910, ascend910b, ascend910_93, ascend310p).")
OpsInfoOption = typer.Option(None, "--ops-info", help="A real CANN aic-<soc>-ops-info.json to read the lists from instead.")


def chip_lists(soc: str, ops_info: Optional[str]) -> OpLists:
    return load_lists(soc, ops_info)
