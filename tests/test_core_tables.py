"""The default tables: CANN 9.2.0 (generated from hicann/ge's real ascend910b ops-info, with kernel dtypes) and CANN
8.1.RC1, selectable with --cann; what each chip uses; run.json records the table; several --ops-info files."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys

import pytest

from advisor.errors import InputError
from advisor.kernels import Kernel
from advisor.oplists import (CANN_CURRENT, CANN_LEGACY, SOCS, load_default, load_lists, load_ops_info, run_cann,
                             table_changes, table_note)

from conftest import REAL, REPO

VENDORED = REAL / "ops_info_ascend910b_ge"          # a trimmed subset of the real files (SOURCES.md)
VENDORED_FILES = sorted(VENDORED.glob("aic-ascend910b-ops-info-*.json"))


def _gen():
    spec = importlib.util.spec_from_file_location("advisor_gen_oplists", REPO / "tools" / "gen_oplists.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def cli(*args: str) -> tuple[int, str, str]:
    from advisor.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------- the current table
def test_current_table_puts_layer_norm_v4_and_its_grad_in_gray():
    """2026 ops-info: no precision_reduce for LayerNormV4 / LayerNormGradV3 (hicann/ops-nn layer_norm_v4_def.cpp
    builds its ascend910b config without PrecisionReduceFlag); CANN 8.1.RC1 had them white."""
    now, old = load_default("ascend910b"), load_default("ascend910b", "8.1")
    assert now.cann == CANN_CURRENT and old.cann == CANN_LEGACY
    assert [now.list_of(t) for t in ("LayerNormV4", "LayerNormGradV3")] == ["gray", "gray"]
    assert [old.list_of(t) for t in ("LayerNormV4", "LayerNormGradV3")] == ["white", "white"]


def test_current_table_covers_the_1196_ops_info_types_with_their_kernels():
    b = load_default("ascend910b")
    assert len(b.known) == 1196 and len(b.kernels) == 1196 and b.kernels.types() == b.known
    k = b.kernel("LayerNormV4")
    assert k.n_combos == 5 and k.float_dtypes(0) == {"fp32", "fp16", "bf16"}
    assert load_default("ascend910b", "8.1").kernels is None        # 8.1.RC1: lists only


def test_tables_differ_in_twenty_types_all_white_to_gray():
    old, new = load_default("ascend910b", "8.1"), load_default("ascend910b")
    both = old.known & new.known
    changed = table_changes("ascend910b", both)
    assert len(changed) == 20 and set(changed.values()) == {("white", "gray")}
    assert {"LayerNormV4", "LayerNormGradV3", "RotaryPositionEmbedding"} <= set(changed)


def test_ascend910_93_uses_the_ascend910b_table():
    a3, a2 = load_default("ascend910_93"), load_default("ascend910b")
    assert (a3.white, a3.black, a3.known, a3.kernels.to_dict()) == (a2.white, a2.black, a2.known, a2.kernels.to_dict())
    assert a3.soc == "ascend910_93" and "ascend910_93" in a3.source


@pytest.mark.parametrize("soc", ["ascend910", "ascend310p"])
def test_chips_without_bf16_keep_their_8_1_flags_and_have_no_bf16_kernels(soc):
    now, old = load_default(soc), load_default(soc, "8.1")
    assert (now.white, now.black, now.known) == (old.white, old.black, old.known)
    assert now.kernels.types() == now.known
    assert not any("bf16" in (p or ()) for k in now.kernels.kernels.values() for p in k.inputs + k.outputs)
    rms = now.kernel("RmsNorm") if now.is_known("RmsNorm") else None
    if rms is not None:                       # ascend910b has fp16/bf16/fp32 RmsNorm kernels: bf16 ones dropped
        assert rms.float_dtypes(0) == {"fp16", "fp32"}


def test_cann_8_1_stays_selectable_everywhere_a_table_is_chosen():
    for spelling in ("8.1", "8.1.RC1", "8.1.rc1"):
        assert load_lists("ascend910b", None, spelling) == load_default("ascend910b", "8.1.RC1")
    assert load_lists("ascend910b", None, "9.2") == load_lists("ascend910b") == load_default("ascend910b", "9.2.0")
    with pytest.raises(InputError, match="--cann: unknown table version '7.0'"):
        load_lists("ascend910b", None, "7.0")


def test_a_run_without_a_recorded_table_keeps_cann_8_1():
    assert run_cann(None, {}) == run_cann(None, {"soc": "ascend910b"}) == CANN_LEGACY
    assert run_cann(None, {"cann": "9.2.0"}) == CANN_CURRENT
    assert run_cann("8.1", {"cann": "9.2.0"}) == CANN_LEGACY          # --cann wins


def _run_without_recorded_table(tmp_path) -> Path:
    """A shipped profile as runs captured before run.json recorded its table (no ``cann`` key)."""
    import shutil
    run = tmp_path / "layernorm_bias"
    shutil.copytree(REPO / "profiles" / "layernorm_bias", run, ignore=shutil.ignore_patterns("advice"))
    meta = json.loads((run / "run.json").read_text())
    meta.pop("cann", None)
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_run_without_a_recorded_table_is_analysed_with_cann_8_1(tmp_path):
    from advisor.analysis import analyze
    run = _run_without_recorded_table(tmp_path)
    a = analyze(run)
    assert a.defaults.cann == CANN_LEGACY and a.defaults.list_of("LayerNormV4") == "white"
    assert analyze(run, cann="9.2").defaults.list_of("LayerNormV4") == "gray"


# ---------------------------------------------------------------------- the generator on the vendored subset
def test_package_tables_equal_the_generator_on_the_vendored_real_ops_info():
    gen = _gen()
    files = [(p.name, json.loads(p.read_text())) for p in VENDORED_FILES]
    store = gen.merge(files)
    legacy = json.loads((REAL / "reference/precision_reduce_cann8.1RC1.json").read_text())
    tables = gen.current_tables(store, legacy, "vendored", {})
    assert len(store) == 18 and tables["ascend910_93"]["same_as"] == "ascend910b"
    b = load_default("ascend910b")
    for t in store:
        lst = next(k for k in ("white", "black", "gray") if t in tables["ascend910b"][k])
        assert b.list_of(t) == lst, t
        assert b.kernel(t) == Kernel.from_dict(t, tables["ascend910b"]["kernels"][t]), t
    for soc in ("ascend910", "ascend310p"):
        chip = load_default(soc)
        for t in set(store) & set(tables[soc]["kernels"]):
            assert chip.kernel(t) == Kernel.from_dict(t, tables[soc]["kernels"][t]), (soc, t)


def test_generator_reads_a_directory_as_ge_does_legacy_first_then_shorter_names():
    gen = _gen()
    names = ["aic-x-ops-info-transformer.json", "aic-x-ops-info-nn.json", "aic-x-ops-info-legacy.json",
             "aic-x-ops-info-math.json"]
    assert gen.ge_file_order(names) == ["aic-x-ops-info-legacy.json", "aic-x-ops-info-nn.json",
                                        "aic-x-ops-info-math.json", "aic-x-ops-info-transformer.json"]
    store = gen.merge([(p.name, json.loads(p.read_text())) for p in VENDORED_FILES])
    nn = json.loads((VENDORED / "aic-ascend910b-ops-info-nn.json").read_text())
    assert store["TransQuantParamV2"] == nn["TransQuantParamV2"]      # in legacy and nn: nn's entry wins


def test_generator_drops_bf16_combinations_for_chips_without_bf16():
    gen = _gen()
    k = Kernel("X", (("fp16", "bf16", "fp32"), ("int32", "int32", "int32")), (("fp16", "bf16", "fp32"),))
    assert gen.without_bf16(k) == Kernel("X", (("fp16", "fp32"), ("int32", "int32")), (("fp16", "fp32"),))
    only = Kernel("Y", (("bf16",),), (("bf16",),))
    assert gen.without_bf16(only) == Kernel("Y", (None,), (None,))


# ---------------------------------------------------------------------- --ops-info files
def test_ops_info_files_supply_their_own_kernel_dtypes():
    lists = load_ops_info(VENDORED / "aic-ascend910b-ops-info-nn.json")
    assert lists.kernels is not None and lists.kernel("LayerNormV4").float_dtypes(0) == {"fp32", "fp16", "bf16"}
    assert lists.on_ai_core("RmsNorm") and not lists.on_ai_core("Exp") and lists.cann == ""


def test_several_ops_info_files_merge_in_order_the_later_entry_winning(tmp_path):
    a, b = tmp_path / "aic-ascend910b-ops-info-a.json", tmp_path / "aic-ascend910b-ops-info-b.json"
    a.write_text(json.dumps({"Exp": {"precision_reduce": {"flag": "false"}, "input0": {"dtype": "float"}},
                             "Log": {"precision_reduce": {"flag": "true"}}}))
    b.write_text(json.dumps({"Exp": {"input0": {"dtype": "float16,float"}}, "Gelu": {}}))
    lists = load_lists("ascend910b", [a, b])
    assert (lists.list_of("Exp"), lists.list_of("Log"), lists.list_of("Gelu")) == ("gray", "white", "gray")
    assert lists.kernel("Exp").float_dtypes(0) == {"fp16", "fp32"} and lists.known == {"Exp", "Log", "Gelu"}
    assert str(a) in lists.label and str(b) in lists.label
    rev = load_lists("ascend910b", [b, a])
    assert rev.list_of("Exp") == "black" and rev.kernel("Exp").float_dtypes(0) == {"fp32"}


def test_lint_takes_several_ops_info_files(tmp_path):
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["LayerNormV4", "Exp"]}}')
    args = [x for f in VENDORED_FILES for x in ("--ops-info", str(f))]
    code, out, err = cli("lint", *args, str(m))
    assert code == 0, out + err          # both types are in one of the files
    code, out, err = cli("lint", "--ops-info", str(VENDORED / "aic-ascend910b-ops-info-nn.json"), str(m))
    assert code == 1 and "'Exp' is not an op type on ops-info file" in out      # nn alone has no Exp


# ---------------------------------------------------------------------- the command line
COMMANDS = ["capture", "tune", "lint", "recommend", "replay", "compare", "diff", "inspect"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_with_soc_has_cann(command):
    code, out, err = cli(command, "--help")
    assert code == 0 and "--soc" in out and "--cann" in out and "--ops-info" in out


def test_a_bad_cann_is_one_line_exit_2(tmp_path):
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["Exp"]}}')
    code, out, err = cli("lint", "--cann", "7.0", str(m))
    assert code == 2 and err.count("\n") == 1 and "--cann" in err and "7.0" in err


def test_lint_with_a_profile_says_which_of_the_runs_types_changed_list(tmp_path):
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["Exp"]}}')
    code, out, err = cli("lint", "--profile", str(REPO / "profiles" / "layernorm_bias"), str(m))
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "LayerNormV4 white->gray" in notes[0] and "CANN 9.2.0" in notes[0], out
    code, out, err = cli("lint", "--profile", str(REPO / "profiles" / "cnn_control"), str(m))
    assert not [line for line in out.splitlines() if line.startswith("note:")], out


def test_table_note_is_silent_for_ops_info_files_and_unchanged_types():
    assert table_note(load_default("ascend910b"), ["MatMulV2", "Exp"]) is None
    assert table_note(load_ops_info(VENDORED / "aic-ascend910b-ops-info-nn.json"), ["LayerNormV4"]) is None
    assert "LayerNormV4" in table_note(load_default("ascend910b", "8.1"), ["LayerNormV4", "Exp"])


def test_recommend_says_which_of_the_runs_types_changed_list(tmp_path):
    from advisor.recommend import recommend
    rec = recommend(_run_without_recorded_table(tmp_path), budget=20, perf=False)
    notes = [n for n in rec.notes if "LayerNormV4 white->gray" in n]
    assert len(notes) == 1 and f"CANN {CANN_LEGACY} tables" in notes[0]


@pytest.mark.parametrize("soc", SOCS)
def test_every_chip_has_both_tables(soc):
    assert load_default(soc, "8.1").known and load_default(soc).kernels is not None


def test_capture_records_its_table_in_run_json_and_applies_it(tmp_path):
    """LayerNorm fed by the fp32 model input: white in CANN 8.1.RC1 (fp16 kernel), gray in 9.2.0 (follows the fp32
    input); run.json names the table either way."""
    import pandas as pd
    import torch

    from advisor.emulator import capture
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)).eval()
    batches = [(torch.randn(4, 8),)]
    got = {}
    for cann in (None, "8.1"):
        out = capture((model, batches), tmp_path / f"run_{cann}", cann=cann, dump="stats", local=False)
        run = json.loads((out / "run.json").read_text())
        k = pd.concat(pd.read_csv(p) for p in out.rglob("kernel_details.csv"))
        got[run["cann"]] = (run["lists_source"], set(k.loc[k["Type"] == "LayerNormV4", "Output Data Types"]))
    assert set(got) == {CANN_CURRENT, CANN_LEGACY}
    assert "hicann/ge" in got[CANN_CURRENT][0] and "8.1.RC1" in got[CANN_LEGACY][0]
    assert {d.split(";")[0] for d in got[CANN_CURRENT][1]} == {"FLOAT"}
    assert {d.split(";")[0] for d in got[CANN_LEGACY][1]} == {"FLOAT16"}


def test_a_capture_with_several_ops_info_files_keeps_each_and_reads_them_back(tmp_path):
    import torch

    from advisor.analysis import analyze
    from advisor.emulator import capture
    model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)).eval()
    files = [VENDORED / "aic-ascend910b-ops-info-legacy.json", VENDORED / "aic-ascend910b-ops-info-nn.json"]
    out = capture((model, [(torch.randn(4, 8),)]), tmp_path / "run", ops_info=files, dump="stats", local=False)
    run = json.loads((out / "run.json").read_text())
    assert run["ops_info"] == ["ops_info/aic-ascend910b-ops-info-legacy.json", "ops_info/aic-ascend910b-ops-info-nn.json"]
    assert run["cann"] is None and all((out / f).read_bytes() == s.read_bytes() for f, s in zip(run["ops_info"], files))
    a = analyze(out)
    assert a.defaults.known == load_lists("ascend910b", files).known and a.defaults.kernel("LayerNormV4") is not None
