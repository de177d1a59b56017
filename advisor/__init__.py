"""advisor: evidence-based mixed-precision mixlist recommendations for Ascend NPUs."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "Workload"]


def __getattr__(name: str):
    # Workload lives with the emulator; imported lazily so `import advisor` stays light (no torch).
    if name == "Workload":
        from .workload import Workload

        return Workload
    raise AttributeError(name)
