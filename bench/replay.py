"""Replay cost per candidate vs one eager FP32 forward of the same model over the same batches, and the wall
time of ``advisor recommend --profile RUN`` on a real-MiniLM capture that needs an edit.

Replay: for each workload, capture once with tensor dumps, build the replay recording, then time (median of
``--repeat``) (a) an eager FP32 forward of every batch (torch.no_grad, the emulator's math attention) and
(b) one replay of a candidate plan: the default lists (most ops in low precision: everything runs again) and
one-edit lists (one black-list edit each, for the first ``--candidates`` op types of the run that change the
plan, most kernel time first: ``bench.cases.search.candidate_types``).  Prints the ratio replay / eager
(target: <= 1) and the median over the one-edit candidates (the cost of one candidate of recommend's search).

Recommend (``--recommend``, default the situation ``bench.cases.situations:minilm_temperature``: real
all-MiniLM-L6-v2 + a softmax head at temperature 0.02 that overflows fp16; fails with the default lists):
capture it with tensor dumps, then time the command ``advisor recommend --profile RUN --out DIR --json`` as a
subprocess (interpreter start and imports included; median of ``--recommend-repeat``) and report its status
and edits.

    python bench/replay.py [--workloads mlp_exp minilm] [--repeat 5] [--candidates 3]
                           [--recommend TARGET | --no-recommend]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = {"mlp_exp": "examples/mlp_exp.py:workload", "transformer_hazard": "examples/transformer_hazard.py:workload",
             "minilm": "examples/minilm.py:workload"}
RECOMMEND_TARGET = "bench.cases.situations:minilm_temperature"   # a module (relative imports)


def _median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench_one(name: str, target: str, work: Path, repeat: int, n_candidates: int = 3) -> dict:
    import torch

    from advisor import mixlist as mx
    from advisor.analysis import analyze
    from advisor.emulator import capture
    from advisor.emulator.engine import eager_math_attention
    from advisor.workload import load_target
    from bench.cases.search import candidate_types
    wl = load_target(str(ROOT / target))
    model = wl.model

    def eager():
        with torch.no_grad(), eager_math_attention():
            for b in wl.batches:
                model(*b)
    eager()
    t_eager = _median_time(eager, repeat)
    t0 = time.perf_counter()
    run_dir = capture(str(ROOT / target), work / name, dump="tensors", local=False)
    a = analyze(run_dir)
    t_capture = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec = a.recording
    t_record = time.perf_counter() - t0
    base = a.plan
    first = a.replay(base)                 # first replay: rounds the parameters once (kept for every candidate)
    t_base = _median_time(lambda: a.replay(base), repeat)
    cands = []                             # (type, plan) of one-edit lists that change the plan
    for t in candidate_types(run_dir):
        plan = a.plan_of(a.lists_with(mx.Mixlist(black_add=(t,))))
        if plan is not base:
            cands.append((t, plan))
        if len(cands) >= n_candidates:
            break
    per_cand = {t: _median_time(lambda p=plan: a.replay(p), repeat) for t, plan in cands}
    t_one = statistics.median(per_cand.values()) if per_cand else float("nan")
    return {"workload": name, "steps": len(rec.steps), "ops_per_step": len(rec.programs[rec.steps[0]].ops),
            "coverage_default": first.coverage,
            "eager_s": t_eager, "replay_default_s": t_base, "replay_one_edit_s": t_one,
            "replay_per_candidate_s": per_cand,
            "ratio_default": t_base / t_eager, "ratio_one_edit": t_one / t_eager,
            "record_s": t_record, "capture_s": t_capture}


def bench_recommend(target: str, work: Path, repeat: int) -> dict:
    """Capture ``target`` with tensor dumps, then time ``advisor recommend --profile RUN`` (the command)."""
    from advisor.emulator import capture
    t0 = time.perf_counter()
    path = str(ROOT / target) if target.partition(":")[0].endswith(".py") else target
    run_dir = capture(path, work / "rec_run", dump="tensors", local=False)
    t_capture = time.perf_counter() - t0
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    times, out = [], {}
    for i in range(repeat):
        out_dir = work / f"rec_out_{i}"
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "advisor", "recommend", "--profile", str(run_dir), "--out",
                            str(out_dir), "--json"], capture_output=True, text=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - t)
        if p.returncode not in (0, 1):
            raise RuntimeError(f"advisor recommend exited {p.returncode}: {p.stderr.strip()[-500:]}")
        out = json.loads(p.stdout)
    ml = out.get("modify_mixlist") or {}
    edits = [f"{lst}+{t}" for lst, d in sorted(ml.items()) if isinstance(d, dict) for t in d.get("to-add", [])]
    edits += [f"{lst}-{t}" for lst, d in sorted(ml.items()) if isinstance(d, dict) for t in d.get("to-remove", [])]
    return {"target": target, "capture_s": t_capture, "recommend_wall_s": statistics.median(times),
            "recommend_wall_all_s": times, "status": out.get("status"), "edits": edits,
            "keep_dtype_lines": len(out.get("keep_dtype") or []), "search": out.get("search") or {}}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--candidates", type=int, default=3, help="one-edit candidates timed per workload")
    ap.add_argument("--recommend", default=RECOMMEND_TARGET, help="capture target for the recommend wall time")
    ap.add_argument("--recommend-repeat", type=int, default=3)
    ap.add_argument("--no-recommend", action="store_true", help="skip the recommend wall time")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.workloads:
            r = bench_one(name, WORKLOADS[name], Path(tmp), a.repeat, a.candidates)
            rows.append(r)
            cands = ", ".join(f"{t} {s * 1e3:.1f} ms" for t, s in r["replay_per_candidate_s"].items())
            print(f"{name}: {r['steps']} steps x {r['ops_per_step']} ops; eager forward {r['eager_s'] * 1e3:.1f} ms, "
                  f"replay (default lists) {r['replay_default_s'] * 1e3:.1f} ms = {r['ratio_default']:.2f}x, "
                  f"replay (one edit) {r['replay_one_edit_s'] * 1e3:.1f} ms = {r['ratio_one_edit']:.2f}x; "
                  f"recording built in {r['record_s']:.2f} s; capture {r['capture_s']:.1f} s; "
                  f"coverage {r['coverage_default']:.3f}; candidates: {cands}", flush=True)
        if not a.no_recommend:
            r = bench_recommend(a.recommend, Path(tmp), a.recommend_repeat)
            rows.append(r)
            print(f"recommend --profile on {r['target']}: wall {r['recommend_wall_s']:.1f} s (median of "
                  f"{len(r['recommend_wall_all_s'])}: {', '.join(f'{x:.1f}' for x in r['recommend_wall_all_s'])} s; "
                  f"capture {r['capture_s']:.1f} s); status {r['status']}; edits {', '.join(r['edits']) or '(none)'}; "
                  f"keep_dtype lines {r['keep_dtype_lines']}; search: {r['search'].get('replays', 'n/a')} replays "
                  f"in {r['search'].get('seconds', 'n/a')} s",
                  flush=True)
    return rows


if __name__ == "__main__":
    main()
