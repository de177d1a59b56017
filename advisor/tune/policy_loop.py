"""tune on a torch_npu workload: run a precision policy -> judge it on the calibration and the held-out batches ->
ask recommend's policy search (``recommend.policy_search``) for the next policy -> run it, until a policy passes
both or the budget is spent.  Every candidate is a real capture with ``--policy`` (the emulator runner's
``engine`` settings: the capture applies the policy as ``advisor capture --policy`` does), so what tune confirms is
the precision_policy.json the user applies with ``advisor.npu.apply_policy``.

Output (``--out``): ``iter_NN/`` (``precision_policy_used.json``, ``run/``, ``advice/``), ``summary.json`` and, once
confirmed, ``precision_policy.json`` + ``apply_policy.py`` (recommend's writers).  Runs are counted as tune counts
them: one per capture.  No journal: ``--resume`` is refused for torch_npu.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fsutil import atomic_write_json, atomic_write_text, json_text
from ..precision_policy import DTYPE_NAMES, PolicyRules, PrecisionPolicy
from ..recommend.policy_edits import POLICY_NAME, SNIPPET_NAME, apply_snippet, write_policy_outputs
from ..runners.base import OK

SUMMARY_SCHEMA = "advisor.tune_policy/1"


def _mode(policy: PrecisionPolicy, mode: str) -> str:
    """The capture's --mode for a policy: its autocast dtype (a recommended dtype change runs as advised)."""
    if policy.amp == "autocast" and mode in ("mixed_float16", "mixed_bfloat16"):
        return "mixed_bfloat16" if policy.dtype == "bf16" else "mixed_float16"
    return mode


def _split(steps: list[int], holdout: int | None) -> tuple[list[int], list[int]]:
    h = (1 if len(steps) >= 2 else 0) if holdout is None else holdout
    if h >= len(steps) and h:
        raise InputError("--holdout", f"{h} held-out batches leave none of the {len(steps)} for calibration")
    return (steps[:-h], steps[-h:]) if h else (steps, [])


def _verdict_row(tol: Any, a: Any, steps: list[int]) -> dict | None:
    if not steps:
        return None
    v = tol.judge(a.final_metrics(steps))
    w = v.worst or {}
    return {"ok": bool(v.ok), "steps": steps, "final_rel_l2": w.get("rel_l2"), "final_nonfinite":
            w.get("finite") is False, "reasons": list(v.reasons)[:4], "how": "measured"}


def tune_policy(runner: Any, out: str | Path, *, amp: str, mode: str, soc: str | None, start: PrecisionPolicy | None,
                max_runs: int = 6, holdout: int | None = None, tolerance: Any = None, max_edits: int = 3,
                progress: Any = None) -> dict:
    """The torch_npu tune (module docstring); returns summary.json's content."""
    from ..analysis import analyze
    from ..compare.tolerance import Tolerance
    from ..recommend.policy_search import recommend_policy
    tol = tolerance if tolerance is not None else Tolerance()
    say = progress or (lambda msg: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    low = "bf16" if mode == "mixed_bfloat16" else "fp16"
    cur = start if start is not None else PrecisionPolicy(amp=amp, dtype=low if amp == "autocast" else "fp16",
                                                          rules=PolicyRules())
    history: list[dict] = []
    seen = {json_text(cur.to_dict())}
    confirmed = None
    while len(history) < max_runs:
        it = out / f"iter_{len(history):02d}"
        it.mkdir(parents=True, exist_ok=True)
        used = it / "precision_policy_used.json"
        atomic_write_json(used, cur.to_dict())
        say(f"{it.name}: capturing with {', '.join(cur.lines()) or 'the policy unchanged'}")
        res = runner.run(None, _mode(cur, mode), it / "run",
                         engine={"engine": "torch_npu", "amp": amp, "policy": str(used)})
        dtype = [f"autocast {DTYPE_NAMES[cur.dtype]}"] if amp == "autocast" and cur.dtype != low else []
        row: dict = {"iteration": it.name, "policy": cur.to_dict(), "rules": dtype + cur.lines(), "status": res.status}
        history.append(row)
        if res.status != OK:
            row["message"] = res.message
            break
        a = analyze(it / "run", tolerance=tol, soc=soc)
        calib, held = _split(a.steps, holdout)
        row["calibration"], row["held_out"] = _verdict_row(tol, a, calib), _verdict_row(tol, a, held)
        row["ok"] = row["calibration"]["ok"] and (row["held_out"] is None or row["held_out"]["ok"])
        if row["ok"]:
            confirmed = row
            break
        say(f"{it.name}: searching the next policy (replay)")
        rec = recommend_policy(a, tol, max_edits=max_edits, out_dir=it / "advice",
                               steps=calib if not row["calibration"]["ok"] else None)
        write_policy_outputs(rec, it / "advice")
        nxt = PrecisionPolicy.from_dict(rec.precision_policy.policy, str(it / "advice" / POLICY_NAME))
        key = json_text(nxt.to_dict())
        row["proposed"] = {"status": rec.status, "edits": [e.edit for e in rec.precision_policy.edits],
                           "predicted": {"ok": rec.predicted.recommended_meets_tolerance,
                                         "how": rec.predicted.how}}
        if not rec.ok or key in seen:
            row["stopped"] = "no new policy within tolerance on replay" if not rec.ok else \
                "the search proposes a policy already run"
            break
        seen.add(key)
        cur = nxt
    summary = {"schema": SUMMARY_SCHEMA, "engine": "torch_npu", "amp": amp, "confirmed": confirmed is not None,
               "runs": len(history), "max_runs": max_runs, "history": history,
               "tolerance": tol.to_dict(), "policy": confirmed["policy"] if confirmed else None,
               "how": "measured (a fresh capture with the policy, calibration and held-out batches)"}
    if confirmed is not None:
        pol = PrecisionPolicy.from_dict(confirmed["policy"])
        atomic_write_json(out / POLICY_NAME, pol.to_dict(), keep_existing=True)
        atomic_write_text(out / SNIPPET_NAME, apply_snippet(pol, str((out / POLICY_NAME).resolve())),
                          keep_existing=True)
        summary["files"] = {"policy": str(out / POLICY_NAME), "snippet": str(out / SNIPPET_NAME)}
    atomic_write_json(out / "summary.json", summary)
    return summary


__all__ = ["tune_policy", "SUMMARY_SCHEMA"]
