"""Option groups: options declared once, in one place, and added to every command that takes them.

A group is a tuple of typer options and a function building one value from them; ``@uses(GROUP, ...)`` puts the
group's options into a command's signature in place of its parameter named after the group, and hands the command
the built value::

    @app.command("capture")
    @uses(CHIP_FIXED, TOLERANCE)
    def capture(target: str = typer.Argument(...), chip: Chip = None, tol: Tolerance = None) -> None:
        lists = chip.lists()

The chip group (``--soc``, ``--ops-info``, ``--cann``; a new chip-table option is one more line in ``chip_group`` and
one more field of ``Chip``), the engine group (``--engine``, ``--amp``, ``--policy``) and the tolerance group
(``compare.cli_options``) are the only declarations of those options.
A value a group refuses (``--soc nosoc``, ``--cann 7.0``, ``--min-cosine 2``) is one line and exit 2 before the
command runs."""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import typer

from ..compare.cli_options import TOLERANCE_OPTIONS
from ..compare.tolerance import Tolerance
from ..errors import AdvisorError, InputError
from ..oplists import DEFAULT_SOC, SOCS, cann_version


@dataclass(frozen=True)
class OptionGroup:
    """``name``: the command parameter the group replaces; ``options``: (parameter, annotation, typer option);
    ``build(**values)``: the value the command receives (may raise an AdvisorError: exit with its one line)."""

    name: str
    options: tuple[tuple[str, Any, Any], ...]
    build: Callable[..., Any]


def uses(*groups: OptionGroup) -> Callable[[Callable], Callable]:
    """Decorator: the command's parameters named after ``groups`` become the groups' options (at their place)."""
    def deco(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        by_name = {g.name: g for g in groups}
        missing = set(by_name) - set(sig.parameters)
        if missing:
            raise TypeError(f"{fn.__name__} has no parameter {', '.join(sorted(missing))} for its option group")
        params = []
        for p in sig.parameters.values():
            g = by_name.get(p.name)
            if g is None:
                params.append(p)
                continue
            params += [inspect.Parameter(n, p.kind, default=opt, annotation=ann)
                       for n, ann, opt in g.options]

        @functools.wraps(fn)
        def command(**kw: Any) -> Any:
            for g in groups:
                values = {n: kw.pop(n) for n, _, _ in g.options}
                try:
                    kw[g.name] = g.build(**values)
                except AdvisorError as e:
                    typer.echo(f"advisor: error: {e}", err=True)
                    raise typer.Exit(e.exit_code) from None
            return fn(**kw)

        command.__signature__ = sig.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
        return command
    return deco


# ---------------------------------------------------------------------- chip / op tables
@dataclass(frozen=True)
class Chip:
    """What ``--soc`` / ``--ops-info`` / ``--cann`` select.  ``soc`` None: the run's own (run.json), else the default
    chip; ``ops_info``: the ops-info files in the order given (None: none); ``cann`` None: the run's table version
    (run.json's, CANN 8.1.RC1 when it records none) for a command reading a run, else the current one."""

    soc: Optional[str] = None
    ops_info: Optional[List[str]] = None
    cann: Optional[str] = None

    def lists(self):
        """The op lists these options select (``oplists.load_lists``; InputError on a bad file)."""
        from ..oplists import load_lists
        return load_lists(self.soc or DEFAULT_SOC, self.ops_info, self.cann)


def _chip(soc: Optional[str], ops_info: Optional[List[str]], cann: Optional[str]) -> Chip:
    """Refuse an unknown chip or table version before any work (an --ops-info file names its own chip: its soc is
    not checked; a bad --cann is refused even then, as ``load_lists`` does)."""
    if soc is not None and not ops_info and soc not in SOCS:
        raise InputError(None, f"unknown --soc {soc!r}; choose one of {', '.join(SOCS)}")
    if cann is not None:
        cann_version(cann)
    return Chip(soc, list(ops_info) if ops_info else None, cann)


def chip_group(default_soc: Optional[str]) -> OptionGroup:
    """The chip options; ``default_soc`` None: the run's chip (commands that read a run), else that chip."""
    soc_help = ("Chip whose default white/black/gray lists apply: " + ", ".join(SOCS)
                + (" (default: run.json's, else ascend910b)." if default_soc is None else "."))
    cann_help = ("Default tables' CANN version: 9.2 (CANN 9.2.0, the default) or 8.1 (CANN 8.1.RC1)"
                 + (". On a run directory the default is its run.json's, 8.1 when it records none."
                    if default_soc is None else "."))
    return OptionGroup("chip", (
        ("soc", Optional[str], typer.Option(default_soc, "--soc", help=soc_help)),
        ("ops_info", Optional[List[str]], typer.Option(None, "--ops-info", help="Real CANN aic-<soc>-ops-info*.json "
                                                       "files to read the lists and kernel dtypes from instead "
                                                       "(repeatable: a CANN install splits them into legacy, nn, "
                                                       "math, cv, transformer; merged in the order given).")),
        ("cann", Optional[str], typer.Option(None, "--cann", help=cann_help)),
    ), _chip)


CHIP_OF_RUN = chip_group(None)            # inspect, compare, recommend, diff, replay: the run's chip by default
CHIP_FIXED = chip_group(DEFAULT_SOC)      # lint, capture, tune


# ---------------------------------------------------------------------- numerics (ops executed as the chip does)
@dataclass(frozen=True)
class NumericsChoice:
    """What ``--overflow-mode`` / ``--allow-hf32`` select (None: the run's, else the chip's default)."""

    overflow_mode: Optional[str] = None
    allow_hf32: Optional[str] = None

    def extra(self) -> dict:
        """The options given, as the capture settings and run.json carry them."""
        return {k: v for k, v in (("overflow_mode", self.overflow_mode), ("allow_hf32", self.allow_hf32)) if v}


def _numerics(overflow_mode: Optional[str], allow_hf32: Optional[str]) -> NumericsChoice:
    """A bad value is one line (exit 2) before any work; whether the chip has the mode is decided with the run."""
    if overflow_mode is not None or allow_hf32 is not None:
        from ..numerics import resolve
        resolve(DEFAULT_SOC, overflow_mode, allow_hf32)
    return NumericsChoice(overflow_mode, allow_hf32)


NUMERICS = OptionGroup("numerics", (
    ("overflow_mode", Optional[str], typer.Option(None, "--overflow-mode", help="inf_nan | saturation: the chip's "
                                                  "float overflow mode (default: the run's, else the chip's: "
                                                  "saturation on ascend910/ascend310p, inf_nan on "
                                                  "ascend910b/ascend910_93).")),
    ("allow_hf32", Optional[str], typer.Option(None, "--allow-hf32", help="conv,matmul | conv | matmul | none: fp32 "
                                               "ops that run in HF32 (default: the run's, else the chip's: conv on "
                                               "ascend910b/ascend910_93, none elsewhere).")),
), _numerics)


# ---------------------------------------------------------------------- engine (torch_npu eager or GE)
@dataclass(frozen=True)
class EngineChoice:
    """What ``--engine`` / ``--amp`` / ``--policy`` select.  ``engine`` None: a new capture's default
    (``inputs.auto_engine``: torch_npu for PyTorch; also when ``--amp`` / ``--policy`` is given), a run's own (run.json; ge when it
    does not say)."""

    engine: Optional[str] = None
    amp: Optional[str] = None
    policy: Optional[str] = None

    def capture_kw(self) -> dict:
        """The capture's ``engine`` / ``amp`` / ``policy`` (``engine`` "auto" when not given)."""
        kw = {"engine": self.engine or "auto"}
        kw.update({k: v for k, v in (("amp", self.amp), ("policy", self.policy)) if v})
        return kw

    def for_run(self, run_dir: str, what: str, torch_npu: bool = False) -> str:
        """The engine of the run ``what`` (recommend, replay, ...) reads (``ingest.engine``): refused (one line, exit 2)
        when the options name another than its run.json (a real run's, read from its kernel names / dumps,
        ``--engine`` overrides), and for a torch_npu run unless ``what`` advises one (``torch_npu``: its advice is a
        precision policy); ``--policy`` / ``--amp`` only for a torch_npu run (``--amp`` must be the run's)."""
        from pathlib import Path
        from ..ingest.run import engine_of, read_run_json
        info = engine_of(run_dir)           # run.json's; a real run's read from its kernel names / dumps
        eng = info.engine
        if self.engine is not None and self.engine != eng:
            if info.declared:
                raise InputError(run_dir, f"the run was captured with engine {eng}, not {self.engine} (--engine)")
            eng = self.engine               # a real run: --engine overrides what its files suggest
        if torch_npu and eng == "torch_npu":
            p = Path(run_dir) / "run.json"
            meta = read_run_json(p) if p.is_file() else {}
            # a real run (no run.json): --amp says how its program cast, which its dumps cannot tell
            if self.amp is not None and info.declared and self.amp != (meta.get("amp") or "autocast"):
                raise InputError(run_dir, f"the run used amp {meta.get('amp')}, not {self.amp} (--amp)")
            return eng
        if torch_npu and (self.amp is not None or self.policy is not None):
            raise InputError("--policy" if self.policy is not None else "--amp",
                             f"applies to a torch_npu run; this run is {eng} (its candidates are mixlists)")
        if eng == "torch_npu" or self.amp is not None or self.policy is not None:
            raise InputError(run_dir, f"{what} searches GE lists; advice for a torch_npu run (a precision policy) is "
                                      "not available in this version: " + ("capture with --engine ge for list "
                                      "advice" if info.declared else f"{info.why}; --engine ge reads it as GE"))
        return eng


def _engine(engine: Optional[str], amp: Optional[str], policy: Optional[str]) -> EngineChoice:
    """Bad values and files are one line (exit 2) before any work; ``--amp`` / ``--policy`` mean torch_npu."""
    from ..precision_policy import AMP_MODES, read_policy
    from ..semantics.torch_npu import ENGINES
    if engine is not None and engine not in ENGINES:
        raise InputError("--engine", f"must be torch_npu or ge, not {engine!r}")
    if amp is not None and amp not in AMP_MODES:
        raise InputError("--amp", f"must be one of {', '.join(AMP_MODES)}, not {amp!r}")
    if engine == "ge" and (amp is not None or policy is not None):
        raise InputError("--amp" if amp is not None else "--policy", "applies to --engine torch_npu (GE takes "
                                                                     "--mode and --mixlist)")
    if policy is not None:
        pol = read_policy(policy)
        if amp is not None and pol.amp != amp:
            raise InputError(policy, f"the policy is for amp {pol.amp}, not {amp} (--amp)")
    return EngineChoice(engine, amp, policy)


ENGINE = OptionGroup("engine", (
    ("engine", Optional[str], typer.Option(None, "--engine", help="torch_npu | ge: the engine the run is emulated on "
                                           "(default for a new PyTorch capture: torch_npu; ge with a GE-only option "
                                           "(--mixlist, --keep-dtype, --customize-dtypes, --ops-info, a GE --mode) or "
                                           "an optimizer; tune: ge unless --engine torch_npu, --amp or --policy; ONNX "
                                           "and TensorFlow models always run on ge; for a run: its run.json's, else read "
                                           "from its files -- eager kernel names or a PyTorch msprobe dump mean "
                                           "torch_npu, docs/formats.md -- which --engine overrides).")),
    ("amp", Optional[str], typer.Option(None, "--amp", help="torch_npu: autocast | apex-o1 | apex-o2 | none "
                                        "(default: autocast in mixed_float16 / mixed_bfloat16, none in "
                                        "allow_fp32_to_fp16 / must_keep_origin_dtype).")),
    ("policy", Optional[str], typer.Option(None, "--policy", help="torch_npu: a precision_policy.json to apply "
                                           "(docs/formats.md), as advisor.npu.apply_policy applies it.")),
), _engine)


# ---------------------------------------------------------------------- tolerance
def _tolerance(**values: Any) -> Tolerance:
    from ..compare.tolerance import tolerance_from_options
    try:
        return tolerance_from_options(**values)
    except ValueError as e:
        raise InputError(None, str(e)) from None


__all__ = ["OptionGroup", "uses", "Chip", "chip_group", "CHIP_OF_RUN", "CHIP_FIXED", "NUMERICS", "NumericsChoice",
           "ENGINE", "EngineChoice", "TOLERANCE", "Tolerance"]

TOLERANCE = OptionGroup("tol", tuple((n, bool if n in ("allow_nonfinite", "msprobe_rule") else float, opt)
                                     for n, opt in TOLERANCE_OPTIONS.items()), _tolerance)
