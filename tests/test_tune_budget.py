"""tune's run budget on the synthetic world of test_tune_loop: a list replay proved 1-minimal is confirmed at its
first pass (``--measure-minimality`` runs the smaller lists), a tune with budget left measures the closest
candidate when nothing is predicted to pass, and a proposal made on statistics alone runs with tensors dumped
around the first departure."""
from __future__ import annotations

import json
import math

from test_tune_loop import FakeRunner, FakeStages, World, black, proposal  # tests/ is on sys.path

from advisor.recommend.result import Alternative, Minimality, MinimalityCheck, PlanSummary
from advisor.tune import mixlist_of, read_journal, tune


class ReplayProvedStages(FakeStages):
    """recommend's proposals carry replay's proof: every one-smaller list replayed and failing."""

    def _proposal(self, edits):
        rec = super()._proposal(edits)
        rec.predicted.recommended.how = "replayed"
        rec.minimality = Minimality(True, "1-minimal by replay", [
            MinimalityCheck(str(e), False, "replayed", {"worst_rel_l2": None, "non_finite": True}) for e in edits],
            "replayed")
        return rec


TWO = World({"Exp": (math.inf, None), "Sigmoid": (math.inf, None)})


def test_a_list_replay_proved_1_minimal_is_confirmed_at_its_first_pass(tmp_path):
    runner = FakeRunner(TWO)
    s = tune(runner, tmp_path / "out", stages=ReplayProvedStages([{"Exp", "Sigmoid"}]), max_runs=8)
    assert s["confirmed"] and s["edits"]["black-list"]["to-add"] == ["Exp", "Sigmoid"]
    assert s["runs"] == s["runs_to_first_confirmation"] == 3 and runner.calls == 2
    assert "1-minimal by replay" in s["stop_reason"]
    m = s["minimality"]
    assert m["proved"] and m["how"] == "replayed"
    assert [c["edit"] for c in m["checks"]] == ["black/to-add/Exp", "black/to-add/Sigmoid"]
    assert all(c["replayed"] and c["meets_tolerance_without_it"] is False and c["replayed_non_finite"]
               for c in m["checks"])                   # read back from iter_00's recommendation.json


def test_measure_minimality_runs_every_smaller_list(tmp_path):
    runner = FakeRunner(TWO)
    s = tune(runner, tmp_path / "out", stages=ReplayProvedStages([{"Exp", "Sigmoid"}]), max_runs=8,
             measure_minimality=True)
    assert s["confirmed"] and s["runs_to_first_confirmation"] == 3 and s["runs"] == 5 and runner.calls == 4
    assert s["minimality"]["proved"] and s["minimality"]["how"] == "measured"
    assert s["measure_minimality"] is True


def test_a_list_not_proved_by_replay_is_still_trimmed_by_measurement(tmp_path):
    s = tune(FakeRunner(TWO), tmp_path / "out", stages=FakeStages([{"Exp", "Sigmoid"}]), max_runs=8)
    assert s["confirmed"] and s["runs_to_first_confirmation"] == 3 and s["runs"] == 5
    assert s["minimality"]["how"] == "measured"


class ClosestStages(FakeStages):
    """A recommender that predicts no list to pass and names the closest it found."""

    def recommend(self, run, base, exclude_types, steps=None, avoid=(), widen=False):
        self.recommend_calls += 1
        rec = proposal(base, ok=False)
        m = mixlist_of(black("Exp"))
        rec.closest = Alternative(sorted(black("Exp"), key=str), "estimated", PlanSummary(final_rel_l2=0.02),
                                  "closest", modify_mixlist=m)
        return rec


def test_without_a_predicted_pass_the_closest_candidate_is_measured(tmp_path):
    s = tune(FakeRunner(World({"Exp": (0.5, None)})), tmp_path / "out", stages=ClosestStages([]), max_runs=6)
    h = s["history"]
    assert s["confirmed"] and h[1]["edits"]["black-list"]["to-add"] == ["Exp"]
    assert "none is predicted to pass" in h[1]["reason"] and h[1]["predicted"]["ok"] is False


class ScopedRunner(FakeRunner):
    """A runner that dumps tensors for named ops beside the statistics (like the emulator's dump_tensors)."""

    def __init__(self, world):
        super().__init__(world)
        self.scopes = []

    def scoped_dumps(self):
        return True

    def run(self, mixlist, mode, run_dir, dump_tensors=()):
        self.scopes.append(tuple(dump_tensors))
        return super().run(mixlist, mode, run_dir)


class EstimatedStages(FakeStages):
    """Proposals made on statistics alone: recommend names the ops whose tensors the next run should dump."""

    def _proposal(self, edits):
        rec = super()._proposal(edits)
        rec.dump_scope = ["Aten.exp.default.0", "Aten.mul.Tensor.1"]
        return rec


def test_a_proposal_made_on_statistics_runs_with_tensors_around_the_first_departure(tmp_path):
    runner = ScopedRunner(World({"Exp": (math.inf, None)}))
    s = tune(runner, tmp_path / "out", stages=EstimatedStages([{"Exp"}]), max_runs=6)
    assert s["confirmed"] and runner.scopes == [(), ("Aten.exp.default.0", "Aten.mul.Tensor.1")]
    st = read_journal(tmp_path / "out" / "tune_state.json")
    assert st.iterations[1].dump_tensors == ["Aten.exp.default.0", "Aten.mul.Tensor.1"]
    assert s["history"][1]["dump_tensors"] == 2
    # a runner that cannot dump chosen ops is never asked to
    plain = FakeRunner(World({"Exp": (math.inf, None)}))
    s2 = tune(plain, tmp_path / "plain", stages=EstimatedStages([{"Exp"}]), max_runs=6)
    assert s2["confirmed"] and "dump_tensors" not in json.loads(
        (tmp_path / "plain" / "tune_state.json").read_text())["iterations"][1]
