"""The tune journal: ``DIR/tune_state.json``, the loop's whole state as dataclasses.

Rewritten atomically after every step (``run``, ``judge``, ``decide`` of each iteration) as strict JSON
(non-finite numbers are ``null``: docs/formats.md); ``read_journal`` checks everything in a journal read back
from disk before the loop uses any of it (a user's file: never trusted) — every field of the type the loop
needs, iteration indexes and folders ``iter_NN``, steps done in order, edits equal to the mixlist — and older
journals' NaN / Infinity are read as null.  Folders named in it are confined to ``--out`` by the loop.
"""
from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import InputError
from ..fsutil import atomic_write_json, read_user_json
from ..mixlist import Mixlist, parse_obj
from ..recommend.edits import (CUSTOM_ACTION, CUSTOM_LIST, KEEP_ACTION, KEEP_LIST, customize_line_edit,
                               customize_lines, edits_from_json, edits_of, edits_to_json, keep_lines, list_edits,
                               mixlist_of)

STATE_FILE = "tune_state.json"
STATE_VERSION = 1
STATUSES = ("running", "confirmed", "exhausted")
STEPS = ("run", "judge", "decide")
RUN_STATUSES = ("ok", "failed", "timeout", "no-output")


@dataclass
class Iteration:
    """One list the loop runs: why, what it predicted, what the run measured, what came next."""

    index: int
    edits: frozenset
    mixlist: dict                          # the modify_mixlist (relative to the chip defaults)
    reason: str
    predicted: dict = field(default_factory=dict)
    parent: int | None = None
    done: list = field(default_factory=list)
    result: dict | None = None             # runners.RunResult.to_dict()
    runs_after: int | None = None
    verdict: dict | None = None            # {"ok", "calibration", "holdout", "reasons"}
    measured: dict | None = None           # {"rel_l2", "cosine", "finite", "steps", "holdout_steps", ...}
    low_precision_time_share: float | None = None
    notes: list = field(default_factory=list)
    proposals: list = field(default_factory=list)
    next: dict | None = None
    next_skipped: dict | None = None
    miss: dict | None = None               # the prediction that the measurement contradicted
    loss_scale: float | None = None        # the static loss scale the run used (None: the workload's own)
    dump_tensors: list = field(default_factory=list)   # ops whose tensors the run dumps beside the statistics
    policy: dict | None = None             # a torch_npu tune's candidate: the precision_policy.json it runs (the
                                           # edits and the mixlist are then empty)

    @property
    def dir(self) -> str:
        return f"iter_{self.index:02d}"

    @property
    def keeps(self) -> tuple[str, ...]:
        """The keep_dtype lines this iteration adds (per-op advice)."""
        return keep_lines(self.edits)

    @property
    def customize(self) -> tuple[str, ...]:
        """The customize_dtypes lines this iteration adds (per-op advice: fp16 inputs, fp32 output)."""
        return customize_lines(self.edits)

    def as_mixlist(self) -> Mixlist | None:
        """The list this iteration runs (None: the chip defaults)."""
        m = parse_obj(self.mixlist) if self.mixlist else None
        return None if m is None or m.is_empty() else m

    @property
    def ok(self) -> bool:
        return bool((self.verdict or {}).get("ok"))

    def to_dict(self) -> dict:
        d = {"index": self.index, "dir": self.dir, "edits": edits_to_json(self.edits), "mixlist": self.mixlist,
             "reason": self.reason, "predicted": self.predicted, "parent": self.parent, "done": list(self.done)}
        for k in ("result", "runs_after", "verdict", "measured", "low_precision_time_share", "next", "next_skipped",
                  "miss", "loss_scale", "policy"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if "judge" in self.done:
            d.setdefault("measured", None)
            d.setdefault("low_precision_time_share", None)
        for k in ("notes", "proposals", "dump_tensors"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        return d


@dataclass
class TuneState:
    """The loop's state (the journal's content)."""

    identity: dict
    iterations: list = field(default_factory=list)
    status: str = "running"
    runs: int = 0
    executions: int = 0
    captures: int = 0
    reference: dict | None = None
    holdout_steps: list | None = None
    holdout_consumed: bool = False
    widen: bool = False                    # a replayed prediction was wrong: recommend widens its candidates
    excluded: list = field(default_factory=list)
    misses: list = field(default_factory=list)
    events: list = field(default_factory=list)
    stop_reason: str = ""
    started: float = field(default_factory=time.time)
    updated: float | None = None
    version: int = STATE_VERSION

    def to_dict(self) -> dict:
        return {"version": self.version, "identity": self.identity, "status": self.status, "runs": self.runs,
                "executions": self.executions, "captures": self.captures, "reference": self.reference,
                "holdout_steps": self.holdout_steps, "holdout_consumed": self.holdout_consumed, "widen": self.widen,
                "iterations": [it.to_dict() for it in self.iterations], "excluded": self.excluded,
                "misses": self.misses, "events": self.events, "stop_reason": self.stop_reason,
                "started": self.started, "updated": self.updated}

    def new_iteration(self, edits: frozenset, reason: str, predicted: dict | None, parent: int | None = None,
                      loss_scale: float | None = None, dump_tensors: Sequence[str] = (),
                      policy: dict | None = None) -> Iteration:
        """Schedule the list of ``edits`` (relative to the chip defaults: list edits and keep lines), or -- a
        torch_npu tune -- the precision policy ``policy`` (``PrecisionPolicy.to_dict()``; no edits)."""
        it = Iteration(len(self.iterations), frozenset(edits), (mixlist_of(edits) or Mixlist()).to_dict(), reason,
                       predicted or {}, parent, loss_scale=loss_scale, dump_tensors=list(dump_tensors),
                       policy=policy)
        self.iterations.append(it)
        return it

    def event(self, step: str) -> None:
        self.events.append({"step": step, "pid": os.getpid(), "time": time.time()})

    # A list is tried, excluded or measured *at a loss scale*: the same list under another scale is another run.
    def tried(self, loss_scale: float | None = None) -> set:
        return {it.edits for it in self.iterations if it.loss_scale == loss_scale}

    def excluded_sets(self, loss_scale: float | None = None) -> list:
        return [edits_from_json(e["edits"]) for e in self.excluded if e.get("loss_scale") == loss_scale]

    def exclude(self, edits: frozenset, why: str, iteration: int | None, loss_scale: float | None = None) -> None:
        if edits and edits not in self.excluded_sets(loss_scale):
            self.excluded.append({"edits": edits_to_json(edits), "why": why, "iteration": iteration,
                                  **({"loss_scale": loss_scale} if loss_scale is not None else {})})

    def passing(self) -> list:
        return [it for it in self.iterations if it.ok]


def save_journal(path: Path, state: TuneState) -> None:
    state.updated = time.time()
    atomic_write_json(path, state.to_dict())


def read_journal(path: Path) -> TuneState:
    """The journal at ``path``, checked field by field (see the module docstring); one InputError otherwise."""
    return _Check(path).state(_nonfinite_to_null(read_user_json(path, "a tune journal (tune_state.json)")))


def _nonfinite_to_null(o: Any) -> Any:
    """Every non-finite number in a JSON-like structure as None, in place (older journals wrote NaN)."""
    keys = list(o) if isinstance(o, dict) else range(len(o)) if isinstance(o, list) else ()
    for k in keys:
        v = o[k]
        if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and not math.isfinite(v):
            o[k] = None
        elif isinstance(v, (dict, list)):
            _nonfinite_to_null(v)
    return o


# ---------------------------------------------------------------------- checks of a journal read from disk
def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _count(x) -> bool:
    return _int(x) and x >= 0


def _num(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _str(x) -> bool:
    return isinstance(x, str)


def _opt_str(x) -> bool:
    return x is None or isinstance(x, str)


def _bool(x) -> bool:
    return isinstance(x, bool)


def _dict(x) -> bool:
    return isinstance(x, dict)


def _opt_dict(x) -> bool:
    return x is None or isinstance(x, dict)


def _list_of(test: Callable) -> Callable:
    return lambda x: isinstance(x, list) and all(test(v) for v in x)


def _edit(x) -> bool:
    return (isinstance(x, list) and len(x) == 3 and all(isinstance(v, str) for v in x)
            and ((x[0] in ("black", "white", "gray") and x[1] in ("to-add", "to-remove"))
                 or (x[0] == KEEP_LIST and x[1] == KEEP_ACTION and bool(x[2].strip()) and "\n" not in x[2])
                 or (x[0] == CUSTOM_LIST and x[1] == CUSTOM_ACTION and _customize_line(x[2]))))


def _customize_line(line: str) -> bool:
    try:
        customize_line_edit(line)
    except ValueError:
        return False
    return True


class _Check:
    """Type checks of a journal read back from disk."""

    def __init__(self, path: Path):
        self.path = path

    def bad(self, where: str, problem: str) -> None:
        raise InputError(self.path, f"not a tune journal advisor can resume: {where} {problem}; start a new --out "
                                    "(or restore the file)")

    def get(self, d: dict, key: str, where: str, ok: Callable, what: str, optional: bool = False) -> Any:
        if key not in d:
            if optional:
                return None
            self.bad(f"{where}.{key}", "is missing")
        if not ok(d[key]):
            self.bad(f"{where}.{key}", f"must be {what}")
        return d[key]

    def result(self, d: Any, where: str) -> dict:
        if not isinstance(d, dict):
            self.bad(where, "must be an object")
        self.get(d, "status", where, lambda x: x in RUN_STATUSES, f"one of {', '.join(RUN_STATUSES)}")
        self.get(d, "message", where, _str, "a string")
        self.get(d, "has_reference", where, _bool, "true or false")
        self.get(d, "executions", where, _count, "a count")
        for k in ("run_dir", "stdout", "stderr"):
            self.get(d, k, where, _opt_str, "a string or null", optional=True)
        self.get(d, "returncode", where, lambda x: x is None or _int(x), "an integer or null", optional=True)
        self.get(d, "duration_s", where, _num, "a number", optional=True)
        self.get(d, "extra", where, _dict, "an object", optional=True)
        return d

    def verdict(self, d: Any, where: str, top: bool) -> dict:
        if not isinstance(d, dict):
            self.bad(where, "must be an object")
        self.get(d, "ok", where, _bool, "true or false")
        self.get(d, "reasons", where, _list_of(_str), "a list of strings", optional=not top)
        self.get(d, "worst", where, _opt_dict, "an object or null", optional=True)
        if top:
            for k in ("calibration", "holdout"):
                v = self.get(d, k, where, _opt_dict, "an object or null")
                if v is not None:
                    self.verdict(v, f"{where}.{k}", False)
        return d

    def iteration(self, it: Any, i: int, last: bool, running: bool) -> Iteration:
        w = f"iterations[{i}]"
        if not isinstance(it, dict):
            self.bad(w, "must be an object")
        self.get(it, "index", w, lambda x: x == i and _int(x), f"{i}")
        if it.get("dir") != f"iter_{i:02d}":
            self.bad(f"{w}.dir", f"is {it.get('dir')!r}, not the folder 'iter_{i:02d}' inside --out (a folder "
                                 "outside it is never used)")
        edits = self.get(it, "edits", w, _list_of(_edit), "a list of [list, action, op type] edits (or "
                         "[\"keep_dtype\", \"keep\", line], [\"customize_dtypes\", \"customize\", line])")
        ml = self.get(it, "mixlist", w, _dict, "a modify_mixlist object")
        try:
            m = parse_obj(ml, f"{w}.mixlist")
        except InputError as e:
            self.bad(f"{w}.mixlist", f"is not a valid modify_mixlist ({e.problem})")
        if edits_of(m) != list_edits(edits_from_json(edits)):
            self.bad(f"{w}.edits", "differ from its mixlist")
        reason = self.get(it, "reason", w, _str, "a string")
        pred = self.get(it, "predicted", w, _dict, "an object")
        if not all(_num(v) or isinstance(v, bool) or (k == "how" and _opt_str(v)) for k, v in pred.items()):
            self.bad(f"{w}.predicted", "must hold numbers, true/false and how they were obtained")
        parent = self.get(it, "parent", w, lambda x: x is None or (_int(x) and 0 <= x < i), "null or an earlier index")
        done = self.get(it, "done", w, lambda x: isinstance(x, list) and x == list(STEPS[:len(x)]),
                        "'run', 'judge', 'decide' in that order")
        if (not last or not running) and len(done) < 3:
            self.bad(f"{w}.done", "must be complete for a finished iteration")
        out = Iteration(i, edits_from_json(edits), ml, reason, pred, parent, list(done))
        if "run" in done:
            out.result = self.result(self.get(it, "result", w, _dict, "an object"), f"{w}.result")
            out.runs_after = self.get(it, "runs_after", w, _count, "a count", optional=True)
        if "judge" in done:
            out.verdict = self.verdict(self.get(it, "verdict", w, _dict, "an object"), f"{w}.verdict", True)
            m = self.get(it, "measured", w, _opt_dict, "an object or null")
            if m is not None:
                for k in ("rel_l2", "cosine"):
                    self.get(m, k, f"{w}.measured", _num, "a number or null")
                self.get(m, "finite", f"{w}.measured", _bool, "true or false")
                for k in ("holdout_steps", "calibration_steps"):
                    self.get(m, k, f"{w}.measured", _list_of(_int), "a list of steps")
            out.measured = m
            out.low_precision_time_share = self.get(it, "low_precision_time_share", w, _num, "a number or null",
                                                    optional=True)
            out.notes = self.get(it, "notes", w, _list_of(_str), "a list of strings", optional=True) or []
        props = self.get(it, "proposals", w, _list_of(_dict), "a list of objects", optional=True) or []
        for j, pr in enumerate(props):
            self.get(pr, "log", f"{w}.proposals[{j}]", _list_of(_dict), "a list of objects")
        out.proposals = props
        out.next = self.get(it, "next", w, _dict, "an object", optional=True)
        out.next_skipped = self.get(it, "next_skipped", w, _dict, "an object", optional=True)
        out.miss = self.get(it, "miss", w, _dict, "an object", optional=True)
        out.loss_scale = self.get(it, "loss_scale", w, lambda x: _num(x) and x is not None and 0 < x < math.inf,
                                  "a number > 0", optional=True)
        out.dump_tensors = self.get(it, "dump_tensors", w, _list_of(_str), "a list of op names", optional=True) or []
        out.policy = self.policy(self.get(it, "policy", w, _dict, "a precision_policy.json object", optional=True),
                                 f"{w}.policy", bool(out.edits))
        return out

    def policy(self, pol: dict | None, where: str, has_edits: bool) -> dict | None:
        """A torch_npu iteration's precision policy, parsed as ``read_policy`` parses the file (and no list edits
        beside it)."""
        if pol is None:
            return None
        if has_edits:
            self.bad(where, "comes with list edits (a torch_npu iteration runs a precision policy only)")
        from ..precision_policy import PrecisionPolicy
        try:
            return PrecisionPolicy.from_dict(pol, where).to_dict()
        except InputError as e:
            self.bad(where, f"is not a valid precision policy ({e.problem})")

    def state(self, st: Any) -> TuneState:
        if not isinstance(st, dict):
            self.bad("the file", f"must hold a JSON object, not {type(st).__name__}")
        if st.get("version") != STATE_VERSION:
            self.bad("version", f"{st.get('version')!r} is not {STATE_VERSION}")
        g = self.get
        out = TuneState(g(st, "identity", "journal", _dict, "an object"))
        out.status = g(st, "status", "journal", lambda x: x in STATUSES, f"one of {', '.join(STATUSES)}")
        out.runs, out.executions, out.captures = (g(st, k, "journal", _count, "a count")
                                                  for k in ("runs", "executions", "captures"))
        out.holdout_steps = g(st, "holdout_steps", "journal", lambda x: x is None or _list_of(_int)(x),
                              "null or a list of steps")
        out.holdout_consumed = bool(g(st, "holdout_consumed", "journal", _bool, "true or false", optional=True))
        out.widen = bool(g(st, "widen", "journal", _bool, "true or false", optional=True))
        out.stop_reason = g(st, "stop_reason", "journal", _str, "a string", optional=True) or ""
        out.started = g(st, "started", "journal", _num, "a number", optional=True) or time.time()
        its = g(st, "iterations", "journal", lambda x: isinstance(x, list) and len(x) > 0, "a non-empty list")
        # the iterations of the batch in flight (--parallel: several) are the journal's last ones
        def complete(it: Any) -> bool:
            return isinstance(it, dict) and it.get("done") == list(STEPS)
        tail = len(its)
        while tail > 0 and not complete(its[tail - 1]):
            tail -= 1
        out.iterations = [self.iteration(it, i, i >= tail, out.status == "running") for i, it in enumerate(its)]
        ref = g(st, "reference", "journal", _opt_dict, "an object or null")
        if ref is not None:
            kind = g(ref, "kind", "reference", lambda x: x in ("embedded", "separate"), "embedded or separate")
            if kind == "embedded":
                g(ref, "iteration", "reference", lambda x: _int(x) and 0 <= x < len(its), "an iteration")
            else:
                g(ref, "dir", "reference", lambda x: x == "reference/run", "'reference/run'")
                self.result(ref.get("result"), "reference.result")
        out.reference = ref
        out.excluded = g(st, "excluded", "journal", _list_of(_dict), "a list of objects")
        for j, ex in enumerate(out.excluded):
            g(ex, "edits", f"excluded[{j}]", _list_of(_edit), "a list of edits")
            g(ex, "why", f"excluded[{j}]", _str, "a string")
            g(ex, "iteration", f"excluded[{j}]", lambda x: x is None or _int(x), "an index or null")
            g(ex, "loss_scale", f"excluded[{j}]", lambda x: _num(x) and x is not None and 0 < x < math.inf,
              "a number > 0", optional=True)
        out.misses = g(st, "misses", "journal", _list_of(_dict), "a list of objects", optional=True) or []
        out.events = g(st, "events", "journal", _list_of(_dict), "a list of objects")
        for j, ev in enumerate(out.events):
            g(ev, "step", f"events[{j}]", _str, "a string")
        return out


def journal_identity(out: Path) -> dict | None:
    """The identity recorded in ``out``'s journal (what ``--resume`` must match), None when there is none or it is
    unreadable (``read_journal`` then says why, with the whole check)."""
    path = Path(out) / STATE_FILE
    if not path.is_file():
        return None
    try:
        d = read_user_json(path, "a tune journal (tune_state.json)")
    except InputError:
        return None
    ident = d.get("identity") if isinstance(d, dict) else None
    return ident if isinstance(ident, dict) else None


__all__ = ["STATE_FILE", "STATE_VERSION", "Iteration", "TuneState", "read_journal", "save_journal",
           "journal_identity"]
