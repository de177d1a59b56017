"""An "NPU script" for ``advisor tune --runner command``: what a user's torch_npu / TF script does,
with the CPU emulator standing in for the NPU (there is none here).

    advisor tune --runner command --cmd "python examples/npu_script.py examples/mlp_exp.py:workload" --out out/cmd

A real torch_npu script would do::

    import advisor.npu
    cfg = advisor.npu.apply()      # TF: npu_device.global_options(); torch: cfg.ge_options / cfg.autocast()
    cfg.apply_policy(model)        # torch_npu eager, tune --engine torch_npu: the ADVISOR_POLICY precision policy
    from msprobe.pytorch import PrecisionDebugger
    debugger = PrecisionDebugger(**cfg.msprobe_kwargs(task="tensor"))       # -> $ADVISOR_RUN_DIR/dump/mixed
    prof = torch_npu.profiler.profile(
        on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(cfg.profile_dir)))
    with prof, cfg.autocast():
        for batch in batches:          # batch i = step i
            debugger.start(); out = model(*batch); debugger.stop(); debugger.step(); prof.step()
    # training: scaler = torch_npu.npu.amp.GradScaler(**cfg.grad_scaler_kwargs())  (ADVISOR_LOSS_SCALE)

Here ``apply()`` finds neither framework and configures nothing; the emulator writes the same files
(with ``ADVISOR_LOSS_SCALE`` set, a training workload's backward is scaled by it; with ``ADVISOR_POLICY`` set --
``advisor tune --engine torch_npu --runner command`` -- it emulates torch_npu eager with that precision policy, as
``cfg.apply_policy(model)`` realises it on an NPU).

Options (for tests): ``--no-golden`` writes only what a real NPU run has (no ``dump/fp32``: tune then
runs this script once more as the FP32 reference); ``--fail-if-edit TYPE`` exits 3 when the mixlist
black-lists TYPE (a crashing job); ``--sleep S`` sleeps first (a hanging job); ``--engine torch_npu|ge``: the
engine emulated (default: torch_npu when ``ADVISOR_POLICY`` is set, else ge -- the FP32 reference of a torch_npu tune
gets no policy, so ``--no-golden`` runs of one name it).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", help="path/to/file.py:function")
    ap.add_argument("--no-golden", action="store_true")
    ap.add_argument("--fail-if-edit", default=None)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--engine", choices=("torch_npu", "ge"), default=None)
    args = ap.parse_args(argv)

    import advisor.npu
    cfg = advisor.npu.apply()                      # reads ADVISOR_MIXLIST / ADVISOR_MODE / ADVISOR_RUN_DIR
    s = cfg.settings
    print(f"framework={cfg.framework} mode={s.mode} mixlist={s.mixlist} policy={s.policy} run_dir={s.run_dir} "
          f"reference={s.reference}")
    if s.run_dir is None:
        print("ADVISOR_RUN_DIR is not set: run me through advisor tune --runner command", file=sys.stderr)
        return 2
    if args.sleep:
        time.sleep(args.sleep)
    if args.fail_if_edit and s.mixlist is not None:
        from advisor.mixlist import load
        if args.fail_if_edit in load(s.mixlist).black_add:
            print(f"simulated device error with {args.fail_if_edit} black-listed", file=sys.stderr)
            return 3

    from advisor.emulator import capture
    kw = {"mode": s.mode, "loss_scale": s.loss_scale}
    if (args.engine or ("torch_npu" if s.policy else "ge")) == "torch_npu":
        from advisor.precision_policy import read_policy
        kw.update(engine="torch_npu", policy=str(s.policy) if s.policy else None,
                  amp=read_policy(s.policy).amp if s.policy else None)
    else:
        kw["mixlist"] = s.mixlist
    if not args.no_golden:
        capture(args.workload, s.run_dir, **kw)
        return 0
    # a real NPU run has only its own dump: keep the mixed side of the capture
    with tempfile.TemporaryDirectory() as tmp:
        run = capture(args.workload, Path(tmp) / "run", **kw)
        shutil.rmtree(run / "dump" / "fp32")
        (run / "local_error.csv").unlink(missing_ok=True)   # needs the FP32 inputs: emulator only
        shutil.copytree(run, s.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
