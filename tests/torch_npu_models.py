"""Small PyTorch workloads and readers shared by the tests/test_torch_npu_*.py files."""
from __future__ import annotations

import csv
from pathlib import Path

import torch

KD_DTYPES = {"FLOAT16": "fp16", "FLOAT": "fp32", "DT_BF16": "bf16", "BF16": "bf16", "DOUBLE": "fp64"}


def kernel_rows(run_dir) -> list[dict]:
    """kernel_details.csv rows of a run directory (Type, Name, input and output dtypes as advisor names them)."""
    path = next(Path(run_dir).glob("profile/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    out = []
    for r in csv.DictReader(path.open(encoding="utf-8")):
        out.append({"name": r["Name"], "type": r["Type"],
                    "in": [KD_DTYPES.get(d, d) for d in r["Input Data Types"].split(";") if d],
                    "out": [KD_DTYPES.get(d, d) for d in r["Output Data Types"].split(";") if d]})
    return out


def rows_of(run_dir, typ: str) -> list[dict]:
    rows = [r for r in kernel_rows(run_dir) if r["type"] == typ]
    assert rows, f"no {typ} kernel in {[r['type'] for r in kernel_rows(run_dir)]}"
    return rows


class Square(torch.nn.Module):
    """``h * h`` (operator syntax) in a module of its own, so a policy can name it."""

    def forward(self, h):
        return h * h


class LinMul(torch.nn.Module):
    """linear -> h * h -> exp -> softmax -> sum: large activations make the fp16 ``h * h`` overflow."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.sq = Square()

    def forward(self, x):
        h = self.fc(x)
        h2 = self.sq(h)
        e = torch.exp(h2 * 1e-6)
        return torch.softmax(e, -1).sum()


def lin_mul_workload():
    torch.manual_seed(0)
    m = LinMul()
    with torch.no_grad():
        m.fc.weight.mul_(40.0)
    return m, [(torch.randn(4, 16) * 10,)]


class Expr(torch.nn.Module):
    """``fn(fc(x), x)``: the op under test on a linear's output (fp16 under autocast) and on the raw input (fp32)."""

    def __init__(self, fn):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.fc(x), x)


def expr_workload(fn):
    torch.manual_seed(0)
    return Expr(fn), [(torch.randn(4, 8),)]


class LinSq(torch.nn.Module):
    """linear -> h * h -> sum (issue 22's acceptance model): large activations overflow (or saturate) the fp16
    ``h * h``, which autocast leaves in the linear's dtype because mul is in no table."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.sq = Square()

    def forward(self, x):
        return self.sq(self.fc(x)).sum()


def lin_sq_workload():
    torch.manual_seed(0)
    m = LinSq()
    with torch.no_grad():
        m.fc.weight.mul_(40.0)
    return m, [(torch.randn(4, 16) * 10,), (torch.randn(4, 16) * 10,)]


class WellScaledBlock(torch.nn.Module):
    """A post-norm transformer block with scaled attention and default initialisation: a control (fp16 is fine)."""

    def __init__(self, d: int = 32, heads: int = 2):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff1, self.ff2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (f(x).view(b, s, self.heads, self.dh).transpose(1, 2) for f in (self.q, self.k, self.v))
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / self.dh ** 0.5, dim=-1)
        h = self.ln1(x + self.o(torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)))
        return self.ln2(h + self.ff2(torch.nn.functional.gelu(self.ff1(h))))


def block_workload():
    torch.manual_seed(0)
    return WellScaledBlock().eval(), [(torch.randn(2, 8, 32),), (torch.randn(2, 8, 32),)]


def optimizer_workload_source(batches: int) -> str:
    """A workload file's text: a Linear trained by SGD for 2 steps on ``batches`` identical batches (what the
    torch_npu engine does not train yet)."""
    return ("import torch\nimport torch.nn.functional as F\nfrom advisor.workload import Workload\n"
            "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = torch.nn.Linear(6, 2)\n    def forward(self, x, y):\n        return self.fc(x)\n"
            "def workload():\n    torch.manual_seed(0)\n"
            f"    return Workload(M(), [(torch.randn(4, 6), torch.randn(4, 2))] * {batches},\n"
            "                    lambda o, b: F.mse_loss(o, b[1]), optimizer=lambda p: torch.optim.SGD(p, lr=0.1),\n"
            "                    steps=2)\n")
