"""advisor inspect through the CLI: malformed inputs give one clear line and exit 2; readers fuzzed."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.errors import InputError
from advisor.ingest.profile import read_kernel_details, read_op_statistic, read_op_summary, read_profiler_info
from advisor.ingest.trace import read_trace_view

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "ingest"
SAMPLE = HERE / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv"
GOOD = SAMPLE.read_bytes()


def _layout(tmp_path: Path, content: bytes, name: str = "kernel_details.csv") -> Path:
    out = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / name).write_bytes(content)
    return tmp_path


def _run(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def _one_line_error(code, err, needle=None):
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("advisor: error: ")
    assert "Traceback" not in err
    if needle:
        assert needle in lines[0], lines[0]


def _truncated() -> bytes:
    lines = GOOD.splitlines(keepends=True)
    cut = b"".join(lines[:40])
    return cut + lines[40][: len(lines[40]) // 3]  # last row cut mid-way


def _missing_column() -> bytes:
    text = GOOD.decode()
    return text.replace("Duration(us)", "Dur", 1).encode()


def _semicolons() -> bytes:
    return GOOD.decode().replace(",", ";").encode()


@pytest.mark.parametrize("content,needle", [
    (_truncated(), "truncated"),
    (_missing_column(), "missing required column"),
    (_semicolons(), "not comma-separated"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4, "binary"),
    (b"", "empty"),
])
def test_malformed_kernel_details(tmp_path, content, needle):
    root = _layout(tmp_path, content)
    code, out, err = _run(["inspect", "--profile", str(root)])
    _one_line_error(code, err, needle)
    assert "kernel_details.csv" in err


def test_json_truncated_mid_object(tmp_path):
    root = _layout(tmp_path, GOOD)
    (root / "w_ascend_pt" / "profiler_info.json").write_text('{"config": {"common_config": {"activities": ["NPU"')
    code, out, err = _run(["inspect", "--profile", str(root)])
    _one_line_error(code, err, "invalid JSON")


def test_dump_json_truncated(tmp_path):
    d = tmp_path / "dump" / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_text('{"task": "tensor", "data": {"Functional.linear.0.forward": {"input_args": [')
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    _one_line_error(code, err, "invalid JSON")


def test_dump_entry_escaping_folder(tmp_path):
    d = tmp_path / "dump" / "step0" / "rank0"
    (d / "dump_tensor_data").mkdir(parents=True)
    rec = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1, "Min": 0, "Mean": 0, "Norm": 1,
           "data_name": "../../etc/passwd"}
    (d / "dump.json").write_text(json.dumps({"task": "tensor", "data": {"A.a.0.forward": {"output": [rec]}}}))
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    _one_line_error(code, err, "outside")


def test_subprocess_exit_code_and_ok_run(tmp_path):
    root = _layout(tmp_path, b"")
    p = subprocess.run([sys.executable, "-m", "advisor", "inspect", "--profile", str(root)],
                       capture_output=True, text=True, cwd=HERE.parent)
    _one_line_error(p.returncode, p.stderr, "empty")
    ok = _layout(tmp_path / "ok", GOOD)
    code, out, err = _run(["inspect", "--profile", str(ok), "--json"])
    assert code == 0, err
    s = json.loads(out)
    assert s["kernels"] == len(GOOD.decode().strip().splitlines()) - 1
    assert abs(sum(r["share"] for r in s["precision_share"]) - 1.0) < 1e-9
    assert s["casts"]["inserted"] == GOOD.decode().count("\ntrans_Cast") + GOOD.decode().count(",trans_Cast")
    assert any("no precision dump" in m for m in s["missing"])


def test_export_keeps_existing_file(tmp_path):
    ok = _layout(tmp_path, GOOD)
    target = tmp_path / "g.graphml"
    target.write_text("user file")
    code, out, err = _run(["inspect", "--profile", str(ok), "--export", str(target)])
    assert code == 0, err
    assert (tmp_path / "g.graphml.bak").read_text() == "user file"
    import networkx as nx
    h = nx.read_graphml(target)
    assert h.number_of_nodes() >= 591
    code, out, err = _run(["inspect", "--profile", str(ok), "--export", str(tmp_path / "g.dot")])
    assert code == 0 and (tmp_path / "g.dot").read_text().startswith("digraph")


# ---------------------------------------------------------------------------------------------- fuzz
READERS = {
    "kernel_details.csv": (read_kernel_details, GOOD[:6000]),
    "op_summary_0.csv": (read_op_summary, (FIX / "op_summary_new.csv").read_bytes()),
    "op_statistic.csv": (read_op_statistic, b"OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
                                            b"Max Time(us),Ratio(%)\nMatMulV2,AI_CORE,4,12.5,3,3.125,3.5,80.0\n"),
    "profiler_info_0.json": (read_profiler_info, b'{"config": {"a": [1, 2]}, "rank_id": 0}'),
    "trace_view.json": (read_trace_view, (FIX / "trace_view.json").read_bytes()),
}


@pytest.mark.parametrize("fname", sorted(READERS))
def test_fuzz_reader(tmp_path_factory, fname):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    fn, base = READERS[fname]
    d = tmp_path_factory.mktemp("fz")

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cut=st.integers(0, len(base)), pos=st.integers(0, len(base)), junk=st.binary(max_size=24),
           drop=st.integers(0, 40))
    def run(cut, pos, junk, drop):
        data = base[:cut]
        data = data[:pos] + junk + data[pos + drop % 3:]
        p = d / fname
        p.write_bytes(data)
        try:
            fn(p)
        except InputError:
            pass
    run()


def test_fuzz_text_cells(tmp_path_factory):
    """Arbitrary text in every cell of a well-formed kernel_details.csv: reads or InputError."""
    import csv
    import io
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    d = tmp_path_factory.mktemp("cells")
    header = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Block Dim",
              "Input Shapes", "Input Data Types", "Output Shapes", "Output Data Types"]
    cell = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(rows=st.lists(st.lists(cell, min_size=len(header), max_size=len(header)), min_size=1, max_size=5))
    def run(rows):
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows(rows)
        p = d / "kernel_details.csv"
        p.write_text(buf.getvalue(), encoding="utf-8")
        try:
            k = read_kernel_details(p)
            from advisor.ingest.infer import graph_from_kernels
            graph_from_kernels(k)
        except InputError:
            pass
    run()


def test_rank_step_and_trace_through_cli(tmp_path):
    for r in (0, 1):
        d = tmp_path / f"w{r}_ascend_pt"
        out = d / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        (out / "kernel_details.csv").write_bytes(GOOD)
        (d / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r}))
    shutil.copy(FIX / "trace_view.json", tmp_path / "w0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    code, out, err = _run(["inspect", "--profile", str(tmp_path), "--json"])
    assert code == 0, err
    s = json.loads(out)
    n = len(GOOD.decode().strip().splitlines()) - 1
    assert s["ranks"] == [0, 1] and s["kernels"] == 2 * n
    assert s["trace"]["linked"] == 2 and s["trace"]["bwd_ops"] == 1
    code, out, err = _run(["inspect", "--profile", str(tmp_path), "--rank", "1", "--step", "1", "--json"])
    assert code == 0, err
    s = json.loads(out)
    assert s["kernels"] == n and s["graph_rank"] == 1 and s["graph_step"] == 1
    code, out, err = _run(["inspect", "--profile", str(tmp_path), "--rank", "4"])
    _one_line_error(code, err, "ranks found: 0, 1")
    code, out, err = _run(["inspect", "--profile", str(tmp_path), "--step", "9"])
    _one_line_error(code, err, "steps found: 1")
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    assert code == 0 and "trace_view.json" in out and "Time share per precision" in out


def test_inspect_stage_progress_on_stderr(tmp_path, monkeypatch):
    """Stage lines go to stderr (stdout stays the report) when asked for or on a terminal; off by default here."""
    d = _layout(tmp_path, GOOD)
    code, out, err = _run(["inspect", "--profile", str(d)])
    assert code == 0 and "advisor: reading" not in err
    monkeypatch.setenv("ADVISOR_PROGRESS", "1")
    code, out2, err = _run(["inspect", "--profile", str(d)])
    assert code == 0, err
    stages = [x for x in err.splitlines() if x.startswith("advisor: ") and x.endswith(" ...")]
    assert [s.split()[1] for s in stages] == ["reading", "building", "semantics"]
    assert "kernel_details.csv" in stages[0] and "advisor:" not in out2


def test_recommend_stage_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_PROGRESS", "1")
    code, out, err = _run(["recommend", "--profile", str(HERE.parent / "profiles" / "two_hazards"),
                           "--out", str(tmp_path / "adv")])
    assert code == 0, err
    stages = [x.split(" ...")[0] for x in err.splitlines() if x.endswith(" ...")]
    assert any(s.startswith("advisor: reading GE graph dump") for s in stages)
    assert any(s.startswith("advisor: searching list edits") for s in stages)
    assert stages[-2:] == ["advisor: explaining the edits", "advisor: writing outputs"]
    assert (tmp_path / "adv" / "modify_mixlist.json").is_file() and "advisor:" not in out
