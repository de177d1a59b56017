"""Property-based: whatever a TARGET string, a workload file or the function it names does -- a bad
TARGET, a file that raises at import, a function returning the wrong shape or types, batches of the
wrong types, a forward that never returns -- a capture either succeeds or fails with ONE line naming
the problem (exit 2): never a traceback, never another exception, never a hang."""
from __future__ import annotations

import itertools
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.errors import InputError
from advisor.runners import EmulatorRunner
from advisor.runners.worker import CaptureWorker
from advisor.workload import load_target

pytestmark = pytest.mark.timeout(900)
FUZZ = dict(deadline=None, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_n = itertools.count()


def _one_line(e: BaseException) -> None:
    msg = str(e)
    assert msg and "\n" not in msg and "Traceback" not in msg, msg


# ---------------------------------------------------------------------- TARGET strings (in process)
TARGETS = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.ascii_letters + "./:_-\\ \x00é", max_size=30),
    st.builds(lambda a, b: f"{a}:{b}", st.text(max_size=20), st.text(max_size=12)),
    st.sampled_from(["", ":", "x:", ":f", "a.py:", "a.py:1bad", "/nonexistent/x.py:workload", "os:getcwd",
                     "os.path:join", "json:loads", "no_such_pkg_qq.mod:f", "..:f", ".x:f", "a..b:f", "sys:exit",
                     "builtins:input", "x.py:f:g", "/dev/null:f", "/tmp:f", "a\x00.py:f", "advisor:__version__"]),
)


@settings(max_examples=300, **FUZZ)
@given(target=TARGETS)
def test_bad_target_strings_are_one_line(target):
    try:
        load_target(target)
    except InputError as e:
        _one_line(e)
    try:
        EmulatorRunner(target).prepare(Path("."))
    except InputError as e:
        _one_line(e)


# ---------------------------------------------------------------------- workload files (child process)
IMPORT_FAILURES = st.sampled_from([
    "raise ValueError('bad config\\nsecond line')", "1 / 0", "import no_such_module_qq", "import sys; sys.exit(3)",
    "def broken(:\n    pass", "x = undefined_name", "raise SystemExit('bye')", "import os; os._exit(0)",
    "raise RuntimeError('')", "\x00", "import tensorflow_not_here_qq",
])

BATCHES = st.sampled_from([
    "None", "3", "'abc'", "[]", "()", "{}", "[None]", "[('a', 'b')]", "[(1, 2)]", "[[x]]", "x", "(x,)", "[x, 'y']",
    "[(torch.zeros(2, 5),)]", "[(torch.zeros(0, 4),)]", "[(torch.ones(2, 4, dtype=torch.int64),)]",
    "[(torch.full((2, 4), float('nan')),)]", "(b for b in [(x,)])", "iter([(x,)])", "[(x,), (x, x)]",
    "(_ for _ in ()).throw(ValueError('gen'))", "set([1])", "[x] * 3",
])

RETURNS = st.sampled_from([
    "None", "3", "'model'", "()", "(M(),)", "(M(), B)", "(M(), B, None)", "(M(), B, 'loss')", "[M(), B]",
    "(M(), B, lambda o, b: 'not a tensor')", "(M(), B, lambda o, b: o)", "(M(), B, lambda o, b: o.sum())",
    "('not a model', B)", "(None, B)", "(lambda x: x * 2, B)", "(lambda x: 'str', B)", "(M(), B, 1, 2)",
    "{'model': M()}", "advisor.Workload(M(), B, name=3)", "advisor.Workload(M(), B, options=[1])",
    "advisor.Workload(M(), B)", "advisor.Workload(M(), B, loss_fn=lambda o, b: o.sum())",
])

FORWARDS = st.sampled_from([
    "return self.l(x)", "return 'text'", "return None", "return 3", "return {'a': 'b'}", "return [self.l(x), 'x']",
    "return x", "raise RuntimeError('device\\nlost')", "import sys; sys.exit(0)", "return self.l(x.float())",
    "return {'out': self.l(x)}", "return self.l(x).numpy()", "raise KeyError(3)", "import os; os._exit(4)",
    "while True: pass",
])

FILE = """
import torch
import advisor

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x, *rest):
        {forward}

def workload():
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    B = {batches}
    return {returns}
"""


@pytest.fixture(scope="module")
def worker():
    w = CaptureWorker()
    yield w
    w.close()


def _check(reply, target, out: Path) -> None:
    if reply.ok:
        assert (out / "run.json").is_file()
        return
    err = reply.exception(target)
    assert reply.user_error, (reply.status, reply.message, reply.error)   # exit 2, not an advisor crash
    assert isinstance(err, InputError) and err.exit_code == 2
    _one_line(err)
    assert not out.exists() and not [q for q in out.parent.iterdir() if q.name.endswith(".partial")]


@pytest.mark.slow
@settings(max_examples=60, **FUZZ)
@given(forward=FORWARDS, batches=BATCHES, returns=RETURNS)
def test_workload_shapes_and_types(tmp_path, worker, forward, batches, returns):
    d = tmp_path / f"case{next(_n)}"
    d.mkdir()
    f = d / "wl.py"
    f.write_text(FILE.format(forward=forward, batches=batches, returns=returns))
    target = f"{f}:workload"
    reply = worker.capture(target, d / "run", timeout=8 if "while True" in forward else 120, dump="stats",
                           local=False, batches=2)
    _check(reply, target, d / "run")


@pytest.mark.slow
@settings(max_examples=25, **FUZZ)
@given(failure=IMPORT_FAILURES, where=st.sampled_from(["import", "call"]))
def test_files_that_fail_at_import_or_call(tmp_path, worker, failure, where):
    d = tmp_path / f"case{next(_n)}"
    d.mkdir()
    f = d / "wl.py"
    body = "\n".join("    " + ln for ln in failure.splitlines())
    f.write_text(failure + "\ndef workload():\n    pass\n" if where == "import" else f"def workload():\n{body}\n")
    target = f"{f}:workload"
    _check(worker.capture(target, d / "run", timeout=120, dump="stats", local=False), target, d / "run")
