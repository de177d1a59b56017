"""Where the negligible-gradient threshold sits (docs/compare.md "Gradients that are zero up to rounding"): over
generated conv + train-mode BatchNorm models with biased convs, the FP32 gradient RMS of each parameter against the
model's gradient scale (RMS of every gradient element) -- the conv biases before a BatchNorm (zero in exact
arithmetic) and every other parameter (real gradients).  Prints figures; asserts nothing.
Usage: python bench/gradient_scale.py [--cases 40]"""
from __future__ import annotations

import argparse
import math
import random

import torch
from torch import nn


def case(seed: int, rng: random.Random) -> tuple[float, float, str]:
    """(largest conv-bias RMS / scale, smallest other RMS / scale, description) of one generated model."""
    torch.manual_seed(seed)
    depth, ch, hw = rng.randint(1, 4), rng.choice([4, 8, 16, 32]), rng.choice([6, 12, 24, 32])
    n, k, xs = rng.choice([2, 4, 8, 16]), rng.choice([1, 3]), rng.choice([0.1, 1.0, 10.0])
    layers: list[nn.Module] = []
    c = 3
    for _ in range(depth):
        layers += [nn.Conv2d(c, ch, k, padding=k // 2, bias=True), nn.BatchNorm2d(ch), nn.ReLU()]
        c = ch
    body, head = nn.Sequential(*layers).train(), nn.Linear(ch, 5)
    x, y = torch.randn(n, 3, hw, hw) * xs, torch.randint(0, 5, (n,))
    nn.functional.cross_entropy(head(body(x).mean((2, 3))), y).backward()
    grads = [(f"body.{m}", isinstance(body[int(m.split(".")[0])], nn.Conv2d) and m.endswith("bias"), p.grad.double())
             for m, p in body.named_parameters()] + [(f"head.{m}", False, p.grad.double())
                                                    for m, p in head.named_parameters()]
    scale = math.sqrt(sum(float((g ** 2).sum()) for _, _, g in grads) / sum(g.numel() for _, _, g in grads))
    rms = [(cancels, math.sqrt(float((g ** 2).mean())) / scale) for _, cancels, g in grads]
    return (max(r for cb, r in rms if cb), min(r for cb, r in rms if not cb),
            f"{depth} blocks x {ch} ch, {hw}x{hw}, batch {n}, kernel {k}, inputs x{xs:g}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(0)
    worst_residue, smallest_real = 0.0, math.inf
    for i in range(a.cases):
        res, real, what = case(i, rng)
        worst_residue, smallest_real = max(worst_residue, res), min(smallest_real, real)
        print(f"case {i:2d} ({what}): conv biases <= {res:.2e} of the scale, other gradients >= {real:.2e}")
    print(f"over {a.cases} models: zero-in-exact-arithmetic gradients <= {worst_residue:.2e} of the scale, "
          f"real gradients >= {smallest_real:.2e}")


if __name__ == "__main__":
    main()
