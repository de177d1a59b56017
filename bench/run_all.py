"""Run every benchmark and print one table of figures (each measured in the same run as its comparison).

    python bench/run_all.py [--write docs/benchmarks.md] [--quick] [--only SCRIPT ...]

Scripts run as subprocesses (their own full output is kept below the table):
  semantics.py     compile + plan + what-if on 100,000 ops
  ingest.py        1,000,000-row kernel_details.csv: parse + graph build rows/s (target >= 200,000)
  emulator.py      emulated mixed forward vs plain eager (MLP, encoder, MiniLM; target <= 3x)
  train_steps.py   training over optimizer steps: emulated capture steps/s vs eager FP32 training (MLP, encoder)
  recommend.py     recommend on a 100,000-op synthetic graph (target <= 30 s)
  replay.py        replay cost per candidate vs one eager FP32 forward (MLP, MiniLM; target <= 1x) and the wall
                   time of advisor recommend --profile on a real-MiniLM capture that needs an edit
  tune.py          runs-to-pass of advisor tune vs ONNX-style halving vs INC-style one-by-one, same runner/budget
  bruteforce.py    advisor's edits vs the brute-force minimum on every planted example, low-precision share kept
  ranks.py         one 10^6-row rank (recommend vs pd.read_csv) and 64 ranks x 10^5 rows (inspect, workers, Ray)
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = ("semantics.py", "ingest.py", "emulator.py", "train_steps.py", "recommend.py", "replay.py", "ranks.py",
           "tune.py", "bruteforce.py")
KEPT_SECTION = "## Generated case suite"     # docs/benchmarks.md section maintained from bench/cases (kept on --write)


def run(script: str, *args: str, timeout: int = 900) -> tuple[str, float]:
    t0 = time.perf_counter()
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT, env=env)
    out = p.stdout + (f"\n[stderr]\n{p.stderr[-3000:]}" if p.returncode else "")
    return out, time.perf_counter() - t0


def grab(pattern: str, text: str, group: int = 1) -> str:
    m = re.search(pattern, text, re.M)
    return m.group(group) if m else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", type=Path, help="also write the table and the outputs to this markdown file")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (smoke run, not the published figures)")
    ap.add_argument("--only", nargs="+", metavar="SCRIPT", choices=SCRIPTS,
                    help="run only these scripts (not with --write: the published table has every row)")
    a = ap.parse_args(argv)
    if a.only and a.write:
        ap.error("--only cannot be combined with --write (the written table would miss rows)")
    q = a.quick

    def want(script: str) -> bool:
        return not a.only or script in a.only

    outputs: dict[str, str] = {}
    rows: list[tuple[str, str, str]] = []
    t_all = time.perf_counter()

    if want("semantics.py"):
        out, _ = run("semantics.py")
        outputs["semantics.py"] = out
        compile_s, plan_s = grab(r"compile ([\d.]+) s", out), grab(r"plan ([\d.]+) s", out)
        rows.append(("semantics: compile + plan, 100k ops", f"{compile_s} s + {plan_s} s", "well under 1 s"))
        rows.append(("semantics: incremental what-if, 100k ops", grab(r"what-if .*?\) ([\d.]+) s", out) + " s", "—"))

    if want("ingest.py"):
        out, _ = run("ingest.py", "--rows", "100000" if q else "1000000")
        outputs["ingest.py"] = out
        parse_rate = grab(r"parse:\s+[\d.]+ s\s+([\d,]+) rows/s", out)
        total_rate, total_s = grab(r"total:\s+[\d.]+ s\s+([\d,]+) rows/s", out), grab(r"total:\s+([\d.]+) s", out)
        rows.append(("ingest: parse kernel_details.csv", f"{parse_rate} rows/s", "pandas' C reader ~1,000,000 rows/s"))
        rows.append(("ingest: parse + graph build", f"{total_rate} rows/s ({total_s} s)",
                     ">= 200,000 rows/s; msprof-analyze ~7,500"))
        rows.append(("ingest: peak memory", grab(r"peak RSS:\s+([\d,]+) MiB", out) + " MiB", "<= 4 GB"))

    if want("emulator.py"):
        out, _ = run("emulator.py", "--reps", "3" if q else "5")
        outputs["emulator.py"] = out
        for m in re.finditer(r"^(\S.*?)\s+ops=.*?mixed\+stats=.*?\(([\d.]+)x\)\s+mixed-no-stats=.*?\(([\d.]+)x\)", out, re.M):
            rows.append((f"emulator overhead: {m.group(1).strip()}", f"{m.group(2)}x (no stats {m.group(3)}x)",
                         "<= 3x vs eager"))

    if want("train_steps.py"):
        out, _ = run("train_steps.py", "--steps", "50" if q else "200", timeout=1800)
        outputs["train_steps.py"] = out
        for m in re.finditer(r"^(\S.*?)\s+eager\s+([\d.]+) steps/s \| emulated\s+([\d.]+) steps/s \(\s*([\d.]+)x slower\), "
                             r"with local errors\s+([\d.]+) steps/s \(\s*([\d.]+)x\) \| run dir\s+([\d.]+) MiB", out, re.M):
            rows.append((f"training steps: {m.group(1).strip()}", f"{m.group(3)} steps/s ({m.group(4)}x eager; with local "
                         f"errors {m.group(5)} steps/s), run dir {m.group(7)} MiB",
                         f"eager FP32 training {m.group(2)} steps/s"))

    if want("recommend.py"):
        out, _ = run("recommend.py", "--ops", "20000" if q else "100000")
        outputs["recommend.py"] = out
        rec_s, rec_edits = grab(r"recommend: ([\d.]+) s", out), grab(r"edits (\[.*?\])", out)
        rows.append(("recommend on a 100k-op graph", f"{rec_s} s ({rec_edits})", "<= 30 s"))

    if want("replay.py"):
        out, _ = run("replay.py", "--repeat", "3" if q else "5", "--recommend-repeat", "1" if q else "3",
                     "--workloads", *(["mlp_exp"] if q else ["mlp_exp", "minilm"]), timeout=1800)
        outputs["replay.py"] = out
        for m in re.finditer(r"^(\w+): (\d+) steps x (\d+) ops; eager forward ([\d.]+) ms, replay \(default lists\) "
                             r"([\d.]+) ms = ([\d.]+)x, replay \(one edit\) ([\d.]+) ms = ([\d.]+)x", out, re.M):
            rows.append((f"replay per candidate vs eager FP32 forward: {m.group(1)} ({m.group(2)} batches)",
                         f"one edit {m.group(7)} ms = {m.group(8)}x; default lists {m.group(5)} ms = {m.group(6)}x",
                         f"eager forward {m.group(4)} ms; target <= 1x"))
        m = re.search(r"^recommend --profile on \S+?:(\w+): wall ([\d.]+) s.*?status (\S+); edits (.*?); keep_dtype "
                      r"lines (\d+); search: (\S+) replays in (\S+) s", out, re.M)
        if m:
            rows.append((f"recommend --profile wall time: {m.group(1)} (real MiniLM)",
                         f"{m.group(2)} s (status {m.group(3)}, {m.group(4)})",
                         f"{m.group(6)} replays in {m.group(7)} s of search"))

    if want("ranks.py"):
        out, _ = run("ranks.py", *(["--quick"] if q else []), timeout=3600)
        outputs["ranks.py"] = out
        ratio_wall = grab(r"ratio to pd.read_csv: wall ([\d.]+x)", out)
        ratio_cpu = grab(r"ratio to pd.read_csv: wall [\d.]+x, cpu ([\d.]+x)", out)
        peak = grab(r"advisor recommend --profile: .*?peak RSS ([\d,]+ MiB)", out)
        msprof = grab(r"msprof-analyze advisor computation \(same folder\): wall ([\d.]+ s)", out)
        rows.append(("one 10^6-row rank: recommend --profile vs pd.read_csv", f"wall {ratio_wall}, cpu {ratio_cpu}, peak {peak}",
                     f"<= 3x pd.read_csv, <= 1024 MiB; msprof-analyze advisor computation {msprof}"))
        same = grab(r"results with Ray identical to --workers 1: (\w+)", out)
        for w in ("workers 1", "workers 2", "ray local"):
            m = re.search(r"advisor inspect --" + w + r": wall ([\d.]+ s).*?names rank \d+ \(precision mix\) and rank \d+ "
                          r"\(slow\): (\w+)", out)
            if m:
                rows.append((f"64 ranks x 10^5 rows: inspect --{w}", f"{m.group(1)} (names both planted ranks: {m.group(2)})",
                             f"--workers 2 faster than --workers 1; Ray results identical: {same}"))

    if want("tune.py"):
        tune_args = ["--seeds", "0" if q else "40", "--methods", "tune", "onnx-halving", "inc-onebyone", "--workloads"]
        tune_args += ["mlp_exp", "cnn_control"] if q else ["mlp_exp", "transformer_hazard", "two_hazards", "layernorm_bias",
                                                           "cnn_control"]
        out, _ = run("tune.py", *tune_args, timeout=1800)
        outputs["tune.py"] = out
        workload = None
        per: dict[str, dict[str, str]] = {}
        for line in out.splitlines():
            m = re.match(r"^(\w+)$", line.strip()) if not line.startswith(" ") else None
            if m:
                workload = m.group(1)
                continue
            m = re.match(r"^\s+(tune|tune-nolearn|onnx-halving|inc-onebyone)\s+(yes|NO)\s+(\S+)\s+(\d+)\s+(\S+)\s+\S+\s+(.*)$", line)
            if m and workload:
                per.setdefault(workload, {})[m.group(1)] = (f"{m.group(3) if m.group(2) == 'yes' else 'fail'}"
                                                           f" ({m.group(5)}, {m.group(6)})")
        for w, d in per.items():
            rows.append((f"tune runs-to-pass (low-prec share, edits): {w}",
                         f"advisor {d.get('tune', '-')}",
                         f"ONNX halving {d.get('onnx-halving', '-')}; INC one-by-one {d.get('inc-onebyone', '-')}"))
        learn = re.search(r"^\s+on\s+(\d+)/(\d+)\s+([\d.]+).*\n\s+off\s+(\d+)/(\d+)\s+([\d.]+)", out, re.M)
        if learn:
            rows.append(("tune learning across runs (synthetic, noisy recommender)",
                         f"with surrogate: {learn.group(1)}/{learn.group(2)} confirmed, {learn.group(3)} mean runs",
                         f"without: {learn.group(4)}/{learn.group(5)} confirmed, {learn.group(6)} mean runs"))

    if want("bruteforce.py"):
        bf_args = ["--examples", "mlp_exp"] if q else []
        out, _ = run("bruteforce.py", *bf_args, timeout=1800)
        outputs["bruteforce.py"] = out
        pat = r"^(\w+)\s+(\S+)\s+(yes|NO)\s+(\S+)\s+\|\s+(\S+)\s+(\S+)\s+\|\s+(\S+)\s+(\S+)\s+(\d+)$"
        for m in re.finditer(pat, out, re.M):
            rows.append((f"edits vs brute-force: {m.group(1)}",
                         f"advisor {m.group(2).replace(',', '+')} (meets tolerance: {m.group(3)}, low-prec share {m.group(4)})",
                         f"fewest edits {m.group(5).replace(',', '+')} (share {m.group(6)}); best share "
                         f"{m.group(7).replace(',', '+')} (share {m.group(8)}); {m.group(9)} captures"))

    total = time.perf_counter() - t_all
    w1 = max((len(r[0]) for r in rows), default=6)
    w2 = max((len(r[1]) for r in rows), default=8)
    lines = [f"| {'figure':<{w1}} | {'measured':<{w2}} | comparison / target |", f"|{'-' * (w1 + 2)}|{'-' * (w2 + 2)}|---|"]
    lines += [f"| {a_:<{w1}} | {b_:<{w2}} | {c_} |" for a_, b_, c_ in rows]
    table = "\n".join(lines)
    print(table)
    print(f"\nall benchmarks: {total / 60:.1f} min{' (quick)' if q else ''}")
    if a.only:                          # a partial run: each script's own output below its rows
        for name, o in outputs.items():
            print(f"\n## {name}\n\n{o.rstrip()}")
    if a.write:
        body = ["# Benchmarks", "", "Measured by `python bench/run_all.py --write docs/benchmarks.md` on this project's "
                "machine (2 cores, 24 GiB, CPU only). Rerun the same command to refresh; each script can also run "
                "alone (`python bench/<script>.py --help`).", "", table, "",
                f"Total time of the run: {total / 60:.1f} min.", ""]
        for name, o in outputs.items():
            body += [f"## {name}", "", "```", o.rstrip(), "```", ""]
        old = a.write.read_text(encoding="utf-8") if a.write.is_file() else ""
        if KEPT_SECTION in old:         # written by the case oracle's summary, not by this script: keep it
            body += [old[old.index(KEPT_SECTION):].rstrip(), ""]
        a.write.write_text("\n".join(body), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
