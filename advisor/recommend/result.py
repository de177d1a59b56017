"""The Recommendation and its parts: typed, versioned, and saved as recommendation.json with one key per field
(named as the field), read back by ``Recommendation.from_dict`` as the same objects (``advisor.results``).

Format (docs/formats.md "recommendation.json"): ``schema`` "advisor.recommendation/1" names the family every
version of the file belongs to -- a reader of an earlier version reads a later one, which only adds keys;
``version`` (absent before version 2) says which.  Version 2: the keys of version 1 unchanged, plus ``version``
and ``dump_scope``; an edit's rank evidence (``ranks``, ``driven``) is a part of every edit report.  Version 3:
plus ``customize_dtypes`` (the customize_dtypes.cfg lines, when the advice gives an op fp16 inputs and an fp32
output) and the edit kind ``customize`` (``customize_dtypes NAME::InputDtype:...,OutputDtype:... (TYPE)``).
Version 4: plus ``engine`` and ``precision_policy`` (a torch_npu run's advice: policy edits -- keep a module or an
op in fp32, register a float function, change the autocast dtype -- with their evidence, the advised
precision_policy.json and its snippets; ``modify_mixlist`` stays, empty: a torch_npu run gets no GE list).
Version 4 also: ``training`` (a run trained over optimizer steps: the departure, the re-run candidates and the chosen
training settings -- op types in fp32, precision mode, scaler, clipping; ``TrainingAdvice``) and the snippet
``training``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import InputError
from ..mixlist import Mixlist, parse_obj
from ..results import OMIT_EMPTY, OMIT_NONE, TRANSIENT, from_json, register_codec, result, to_json
from .edits import Edit

SCHEMA = "advisor.recommendation/1"
VERSION = 4
HOW_TRAINING = "measured (re-ran the training steps)"


def _decode_edit(x: Any, where: str) -> Edit:
    try:
        return Edit.parse(str(x))
    except ValueError as e:
        raise InputError(where, str(e)) from None


register_codec(Mixlist, lambda m: m.to_dict(), lambda d, where: parse_obj(d, where))
register_codec(Edit, str, _decode_edit)


def _opt(**kw: Any) -> Any:
    return field(default=None, metadata=OMIT_NONE, **kw)


@dataclass
class PlanSummary:
    """A list's final error (``how``: measured / replayed / replayed, incomplete / estimated) and its time and
    low-precision share (estimated by the time model, ``time_how``); a measured summary also says whether it
    meets the tolerance, why not, on which steps and (multi-rank runs) which ranks fail."""

    final_rel_l2: float | None = None
    final_nonfinite: bool | None = None
    final_cosine: float | None = None
    time_us: float = 0.0
    casts: int = 0
    low_precision_share: float = 0.0
    fp32_forfeited_us: float = 0.0
    how: str = ""
    time_how: str = "estimated (cost model anchored to the profile's kernel times)"
    meets_tolerance: bool | None = _opt()
    reasons: list[str] | None = _opt()
    steps: list[int] | None = _opt()
    failing_ranks: list[int] | None = _opt()


@dataclass
class Predicted:
    """recommendation.json ``predicted``: the start list (``base``), the recommended one, the measured run."""

    base: PlanSummary = field(default_factory=PlanSummary)
    recommended: PlanSummary = field(default_factory=PlanSummary)
    base_meets_tolerance: bool | None = None
    recommended_meets_tolerance: bool = False
    time_change_us: float = 0.0
    time_model: str = ""
    how: str = ""
    measured: PlanSummary | None = _opt()
    with_performance_edits: PlanSummary | None = _opt()


@dataclass
class MinimalityCheck:
    """One edit of the set: does the set without it still meet the tolerance (replayed, estimated, or on
    which ranks it fails)?"""

    edit: str
    meets_tolerance_without_it: bool | None = _opt()
    how: str | None = _opt()
    without_it: dict[str, Any] | None = _opt()
    ranks_failing_without_it: list[int] | None = _opt()


@dataclass
class Minimality:
    proved: bool = True
    statement: str = ""
    checks: list[MinimalityCheck] = field(default_factory=list)
    how: str | None = _opt()

    @property
    def by_replay(self) -> bool:
        """1-minimal by complete replays: every one-smaller set was replayed (every op re-executed) and fails."""
        return (self.proved and self.how == "replayed" and bool(self.checks)
                and all(c.how == "replayed" and c.meets_tolerance_without_it is False for c in self.checks))


@dataclass
class Alternative:
    """Another edit set beside the recommendation (fewest edits, the closest when nothing passes, the type-level
    advice when per-op keeps won, the matching mixed mode's list)."""

    edits: list[Edit] = field(default_factory=list)
    how: str = ""
    predicted: PlanSummary = field(default_factory=PlanSummary)
    note: str | None = _opt()
    mode: str | None = _opt()
    modify_mixlist: Mixlist | None = _opt()
    fp32_types: list[str] | None = _opt()
    keep_dtype: list[str] | None = _opt()


@dataclass
class WorstInstance:
    node: str
    type: str
    precision_before: str
    precision_after: str
    why_before: dict[str, Any]
    error: float | None = None
    non_finite: bool = False
    local_rel_l2: float | None = None
    local_nonfinite: bool | None = None
    received_rel_l2: float | None = None
    inrnd_rel_l2: float | None = None
    fused: str | None = _opt()      # how GE's graph fusion made the node (advisor.fusion.describe_node)


@dataclass
class LocalVsReceived:
    instances: int
    worst_local_rel_l2: float | None = None
    worst_received_rel_l2: float | None = None
    worst_out_rel_l2: float | None = None
    any_local_nonfinite: bool = False


@dataclass
class EditEvidence:
    worst_instances: list[WorstInstance] = field(default_factory=list)
    local_vs_received: LocalVsReceived | None = None
    reason: str | None = None
    predicted_final_with: PlanSummary = field(default_factory=PlanSummary)
    how: str = ""


@dataclass
class Flip:
    """An op instance whose precision the edit changes, with semantics' Why before and after."""

    node: str
    type: str
    before: str
    after: str
    why_before: dict[str, Any]
    why_after: dict[str, Any]


@dataclass
class EditReport:
    """One edit of a recommendation and its evidence (recommendation.json ``edits[]``); on a multi-rank run the
    ranks whose replay fails without it (``ranks``) and the sentence saying so (``driven``)."""

    DERIVED = {"edit": lambda r: _edit_parts(r.edit)}

    edit: Edit
    purpose: str = "fix"                  # "fix" | "performance"
    explanation: str = ""
    evidence: EditEvidence = field(default_factory=EditEvidence)
    predicted_time_change_us: float = 0.0
    predicted_flips: list[Flip] = field(default_factory=list)
    predicted_flip_count: int = 0
    predicted_without_this_edit: PlanSummary | None = _opt()
    ranks: list[int] | None = _opt()
    driven: str | None = _opt()


def _edit_parts(e: Edit) -> dict[str, str]:
    """What readers of recommendation.json find beside an edit's sentence."""
    return {"list": e.list, "action": e.action, "type": e.type, "kind": e.kind,
            **({"op": e.op, "line": e.line} if e.is_override else {})}


@dataclass
class PolicyEditReport:
    """One policy edit of a torch_npu recommendation (``precision_policy.edits[]``): the edit's sentence and its
    parts, the ops it flips (semantics' Why before and after), its time cost and the replayed error with it alone
    and of the set without it."""

    edit: str
    kind: str                             # keep-module | keep-op | register-float-function | dtype
    module: str | None = _opt()
    op: str | None = _opt()
    function: str | None = _opt()
    dtype: str | None = _opt()
    purpose: str = "fix"
    explanation: str = ""
    predicted_time_change_us: float = 0.0
    predicted_flips: list[Flip] = field(default_factory=list)
    predicted_flip_count: int = 0
    predicted_final_with: PlanSummary = field(default_factory=PlanSummary)
    predicted_without_this_edit: PlanSummary | None = _opt()


@dataclass
class PolicyAdvice:
    """recommendation.json ``precision_policy`` (version 4): a torch_npu run's advice in PyTorch's terms."""

    amp: str = "autocast"
    dtype: str = "fp16"
    start_policy: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)       # precision_policy.json as written
    edits: list[PolicyEditReport] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    snippet: str = ""                                           # the apply_policy call
    plain_pytorch: str | None = _opt()                          # the same in plain PyTorch, where it exists


@dataclass
class ToleranceLimits:
    """The limits the searches judge by, and the whole shared Tolerance (``compare.tolerance``)."""

    rel_l2_max: float = 1e-2
    cosine_min: float = 0.999
    finite: bool = True
    shared: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, tol: Any) -> "ToleranceLimits":
        return cls(tol.max_rel_l2, tol.min_cosine, tol.require_finite, tol.to_dict())


@dataclass
class Calibration:
    """How the error model was fitted to the measured run (the estimated path only; empty otherwise)."""

    measured_final_rel_l2: float | None = _opt()
    model_final_rel_l2_before_scaling: float | None = _opt()
    global_scale: float | None = _opt()
    note: str | None = _opt()


@dataclass
class SearchStats:
    """What the search spent and how it ended (replay: replays, phase; error model: evaluations)."""

    method: str | None = _opt()
    budget: int | None = _opt()
    replays: int | None = _opt()
    evaluations: int | None = _opt()
    candidates: int | None = _opt()
    candidate_types: int | None = _opt()
    largest_set: int | None = _opt()
    enumerated: int | None = _opt()
    phase: str | None = _opt()
    granularity: str | None = _opt()
    per_op_enumerated: int | None = _opt()
    per_op_truncated: bool | None = _opt()
    exhaustive_truncated: bool | None = _opt()
    truncated: bool | None = _opt()
    seconds: float | None = _opt()
    max_edits: int | None = _opt()

    @classmethod
    def of(cls, stats: Mapping[str, Any]) -> "SearchStats":
        return cls(**{k: v for k, v in stats.items() if k in cls.__dataclass_fields__})


@dataclass
class RankMeasured:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    final_rel_l2: float | None = None
    final_nonfinite: bool = False


@dataclass
class SetCheck:
    """One edit set replayed on one rank."""

    ok: bool | None
    how: str
    final_rel_l2: float | None = _opt()
    final_nonfinite: bool | None = _opt()
    final_cosine: float | None = _opt()
    reasons: list[str] | None = _opt()


@dataclass
class RankRow:
    rank: int
    measured: RankMeasured | None = None
    culprits: list[str] = field(default_factory=list)
    with_list: SetCheck | None = None


@dataclass
class RankEvidence:
    """A multi-rank run's per-rank evidence (recommend/ranks.py)."""

    ranks: list[int] = field(default_factory=list)
    failing: list[int] = field(default_factory=list)
    recommended_on: list[int] = field(default_factory=list)
    per_rank: list[RankRow] = field(default_factory=list)
    edits: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class TrainingCandidate:
    """One re-run candidate and what its re-run measured."""

    changes: list[str]
    kinds: list[str]
    fixes: bool
    departure_step: int | None = None
    departure_reason: str | None = None
    skipped_share: float = 0.0
    last_loss_rel_diff: float | None = None
    low_precision_share: float | None = None
    steps: int = 0
    how: str = HOW_TRAINING


@dataclass
class TrainingAdvice:
    """recommendation.json ``training``: the departure, the candidates re-run and the chosen training settings."""

    steps: int
    horizon: int
    departure: dict | None = None
    precision: bool = True
    chosen: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)     # mode, black_add, scaler, scaler_options, clip_grad_norm
    candidates: list[TrainingCandidate] = field(default_factory=list)
    reruns: int = 0
    fp32_reused_steps: int = 0
    seconds: float = 0.0
    how: str = HOW_TRAINING
    snippet: str | None = field(default=None, metadata=OMIT_NONE)


@result(SCHEMA, VERSION)
@dataclass
class Recommendation:
    """The result of ``recommend``: recommendation.json (its keys are these fields) and modify_mixlist.json."""

    status: str                                   # recommended | no-change-needed | no-solution | profile-only | loss-scale
    ok: bool = False                              # the recommended list meets the tolerance (replayed / estimated / measured)
    confirmed: bool = False                       # recommend never re-runs: confirmation is tune's
    mode: str = ""
    soc: str = ""
    tolerance: ToleranceLimits = field(default_factory=ToleranceLimits)
    modify_mixlist: Mixlist = field(default_factory=Mixlist)     # relative to the chip defaults, start composed in
    start_mixlist: Mixlist | None = None
    edits: list[EditReport] = field(default_factory=list)        # accuracy edits (the recommendation)
    performance_edits: list[EditReport] = field(default_factory=list)
    performance_mixlist: Mixlist | None = None                   # accuracy + performance edits
    predicted: Predicted = field(default_factory=Predicted)
    minimality: Minimality = field(default_factory=Minimality)
    fewest_edit_alternative: Alternative | None = None
    closest: Alternative | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)  # heterogeneous records, each with its "kind"
    calibration: Calibration = field(default_factory=Calibration)
    search: SearchStats = field(default_factory=SearchStats)
    loss_scale: dict[str, Any] | None = None      # compare's training signals (with the loss-scale advice)
    notes: list[str] = field(default_factory=list)
    snippets: dict[str, str] = field(default_factory=dict)
    keep_dtype: list[str] = field(default_factory=list)          # keep_dtype.cfg lines (the run's own and the advised)
    customize_dtypes: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)   # customize_dtypes.cfg lines
    # (the run's own and the advised), when the advice customizes an op
    type_level_alternative: Alternative | None = None            # when per-op keeps won: the best type-level advice
    mixed_mode_alternative: Alternative | None = None            # force_fp16 & co: a mixed mode keeping more low
    ranks: RankEvidence | None = field(default=None, metadata=OMIT_NONE)
    dump_scope: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)   # ops whose tensors would let the
    # next run's candidates be replayed (a statistics-only run: msprobe ``tensor_list``)
    files: dict[str, str] = field(default_factory=dict, metadata=OMIT_EMPTY)   # what write_outputs wrote
    engine: str | None = field(default=None, metadata=OMIT_NONE)               # torch_npu (v4); absent: ge
    precision_policy: PolicyAdvice | None = field(default=None, metadata=OMIT_NONE)   # a torch_npu run's advice
    training: TrainingAdvice | None = field(default=None, metadata=OMIT_NONE)   # a run trained over steps
    curve: dict[str, Any] = field(default_factory=dict, metadata=TRANSIENT)    # the report's error curve
    out_dir: str | None = field(default=None, metadata=TRANSIENT)   # the folder the snippets name

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "no-solution" else 0

    @property
    def mixlist(self) -> Mixlist:
        """The spelling before recommendation.json v2 (``modify_mixlist``), kept for existing callers."""
        return self.modify_mixlist

    @property
    def fixes(self) -> frozenset[Edit]:
        """The accuracy edits (relative to the start list)."""
        return frozenset(r.edit for r in self.edits)

    def to_dict(self) -> dict:
        from ..fsutil import json_safe
        return json_safe(to_json(self))

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "recommendation.json") -> "Recommendation":
        """recommendation.json read back: this version's and version 1's (no ``version`` key)."""
        if not isinstance(d, Mapping) or str(d.get("schema", "")).split("/")[0] != SCHEMA.split("/")[0]:
            raise InputError(where, f"not a recommendation (schema {d.get('schema') if isinstance(d, Mapping) else None!r})")
        v = d.get("version", 1)
        if not isinstance(v, int) or v > VERSION:
            raise InputError(where, f"version {v!r}: this advisor reads recommendation.json up to version {VERSION}")
        body = {k: x for k, x in d.items() if k not in ("schema", "version")}
        return from_json(cls, body, where)


__all__ = ["Recommendation", "PolicyAdvice", "PolicyEditReport", "EditReport", "EditEvidence", "PlanSummary",
           "Predicted", "Minimality", "MinimalityCheck", "Alternative", "WorstInstance", "LocalVsReceived", "Flip",
           "ToleranceLimits", "Calibration", "SearchStats", "RankEvidence", "RankRow", "RankMeasured", "SetCheck", "TrainingAdvice",
           "TrainingCandidate", "HOW_TRAINING", "SCHEMA", "VERSION"]
