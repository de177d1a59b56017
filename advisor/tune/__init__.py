"""``advisor tune``: propose -> re-run with the list -> confirm, repeated until the tolerance holds on the
calibration *and* the held-out batches, with a journal so nothing is lost if it is interrupted.

Loop (docs/tune.md)::

    iter_00: run the starting lists           -> judge (calibration + held-out steps)
             recommend on the measured run    -> proposal P1 (replayed on the FP32 run; screened by the surrogate)
    iter_01: run P1                           -> judge; pass -> trim (learned, then measured); else
             exclude P1, recommend again on the new measurements, never a list already run ...
    stop when a passing list has nothing left to try, or the run budget is spent.

Layout: ``journal`` (the state as dataclasses, strict JSON, checked on resume), ``policy`` (what runs next:
proposals, misses, trimming, performance edits), ``stages`` (the only door to analysis, compare and
recommend; tests substitute a fake), ``surrogate`` (what the measured runs teach), ``loop`` (the steps, run
counting, summary), ``policy_loop`` (torch_npu: the same loop with precision policies for candidates).  Edits are recommend's ``Edit`` (journalled as ``[list, action, type]``).  The report is
``advisor.report.tune``.
"""
from __future__ import annotations

from ..recommend.edits import Edit, edits_from_json, edits_of, edits_summary, edits_to_json, mixlist_of
from .journal import STATE_FILE, STATE_VERSION, Iteration, TuneState, read_journal
from .loop import TuneConfig, Tuner, tune
from .policy import MAX_SCREEN, Candidate, Policy
from .stages import Stages
from .surrogate import Surrogate

__all__ = ["tune", "Tuner", "TuneConfig", "Stages", "Surrogate", "Policy", "Candidate", "STATE_FILE",
           "STATE_VERSION", "Iteration", "TuneState", "read_journal", "Edit", "edits_of", "mixlist_of",
           "edits_to_json", "edits_from_json", "edits_summary", "MAX_SCREEN"]
