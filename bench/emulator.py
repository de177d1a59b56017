"""Overhead of the emulated mixed forward over a plain eager forward (no tensor dumps).

Prints, per model: eager forward (torch.no_grad), the emulated mixed_float16 forward (replay of the
plan: input/output rounding + recording, plus the batched msprobe statistics of every op's inputs and
outputs, i.e. what capture does per step without tensor files), and the FP32 tracing run (graph
recording).  Medians over repeats.  Target: mixed / eager <= 3x.

    python bench/emulator.py [--reps 5] [--no-minilm]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor import graph as G, semantics  # noqa: E402
from advisor.emulator.capture import _DumpBuilder, _static_ptrs, param_names, run_step  # noqa: E402
from advisor.emulator.engine import eager_math_attention  # noqa: E402
from advisor.oplists import load_lists  # noqa: E402


def mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.LayerNorm(2048),
                      nn.Linear(2048, 512)).eval()
    return m, (torch.randn(64, 512),)


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    return m, (torch.randn(8, 128, 256),)


def minilm():
    sys.path.insert(0, str(ROOT / "examples"))
    import minilm as ex  # examples/minilm.py: real all-MiniLM-L6-v2 weights
    model, batches = ex.workload()[:2]
    return model, batches[0]


def minilm_b8s128():
    """The real MiniLM on a transformer-sized batch: 8 x 128 tokens (real sentences, repeated)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import minilm as ex
    model = ex.load_model()
    tok = ex.load_tokenizer()
    text = " ".join(ex.SENTENCES)
    ids, mask = tok.batch([text * 3] * 8)
    return model, (ids[:, :128].contiguous(), mask[:, :128].contiguous())


def _median_time(fn, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench(name: str, model, batch, reps: int) -> None:
    params = param_names(model)
    g = G.new_graph()
    fp = run_step(model, batch, graph=g, params=params, keep_entries=False)
    plan = semantics.plan(g, load_lists("ascend910b"), "mixed_float16")
    precs = [plan[r.name] for r in fp.ops]

    def eager():
        with torch.no_grad(), eager_math_attention():
            model(*batch)

    scache: dict = {}  # statistics of parameters, reused across steps as capture does
    cache: dict = {}  # rounded parameters, reused across steps as capture does

    def mixed():
        rec = run_step(model, batch, params=params, plan=precs, reference=fp.ops, cache=cache)
        _DumpBuilder(rec, precs, fp.ops, files=False, stats_cache=scache,
                     static_ptrs=_static_ptrs(params, cache)).build()

    def mixed_no_stats():
        run_step(model, batch, params=params, plan=precs, reference=fp.ops, keep_entries=False, cache=cache)

    def trace():
        run_step(model, batch, graph=G.new_graph(), params=params, keep_entries=False)

    te, tm, tn, tt = (_median_time(f, reps) for f in (eager, mixed, mixed_no_stats, trace))
    n_ops = len(fp.ops)
    low = sum(p in ("fp16", "bf16") for p in precs)
    print(f"{name:<28} ops={n_ops:<5} low={low:<5} eager={te * 1e3:8.2f} ms  mixed+stats={tm * 1e3:8.2f} ms "
          f"({tm / te:4.2f}x)  mixed-no-stats={tn * 1e3:8.2f} ms ({tn / te:4.2f}x)  fp32-trace={tt * 1e3:8.2f} ms "
          f"({tt / te:4.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-minilm", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # 1 by default: stable on a shared 2-core machine
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    cases = [("MLP 512-2048-2048-512 b64", mlp), ("TransformerEncoder d256 s128 b8", encoder)]
    if not a.no_minilm:
        cases.append(("MiniLM-L6-v2 real, 4 sents", minilm))
        cases.append(("MiniLM-L6-v2 real, b8 s128", minilm_b8s128))
    for name, f in cases:
        try:
            m, b = f()
        except ImportError as e:
            print(f"{name:<28} skipped: {e}")
            continue
        bench(name, m, b, a.reps)


if __name__ == "__main__":
    main()
