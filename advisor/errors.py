"""Errors the CLI turns into one clear line and an exit code (2 = bad input)."""
from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with control characters escaped (a newline or NUL in a file name or a user's message
    shows as ``\\n``, ``\\x00``): an error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class AdvisorError(Exception):
    """Base class; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class InputError(AdvisorError):
    """Malformed or unreadable user input: one line naming the file and the problem; exit 2."""

    exit_code = 2

    def __init__(self, path: object, problem: str):
        self.path = str(path) if path is not None else ""
        self.problem = problem
        where, what = one_line(self.path), one_line(problem)
        super().__init__(f"{where}: {what}" if where else what)

    def __reduce__(self):  # rebuilt from (path, problem) when it crosses a process (advisor.tasks workers)
        return (type(self), (self.path, self.problem))


class MixlistError(InputError):
    """A mixlist GE would reject (bad JSON, wrong structure, conflicting edits)."""


class OutputError(InputError):
    """An output that cannot be written: a file where a folder belongs, a read-only folder, a FIFO or
    device under an output name, a full disk.  One line naming the path; exit 2 (a bad ``--out``)."""
