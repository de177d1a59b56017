"""msprobe statistics (Max, Min, Mean, Norm) of many tensors in one batched pass."""
from __future__ import annotations

import numpy as np
import torch


def batched_stats(tensors: list[torch.Tensor], chunk_elems: int = 1 << 26) -> np.ndarray:
    """float64 array (n, 4) of Max, Min, Mean, Norm per tensor (NaN for empty tensors).

    Tensors are flattened into one fp32 buffer (in chunks of ~64M elements) and reduced with
    ``torch.segment_reduce``: one pass per statistic for all tensors, no per-tensor Python math."""
    n = len(tensors)
    out = np.full((n, 4), np.nan)
    if n == 0:
        return out
    sizes = np.fromiter((t.numel() for t in tensors), dtype=np.int64, count=n)
    start = 0
    while start < n:
        end, acc = start, 0
        while end < n and (acc == 0 or acc + sizes[end] <= chunk_elems):
            acc += sizes[end]
            end += 1
        idx = [i for i in range(start, end) if sizes[i] > 0]
        if idx:
            with torch.no_grad():
                flat = torch.cat([tensors[i].detach().reshape(-1).to(torch.float32) for i in idx])
                lengths = torch.as_tensor(sizes[idx])
                mx = torch.segment_reduce(flat, "max", lengths=lengths)
                mn = torch.segment_reduce(flat, "min", lengths=lengths)
                sm = torch.segment_reduce(flat.to(torch.float64), "sum", lengths=lengths)
                sq = torch.segment_reduce(flat.to(torch.float64).square(), "sum", lengths=lengths)
            ii = np.asarray(idx)
            out[ii, 0] = mx.double().numpy()
            out[ii, 1] = mn.double().numpy()
            out[ii, 2] = sm.numpy() / sizes[ii]
            out[ii, 3] = np.sqrt(sq.numpy())
        start = end
    return out
