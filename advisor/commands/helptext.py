"""The command classes of the ``advisor`` CLI: help texts are plain text everywhere (no rich markup eaten, no value
placeholder after a flag)."""
from __future__ import annotations

from typer.core import TyperCommand, TyperGroup


def tidy_help(cmd) -> None:
    """Help texts are plain text: escape rich markup in them (``advisor[cluster]`` must not lose ``[cluster]``
    as a style tag), and show no value placeholder after a flag (``--json``, not ``--json <bool>``)."""
    from rich.markup import escape
    for attr in ("help", "short_help"):
        if getattr(cmd, attr, None):
            setattr(cmd, attr, escape(_paragraphs(getattr(cmd, attr))))
    for p in cmd.params:
        tidy_param(p)


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs, each on one line (rich keeps a docstring's line breaks; the terminal wraps)."""
    import inspect
    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(text).split("\n\n"))


def tidy_param(p) -> None:
    from rich.markup import escape
    if getattr(p, "help", None):
        p.help = escape(p.help)
    if getattr(p, "is_flag", False) and p.metavar is None:
        p.metavar = ""


class TidyHelp:
    """Help texts tidied once (``tidy_help``), and ``--help`` shown without a metavar: mixed into every command."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        tidy_help(self)

    def get_help_option(self, ctx):
        opt = super().get_help_option(ctx)
        if opt is not None:
            opt.metavar = ""
        return opt


class AdvisorCommand(TidyHelp, TyperCommand):
    """Every command's class (``_register_all``)."""


class AdvisorGroup(TidyHelp, TyperGroup):
    """The root command: its own options and help tidied like every command's."""
