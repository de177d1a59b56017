"""The loop's only door to the other stages: read and judge a run (``analysis.analyze``, compare's verdict),
write its comparison, ask recommend for the next list.  Tests substitute a fake ``Stages``."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..compare.tolerance import Tolerance
from ..errors import InputError
from ..fsutil import atomic_write_json
from ..mixlist import Mixlist
from .edits import edits_of


@dataclass
class Proposal:
    """What recommend proposed for the next run (normalised from its Recommendation)."""

    mixlist: Mixlist | None
    predicted: dict = field(default_factory=dict)   # {"rel_l2", "nonfinite", "cosine", "low_share", "how"}
    ok: bool = True
    raw: Any = None                                 # the Recommendation
    perf_mixlist: Mixlist | None = None             # the list with performance edits too (if any)
    perf_predicted: dict = field(default_factory=dict)
    loss_scale: dict | None = None                  # recommend's loss-scale advice when only gradients fail
    keeps: tuple = ()                               # keep_dtype lines (per-op advice) the list adds

    @property
    def edits(self) -> frozenset:
        return edits_of(self.mixlist, self.keeps)

    @property
    def status(self) -> str | None:
        return self.raw.status if self.raw is not None else None


def normalise_prediction(p: dict) -> dict:
    """recommend's prediction dict -> {"rel_l2", "nonfinite", "cosine", "low_share", "how"}."""
    if not p:
        return {}
    return {"rel_l2": p.get("final_rel_l2"), "nonfinite": p.get("final_nonfinite"), "cosine": p.get("final_cosine"),
            "low_share": p.get("low_precision_share"), "how": p.get("how")}


class Stages:
    """Adapters to analysis / compare / recommend for one tune (chip, ops-info, mode and tolerance fixed)."""

    def __init__(self, tolerance: Tolerance | None = None, soc: str | None = None, ops_info: Any = None,
                 mode: str | None = None, granularity: str = "type", cann: str | None = None):
        self.tolerance = tolerance or Tolerance()
        self.soc, self.ops_info, self.mode, self.cann = soc, ops_info, mode, cann
        self.granularity = granularity     # recommend's: "type" (list edits), "op" / "auto" (per-op keeps too)

    # --- read and judge
    def load(self, run_dir: Path) -> Any:
        """The run's Analysis."""
        from ..analysis import analyze
        return analyze(run_dir, tolerance=self.tolerance, soc=self.soc, ops_info=self.ops_info, mode=self.mode,
                       cann=self.cann)

    def final_metrics(self, run: Any) -> list[dict]:
        """Per step what the verdict is judged on (outputs, loss, every gradient), as compare judges it."""
        if not run.steps:
            raise InputError(run.path, "the mixed and FP32 dumps share no step")
        return [dict(x) for x in run.final_metrics()]

    def judge(self, per_step: list[dict]) -> dict:
        return self.tolerance.judge(per_step).to_dict()

    def write_comparison(self, run: Any, out_dir: Path, steps: Sequence[int] | None = None) -> None:
        """The iteration's comparison: compare's attribution on the calibration steps as JSON."""
        att = run.attribution(list(steps) if steps is not None else None)
        atomic_write_json(Path(out_dir) / "comparison.json",
                          {"steps": list(steps) if steps is not None else "all", **att.to_dict()})

    def low_precision_time_share(self, run: Any) -> float | None:
        """The measured low-precision share of float kernel time (costmodel.kernel_low_share, all steps)."""
        return run.measured_low_share

    def predicted_share(self, run: Any, mixlist: Mixlist | None, keeps: Sequence[str] = ()) -> float | None:
        """The predicted low-precision share of a list (and keep lines) on this run's graph (cost model; no run
        spent)."""
        lists = run.lists_with(mixlist)
        if not keeps:
            return run.low_share(run.plan_of(lists))
        from ..recommend.edits import keep_line_edit, overrides_with
        ov = overrides_with(run.plan.overrides, [keep_line_edit(ln) for ln in keeps])
        return run.low_share(run.compiled.what_if(run.plan, lists, ov))

    # --- recommend
    def recommend(self, run: Any, base: Mixlist | None, exclude_types: Sequence[str],
                  steps: Sequence[int] | None = None, avoid: Iterable[Any] = (),
                  widen: bool = False) -> Proposal:
        """recommend on a measured run, starting from ``base`` (the list that run used, with the keep lines the
        run applied), never editing ``exclude_types`` nor proposing a list with the plan of one in ``avoid``
        (already run: mixlists, or (mixlist, keep lines) pairs).  The proposal's ``keeps``: the new keep lines."""
        from ..recommend import recommend
        rec = recommend(run, self.tolerance, base_mixlist=base, exclude=tuple(exclude_types), steps=steps,
                        avoid=avoid, widen=widen, granularity=self.granularity)
        pred = (rec.predicted or {}).get("recommended") or {}
        m = rec.mixlist if rec.mixlist is not None and not rec.mixlist.is_empty() else None
        perf = rec.perf_mixlist
        pp = (rec.predicted or {}).get("with_performance_edits") or {}
        advice = (rec.loss_scale or {}).get("loss_scale") if rec.status == "loss-scale" else None
        keeps = tuple(sorted(e.edit.line for e in rec.edits if e.edit.is_keep))
        return Proposal(m, normalise_prediction(pred), bool(rec.ok), rec,
                        perf if perf is not None and not perf.is_empty() else None,
                        normalise_prediction(pp) if pp else {}, advice, keeps)

    def write_recommendation(self, proposal: Proposal, out_dir: Path) -> None:
        if proposal.raw is None:
            atomic_write_json(Path(out_dir) / "proposal.json", {"mixlist": (proposal.mixlist or Mixlist()).to_dict(),
                                                                "predicted": proposal.predicted, "ok": proposal.ok})
            return
        from ..recommend import write_outputs
        write_outputs(proposal.raw, out_dir)
