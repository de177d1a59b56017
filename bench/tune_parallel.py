"""``advisor tune --parallel K`` against ``--parallel 1``: the same confirmed list, and the wall time.

On an NPU host a run spends its time on the device; two runs on two NPUs overlap.  This machine has no NPU and
two CPU cores, so a device run is modelled by the command runner with ``examples/npu_script.py --sleep S``: the
job waits S seconds (device time, no CPU) before the emulator writes its run directory.  ``--devices 0,1`` gives
each concurrent run its own ``ASCEND_RT_VISIBLE_DEVICES``.  With ``--sleep 0`` (CPU-only emulator runs) two runs
share the two cores and parallelism gains little or nothing.

    python bench/tune_parallel.py [--workloads two_hazards mlp_exp] [--sleep 8] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(workload: str, parallel: int, sleep: float, out: Path) -> dict:
    cmd = f"{sys.executable} {ROOT / 'examples' / 'npu_script.py'} {ROOT / 'examples' / (workload + '.py')}:workload"
    if sleep:
        cmd += f" --sleep {sleep}"
    args = [sys.executable, "-m", "advisor", "--quiet", "tune", "--runner", "command", "--cmd", cmd, "--out", str(out),
            "--parallel", str(parallel), "--json"]
    if parallel > 1:
        args += ["--devices", ",".join(str(i) for i in range(parallel))]
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    s = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    return {"workload": workload, "parallel": parallel, "wall_s": round(wall, 1), "confirmed": s.get("confirmed"),
            "runs": s.get("runs"), "edits": s.get("edits"), "exit": p.returncode}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="*", default=["two_hazards", "mlp_exp"])
    ap.add_argument("--sleep", type=float, default=8.0, help="simulated device seconds per run")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in a.workloads:
            r1 = run(w, 1, a.sleep, Path(tmp) / f"{w}_1")
            r2 = run(w, 2, a.sleep, Path(tmp) / f"{w}_2")
            same = r1["edits"] == r2["edits"]
            rows += [r1, r2]
            print(f"{w}: --parallel 1 {r1['wall_s']} s ({r1['runs']} runs) vs --parallel 2 {r2['wall_s']} s "
                  f"({r2['runs']} runs): {r1['wall_s'] / max(r2['wall_s'], 1e-9):.2f}x; same list: {same}; "
                  f"confirmed {r1['confirmed']}/{r2['confirmed']}", flush=True)
    return rows


if __name__ == "__main__":
    main()
