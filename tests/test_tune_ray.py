"""advisor tune --ray: every candidate run is a Ray task asking for NPUs (Ray's "NPU" resource), on a local Ray
instance that pretends to have 2 NPUs; the same confirmed list as one local run at a time, the NPU ids Ray assigned
reach a command's ASCEND_RT_VISIBLE_DEVICES, and a run asking for more NPUs than a node has is refused."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.errors import InputError
from advisor.runners import NO_OUTPUT, CommandRunner

ROOT = Path(__file__).resolve().parents[1]
TARGET = f"{ROOT / 'examples' / 'mlp_exp.py'}:workload"


def _cli(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def ray_npus():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (the [cluster] extra)")
    import ray
    ray.init(num_cpus=2, resources={"NPU": 2}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_parallel_runs_on_ray_reach_the_local_confirmed_list(ray_npus, tmp_path):
    code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "local"), "--parallel", "1"])
    assert code == 0, err
    code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "ray"), "--parallel", "2", "--ray", "auto",
                         "--npus-per-run", "1"])
    assert code == 0, err
    local, on_ray = _summary(tmp_path / "local"), _summary(tmp_path / "ray")
    assert on_ray["confirmed"] and on_ray["edits"] == local["edits"]
    assert "Exp" in on_ray["edits"]["black-list"]["to-add"]
    assert on_ray["runs"] == on_ray["captures"] + 1            # every execution counted, the reference once
    state = json.loads((tmp_path / "ray" / "tune_state.json").read_text())
    for it in state["iterations"]:                              # each run was a Ray task holding one NPU
        assert it["result"]["extra"]["npus"] in (["0"], ["1"]), it["result"]
        assert (tmp_path / "ray" / it["dir"] / "run" / "run.json").exists()
    assert ray_npus.is_initialized()                            # an initialised Ray is used as is, not shut down
    # resuming the finished tune (on Ray or locally) redoes nothing
    code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "ray"), "--resume"])
    assert code == 0, err
    assert json.loads((tmp_path / "ray" / "tune_state.json").read_text())["events"] == state["events"]


@pytest.mark.slow
def test_a_command_run_gets_the_npus_ray_assigned(ray_npus, tmp_path):
    from advisor.runners.ray_runner import RayRunner
    show = "import os; print('devices=' + os.environ['ASCEND_RT_VISIBLE_DEVICES'])"
    r = RayRunner(CommandRunner([sys.executable, "-c", show]), "auto", npus=2)
    r.prepare(tmp_path)
    (tmp_path / "it").mkdir()
    res = r.run(None, "mixed_float16", tmp_path / "it" / "run")
    assert res.status == NO_OUTPUT and res.extra["npus"] == ["0", "1"]
    assert "devices=0,1" in (tmp_path / "it" / "stdout.txt").read_text()


def test_more_npus_than_a_node_has_is_refused_not_queued_forever(ray_npus, tmp_path):
    from advisor.runners.ray_runner import RayRunner
    with pytest.raises(InputError, match="asks Ray for 3 NPUs.*the most on one node: 2"):
        RayRunner(CommandRunner("true"), "auto", npus=3).prepare(tmp_path)
    code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "o"), "--ray", "auto", "--npus-per-run", "3"])
    assert code == 2 and err.strip().count("\n") == 0 and "--npus-per-run" in err


def test_option_combinations_and_missing_ray_are_one_line(tmp_path, monkeypatch):
    for args, what in ((["--npus-per-run", "2"], "applies to --ray"),
                       (["--ray", "auto", "--runner", "command", "--cmd", "x", "--devices", "0,1"], "not both"),
                       (["--ray", " "], "empty address")):
        code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "o"), *args])
        assert code == 2 and err.strip().count("\n") == 0 and what in err, err
    monkeypatch.setitem(sys.modules, "ray", None)   # as if the [cluster] extra were not installed
    code, _, err = _cli(["tune", TARGET, "--engine", "ge", "--out", str(tmp_path / "o"), "--ray", "auto"])
    assert code == 2 and err.strip().count("\n") == 0 and "pip install 'advisor[cluster]'" in err
    assert not (tmp_path / "o").exists()
