"""How long a refused command takes, as a user runs it (a new process): wall and CPU seconds (the process and its
children), beside what loading the workload alone costs.

    python bench/refusals.py [--repeat 3]

Cases: ``tune --soc nosoc``, ``tune --mixlist`` with a mistyped type, ``capture --mixlist`` with it, and
``tune --holdout 4`` on a 4-batch workload -- the last one has to load the workload to count its batches (in the
capture child that then serves the runs), so it is printed beside a bare ``import torch`` and a bare load of the
workload file.  tests/test_inputs_cli.py checks that each is refused before any run (by markers the workload
leaves); this script is where the seconds are measured (docs/cli.md quotes them).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = """
import torch

def workload():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, [(torch.randn(3, 4),) for _ in range(4)]
"""
LOAD = ("import importlib.util,sys; s=importlib.util.spec_from_file_location('w', sys.argv[1]); "
        "m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.workload()")


def _timed(argv: list[str], cwd: Path) -> tuple[int, float, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "ADVISOR_PROGRESS": "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=300)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p.returncode, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    adv = [sys.executable, "-m", "advisor"]
    cases = {
        "tune --soc nosoc": adv + ["tune", "wl.py:workload", "--out", "out", "--soc", "nosoc"],
        "tune --mixlist (typo)": adv + ["tune", "wl.py:workload", "--out", "out", "--mixlist", "typo.json"],
        "capture --mixlist (typo)": adv + ["capture", "wl.py:workload", "--out", "run", "--mixlist", "typo.json"],
        "tune --holdout 4 (4 batches)": adv + ["tune", "wl.py:workload", "--out", "out", "--holdout", "4"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "load the workload alone": [sys.executable, "-c", LOAD, "wl.py"],
    }
    with tempfile.TemporaryDirectory() as d:
        wd = Path(d)
        (wd / "wl.py").write_text(WORKLOAD)
        (wd / "typo.json").write_text(json.dumps({"black-list": {"to-add": ["Expp"]}}))
        rows = {}
        for _ in range(a.repeat):              # interleaved, so a burst of load hits every case alike
            for name, argv in cases.items():
                rc, wall, cpu = _timed(argv, wd)
                rows.setdefault(name, []).append((rc, wall, cpu))
    print(f"load average {os.getloadavg()[0]:.1f}; median of {a.repeat} (wall / CPU seconds)")
    for name, rs in rows.items():
        rcs = sorted({r[0] for r in rs})
        print(f"  {name:32s} exit {','.join(map(str, rcs)):3s} {statistics.median(r[1] for r in rs):5.2f} s wall "
              f"{statistics.median(r[2] for r in rs):5.2f} s CPU")


if __name__ == "__main__":
    main()
