"""A generated multi-rank torch_npu profile: one ``*_ascend_pt`` folder per rank (``profiler_info_<rank>.json`` +
``ASCEND_PROFILER_OUTPUT/kernel_details.csv``), each step a copy of the real 591-kernel sample step
(tests/fixtures/real/torch_npu_profile_mstt: MatMul, LayerNormV3, HCCL, AI_CPU, ... with its exact columns and
formats), repeated ``layers`` times within a step, steps one after another.

Planted, for the acceptance of ``advisor inspect`` on many ranks:
* ``diff_rank``: on that rank alone the kernels of ``diff_type`` (default LayerNormV3, fp16 on every other
  rank) run fp32 (their input and output data types FLOAT16 -> FLOAT);
* ``slow_rank``: that rank's compute kernels (everything but HCCL/memory/AI_CPU bookkeeping) take
  ``1 + slow`` (default 1.3) times as long;
* every rank and step gets a deterministic duration jitter of about ``jitter`` (default 1 %).

    python bench/gen_ranks.py OUT --ranks 64 --rows 100000 [--layers 1] [--diff-rank 17] [--slow-rank 42]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "tests" / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv"


def _field(v: str) -> str:
    return '"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\n\r') else v


class Template:
    """The sample step, pre-rendered: per row the CSV text before and after the start/duration fields."""

    def __init__(self, diff_type: str):
        from advisor.ingest.common import is_bookkeeping
        with open(SAMPLE, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        self.header = ",".join(_field(c) for c in rows[0])
        col = {c: i for i, c in enumerate(rows[0])}
        i_step, i_start, i_dur = col["Step Id"], col["Start Time(us)"], col["Duration(us)"]
        assert (i_step, i_start + 1) == (0, i_dur), "layout: Step Id first, Duration right after Start Time"
        body = rows[1:]
        self.mid = [",".join(_field(x) for x in r[1:i_start]) for r in body]
        self.tail = [",".join(_field(x) for x in r[i_dur + 1:]) for r in body]
        planted = []
        for r in body:
            r2 = list(r)
            if r[col["Type"]] == diff_type:
                for c in ("Input Data Types", "Output Data Types"):
                    r2[col[c]] = r[col[c]].replace("FLOAT16", "FLOAT")
            planted.append(",".join(_field(x) for x in r2[i_dur + 1:]))
        self.tail_fp32 = planted
        self.is_diff = np.array([r[col["Type"]] == diff_type for r in body])
        start = [r[i_start].strip() for r in body]
        self.whole = np.array([int(s.split(".")[0]) for s in start], dtype=np.int64)
        self.frac = [("." + s.split(".")[1]) if "." in s else "" for s in start]
        self.dur = np.array([float(r[i_dur]) for r in body])
        self.compute = np.array([not is_bookkeeping(r[col["Type"]], r[col["Accelerator Core"]]) for r in body])
        self.span = int(math.ceil((self.whole + self.dur).max() - self.whole.min())) + 1000  # us, one layer


def write_rank(path: Path, t: Template, rank: int, steps: int, layers: int, *, diff: bool, slow: float,
               jitter: float, seed: int) -> int:
    """One rank's kernel_details.csv; returns its number of rows."""
    rng = np.random.default_rng(seed * 100_003 + rank)
    n = len(t.dur)
    lines = [t.header]
    tail = t.tail_fp32 if diff else t.tail
    for s in range(steps):
        factor = 1.0 + jitter * float(np.clip(rng.standard_normal(), -3, 3))
        dur = t.dur * factor * np.where(t.compute, 1.0 + slow, 1.0)
        durs = [f"{x:.2f}" for x in dur]
        for layer in range(layers):
            off = (s * layers + layer) * t.span
            starts = (t.whole + off).tolist()
            lines.extend(f"{s + 1},{t.mid[i]},{starts[i]}{t.frac[i]},{durs[i]},{tail[i]}" for i in range(n))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines) - 1


def generate(out: Path, ranks: int = 64, rows: int = 100_000, *, layers: int = 1, diff_rank: int | None = None,
             diff_type: str = "LayerNormV3", slow_rank: int | None = None, slow: float = 0.30,
             jitter: float = 0.01, seed: int = 0) -> dict:
    """Write the job under ``out`` (module docstring); returns what was planted and the sizes."""
    t = Template(diff_type)
    per_step = len(t.dur) * layers
    steps = max(1, -(-rows // per_step))
    total = 0
    for r in range(ranks):
        d = out / f"worker{r:04d}_{10_000 + r}_20261130_ascend_pt"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r, "config": {"generated": True}}))
        total += write_rank(d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", t, r, steps, layers,
                            diff=r == diff_rank, slow=slow if r == slow_rank else 0.0, jitter=jitter, seed=seed)
    return {"ranks": ranks, "rows_per_rank": steps * per_step, "rows": total, "steps": steps, "layers": layers,
            "diff_rank": diff_rank, "diff_type": diff_type, "slow_rank": slow_rank, "slow": slow}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rows", type=int, default=100_000, help="kernel rows per rank (at least; whole steps)")
    ap.add_argument("--layers", type=int, default=1, help="copies of the sample step within one step")
    ap.add_argument("--diff-rank", type=int, default=None)
    ap.add_argument("--diff-type", default="LayerNormV3")
    ap.add_argument("--slow-rank", type=int, default=None)
    ap.add_argument("--slow", type=float, default=0.30)
    a = ap.parse_args()
    t0 = time.perf_counter()
    info = generate(a.out, a.ranks, a.rows, layers=a.layers, diff_rank=a.diff_rank, diff_type=a.diff_type,
                    slow_rank=a.slow_rank, slow=a.slow)
    print(json.dumps({**info, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
