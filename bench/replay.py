"""Replay cost per candidate vs one eager FP32 forward of the same model over the same batches.

For each workload: capture once with tensor dumps, build the replay recording, then time (median of
``--repeat``) (a) an eager FP32 forward of every batch (torch.no_grad, the emulator's math attention) and
(b) one replay of a candidate plan — the default lists (most ops in low precision: everything runs again)
and a one-edit list.  Prints the ratio replay / eager (target: <= 1).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = {"mlp_exp": "examples/mlp_exp.py:workload", "transformer_hazard": "examples/transformer_hazard.py:workload",
             "minilm": "examples/minilm.py:workload"}


def _median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench_one(name: str, target: str, work: Path, repeat: int) -> dict:
    import torch

    from advisor import mixlist as mx
    from advisor.analysis import analyze
    from advisor.emulator import capture
    from advisor.emulator.engine import eager_math_attention
    from advisor.workload import load_target
    wl = load_target(str(ROOT / target))
    model = wl.model

    def eager():
        with torch.no_grad(), eager_math_attention():
            for b in wl.batches:
                model(*b)
    eager()
    t_eager = _median_time(eager, repeat)
    t0 = time.perf_counter()
    a = analyze(capture(str(ROOT / target), work / name, dump="tensors", local=False))
    t_capture = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec = a.recording
    t_record = time.perf_counter() - t0
    base = a.plan
    a.replay(base)                         # first replay: rounds the parameters once (kept for every candidate)
    t_base = _median_time(lambda: a.replay(base), repeat)
    exp = a.plan_of(a.lists_with(mx.Mixlist(black_add=("Exp",))))
    t_one = _median_time(lambda: a.replay(exp), repeat)
    return {"workload": name, "steps": len(rec.steps), "ops_per_step": len(rec.programs[rec.steps[0]].ops),
            "eager_s": t_eager, "replay_default_s": t_base, "replay_one_edit_s": t_one,
            "ratio_default": t_base / t_eager, "ratio_one_edit": t_one / t_eager,
            "record_s": t_record, "capture_s": t_capture}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.workloads:
            r = bench_one(name, WORKLOADS[name], Path(tmp), a.repeat)
            rows.append(r)
            print(f"{name}: {r['steps']} steps x {r['ops_per_step']} ops; eager forward {r['eager_s'] * 1e3:.1f} ms, "
                  f"replay (default lists) {r['replay_default_s'] * 1e3:.1f} ms = {r['ratio_default']:.2f}x, "
                  f"replay (one edit) {r['replay_one_edit_s'] * 1e3:.1f} ms = {r['ratio_one_edit']:.2f}x; "
                  f"recording built in {r['record_s']:.2f} s", flush=True)
    return rows


if __name__ == "__main__":
    main()
