"""tune on a workload that trains over optimizer steps (``Workload(optimizer=...)``, GE engine, the emulator): the
run, the training advice (``recommend.training``: measured by re-running the steps on the calibration batches) and
its confirmation over the whole N steps on the held-out batches (docs/cli.md "advisor tune", "Training over steps").

The workload's last ``holdout`` batches (default 1 when it has at least 2, else 0) are held out: the first run and
every candidate re-run train on the other batches; the confirmation run trains the N steps from the same initial
weights on the held-out batches (cycled, batch ``s % K`` at step s: data the advice never saw; with no held-out batch
the calibration batches, said so).  Confirmed when, over the confirmation run's N steps:

* no departure from the FP32 run (``compare.steps.judge_steps``: no non-finite value, scale collapse, run of skipped
  steps, lasting loss difference or drifting weight -- no divergence),
* the final loss within the tolerance of FP32 (``tolerance.loss_rel_diff`` of the last step <= ``max_loss_rel``),
* the share of skipped steps at most ``max_skipped_share`` (``--max-skipped-share``, default ``MAX_SKIPPED_SHARE``;
  ``recommend.training.skipped_share``: the scaler's calibration skips before the first applied step are exempt, a
  run that applied no step has share 1).

Outputs in ``--out``: ``run/`` (the first run), ``advice/`` (recommend's outputs), ``confirm/`` (the confirmation
run), ``summary.json``, ``report.html`` (both loss curves, the scale, skipped steps and drift of the confirmation
run) and, confirmed, the list files (``modify_mixlist.json``) and ``training_settings.py`` (the settings as code).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from ..compare.steps import judge_steps, steps_summary
from ..compare.tolerance import Tolerance, loss_rel_diff
from ..errors import InputError
from ..fsutil import atomic_write_json, atomic_write_text
from ..ingest.steps import read_steps

from ..recommend.training import MAX_SKIPPED_SHARE, skipped_share


def tune_training(target: str, out: str | Path, *, mode: str = "mixed_float16", soc: str | None = None,
                  cann: str | None = None, tolerance: Tolerance | None = None, holdout: int | None = None,
                  max_skipped_share: float = MAX_SKIPPED_SHARE, seed: int = 0, progress: Any = None,
                  max_reruns: int | None = None, **numerics: Any) -> dict:
    """The training tune of ``target`` into ``out`` (module docstring); returns summary.json's document."""
    from ..emulator import capture
    from ..recommend import write_outputs
    from ..recommend import recommend_steps
    from ..recommend.training import MAX_RERUNS
    from ..workload import load_target
    tol = tolerance or Tolerance()
    say = progress or (lambda msg: None)
    if not 0 <= max_skipped_share <= 1:
        raise InputError("--max-skipped-share", f"must be between 0 and 1, not {max_skipped_share!r}")
    out = Path(out)
    if out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
        raise InputError(out, "exists and is not empty; tune writes a fresh directory")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    wl = load_target(target)
    n_b = len(wl.batches)
    k = (1 if n_b >= 2 else 0) if holdout is None else holdout
    if not 0 <= k <= n_b - 1:
        raise InputError("--holdout", f"{k} held-out batches, but the workload has {n_b} batches and needs one to "
                                      f"train the advice on: at most {n_b - 1}")
    calib, held = wl.batches[:n_b - k], wl.batches[n_b - k:] if k else []
    n = wl.steps or n_b
    kw = dict(mode=mode, soc=soc or "ascend910b", cann=cann, seed=seed, local=False,
              **{a: b for a, b in numerics.items() if b is not None})
    say(f"run: {n} training steps on {len(calib)} calibration batches ({k} held out)")
    wl.batches, wl.steps = list(calib), n
    run = capture(wl, out / "run", **kw)
    first = judge_steps(read_steps(run), tol)
    say(f"run: {first.sentence()}")
    rec = recommend_steps(run, tol, workload=lambda: load_target(target), batches=list(calib), progress=say,
                          max_reruns=max_reruns or MAX_RERUNS, max_skipped_share=max_skipped_share)
    write_outputs(rec, out / "advice")
    doc: dict[str, Any] = {"target": target, "kind": "training", "steps": n, "batches": n_b,
                           "calibration_batches": len(calib), "holdout_batches": k, "mode": mode,
                           "soc": kw["soc"], "first_run": first.to_dict(), "recommendation": rec.status,
                           "chosen": rec.training.chosen if rec.training else [],
                           "settings": rec.training.settings if rec.training else {},
                           "reruns": rec.training.reruns if rec.training else 0,
                           "max_skipped_share": max_skipped_share, "confirmed": False}
    if rec.status == "no-solution" or (rec.training and not rec.training.precision):
        doc["reason"] = "; ".join(rec.notes) or rec.status
        return _finish(out, doc, t0, None)
    s = rec.training.settings if rec.status == "recommended" else {}
    cw = load_target(target)
    cw.batches, cw.steps = list(held or calib), n
    if s:
        cw.scaler, cw.scaler_options, cw.clip_grad_norm = s["scaler"], dict(s["scaler_options"]), s["clip_grad_norm"]
    ckw = {**kw, "mode": s.get("mode", mode)}
    if rec.status == "recommended" and not rec.modify_mixlist.is_empty():
        ckw["mixlist"] = rec.modify_mixlist
    say(f"confirming over {n} steps on the {'held-out' if held else 'calibration (no held-out batch)'} batches")
    conf = capture(cw, out / "confirm", **ckw)
    log = read_steps(conf)
    v = judge_steps(log, tol)
    st = log.steps
    skipped = skipped_share(st)
    last = loss_rel_diff(float(st["loss_mixed"].iloc[-1]), float(st["loss_fp32"].iloc[-1])) if len(st) else math.nan
    checks = {"no_departure": v.departure is None,
              "final_loss_within_tolerance": bool(math.isfinite(last) and last <= tol.max_loss_rel),
              "skipped_share_within_bound": skipped <= max_skipped_share}
    doc["confirmation"] = {"on": "held-out batches" if held else "calibration batches (no held-out batch)",
                           "verdict": v.to_dict(), "final_loss_rel_diff": last if math.isfinite(last) else None,
                           "skipped_share": skipped, "checks": checks, "how": "measured (re-ran the N steps)"}
    doc["confirmed"] = all(checks.values())
    if not doc["confirmed"]:
        doc["reason"] = "confirmation failed: " + ", ".join(k for k, ok in checks.items() if not ok)
    elif rec.status == "recommended":
        from ..recommend.outputs import write_list_files
        write_list_files(out, rec.modify_mixlist, rec.keep_dtype, rec.customize_dtypes)
        if rec.training.snippet:
            atomic_write_text(out / "training_settings.py", rec.training.snippet)
    return _finish(out, doc, t0, (v.to_dict(), steps_summary(log)))


def _finish(out: Path, doc: dict, t0: float, curves: tuple | None) -> dict:
    from ..report.html import render_training
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    atomic_write_json(out / "summary.json", doc)
    if curves is not None:
        atomic_write_text(out / "report.html", render_training(curves[0], curves[1], "advisor tune: training steps "
                                                               "(confirmation run)"))
    return doc


def summary_lines(doc: dict, out: str | Path) -> list[str]:
    """The terminal lines of a training tune."""
    lines = [f"tune (training over {doc['steps']} steps, {doc['holdout_batches']} held-out batches): "
             f"first run: {doc['first_run']['summary']}", f"advice: {doc['recommendation']}"
             + (f" -- {'; '.join(doc['chosen'])}" if doc.get("chosen") else "")]
    c = doc.get("confirmation")
    if c:
        lines.append(f"confirmation on the {c['on']}: {c['verdict']['summary']} skipped share {c['skipped_share']:.1%}"
                     f", final loss rel diff {c['final_loss_rel_diff'] if c['final_loss_rel_diff'] is not None else 'n/a'}")
    lines.append(("CONFIRMED" if doc["confirmed"] else f"NOT CONFIRMED ({doc.get('reason', '')})")
                 + f" in {doc['seconds']} s; outputs in {out}")
    return lines


__all__ = ["tune_training", "summary_lines", "MAX_SKIPPED_SHARE"]
