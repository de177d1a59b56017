"""advisor tune on torch_npu (issue 22 item 1): the engine a tune takes when none is given, per workload kind, and
the torch_npu loop on the tune loop's machinery -- a journal that ``--resume`` continues, ``--parallel`` slots, and
the command runner given ``ADVISOR_POLICY`` -- each run checked on what it actually applied."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.errors import InputError
from advisor.inputs import tune_engine
from advisor.precision_policy import PrecisionPolicy, read_policy
from advisor.tune.journal import STATE_FILE, TuneState, read_journal, save_journal

from torch_npu_models import optimizer_workload_source

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[1]
WL = f"{Path(__file__).with_name('torch_npu_models.py')}:lin_sq_workload"
NPU_SCRIPT = ROOT / "examples" / "npu_script.py"


# ---------------------------------------------------------------------------- the default engine
@pytest.mark.parametrize("given, want", [
    (dict(), ("auto", None)),                                              # decided on the loaded workload
    (dict(engine="ge"), ("ge", None)),
    (dict(engine="torch_npu", onnx=True), ("torch_npu", None)),            # refused later, in the engine's words
    (dict(amp="apex-o1"), ("torch_npu", None)),
    (dict(policy="p.json", command=True), ("torch_npu", None)),
    (dict(onnx=True), ("ge", None)),
    (dict(command=True), ("ge", None)),
    (dict(journal_engine="torch_npu", command=True), ("torch_npu", None)),  # a resumed tune keeps its engine
    (dict(journal_engine="ge"), ("ge", None)),
])
def test_tune_engine_before_the_workload_is_loaded(given, want):
    kw = {"engine": None, "amp": None, "policy": None, "onnx": False, "command": False, "journal_engine": None,
          "ge_given": (), **given}
    assert tune_engine(kw.pop("engine"), kw.pop("amp"), kw.pop("policy"), **kw) == want


def test_a_ge_option_picks_ge_with_a_note():
    engine, why = tune_engine(None, None, None, onnx=False, command=False, journal_engine=None,
                              ge_given=["--keep-dtype"])
    assert engine == "ge" and why.startswith("--keep-dtype is GE's") and "\n" not in why


class Chosen(Exception):
    """Raised by the stand-ins of the three loops: which one the command line started."""


@pytest.fixture
def loops(monkeypatch):
    def stand_in(name):
        def run(*a, **kw):
            raise Chosen(name)
        return run
    monkeypatch.setattr("advisor.tune.tune", stand_in("ge"))
    monkeypatch.setattr("advisor.tune.policy_loop.tune_policy", stand_in("torch_npu"))
    monkeypatch.setattr("advisor.tune.training.tune_training", stand_in("ge training"))


def _chosen(argv) -> str:
    with pytest.raises(Chosen) as e:
        main(argv)
    return str(e.value)


def _targets(tmp_path) -> dict[str, str]:
    opt = tmp_path / "opt.py"
    opt.write_text(optimizer_workload_source(2))
    (tmp_path / "m.onnx").write_bytes(b"")     # an ONNX TARGET is known by its name: never loaded here
    return {"pytorch": WL, "optimizer": f"{opt}:workload", "onnx file": str(tmp_path / "m.onnx"),
            "onnx workload": f"{ROOT / 'examples' / 'onnx_models.py'}:layernorm_bias"}


@pytest.mark.slow
@pytest.mark.parametrize("kind, want, note", [
    ("pytorch", "torch_npu", None),
    ("optimizer", "ge training", "a workload with an optimizer: tuned with engine ge"),
    ("onnx file", "ge", None),
    ("onnx workload", "ge", None),
])
def test_tune_default_engine_per_workload_kind(tmp_path, loops, capsys, kind, want, note):
    capsys.readouterr()
    assert _chosen(["tune", _targets(tmp_path)[kind], "--out", str(tmp_path / "t")]) == want
    err = capsys.readouterr().err
    assert (note in err) if note else "engine ge" not in err
    if kind == "pytorch":              # --engine ge keeps the GE list search; a GE option picks it, with its note
        assert _chosen(["tune", WL, "--engine", "ge", "--out", str(tmp_path / "t")]) == "ge"
        (tmp_path / "m.json").write_text("{}")
        assert _chosen(["tune", WL, "--mixlist", str(tmp_path / "m.json"), "--out", str(tmp_path / "t")]) == "ge"
        assert "--mixlist is GE's: tuning GE lists" in capsys.readouterr().err


@pytest.mark.slow
def test_tune_default_engine_of_a_tensorflow_workload_is_ge(tmp_path, loops):
    pytest.importorskip("tensorflow")
    assert _chosen(["tune", f"{ROOT / 'examples' / 'keras_hazard.py'}:workload", "--out", str(tmp_path / "t")]) == "ge"


@pytest.mark.parametrize("extra, word", [(["--ray", "auto"], "--ray"), (["--loss-scale", "8"], "--loss-scale"),
                                         (["--measure-minimality"], "--measure-minimality"),
                                         (["--keep-dtype", "k.cfg"], "--keep-dtype")])
def test_what_a_torch_npu_tune_does_not_take_is_one_line_before_any_run(tmp_path, capsys, extra, word):
    capsys.readouterr()
    assert main(["tune", WL, "--engine", "torch_npu", "--out", str(tmp_path / "t"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0] and "--engine ge" in err[0]
    assert not (tmp_path / "t").exists()


# ---------------------------------------------------------------------------- the journal of a torch_npu tune
def test_a_policy_iteration_reads_back_and_a_malformed_one_is_refused(tmp_path):
    pol = PrecisionPolicy.from_dict({"schema": "advisor.precision_policy/1", "amp": "autocast", "dtype": "float16",
                                     "rules": {"keep_fp32": [{"module": "sq"}]}})
    st = TuneState({"engine": "torch_npu"})
    st.new_iteration(frozenset(), "starting policy", None, policy=pol.to_dict())
    path = tmp_path / STATE_FILE
    save_journal(path, st)
    back = read_journal(path)
    assert PrecisionPolicy.from_dict(back.iterations[0].policy) == pol and not back.iterations[0].edits
    d = json.loads(path.read_text())
    d["iterations"][0]["policy"]["rules"] = {"keep_fp32": [{"modul": "sq"}]}
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match="iterations\\[0\\].policy"):
        read_journal(path)


# ---------------------------------------------------------------------------- resume, parallel, command
def _state(out: Path) -> dict:
    return json.loads((out / STATE_FILE).read_text())


def _policy_runs(out: Path) -> list[dict]:
    """Per iteration: the policy the journal scheduled, the file beside the run, what the run itself recorded."""
    rows = []
    for it in _state(out)["iterations"]:
        d = out / it["dir"]
        run = d / "run"
        meta = json.loads((run / "run.json").read_text())
        rows.append({"dir": it["dir"], "journal": PrecisionPolicy.from_dict(it["policy"]),
                     "used": read_policy(d / "precision_policy_used.json"),
                     "applied": read_policy(run / meta["policy"]) if meta.get("policy") else None,
                     "engine": meta["engine"], "mode": meta["mode"], "ok": it["verdict"]["ok"]})
    return rows


def _batches(out: Path) -> list[list[str]]:
    """The iterations run together: runs between two judges."""
    out_, cur = [], []
    for e in _state(out)["events"]:
        it, step = e["step"].split(":")
        if step == "run":
            cur.append(it)
        elif cur:
            out_.append(cur)
            cur = []
    return out_


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seq") / "t"
    assert main(["tune", WL, "--soc", "ascend910", "--out", str(out)]) == 0      # the default engine: torch_npu
    assert json.loads((out / "summary.json").read_text())["schema"] == "advisor.tune_policy/1"
    assert {r["engine"] for r in _policy_runs(out)} == {"torch_npu"}
    return out


@pytest.mark.slow
def test_a_resumed_torch_npu_tune_continues_its_journal_to_the_same_policy(sequential, tmp_path):
    from advisor.runners.emulator import EmulatorRunner
    from advisor.tune.policy_loop import tune_policy

    class Interrupted(EmulatorRunner):
        def run(self, mixlist, mode, run_dir, **kw):
            if Path(run_dir).parent.name == "iter_01":
                raise KeyboardInterrupt          # Ctrl-C as the second run starts
            return super().run(mixlist, mode, run_dir, **kw)

    out = tmp_path / "t"
    r = Interrupted(WL, soc="ascend910")
    try:
        with pytest.raises(KeyboardInterrupt):
            tune_policy(r, out, amp="autocast", mode="mixed_float16", soc="ascend910", start=None)
    finally:
        r.close()
    st = _state(out)
    assert [it["done"] for it in st["iterations"]] == [["run", "judge", "decide"], []]
    first = (out / "iter_00" / "run" / "run.json").stat().st_mtime_ns
    assert main(["tune", WL, "--soc", "ascend910", "--out", str(out), "--resume"]) == 0
    steps = [e["step"] for e in _state(out)["events"]]
    assert steps.count("iter_00:run") == 1 and steps.count("iter_01:run") == 1     # nothing done is redone
    assert (out / "iter_00" / "run" / "run.json").stat().st_mtime_ns == first
    s, s0 = (json.loads((d / "summary.json").read_text()) for d in (out, sequential))
    assert s["confirmed"] and s["policy"] == s0["policy"] and s["runs"] == s0["runs"]
    assert read_policy(out / "precision_policy.json") == read_policy(sequential / "precision_policy.json")
    # the independent check: a fresh capture with the written policy passes compare
    fresh = tmp_path / "fresh"
    assert main(["capture", WL, "--soc", "ascend910", "--policy", str(out / "precision_policy.json"),
                 "--out", str(fresh)]) == 0
    assert json.loads((fresh / "run.json").read_text())["engine"] == "torch_npu"
    assert main(["compare", "--run", str(fresh)]) == 0


@pytest.mark.slow
def test_parallel_slots_each_run_their_own_policy(sequential, tmp_path):
    out = tmp_path / "t"
    assert main(["tune", WL, "--soc", "ascend910", "--parallel", "2", "--out", str(out)]) == 0
    assert _batches(out) == [["iter_00"], ["iter_01", "iter_02"]]
    rows = _policy_runs(out)
    for r in rows:                      # what each slot's capture applied is the policy its iteration scheduled
        assert r["engine"] == "torch_npu" and r["used"] == r["journal"] and r["applied"] == r["journal"]
    assert rows[1]["applied"] != rows[2]["applied"] and rows[1]["applied"].rules.keep_fp32
    s0 = json.loads((sequential / "summary.json").read_text())
    assert json.loads((out / "summary.json").read_text())["policy"] == s0["policy"]   # what --parallel 1 confirms


WRAPPER = '''import json, os, runpy, sys
from pathlib import Path
run_dir = Path(os.environ["ADVISOR_RUN_DIR"])
run_dir.parent.mkdir(parents=True, exist_ok=True)
(run_dir.parent / "env.json").write_text(json.dumps({k: os.environ.get(k) for k in
    ("ADVISOR_POLICY", "ADVISOR_MODE", "ADVISOR_MIXLIST", "ADVISOR_REFERENCE", "ASCEND_RT_VISIBLE_DEVICES")}))
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.mark.slow
def test_the_command_runner_gets_the_policy_in_advisor_policy(tmp_path):
    """A command that writes only what a real NPU run has (no FP32 golden: ``--no-golden``), two devices: the loop's
    separate FP32 reference (no policy), then each run with its policy in ADVISOR_POLICY on its own device."""
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    out = tmp_path / "t"
    cmd = f"{sys.executable} {wrapper} {NPU_SCRIPT} {WL} --no-golden --engine torch_npu"
    p = subprocess.run([sys.executable, "-m", "advisor", "tune", "--engine", "torch_npu", "--runner", "command",
                        "--cmd", cmd, "--parallel", "2", "--devices", "0,1", "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = _policy_runs(out)
    assert len(rows) >= 2
    devices = set()
    for r in rows:
        env = json.loads((out / r["dir"] / "env.json").read_text())
        assert Path(env["ADVISOR_POLICY"]) == (out / r["dir"] / "precision_policy_used.json").resolve()
        assert read_policy(env["ADVISOR_POLICY"]) == r["journal"] == r["applied"]   # the script applied it
        assert env["ADVISOR_MIXLIST"] == "" and env["ADVISOR_MODE"] == r["mode"]
        assert r["engine"] == "torch_npu"
        devices.add(env["ASCEND_RT_VISIBLE_DEVICES"])
        assert env["ADVISOR_REFERENCE"] == "0"
    assert devices == {"0", "1"}                  # the second batch ran one policy per device
    ref = json.loads((out / "reference" / "env.json").read_text())
    assert ref["ADVISOR_REFERENCE"] == "1" and ref["ADVISOR_POLICY"] == ""    # the FP32 reference: no policy
    s = json.loads((out / "summary.json").read_text())
    assert s["runs"] == len(rows) + 1 and _state(out)["reference"]["kind"] == "separate"
    first_pass = next(r for r in rows if r["ok"])
    assert s["confirmed"] and read_policy(out / "precision_policy.json") == first_pass["journal"]
