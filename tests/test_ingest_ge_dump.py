"""GE graph dump writer/reader: round trip, ge_proto text, semantics agreement, malformed input."""
from __future__ import annotations

from pathlib import Path

import pytest

from advisor import graph as G
from advisor import semantics
from advisor.errors import InputError
from advisor.ingest.ge_dump import read_ge_dump, render_ge_onnx, render_ge_proto, write_ge_onnx
from advisor.oplists import load_lists


def _sample_graph():
    g = G.new_graph()
    G.add_op(g, "x", "Data", role="data")
    G.add_op(g, "w", "Const", role="const", dtype="fp32")
    G.add_op(g, "ids", "Data", role="data", dtype="int64")
    G.add_op(g, "mm", "MatMulV2", in_shapes=["8,16", "16,32"], out_shapes=["8,32"], order=3, aten="mm")
    G.add_op(g, "c", "Cast", cast_to="fp32", order=4)
    G.add_op(g, "add", "Add", order=5)
    G.add_op(g, "r", "Reshape", kernel=False, order=6)
    G.add_op(g, "gather", "GatherV2", order=7)
    G.add_op(g, "ar", "HcomAllReduce", decides=False, order=8)
    G.add_op(g, "soft", "SoftmaxV2", order=9)
    G.connect(g, "x", "mm", 0, 0)
    G.connect(g, "w", "mm", 0, 1)
    G.connect(g, "mm", "c")
    G.connect(g, "c", "add", 0, 0)
    G.connect(g, "x", "add", 0, 1)
    G.connect(g, "add", "r")
    G.connect(g, "r", "gather", 0, 0)
    G.connect(g, "ids", "gather", 0, 1, float=False)
    G.connect(g, "gather", "ar")
    G.connect(g, "ar", "soft")
    G.connect(g, "add", "soft", 0, 1)  # extra input; second port pair of the same node appears below
    G.connect(g, "add", "soft", 0, 2)
    return g


def _check_same(g, h):
    assert set(g.nodes) == set(h.nodes)
    assert set(g.edges) == set(h.edges)
    for u, v, d in g.edges(data=True):
        assert sorted(h.edges[u, v]["ports"]) == sorted(d["ports"])
        assert h.edges[u, v]["float"] == d.get("float", True)
        assert h.edges[u, v]["confidence"] == 1.0
    for n, d in g.nodes(data=True):
        e = h.nodes[n]
        assert e["type"] == d["type"]
        assert e["role"] == d.get("role", "op")
        assert e.get("kernel", True) == d.get("kernel", True)
        assert e.get("decides", True) == d.get("decides", True)
        if "cast_to" in d:
            assert e["cast_to"] == d["cast_to"]
        if "order" in d:
            assert e["order"] == d["order"]
        for k in ("in_shapes", "out_shapes"):
            if k in d:
                assert e[k] == d[k]
    assert h.nodes["ids"]["dtype"] == "int64"
    assert h.nodes["mm"]["aten"] == "mm"


def test_round_trip_onnx(tmp_path):
    g = _sample_graph()
    p = write_ge_onnx(g, tmp_path)
    assert p.name == "ge_onnx_00000_graph_0_Build.pbtxt"
    text = p.read_text()
    assert 'producer_name: "GE"' in text and 'op_type: "ge:MatMulV2"' in text
    assert 'input: "x:0"' in text
    h = read_ge_dump(p)
    _check_same(g, h)
    assert h.graph["format"] == "ge_onnx"


def test_round_trip_proto(tmp_path):
    g = _sample_graph()
    p = tmp_path / "ge_proto_00000_graph_0_Build.txt"
    p.write_text(render_ge_proto(g))
    h = read_ge_dump(p)
    _check_same(g, h)
    assert h.graph["format"] == "ge_proto"


def test_plan_dtypes_written_and_semantics_agree(tmp_path):
    g = _sample_graph()
    lists = load_lists("ascend910b")
    pl = semantics.plan(g, lists, "mixed_float16")
    p = write_ge_onnx(g, tmp_path / "ge_onnx_00001_graph_0_Build.pbtxt", plan=pl)
    h = read_ge_dump(p)
    assert h.nodes["mm"]["out_dtypes"][0] == pl.precision["mm"]
    assert h.nodes["mm"]["in_dtypes"] == ["fp32", "fp32"]  # producers' (Data/Const) dtypes
    assert h.nodes["soft"]["in_dtypes"][0] == pl.precision["ar"] or pl.precision["ar"] == "n/a"
    ph = semantics.plan(h, lists, "mixed_float16")
    assert ph.precision == pl.precision


def test_input_gaps_and_control_edges(tmp_path):
    text = '''ir_version: 3
producer_name: "GE"
graph {
  name: "g"
  node { name: "a" op_type: "ge:Data"
    attribute { name: "output_desc_dtype:0" s: "DT_FLOAT16" type: STRING } }
  node { input: "" input: "a:0" input: "a:-1" name: "b" op_type: "ge:Mul"
    attribute { name: "input_desc_dtype:1" s: "DT_FLOAT16" type: STRING }
    attribute { name: "output_desc_dtype:0" s: "DT_FLOAT16" type: STRING } }
}
'''
    p = tmp_path / "ge_onnx_00000_graph_0_Build.pbtxt"
    p.write_text(text)
    h = read_ge_dump(p)
    assert h.edges["a", "b"]["ports"] == [(0, 1)]
    assert h.nodes["a"]["dtype"] == "fp16"


@pytest.mark.parametrize("content", [
    b"", b"\x00\x01\x02garbage\xff", b'ir_version: 3\ngraph {\n  node {\n    name: "a"\n',
    b'graph { node { name: "a" op_type: "ge:Add" input: "missing:0" } }', b"{{{", b"\xff\xfe\xfa",
])
def test_malformed(tmp_path, content):
    p = tmp_path / "ge_onnx_00000_graph_0_Build.pbtxt"
    p.write_bytes(content)
    with pytest.raises(InputError) as ei:
        read_ge_dump(p)
    assert "\n" not in str(ei.value)
    assert str(p) in str(ei.value)


def test_fuzz_reader(tmp_path_factory):
    from hypothesis import given, settings, HealthCheck
    from hypothesis import strategies as st
    d = tmp_path_factory.mktemp("fuzz")
    base = render_ge_onnx(_sample_graph()).encode()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cut=st.integers(0, len(base)), junk=st.binary(max_size=40), pos=st.integers(0, len(base)))
    def run(cut, junk, pos):
        data = base[:cut]
        data = data[:pos] + junk + data[pos:]
        p = d / "ge_onnx_00000_graph_0_Build.pbtxt"
        p.write_bytes(data)
        try:
            read_ge_dump(p)
        except InputError:
            pass
    run()


def test_absurd_slot_count_rejected(tmp_path):
    p = tmp_path / "ge_onnx_00000_graph_0_Build.pbtxt"
    p.write_text('graph { node { name: "a" op_type: "ge:Add" '
                 'attribute { name: "input_desc_nums" i: 1000000000 type: INT } } }')
    with pytest.raises(InputError):
        read_ge_dump(p)
