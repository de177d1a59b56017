"""The tune journal (tune_state.json) as untrusted input: strict JSON out, every field checked on
--resume, every folder it names confined to --out; --holdout beyond the batches; report.html beside
its iteration folders.  The loop logic itself is tested in tests/test_tune_loop.py."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from advisor.cli import main
from advisor.errors import InputError
from advisor.tune import STATE_FILE, tune
from test_tune_loop import FakeRunner, FakeStages, World

HERE = Path(__file__).resolve().parent


def _strict(x):
    raise ValueError(f"non-standard JSON constant {x}")


class ReplacingRunner(FakeRunner):
    """Replaces a leftover run folder before running, as the emulator and command runners do."""

    def run(self, mixlist, mode, run_dir):
        if Path(run_dir).exists():
            shutil.rmtree(run_dir)
        return super().run(mixlist, mode, run_dir)


def _finished(tmp_path: Path, hazards=None, candidates=({"Exp"},), steps: int = 3) -> tuple[Path, dict]:
    world = World(hazards if hazards is not None else {"Exp": (math.inf, None)}, steps=steps)
    out = tmp_path / "out"
    s = tune(FakeRunner(world), out, stages=FakeStages(list(candidates)))
    return out, s


def _resume(out: Path, hazards=None, steps: int = 3, **kw) -> dict:
    world = World(hazards if hazards is not None else {"Exp": (math.inf, None)}, steps=steps)
    return tune(ReplacingRunner(world), out, stages=FakeStages([{"Exp"}]), resume=True, **kw)


def _journal(out: Path) -> dict:
    return json.loads((out / STATE_FILE).read_text())


def _write(out: Path, state) -> None:
    (out / STATE_FILE).write_text(json.dumps(state))


def _refused(out: Path, **kw) -> str:
    with pytest.raises(InputError) as e:
        _resume(out, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(out / STATE_FILE)), msg
    return msg


# ---------------------------------------------------------------------- strict JSON
def test_journal_is_strict_json_with_null_for_non_finite(tmp_path):
    out, s = _finished(tmp_path)                    # iter_00's output is non-finite: rel_l2 inf, cosine nan
    text = (out / STATE_FILE).read_text()
    state = json.loads(text, parse_constant=_strict)
    assert state["iterations"][0]["measured"]["rel_l2"] is None
    assert state["iterations"][0]["measured"]["finite"] is False
    # resume of the strict journal reaches the same result without running anything
    runner = FakeRunner(World({"Exp": (math.inf, None)}))
    s2 = tune(runner, out, stages=FakeStages([{"Exp"}]), resume=True)
    assert runner.calls == 0 and s2["confirmed"] == s["confirmed"] and s2["edits"] == s["edits"]


def test_old_journal_with_nan_and_infinity_still_resumes(tmp_path):
    out, s = _finished(tmp_path)
    state = _journal(out)
    it0 = state["iterations"][0]
    it0["measured"]["rel_l2"], it0["measured"]["cosine"] = math.inf, math.nan   # as older versions wrote them
    it0["verdict"]["calibration"]["worst"] = {"step": 0, "rel_l2": math.nan}
    state["status"], state["iterations"] = "running", state["iterations"][:1]
    it0["done"], state["runs"] = ["run", "judge"], it0["runs_after"]
    (out / STATE_FILE).write_text(json.dumps(state))          # NaN / Infinity: Python's non-standard JSON
    assert "NaN" in (out / STATE_FILE).read_text()
    s2 = _resume(out)
    assert s2["confirmed"] and s2["edits"] == s["edits"] and s2["runs"] == s["runs"]
    json.loads((out / STATE_FILE).read_text(), parse_constant=_strict)


# ---------------------------------------------------------------------- malformed journals
@pytest.mark.parametrize("content", [
    b"[1, 2, 3]",                                     # a list, not the journal object
    b"\xff\xfe\x00garbage",                           # not UTF-8
    b"[" * 100000 + b"]" * 100000,                    # nested too deeply
    b'{"version": 1, "runs": ' + b"9" * 5000 + b"}",  # a 5,000-digit number
    b'{"version": 1, "iterations": [',                # truncated
    b"",                                              # empty
])
def test_unreadable_journal_is_one_line(tmp_path, content):
    out, _ = _finished(tmp_path)
    (out / STATE_FILE).write_bytes(content)
    _refused(out)


@pytest.mark.parametrize("path,value", [
    (("runs",), "3"), (("runs",), True), (("runs",), -1), (("iterations",), {}), (("iterations",), []),
    (("iterations", 0), "iter_00"), (("iterations", 0, "index"), 1), (("iterations", 0, "edits"), "Exp"),
    (("iterations", 0, "edits"), [["black", "to-add"]]), (("iterations", 1, "mixlist"), ["Exp"]),
    (("iterations", 1, "mixlist"), {"black-list": {"to-add": [7]}}), (("iterations", 0, "done"), "run"),
    (("iterations", 0, "done"), ["judge"]), (("iterations", 0, "verdict"), None), (("iterations", 0, "result"), []),
    (("iterations", 0, "measured", "rel_l2"), "small"), (("iterations", 0, "parent"), 5),
    (("iterations", 1, "predicted", "rel_l2"), "0.1"), (("reference",), "embedded"), (("excluded",), {"a": 1}),
    (("excluded",), [{"edits": [[1, 2, 3]], "why": "x", "iteration": 0}]), (("status",), "done"), (("events", 0), 3),
    (("iterations", 0, "low_precision_time_share"), [0.5]), (("holdout_steps",), "2"),
    (("iterations", 0, "proposals"), {"log": []}),
])
def test_wrong_field_types_are_refused(tmp_path, path, value):
    out, _ = _finished(tmp_path)
    state = _journal(out)
    node = state
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    _write(out, state)
    assert "tune_state.json" in _refused(out)


# ---------------------------------------------------------------------- folders outside --out
def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    (v / "run").mkdir(parents=True)
    (v / "run" / "precious.txt").write_text("mine")
    return v


def _pending_first_run(out: Path, dir_value: str) -> None:
    """The journal of a tune killed during its first run, with the iteration folder rewritten."""
    state = _journal(out)
    state["status"] = "running"
    state["iterations"] = state["iterations"][:1]
    state["iterations"][0].update(done=[], dir=dir_value)
    for k in ("result", "verdict", "measured", "next", "proposals", "runs_after", "low_precision_time_share"):
        state["iterations"][0].pop(k, None)
    state["runs"] = state["executions"] = state["captures"] = 0
    state["reference"] = None
    _write(out, state)


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink"])
def test_journal_folder_outside_out_is_refused_and_nothing_is_removed(tmp_path, how):
    victim = _victim(tmp_path)
    out, _ = _finished(tmp_path)
    if how == "symlink":
        shutil.rmtree(out / "iter_00")
        (out / "iter_00").symlink_to(victim, target_is_directory=True)
        _pending_first_run(out, "iter_00")
    else:
        _pending_first_run(out, "../victim" if how == "relative" else str(victim))
    _refused(out)
    assert (victim / "run" / "precious.txt").read_text() == "mine"


def test_cli_resume_with_a_journal_naming_another_folder_removes_nothing(tmp_path, capsys):
    # the real command runner replaces the run folder of an interrupted run: with a journal naming
    # ../victim it used to remove the user's files there
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    argv = ["tune", "--runner", "command", "--cmd", f"{sys.executable} -c pass", "--out", str(out), "--max-runs", "2"]
    assert main(argv) == 1                           # the command writes nothing: one failed run, budget spent
    _pending_first_run(out, "../victim")
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error:") and err.count("\n") == 1 and STATE_FILE in err and "outside" in err
    assert (victim / "run" / "precious.txt").read_text() == "mine"


# ---------------------------------------------------------------------- property-based fuzz
JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10, max_value=10**30),
                        st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from(["", "..", "../victim", "/", "iter_00", "iter_01", "reference/run",
                                         "run", "judge", "decide", "black", "to-add", "Exp", "ok", "running",
                                         "confirmed", "embedded", "separate", "\x00", "é"]))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                               st.dictionaries(st.text(max_size=5), kids, max_size=3)),
                           max_leaves=6)


def _like(v):
    """Values of the same JSON type as ``v``."""
    if isinstance(v, bool):
        return st.booleans()
    if isinstance(v, int):
        return st.integers(min_value=-3, max_value=12)
    if isinstance(v, float):
        return st.floats(allow_nan=True, allow_infinity=True)
    if isinstance(v, str):
        return st.sampled_from(["../victim", "/", "iter_00", "iter_01", "iter_02", "reference/run", "run", "judge",
                                "decide", "ok", "failed", "running", "confirmed", "exhausted", "embedded",
                                "separate", "black", "white", "to-add", "to-remove", "Exp", "Sigmoid", ""])
    if isinstance(v, list):
        return st.lists(st.sampled_from(v), max_size=len(v) + 1) if v else st.just([])
    return JSON_VALUES


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Finished and interrupted tune folders to mutate (built once)."""
    base = tmp_path_factory.mktemp("journals")
    done, _ = _finished(base / "done", hazards={"Sigmoid": (0.5, None)}, candidates=({"Exp"}, {"Sigmoid"}))
    killed = base / "killed" / "out"
    shutil.copytree(done, killed)
    state = _journal(killed)
    state["status"] = "running"
    state["iterations"] = state["iterations"][:2]
    state["iterations"][1]["done"] = ["run"]
    for k in ("verdict", "measured", "next", "proposals", "low_precision_time_share"):
        state["iterations"][1].pop(k, None)
    _write(killed, state)
    return [done, killed]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@pytest.mark.slow
@given(data=st.data())
def test_fuzzed_journal_resumes_or_is_refused_in_one_line(templates, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("fuzz")
    victim = _victim(root)
    out = root / "out"
    shutil.copytree(data.draw(st.sampled_from(templates)), out)
    state = _journal(out)
    raw = None
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(list(_paths(state))))
        if not path:
            state = data.draw(JSON_VALUES)
            continue
        node = state
        for k in path[:-1]:
            node = node[k]
        how = data.draw(st.sampled_from(["delete", "replace", "same type", "same type"]))
        if how == "delete" and isinstance(node, dict):
            del node[path[-1]]
        elif how == "same type":       # plausible values: most such journals pass the checks and resume
            node[path[-1]] = data.draw(_like(node[path[-1]]))
        else:
            node[path[-1]] = data.draw(JSON_VALUES)
        if not isinstance(state, (dict, list)):
            break
    text = json.dumps(state)
    if data.draw(st.integers(0, 3)) == 0:            # a torn or corrupted file
        cut = data.draw(st.integers(0, len(text)))
        raw = text[:cut].encode() + data.draw(st.binary(max_size=8))
    (out / STATE_FILE).write_bytes(raw if raw is not None else text.encode())
    try:
        s = tune(ReplacingRunner(World({"Sigmoid": (0.5, None)})), out, stages=FakeStages([{"Exp"}, {"Sigmoid"}]),
                 resume=True, max_runs=8)
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(out / STATE_FILE)), msg
        event("refused")
    else:
        assert isinstance(s, dict) and (out / "summary.json").is_file()
        event("resumed")
        json.loads((out / STATE_FILE).read_text(), parse_constant=_strict)
    assert (victim / "run" / "precious.txt").read_text() == "mine"     # nothing outside --out removed


# ---------------------------------------------------------------------- --holdout beyond the batches
def test_holdout_beyond_the_batches_is_an_error_and_resume_can_fix_it(tmp_path):
    world = World({"Exp": (math.inf, None)}, steps=3)
    out = tmp_path / "out"
    runner = FakeRunner(world)
    with pytest.raises(InputError) as e:
        tune(runner, out, stages=FakeStages([{"Exp"}]), holdout=99)
    msg = str(e.value)
    assert "--holdout" in msg and "3 batches" in msg and "at most 2" in msg and "\n" not in msg
    # the completed run is kept: resuming with a holdout that fits does not run it again
    runner2 = FakeRunner(world)
    s = tune(runner2, out, stages=FakeStages([{"Exp"}]), holdout=2, resume=True)
    assert s["holdout_steps"] == [1, 2] and runner2.calls == 1 and s["runs"] == 3
    # once a run was judged with a holdout, another holdout is a different tune
    with pytest.raises(InputError, match="different"):
        tune(FakeRunner(world), out, stages=FakeStages([{"Exp"}]), holdout=1, resume=True)


# ---------------------------------------------------------------------- report.html
def test_report_says_it_links_into_the_iteration_folders_and_inlines_the_verdicts(tmp_path):
    out, s = _finished(tmp_path)
    html = (out / "report.html").read_text()
    assert "id=\"links-note\"" in html and "iter_NN/" in html
    for h in s["history"]:
        for r in h["reasons"]:
            assert r in html
    assert str(tmp_path) not in html               # links are relative to the page
