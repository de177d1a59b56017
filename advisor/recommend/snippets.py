"""Deployment snippets: how to use the recommended mixlist in each framework.

GE reads the mixlist in graph mode (TF adapter, atc, GE options).  torch_npu eager has no mixlist
and no gray inheritance, so for PyTorch eager the same decision is expressed as an autocast
policy: the op types forced to fp32 are run outside autocast (their aten ops listed).
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping

from ..semantics import uses_mixlist

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
    bf16 = _is_bf16(mode)
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
            "import tensorflow as tf\n"
            "from npu_bridge.npu_init import *\n"
            "from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig\n"
            "config = tf.compat.v1.ConfigProto()\n"
            "custom_op = config.graph_options.rewrite_options.custom_optimizers.add()\n"
            "custom_op.name = 'NpuOptimizer'\n"
            "custom_op.parameter_map['precision_mode_v2'].s = tf.compat.as_bytes(%r)\n"
            "custom_op.parameter_map['modify_mixlist'].s = tf.compat.as_bytes(%r)\n"
            "config.graph_options.rewrite_options.remapping = RewriterConfig.OFF\n"
            "sess = tf.compat.v1.Session(config=config)\n" % (v2, path)),
        "tf1_npu_run_config": (
            "from npu_bridge.estimator.npu.npu_config import NPURunConfig\n"
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


def deployment_snippets(mixlist_path: str, mode: str, fp32_types: Iterable[str], low_types: Iterable[str] = (),
                        keep_path: str | None = None, keep_lines: Iterable[str] = (),
                        has_list_edits: bool = True, type_level_fp32: Iterable[str] | None = None,
                        customize_path: str | None = None, customize_lines: Iterable[str] = ()
                        ) -> dict[str, str]:
    """``mixlist_snippets`` and, when the advice has keep_dtype or customize_dtypes lines, the consumers of
    per-op files (docs/recommend.md, "Per-op advice"): the full atc command line (``--keep_dtype``,
    ``--customize_dtypes``), the IR-build options (``aclgrphBuildModel``'s ``keep_dtype`` and
    ``ge.customizeDtypes``: hicann/ge ``inc/graph_metadef/external/ge_common/ge_common_api_types.h:664, 729``),
    TF 1.x's ``npu_scope.keep_dtype_scope()`` for keeps; torch_npu eager and torchair take no per-op file, so
    their snippets stay type-level (the type-level alternative)."""
    out = mixlist_snippets(mixlist_path, mode, fp32_types, low_types)
    lines = list(keep_lines) if keep_path else []
    custom = list(customize_lines) if customize_path else []
    if not lines and not custom:
        return out
    mixed = uses_mixlist(mode)
    bf16 = _is_bf16(mode)
    pm = ("--precision_mode_v2=" + ("mixed_bfloat16" if bf16 else "mixed_float16")) if mixed else f"--precision_mode={mode}"
    ml = f" --modify_mixlist={mixlist_path}" if mixed and has_list_edits else ""
    kd = f" --keep_dtype={keep_path}" if lines else ""
    cd = f" --customize_dtypes={customize_path}" if custom else ""
    out["atc"] = f"atc --model=model.onnx --framework=5 --output=model --soc_version=<soc> {pm}{ml}{kd}{cd}"
    opts = {**({"keep_dtype": keep_path} if lines else {}),
            **({"ge.customizeDtypes": customize_path} if custom else {}),
            **({"modify_mixlist": mixlist_path} if ml else {})}
    out["ir_build_options"] = ("# GE IR build (aclgrphBuildModel / ge.ir_option): keep_dtype and customize_dtypes "
                               "are build options\n"
                               f"build_options = {json.dumps(opts)}\n")
    if lines:
        names = [ln for ln in lines if not ln.startswith("OpType::")]
        out["tf1_keep_dtype_scope"] = (
            "# TF 1.x (TF Adapter): no keep_dtype session option; build the kept ops inside keep_dtype_scope\n"
            "from npu_bridge.estimator.npu import npu_scope\n"
            "with npu_scope.keep_dtype_scope():\n"
            "    ...  # the layers creating: " + (", ".join(names) or "(type-level lines only)") + "\n")
    if custom:
        out["customize_dtypes_cfg"] = "".join(f"{ln}\n" for ln in custom)
    out["per_op_not_accepted"] = ("torch_npu eager and torchair take no keep_dtype or customize_dtypes file: use the "
                                  "type-level alternative there (modify_mixlist.type_level.json, "
                                  "type_level_alternative in recommendation.json); the PyTorch eager policy above "
                                  "follows it.")
    if type_level_fp32 is not None:
        out["pytorch_eager_autocast"] = _torch_policy(sorted(set(type_level_fp32)), sorted(set(low_types)), bf16)
    return out


def _is_bf16(mode: str) -> bool:
    return "bfloat16" in mode or mode.endswith("bf16")


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
        "# Ops the recommendation forces to fp32 run outside autocast on fp32 inputs; the ops after them",
        "# then see fp32 inputs, as GE's gray inheritance would.  Tensor methods (x.exp()) are not",
        "# patched: call the torch functions, or wrap the module that uses them in _fp32.",
        "import functools",
        "import torch",
        "import torch.nn.functional",
        "",
        "DEVICE = 'npu'",
        "FP32_OPS = [" + ", ".join(repr(f) for f in funcs) + "]" + (
            f"  # GE types without a torch mapping: {', '.join(unmapped)}" if unmapped else ""),
        "",
        "def _fp32(fn):",
        "    @functools.wraps(fn)",
        "    def wrapped(*args, **kwargs):",
        "        with torch.autocast(device_type=DEVICE, enabled=False):",
        "            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]",
        "            return fn(*args, **kwargs)",
        "    wrapped._advisor_fp32 = True",
        "    return wrapped",
        "",
        "def apply_policy():",
        "    # call once before running the model; patches the torch functions the model calls",
        "    for path in FP32_OPS:",
        "        parts = path.split('.')",
        "        owner = torch",
        "        for part in parts[1:-1]:",
        "            owner = getattr(owner, part)",
        "        fn = getattr(owner, parts[-1])",
        "        if not getattr(fn, '_advisor_fp32', False):",
        "            setattr(owner, parts[-1], _fp32(fn))",
        "",
        f"# then: apply_policy(); with torch.autocast(device_type=DEVICE, dtype={dt}): out = model(*batch)",
    ]
    if not fp32_types:
        lines.insert(2, "# (no op type needs to be forced to fp32)")
    if low_types:
        lines.append("# types the recommendation moves to low precision (autocast lower-precision list): "
                     + ", ".join(low_types))
    return "\n".join(lines) + "\n"
