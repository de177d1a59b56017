"""The torch_npu case generator (bench/npu_cases): determinism, the kind cycle and the fixed split, calibration of
the deciding quantity to the case's margin, the hazard's input kept below the fp16 limit, and the oracle's policy
files being precision policies advisor reads."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.npu_cases import generator as G  # noqa: E402
from bench.npu_cases.oracle import policy_doc  # noqa: E402
from bench.npu_cases.suite import DEV_SEEDS, HOLDOUT_SEEDS, SETS, cases  # noqa: E402

ALL = list(DEV_SEEDS) + list(HOLDOUT_SEEDS)


def test_same_seed_same_case_and_workload():
    a, b = G.make_case(7), G.make_case(7)
    assert a.spec == b.spec and a.fingerprint == b.fingerprint
    (m1, x1), (m2, x2) = a.workload(), b.workload()
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert all(torch.equal(u[0], v[0]) for u, v in zip(x1, x2))


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_set_holds_twice_as_many_hazards_as_controls(name):
    kinds = [c.kind for c in cases(name)]
    assert kinds.count("hazard") == 2 * kinds.count("control") and len(kinds) == len(SETS[name])


def test_dev_and_held_out_seeds_do_not_overlap():
    assert not set(DEV_SEEDS) & set(HOLDOUT_SEEDS)


def test_every_family_occurs_in_the_two_sets():
    fams = {G.make_case(s).family for s in ALL}
    assert fams == set(G.HAZARDS) | set(G.CONTROLS)


@pytest.mark.parametrize("seed", [s for s in ALL if G.make_case(s).family in
                                  ("mul_square", "add_linears", "div_small", "prefix_matmul", "sigmoid_bce",
                                   "pow_square", "mul_small", "cumsum", "bce_logits", "softmax_large")])
def test_threshold_quantity_lands_on_the_margin(seed):
    c = G.make_case(seed)
    net, batches = c.workload()
    assert G._quantity(net, c.spec, batches) == pytest.approx(c.spec["margin"], rel=1e-3)


@pytest.mark.parametrize("seed", ALL)
def test_the_hazards_input_stays_below_the_fp16_limit(seed):
    """Only the planted op may overflow: the trunk's output (the hazard module's input) is well below 65504."""
    c = G.make_case(seed)
    net, batches = c.workload()
    with torch.no_grad():
        assert max(float(net.trunk(x).abs().max()) for (x,) in batches) < G.FP16_MAX / 2


def test_oracle_policy_files_are_precision_policies():
    from advisor.precision_policy import parse_policy
    pol = parse_policy(policy_doc({"op:mul", "module:hz"}), "p.json")
    assert sorted(str(r) for r in pol.rules.keep_fp32) == ["keep module 'hz' in fp32", "keep op mul in fp32"]
