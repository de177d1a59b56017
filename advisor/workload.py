"""The workload contract of ``advisor capture``: what a TARGET function returns.

``TARGET`` is ``path/to/file.py:function`` or ``package.module:function``.  The function takes no
arguments and returns ``(model, batches)``, ``(model, batches, loss_fn)`` or a :class:`Workload`.
``batches`` is a list of tuples of tensors (a single tuple, or a single tensor, is accepted); each
is called as ``model(*batch)``.  ``loss_fn(output, batch) -> scalar tensor`` turns capture into a
training capture (forward + backward, parameter gradients dumped).  A :class:`Workload` with an ``optimizer``
(``lambda params: torch.optim.SGD(params, lr=0.1)``) trains: ``steps`` optimizer steps (batches cycle), the FP32
reference and the mixed run from the same initial weights, the mixed run under ``scaler`` (``advisor.scalers``:
``"torch_npu"``, ``"apex"``, ``"static"`` or None) with ``scaler_options`` (its source's parameter names), msprobe
dumps every ``dump_every`` steps, gradient clipping to ``clip_grad_norm`` and an ``lr_scheduler`` (docs/cli.md
"Workload contract").
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import InputError


@dataclass
class Workload:
    """A model, its batches (batch i = step i) and an optional loss (training capture)."""

    model: Any
    batches: list = field(default_factory=list)
    loss_fn: Callable | None = None
    name: str = "model"
    options: dict = field(default_factory=dict)
    optimizer: Callable | None = None     # params -> optimizer: training over ``steps`` optimizer steps
    steps: int | None = None              # optimizer steps (default: one pass over the batches)
    scaler: str | None = None             # the mixed run's loss scaler (advisor.scalers), None: no scaling
    scaler_options: dict = field(default_factory=dict)
    dump_every: int | None = None         # msprobe dumps every K steps (default: at most 10 dumped steps)
    clip_grad_norm: float | None = None   # max-norm of both runs' unscaled gradients (torch clip_grad_norm_)
    lr_scheduler: Callable | None = None  # optimizer -> scheduler, stepped after every optimizer step (both runs)

    @property
    def training(self) -> bool:
        return self.loss_fn is not None

    @property
    def trains(self) -> bool:
        """Optimizer steps (an ``optimizer`` is given): the capture trains both runs for ``steps`` steps."""
        return self.optimizer is not None


MAX_DUMPED = 10          # default dump_every: at most this many dumped steps (choice)


def dump_interval(wl: Workload, n: int) -> int:
    """The steps between dumps of a workload trained for ``n`` steps: ``dump_every``, else at most ``MAX_DUMPED``
    dumped steps."""
    return wl.dump_every or max(1, -(-n // MAX_DUMPED))


TF_MODULE_PREFIXES = ("tensorflow", "keras", "tf_keras")
INSTALL_HINT = ("this is a TensorFlow/Keras workload: install the TensorFlow extra with "
                "`pip install 'advisor[tf]'` (tensorflow-cpu) and run the same command again")


def is_tf_model(obj: Any) -> bool:
    """TensorFlow/Keras object (Keras models/layers, tf.Module, tf.function, a user subclass of keras.Model):
    decided on the class hierarchy's modules, without importing TensorFlow."""
    return any((getattr(c, "__module__", "") or "").startswith(TF_MODULE_PREFIXES) for c in type(obj).__mro__)


def is_onnx_model(obj: Any) -> bool:
    """An ``onnx.ModelProto`` (decided on its class, without importing onnx) or a ``.onnx`` path."""
    t = type(obj)
    if t.__name__ == "ModelProto" and (t.__module__ or "").startswith("onnx"):
        return True
    return isinstance(obj, str) and obj.lower().endswith(".onnx")


def framework_of(model: Any) -> str:
    """The framework of a workload's model as capture tells them apart: ``onnx`` (a ModelProto or ``.onnx`` path),
    ``tensorflow`` (a TF/Keras object, or anything not callable), else ``pytorch``."""
    if is_onnx_model(model):
        return "onnx"
    return "tensorflow" if is_tf_model(model) or not callable(model) else "pytorch"


def is_onnx_target(target: Any) -> bool:
    """A capture TARGET that is an ONNX model file (``model.onnx``) rather than a Python workload."""
    return isinstance(target, str) and target.lower().endswith(".onnx") and ":" not in target.rsplit("/", 1)[-1]


def is_missing_tf_error(exc: BaseException) -> bool:
    """True when ``exc`` is an ImportError for TensorFlow or Keras (a TF workload without the extra)."""
    if not isinstance(exc, ImportError):
        return False
    name = getattr(exc, "name", None) or ""
    return name.split(".")[0] in TF_MODULE_PREFIXES


def normalize(result: Any, source: str = "", name: str | None = None) -> Workload:
    """Turn what a TARGET function returned into a Workload (InputError when it does not fit)."""
    if isinstance(result, Workload):
        wl = result
    elif isinstance(result, tuple) and len(result) in (2, 3):
        model, batches = result[0], result[1]
        loss_fn = result[2] if len(result) == 3 else None
        wl = Workload(model=model, batches=batches, loss_fn=loss_fn)
    else:
        raise InputError(source, "the function must return (model, batches), (model, batches, loss_fn) "
                                 f"or an advisor.Workload, not {type(result).__name__}")
    if not isinstance(wl.name, str) or not isinstance(wl.options, dict):
        raise InputError(source, "Workload name must be a str and options a dict")
    if name and wl.name == "model":
        wl.name = name
    if is_onnx_model(wl.model):
        # an ONNX model (ModelProto or .onnx path): its batches (dicts of named arrays or tuples in input
        # order) are checked against the graph inputs by advisor.onnx, which the capture delegates to
        if isinstance(wl.batches, dict):
            wl.batches = [wl.batches]
        return wl
    wl.batches = _normalize_batches(wl.batches, source)
    if wl.loss_fn is not None and not callable(wl.loss_fn):
        raise InputError(source, "loss_fn must be callable as loss_fn(output, batch) -> scalar tensor")
    if is_tf_model(wl.model):
        _keras_compiled(wl)
    _check_steps(wl, source)
    if is_tf_model(wl.model):
        return wl  # delegated to advisor.tf by the capture (or refused there with install hints)
    try:
        import torch
    except ImportError:  # pragma: no cover
        raise InputError(source, "PyTorch is not installed") from None
    if not isinstance(wl.model, torch.nn.Module):
        if callable(wl.model):
            return wl
        raise InputError(source, f"model must be a torch.nn.Module (or callable), not {type(wl.model).__name__}")
    return wl


COMPILED = "compile"     # Workload(optimizer=COMPILED): a compiled Keras model's own optimizer (and loss)
STEP_FIELDS = ("steps", "scaler", "dump_every", "clip_grad_norm", "lr_scheduler")


def _keras_compiled(wl: Workload) -> None:
    """A Keras model compiled with an optimizer, given a training-over-steps field (``steps``, ``scaler``, ...) and
    no optimizer, trains with compile()'s optimizer (``optimizer=COMPILED``)."""
    if wl.optimizer is None and getattr(wl.model, "optimizer", None) is not None and (
            any(getattr(wl, k) is not None for k in STEP_FIELDS) or wl.scaler_options):
        wl.optimizer = COMPILED


def _check_steps(wl: Workload, source: str) -> None:
    """The training-over-steps fields: an optimizer needs a loss_fn; steps, a scaler, its options or dump_every
    need an optimizer; steps and dump_every are integers >= 1."""
    if wl.optimizer is None:
        given = [k for k in STEP_FIELDS if getattr(wl, k) is not None]
        given += ["scaler_options"] if wl.scaler_options else []
        if given:
            raise InputError(source, f"{', '.join(given)} need an optimizer (Workload(optimizer=lambda params: "
                                     "torch.optim.SGD(params, lr=...))): training over steps")
        return
    tf_model = is_tf_model(wl.model)
    keras_opt = tf_model and (wl.optimizer == COMPILED or callable(getattr(wl.optimizer, "apply_gradients", None)))
    if not callable(wl.optimizer) and not keras_opt:
        raise InputError(source, "optimizer must be callable as optimizer(params) -> an optimizer" + (
            ", a Keras optimizer or \"compile\" (the model's compile() optimizer)" if tf_model else ""))
    if wl.optimizer == COMPILED and getattr(wl.model, "optimizer", None) is None:
        raise InputError(source, "optimizer=\"compile\" needs a Keras model compiled with an optimizer")
    if wl.loss_fn is None and tf_model and getattr(wl.model, "loss", None) is not None:
        pass                      # compile()'s loss (advisor.tf.train)
    elif wl.loss_fn is None:
        raise InputError(source, "an optimizer needs a loss_fn: training over steps is forward, loss, backward, step")
    for k in ("steps", "dump_every"):
        v = getattr(wl, k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise InputError(source, f"{k} must be an integer >= 1, not {v!r}")
    c = wl.clip_grad_norm
    if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < float("inf")):
        raise InputError(source, f"clip_grad_norm must be a finite number > 0 (the max-norm), not {c!r}")
    if wl.lr_scheduler is not None and not callable(wl.lr_scheduler):
        raise InputError(source, "lr_scheduler must be callable as lr_scheduler(optimizer) -> a scheduler")
    if wl.scaler is not None and not isinstance(wl.scaler, str) or not isinstance(wl.scaler_options, dict):
        raise InputError(source, "scaler must be a name (\"torch_npu\", \"apex\", \"static\") or None and "
                                 "scaler_options a dict")


def _normalize_batches(batches: Any, source: str) -> list[tuple]:
    try:
        import torch
        tensor_t: tuple = (torch.Tensor,)
    except ImportError:  # pragma: no cover
        tensor_t = ()
    if tensor_t and isinstance(batches, tensor_t):
        return [(batches,)]
    if isinstance(batches, tuple):
        if batches and all(not isinstance(b, (tuple, list)) for b in batches):
            return [batches]  # a single batch given as one tuple of tensors
        batches = list(batches)
    if isinstance(batches, dict):
        raise InputError(source, "batches must be a list of tuples of tensors, not a dict")
    try:
        out = []
        for b in batches:
            if isinstance(b, (tuple, list)):
                out.append(tuple(b))
            else:
                out.append((b,))
    except TypeError:
        raise InputError(source, f"batches must be a list of tuples of tensors, not {type(batches).__name__}") from None
    except Exception as e:  # a user's iterable (a generator, a DataLoader) failed while iterated
        raise InputError(source, f"reading the batches failed: {describe_user_error(e)}") from None
    if not out:
        raise InputError(source, "batches is empty: give at least one batch (a tuple of tensors)")
    return out


def check_target(t: str) -> None:
    """Cheap check of a TARGET string before any work: the ONNX file, the .py file or the module exists (the
    workload itself is built by each capture -- building it here would cost a model load)."""
    if t.lower().endswith(".onnx"):       # an ONNX model file (advisor.onnx)
        if not Path(t).is_file():
            raise InputError(t, "no such ONNX model file")
        return
    mod, sep, fn = t.rpartition(":")
    if not sep or not mod or not fn:
        raise InputError(t, "TARGET must be path/to/file.py:function or package.module:function")
    if mod.endswith(".py"):
        if not Path(mod).is_file():
            raise InputError(mod, "no such workload file")
        return
    try:
        found = importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise InputError(t, f"cannot find module {mod!r}")


def load_target(target: str) -> Workload:
    """Import ``path/file.py:function`` or ``pkg.mod:function``, call it and normalise the result."""
    if not isinstance(target, str) or ":" not in target:
        raise InputError(target, "TARGET must be path/to/file.py:function or package.module:function")
    mod_part, _, func_name = target.rpartition(":")
    if not mod_part or not func_name.isidentifier():
        raise InputError(target, "TARGET must be path/to/file.py:function or package.module:function")
    if mod_part.endswith(".py") or "/" in mod_part or "\\" in mod_part:
        path = Path(mod_part)
        if not path.is_file():
            raise InputError(path, "no such Python file")
        mod_name = f"_advisor_target_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise InputError(path, "cannot import this file as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))
        try:
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # user code: report one line
            raise _user_error(path, e, f"importing the file failed: {describe_user_error(e)}") from None
        finally:
            try:
                sys.path.remove(str(path.resolve().parent))
            except ValueError:
                pass
        default_name = path.stem
    else:
        try:
            module = importlib.import_module(mod_part)
        except ImportError as e:
            raise _user_error(mod_part, e, f"cannot import module: {_first_line(str(e))}") from None
        except (Exception, SystemExit) as e:
            raise _user_error(mod_part, e, f"importing the module failed: {describe_user_error(e)}") from None
        default_name = mod_part.rsplit(".", 1)[-1]
    fn = getattr(module, func_name, None)
    if fn is None or not callable(fn):
        raise InputError(target, f"no function {func_name!r} in {mod_part}")
    _clear_keras_session()
    try:
        result = fn()
    except TypeError as e:
        raise InputError(target, f"calling {func_name}() failed (it must take no arguments): "
                                 f"{_first_line(str(e))}") from None
    except (Exception, SystemExit) as e:
        raise _user_error(target, e, f"{func_name}() {describe_user_error(e, 'raised ')}") from None
    wl = normalize(result, target, name=f"{default_name}")
    return wl


def tf_install_hint() -> str:
    return INSTALL_HINT


def describe_user_error(e: BaseException, verb: str = "") -> str:
    """One line for an exception from the user's code: ``Type: first line of the message``;
    ``sys.exit(...)`` is named as such (a workload must return, not end the process)."""
    if isinstance(e, SystemExit):
        return f"called sys.exit({e.code!r}) (a workload must return, not end the process)"
    msg = _first_line(str(e))
    return f"{verb}{e.__class__.__name__}" + (f": {msg}" if msg else "")


def _first_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


def _user_error(where: Any, e: BaseException, message: str) -> InputError:
    """One-line error for a failure in the user's code; a missing TensorFlow gets the install hint."""
    return InputError(where, tf_install_hint() if is_missing_tf_error(e) else message)


def _clear_keras_session() -> None:
    """Keras names layers from process-wide counters: clear them so every capture of the same workload
    in one process (tune iterations) gets the same node names."""
    keras = sys.modules.get("keras")
    if keras is None:
        return
    try:
        keras.backend.clear_session()
    except Exception:  # an unusual keras build: names may then differ between captures
        pass
