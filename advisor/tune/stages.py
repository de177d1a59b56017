"""The loop's only door to the other stages: read a run (``analysis.analyze``, once per run), judge it (compare's
items, once per set of steps), write its comparison, ask recommend for the next list (a ``Recommendation``, the
type recommend returns and writes).  Tests substitute a fake ``Stages``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from ..compare.tolerance import Tolerance
from ..errors import InputError
from ..fsutil import atomic_write_json
from ..mixlist import Mixlist
from ..recommend.result import Recommendation


class Stages:
    """Adapters to analysis / compare / recommend for one tune (chip, ops-info, mode and tolerance fixed)."""

    def __init__(self, tolerance: Tolerance | None = None, soc: str | None = None, ops_info: Any = None,
                 mode: str | None = None, granularity: str = "type", cann: str | None = None):
        self.tolerance = tolerance or Tolerance()
        self.soc, self.ops_info, self.mode, self.cann = soc, ops_info, mode, cann
        self.granularity = granularity     # recommend's: "type" (list edits), "op" / "auto" (per-op keeps too)

    # --- read and judge
    def load(self, run_dir: Path) -> Any:
        """The run's Analysis (the loop keeps it: every later question about the run goes to this object)."""
        from ..analysis import analyze
        return analyze(run_dir, tolerance=self.tolerance, soc=self.soc, ops_info=self.ops_info, mode=self.mode,
                       cann=self.cann)

    def steps(self, run: Any) -> list[int]:
        """The run's steps (batches) with both a mixed and an FP32 dump."""
        if not run.steps:
            raise InputError(run.path, "the mixed and FP32 dumps share no step")
        return list(run.steps)

    def final_metrics(self, run: Any, steps: Sequence[int] | None = None) -> list[dict]:
        """Per step of ``steps`` (default: all) what the verdict is judged on (outputs, loss, every gradient),
        as compare judges it (``Analysis.judged``: computed once per set of steps, shared with recommend)."""
        return [dict(x) for x in run.judged(None if steps is None else list(steps))[0]]

    def verdict(self, per_step: list[dict]) -> dict:
        """The shared Tolerance's verdict on those items."""
        return self.tolerance.judge(per_step).to_dict()

    def write_comparison(self, run: Any, out_dir: Path, steps: Sequence[int] | None = None) -> str | None:
        """The iteration's comparison: compare's attribution on the calibration steps as JSON.  Returns the first
        op whose error exceeds the tolerance (the first departure), None when none does."""
        att = run.attribution(list(steps) if steps is not None else None)
        atomic_write_json(Path(out_dir) / "comparison.json",
                          {"steps": list(steps) if steps is not None else "all", **att.to_dict()})
        return att.first_exceeding

    def low_precision_time_share(self, run: Any) -> float | None:
        """The measured low-precision share of float kernel time (costmodel.kernel_low_share, all steps)."""
        return run.measured_low_share

    def predicted_share(self, run: Any, mixlist: Mixlist | None, keeps: Sequence[str] = (),
                        customize: Sequence[str] = ()) -> float | None:
        """The predicted low-precision share of a list (and keep_dtype / customize_dtypes lines) on this run's
        graph (cost model; no run spent)."""
        lists = run.lists_with(mixlist)
        if not keeps and not customize:
            return run.low_share(run.plan_of(lists))
        from ..recommend.edits import edits_of, overrides_with
        ov = overrides_with(run.plan.overrides, edits_of(None, keeps, customize))
        return run.low_share(run.compiled.what_if(run.plan, lists, ov))

    # --- recommend
    def recommend(self, run: Any, base: Mixlist | None, exclude_types: Sequence[str],
                  steps: Sequence[int] | None = None, avoid: Iterable[Any] = (),
                  widen: bool = False) -> Recommendation:
        """recommend on a measured run (its Analysis), starting from ``base`` (the list that run used, with the
        keep lines the run applied), never editing ``exclude_types`` nor proposing a list with the plan of one in
        ``avoid`` (already run: mixlists, (mixlist, keep lines) pairs, or edit sets with per-op overrides)."""
        from ..recommend import recommend
        return recommend(run, self.tolerance, base_mixlist=base, exclude=tuple(exclude_types), steps=steps,
                         avoid=avoid, widen=widen, granularity=self.granularity)

    def write_recommendation(self, rec: Recommendation, out_dir: Path) -> None:
        """The recommendation a proposal came from, in the iteration's folder (recommend's own outputs)."""
        from ..recommend import write_outputs
        write_outputs(rec, out_dir)
