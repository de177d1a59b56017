"""advisor lint on ATC --keep_dtype / --customize_dtypes files: syntax GE rejects, unknown op types, op names not
in a run's graph (did-you-mean from the graph's names)."""
import json
import subprocess
import sys

import pytest

from advisor.graph import add_op, new_graph
from advisor.lint import lint_overrides_text
from advisor.oplists import load_default

L = load_default("ascend910b")


def _graph():
    g = new_graph()
    add_op(g, "x", "Data", role="data")
    for n, t in (("/fc/Gemm", "MatMulV2"), ("/ln/LayerNormalization", "LayerNorm"), ("/Relu", "Relu")):
        add_op(g, n, t)
    return g


def codes(findings):
    return [(f.line, f.code, f.suggestion) for f in findings]


def test_keep_dtype_typos_against_the_graph():
    text = "/fc/Gemmm\nOpType::LayrNorm\n#OpType::Exp\n/ln/LayerNormalization\nOpType::Exp\n/Relu\n/Relu\n"
    f = lint_overrides_text(text, "keep_dtype", L, "k.cfg", _graph())
    assert codes(f) == [(1, "not-in-graph", "/fc/Gemm"), (2, "unknown-op-type", "LayerNorm"),
                        (3, "misplaced-optype", None), (3, "comment", None), (3, "not-in-graph", None),
                        (5, "not-in-graph", None), (7, "duplicate", None)]


def test_keep_dtype_without_a_graph_checks_types_only():
    f = lint_overrides_text("/anything\nOpType::MatMulV2\nOpType::Matmulv2\n", "keep_dtype", L, "k.cfg")
    assert codes(f) == [(3, "unknown-op-type", "MatMulV2")]


@pytest.mark.parametrize("text,line", [("OpType::relu\n", 1), ("a::InputDtype:float\n\n", None),
                                       ("a::InputDtype:float\nb::OutputDtype:fp16\n", 2)])
def test_files_ge_rejects_are_errors_at_their_line(text, line):
    kind = "keep_dtype" if text.startswith("OpType::relu") else "customize_dtypes"
    (f,) = lint_overrides_text(text, kind, L, "f.cfg")
    assert f.code == "rejected" and f.severity == "error"
    if line:
        assert f.line == line


def test_customize_findings():
    text = "/fc/Gemm::InputDtype:int8,float16,OutputDtype:float\nOpType::Softmaxv2:OutputDtype:float\n"
    f = lint_overrides_text(text, "customize_dtypes", L, "c.cfg", _graph())
    assert codes(f) == [(1, "not-emulated", None), (2, "unknown-op-type", "SoftmaxV2")]


def test_cli_lint_with_profile(tmp_path):
    from advisor.ingest.ge_dump import write_ge_onnx
    run = tmp_path / "run"
    (run / "graph").mkdir(parents=True)
    write_ge_onnx(_graph(), run / "graph")
    k = tmp_path / "keep.cfg"
    k.write_text("/fc/Gemmm\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "advisor", "lint", "--keep-dtype", str(k), "--profile", str(run),
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    (f,) = json.loads(r.stdout)["files"][str(k)]
    assert f["code"] == "not-in-graph" and f["suggestion"] == "/fc/Gemm" and f["line"] == 1
    ok = tmp_path / "ok.cfg"
    ok.write_text("/fc/Gemm\nOpType::LayerNorm\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "advisor", "lint", "--keep-dtype", str(ok), "--profile", str(run)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout
    r = subprocess.run([sys.executable, "-m", "advisor", "lint", "--keep-dtype", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "directory" in r.stderr
