"""Regenerate the shipped run directories ``profiles/<name>/`` from ``examples/`` with the CPU emulator.

    python tools/gen_profiles.py                 # all profiles
    python tools/gen_profiles.py mlp_exp minilm_fp16
    python tools/gen_profiles.py --list

Each profile is one ``advisor capture`` of an example (the spec table ``PROFILES`` below is the
single source: ``tests/test_profiles_current.py`` re-captures from it and checks the shipped
directories are current).  The ONNX profiles are captures of examples/onnx_models.py's exports (made at capture time, nothing
binary committed; they need the ``[onnx]`` extra).  Profiles are kept small: statistics-only dumps, except where the
hazard is a finite "far off" error or a gradient underflow that statistics alone do not show:
the two tiny MLPs ship their tensors, the transformer and the training MLP too but for one step;
MiniLM keeps one step.  Budget: < 2 MB per profile, < 12 MB in total (the script exits 1 when
exceeded).  A profile is replaced only after its new capture succeeded.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
PROFILE_DIR = REPO / "profiles"
MAX_PROFILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 12 * 1024 * 1024     # 10 MB before the two ONNX profiles


@dataclass(frozen=True)
class Profile:
    name: str
    target: str                       # relative to the repository root, recorded in run.json
    mode: str = "mixed_float16"
    dump: str = "stats"
    batches: int | None = None        # keep the first N batches (None: all)
    purpose: str = ""
    engine: str = "ge"                # torch_npu: captured as torch_npu eager runs it (autocast)


PROFILES: tuple[Profile, ...] = (
    Profile("transformer_hazard", "examples/transformer_hazard.py:workload", dump="tensors", batches=1,
            purpose="attention scores ~1e4 into SoftmaxV2 (fix: black-list BatchMatMul)"),
    Profile("mlp_exp", "examples/mlp_exp.py:workload", dump="tensors",
            purpose="Exp overflow (fix: black-list Exp)"),
    Profile("cnn_control", "examples/cnn_control.py:workload", purpose="clean control"),
    Profile("mlp_train_underflow", "examples/mlp_train_underflow.py:workload", dump="tensors", batches=1,
            purpose="training, fp16 gradient underflow (fix: loss scale)"),
    Profile("two_hazards", "examples/two_hazards.py:workload",
            purpose="Exp overflow + Sigmoid underflow into Log (fix: black-list Exp and Sigmoid)"),
    Profile("two_hazards_npu", "examples/two_hazards.py:workload", dump="tensors", batches=1, engine="torch_npu",
            purpose="the same model as torch_npu eager runs it under autocast (advice: a precision policy)"),
    Profile("layernorm_bias", "examples/layernorm_bias.py:workload", dump="tensors",
            purpose="linear bias 1000 -> LayerNormV4 (fix: black-list MatMulV2 and LayerNormV4)"),
    Profile("minilm_fp16", "examples/minilm.py:workload", batches=1,
            purpose="all-MiniLM-L6-v2 real weights, mixed_float16 (clean)"),
    Profile("minilm_bf16", "examples/minilm.py:workload", mode="mixed_bfloat16", batches=1,
            purpose="all-MiniLM-L6-v2 real weights, mixed_bfloat16 (batch 0 only: it passes; batches 1-3 exceed rel. L2 0.01 by 2-4 %, examples/README.md)"),
    Profile("cnn_onnx", "examples/onnx_models.py:cnn", mode="force_fp16",
            purpose="the control CNN exported to ONNX, ATC's inference default force_fp16 (clean)"),
    Profile("minilm_onnx", "examples/onnx_models.py:minilm", mode="force_fp16", batches=1,
            purpose="all-MiniLM-L6-v2 real weights exported to ONNX, force_fp16 (clean)"),
)
BY_NAME = {p.name: p for p in PROFILES}


def capture_profile(spec: Profile, out: Path) -> Path:
    """Capture ``spec`` into the new directory ``out`` (run from the repository root so the
    recorded target stays relative)."""
    from advisor.emulator import capture

    out = Path(out).resolve()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        return capture(spec.target, out, mode=spec.mode, dump=spec.dump, batches=spec.batches, engine=spec.engine)
    finally:
        os.chdir(cwd)


def kernel_details_path(run: Path) -> Path:
    found = sorted(Path(run).glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    if len(found) != 1:
        raise FileNotFoundError(f"{run}: expected one profile/*_ascend_pt/.../kernel_details.csv, found {len(found)}")
    return found[0]


def op_summary(run: Path) -> pd.DataFrame:
    """Per (step, op type, input dtypes, output dtypes): kernel count, from kernel_details.csv."""
    from advisor.ingest import read_kernel_details

    kd = read_kernel_details(kernel_details_path(run))
    return (kd.groupby(["step", "type", "in_dtypes", "out_dtypes"], dropna=False).size()
            .rename("count").reset_index().sort_values(["step", "type", "in_dtypes", "out_dtypes"])
            .reset_index(drop=True))


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def regenerate(spec: Profile, root: Path = PROFILE_DIR) -> Path:
    """Capture into ``root/.<name>.new`` and swap it in place of ``root/<name>``."""
    root.mkdir(parents=True, exist_ok=True)
    final, new, old = root / spec.name, root / f".{spec.name}.new", root / f".{spec.name}.old"
    for p in (new, old):
        if p.exists():
            shutil.rmtree(p)
    capture_profile(spec, new)
    if final.exists():
        final.rename(old)
    new.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="profiles to regenerate (default: all)")
    ap.add_argument("--out", type=Path, default=PROFILE_DIR, help="profiles root (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the profiles and exit")
    args = ap.parse_args(argv)
    if args.list:
        for p in PROFILES:
            print(f"{p.name:22s} {p.mode:15s} dump={p.dump:8s} {p.target}  {p.purpose}")
        return 0
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"gen_profiles: unknown profile(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    todo = [BY_NAME[n] for n in args.names] or list(PROFILES)
    status = 0
    for spec in todo:
        path = regenerate(spec, args.out)
        size = dir_bytes(path)
        flag = "" if size < MAX_PROFILE_BYTES else "  <-- over the 2 MB budget"
        print(f"{spec.name:22s} {size / 1e6:6.2f} MB  {path}{flag}", flush=True)
        status |= size >= MAX_PROFILE_BYTES
    total = sum(dir_bytes(args.out / p.name) for p in PROFILES if (args.out / p.name).is_dir())
    print(f"{'total':22s} {total / 1e6:6.2f} MB" + ("  <-- over the 12 MB budget" if total >= MAX_TOTAL_BYTES else ""))
    status |= total >= MAX_TOTAL_BYTES
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
