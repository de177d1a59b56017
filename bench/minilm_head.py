"""Real MiniLM with a multi-label head whose sigmoid saturates in FP16 (examples/minilm_multilabel.py): advisor
tune with its defaults (budget 6, the emulator's default dumps: statistics above 2 M parameters) against a brute
force over every single edit, each judged by a fresh capture (the independent oracle).

    python bench/minilm_head.py [--out FILE.json] [--skip-tune]

The oracle: every op type running in low precision under the default lists is black-listed alone, and every
white one of them also taken off the white list alone; each list is captured afresh (statistics), judged as
``advisor compare --run`` judges (outputs of every batch) and its low-precision share measured from its own
kernel_details.csv.  The best single edit is the passing one with the largest share.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET = f"{ROOT / 'examples' / 'minilm_multilabel.py'}:workload"


def single_edits(run_dir: Path) -> list[tuple[str, str]]:
    """(kind, op type) of every single edit of the oracle: black-add each type running low in ``run_dir`` (that
    a search may edit at all), white-remove each white one."""
    import numpy as np

    from advisor.analysis import analyze
    from advisor.recommend.edits import proposable
    from advisor.semantics import low_mask
    a = analyze(run_dir)
    low = low_mask(a.plan)
    types = sorted({a.compiled.types[i] for i in np.flatnonzero(low) if proposable(a.compiled.types[i])})
    return [("black-add", t) for t in types] + [("white-remove", t) for t in types if a.lists.list_of(t) == "white"]


def fresh(kind: str, t: str, out: Path) -> dict:
    """A fresh capture with the one edit, judged and measured."""
    from advisor.analysis import analyze
    from advisor.emulator import capture
    from advisor.mixlist import Mixlist
    m = Mixlist(black_add=(t,)) if kind == "black-add" else Mixlist(white_remove=(t,))
    d = capture(TARGET, out, mixlist=m, dump="stats", local=False)
    a = analyze(d)
    return {"edit": f"{kind} {t}", "kind": kind, "type": t, "passes": bool(a.verdict().ok),
            "share": a.measured_low_share}


def oracle(work: Path) -> dict:
    """The brute force: the default capture, every single edit by a fresh capture, the best passing share."""
    from advisor.analysis import analyze
    from advisor.emulator import capture
    base = capture(TARGET, work / "default", dump="stats", local=False)
    rows = []
    for kind, t in single_edits(base):
        rows.append(fresh(kind, t, work / f"{kind}_{t}"))
        shutil.rmtree(work / f"{kind}_{t}", ignore_errors=True)
    passing = [r for r in rows if r["passes"]]
    best = max(passing, key=lambda r: r["share"]) if passing else None
    return {"default_passes": bool(analyze(base).verdict().ok), "edits": rows, "best": best}


def run_tune(work: Path, measure_minimality: bool = False) -> dict:
    from advisor.runners import EmulatorRunner
    from advisor.tune import tune
    runner = EmulatorRunner(target=TARGET)
    t0 = time.monotonic()
    try:
        s = tune(runner, work / "tune", measure_minimality=measure_minimality)
    finally:
        runner.close()
    return {"confirmed": s["confirmed"], "runs": s["runs"], "runs_to_first_confirmation":
            s["runs_to_first_confirmation"], "edits": s["edits"], "share": s["low_precision_time_share"],
            "stop_reason": s["stop_reason"], "minimality": s["minimality"]["statement"],
            "history": [{"edits": h["edits"], "ok": h["ok"], "predicted": h["predicted"],
                         "dump_tensors": h.get("dump_tensors", 0)} for h in s["history"]],
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results as JSON")
    ap.add_argument("--skip-tune", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_minilm_head_") as tmp:
        res = {}
        if not a.skip_tune:
            res["tune"] = run_tune(Path(tmp))
            print(json.dumps(res["tune"], indent=1), flush=True)
        t0 = time.monotonic()
        res["oracle"] = oracle(Path(tmp) / "oracle")      # after tune: its runs never see it
        res["oracle"]["seconds"] = round(time.monotonic() - t0, 1)
    for r in res["oracle"]["edits"]:
        print(f"  {r['edit']:<28} {'passes' if r['passes'] else 'fails':<7} share {r['share']:.4f}")
    print("best single edit:", res["oracle"]["best"])
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
