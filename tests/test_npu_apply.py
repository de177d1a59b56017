"""advisor.npu.apply with fake npu_device / torch_npu modules (neither can be installed here)."""
from __future__ import annotations

import sys
import types

import pytest
import torch

import advisor.npu as npu
from advisor.mixlist import Mixlist


class _Opts:
    pass


@pytest.fixture
def fake_tf(monkeypatch):
    opts = _Opts()
    mod = types.ModuleType("npu_device")
    mod.global_options = lambda: opts
    monkeypatch.setitem(sys.modules, "npu_device", mod)
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    return opts


@pytest.fixture
def fake_torch_npu(monkeypatch):
    calls = []
    mod = types.ModuleType("torch_npu")
    mod.npu = types.SimpleNamespace(set_option=lambda d: calls.append(dict(d)))
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    monkeypatch.setitem(sys.modules, "npu_device", None)   # present as "not importable"
    return calls


def _env(tmp_path, mode="mixed_float16", black=("Exp",)):
    p = tmp_path / "m.json"
    p.write_text(Mixlist(black_add=tuple(black)).to_json())
    return {"ADVISOR_MODE": mode, "ADVISOR_MIXLIST": str(p), "ADVISOR_RUN_DIR": str(tmp_path / "run")}, p


def test_tf_sets_precision_mode_v2_and_mixlist(tmp_path, fake_tf):
    env, p = _env(tmp_path)
    cfg = npu.apply(environ=env)
    assert cfg.framework == "tensorflow"
    assert fake_tf.precision_mode_v2 == "mixed_float16" and fake_tf.modify_mixlist == str(p)
    assert cfg.settings.dump_dir == tmp_path / "run" / "dump" / "mixed"


def test_tf_v1_mode_name_and_mixlist_ignored_outside_mixed(tmp_path, fake_tf):
    env, _ = _env(tmp_path, mode="allow_mix_precision_bf16")
    npu.apply(environ=env)
    assert fake_tf.precision_mode == "allow_mix_precision_bf16" and not hasattr(fake_tf, "precision_mode_v2")
    opts2 = _Opts()
    sys.modules["npu_device"].global_options = lambda: opts2
    env, _ = _env(tmp_path, mode="must_keep_origin_dtype")
    cfg = npu.apply(environ=env)
    assert opts2.precision_mode_v2 == "origin" and not hasattr(opts2, "modify_mixlist")
    assert any("ignored" in n for n in cfg.notes)


def test_torch_ge_options_and_autocast_policy(tmp_path, fake_torch_npu):
    env, p = _env(tmp_path, mode="mixed_bfloat16", black=("Exp", "SoftmaxV2"))
    cfg = npu.apply(environ=env, device_type="cpu")
    assert cfg.framework == "torch"
    assert cfg.ge_options == {"ge.exec.precision_mode_v2": "mixed_bfloat16", "ge.exec.modify_mixlist": str(p)}
    assert fake_torch_npu == []      # eager ACL option only for the two modes torch_npu accepts
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    with cfg.autocast():
        y = x @ w
        e = torch.exp(y)
        s = torch.softmax(y, -1)
        t = torch.tanh(y)
    assert y.dtype == torch.bfloat16           # cube op: low precision
    assert e.dtype == torch.float32 and s.dtype == torch.float32   # black-listed: fp32
    assert t.dtype == torch.bfloat16           # untouched: autocast/the input dtype
    torch.testing.assert_close(e, torch.exp(y.float()))


def test_torch_eager_acl_mode(tmp_path, fake_torch_npu):
    cfg = npu.apply(environ={"ADVISOR_MODE": "allow_fp32_to_fp16"}, framework="torch")
    assert fake_torch_npu == [{"ACL_PRECISION_MODE": "allow_fp32_to_fp16"}] and cfg.policy is None


def test_no_framework_configures_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "npu_device", None)
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    cfg = npu.apply(environ={})
    assert cfg.framework == "none" and cfg.settings.mode == "mixed_float16" and cfg.settings.mixlist is None


def test_missing_mixlist_file_is_input_error(tmp_path):
    from advisor.errors import InputError
    with pytest.raises(InputError, match="does not exist"):
        npu.settings({"ADVISOR_MIXLIST": str(tmp_path / "nope.json")})


def test_unmapped_types_are_reported():
    p = npu.AutocastPolicy.from_mixlist(Mixlist(black_add=("Exp", "FancyCustomOp")), "float16", "cpu")
    assert p.unmapped == ("FancyCustomOp",) and "exp" in p.fp32


def test_evidence_locations_for_the_script(tmp_path, fake_tf):
    env, _ = _env(tmp_path)
    cfg = npu.apply(environ=env)
    assert cfg.msprobe_kwargs(task="tensor") == {"task": "tensor", "dump_path": str(tmp_path / "run" / "dump" / "mixed"),
                                                 "level": "L1"}
    assert cfg.profile_dir == tmp_path / "run" / "profile"
    with pytest.raises(ValueError, match="ADVISOR_RUN_DIR"):
        npu.apply(environ={"ADVISOR_MODE": "mixed_float16"}).msprobe_kwargs()
