"""Does the real ``msprobe compare`` (mindstudio-probe, PyPI) accept the two dumps of a capture?

mindstudio-probe must NOT be installed in the project environment; use a separate venv::

    python -m venv --system-site-packages /tmp/msprobe-venv
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 /tmp/msprobe-venv/bin/pip install mindstudio-probe
    python bench/msprobe_interop.py [--venv /tmp/msprobe-venv] [--keep DIR]

The script captures a small training MLP and an inference MLP with an exp hazard (tensor dumps),
runs ``msprobe compare -tp <run>/dump/mixed/step0 -gp <run>/dump/fp32/step0`` (msprobe wants the
folder *above* ``rank0``), and prints what it made of every dump entry.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.emulator import capture  # noqa: E402
from advisor.workload import Workload  # noqa: E402


def workloads():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    yield "train_mlp", Workload(m, [(x,)], loss_fn=lambda out, b: nn.functional.cross_entropy(out, y))

    class ExpGate(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            with torch.no_grad():
                self.lin.weight.copy_(torch.eye(8))
                self.lin.bias.fill_(12.0)

        def forward(self, x):
            e = torch.exp(self.lin(x))
            return e / e.sum(-1, keepdim=True)
    yield "exp_hazard", Workload(ExpGate(), [(torch.rand(4, 8),)])


def run_compare(venv: Path, run: Path, out: Path) -> pd.DataFrame | str:
    exe = venv / "bin" / "msprobe"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    cmd = [str(exe), "compare", "-tp", str(run / "dump" / "mixed" / "step0"),
           "-gp", str(run / "dump" / "fp32" / "step0"), "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    csvs = sorted(out.glob("compare_result_*.csv"))
    if p.returncode != 0 or not csvs:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        return f"msprobe compare failed (exit {p.returncode}):\n{tail}"
    return pd.read_csv(csvs[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", type=Path, default=Path("/tmp/msprobe-venv"))
    ap.add_argument("--keep", type=Path, default=None, help="keep runs and results here")
    a = ap.parse_args()
    if not (a.venv / "bin" / "msprobe").exists():
        print(f"no msprobe in {a.venv}: create the venv as described in this script's docstring")
        return 2
    base = a.keep or Path(tempfile.mkdtemp(prefix="msprobe_interop_"))
    ok = True
    for name, wl in workloads():
        run = capture(wl, base / name, dump="tensors", local=False)
        res = run_compare(a.venv, run, base / f"{name}_compare")
        print(f"== {name}: {run}")
        if isinstance(res, str):
            print(res)
            ok = False
            continue
        import json
        entries = json.loads((run / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())["data"]
        compared = {str(n).split(".forward")[0] for n in res["NPU Name"]}
        missing = [e for e in entries if e.split(".forward")[0] not in compared and e not in compared
                   and not any(str(n).startswith(e) for n in res["NPU Name"])]
        print(f"rows {len(res)}; results {res['Result'].value_counts().to_dict()}; "
              f"dump entries {len(entries)}, not in the result: {missing or 'none'}")
        msgs: dict[str, int] = {}
        for m in res["Err_message"].dropna():
            for part in str(m).strip("[]").split('", "'):
                part = part.strip('"')
                if part:
                    msgs[part] = msgs.get(part, 0) + 1
        for m, c in sorted(msgs.items(), key=lambda kv: -kv[1]):
            print(f"   {c:4d} x {m}")
        worst = res[pd.to_numeric(res["Cosine"], errors="coerce").notna()].copy()
        worst["Cosine"] = pd.to_numeric(worst["Cosine"])
        print(worst.sort_values("Cosine")[["NPU Name", "NPU Dtype", "Bench Dtype", "Cosine", "MaxAbsErr"]]
              .head(5).to_string(index=False))
    print(f"results under {base}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
