"""Which kernels the CUDA planner (csrc/plan.cpp) picks for a problem, on a named card or the current
GPU, and which forms this process's CPU runs (device="cpu": csrc/cpu/conv_transpose1d_cpu.cpp's plan).
Pure: it asks the planner, it launches nothing, so it works on a CPU-only build too.

    >>> from torch_convt_op.planner import explain
    >>> explain(8, 512, 256, 16, 862, stride=8, padding=4, dtype=torch.bfloat16, device="h100")["forward"]
    {'kernel': 'gemm', 'family': 'pipelined', 'block_m': 128, ...}
"""
from typing import Dict, Union

import torch

PASSES = ("forward", "grad_input", "grad_weight", "grad_bias")
CARDS = ("h100", "h200", "a100", "cuda")  # "cuda": the current device (needs the CUDA kernels)
# device="cpu": each pass's CPU form, {"kernel": a CONVT_CPU_FORMS name, "vector_bits": the AVX2 forms'
# vector width (256 or 512; 0 where they do not run), "fast_blas": 1 where at::mm is taken to outrun the
# 16-float micro-kernel (MKL on an Intel CPU; CONVT_CPU_FAST_BLAS)}, CONVT_CPU_FORMS applied


def _parse(text: str) -> Dict[str, Union[str, int]]:
    values: Dict[str, Union[str, int]] = {}
    for item in text.split():
        key, value = item.split("=", 1)
        values[key] = int(value) if value.lstrip("-").isdigit() else value
    return values


def explain(n: int, c_in: int, c_out: int, k: int, l_in: int, stride: int = 1, padding: int = 0,
            output_padding: int = 0, dilation: int = 1, groups: int = 1, dtype: torch.dtype = torch.float32,
            tf32: bool = True, device: str = "h100") -> Dict[str, Dict[str, Union[str, int]]]:
    """The plan of each pass (forward, grad_input, grad_weight, grad_bias) for contiguous tensors of
    these sizes: a dict per pass with its "kernel" and, for tensor-core kernels, the tile family
    ("warp", "warpgroup", "pipelined"), tile sizes, stages and shared memory."""
    sizes = [n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups]
    texts = torch.ops.convt._plan(sizes, dtype, tf32, device)
    return dict(zip(PASSES, (_parse(text) for text in texts)))


def summary(plan: Dict[str, Union[str, int]]) -> str:
    """One pass's plan in a few words, e.g. 'gemm pipelined 128x256 4 stages', with the copies it runs
    over ('... over channels-last copies of x, 6 a chunk', '... over channels-last grad_y')."""
    kernel = str(plan["kernel"])
    if kernel == "gemm":
        text = f"gemm {plan['family']} {plan['block_m']}x{plan['block_n']}"
        if plan.get("stages"):
            text += f" {plan['stages']} stages"
        if plan.get("row_phases", 1) > 1 or plan.get("channel_phases", 1) > 1:
            text += " merged"
        text += (" deinterleaved" if plan.get("deinterleaved") else "") + (" permuted" if plan.get("permuted_positions") else "")
        if plan.get("copy_batch"):
            layout = "channels-last" if plan.get("copy_channels_last") else "aligned-row"
            text += f" over {layout} copies of x, {plan['copy_batch']} a chunk"
        return text + (" over channels-last grad_y" if plan.get("channels_last_grad_y") else "")
    if kernel == "packed_taps":
        return f"packed_taps {plan['columns']} columns"
    if kernel == "grad_weight_boxes":  # (tiles of block_ci x box_slots taps of block_co)
        text = f"{kernel} {plan['block_ci']}x{plan['box_slots']}x{plan['block_co']} {plan['stages']} stages"
        copies = [name for name in ("aligned_x", "channels_last_grad_y", "unrolled_grad_y") if plan.get(name)]
        return text + (" over " + " + ".join(copies) if copies else "")
    if kernel.startswith("grad_weight"):
        text = f"{kernel} {plan['block_ci']}x{plan['block_co']} taps {plan['group_taps']}"
        text += (f" {plan['stages']} stages" if plan.get("stages") else "") + (" merged" if plan.get("merged") else "")
        copies = [name for name in ("aligned_x", "deinterleaved_grad_y", "unrolled_grad_y") if plan.get(name)]
        return text + (" over " + " + ".join(copies) if copies else "")
    if kernel == "row_sums":
        return "row_sums " + ("warp a row" if plan["warp_rows"] else f"block a row, {plan['segments']} segments")
    return kernel
