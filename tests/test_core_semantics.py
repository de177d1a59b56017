"""The one semantics module: GE's per-op precision rules, with why, and what-if flips."""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from advisor import semantics as S
from advisor.graph import add_op, connect, new_graph
from advisor.mixlist import Mixlist, apply
from advisor.oplists import OpLists, load_default, load_ops_info
from advisor.overrides import CustomDtypes, Overrides

L = load_default("ascend910b")
# the 2026 ascend910b ops-info entries (hicann/ge tests, trimmed): lists and kernel dtypes from one file
KL = load_ops_info(Path(__file__).parent / "fixtures/real/ge_ops_info_910b/aic-ascend910b-ops-info.json")


def is_weight(g, n) -> bool:
    """Producers GE ranks last: nodes of type Const, Constant or Variable (op_format_dtype_judge.cc:692-697)."""
    return g.nodes[n]["type"] in ("Const", "Constant", "Variable")


def ranked_inputs(g, node):
    """Test oracle, written from the spec independently of advisor.semantics: float inputs as
    (input index, producer, output index), other producers first in index order, then Const/Constant/Variable."""
    real, weak = [], []
    for src, _, d in g.in_edges(node, data=True):
        if d.get("float", True):
            for out_idx, in_idx in d["ports"]:
                (weak if is_weight(g, src) else real).append((in_idx, src, out_idx))
    return sorted(real, key=lambda t: t[0]) + sorted(weak, key=lambda t: t[0])  # MatMulV2 white, Log black, Exp/Add/Mul/Cast gray


def chain(*types, first_role="data"):
    g = new_graph()
    add_op(g, "in", "Data", role=first_role)
    prev = "in"
    for i, t in enumerate(types):
        add_op(g, f"{t}{i}", t)
        connect(g, prev, f"{t}{i}")
        prev = f"{t}{i}"
    return g


def test_white_op_runs_low_and_black_op_runs_fp32():
    p = S.plan(chain("MatMulV2", "Log"), L)
    assert p["MatMulV20"] == "fp16" and p.why("MatMulV20").rule == "white"
    assert p["Log1"] == "fp32" and p.why("Log1").rule == "black"


def test_gray_op_inherits_from_its_producer_and_names_it():
    p = S.plan(chain("MatMulV2", "Exp", "Log", "Add"), L)
    assert p["Exp1"] == "fp16" and p.why("Exp1").via == "MatMulV20"
    assert p["Add3"] == "fp32" and p.why("Add3").via == "Log2" and p.why("Add3").root == "Log2"


def test_graph_input_is_an_fp32_producer_for_a_following_gray_op():
    p = S.plan(chain("Exp"), L)
    assert p["Exp0"] == "fp32" and p.why("Exp0").rule == "gray-inherit" and p.why("Exp0").via == "in"


def test_first_activation_input_decides_even_when_a_constant_has_a_lower_index():
    g = new_graph()
    add_op(g, "x", "Data", role="data")
    add_op(g, "w", "Const", role="const")
    add_op(g, "mm", "MatMulV2")
    connect(g, "x", "mm")
    add_op(g, "log", "Log")
    connect(g, "x", "log")
    add_op(g, "add", "Add")
    connect(g, "w", "add", 0, 0)        # constant at input 0
    connect(g, "log", "add", 0, 1)      # fp32 activation at input 1
    connect(g, "mm", "add", 0, 2)       # fp16 activation at input 2
    p = S.plan(g, L)
    assert p["add"] == "fp32" and p.why("add").via == "log"
    assert ranked_inputs(g, "add")[0][1] == "log"


def test_gray_op_fed_only_by_constants_takes_their_dtype_and_one_without_producer_keeps_its_own():
    # changed with GE's source: a Const is a producer (CheckHasNoFather), so MatchForGray rise-matches its fp32;
    # with no producer allow_fp32_to_fp16 keeps the origin dtype (both were "low" before)
    g = new_graph()
    add_op(g, "w", "Const", role="const")
    add_op(g, "exp", "Exp")
    connect(g, "w", "exp")
    add_op(g, "free", "Exp")  # no producer at all
    p = S.plan(g, L)
    assert (p["exp"], p.why("exp").rule) == ("fp32", "gray-const-inputs")
    assert (p["free"], p.why("free").rule) == ("fp32", "gray-no-producer")


def test_gray_op_skips_a_non_black_fp16_to_fp32_cast():
    # the Cast is skipped by its own input dtype (the model's fp16), whatever its producer was judged
    g = chain("MatMulV2")
    add_op(g, "cast", "Cast", cast_to="fp32", in_dtypes=["fp16"])
    connect(g, "MatMulV20", "cast")
    add_op(g, "exp", "Exp")
    connect(g, "cast", "exp")
    p = S.plan(g, L)
    assert p["cast"] == "fp32" and p.why("cast").rule == "cast-dtype"
    assert p["exp"] == "fp16" and p.why("exp").rule == "gray-skip-cast" and p.why("exp").via == "MatMulV20"
    black_cast = apply(L, Mixlist(black_add=("Cast",))).lists
    assert S.plan(g, black_cast)["exp"] == "fp32"


def test_cast_from_fp32_is_not_skipped():
    g = chain("Log")
    add_op(g, "cast", "Cast", cast_to="fp32")
    connect(g, "Log0", "cast")
    add_op(g, "exp", "Exp")
    connect(g, "cast", "exp")
    assert S.plan(g, L)["exp"] == "fp32"


def test_view_without_kernel_follows_and_a_view_of_a_weight_ranks_by_its_index():
    g = new_graph()
    add_op(g, "x", "Data", role="data")
    add_op(g, "mm", "MatMulV2")
    connect(g, "x", "mm")
    add_op(g, "view", "Reshape", kernel=False)
    connect(g, "mm", "view")
    add_op(g, "w", "Variable", role="variable")
    add_op(g, "wt", "Transpose", kernel=False)
    connect(g, "w", "wt")
    add_op(g, "add", "Add")
    connect(g, "wt", "add", 0, 0)
    connect(g, "view", "add", 0, 1)
    p = S.plan(g, L)
    assert p["view"] == "fp16" and p.why("view").rule == "follow"
    # changed with GE's source: only Const/Constant/Variable producers rank last, a Transpose of one ranks first
    assert p["add"] == "fp32" and p.why("add").via == "wt"


def test_ops_excluded_from_decisions_pass_precision_through():
    g = chain("MatMulV2")
    add_op(g, "hccl", "HcomAllReduce", decides=False)
    connect(g, "MatMulV20", "hccl")
    add_op(g, "exp", "Exp")
    connect(g, "hccl", "exp")
    p = S.plan(g, L)
    assert p["hccl"] == "fp16" and p["exp"] == "fp16" and p.why("exp").root == "MatMulV20"


def test_int_tensors_do_not_decide_and_int_ops_are_na():
    g = new_graph()
    add_op(g, "ids", "Data", role="data", dtype="int64")
    add_op(g, "table", "Variable", role="variable")
    add_op(g, "gather", "GatherV2")
    connect(g, "ids", "gather", 0, 1, float=False)
    connect(g, "table", "gather", 0, 0)
    add_op(g, "argmax", "ArgMaxV2", float=False)
    connect(g, "gather", "argmax")
    p = S.plan(g, L)
    # GatherV2(params=Variable): the Variable is the producer, fp32 (it was fp16 before GE's source was read)
    assert p["ids"] == "int64" and p["gather"] == "fp32" and p["argmax"] == "n/a"
    assert p.why("gather").rule == "gray-const-inputs" and p.why("gather").via == "table"


def test_unknown_op_types_run_on_ai_cpu_in_their_original_dtype():
    # changed with GE's source (IsNoNeedJudge): a type without an AI Core kernel is not judged (it was gray)
    p = S.plan(chain("MatMulV2", "MyCustomOp", "Exp"), L)
    assert p["MyCustomOp1"] == "fp32" and p.why("MyCustomOp1").rule == "ai-cpu" and p.on_ai_cpu("MyCustomOp1")
    assert p["Exp2"] == "fp32" and p.why("Exp2").via == "MyCustomOp1"


def test_bf16_mode_reduces_to_bf16():
    assert S.plan(chain("MatMulV2", "Exp"), L, "mixed_bfloat16")["Exp1"] == "bf16"
    assert S.plan(chain("MatMulV2"), L, "allow_mix_precision_bf16")["MatMulV20"] == "bf16"


def test_other_modes():
    g = chain("MatMulV2", "Exp", "Log")
    p = S.plan(g, L, "force_fp32")   # the cube op: fp16 inputs, fp32 output (force_fp32.cc:36-50)
    assert (p["MatMulV20"], p.exec_dtypes("MatMulV20"), p["Exp1"], p["Log2"]) == ("fp16", ("fp16", "fp32"), "fp32",
                                                                                  "fp32")
    p = S.plan(g, L, "force_fp16")
    assert (p["MatMulV20"], p["Exp1"], p["Log2"]) == ("fp16", "fp16", "fp16")
    p = S.plan(g, L, "allow_fp32_to_fp16")
    assert (p["MatMulV20"], p["Exp1"], p["Log2"]) == ("fp16", "fp32", "fp32")
    assert not S.uses_mixlist("allow_fp32_to_fp16") and S.uses_mixlist("allow_mix_precision")
    with pytest.raises(ValueError):
        S.plan(g, L, "mixed_float8")


def test_what_if_lists_the_instances_that_flip_with_reasons():
    g = chain("MatMulV2", "Exp", "Mul", "Log", "Add")
    edited = apply(L, Mixlist(black_add=("MatMulV2",))).lists
    flips = S.what_if(g, L, edited)
    assert [f.node for f in flips] == ["MatMulV20", "Exp1", "Mul2"]
    assert flips[1].why_after.rule == "gray-inherit" and flips[1].why_after.root == "MatMulV20"
    assert all((f.before, f.after) == ("fp16", "fp32") for f in flips)


def test_cycle_is_refused():
    g = chain("Exp", "Add")
    connect(g, "Add1", "Exp0", 0, 1)
    with pytest.raises(ValueError, match="cycle"):
        S.plan(g, L)


# ---------------------------------------------------------------- property tests
TYPES = ["MatMulV2", "Log", "Exp", "Add", "Mul", "Cast", "Reshape"]
SMALL = OpLists(white=frozenset({"MatMulV2"}), black=frozenset({"Log"}), known=frozenset(TYPES), soc="t")


@st.composite
def random_dag(draw):
    n = draw(st.integers(2, 25))
    g = new_graph()
    for i in range(n):
        kind = draw(st.sampled_from(["op"] * 6 + ["data", "const"])) if i else "data"
        if kind != "op":
            add_op(g, i, "Data" if kind == "data" else "Const", role=kind)
            continue
        t = draw(st.sampled_from(TYPES))
        attrs = {"cast_to": draw(st.sampled_from(["fp32", "fp16"]))} if t == "Cast" else {}
        if t == "Reshape":
            attrs["kernel"] = False
        add_op(g, i, t, **attrs)
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
        for k, j in enumerate(preds):
            connect(g, j, i, 0, k)
    return g


def lists_strategy():
    return st.builds(lambda b, w: apply(SMALL, Mixlist(black_add=tuple(b), white_add=tuple(w))).lists,
                     st.lists(st.sampled_from(TYPES[:5]), max_size=2, unique=True),
                     st.just([]))


@settings(max_examples=300, deadline=None)
@given(random_dag(), lists_strategy(), st.sampled_from(["mixed_float16", "mixed_bfloat16"]))
def test_every_gray_op_has_the_precision_of_the_producer_the_rule_names(g, lists, mode):
    p = S.plan(g, lists, mode)
    low = S.mode_info(mode)[1]
    for node, prec in p.items():
        w = p.why(node)
        if g.nodes[node]["role"] != "op" or lists.list_of(g.nodes[node]["type"]) != "gray":
            continue
        ranked = ranked_inputs(g, node)
        if w.rule == "follow" and not ranked:
            assert w.via is None
        elif w.rule in ("gray-inherit", "follow", "gray-const-inputs"):
            assert w.via == ranked[0][1] and prec == p[w.via]
            if w.rule != "follow":
                assert (w.rule == "gray-const-inputs") == (g.nodes[w.via]["role"] == "const")
        elif w.rule == "gray-skip-cast":
            cast = ranked[0][1]
            assert g.nodes[cast]["type"] == "Cast" and w.via == ranked_inputs(g, cast)[0][1]
            assert prec == p[w.via]
        elif w.rule == "rise":    # the producer's dtype is the one the mode forbids: fp32
            assert prec == "fp32" and p[w.via] == ("bf16" if low == "fp16" else "fp16")
        elif w.rule == "gray-no-producer":
            assert prec == "fp32" and not ranked


@settings(max_examples=200, deadline=None)
@given(random_dag(), lists_strategy())
def test_must_keep_origin_dtype_reduces_nothing(g, lists):
    p = S.plan(g, lists, "must_keep_origin_dtype")
    for n, prec in p.items():
        if prec in S.LOW:  # only the model's own casts to fp16 (and views of them) are low
            root = p.why(n).root
            assert g.nodes[root]["type"] == "Cast" and g.nodes[root]["cast_to"] == "fp16", n


@settings(max_examples=300, deadline=None)
@given(random_dag(), lists_strategy(), lists_strategy())
def test_incremental_what_if_equals_a_full_replan(g, a, b):
    c = S.compile_graph(g)
    base = c.plan(a)
    inc = c.what_if(base, b)
    full = c.plan(b)
    assert inc.precision_list == full.precision_list
    assert [f.node for f in S.flips_between(base, inc)] == [n for n in c.order if base[n] != full[n]]


def _rule_cases():
    """One small graph per named rule of the decision chain: (graph, mode, node, expected rule)."""
    cases = []
    g = chain("MatMulV2", "Log", "Exp")
    cases += [(g, "mixed_float16", "in", S.Rule.GRAPH_INPUT), (g, "mixed_float16", "MatMulV20", S.Rule.WHITE),
              (g, "mixed_float16", "Log1", S.Rule.BLACK), (g, "mixed_float16", "Exp2", S.Rule.GRAY_INHERIT),
              (g, "must_keep_origin_dtype", "MatMulV20", S.Rule.ORIGIN),
              (g, "force_fp32", "Log1", S.Rule.FORCE_FP32), (g, "force_fp32", "MatMulV20", S.Rule.FORCE_FP32_CUBE),
              (g, "force_fp16", "Log1", S.Rule.FORCE_LOW),
              (g, "allow_fp32_to_fp16", "MatMulV20", S.Rule.FP32_TO_LOW_CUBE),
              (g, "allow_fp32_to_fp16", "Log1", S.Rule.FP32_TO_LOW_VECTOR)]
    g = chain("Exp", first_role="const")
    cases.append((g, "mixed_float16", "Exp0", S.Rule.GRAY_CONST_INPUTS))
    cases.append((g, "mixed_float16", "in", S.Rule.CONSTANT))
    g = new_graph()
    add_op(g, "e", "Exp")
    add_op(g, "i", "Gather", float=False)
    add_op(g, "v", "Reshape", kernel=False)
    add_op(g, "c", "Cast")
    add_op(g, "m", "MatMulV2", low_kernel=False)
    add_op(g, "k", "Cast", cast_to="fp32")
    connect(g, "e", "v")
    cases += [(g, "mixed_float16", "e", S.Rule.GRAY_NO_PRODUCER), (g, "mixed_float16", "i", S.Rule.NON_FLOAT),
              (g, "mixed_float16", "v", S.Rule.FOLLOW), (g, "mixed_float16", "c", S.Rule.CAST_ALLOW),
              (g, "mixed_float16", "m", S.Rule.WHITE_NO_LOW_KERNEL), (g, "mixed_float16", "k", S.Rule.CAST_DTYPE)]
    g = new_graph()
    add_op(g, "x", "Data", role="data", dtype="fp16")
    add_op(g, "mm", "MatMulV2")
    add_op(g, "cast", "Cast", cast_to="fp32", in_dtypes=["fp16"])
    add_op(g, "exp", "Exp")
    connect(g, "x", "mm")
    connect(g, "mm", "cast")
    connect(g, "cast", "exp")
    cases.append((g, "mixed_float16", "exp", S.Rule.GRAY_SKIP_CAST))
    g = chain("Exp", "MyCustomOp", "HcomAllReduce", first_role="data")
    g.nodes["in"]["dtype"] = "fp16"
    g.nodes["HcomAllReduce2"]["origin_dtype"] = "fp32"
    add_op(g, "fft", "Mul", in_dtypes=["complex64"], out_dtypes=["complex64"])
    cases += [(g, "mixed_bfloat16", "Exp0", S.Rule.RISE), (g, "mixed_float16", "MyCustomOp1", S.Rule.AI_CPU),
              (g, "mixed_float16", "HcomAllReduce2", S.Rule.HCCL), (g, "mixed_float16", "fft", S.Rule.DTYPE_SENSITIVE)]
    g = chain("AvgPool", "Exp")
    g.nodes["Exp1"]["origin_dtype"] = "bf16"
    cases += [(g, "mixed_float16", "AvgPool0", S.Rule.AI_CPU_DTYPE, Overrides(keep_names={"AvgPool0"}), KL),
              (g, "allow_fp32_to_fp16", "AvgPool0", S.Rule.REDUCE, None, KL)]
    g = chain("MatMulV2", "Log", "Exp")
    cases.append((g, "force_fp16", "Log1", S.Rule.KEEP_DTYPE, Overrides(keep_names={"Log1"})))
    cases.append((g, "mixed_float16", "MatMulV20", S.Rule.CUSTOMIZE_DTYPE,
                  Overrides(customize=(("type", "MatMulV2", CustomDtypes(("fp16",), ("fp32",))),))))
    return [(*c, *(None, L)[len(c) - 4:]) if len(c) < 6 else c for c in cases]


@pytest.mark.parametrize("g,mode,node,rule,overrides,lists", _rule_cases(),
                         ids=lambda x: str(x) if isinstance(x, S.Rule) else "")
def test_each_named_rule_of_the_decision_chain(g, mode, node, rule, overrides, lists):
    p = S.plan(g, lists, mode, overrides)
    assert p.why(node).rule is rule
    assert p.why(node).to_dict()["rule"] == rule.value


def test_every_rule_is_exercised():
    assert {c[3] for c in _rule_cases()} == set(S.Rule)
