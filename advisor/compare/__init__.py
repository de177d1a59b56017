"""Compare FP16/BF16 runs against FP32: metrics, tolerance, attribution, training signals."""
from .attribution import Attribution, attribute, rank_types
from .judge import compare_dumps, final_metrics, judged_steps
from .metrics import msprobe_pass, stats_metrics, tensor_metrics
from .tolerance import Tolerance, Verdict, tolerance_from_options
from .training import recommend_loss_scale, scale_text, training_signals

__all__ = ["Attribution", "attribute", "compare_dumps", "final_metrics", "judged_steps", "rank_types", "msprobe_pass",
           "stats_metrics", "tensor_metrics", "Tolerance", "Verdict", "tolerance_from_options",
           "recommend_loss_scale", "scale_text", "training_signals"]
