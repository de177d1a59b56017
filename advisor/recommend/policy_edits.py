"""Policy edits: the code-level changes the torch_npu advice proposes (``PolicyEdit``), applied to a
``PrecisionPolicy``, and what the user pastes (the ``apply_policy`` call and, where one exists, the plain-PyTorch
equivalent) and the files recommend writes for a torch_npu run (precision_policy.json, apply_policy.py,
recommendation.json, report.html; never a GE mixlist)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from ..fsutil import atomic_write_text, json_text, same_but_timing
from ..precision_policy import DTYPE_NAMES, KeepRule, PolicyRules, PrecisionPolicy

KEEP_MODULE, KEEP_OP, REGISTER_FLOAT, DTYPE = "keep-module", "keep-op", "register-float-function", "dtype"
KINDS = (KEEP_MODULE, KEEP_OP, REGISTER_FLOAT, DTYPE)
POLICY_NAME = "precision_policy.json"
SNIPPET_NAME = "apply_policy.py"


@dataclass(frozen=True)
class PolicyEdit:
    """One policy edit: keep module ``module`` in fp32; keep aten op ``op`` in fp32 (within ``module`` when
    given); ``amp.register_float_function`` of ``function`` (Apex O1); run autocast in ``dtype``."""

    kind: str
    module: str | None = None
    op: str | None = None
    function: str | None = None
    dtype: str | None = None

    def __str__(self) -> str:
        if self.kind == KEEP_MODULE:
            return f"keep module {self.module!r} in fp32" if self.module else "keep the whole model (module '') in fp32"
        if self.kind == KEEP_OP:
            return f"keep op {self.op} in fp32" + (f" within {self.module!r}" if self.module else " everywhere")
        if self.kind == REGISTER_FLOAT:
            return f"register_float_function {self.function}"
        return f"autocast dtype {DTYPE_NAMES.get(self.dtype or '', self.dtype)}"

    def __lt__(self, other: "PolicyEdit") -> bool:
        return self.sort_key < other.sort_key

    @property
    def sort_key(self) -> tuple:
        return (self.kind, self.module or "", self.op or "", self.function or "", self.dtype or "")

    @property
    def slot(self) -> str:
        """A set holds one edit per slot (one dtype; one rule per module / op / function)."""
        return DTYPE if self.kind == DTYPE else str(self)

    def apply(self, pol: PrecisionPolicy) -> PrecisionPolicy:
        r = pol.rules
        if self.kind == DTYPE:
            return replace(pol, dtype=self.dtype)
        if self.kind == REGISTER_FLOAT:
            return replace(pol, rules=PolicyRules(r.keep_fp32, tuple(dict.fromkeys(r.register_float_function +
                                                                                  (self.function,)))))
        rule = KeepRule(module=self.module) if self.kind == KEEP_MODULE else KeepRule(module=self.module, op=self.op)
        return replace(pol, rules=PolicyRules(tuple(dict.fromkeys(r.keep_fp32 + (rule,))), r.register_float_function))


def with_edits(base: PrecisionPolicy, edits: Iterable[PolicyEdit]) -> PrecisionPolicy:
    pol = base
    for e in sorted(edits):
        pol = e.apply(pol)
    return replace(pol, source=None)


# ---------------------------------------------------------------------- what the user pastes
def apply_snippet(policy: PrecisionPolicy, path: str) -> str:
    """The ``apply_policy`` call realising ``policy`` (advisor.npu.apply_policy), where it goes for the amp."""
    where = {"autocast": "after building the model, before the training / inference loop",
             "apex-o1": "before amp.initialize (it registers Apex's float functions)",
             "apex-o2": "after amp.initialize (it makes kept modules' weights fp32 again)",
             "none": "after building the model"}[policy.amp]
    lines = ["# advisor recommend: the precision policy for torch_npu (" + where + ")",
             "from advisor.npu import apply_policy", f"applied = apply_policy(model, {path!r})"]
    if policy.amp == "autocast" and policy.dtype == "bf16":
        lines.append("# and run autocast in bfloat16: torch.autocast(\"npu\", dtype=torch.bfloat16)")
    return "\n".join(lines) + "\n"


def plain_pytorch(policy: PrecisionPolicy, edits: Iterable[PolicyEdit]) -> str | None:
    """The edits in plain PyTorch / Apex, where each has a plain form (None: some edit is an op rule, which only a
    dispatcher-level kernel reaches for operator syntax such as ``h * h``: use apply_policy)."""
    out = ["import torch"]
    for e in sorted(edits):
        if e.kind == KEEP_OP:
            return None
        if e.kind == DTYPE:
            out.append(f"# {e}: run the forward under torch.autocast(\"npu\", dtype=torch."
                       f"{DTYPE_NAMES[e.dtype or 'fp16']})")
        elif e.kind == REGISTER_FLOAT:
            mod, _, fn = (e.function or "").rpartition(".")
            out.append(f"amp.register_float_function({mod}, {fn!r})   # before amp.initialize")
        elif policy.amp == "autocast":
            out += [f"# {e}: its inputs cast to fp32, autocast disabled inside it",
                    f"_m = model.get_submodule({e.module!r})",
                    "_m.register_forward_pre_hook(lambda m, a: tuple(x.float() if torch.is_tensor(x) and "
                    "x.is_floating_point() else x for x in a))",
                    "_m.forward = torch.autocast(\"npu\", enabled=False)(_m.forward)"]
        else:
            return None
    return "\n".join(out) + "\n"


def write_policy_outputs(rec, out_dir: str | Path) -> dict[str, Path]:
    """precision_policy.json, apply_policy.py, recommendation.json and report.html of a torch_npu recommendation
    (an existing file with other content kept as ``<name>.bak``)."""
    from ..report.html import render_recommendation
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    adv = rec.precision_policy

    def put(key: str, name: str, text: str, same=None) -> None:
        kept = atomic_write_text(out / name, text, keep_existing=True, same=same)
        paths[key] = out / name
        if kept is not None:
            paths[f"kept:{name}"] = kept
    put("policy", POLICY_NAME, json_text(adv.policy))
    snippet = adv.snippet + ("\n# the same in plain PyTorch:\n" + "\n".join(
        ("# " + ln) if ln else ln for ln in adv.plain_pytorch.splitlines()) + "\n" if adv.plain_pytorch else "")
    put("snippet", SNIPPET_NAME, snippet)
    rec.files = {k: str(v) for k, v in paths.items()}
    d = rec.to_dict()
    put("recommendation", "recommendation.json", json_text(d) + "\n", same=same_but_timing)
    put("report", "report.html", render_recommendation(d))
    return paths


__all__ = ["PolicyEdit", "KINDS", "KEEP_MODULE", "KEEP_OP", "REGISTER_FLOAT", "DTYPE", "with_edits",
           "apply_snippet", "plain_pytorch", "write_policy_outputs", "POLICY_NAME", "SNIPPET_NAME"]
