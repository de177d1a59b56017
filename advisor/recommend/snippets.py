"""Deployment snippets: how to use the recommended mixlist in each framework.

GE reads the mixlist in graph mode (TF adapter, atc, GE options).  torch_npu eager has no mixlist
and no gray inheritance, so for PyTorch eager the same decision is expressed as an autocast
policy: the op types forced to fp32 are run outside autocast (their aten ops listed).
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping

# GE op type -> torch functions that produce it (for the PyTorch eager policy).  Types not listed
# keep their GE name in a comment so the user can map them by hand.
GE_TO_TORCH = {
    "Exp": ["torch.exp"], "Sigmoid": ["torch.sigmoid"], "Log": ["torch.log"], "Log1p": ["torch.log1p"],
    "Add": ["torch.add"], "AddV2": ["torch.add"], "Sub": ["torch.sub"], "Mul": ["torch.mul"],
    "RealDiv": ["torch.div"], "Div": ["torch.div"], "Pow": ["torch.pow"], "Sqrt": ["torch.sqrt"],
    "Rsqrt": ["torch.rsqrt"], "Tanh": ["torch.tanh"], "Relu": ["torch.relu"], "Gelu": ["torch.nn.functional.gelu"],
    "Swish": ["torch.nn.functional.silu"], "SiLU": ["torch.nn.functional.silu"],
    "SoftmaxV2": ["torch.softmax"], "LogSoftmaxV2": ["torch.log_softmax"],
    "LayerNorm": ["torch.nn.functional.layer_norm"], "LayerNormV3": ["torch.nn.functional.layer_norm"],
    "LayerNormV4": ["torch.nn.functional.layer_norm"], "ReduceSum": ["torch.sum"], "ReduceSumD": ["torch.sum"],
    "ReduceMean": ["torch.mean"], "ReduceMax": ["torch.amax"], "MatMul": ["torch.mm", "torch.nn.functional.linear"],
    "MatMulV2": ["torch.mm", "torch.addmm", "torch.nn.functional.linear"], "MatMulV3": ["torch.mm"],
    "BatchMatMul": ["torch.bmm", "torch.matmul"], "BatchMatMulV2": ["torch.bmm", "torch.matmul"],
    "Conv2D": ["torch.nn.functional.conv2d"], "BatchNorm": ["torch.nn.functional.batch_norm"],
    "BNInferenceD": ["torch.nn.functional.batch_norm"], "Cumsum": ["torch.cumsum"],
    "NLLLoss": ["torch.nn.functional.nll_loss"], "SelectV2": ["torch.where"],
}


def mixlist_snippets(mixlist_path: str, mode: str, fp32_types: Iterable[str], low_types: Iterable[str] = (),
                     mixlist_obj: Mapping | None = None) -> dict[str, str]:
    """Snippets for TF2, TF1, NPURunConfig, atc, the GE option and a PyTorch eager autocast policy."""
    bf16 = "bfloat16" in mode or mode.endswith("bf16")
    v2 = "mixed_bfloat16" if bf16 else "mixed_float16"
    v1 = "allow_mix_precision_bf16" if bf16 else "allow_mix_precision"
    path = mixlist_path
    fp32 = sorted(set(fp32_types))
    low = sorted(set(low_types))
    snippets = {
        "tf2_npu_device": (
            "import npu_device\n"
            "npu_device.global_options().precision_mode_v2 = %r\n"
            "npu_device.global_options().modify_mixlist = %r\n"
            "npu_device.open().as_default()\n" % (v2, path)),
        "tf1_session_config": (
            "from npu_bridge.npu_init import *\n"
            "config = tf.compat.v1.ConfigProto()\n"
            "custom_op = config.graph_options.rewrite_options.custom_optimizers.add()\n"
            "custom_op.name = 'NpuOptimizer'\n"
            "custom_op.parameter_map['precision_mode_v2'].s = tf.compat.as_bytes(%r)\n"
            "custom_op.parameter_map['modify_mixlist'].s = tf.compat.as_bytes(%r)\n"
            "config.graph_options.rewrite_options.remapping = RewriterConfig.OFF\n" % (v2, path)),
        "tf1_npu_run_config": (
            "run_config = NPURunConfig(precision_mode=%r, modify_mixlist=%r)\n" % (v1, path)),
        "atc": f"atc --model=model.onnx --framework=5 --output=model --soc_version=<soc> "
               f"--precision_mode={v1} --modify_mixlist={path}",
        "ge_option": (
            "# GE session / graph options (C++ or ge Python API)\n"
            f"options = {{\"ge.exec.precision_mode\": \"{v1}\", \"ge.exec.modify_mixlist\": \"{path}\"}}\n"),
        "pytorch_eager_autocast": _torch_policy(fp32, low, bf16),
    }
    if mixlist_obj is not None:
        snippets["modify_mixlist_json"] = json.dumps(mixlist_obj, indent=2)
    return snippets


def _torch_policy(fp32_types: list[str], low_types: list[str], bf16: bool) -> str:
    dt = "torch.bfloat16" if bf16 else "torch.float16"
    funcs: list[str] = []
    unmapped: list[str] = []
    for t in fp32_types:
        fs = GE_TO_TORCH.get(t)
        if fs:
            funcs.extend(f for f in fs if f not in funcs)
        else:
            unmapped.append(t)
    lines = [
        "# torch_npu eager does not read mixlists: realise the same decision with autocast.",
        "# Ops the recommendation forces to fp32 run outside autocast on fp32 inputs.",
        "import functools, torch",
        "",
        "FP32_OPS = [" + ", ".join(funcs) + "]" + (f"  # GE types without a torch mapping: {', '.join(unmapped)}"
                                                  if unmapped else ""),
        "",
        "def _fp32(fn):",
        "    @functools.wraps(fn)",
        "    def wrapped(*args, **kwargs):",
        "        with torch.autocast(device_type='npu', enabled=False):",
        "            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]",
        "            return fn(*args, **kwargs)",
        "    return wrapped",
        "",
        "def apply_policy():",
        "    # call once before building the model; patches the functions the model calls",
        "    for f in FP32_OPS:",
        "        mod, name = f.rsplit('.', 1)",
        "        owner = eval(mod)",
        "        setattr(owner, name, _fp32(getattr(owner, name)))",
        "",
        f"# then: with torch.autocast(device_type='npu', dtype={dt}): out = model(*batch)",
    ]
    if not fp32_types:
        lines.insert(2, "# (no op type needs to be forced to fp32)")
    if low_types:
        lines.append("# types the recommendation moves to low precision (autocast lower-precision list): "
                     + ", ".join(low_types))
    return "\n".join(lines) + "\n"
