"""The blame rule as a pure function (compare/blame.py): properties that hold for every combination of facts."""
import math

from hypothesis import given, settings, strategies as st

from advisor.compare.blame import AMPLIFY_GROWTH, DOMINANT, LocalError, OpFacts, blame

rel = st.one_of(st.just(0.0), st.floats(min_value=1e-8, max_value=10.0), st.just(math.nan))
flag = st.sampled_from([0.0, 1.0, math.nan])
local = st.one_of(st.none(), st.builds(LocalError, rel, flag, rel, flag))
facts = st.builds(OpFacts, st.booleans(), st.booleans(), st.booleans(), st.booleans(),
                  st.floats(min_value=0.0, max_value=100.0), st.booleans(),
                  st.floats(min_value=0.0, max_value=100.0), st.booleans(), local)


@settings(max_examples=500)
@given(facts)
def test_introduced_is_never_nan_nor_negative(f):
    b = blame(f)
    assert not math.isnan(b.introduced) and b.introduced >= 0


@settings(max_examples=500)
@given(facts)
def test_only_an_existing_rounding_producer_is_blamed(f):
    b = blame(f)
    assert not b.on_producer or f.has_producer
    assert not b.co_producer or (f.has_producer and f.own_low and not b.on_producer)


@settings(max_examples=500)
@given(facts)
def test_a_pass_through_op_introduces_nothing_itself(f):
    b = blame(f)
    if f.follow and not b.on_producer:
        assert b.introduced == 0.0


@settings(max_examples=500)
@given(facts)
def test_an_fp32_op_introduces_nothing_of_its_own(f):
    b = blame(f)
    if not f.own_low and not b.on_producer:
        assert b.introduced == 0.0


@settings(max_examples=300)
@given(facts)
def test_fp32_op_on_rounded_inputs_blames_the_producer(f):
    """With local errors, an FP32 op fed by a low producer whose input rounding alone causes error."""
    if f.local is None or f.own_low or not f.has_producer:
        return
    rnd = f.local.inrnd_rel
    if not math.isnan(rnd) and rnd > 0:
        assert blame(f).on_producer


def test_non_finite_from_finite_inputs_is_the_ops_own_overflow():
    f = OpFacts(own_low=True, inherited=False, follow=False, has_producer=True, out_rel=math.inf, out_finite=False,
                in_rel=1e-4, in_finite=True)
    b = blame(f)
    assert not b.on_producer and b.introduced == math.inf


def test_amplification_of_the_producers_rounding_is_the_producers():
    f = OpFacts(own_low=False, inherited=False, follow=False, has_producer=True, out_rel=0.3, out_finite=True,
                in_rel=0.3 / (AMPLIFY_GROWTH * 2), in_finite=True)
    assert blame(f).on_producer


def test_dominant_input_rounding_of_an_own_decision_is_shared():
    f = OpFacts(own_low=True, inherited=False, follow=False, has_producer=True, out_rel=0.2, out_finite=True,
                in_rel=0.01, in_finite=True, local=LocalError(0.1, 0.0, DOMINANT * 0.1 + 1e-6, 0.0))
    b = blame(f)
    assert not b.on_producer and b.co_producer and b.introduced == 0.1
