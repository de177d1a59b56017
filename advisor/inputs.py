"""What a command can refuse before its first run or capture: a refused input costs seconds, one line and exit 2,
and leaves nothing behind (no output folder, no journal, no ``.bak`` of a previous output).

* ``load_mixlist``: a user's modify_mixlist, refused in a mode that applies none (``rundir.check_mixlist_mode``, as
  ATC does), refused whole when GE rejects it (``mixlist.load``), its op types checked by the one rule
  (``mixlist.check_op_types``) against the graph it will apply to -- the run's graph when the run exists, else every type a capture can give
  its graph (``capture_graph_types``: the emulator's aten / ONNX / TF -> GE tables);
* ``check_mode``, ``check_timeout``, ``check_tune_options``, ``check_holdout``, ``check_capture_inputs``: the
  options' own ranges and the files they name.

The checks of the chip (``--soc``) and the tolerance live with their option groups (``commands.options``)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import InputError
from .mixlist import Mixlist, check_op_types, load
from .oplists import OpLists
from .rundir import check_mixlist_mode

# how the emulator names ops its tables do not map (they exist only once a capture made them): any such name passes
UNMAPPED_PREFIXES = ("aten.", "onnx:")


class CaptureGraphTypes(frozenset):
    """The op types a capture can give its graph, plus every name of an unmapped op (``aten.<op>``, ``onnx:<Op>``)."""

    def __contains__(self, t: object) -> bool:
        return frozenset.__contains__(self, t) or (isinstance(t, str) and t.startswith(UNMAPPED_PREFIXES))


@lru_cache(maxsize=1)
def capture_graph_types() -> CaptureGraphTypes:
    """Every GE op type the emulator maps a framework op to: torchair's aten table, ATC's ONNX parser table (every
    opset), the TF adapter's renames (other TF types keep their TF name, in the chip tables when GE has a kernel for
    them), and the D variants graph fusion makes of them (``fusion.D_TYPES``)."""
    from .fusion import D_TYPES
    from .onnx.opmap import table as onnx_table
    from .tf.opmap import TF_TO_GE
    aten = json.loads(resources.files("advisor").joinpath("data/aten_to_ge.json").read_text(encoding="utf-8"))
    types = {e["type"] for e in aten["ops"].values()}
    for e in onnx_table()["ops"].values():
        types.add(e["type"])
        types.update((e.get("by_opset") or {}).values())
    types.update(TF_TO_GE.values())
    types.update(v[0] for v in D_TYPES.values())
    return CaptureGraphTypes(types)


def load_mixlist(path: str | None, lists: OpLists, graph_types: Iterable[str] | None = None,
                 mode: str | None = None) -> Mixlist | None:
    """A command's ``--mixlist`` file (None when not given), refused (exit 2) when ``mode`` applies no mixlist
    (``check_mixlist_mode``, ATC's words), when GE rejects the file (``mixlist.load``: JSON, VerifyMixlist's
    templates), or when it names an op type that exists nowhere: not in any chip's tables, the lists in use, the
    graph-engine types, nor ``graph_types`` (default: those a capture can give its graph)."""
    if not path:
        return None
    if mode is not None:
        check_mixlist_mode(mode, path)
    m = load(path)
    if graph_types is None:
        check_op_types(m, lists, capture_graph_types(), where="the op types a capture maps ops to")
    else:
        check_op_types(m, lists, graph_types)
    return m


def check_mode(mode: str | None, option: str = "--mode", needs_mixlist: bool = False) -> None:
    """A precision mode GE knows (``needs_mixlist``: one of the modes that apply a mixlist)."""
    if mode is None:
        return
    from .semantics import mode_info, uses_mixlist
    try:
        mode_info(mode)
    except ValueError as e:
        raise InputError(option, str(e)) from None
    if needs_mixlist and not uses_mixlist(mode):
        raise InputError(option, f"{mode} does not apply a mixlist; tune needs mixed_float16 or mixed_bfloat16")


def check_timeout(timeout: float | None) -> float | None:
    """``--timeout S``: seconds > 0, or 0 for no limit (None)."""
    if timeout is None:
        return None
    if not (timeout >= 0 and math.isfinite(timeout)):
        raise InputError("--timeout", f"must be a number of seconds > 0 (0: no limit), not {timeout:g}")
    return None if timeout == 0 else float(timeout)


def check_tune_options(mode: str, max_runs: int, holdout: int | None, parallel: int,
                       loss_scale: float | None) -> None:
    """tune's own options (the loop checks them too, for library callers)."""
    check_mode(mode, needs_mixlist=True)
    if max_runs < 2:
        raise InputError("--max-runs", "needs at least 2 (the FP32 reference and one mixed run)")
    if holdout is not None and holdout < 0:
        raise InputError("--holdout", "must be >= 0")
    if parallel < 1:
        raise InputError("--parallel", "must be >= 1")
    if loss_scale is not None and not (0 < loss_scale < math.inf):
        raise InputError("--loss-scale", f"must be a finite number > 0, not {loss_scale}")


def check_holdout(holdout: int | None, batches: int | None) -> None:
    """``--holdout K`` must leave one calibration batch of the workload's ``batches`` (None: not known before a
    run, e.g. a user's command; the loop checks it after the first run)."""
    if holdout is None or batches is None or holdout <= batches - 1:
        return
    raise InputError("--holdout", f"{holdout} held-out batches, but the workload has {batches} batch"
                                  f"{'es' if batches != 1 else ''} and needs one for calibration: at most "
                                  f"{batches - 1}")


def check_capture_inputs(inputs: Sequence[str] | None, input_shapes: Sequence[str] | None,
                         dump: str | None, loss_scale: float | None) -> None:
    """capture's (and an emulator tune's) own files and values: ``--inputs`` files exist and are regular files,
    ``--input-shape`` parses, ``--dump`` is tensors or stats, ``--loss-scale`` is finite and > 0."""
    from .fsutil import check_user_file
    for f in inputs or ():
        check_user_file(Path(f), "an .npz of the model's inputs (--inputs)")
    if input_shapes:
        from .onnx.model import parse_input_shapes
        parse_input_shapes(list(input_shapes))
    if dump not in (None, "tensors", "stats"):
        raise InputError("--dump", f"expected tensors or stats, not {dump!r}")
    if loss_scale is not None and not (0 < loss_scale < math.inf):
        raise InputError("--loss-scale", f"must be a finite number > 0, not {loss_scale:g}")


def check_run_dir(path: str, option: str = "--profile") -> Path:
    """A command's run directory: it exists and is a folder -- a file (a bare kernel_details.csv) gets the folder
    that holds it as the hint."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such run directory")
    if not p.is_dir():
        raise InputError(p, f"is a file; {option} takes the run directory that holds it (with the run's dumps and "
                            f"run.json when there are any): {option} {p.parent}")
    return p


# ---------------------------------------------------------------------- the engine a PyTorch run is emulated on
TORCH_NPU_MODES = ("mixed_float16", "mixed_bfloat16", "allow_fp32_to_fp16", "must_keep_origin_dtype")


@dataclass(frozen=True)
class EngineSettings:
    """``engine`` (torch_npu | ge), and for torch_npu the ``config`` (amp, low dtype, chip, ACL_PRECISION_MODE) and the
    ``policy`` to apply (None: none)."""

    engine: str = "ge"
    config: Any = None
    policy: Any = None

    def to_meta(self) -> dict:
        """run.json's fields: ``engine`` always; ``amp``, ``acl_precision_mode``, ``policy`` for torch_npu."""
        if self.engine != "torch_npu":
            return {"engine": "ge"}
        return {**self.config.to_meta(), "policy": "precision_policy.json" if self.policy is not None else None}


# The command line's engine for a PyTorch capture or tune given no --engine / --amp / --policy (``auto_engine``,
# ``tune_engine``); the library (``emulator.capture``, ``tune.tune``) takes ge unless told.
PYTORCH_DEFAULT_ENGINE = "torch_npu"


def auto_engine(framework: str, mode: str | None = None, ge_options: Iterable[str] = ()) -> str:
    """The engine a new capture takes when none is given: ``PYTORCH_DEFAULT_ENGINE`` (torch_npu) for a PyTorch
    workload, and ge whenever an option only GE has is given (a mixlist, keep_dtype / customize_dtypes files, ops-info
    files, a precision mode torch_npu eager does not take); ge for ONNX and TensorFlow models (they reach GE through
    ATC or the TF adapter)."""
    if framework != "pytorch" or any(ge_options) or (mode is not None and mode not in TORCH_NPU_MODES):
        return "ge"
    return PYTORCH_DEFAULT_ENGINE


# tune's engine when none is given.  Options that name GE artefacts mean GE lists (as capture takes ge for them, with a
# note); loop options the torch_npu tune does not have are refused with torch_npu (``TORCH_NPU_TUNE_REFUSES``).
TUNE_GE_OPTIONS = ("--mixlist", "--keep-dtype", "--customize-dtypes", "--ops-info", "--inputs", "--input-shape",
                   "--granularity")
TORCH_NPU_TUNE_REFUSES = {"--loss-scale": "a static loss scale is tuned for GE lists only",
                          "--measure-minimality": "a torch_npu tune stops at its first confirmed policy",
                          "--ray": "a torch_npu tune runs its policies locally (emulator slots or --devices)",
                          "--npus-per-run": "applies to --ray, which a torch_npu tune does not take"}


def tune_engine(engine: str | None, amp: str | None, policy: Any, *, onnx: bool, command: bool,
                journal_engine: str | None, ge_given: Sequence[str]) -> tuple[str, str | None]:
    """(engine, note) of ``advisor tune`` before its workload is loaded: ``--engine`` as given; torch_npu with
    ``--amp`` / ``--policy``; a resumed tune's journal's (``journal_engine``: torch_npu, else ge); ge for an ONNX
    TARGET, for ``--runner command`` (advisor cannot tell what the command runs: ``--engine torch_npu`` gives it
    ``ADVISOR_POLICY``) and -- with a one-line note -- when an option of ``TUNE_GE_OPTIONS`` is given; else "auto",
    decided by ``auto_engine`` once the workload is loaded (torch_npu for PyTorch; ge for TensorFlow and, with a
    note, for a workload with an optimizer)."""
    if engine is not None:
        return engine, None
    if amp is not None or policy is not None:
        return "torch_npu", None
    if journal_engine is not None:
        return journal_engine, None
    if onnx or command:
        return "ge", None
    if ge_given:
        return "ge", (f"{ge_given[0]} is GE's: tuning GE lists (engine ge); without it a PyTorch workload tunes a "
                      "torch_npu precision policy")
    return "auto", None


def engine_settings(engine: str | None, amp: str | None, mode: str | None, policy: Any, soc: str | None,
                    framework: str = "pytorch", ge_options: dict | None = None, where: str | None = None
                    ) -> EngineSettings:
    """The engine a capture runs on, checked before any work (one line, exit 2): ``engine`` None is the library's
    default, ge; "auto" is the command line's (``auto_engine``: torch_npu for PyTorch; torch_npu when ``amp`` or ``policy`` is
    given); torch_npu only for PyTorch workloads and without GE's options; ``amp`` (autocast | apex-o1 | apex-o2 |
    none; default autocast in a mixed mode, else none) and
    ``policy`` (a precision_policy.json path or a PrecisionPolicy) only for torch_npu; ``mode``: mixed_float16 /
    mixed_bfloat16 pick the low dtype, allow_fp32_to_fp16 / must_keep_origin_dtype the ACL_PRECISION_MODE."""
    from .precision_policy import PrecisionPolicy, read_policy
    from .semantics.torch_npu import ENGINES, AmpConfig
    ge_options = {k: v for k, v in (ge_options or {}).items() if v}
    if engine is None:
        engine = "ge"
    elif engine == "auto":      # the command line's default: --amp / --policy mean torch_npu
        engine = "torch_npu" if amp is not None or policy is not None else auto_engine(framework, mode, ge_options)
    if engine not in ENGINES:
        raise InputError("--engine", f"must be torch_npu or ge, not {engine!r}")
    if engine == "ge":
        if amp is not None:
            raise InputError("--amp", "applies to --engine torch_npu (GE takes --mode and a mixlist)")
        if policy is not None:
            raise InputError("--policy", "applies to --engine torch_npu (a GE run takes --mixlist)")
        return EngineSettings("ge")
    if framework != "pytorch":
        kind = "an ONNX" if framework == "onnx" else "a TensorFlow"
        raise InputError(where or "--engine", f"--engine torch_npu emulates PyTorch eager; {kind} model runs on GE "
                                              "(use --engine ge)")
    if ge_options:
        opt = next(iter(ge_options))
        raise InputError(f"--{opt.replace('_', '-')}", "is GE's (torch_npu eager has no mixlist or per-op dtype "
                                                       "files): use --engine ge, or a --policy for torch_npu")
    mode = mode or "mixed_float16"
    if mode not in TORCH_NPU_MODES:
        raise InputError("--mode", f"torch_npu takes {', '.join(TORCH_NPU_MODES)}, not {mode!r} (GE's modes: "
                                   "--engine ge)")
    mixed = mode in ("mixed_float16", "mixed_bfloat16")
    amp = amp or ("autocast" if mixed else "none")
    cfg = AmpConfig(amp, "bf16" if mode == "mixed_bfloat16" else "fp16", soc or "ascend910b",
                    None if mixed else mode)
    pol = read_policy(policy) if isinstance(policy, (str, Path)) else policy
    if pol is not None:
        if not isinstance(pol, PrecisionPolicy):
            raise InputError("--policy", f"expected a precision_policy.json path, not {type(pol).__name__}")
        if pol.amp != cfg.amp:
            raise InputError(pol.source or "--policy", f"the policy is for amp {pol.amp}; this run uses {cfg.amp} "
                                                       "(--amp)")
        if pol.dtype != cfg.dtype and cfg.amp != "none":
            raise InputError(pol.source or "--policy", f"the policy's dtype is {pol.dtype}; --mode {mode} runs "
                                                       f"{cfg.dtype}")
    return EngineSettings("torch_npu", cfg, pol)
