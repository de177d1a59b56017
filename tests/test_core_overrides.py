"""Per-op overrides in the one semantics module: ATC --keep_dtype (Rule.KEEP_DTYPE) and --customize_dtypes
(Rule.CUSTOMIZE_DTYPE), their interaction with every precision mode (docs/semantics.md), what-if with
overrides, and the two file formats (advisor/overrides.py)."""
import pytest
from hypothesis import given, settings, strategies as st

from advisor import semantics as S
from advisor.errors import InputError
from advisor.graph import add_op, connect, new_graph
from advisor.oplists import load_default
from advisor.overrides import (CustomDtypes, Overrides, load, read_customize_text, read_keep_dtype,
                               read_keep_dtype_text)

L = load_default("ascend910b")     # MatMulV2 white, Log black, Exp/Add gray


def chain(*types):
    g = new_graph()
    add_op(g, "in", "Data", role="data")
    prev = "in"
    for i, t in enumerate(types):
        add_op(g, f"{t}{i}", t)
        connect(g, prev, f"{t}{i}")
        prev = f"{t}{i}"
    return g


KEEP_MM = Overrides(keep_names={"MatMulV20"})


# ---------------------------------------------------------------------- keep_dtype per mode
def test_keep_dtype_in_mixed_mode_keeps_the_op_and_its_gray_successors_inherit_fp32():
    g = chain("MatMulV2", "Exp", "MatMulV2", "Exp")
    base = S.plan(g, L, "mixed_float16")
    assert base["MatMulV20"] == "fp16" and base["Exp1"] == "fp16"
    p = S.plan(g, L, "mixed_float16", KEEP_MM)
    assert p["MatMulV20"] == "fp32" and p.why("MatMulV20").rule is S.Rule.KEEP_DTYPE
    assert p["Exp1"] == "fp32" and p.why("Exp1").via == "MatMulV20" and p.why("Exp1").rule is S.Rule.GRAY_INHERIT
    assert p["MatMulV22"] == "fp16" and p["Exp3"] == "fp16"        # only the named instance is kept


def test_keep_dtype_under_force_fp16_keeps_only_that_op_nothing_is_inherited():
    g = chain("MatMulV2", "Exp", "Log")
    p = S.plan(g, L, "force_fp16", KEEP_MM)
    assert p["MatMulV20"] == "fp32" and p.why("MatMulV20").rule is S.Rule.KEEP_DTYPE
    assert p["Exp1"] == "fp16" and p.why("Exp1").rule is S.Rule.FORCE_LOW
    assert p["Log2"] == "fp16"                   # force_fp16 ignores the lists: even a black op is fp16


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "origin"])
def test_keep_dtype_has_no_effect_under_must_keep_origin_dtype(mode):
    g = chain("MatMulV2", "Exp")
    a, b = S.plan(g, L, mode), S.plan(g, L, mode, Overrides(keep_names={"MatMulV20", "Exp1"}))
    assert a.precision == b.precision and b.why("MatMulV20").rule is S.Rule.ORIGIN


def test_keep_dtype_under_allow_fp32_to_fp16_keeps_a_cube_op():
    g = chain("MatMulV2", "Exp", "MatMulV2")
    p = S.plan(g, L, "allow_fp32_to_fp16", KEEP_MM)
    assert (p["MatMulV20"], p["Exp1"], p["MatMulV22"]) == ("fp32", "fp32", "fp16")
    assert p.why("Exp1").rule is S.Rule.FP32_TO_LOW_VECTOR


def test_keep_dtype_by_type_keeps_every_instance_of_the_ge_type():
    g = chain("MatMulV2", "Exp", "MatMulV2")
    p = S.plan(g, L, "mixed_float16", Overrides(keep_types={"MatMulV2"}))
    assert p["MatMulV20"] == p["MatMulV22"] == "fp32"


def test_keep_dtype_keeps_the_original_dtype_not_fp32():
    g = new_graph()
    add_op(g, "x", "Data", role="data", dtype="fp16")
    add_op(g, "mm", "MatMulV2", origin_dtype="fp16")
    connect(g, "x", "mm")
    assert S.plan(g, L, "force_fp32", Overrides(keep_names={"mm"}))["mm"] == "fp16"


def test_overrides_never_touch_data_views_casts_or_integer_ops():
    g = new_graph()
    add_op(g, "x", "Data", role="data")
    add_op(g, "v", "Reshape", kernel=False)
    add_op(g, "c", "Cast", cast_to="fp16")
    add_op(g, "i", "Gather", float=False)
    connect(g, "x", "v")
    connect(g, "v", "c")
    ov = Overrides(keep_names={"x", "v", "c", "i"},
                   customize=(("name", "c", CustomDtypes(("fp32",), ("fp32",))),))
    a, b = S.plan(g, L, "mixed_float16"), S.plan(g, L, "mixed_float16", ov)
    assert a.precision == b.precision and [a.why(n) for n in g] == [b.why(n) for n in g]


# ---------------------------------------------------------------------- customize_dtypes
def test_customize_sets_port_dtypes_and_successors_see_the_output_dtype():
    g = chain("MatMulV2", "Exp")
    ov = Overrides(customize=(("name", "MatMulV20", CustomDtypes(("fp16", "fp16"), ("fp32",))),))
    p = S.plan(g, L, "mixed_float16", ov)
    assert p["MatMulV20"] == "fp16" and p.why("MatMulV20").rule is S.Rule.CUSTOMIZE_DTYPE
    assert p["Exp1"] == "fp32" and p.why("Exp1").via == "MatMulV20"    # inherits the fp32 output
    assert p.port_dtypes("MatMulV20", ["fp32", "fp32"], ["fp32"]) == (["fp16", "fp16"], ["fp32"])
    assert p.port_dtypes("Exp1", ["fp32", "int64"], ["fp32"]) == (["fp32", "int64"], ["fp32"])


def test_customize_wins_over_keep_and_a_name_entry_over_a_type_entry():
    g = chain("MatMulV2", "Exp", "MatMulV2")
    ov = Overrides(keep_names={"MatMulV20"},
                   customize=(("type", "MatMulV2", CustomDtypes(("bf16",), ())),
                              ("name", "MatMulV22", CustomDtypes(("fp32",), ()))))
    p = S.plan(g, L, "mixed_float16", ov)
    assert p["MatMulV20"] == "bf16" and p.why("MatMulV20").rule is S.Rule.CUSTOMIZE_DTYPE
    assert p["MatMulV22"] == "fp32"


def test_customize_applies_in_every_mode_and_empty_slots_take_the_ops_precision():
    g = chain("MatMulV2")
    ov = Overrides(customize=(("name", "MatMulV20", CustomDtypes((None, "fp16"), ())),))
    for mode in S.MODES:
        p = S.plan(g, L, mode, ov)
        assert p["MatMulV20"] == "fp16"
        assert p.port_dtypes("MatMulV20", ["fp32", "fp32"], ["fp32"]) == (["fp16", "fp16"], ["fp16"])


def test_customize_with_only_integer_dtypes_leaves_the_decision_to_the_other_rules():
    g = chain("MatMulV2")
    ov = Overrides(keep_names={"MatMulV20"}, customize=(("name", "MatMulV20", CustomDtypes(("int8",), ())),))
    p = S.plan(g, L, "mixed_float16", ov)
    assert p["MatMulV20"] == "fp32" and p.why("MatMulV20").rule is S.Rule.KEEP_DTYPE
    assert p.port_dtypes("MatMulV20", ["fp32"], ["fp32"]) == (["fp32"], ["fp32"])


# ---------------------------------------------------------------------- what-if
TYPES = ["MatMulV2", "Exp", "Log", "Add", "Cast"]


@st.composite
def graphs_and_overrides(draw):
    n = draw(st.integers(2, 10))
    g = new_graph()
    add_op(g, "in", "Data", role="data")
    names = ["in"]
    for i in range(n):
        t = draw(st.sampled_from(TYPES))
        add_op(g, f"n{i}", t)
        srcs = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        for k, s in enumerate(srcs):
            connect(g, s, f"n{i}", 0, k)
        names.append(f"n{i}")
    ops = names[1:]
    dt = st.sampled_from(["fp16", "fp32", "bf16", None])

    def ov():
        keep = draw(st.sets(st.sampled_from(ops), max_size=3))
        keep_t = draw(st.sets(st.sampled_from(TYPES), max_size=1))
        cust = draw(st.dictionaries(st.sampled_from(ops), st.tuples(st.tuples(dt), st.tuples(dt)), max_size=2))
        return Overrides(keep, keep_t, tuple(("name", k, CustomDtypes(*v)) for k, v in cust.items()))
    return g, ov(), ov(), draw(st.sampled_from(sorted(S.MODES)))


@settings(max_examples=150, deadline=None)
@given(graphs_and_overrides())
def test_what_if_with_changed_overrides_equals_a_fresh_plan(case):
    g, a, b, mode = case
    c = S.compile_graph(g)
    base = c.plan(L, mode, a)
    inc = c.what_if(base, L, b)
    full = c.plan(L, mode, b)
    assert inc.precision_list == full.precision_list and inc.emit_list == full.emit_list
    assert inc.rules == full.rules
    flips = S.what_if(g, L, L, mode, overrides=a, edited_overrides=b)
    assert {f.node for f in flips} == {n for n in g if base[n] != full[n] or
                                       base.emit_list[c.index[n]] != full.emit_list[c.index[n]]}


# ---------------------------------------------------------------------- the files
def test_keep_dtype_file_names_and_types(tmp_path):
    f = tmp_path / "keep.cfg"
    f.write_text("  /fc/Gemm  \n\nOpType::LayerNorm\r\n/fc/Gemm\n", encoding="utf-8")
    d = read_keep_dtype(f)
    assert [(e.line, e.kind, e.key) for e in d.entries] == [(1, "name", "/fc/Gemm"), (3, "type", "LayerNorm")]
    assert [w[1] for w in d.warnings] == ["duplicate"]
    assert load(keep_dtype=f) == Overrides(keep_names={"/fc/Gemm"}, keep_types={"LayerNorm"})


@pytest.mark.parametrize("text,problem", [
    ("OpType::matmul\n", "PascalCase"),
    ("OpType::\n", "PascalCase"),
])
def test_keep_dtype_file_refused_like_ge(text, problem):
    with pytest.raises(InputError, match=problem):
        read_keep_dtype_text(text, "k.cfg")


def test_customize_file_as_the_fusion_engine_reads_it():
    d = read_customize_text("/fc/Gemm::InputDtype:float16,float16,,OutputDtype:float\n"
                            "OpType::LayerNorm:OutputDtype:FLOAT32\n"
                            "/fc/Gemm::InputDtype:float\n")
    assert d.overrides().custom("/fc/Gemm", "MatMulV2") == CustomDtypes(("fp16", "fp16", None), ("fp32",))
    assert d.overrides().custom("x", "LayerNorm") == CustomDtypes((), ("fp32",))
    assert [w[1] for w in d.warnings] == ["duplicate"]       # GE keeps the first entry


@pytest.mark.parametrize("text,problem", [
    ("a::InputDtype:float16\n\nb::InputDtype:float\n", "line 2: an empty line"),
    ("a::OutputDtype:float,InputDtype:float16\n", "InputDtype must come before"),
    ("a::float16\n", "neither InputDtype nor OutputDtype"),
    ("a::InputDtype:half\n", "'half' is not a GE data type"),
    ("::InputDtype:float\n", "line 1"),
    ("a::InputDtype float\n", "followed by ':'"),
    ("a::InputDtype:" + "float," * 200 + "\n", "longer than 1023 bytes"),
])
def test_customize_file_refused_like_ge(text, problem):
    with pytest.raises(InputError, match=problem):
        read_customize_text(text, "c.cfg")


def test_override_files_round_trip():
    ov = Overrides({"/a/Gemm", "b"}, {"LayerNorm"},
                   (("name", "/a/Gemm", CustomDtypes(("fp16", None), ("fp32",))),
                    ("type", "SoftmaxV2", CustomDtypes((), ("bf16",)))))
    back = read_keep_dtype_text(ov.keep_dtype_text()).overrides().merged(
        read_customize_text(ov.customize_text()).overrides())
    assert back == ov


@pytest.mark.parametrize("reader", [read_keep_dtype, lambda p: load(customize=p)])
def test_unreadable_files_are_one_line_errors(tmp_path, reader):
    (tmp_path / "bin").write_bytes(b"\x00\x01abc")
    (tmp_path / "latin").write_bytes(b"caf\xe9\n")
    for name in ("bin", "latin", "missing"):
        with pytest.raises(InputError):
            reader(tmp_path / name)
    with pytest.raises(InputError, match="directory"):
        reader(tmp_path)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(alphabet=st.sampled_from(list("ab/:,OpTypeInputDtOu fl16\n\r#")),
                                         max_size=200).map(lambda s: s.encode()))
def test_fuzzed_override_files_are_read_or_refused_in_one_line(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("fz") / "f.cfg"
    p.write_bytes(data)
    for read in (read_keep_dtype, lambda q: load(customize=q)):
        try:
            read(p)
        except InputError as e:
            assert "\n" not in str(e) and str(p) in str(e)
