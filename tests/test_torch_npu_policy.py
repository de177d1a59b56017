"""precision_policy.json: its typed reader (malformed input is one line naming the file, exit 2) and
``advisor.npu.apply_policy``, which realises it on a device -- here on the CPU's autocast key and with fakes of the
small surface of torch_npu and Apex it touches (neither is ever installed)."""
from __future__ import annotations

import contextlib
import json
import sys
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from advisor.errors import InputError
from advisor.npu import Applied, apply_policy, settings
from advisor.precision_policy import KeepRule, PolicyRules, PrecisionPolicy, parse_policy, read_policy

SCHEMA = "advisor.precision_policy/1"


def _doc(rules=None, amp="autocast", **kw) -> dict:
    return {"schema": SCHEMA, "version": 1, "engine": "torch_npu", "amp": amp, "dtype": "float16",
            "rules": rules if rules is not None else {"keep_fp32": []}, **kw}


def _pol(rules, amp="autocast") -> PrecisionPolicy:
    return parse_policy(_doc(rules, amp), "p.json")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc(x)
        h2 = h * h
        return self.head(h2), h2, h


def _run_cpu_autocast(m, x):
    with torch.autocast("cpu", dtype=torch.float16):
        return m(x)


# ---------------------------------------------------------------------------- the reader
def test_policy_round_trips_through_its_file(tmp_path):
    p = PrecisionPolicy(amp="apex-o1", rules=PolicyRules((KeepRule(module="head"), KeepRule(op="mul"),
                                                          KeepRule(module="fc", op="addmm.default")),
                                                         ("torch.nn.functional.gelu",)))
    f = tmp_path / "precision_policy.json"
    f.write_text(json.dumps(p.to_dict()))
    back = read_policy(f)
    assert back == p and back.to_dict()["dtype"] == "float16"


@pytest.mark.parametrize("doc,problem", [
    ([], "expected a JSON object"),
    ({"amp": "autocast"}, 'lacks "schema"'),
    (_doc(schema="advisor.recommendation/1"), "is not 'advisor.precision_policy/1'"),
    (_doc(version=2), "version 2 is newer"),
    (_doc(engine="ge"), "engine must be 'torch_npu'"),
    (_doc(amp="O1"), "amp must be one of"),
    (_doc(dtype="half"), "dtype must be float16 or bfloat16"),
    ({**_doc(amp="apex-o2"), "dtype": "bfloat16"}, "casts to float16 only"),
    (_doc(extra=1), "unknown key 'extra'"),
    (_doc({"keep": []}), "rules has an unknown key 'keep'"),
    (_doc({"keep_fp32": {"module": "x"}}), "rules.keep_fp32 must be an array"),
    (_doc({"keep_fp32": ["head"]}), "rules.keep_fp32[0] must be an object"),
    (_doc({"keep_fp32": [{}]}), "names neither a module nor an op"),
    (_doc({"keep_fp32": [{"module": "a b"}]}), "rules.keep_fp32[0].module must be a module name"),
    (_doc({"keep_fp32": [{"op": "torch.mul"}]}), "is a Python name: name the aten op it runs (mul)"),
    (_doc({"keep_fp32": [{"op": "mul(x)"}]}), "must be an aten op name"),
    (_doc({"keep_fp32": [{"op": "mul", "dtype": "fp32"}]}), "unknown key 'dtype'"),
    (_doc({"keep_fp32": [], "register_float_function": ["sigmoid"]}, amp="apex-o1"), "dotted function name"),
    (_doc({"keep_fp32": [], "register_float_function": ["torch.sigmoid"]}), "register_float_function is Apex O1's"),
])
def test_malformed_policy_is_one_line_naming_the_file(tmp_path, doc, problem):
    f = tmp_path / "bad_policy.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_policy(f)
    msg = str(e.value)
    assert msg.startswith(str(f)) and problem in msg and "\n" not in msg


def test_policy_that_is_not_json_is_refused_naming_the_file(tmp_path):
    f = tmp_path / "p.json"
    f.write_text("{keep: head}")
    with pytest.raises(InputError, match=str(f)):
        read_policy(f)


def test_cli_refuses_a_malformed_policy_with_exit_2(tmp_path, capsys):
    from advisor.cli import main
    f = tmp_path / "p.json"
    f.write_text(json.dumps(_doc({"keep_fp32": [{"op": 3}]})))
    code = main(["capture", "examples/mlp_exp.py:workload", "--out", str(tmp_path / "r"), "--policy", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(f) in err[0] and not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------- apply_policy at the autocast key
def test_kept_op_runs_fp32_for_operator_syntax_and_is_undone_by_remove():
    torch.manual_seed(0)
    m, x = Net(), torch.randn(3, 4)
    a = apply_policy(m, _pol({"keep_fp32": [{"op": "mul"}]}), device_type="cpu")
    _, h2, h = _run_cpu_autocast(m, x)
    assert h.dtype == torch.float16 and h2.dtype == torch.float32          # h * h on fp16 inputs, in fp32
    a.remove()
    assert _run_cpu_autocast(m, x)[1].dtype == torch.float16


def test_kept_module_runs_in_fp32_with_autocast_disabled():
    torch.manual_seed(0)
    m, x = Net(), torch.randn(3, 4)
    a = apply_policy(m, _pol({"keep_fp32": [{"module": "head"}]}), device_type="cpu")
    y, h2, _ = _run_cpu_autocast(m, x)
    assert h2.dtype == torch.float16 and y.dtype == torch.float32           # fp16 input cast up, fp32 linear
    a.remove()


def test_op_kept_within_a_module_only_there():
    torch.manual_seed(0)
    m, x = Net(), torch.randn(3, 4)
    a = apply_policy(m, _pol({"keep_fp32": [{"op": "linear", "module": "head"}]}), device_type="cpu")
    y, _, h = _run_cpu_autocast(m, x)
    assert y.dtype == torch.float32 and h.dtype == torch.float16
    a.remove()


def test_policy_naming_a_module_the_model_lacks_is_refused():
    with pytest.raises(InputError, match="no module 'decoder'"):
        apply_policy(Net(), _pol({"keep_fp32": [{"module": "decoder"}]}), device_type="cpu")


def test_outside_autocast_a_kept_op_computes_fp32_and_keeps_its_output_dtype():
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mul.Tensor:
                seen.append([a.dtype for a in args if isinstance(a, torch.Tensor)])
            return func(*args, **(kwargs or {}))
    torch.manual_seed(0)
    m, x = Net().half(), torch.randn(3, 4).half()
    with Record():                      # below the policy's mode: sees what the kept op really ran on
        a = apply_policy(m, _pol({"keep_fp32": [{"op": "mul"}]}, amp="apex-o2"), device_type="cpu")
        try:
            y, h2, _ = m(x)
        finally:
            a.remove()
    assert seen == [[torch.float32, torch.float32]]
    assert h2.dtype == torch.float16 and y.dtype == torch.float16


# ---------------------------------------------------------------------------- fakes of torch_npu and Apex
@pytest.fixture
def fake_torch_npu(monkeypatch):
    mod = types.ModuleType("torch_npu")
    mod.imported = True
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    return mod


@pytest.fixture
def fake_apex(monkeypatch):
    amp = types.ModuleType("apex.amp")
    amp.registered, amp.disabled = [], []

    def register_float_function(module, name):
        if not hasattr(module, name):
            raise ValueError(f"No function named {name} in module {module}.")
        amp.registered.append((module, name))

    @contextlib.contextmanager
    def disable_casts():
        amp.disabled.append("enter")
        yield
        amp.disabled.append("exit")
    amp.register_float_function, amp.disable_casts = register_float_function, disable_casts
    apex = types.ModuleType("apex")
    apex.amp = amp
    monkeypatch.setitem(sys.modules, "apex", apex)
    monkeypatch.setitem(sys.modules, "apex.amp", amp)
    return amp


def test_on_npu_it_installs_at_torch_npus_autocast_key(fake_torch_npu):
    m = Net()
    a = apply_policy(m, _pol({"keep_fp32": [{"op": "mul"}, {"module": "head"}]}))
    assert a.device_type == "npu" and len(a.libraries) == 1 and len(a.hooks) == 2
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mul.Tensor", "AutocastPrivateUse1")
    a.remove()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::mul.Tensor", "AutocastPrivateUse1")


def test_on_npu_without_torch_npu_it_fails_at_the_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(ImportError):
        apply_policy(Net(), _pol({"keep_fp32": [{"op": "mul"}]}))


def test_apex_o1_registers_float_functions_and_disables_casts_in_kept_modules(fake_torch_npu, fake_apex):
    m = Net()
    pol = _pol({"keep_fp32": [{"module": "head"}], "register_float_function": ["torch.nn.functional.gelu",
                                                                                "torch.sigmoid"]}, amp="apex-o1")
    a = apply_policy(m, pol, device_type="cpu")
    assert fake_apex.registered == [(torch.nn.functional, "gelu"), (torch, "sigmoid")]
    m(torch.randn(2, 4))
    assert fake_apex.disabled == ["enter", "exit"]
    a.remove()


def test_apex_o2_kept_module_has_fp32_weights_and_hands_fp16_on(fake_apex):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.b(self.a(x))
    m = Two().half()                          # what amp.initialize(opt_level="O2") made of it
    a = apply_policy(m, _pol({"keep_fp32": [{"module": "a"}]}, amp="apex-o2"), device_type="cpu")
    assert m.a.weight.dtype == torch.float32 and m.b.weight.dtype == torch.float16
    assert m(torch.randn(2, 4).half()).dtype == torch.float16      # a's fp32 output cast back for b
    a.remove()


def test_advisor_policy_environment_is_applied_by_cfg(tmp_path, fake_torch_npu):
    f = tmp_path / "precision_policy.json"
    f.write_text(json.dumps(_doc({"keep_fp32": [{"op": "mul"}]})))
    s = settings({"ADVISOR_POLICY": str(f)})
    assert s.policy == f
    a = Applied("torch", s).apply_policy(Net())
    assert a is not None and a.policy.op_names() == ("mul",)
    a.remove()
    with pytest.raises(InputError, match="ADVISOR_POLICY"):
        settings({"ADVISOR_POLICY": str(tmp_path / "missing.json")})
