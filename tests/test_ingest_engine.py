"""Which engine a run ran on (``advisor.ingest.engine``): real eager torch_npu profiles and PyTorch msprobe dumps read
as torch_npu, GE graphs / GE-named profiles and older run directories as ge; ACL_PRECISION_MODE read where the
profile records it.  Real files from tests/fixtures/real (sources in its SOURCES.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.errors import InputError
from advisor.ingest.run import engine_of, load_run, run_from_dumps

REAL = Path(__file__).parent / "fixtures" / "real"
PROFILES = Path(__file__).parent.parent / "profiles"


def _profiler_info(**extra) -> dict:
    """A profiler_info.json as torch_npu's ``_dump_profiler_info`` writes it (profiler_interface.py)."""
    return {"config": {"common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                                         "schedule": None, "record_shapes": True, "profile_memory": False,
                                         "with_stack": False, "with_flops": False, "with_modules": False},
                       "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION"}},
            "start_info": {"syscnt_enable": True, "freq": 100.0, "start_cnt": 1, "start_monotonic": 1},
            "end_info": {"collectionEndTime": 2, "MonotonicTimeNs": 2},
            "torch_npu_version": "2.1.0", "cann_version": "8.0.RC1", **extra}


def _ascend_pt(tmp_path: Path, kernel_details: Path, info: dict | None = None, metadata: dict | None = None) -> Path:
    """A torch_npu profiler output folder (``<worker>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv``)."""
    root = tmp_path / "prof" / "worker0_123_ascend_pt"
    out = root / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(kernel_details, out / "kernel_details.csv")
    (root / "profiler_info.json").write_text(json.dumps(info if info is not None else _profiler_info()))
    if metadata is not None:
        (root / "profiler_metadata.json").write_text(json.dumps(metadata))
    return tmp_path / "prof"


AC_BF16 = REAL / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv"
ACLOP = REAL / "torch_npu_profile_mstt" / "kernel_details.csv"


# ------------------------------------------------------------------------------ eager profiles
def test_aclnn_named_profile_is_torch_npu(tmp_path):
    run = load_run(_ascend_pt(tmp_path, AC_BF16))
    assert run.engine == "torch_npu" and "29 aclnn" in run.engine_info.why


def test_aclop_type_counter_named_profile_is_torch_npu(tmp_path):
    """aclop single-op kernels are named <Type><counter> (Mul81, MatMul91) in a real eager training profile."""
    info = engine_of(_ascend_pt(tmp_path, ACLOP))
    assert info.engine == "torch_npu" and "<Type><n>" in info.why


def test_a_bare_eager_kernel_table_is_torch_npu():
    assert engine_of(AC_BF16).engine == "torch_npu"


def test_profiler_info_without_the_mode_leaves_it_to_the_chip(tmp_path):
    assert engine_of(_ascend_pt(tmp_path, AC_BF16)).acl_precision_mode is None


def test_acl_precision_mode_is_read_from_profiler_info(tmp_path):
    info = engine_of(_ascend_pt(tmp_path, AC_BF16, _profiler_info(ACL_PRECISION_MODE="allow_fp32_to_fp16")))
    assert info.acl_precision_mode == "allow_fp32_to_fp16" and info.acl_source.endswith("profiler_info.json")


def test_acl_precision_mode_is_read_from_profiler_metadata(tmp_path):
    """``prof.add_metadata("ACL_PRECISION_MODE", ...)`` lands in profiler_metadata.json beside profiler_info."""
    info = engine_of(_ascend_pt(tmp_path, AC_BF16, metadata={"ACL_PRECISION_MODE": "must_keep_origin_dtype"}))
    assert info.acl_precision_mode == "must_keep_origin_dtype" and info.acl_source.endswith("profiler_metadata.json")


def test_a_mode_torch_npu_refuses_is_one_line_naming_the_file(tmp_path):
    p = _ascend_pt(tmp_path, AC_BF16, _profiler_info(ACL_PRECISION_MODE="allow_mix_precision"))
    with pytest.raises(InputError, match="profiler_info.json.*allow_mix_precision.*not one torch_npu accepts"):
        engine_of(p)


# ------------------------------------------------------------------------------ msprobe dumps
@pytest.mark.parametrize("folder", ["msprobe_dump_mstt_ut", "msprobe_dump_fp16_megatron_ut"])
def test_pytorch_msprobe_dump_is_torch_npu(folder):
    assert engine_of(REAL / folder).engine == "torch_npu"


def test_mindspore_msprobe_dump_is_not_torch_npu():
    assert engine_of(REAL / "msprobe_dump_mindspore_ut").engine == "ge"


def test_dump_without_framework_key_is_told_by_its_records(tmp_path):
    """msprobe's detect_framework_by_dump_json: no ``framework`` key -> the first ``"type": "torch..."`` record."""
    d = json.loads((REAL / "msprobe_dump_fp16_megatron_ut" / "dump.json").read_text())
    d.pop("framework", None)
    (tmp_path / "dump.json").write_text(json.dumps(d, indent=1))
    assert engine_of(tmp_path).engine == "torch_npu"


def test_a_run_of_two_pytorch_dumps_is_torch_npu():
    d = REAL / "msprobe_dump_pair_cpu"
    run = run_from_dumps(d / "pair_bf16", d / "pair_fp32")
    assert run.engine == "torch_npu"


# ------------------------------------------------------------------------------ GE stays GE
def test_ge_graph_dump_is_ge():
    assert engine_of(REAL / "ge_proto_ge_st").engine == "ge"


def test_ge_graph_dump_wins_over_a_pytorch_dump(tmp_path):
    shutil.copytree(REAL / "ge_proto_ge_st", tmp_path / "graph")
    shutil.copytree(REAL / "msprobe_dump_mstt_ut", tmp_path / "dump")
    assert engine_of(tmp_path).engine == "ge"


@pytest.mark.parametrize("run", ["cnn_onnx", "minilm_onnx", "minilm_fp16"])
def test_ge_named_profile_without_run_json_is_ge(run):
    """An ATC (ONNX) or GE PyTorch profile names kernels after graph nodes: ge, even with no run.json or graph."""
    k = next((PROFILES / run / "profile").glob("*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    assert engine_of(k).engine == "ge"


def test_run_json_without_engine_stays_ge():
    """Existing run directories (run.json before torch_npu eager) keep reading as ge, so their advice is unchanged."""
    info = engine_of(PROFILES / "mlp_exp")
    assert info.engine == "ge" and "names no engine" in info.why


@pytest.mark.slow
def test_an_emulated_torch_npu_profile_reads_like_a_real_one(tmp_path):
    """The emulator's torch_npu profile records ACL_PRECISION_MODE in profiler_info: without its run.json the run
    still reads as torch_npu, in the mode it ran in."""
    assert main(["capture", "examples/mlp_exp.py:workload", "--out", str(tmp_path / "r"), "--engine", "torch_npu",
                 "--amp", "none", "--soc", "ascend910", "--no-local-error", "--dump", "stats"]) == 0
    prof = tmp_path / "r" / "profile"
    info = engine_of(prof)
    assert info.engine == "torch_npu" and info.acl_precision_mode == "allow_fp32_to_fp16"


# ------------------------------------------------------------------------------ the commands see it
def test_inspect_names_the_engine_and_its_evidence(tmp_path, capsys):
    p = _ascend_pt(tmp_path, AC_BF16, _profiler_info(ACL_PRECISION_MODE="must_keep_origin_dtype"))
    assert main(["inspect", "--profile", str(p)]) == 0
    out = capsys.readouterr().out
    assert "engine: torch_npu (kernel_details.csv: 29 of 29" in out
    assert "ACL_PRECISION_MODE must_keep_origin_dtype (from profiler_info.json)" in out


def test_inspect_json_carries_the_engine(tmp_path, capsys):
    assert main(["inspect", "--profile", str(REAL / "msprobe_dump_mstt_ut"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["engine"]["engine"] == "torch_npu"


def test_recommend_takes_the_torch_npu_path_for_a_real_eager_profile(tmp_path, capsys):
    code = main(["recommend", "--profile", str(_ascend_pt(tmp_path, AC_BF16)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "torch_npu run" in err and len(err.strip().splitlines()) == 1


def test_a_ge_run_passes_the_engine_check_of_recommend_and_replay():
    from advisor.commands.options import EngineChoice
    assert EngineChoice().for_run(str(PROFILES / "mlp_exp"), "recommend") == "ge"


def test_engine_ge_overrides_what_a_real_runs_files_suggest(tmp_path):
    from advisor.commands.options import EngineChoice
    assert EngineChoice(engine="ge").for_run(str(_ascend_pt(tmp_path, AC_BF16)), "recommend") == "ge"


def test_engine_cannot_override_an_advisor_captures_run_json(tmp_path):
    from advisor.commands.options import EngineChoice
    with pytest.raises(InputError, match="captured with engine ge, not torch_npu"):
        EngineChoice(engine="torch_npu").for_run(str(PROFILES / "mlp_exp"), "recommend")


def test_a_malformed_kernel_table_is_named_before_the_engine(tmp_path):
    """The engine is read with the kernel table's own reader: a bad cell is the same one-line error as load_run's."""
    import csv
    with AC_BF16.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[3][rows[0].index("Duration(us)")] = "-5"
    bad = tmp_path / "kernel_details.csv"
    with bad.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(InputError, match="Duration"):
        engine_of(bad)


def test_recommend_takes_the_torch_npu_path_for_a_pytorch_dump(tmp_path, capsys):
    """A real PyTorch pair gets a precision policy, not GE lists (tests/test_torch_npu_real_advice.py has the rest)."""
    code = main(["recommend", "--profile", str(REAL / "msprobe_dump_pair_cpu"), "--out", str(tmp_path / "o")])
    capsys.readouterr()
    assert code == 0 and (tmp_path / "o" / "precision_policy.json").is_file()
    assert not (tmp_path / "o" / "modify_mixlist.json").exists()
