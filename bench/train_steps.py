"""Cost of training over steps in the emulator: steps/s of ``advisor.emulator.capture`` on a Workload with an
optimizer (the FP32 run and the mixed run both trained, the scaler, per-step records, dumps every K steps) against
eager FP32 training of the same model (forward, loss, backward, optimizer step), and the run directory's size; the
last figures dump only the first and the last step (the per-step cost of the emulation alone).

    python bench/train_steps.py [--steps 200] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.emulator import capture  # noqa: E402
from advisor.workload import Workload  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x, y):
        return self.net(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        self.head = nn.Linear(128, 10)

    def forward(self, x, y):
        return self.head(self.layer(x).mean(1))


def _ce(out, batch):
    return F.cross_entropy(out, batch[1])


def workloads(steps: int) -> dict:
    torch.manual_seed(0)
    mlp = Workload(MLP(), [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(8)], _ce,
                   name="mlp", optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), steps=steps,
                   scaler="torch_npu")
    enc = Workload(Encoder(), [(torch.randn(8, 32, 128), torch.randint(0, 10, (8,))) for _ in range(8)], _ce,
                   name="encoder", optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), steps=steps,
                   scaler="torch_npu")
    return {"MLP 64-256-256-10 b32, SGD": mlp, "TransformerEncoderLayer d128 s32 b8, AdamW": enc}


def eager_steps_per_s(wl: Workload, steps: int) -> float:
    model = copy.deepcopy(wl.model)
    opt = wl.optimizer(model.parameters())
    t = time.perf_counter()
    for s in range(steps):
        b = wl.batches[s % len(wl.batches)]
        opt.zero_grad(set_to_none=True)
        wl.loss_fn(model(*b), b).backward()
        opt.step()
    return steps / (time.perf_counter() - t)


def emulated(wl: Workload, steps: int, local: bool, dump_every: int | None = None) -> tuple[float, float]:
    wl.dump_every = dump_every
    out = Path(tempfile.mkdtemp(prefix="advisor_train_bench_")) / "run"
    t = time.perf_counter()
    capture(wl, out, local=local)
    dt = time.perf_counter() - t
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2 ** 20
    shutil.rmtree(out.parent, ignore_errors=True)
    return steps / dt, size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, threads {a.threads}, {a.steps} steps, dumps every "
          f"{max(1, -(-a.steps // 10))} steps (the default)")
    for label, wl in workloads(a.steps).items():
        eager = eager_steps_per_s(wl, a.steps)
        fast, size = emulated(wl, a.steps, local=False)
        full, _ = emulated(wl, a.steps, local=True)
        bare, bare_size = emulated(wl, a.steps, local=False, dump_every=a.steps)
        print(f"{label:44s} eager {eager:8.1f} steps/s | emulated {fast:6.1f} steps/s ({eager / fast:5.1f}x slower), "
              f"with local errors {full:6.1f} steps/s ({eager / full:5.1f}x) | run dir {size:6.1f} MiB | "
              f"dumps at the first and last step only {bare:6.1f} steps/s ({eager / bare:5.1f}x), {bare_size:6.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
