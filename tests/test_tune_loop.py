"""The tuning loop's logic (journal, refine, exclusion, trim, held-out, budget, failed runs) on a
small synthetic world: a fake runner whose final error is a known function of the mixlist and a
scripted recommender.  The real stages are exercised by tests/test_tune_e2e.py."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.compare.tolerance import Tolerance
from advisor.errors import InputError
from advisor.mixlist import Mixlist, load
from advisor.runners.base import FAILED, OK, Runner, RunResult
from advisor.recommend import Recommendation
from advisor.recommend.result import PlanSummary, Predicted
from advisor.tune import Edit, Stages, Surrogate, edits_of, mixlist_of, tune

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------- synthetic world
class World:
    """Final rel_l2 per step = base + sum of hazard errors of the op types not black-listed.
    ``hazards``: type -> (error, steps it shows in or None = all); error inf = non-finite."""

    def __init__(self, hazards: dict, steps: int = 3, base: float = 1e-4, types=("MatMulV2", "Exp", "Sigmoid", "Add")):
        self.hazards, self.steps, self.base, self.types = hazards, steps, base, types

    def step_metrics(self, mixlist: Mixlist | None) -> list[dict]:
        black = set(mixlist.black_add) if mixlist else set()
        out = []
        for s in range(self.steps):
            err = self.base
            for t, (e, only) in self.hazards.items():
                if t not in black and (only is None or s in only):
                    err += e
            finite = math.isfinite(err)
            rel = err if finite else float("nan")
            cos = max(-1.0, 1 - 0.5 * rel * rel) if finite else float("nan")
            out.append({"step": s, "output": {"cosine": cos, "rel_l2": rel, "finite": finite}})
        return out

    def low_share(self, mixlist: Mixlist | None) -> float:
        black = set(mixlist.black_add) if mixlist else set()
        return 0.9 - 0.1 * len(black)


class FakeRunner(Runner):
    name = "fake"

    def __init__(self, world: World, block_file: str | None = None, fail_on: frozenset = frozenset()):
        self.world, self.block_file, self.fail_on = world, block_file, fail_on
        self.calls = 0

    def describe(self) -> dict:
        return {"runner": "fake"}

    def run(self, mixlist, mode, run_dir):
        self.calls += 1
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "started").write_text(str(os.getpid()))
        if self.block_file and mixlist is not None:
            while not Path(self.block_file).exists():   # the kill test SIGKILLs us here
                time.sleep(0.05)
        if edits_of(mixlist) in self.fail_on:
            return RunResult(str(run_dir), FAILED, "exited with code 3", 3, 0.0, False, 1)
        (run_dir / "result.json").write_text(json.dumps({
            "mixlist": (mixlist or Mixlist()).to_dict(), "steps": self.world.step_metrics(mixlist),
            "low_share": self.world.low_share(mixlist)}))
        return RunResult(str(run_dir), OK, "", 0, 0.0, True, 2)


def proposal(mixlist: Mixlist | None, ok: bool = True, rel_l2: float | None = 1e-4,
             low_share: float | None = None) -> Recommendation:
    """What a scripted recommender answers: a Recommendation proposing ``mixlist`` (None: the default lists)."""
    summary = PlanSummary(final_rel_l2=rel_l2 if ok else None, final_nonfinite=False if ok else None,
                          low_precision_share=low_share or 0.0, how="estimated" if ok else "")
    return Recommendation("recommended" if ok else "no-solution", ok, modify_mixlist=mixlist or Mixlist(),
                          predicted=Predicted(recommended=summary))


def black(*types: str) -> frozenset:
    return frozenset(Edit("black-add", t) for t in types)


class FakeStages(Stages):
    """Scripted recommender.  additive: proposes base + the first candidate set with a type not in
    the base and none excluded (like recommend searching from the measured list); queue: returns
    the candidates in order, one per call, whatever the base (to script odd proposals)."""

    def __init__(self, candidates, tolerance=None, queue: bool = False):
        super().__init__(tolerance or Tolerance())
        self.candidates = [black(*c) for c in candidates]
        self.queue = queue
        self.recommend_calls = 0
        self.steps_seen = []

    def load(self, run_dir):
        return json.loads((Path(run_dir) / "result.json").read_text())

    def steps(self, run):
        return [x["step"] for x in run["steps"]]

    def final_metrics(self, run, steps=None):
        return [x for x in run["steps"] if steps is None or x["step"] in steps]

    def write_comparison(self, run, out_dir, steps=None):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "final.json").write_text(json.dumps(run["steps"]))

    def low_precision_time_share(self, run):
        return run["low_share"]

    def _proposal(self, edits):
        return proposal(mixlist_of(edits), low_share=0.9 - 0.1 * len(edits))

    def predicted_share(self, run, mixlist):
        return None          # the world has no cost model: trimming goes in edit order

    def recommend(self, run, base, exclude_types, steps=None, avoid=(), widen=False):
        self.recommend_calls += 1
        self.steps_seen.append(steps)
        cur = edits_of(base)
        if self.queue:
            return self._proposal(self.candidates.pop(0)) if self.candidates else proposal(None, ok=False)
        for c in self.candidates:
            new = c - cur
            if new and not {e.type for e in new} & set(exclude_types):
                return self._proposal(cur | c)
        return proposal(base, ok=False)


def run_tune(tmp_path, world, candidates, **kw):
    stages = FakeStages(candidates, kw.pop("tolerance", None), kw.pop("queue", False))
    runner = kw.pop("runner", None) or FakeRunner(world)
    s = tune(runner, tmp_path / "out", stages=stages, **kw)
    return s, stages, runner


# ---------------------------------------------------------------------- behaviour
def test_control_confirms_with_default_lists(tmp_path):
    s, stages, runner = run_tune(tmp_path, World({}), [])
    assert s["confirmed"] and s["runs"] == 2 and runner.calls == 1
    assert s["edits"]["black-list"]["to-add"] == []
    out = tmp_path / "out"
    assert load(out / "modify_mixlist.json").is_empty()
    assert json.loads((out / "summary.json").read_text())["history"][0]["ok"] is True
    assert "iter_00" in (out / "report.html").read_text()


def test_planted_hazard_confirmed_after_one_fix(tmp_path):
    s, _, runner = run_tune(tmp_path, World({"Exp": (math.inf, None)}), [{"Exp"}])
    assert s["confirmed"]
    assert s["runs"] == 3 and runner.calls == 2          # reference + default + fixed
    assert s["edits"]["black-list"]["to-add"] == ["Exp"]
    assert s["final"]["finite"] is True and s["final"]["rel_l2"] < 1e-2
    out = tmp_path / "out"
    assert load(out / "modify_mixlist.json").black_add == ("Exp",)
    for d in ("iter_00", "iter_01"):
        assert (out / d / "run" / "result.json").exists()
        assert (out / d / "iteration.json").exists()
        assert (out / d / "comparison" / "final.json").exists()
    assert (out / "iter_00" / "recommendation" / "recommendation.json").exists()
    assert [h["ok"] for h in s["history"]] == [False, True]


def test_failed_edit_set_is_excluded_and_overfix_trimmed(tmp_path):
    # recommend first blames Exp (wrong), then proposes Exp+Sigmoid; the loop learns that Exp
    # changed nothing and trims it
    world = World({"Sigmoid": (0.5, None)})
    s, stages, _ = run_tune(tmp_path, world, [{"Exp"}, {"Sigmoid"}], max_runs=8)
    hist = s["history"]
    assert hist[1]["edits"]["black-list"]["to-add"] == ["Exp"] and hist[1]["ok"] is False
    assert [["black", "to-add", "Exp"]] in [x["edits"] for x in s["excluded"]]
    assert hist[2]["edits"]["black-list"]["to-add"] == ["Exp", "Sigmoid"] and hist[2]["ok"]
    assert hist[3]["reason"].startswith("trim over-fix") and hist[3]["ok"]
    assert s["confirmed"] and s["edits"]["black-list"]["to-add"] == ["Sigmoid"]
    assert s["low_precision_time_share"] == pytest.approx(0.8)


def test_holdout_batch_catches_what_calibration_misses(tmp_path):
    # Exp only hurts on the last batch (held out); Sigmoid hurts everywhere
    world = World({"Sigmoid": (0.5, None), "Exp": (0.3, {2})})
    s, stages, _ = run_tune(tmp_path, world, [{"Sigmoid"}, {"Exp"}])
    assert stages.steps_seen[0] == [0, 1]          # recommend never saw the held-out step ...
    assert stages.steps_seen[1] is None            # ... until a list failed only there
    h1 = s["history"][1]
    assert h1["calibration_ok"] is True and h1["holdout_ok"] is False and h1["ok"] is False
    assert s["holdout_steps"] == [2] and s["holdout_consumed"] is True
    assert s["confirmed"] and s["edits"]["black-list"]["to-add"] == ["Exp", "Sigmoid"]


def test_budget_exhausted_reports_best_unconfirmed(tmp_path):
    world = World({"Sigmoid": (0.5, None), "Exp": (0.05, None)})
    s, _, _ = run_tune(tmp_path, world, [{"Sigmoid"}, {"Exp"}], max_runs=3)
    assert not s["confirmed"] and s["runs"] == 3 and s["status"] == "exhausted"
    assert "budget" in s["stop_reason"]
    assert s["edits"]["black-list"]["to-add"] == ["Sigmoid"]      # the closest run
    assert s["history"][-1]["rel_l2"] == pytest.approx(0.05 + 1e-4)


def test_failed_run_is_recorded_and_loop_goes_on(tmp_path):
    world = World({"Exp": (math.inf, None)})
    bad = black("Add")
    runner = FakeRunner(world, fail_on=frozenset({bad}))
    s, _, _ = run_tune(tmp_path, world, [{"Add"}, {"Exp"}], runner=runner)
    h = s["history"]
    assert h[1]["status"] == "failed" and "code 3" in h[1]["reasons"][0]
    assert h[2]["ok"] and s["confirmed"] and s["runs"] == 4


def test_surrogate_rejects_proposal_predicted_to_fail(tmp_path):
    # recommend keeps blaming Exp and Add; once both were measured useless, the learned model
    # rejects Exp+Add without running it
    world = World({"Sigmoid": (0.5, None)})
    cands = [{"Exp"}, {"Add"}, {"Exp", "Add"}, {"Sigmoid"}]
    s, _, runner = run_tune(tmp_path, world, cands, max_runs=8, queue=True)
    assert s["confirmed"] and runner.calls == 4              # default, Exp, Add, Sigmoid
    assert any(x["why"].startswith("surrogate") and x["edits"] == [["black", "to-add", "Add"],
                                                                   ["black", "to-add", "Exp"]] for x in s["excluded"])
    s2, _, runner2 = run_tune(tmp_path / "nolearn", world, cands, learn=False, max_runs=8, queue=True)
    assert s2["confirmed"] and runner2.calls == 5 and s2["runs"] == s["runs"] + 1


def test_learned_combination_of_measured_fixes(tmp_path):
    # two finite hazards; recommend finds each fix on a different branch but never both together:
    # the regression sees that Exp and Sigmoid each removed ~0.3 and runs them together
    world = World({"Exp": (0.3, None), "Sigmoid": (0.3, None)})
    cands = [{"Exp"}, {"Sigmoid"}, {"Add"}, {"Mul"}, {"Tanh"}]
    s, _, runner = run_tune(tmp_path, world, cands, max_runs=6, queue=True, perf=False)
    h = s["history"]
    assert s["confirmed"] and runner.calls == 4 and h[3]["reason"].startswith("learned: combine")
    assert s["edits"]["black-list"]["to-add"] == ["Exp", "Sigmoid"]
    s2, _, _ = run_tune(tmp_path / "nolearn", world, cands, max_runs=6, queue=True, learn=False, perf=False)
    assert not s2["confirmed"]


def test_surrogate_effects_and_trim_unit():
    sg = Surrogate()
    E, S = Edit("black-add", "Exp"), Edit("black-add", "Sigmoid")
    sg.add(frozenset(), 0.5, True)
    sg.add(frozenset({E}), 0.5, True)
    sg.add(frozenset({E, S}), 1e-4, True)
    eff = sg.effects()
    assert eff["black:to-add:Sigmoid"] < -0.4 and abs(eff["black:to-add:Exp"]) < 0.01
    assert sg.trim(frozenset({E, S}), 1e-4, 1e-2) == frozenset({S})
    assert sg.predict(frozenset({S})) == pytest.approx(1e-4, abs=5e-3)
    sg.add(frozenset({S}), float("nan"), False)   # non-finite is capped, not dropped
    assert sg.points[-1]["err"] == Surrogate.CAP


def test_existing_out_without_resume_is_refused(tmp_path):
    world = World({})
    run_tune(tmp_path, world, [])
    with pytest.raises(InputError, match="--resume"):
        tune(FakeRunner(world), tmp_path / "out", stages=FakeStages([]))


def test_resume_of_finished_journal_redoes_nothing(tmp_path):
    world = World({"Exp": (math.inf, None)})
    s, _, _ = run_tune(tmp_path, world, [{"Exp"}])
    runner = FakeRunner(world)
    s2 = tune(runner, tmp_path / "out", stages=FakeStages([{"Exp"}]), resume=True)
    assert runner.calls == 0 and s2["runs"] == s["runs"] and s2["confirmed"]


def test_resume_refuses_other_mode(tmp_path):
    world = World({})
    run_tune(tmp_path, world, [])
    with pytest.raises(InputError, match="different"):
        tune(FakeRunner(world), tmp_path / "out", stages=FakeStages([]), resume=True, mode="mixed_bfloat16")


# ---------------------------------------------------------------------- kill -9 and resume
CHILD = r"""
import math, sys
sys.path.insert(0, {tests!r})
from test_tune_loop import World, FakeRunner, FakeStages
from advisor.tune import tune
world = World({{"Sigmoid": (0.5, None)}})
cands = [{{"Exp"}}, {{"Sigmoid"}}]
tune(FakeRunner(world, block_file={block!r}), {out!r}, stages=FakeStages(cands), max_runs=8,
     resume={resume})
"""


def _child(tmp_path, resume: bool, block: str | None) -> subprocess.Popen:
    code = CHILD.format(tests=str(HERE), block=block, out=str(tmp_path / "out"), resume=resume)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_sigkill_mid_run_then_resume_does_not_redo_completed_steps(tmp_path):
    block = tmp_path / "go"
    p = _child(tmp_path, False, str(block))
    started = tmp_path / "out" / "iter_01" / "run" / "started"
    deadline = time.monotonic() + 120
    while not started.exists():
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, "child never reached iter_01"
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    state = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    done_before = [e["step"] for e in state["events"]]
    assert done_before == ["iter_00:run", "iter_00:judge", "iter_00:decide"]
    assert state["status"] == "running" and state["iterations"][1]["done"] == []
    mtime = (tmp_path / "out" / "iter_00" / "run" / "result.json").stat().st_mtime_ns
    p2 = _child(tmp_path, True, None)
    _, err = p2.communicate(timeout=300)
    assert p2.returncode == 0, err.decode()
    state = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    steps = [e["step"] for e in state["events"]]
    assert len(steps) == len(set(steps)), "a step was completed twice"
    assert steps[:3] == done_before
    assert {e["pid"] for e in state["events"][:3]} != {e["pid"] for e in state["events"][3:]}
    assert (tmp_path / "out" / "iter_00" / "run" / "result.json").stat().st_mtime_ns == mtime
    assert state["status"] == "confirmed"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["edits"]["black-list"]["to-add"] == ["Sigmoid"]
    # runs: reference + default + Exp + Exp,Sigmoid + Sigmoid; the killed attempt is not counted
    assert summary["runs"] == 5


class NoGoldenRunner(FakeRunner):
    """Like a user command on an NPU: runs carry no golden; the reference run can be made to fail."""

    def __init__(self, world, reference_fails=False):
        super().__init__(world)
        self.reference_fails = reference_fails
        self.reference_calls = 0

    def run(self, mixlist, mode, run_dir):
        r = super().run(mixlist, mode, run_dir)
        r.has_reference, r.executions = False, 1
        return r

    def reference(self, run_dir):
        self.reference_calls += 1
        Path(run_dir, "dump", "mixed").mkdir(parents=True)
        if self.reference_fails:
            return RunResult(str(run_dir), FAILED, "exited with code 9", 9, 0.0, False, 1)
        return RunResult(str(run_dir), OK, "", 0, 0.0, False, 1)


def test_separate_reference_run_counted_once(tmp_path):
    world = World({"Exp": (math.inf, None)})
    runner = NoGoldenRunner(world)
    s, _, _ = run_tune(tmp_path, world, [{"Exp"}], runner=runner)
    assert runner.reference_calls == 1 and s["confirmed"] and s["runs"] == 3 and s["executions"] == 3
    state = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    assert [e["step"] for e in state["events"]][:2] == ["iter_00:run", "reference:run"]
    assert (tmp_path / "out" / "iter_01" / "run" / "dump" / "fp32").is_dir()


def test_failed_reference_is_reported(tmp_path):
    world = World({})
    s, _, _ = run_tune(tmp_path, world, [], runner=NoGoldenRunner(world, reference_fails=True))
    assert not s["confirmed"] and "FP32 reference run failed" in s["history"][0]["reasons"][0]


def test_progress_hears_each_run_and_its_verdict(tmp_path):
    import io

    from advisor.progress import StageLog
    buf = io.StringIO()
    log = StageLog(buf, enabled=True)
    s, _, _ = run_tune(tmp_path, World({"Exp": (math.inf, None)}), [{"Exp"}], progress=log)
    lines = buf.getvalue().splitlines()
    starts = [x for x in lines if x.endswith(" ...")]
    assert len(starts) == 2 and "iter_00 (the starting lists)" in starts[0] and "iter_01 (1 list edit)" in starts[1]
    verdicts = [x for x in lines if "the tolerance" in x]
    assert [("meets" in v) for v in verdicts] == [h["ok"] for h in s["history"]] == [False, True]
    # a StageLog that is off (not a terminal, no ADVISOR_PROGRESS) writes nothing
    buf2 = io.StringIO()
    run_tune(tmp_path / "b", World({}), [], progress=StageLog(buf2, enabled=False))
    assert buf2.getvalue() == ""
