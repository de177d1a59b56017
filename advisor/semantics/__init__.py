"""THE semantics package: which dtype each op runs in, where, and why.

Every other stage (emulator, flip predictor, replay, search, reports) calls this package; nothing else
decides an op's effective precision.  GE's rules (sources by file and line in docs/semantics.md) are named
steps in ``rules`` (``Rule`` names what each decided, ``Why`` carries it with the deciding predecessor and
root), chosen per node by its ``NodeKind`` and, for ops, by a per-op override, where the op runs (a type
without an AI Core kernel: AI CPU, its original dtype), its ops-info and the list its type is in (mixed
modes) or the mode:

``graph_input`` / ``constant``  Data, Const and Variable nodes are not judged: producers in the model's dtype.
``non_float``        int/bool ops: ``n/a``.
``follow``           views (no kernel) and ops excluded from decisions (MemSet, bookkeeping) pass their first
                     input's precision through.  ``hccl``: collectives keep their graph dtype (fp16 in force_fp16).
``cast_dtype``       a Cast produces its destination dtype; a Cast without one and ops with complex tensors are
                     dtype-sensitive (``dtype_sensitive``: their own dtypes).
``ai_cpu``           no AI Core kernel: AI CPU, original dtype; ``ai-cpu-dtype``: the kernel takes none of the
                     dtypes the mode allows the op.
``white`` / ``black`` / ``gray``  the mixed modes: low precision / original dtype / the dtype of the producer of
                     the first ranked input (Data, Const and Variable are producers; Const/Constant/Variable rank
                     last), looking through the Casts the mode skips; with no float producer allow_fp32_to_fp16,
                     which keeps the origin dtype.
``mode_*``           the other modes (force_fp32 gives the fe.ini ``fp16.op_type`` cube ops fp16 inputs and an
                     fp32 output; allow_fp32_to_fp16 lowers exactly those; allow_fp32_to_bf16 lowers nothing its
                     kernel supports in fp32; force_fp16 everything; must_keep_origin_dtype nothing).
``keep_dtype`` / ``customize_dtype``  ATC's per-op overrides (``fp16_in_fp32_out``: THE rule for which ops can take
                     fp16 inputs with an fp32 output; ``fp16_in_fp32_out_entry``: the customize_dtypes entry that
                     gives one op that, where GE would take it; ``custom_matches``: GE's filter of a kernel's
                     combinations by a customize entry).

With a kernel table (``OpLists.kernels``) each decision is GE's choice among the dtype combinations the op's
ops-info declares (``matching``: exact, rise, reduce over the ranked inputs, then the outputs).

Complexity: ``compile_graph`` is O(V + E) once per graph; ``plan`` is O(V) with a tight loop; ``what_if`` only
revisits the ops downstream of the edited types whose inputs' dtypes changed.
"""
from .matching import FP16_OP_TYPES, custom_matches, fp16_in_fp32_out, fp16_in_fp32_out_entry
from .plan import (AI_CORE_CORES, Compiled, Flip, Plan, annotate, compile_graph, cpu_mask, flips_between, low_mask,
                   plan, what_if)
from .rules import (AI_CPU_RULES, BF16, DEFAULT_MODE, FP16, FP32, FP32_BY_LIST, HCCL_TYPES, INHERITED, LOW, MODES,
                    NA, WEAK_PRODUCER_TYPES, Context, Decision, NodeKind, Rule, Why, mode_info, uses_mixlist)

__all__ = ["AI_CORE_CORES", "AI_CPU_RULES", "BF16", "DEFAULT_MODE", "FP16", "FP16_OP_TYPES", "FP32", "FP32_BY_LIST",
           "HCCL_TYPES", "INHERITED", "LOW", "MODES", "NA", "WEAK_PRODUCER_TYPES", "Compiled", "Context", "Decision",
           "Flip", "NodeKind", "Plan", "Rule", "Why", "annotate", "compile_graph", "cpu_mask", "flips_between",
           "low_mask", "mode_info", "plan", "uses_mixlist", "what_if", "custom_matches", "fp16_in_fp32_out",
           "fp16_in_fp32_out_entry"]
