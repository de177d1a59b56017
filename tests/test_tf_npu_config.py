"""TF1 session-config / NPURunConfig glue for the Ascend TF adapter, with a fake npu_bridge."""
from __future__ import annotations

import sys
import types

import pytest

from advisor.errors import InputError
from advisor.tf.npu_config import npu_options, npu_run_config, tf1_session_config


@pytest.fixture
def mixlist(tmp_path):
    p = tmp_path / "ml.json"
    p.write_text('{"black-list": {"to-add": ["Exp"], "to-remove": []}}')
    return p


def test_options_from_environment(mixlist):
    s = npu_options(environ={"ADVISOR_MIXLIST": str(mixlist), "ADVISOR_MODE": "mixed_bfloat16"})
    assert s.options == {"precision_mode_v2": "mixed_bfloat16", "modify_mixlist": str(mixlist.resolve())}


def test_v1_mode_names_use_precision_mode(mixlist):
    s = npu_options(mixlist, "allow_mix_precision", environ={})
    assert s.options == {"precision_mode": "allow_mix_precision", "modify_mixlist": str(mixlist.resolve())}


def test_mixlist_dropped_outside_mixed_modes(mixlist):
    s = npu_options(mixlist, "must_keep_origin_dtype", environ={})
    assert s.options == {"precision_mode_v2": "origin"}
    assert s.notes and "ignored" in s.notes[0]


def test_bad_mode_and_missing_file_are_input_errors(tmp_path):
    with pytest.raises(InputError):
        npu_options(None, "mixed_fp8", environ={})
    with pytest.raises(InputError):
        npu_options(tmp_path / "nope.json", "mixed_float16", environ={})


def test_npu_run_config_with_fake_npu_bridge(monkeypatch, mixlist):
    seen = {}

    class NPURunConfig:
        def __init__(self, **kw):
            seen.update(kw)
    names = ["npu_bridge", "npu_bridge.estimator", "npu_bridge.estimator.npu", "npu_bridge.estimator.npu.npu_config"]
    for n in names:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))
    sys.modules["npu_bridge.estimator.npu.npu_config"].NPURunConfig = NPURunConfig
    cfg = npu_run_config(environ={"ADVISOR_MIXLIST": str(mixlist)}, model_dir="ckpt")
    assert isinstance(cfg, NPURunConfig)
    assert seen == {"precision_mode_v2": "mixed_float16", "modify_mixlist": str(mixlist.resolve()),
                    "model_dir": "ckpt"}


def test_npu_run_config_without_npu_bridge_is_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "npu_bridge", None)
    with pytest.raises(InputError, match="npu_bridge"):
        npu_run_config(environ={})


@pytest.mark.tf
def test_tf1_session_config_sets_npu_optimizer(mixlist):
    pytest.importorskip("tensorflow")
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig
    cfg = tf1_session_config(environ={"ADVISOR_MIXLIST": str(mixlist), "ADVISOR_MODE": "allow_mix_precision"})
    (opt,) = [c for c in cfg.graph_options.rewrite_options.custom_optimizers if c.name == "NpuOptimizer"]
    assert opt.parameter_map["precision_mode"].s == b"allow_mix_precision"
    assert opt.parameter_map["modify_mixlist"].s == str(mixlist.resolve()).encode()
    assert opt.parameter_map["use_off_line"].b is True
    assert cfg.graph_options.rewrite_options.remapping == RewriterConfig.OFF
    # re-applying to the same config with another mode replaces, never duplicates
    cfg = tf1_session_config(mode="must_keep_origin_dtype", config=cfg, environ={})
    (opt,) = [c for c in cfg.graph_options.rewrite_options.custom_optimizers if c.name == "NpuOptimizer"]
    assert opt.parameter_map["precision_mode_v2"].s == b"origin"
    assert "modify_mixlist" not in opt.parameter_map and "precision_mode" not in opt.parameter_map
