"""advisor tune --parallel K: up to K lists run at once (one runner per slot), the same confirmed list as one at a
time, every execution counted, and the journal exact across kill -9 with two runs in flight."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from advisor.runners import CommandRunner, EmulatorRunner
from test_tune_loop import FakeRunner, FakeStages, World
from advisor.tune import tune

HERE = Path(__file__).resolve().parent


class SlotRunner(FakeRunner):
    """A FakeRunner that can run in several slots at once; every slot records when its runs overlap."""

    def __init__(self, world, block_file=None, log=None, gate=None):
        super().__init__(world, block_file)
        self.log = log if log is not None else []
        self.gate = gate

    def slot(self, index):
        return self if index == 0 else SlotRunner(self.world, self.block_file, self.log, self.gate)

    def run(self, mixlist, mode, run_dir):
        self.log.append(("start", threading.get_ident(), time.monotonic()))
        if self.gate is not None and mixlist is not None:
            self.gate.wait(timeout=10)       # both runs of a batch must be in flight together
        r = super().run(mixlist, mode, run_dir)
        self.log.append(("end", threading.get_ident(), time.monotonic()))
        return r


def _tune(tmp, parallel, runner=None, cands=({"Exp"}, {"Sigmoid"}), world=None):
    world = world or World({"Sigmoid": (0.5, None)})
    runner = runner or SlotRunner(world)
    s = tune(runner, tmp / "out", stages=FakeStages([set(c) for c in cands]), max_runs=8, parallel=parallel)
    return s, runner


def test_parallel_reaches_the_same_list_with_two_runs_in_flight(tmp_path):
    s1, _ = _tune(tmp_path / "one", 1)
    gate = threading.Barrier(2)
    s2, r2 = _tune(tmp_path / "two", 2, runner=SlotRunner(World({"Sigmoid": (0.5, None)}), gate=gate))
    assert s1["confirmed"] and s2["confirmed"]
    assert s1["edits"] == s2["edits"] == {"black-list": {"to-add": ["Sigmoid"], "to-remove": []},
                                          "white-list": {"to-add": [], "to-remove": []}}
    starts = [t for kind, _, t in r2.log if kind == "start"]
    ends = [t for kind, _, t in r2.log if kind == "end"]
    assert starts[2] < ends[1]                                 # iter_01 and iter_02 were in flight together
    hist = s2["history"]
    assert {tuple(h["edits"]["black-list"]["to-add"]) for h in hist[1:3]} == {("Exp",), ("Sigmoid",)}
    assert s2["runs"] == s2["captures"] + 1                    # every execution counted, the reference once
    assert s2["runs"] <= s1["runs"] + 1


def test_budget_caps_a_batch(tmp_path):
    s, _ = _tune(tmp_path, 4, cands=({"Exp"}, {"Add"}, {"Mul"}, {"Tanh"}, {"Sigmoid"}))
    assert s["runs"] <= 8


def test_runners_give_one_slot_per_device_or_cpu_child():
    c = CommandRunner("python x.py", devices=["0", "1"])
    assert c.slot(1).env["ASCEND_RT_VISIBLE_DEVICES"] == "1" and c.env["ASCEND_RT_VISIBLE_DEVICES"] == "0"
    assert c.slot(2) is None and CommandRunner("python x.py").slot(1) is None
    e = EmulatorRunner("examples/mlp_exp.py:workload")
    assert e.slot(0) is e and isinstance(e.slot(1), EmulatorRunner) and e.slot(1) is not e


CHILD = r"""
import sys
sys.path.insert(0, {tests!r})
from test_tune_parallel import SlotRunner
from test_tune_loop import World, FakeStages
from advisor.tune import tune
tune(SlotRunner(World({{"Sigmoid": (0.5, None)}}), block_file={block!r}), {out!r},
     stages=FakeStages([{{"Exp"}}, {{"Sigmoid"}}]), max_runs=8, parallel=2, resume={resume})
"""


def _child(tmp_path, resume, block):
    code = CHILD.format(tests=str(HERE), block=block, out=str(tmp_path / "out"), resume=resume)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_sigkill_with_two_runs_in_flight_then_resume(tmp_path):
    block = tmp_path / "go"
    p = _child(tmp_path, False, str(block))
    started = [tmp_path / "out" / d / "run" / "started" for d in ("iter_01", "iter_02")]
    deadline = time.monotonic() + 120
    while not all(f.exists() for f in started):
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, "the two runs never started together"
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    state = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    done_before = [e["step"] for e in state["events"]]
    assert done_before == ["iter_00:run", "iter_00:judge", "iter_00:decide"]
    assert [it["done"] for it in state["iterations"][1:]] == [[], []]      # both in flight, nothing recorded
    p2 = _child(tmp_path, True, None)
    _, err = p2.communicate(timeout=300)
    assert p2.returncode == 0, err.decode()
    state = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    steps = [e["step"] for e in state["events"]]
    assert len(steps) == len(set(steps)) and steps[:3] == done_before       # nothing redone, nothing lost
    assert state["status"] == "confirmed"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["edits"]["black-list"]["to-add"] == ["Sigmoid"]
    assert not math.isnan(summary["runs"])


class ReplayedStages(FakeStages):
    """Proposals predicted to pass by replay (recommend's exact evidence)."""

    def _proposal(self, edits):
        p = super()._proposal(edits)
        p.predicted.recommended.how = "replayed"
        return p


def test_a_fix_replayed_to_pass_runs_beside_its_own_trim(tmp_path):
    """The second slot speculates on the fix passing (what replay predicts): the fix minus one edit runs beside
    it, so trimming needs no extra batch and no run is spent on a fallback candidate."""
    world = World({"Sigmoid": (0.5, None), "Exp": (0.5, None)})
    runs = {}
    for k in (1, 2):
        s = tune(SlotRunner(world), tmp_path / f"p{k}", stages=ReplayedStages([{"Exp", "Sigmoid"}, {"Add"}]),
                 max_runs=8, parallel=k)
        runs[k] = s
        assert s["confirmed"] and s["edits"]["black-list"]["to-add"] == ["Exp", "Sigmoid"]
    hist = runs[2]["history"]
    assert "of the fix scheduled beside it" in hist[2]["reason"]
    assert runs[2]["runs"] == runs[1]["runs"]               # same runs, one batch fewer
