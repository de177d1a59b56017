"""The command runner: environment contract, captured output, failures and timeouts recorded."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from advisor.errors import InputError
from advisor.mixlist import Mixlist, load
from advisor.runners import CommandRunner, make_runner
from advisor.runners.base import FAILED, NO_OUTPUT, OK, TIMEOUT

WRITER = r"""
import json, os, pathlib, sys
rd = pathlib.Path(os.environ["ADVISOR_RUN_DIR"])
env = {k: v for k, v in os.environ.items() if k.startswith("ADVISOR_")}
print("hello from the job"); print("a warning", file=sys.stderr)
k = rd / "profile" / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"; k.mkdir(parents=True)
(k / "kernel_details.csv").write_text("Name,Type\n")
d = rd / "dump" / "mixed" / "step0" / "rank0"; d.mkdir(parents=True)
(d / "dump.json").write_text("{}")
(rd / "env.json").write_text(json.dumps(env))
"""


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_env_contract_and_captured_output(tmp_path):
    r = CommandRunner(_py(WRITER), timeout=60)
    r.prepare(tmp_path)
    m = Mixlist(black_add=("Exp",))
    res = r.run(m, "mixed_bfloat16", tmp_path / "iter_01" / "run")
    assert res.status == OK and res.ok and res.returncode == 0 and not res.has_reference
    env = json.loads((tmp_path / "iter_01" / "run" / "env.json").read_text())
    assert env["ADVISOR_MODE"] == "mixed_bfloat16"
    assert Path(env["ADVISOR_RUN_DIR"]) == (tmp_path / "iter_01" / "run").resolve()
    assert load(env["ADVISOR_MIXLIST"]).black_add == ("Exp",)
    assert env["ADVISOR_DUMP_DIR"].endswith("dump/mixed") and env["ADVISOR_REFERENCE"] == "0"
    assert (tmp_path / "iter_01" / "stdout.txt").read_text().strip() == "hello from the job"
    assert "a warning" in (tmp_path / "iter_01" / "stderr.txt").read_text()
    assert res.extra["contents"] == {"profile": True, "mixed_dump": True, "golden_dump": False}


def test_default_lists_give_empty_mixlist_and_reference_flag(tmp_path):
    r = CommandRunner(_py(WRITER))
    res = r.reference(tmp_path / "reference" / "run")
    env = json.loads((tmp_path / "reference" / "run" / "env.json").read_text())
    assert res.ok and env["ADVISOR_MIXLIST"] == "" and env["ADVISOR_REFERENCE"] == "1"
    assert env["ADVISOR_MODE"] == "must_keep_origin_dtype"


def test_nonzero_exit_is_recorded_not_raised(tmp_path):
    r = CommandRunner(_py("import sys; print('boom: device error', file=sys.stderr); sys.exit(7)"))
    res = r.run(None, "mixed_float16", tmp_path / "i" / "run")
    assert res.status == FAILED and res.returncode == 7 and not res.ok
    assert "code 7" in res.message and "boom: device error" in res.message


def test_timeout_kills_the_job(tmp_path):
    r = CommandRunner(_py("import time; time.sleep(60)"), timeout=1.0)
    res = r.run(None, "mixed_float16", tmp_path / "i" / "run")
    assert res.status == TIMEOUT and "timed out" in res.message


def test_success_without_output_is_reported(tmp_path):
    res = CommandRunner(_py("pass")).run(None, "mixed_float16", tmp_path / "i" / "run")
    assert res.status == NO_OUTPUT and "wrote no profile" in res.message


def test_missing_program_is_a_failed_run(tmp_path):
    res = CommandRunner(["/nonexistent/prog"]).run(None, "mixed_float16", tmp_path / "i" / "run")
    assert res.status == FAILED and "cannot start" in res.message


def test_bad_configuration_is_input_error(tmp_path):
    with pytest.raises(InputError):
        make_runner("command", cmd=None)
    with pytest.raises(InputError):
        CommandRunner("python x.py", timeout=-1).prepare(tmp_path)
    with pytest.raises(InputError):
        make_runner("nope")


ESCAPER = r"""
import os, subprocess, sys, time
# a grandchild in its own session (setsid): outside the command's process group
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
open(sys.argv[1], "w").write(str(p.pid))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_timeout_kills_a_setsid_grandchild(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    r = CommandRunner([sys.executable, "-c", ESCAPER, str(pidfile)], timeout=8.0)
    res = r.run(None, "mixed_float16", tmp_path / "i" / "run")
    assert res.status == TIMEOUT and "process tree" in res.message
    pid = int(pidfile.read_text())
    alive = _alive(pid)   # the kill is synchronous: the tree is killed and reaped before run() returns
    if alive:
        os.kill(pid, 9)
    assert not alive, "the setsid grandchild survived the timeout"


@pytest.mark.parametrize("cmd", ['python -c "print(1)', "python 'x", "python x\\"])
def test_unbalanced_quote_in_cmd_is_one_line(tmp_path, cmd, capsys):
    with pytest.raises(InputError, match="--cmd") as e:
        make_runner("command", cmd=cmd)
    assert "\n" not in str(e.value)
    from advisor.cli import main
    assert main(["tune", "--runner", "command", "--cmd", cmd, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: --cmd") and err.count("\n") == 1 and "Traceback" not in err
