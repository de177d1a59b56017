"""Stage progress for long runs (10^6-row profiles take tens of seconds): one line per stage on
stderr with the time the previous stage took.  Shown when stderr is a terminal, or always with
``ADVISOR_PROGRESS=1`` (``0`` silences it); library functions take a ``progress`` callable and
stay silent without one."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

Progress = Optional[Callable[[str], None]]


class StageLog:
    """``log("building op graph")`` prints ``advisor: building op graph ...``; ``log.done()`` closes
    the last stage with its duration."""

    def __init__(self, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        if enabled is None:
            env = os.environ.get("ADVISOR_PROGRESS", "")
            enabled = env == "1" or (env != "0" and _isatty(self.stream))
        self.enabled = enabled
        self._t0: float | None = None
        self._msg = ""

    def __call__(self, msg: str) -> None:
        if not self.enabled:
            return
        self.done()
        self._msg, self._t0 = msg, time.perf_counter()
        self.stream.write(f"advisor: {msg} ...\n")
        self.stream.flush()

    def note(self, msg: str) -> None:
        """A one-off line (a result, not a stage): closes the running stage first."""
        if not self.enabled:
            return
        self.done()
        self.stream.write(f"advisor: {msg}\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._t0 is not None:
            dt = time.perf_counter() - self._t0
            if dt >= 0.5:
                self.stream.write(f"advisor:   {self._msg}: {dt:.1f} s\n")
                self.stream.flush()
            self._t0 = None


def _isatty(s) -> bool:
    try:
        return bool(s.isatty())
    except (AttributeError, ValueError):
        return False
