"""advisor capture / tune from the command line on awkward workloads and outputs: a kill -9 mid-capture,
an existing --out, workloads that print, return no tensor, end the process or never return, outputs
that cannot be written; --json, --quiet, --verbose, --version alike on every command."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.cli import main

pytestmark = pytest.mark.timeout(300)

MODEL = """
import os, sys, time
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
{forward}

def workload():
{workload}
    torch.manual_seed(0)
    return M(), [(torch.randn(2, 4),), (torch.randn(2, 4) + 5,)]
"""


def _wl(tmp_path: Path, forward: str = "return self.l(x)", workload: str = "pass", name: str = "wl") -> str:
    f = tmp_path / f"{name}.py"
    f.write_text(MODEL.format(forward="\n".join("        " + ln for ln in forward.splitlines()),
                              workload="\n".join("    " + ln for ln in workload.splitlines())))
    return f"{f}:workload"


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _main(capfd, *args: str) -> _Result:
    """The CLI in this process (output captured at the file-descriptor level: the capture child's too)."""
    capfd.readouterr()
    code = main(list(args))
    out, err = capfd.readouterr()
    return _Result(code, out, err)


def _one_line_error(p, code: int = 2) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("advisor: error: ")]
    assert len(errs) == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
    return errs[0]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------- interrupted capture
@pytest.mark.slow
def test_kill_9_mid_capture_leaves_no_partial_out(tmp_path, capfd):
    marker = tmp_path / "pid"
    slow = _wl(tmp_path, forward=f"""if float(x.mean()) > 2:  # the second batch: step 0 is written by now
    open({str(marker)!r}, "w").write(str(os.getpid()))
    time.sleep(300)
return self.l(x)""")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "capture", slow, "--out", str(out), "--dump", "stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (marker.exists() and marker.read_text()):   # the test's timeout bounds every wait
        assert proc.poll() is None, "capture ended early"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()   # nothing half-written under --out
    workload_pid = int(marker.read_text())
    while _alive(workload_pid):   # the workload dies with the advisor process (else the test times out)
        time.sleep(0.05)
    p = _main(capfd, "capture", _wl(tmp_path, name="fast"), "--out", str(out), "--dump", "stats", "--no-local-error")
    assert p.returncode == 0, p.stderr
    assert (out / "run.json").is_file()
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]   # the stale partial is gone


@pytest.mark.slow
def test_existing_out_is_kept_and_said(tmp_path, capfd):
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    p = _main(capfd, "capture", _wl(tmp_path), "--out", str(out), "--dump", "stats", "--no-local-error")
    assert p.returncode == 0, p.stderr
    assert f"advisor: kept the previous contents of {out} as {out}.bak" in p.stderr
    assert (tmp_path / "run.bak" / "mine.txt").read_text() == "keep me" and (out / "run.json").is_file()
    p = _main(capfd, "--quiet", "capture", _wl(tmp_path), "--out", str(out), "--dump", "stats", "--no-local-error")
    assert p.returncode == 0 and p.stderr == "" and (tmp_path / "run.bak1" / "run.json").is_file()


def test_capture_outputs_get_the_users_umask(tmp_path, capfd):
    out = tmp_path / "run"
    old = os.umask(0o022)
    try:
        p = _main(capfd, "capture", _wl(tmp_path), "--out", str(out), "--dump", "stats", "--no-local-error")
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "run.json").stat().st_mode) == 0o644
    for f in out.rglob("*"):
        assert stat.S_IMODE(f.stat().st_mode) in (0o755, 0o644), f


# ---------------------------------------------------------------------- workloads that misbehave
@pytest.mark.parametrize("forward, workload, problem", [
    ("return 'not a tensor'", "pass", "returned str, not a tensor"),
    ("return None", "pass", "returned NoneType, not a tensor"),
    ("return x", "pass", "ran no tensor operation"),
    ("sys.exit(0)", "pass", "called sys.exit(0)"),
    ("return self.l(x)", "sys.exit(0)", "called sys.exit(0)"),
    ("os._exit(0)", "pass", "exited with status 0"),
    ("return self.l(x)", "os._exit(0)", "exited with status 0"),
    ("os.kill(os.getpid(), 9)", "pass", "killed by SIGKILL"),
])
def test_workload_that_returns_nothing_or_ends_the_process(tmp_path, forward, workload, problem, capfd):
    out = tmp_path / "run"
    err = _one_line_error(_main(capfd, "capture", _wl(tmp_path, forward, workload), "--out", str(out)))
    assert problem in err and "wl.py" in err
    assert not out.exists() and not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]


def test_workload_that_never_returns_times_out(tmp_path, capfd):
    out = tmp_path / "run"
    err = _one_line_error(_main(capfd, "capture", _wl(tmp_path, "time.sleep(600)"), "--out", str(out), "--timeout", "5"))
    assert "did not finish within 5 s" in err
    assert not out.exists() and not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]
    assert "0: no limit" in _one_line_error(_main(capfd, "capture", _wl(tmp_path), "--out", str(out), "--timeout", "-1"))


def test_capture_json_is_the_only_thing_on_stdout(tmp_path, capfd):
    noisy = _wl(tmp_path, forward="print('forward says hi'); os.write(1, b'raw fd write\\n')\nreturn self.l(x)",
                workload="print('workload says hi')")
    p = _main(capfd, "capture", noisy, "--out", str(tmp_path / "run"), "--json", "--dump", "stats")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["run_dir"] == str(tmp_path / "run") and d["mode"] == "mixed_float16" and d["steps"] == 2
    assert "workload says hi" in p.stderr and "raw fd write" in p.stderr and "captured" in p.stderr


@pytest.mark.slow
def test_tune_json_stdout_carries_only_json_and_timeout_reaches_the_emulator(tmp_path, capfd):
    noisy = _wl(tmp_path, forward="print('forward says hi'); os.write(1, b'raw fd write\\n')\nreturn self.l(x)",
                workload="print('workload says hi')")
    p = _main(capfd, "tune", "--engine", "ge", noisy, "--out", str(tmp_path / "t"), "--json", "--max-runs", "2")
    assert p.returncode in (0, 1), p.stderr
    assert json.loads(p.stdout)["runs"] >= 1
    assert "workload says hi" in (tmp_path / "t" / "iter_00" / "stdout.txt").read_text()
    hang = _wl(tmp_path, "time.sleep(600)", name="hang")
    p = _main(capfd, "tune", "--engine", "ge", hang, "--out", str(tmp_path / "h"), "--json", "--timeout", "5", "--max-runs", "2")
    assert p.returncode == 1, p.stderr
    it = json.loads((tmp_path / "h" / "iter_00" / "iteration.json").read_text())
    assert it["result"]["status"] == "timeout" and "5 s" in it["result"]["message"]


def test_tune_keeps_a_non_empty_out_and_says_so(tmp_path, capfd):
    out = tmp_path / "t"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    p = _main(capfd, "tune", "--runner", "command", "--cmd", f"{sys.executable} -c pass", "--out", str(out),
             "--max-runs", "2")
    assert f"advisor: kept the previous contents of {out} as {out}.bak" in p.stderr
    assert (tmp_path / "t.bak" / "mine.txt").read_text() == "keep me" and (out / "tune_state.json").is_file()


# ---------------------------------------------------------------------- outputs that cannot be written
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from advisor.emulator import capture
    d = tmp_path_factory.mktemp("rd")
    spec = _wl(d)
    return capture(spec, d / "run", dump="stats")


def _commands_with_out(run: Path, out: str, wl: str) -> dict[str, list[str]]:
    return {"capture": ["capture", wl, "--out", out],
            "tune": ["tune", wl, "--out", out],
            "recommend": ["recommend", "--profile", str(run), "--out", out],
            "diff": ["diff", "defaults", "defaults", "--profile", str(run), "--out", out],
            "inspect": ["inspect", "--profile", str(run), "--export", str(Path(out) / "g.graphml")]}


@pytest.mark.parametrize("cmd", ["capture", "tune", "recommend", "diff", "inspect"])
def test_out_that_is_a_file_is_one_line(tmp_path, run_dir, cmd, capsys):
    f = tmp_path / "afile"
    f.write_text("mine")
    argv = _commands_with_out(run_dir, str(f), _wl(tmp_path))[cmd]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"advisor: error: {f}") and "not a directory" in err and err.count("\n") == 1
    assert f.read_text() == "mine"


@pytest.mark.parametrize("cmd", ["capture", "tune", "recommend", "diff", "inspect"])
def test_read_only_out_folder_is_one_line(tmp_path, run_dir, cmd, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    # root writes anywhere: answer as a read-only folder would
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).startswith(str(ro)) and mode & os.W_OK
                        else real_access(p, mode, **kw))
    argv = _commands_with_out(run_dir, str(ro / "out"), _wl(tmp_path))[cmd]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"advisor: error: {ro}") and "not writable" in err and err.count("\n") == 1


def test_symlink_to_dev_zero_as_output_is_refused(tmp_path, run_dir, capsys):
    out = tmp_path / "advice"
    out.mkdir()
    (out / "recommendation.json").symlink_to("/dev/zero")
    assert main(["recommend", "--profile", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "recommendation.json" in err and "not a regular file" in err and err.count("\n") == 1
    assert os.readlink(out / "recommendation.json") == "/dev/zero"


# ---------------------------------------------------------------------- global options, --json alike
def test_version(capfd):
    p = _main(capfd, "--version")
    from advisor import __version__
    assert p.returncode == 0 and p.stdout == f"advisor {__version__}\n"


def test_quiet_and_verbose_override_advisor_progress(run_dir, capfd, monkeypatch):
    monkeypatch.setenv("ADVISOR_PROGRESS", "1")
    p = _main(capfd, "--quiet", "inspect", "--profile", str(run_dir))
    assert p.returncode == 0 and p.stderr == "" and "op graph" in p.stdout
    monkeypatch.setenv("ADVISOR_PROGRESS", "0")
    p = _main(capfd, "--verbose", "inspect", "--profile", str(run_dir))
    assert p.returncode == 0 and "advisor: " in p.stderr and " s\n" in p.stderr   # stages with their times
    p = _main(capfd, "inspect", "--profile", str(run_dir))
    assert p.returncode == 0 and p.stderr == ""
    assert _main(capfd, "--quiet", "--verbose", "inspect", "--profile", str(run_dir)).returncode == 2


@pytest.mark.slow
def test_json_behaves_alike_on_every_command(tmp_path, run_dir, capfd):
    ml = tmp_path / "m.json"
    ml.write_text('{"black-list": {"to-add": ["Exp"]}}\n')
    wl = _wl(tmp_path)
    ok = {"lint": ["lint", str(ml)],
          "inspect": ["inspect", "--profile", str(run_dir)],
          "recommend": ["recommend", "--profile", str(run_dir), "--out", str(tmp_path / "adv")],
          "diff": ["diff", "defaults", str(ml), "--profile", str(run_dir), "--out", str(tmp_path / "adv2")],
          "capture": ["capture", wl, "--out", str(tmp_path / "c"), "--dump", "stats", "--no-local-error"]}
    for name, argv in ok.items():
        plain = _main(capfd, *argv)
        p = _main(capfd, *argv, "--json")
        assert p.returncode == plain.returncode, (name, p.stderr)
        assert isinstance(json.loads(p.stdout), dict), name     # stdout: one JSON document, nothing else
        # the human report moved to stderr, and --quiet drops it
        assert plain.stdout.strip().splitlines()[0] in p.stderr, name
        q = _main(capfd, "--quiet", *argv, "--json")
        assert q.returncode == p.returncode and json.loads(q.stdout).keys() == json.loads(p.stdout).keys(), name
        assert q.stderr == "", (name, q.stderr)
    missing = str(tmp_path / "nope")
    bad = {"inspect": ["inspect", "--profile", missing],
           "recommend": ["recommend", "--profile", missing],
           "diff": ["diff", "defaults", "defaults", "--profile", missing],
           "capture": ["capture", f"{missing}.py:f", "--out", str(tmp_path / "c2")],
           "tune": ["tune", f"{missing}.py:f", "--out", str(tmp_path / "t2")]}
    for name, argv in bad.items():
        _one_line_error(_main(capfd, *argv, "--json"))


def test_disk_full_mid_capture_leaves_out_as_it_was(tmp_path, monkeypatch):
    import errno

    import torch

    from advisor.emulator import capture
    from advisor.errors import OutputError
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "Model.output.0.forward.output.0.pt")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OutputError, match="No space left on device") as e:
        capture(_wl(tmp_path), out, dump="tensors", local=False)
    assert "\n" not in str(e.value)
    assert (out / "mine.txt").read_text() == "keep me" and not (tmp_path / "run.bak").exists()
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]


# ---------------------------------------------------------------------- default timeout, progress while waiting
def test_capture_has_a_default_timeout_with_a_clear_message(tmp_path, capfd, monkeypatch):
    """A workload that never returns no longer hangs capture: without --timeout the default limit reaches the
    capture child, and running out of it is one line naming the limit and how to change it (exit 2)."""
    from advisor.runners import worker
    from advisor.runners.base import DEFAULT_TIMEOUT_S
    seen = {}

    def capture(self, target, out, *, timeout=None, heartbeat=None, **kw):
        seen["timeout"] = timeout
        heartbeat(45.0)                       # the capture has been waiting 45 s: progress says so
        return worker.CaptureReply(worker.TIMEOUT, message=f"the workload did not finish within {timeout or 0:g} s "
                                                           "(--timeout S sets the limit, --timeout 0 removes it)")
    monkeypatch.setattr(worker.CaptureWorker, "capture", capture)
    monkeypatch.setenv("ADVISOR_PROGRESS", "1")
    p = _main(capfd, "capture", _wl(tmp_path), "--out", str(tmp_path / "run"))
    assert seen["timeout"] == DEFAULT_TIMEOUT_S["emulator"] == 3600.0
    assert p.returncode == 2 and "did not finish within 3600 s" in p.stderr and "--timeout 0" in p.stderr
    assert "capture: still running after 45 s (limit 60 min: --timeout)" in p.stderr
    p = _main(capfd, "capture", _wl(tmp_path), "--out", str(tmp_path / "run"), "--timeout", "0")
    assert seen["timeout"] is None                       # 0: no limit


def test_every_run_has_a_default_limit_and_zero_removes_it():
    from advisor.runners import CommandRunner, EmulatorRunner
    assert EmulatorRunner("wl.py:workload").limit == 3600.0 and CommandRunner("python x.py").limit == 86400.0
    assert EmulatorRunner("wl.py:workload", timeout=0).limit is None and CommandRunner("x", timeout=5).limit == 5.0
    assert EmulatorRunner(object()).limit is None        # a Workload object runs in this process: no child to stop


def test_heartbeat_reports_a_long_wait_then_every_minute():
    from advisor.runners.base import Heartbeat
    said = []
    beat = Heartbeat(said.append, "iter_01", 3600.0)
    for t in (0.2, 10.0, 29.9, 30.1, 60.0, 89.0, 90.2, 200.0, 7300.0):
        beat(t)
    assert said == ["iter_01: still running after 30 s (limit 60 min: --timeout)",
                    "iter_01: still running after 90 s (limit 60 min: --timeout)",
                    "iter_01: still running after 3 min (limit 60 min: --timeout)",
                    "iter_01: still running after 2 h 1 min (limit 60 min: --timeout)"]
    none = []
    Heartbeat(none.append, "capture", None)(31.0)
    assert none == ["capture: still running after 31 s (no time limit)"]
