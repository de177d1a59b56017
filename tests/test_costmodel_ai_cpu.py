"""The time of an op on AI CPU: figures from the real torch_npu profile, and the performance cliff a black-list edit
that moves an op to AI CPU shows in the time model (recommend's and diff's time figures)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor import costmodel, semantics as S
from advisor.graph import add_op, connect, new_graph
from advisor.mixlist import Mixlist, apply
from advisor.oplists import load_ops_info

REAL = Path(__file__).parent / "fixtures/real"
KL = load_ops_info(REAL / "ge_ops_info_910b/aic-ascend910b-ops-info.json")


def test_ai_cpu_figures_are_the_medians_of_the_real_profiles_ai_cpu_and_scalar_ai_core_kernels():
    d = pd.read_csv(REAL / "torch_npu_profile_mstt/kernel_details.csv")
    cpu = d[d["Accelerator Core"] == "AI_CPU"]["Duration(us)"]
    scalar = d[(d["Accelerator Core"] == "AI_VECTOR_CORE") & (d["Input Shapes"].astype(str).str.strip('"') == "")]
    assert len(cpu) == 7 and costmodel.AICPU_LAUNCH_US == pytest.approx(float(cpu.median()))
    assert costmodel.AICPU_RATIO == pytest.approx(float(cpu.median()) / float(scalar["Duration(us)"].median()))
    # a scalar op on AI CPU costs what the profile measured; on the AI Core a few us
    assert costmodel.op_time_us("Cast", 1, 6, "fp32", ai_cpu=True) == pytest.approx(cpu.median(), rel=0.01)
    assert costmodel.core_type("Cast", True) == "AI_CPU" and costmodel.core_type("MatMulV2") == "AI_CORE"


def test_black_list_edit_that_moves_an_op_to_ai_cpu_shows_its_cost_in_the_plan_time():
    g = new_graph()
    add_op(g, "x", "Data", role="data", out_shapes=[[64, 256]])
    add_op(g, "mm", "MatMulV2", in_shapes=[[64, 256], [256, 256]], out_shapes=[[64, 256]],
           in_dtypes=["fp32", "fp32"], out_dtypes=["fp32"])
    add_op(g, "ap", "AvgPoolV2", in_shapes=[[64, 256]], out_shapes=[[64, 256]], in_dtypes=["fp32"],
           out_dtypes=["fp32"])
    connect(g, "x", "mm")
    connect(g, "mm", "ap")
    c = S.compile_graph(g)
    tm = costmodel.build_time_model(c)
    before = c.plan(KL)
    after = c.what_if(before, apply(KL, Mixlist(black_add=("AvgPoolV2",))).lists)
    assert S.cpu_mask(before) is None and after.on_ai_cpu("ap")
    t0 = tm.plan_time(S.low_mask(before), S.cpu_mask(before))[0]
    t1 = tm.plan_time(S.low_mask(after), S.cpu_mask(after))[0]
    i = c.index["ap"]
    assert t1 - t0 >= costmodel.AICPU_LAUNCH_US - tm.t_low[i]
    assert tm.times(S.low_mask(after), S.cpu_mask(after))[i] == pytest.approx(float(tm.t_cpu[i]))
    # the AI CPU op counts as fp32 time in the low-precision share
    assert tm.share(S.low_mask(after), S.cpu_mask(after)) < tm.share(S.low_mask(before), S.cpu_mask(before))
    assert np.isclose(tm.share(S.low_mask(before)), tm.share(S.low_mask(before), None))
