"""The sweep: ``python -m torch_convt_op.bench --sweep N --seed S [--device cpu|cuda] [--json PATH]``.

Draws N random but realistic ConvTranspose1d layers (the kinds in KINDS, in about equal numbers),
times ours against ``torch.nn.functional.conv_transpose1d`` side by side in one process, and prints
the distribution of the speedups (torch time / ours) per mode: geomean, p10, min, the fraction of
shapes below 1x and below the acceptance figures of issue 31, by kind, and the ten worst shapes.
docs/design.md §10: the named shapes are a fixed table to follow; the op is judged on this sweep,
on seeds nobody tuned on.

Modes: forward in every dtype (CUDA: tf32, bf16, strict fp32; CPU: fp32) and forward + backward
(the gradients of x, w and bias) in every dtype except strict fp32 on CUDA. Each cell is also
checked: ours against torch on the same inputs (max |ours - torch| / max |torch| over y and, for
forward + backward, the three gradients); above twice the tolerance of its dtype and reduction
lengths (torch_convt_op/tolerances.py; both sides carry up to one tolerance of error), both are
compared with float64 on the same inputs, and the cell is flagged unless ours is within one
tolerance of float64 or closer than torch.

Draws are deterministic per (seed, index): shape i of seed S is the same in a sweep of any length,
and CPU and CUDA sweeps of one seed draw the same layers at different sizes (outputs of about
2M-120M elements on CUDA, 50k-4M on the CPU, with a cap on the FLOPs of one call).
"""
import contextlib
import dataclasses
import math
import random
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from torch_convt_op.shapes import Case

# ---- drawing shapes ------------------------------------------------------------------------------

# The kinds of layer of issue 31. Each draw picks one kind from a shuffled block of all kinds, so
# every run of len(KINDS) consecutive shapes holds each kind once.
KINDS = ["upsampler", "unet", "narrow_out", "long_k", "narrow_in", "grouped", "generic", "wide_short"]

# Output elements (N * C_out * L_out) of a drawn shape, and the most FLOPs one forward call and the
# most input elements (N * C_in * L_in) one shape may take, per device. A shape past a cap is made
# shorter (fewer batch elements, then fewer positions), so a sweep's time stays bounded and a narrow
# output's input (up to a thousand times its output) fits in memory with its gradient, twice.
SIZES = {"cuda": {"outputs": (2e6, 120e6), "flops": 0.5e12, "inputs": 1e9, "min_l_in": 32},
         "cpu": {"outputs": (50e3, 4e6), "flops": 3e9, "inputs": 4e8, "min_l_in": 16}}

# Acceptance of issue 31 per (device, pass): speedup wanted on a share of shapes, the least on
# every shape, and the geomean (None: no geomean figure).
TARGETS = {
    ("cuda", "fwd"): {"target": 1.0, "share": 0.97, "floor": 0.85, "geomean": 2.0},
    ("cuda", "fwd+bwd"): {"target": 1.0, "share": 0.90, "floor": 0.75, "geomean": 1.5},
    ("cpu", "fwd"): {"target": 0.9, "share": 0.95, "floor": 0.5, "geomean": None},
    ("cpu", "fwd+bwd"): {"target": 0.9, "share": 0.95, "floor": 0.5, "geomean": None},
}

POW2_CHANNELS = [32, 64, 128, 256, 512, 1024]


@dataclasses.dataclass(frozen=True)
class Layer:
    """A drawn layer before it is sized: everything but the batch and the input length."""
    kind: str
    c_in: int
    c_out: int
    k: int
    stride: int = 1
    padding: int = 0
    output_padding: int = 0
    dilation: int = 1
    groups: int = 1
    batch: Tuple[int, int] = (1, 16)      # batch sizes the layer runs at
    l_in: Tuple[int, int] = (32, 1 << 22)  # input lengths the layer runs at


def _same_padding(rng: random.Random, k: int, stride: int, dilation: int = 1) -> Tuple[int, int]:
    """(padding, output_padding) as upsamplers set them (L_out = L_in * stride where it can), or
    now and then another valid pair."""
    span = dilation * (k - 1)
    if rng.random() < 0.75:
        padding = max(0, (span + 1 - stride) // 2)
        output_padding = min(max(stride, dilation) - 1, max(0, stride - (span + 1 - 2 * padding)))
    else:
        output_padding = rng.randrange(max(stride, dilation))
        padding = rng.randint(0, (span + output_padding) // 2)
    return padding, output_padding


def _maybe_dilated(rng: random.Random, k: int, chance: float, most: int = 4) -> int:
    return rng.randint(2, most) if k > 1 and rng.random() < chance else 1


def _draw_layer(rng: random.Random, kind: str) -> Layer:
    if kind == "upsampler":  # vocoder / codec: stride 2-10, K = 2*stride or so, channels halving
        stride = rng.choice([2, 3, 4, 5, 6, 8, 10])
        k = rng.choice([2 * stride, 2 * stride, 2 * stride, stride, 2 * stride + stride % 2, 3 * stride])
        c_in = rng.choice(POW2_CHANNELS)
        c_out = max(1, c_in // rng.choice([2, 2, 2, 1]))
        padding, output_padding = _same_padding(rng, k, stride)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, batch=(1, 16))
    if kind == "unet":  # 1-D U-Net decoders: stride 2, K 2-5
        k = rng.randint(2, 5)
        c_in = rng.choice(POW2_CHANNELS + [48, 96, 192, 384])
        c_out = max(1, c_in // rng.choice([2, 2, 1]))
        padding, output_padding = _same_padding(rng, k, 2)
        return Layer(kind, c_in, c_out, k, 2, padding, output_padding, batch=(1, 32))
    if kind == "narrow_out":  # waveform decoders: C_out 1-4 from 64-1024 channels
        stride = rng.choice([1, 1, 2, 4, 5, 8, 8, 10])
        k = rng.choice([2 * stride, 2 * stride, 7, 3, 16, 4 * stride]) if stride > 1 else rng.choice([1, 3, 5, 7, 9])
        c_in = rng.choice([64, 96, 128, 256, 512, 768, 1024])
        c_out = rng.randint(1, 4)
        dilation = _maybe_dilated(rng, k, 0.15, 3)
        padding, output_padding = _same_padding(rng, k, stride, dilation)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, dilation, batch=(1, 16))
    if kind == "long_k":  # long filters: K 40-128
        stride = rng.choice([1, 2, 4, 5, 8, 10])
        k = rng.randint(40, 128) if rng.random() < 0.5 else rng.choice([40, 48, 64, 64, 96, 128])
        c_in = rng.choice([16, 32, 64, 96, 128, 256, 384, 512, 768])
        c_out = max(1, c_in // rng.choice([1, 2, 2, 4]))
        dilation = _maybe_dilated(rng, k, 0.15, 3)
        padding, output_padding = _same_padding(rng, k, stride, dilation)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, dilation, batch=(1, 16))
    if kind == "narrow_in":  # C_in 1-8 into many channels
        stride = rng.choice([1, 1, 2, 4, 5, 8])
        k = rng.choice([1, 2, 3, 4, 7, 8, 16]) if stride == 1 else rng.choice([stride, 2 * stride, 2 * stride + 1])
        c_in = rng.randint(1, 8)
        c_out = rng.choice([16, 32, 64, 128, 256, 512, 1024, 1536])
        dilation = _maybe_dilated(rng, k, 0.2, 4)
        padding, output_padding = _same_padding(rng, k, stride, dilation)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, dilation, batch=(1, 16))
    if kind == "grouped":  # groups 2-32, a third of them depthwise (one input channel per group)
        channels = rng.choice([64, 96, 128, 192, 256, 384, 512, 768, 1024])
        if rng.random() < 0.33:
            groups, c_in = channels, channels
            c_out = channels * rng.choice([1, 1, 2])
        else:
            groups = rng.choice([g for g in (2, 3, 4, 8, 16, 32) if channels % g == 0])
            c_in, c_out = channels, channels // rng.choice([1, 2]) // groups * groups or groups
        stride = rng.choice([1, 1, 2, 2, 3, 4])
        k = rng.choice([3, 5, 7, 9, 2 * stride + 1, 4, 16]) if stride > 1 else rng.choice([3, 5, 7, 9, 11, 15])
        dilation = _maybe_dilated(rng, k, 0.3, 3)
        padding, output_padding = _same_padding(rng, k, stride, dilation)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, dilation, groups, batch=(1, 16))
    if kind == "generic":  # mixed, non-power-of-two channel counts, any arguments
        c_in = rng.choice([rng.randint(9, 600), rng.randint(9, 80) * 3, rng.randint(2, 40) * 5])
        c_out = rng.choice([rng.randint(9, 600), rng.randint(9, 80) * 3, rng.randint(2, 40) * 7])
        stride = rng.randint(1, 6)
        k = rng.randint(1, 12)
        dilation = _maybe_dilated(rng, k, 0.3, 4)
        padding, output_padding = _same_padding(rng, k, stride, dilation)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, dilation, batch=(1, 16))
    if kind == "wide_short":  # 1024-1536 channels on short inputs
        c_in = rng.choice([1024, 1280, 1536])
        c_out = rng.choice([c_in, c_in // 2, c_in // 2, 512])
        stride = rng.choice([1, 2, 2, 4, 5, 8])
        k = rng.choice([2 * stride, 2 * stride, 3, 4, 7]) if stride > 1 else rng.choice([1, 3, 5, 7])
        padding, output_padding = _same_padding(rng, k, stride)
        return Layer(kind, c_in, c_out, k, stride, padding, output_padding, batch=(1, 16), l_in=(100, 1300))
    raise ValueError(f"unknown kind {kind!r}")


def _with_size(layer: Layer, rng: random.Random, device: str) -> Tuple[int, int]:
    """(N, L_in) for the layer: an output size drawn log-uniformly in the device's range, a batch
    drawn from the layer's; then the batch and length adjusted to the layer's ranges and the cap on
    FLOPs. Uses the same two draws on every device."""
    lo, hi = SIZES[device]["outputs"]
    target = lo * (hi / lo) ** rng.random()
    n_lo, n_hi = layer.batch
    n = min(n_hi, max(n_lo, round(2 ** rng.uniform(math.log2(n_lo), math.log2(n_hi)))))
    l_lo, l_hi = layer.l_in
    span = layer.dilation * (layer.k - 1) - 2 * layer.padding + layer.output_padding + 1

    def outputs(n_, l_in_):
        return n_ * layer.c_out * ((l_in_ - 1) * layer.stride + span)

    def l_for(n_):  # the input length that gives about `target` outputs at batch n_
        return min(l_hi, max(l_lo, round((target / (n_ * layer.c_out) - span) / layer.stride) + 1))

    l_in = l_for(n)
    if outputs(n, l_in) < target / 2 or outputs(n, l_in) > 2 * target:  # the length range could not reach it
        n = min(n_hi, max(n_lo, round(target / outputs(1, l_in))))
        l_in = l_for(n)
    # the caps: fewer batch elements first, then shorter (not below the device's least length)
    for per_position, cap in ((2 * layer.c_in * (layer.c_out // layer.groups) * layer.k, SIZES[device]["flops"]),
                              (layer.c_in, SIZES[device]["inputs"])):
        if n * l_in * per_position > cap:
            n = max(1, min(n, int(cap // (l_in * per_position))))
            if n * l_in * per_position > cap:
                l_in = max(min(l_lo, SIZES[device]["min_l_in"]), int(cap // (n * per_position)))
    return n, max(1, l_in)


def draw_shape(seed: int, index: int, device: str) -> Tuple[str, Case]:
    """(kind, Case) of shape `index` of a sweep: a function of (seed, index, device) only."""
    block, position = divmod(index, len(KINDS))
    kinds = list(KINDS)
    random.Random(f"convt-sweep kinds {seed} {block}").shuffle(kinds)
    kind = kinds[position]
    rng = random.Random(f"convt-sweep shape {seed} {index}")
    layer = _draw_layer(rng, kind)
    n, l_in = _with_size(layer, rng, device)
    case = Case(n, layer.c_in, layer.c_out, layer.k, l_in, layer.stride, layer.padding, layer.output_padding,
                layer.dilation, layer.groups, name=f"s{index:03d}-{kind}")
    assert_valid(case)
    return kind, case


def draw_shapes(count: int, seed: int, device: str) -> List[Tuple[str, Case]]:
    return [draw_shape(seed, i, device) for i in range(count)]


def assert_valid(case: Case) -> None:
    """What F.conv_transpose1d requires of the arguments (a drawn shape that breaks one is a bug here)."""
    problems = [what for what, ok in [
        ("sizes >= 1", min(case.n, case.c_in, case.c_out, case.k, case.l_in, case.stride, case.dilation) >= 1),
        ("padding >= 0", case.padding >= 0),
        ("output_padding < max(stride, dilation)", 0 <= case.output_padding < max(case.stride, case.dilation)),
        ("groups divide the channels", case.c_in % case.groups == 0 and case.c_out % case.groups == 0),
        ("L_out >= 1", case.l_out >= 1),
    ] if not ok]
    if problems:
        raise AssertionError(f"invalid sweep shape {case.describe()}: {', '.join(problems)}")


def compact(case: Case) -> str:
    """N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups (the order of bench.SHAPES)."""
    return ",".join(str(v) for v in case.sizes)


# ---- statistics ----------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1), linear between order statistics."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def distribution(speedups: Sequence[float], targets: dict) -> dict:
    if not speedups:
        return {"count": 0}
    count = len(speedups)
    below_target = sum(s < targets["target"] for s in speedups) / count
    stats = {
        "count": count, "geomean": geomean(speedups), "p10": percentile(speedups, 0.1),
        "median": percentile(speedups, 0.5), "min": min(speedups), "max": max(speedups),
        "below_1x": sum(s < 1.0 for s in speedups) / count,
        "target": targets["target"], "below_target": below_target,
        "floor": targets["floor"], "below_floor": sum(s < targets["floor"] for s in speedups) / count,
    }
    stats["meets_acceptance"] = (1 - below_target >= targets["share"] and stats["below_floor"] == 0
                                 and (targets["geomean"] is None or stats["geomean"] >= targets["geomean"]))
    return stats


# ---- running -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Cell:
    """One shape in one mode (pass and dtype)."""
    index: int
    name: str
    kind: str
    mode: str  # "fwd tf32", "fwd+bwd bf16", ...
    pass_: str  # "fwd" or "fwd+bwd"
    dtype: str
    case: Case
    torch_ms: Optional[float] = None
    ours_ms: Optional[float] = None
    error: Optional[float] = None  # ours against torch, max over the outputs compared
    tolerance: Optional[float] = None
    # where error > tolerance: ours and torch against float64 (the verdict: ours is flagged only if it is
    # off by more than its tolerance, half the cell's, and more than torch)
    error64: Optional[float] = None
    torch_error64: Optional[float] = None
    failure: Optional[str] = None  # an exception message (out of memory, a crash)
    torch_host_ms: Optional[float] = None  # CUDA: a call's enqueue time on the host (not in *_ms)
    ours_host_ms: Optional[float] = None

    @property
    def speedup(self) -> Optional[float]:
        return self.torch_ms / self.ours_ms if self.torch_ms and self.ours_ms else None

    @property
    def flagged(self) -> bool:
        if self.failure is not None:
            return True
        if self.error is None or self.error <= self.tolerance:
            return False
        if self.error64 is None:
            return True
        return not (self.error64 <= self.tolerance / 2 or self.error64 <= self.torch_error64)

    def as_dict(self) -> dict:
        c = self.case
        return {"index": self.index, "name": self.name, "kind": self.kind, "mode": self.mode, "pass": self.pass_,
                "dtype": self.dtype, "torch_ms": self.torch_ms, "ours_ms": self.ours_ms, "speedup": self.speedup,
                "error": self.error, "tolerance": self.tolerance, "error64": self.error64,
                "torch_error64": self.torch_error64, "flagged": self.flagged, "failure": self.failure,
                "torch_host_ms": self.torch_host_ms, "ours_host_ms": self.ours_host_ms,
                "args": {"n": c.n, "c_in": c.c_in, "c_out": c.c_out, "k": c.k, "l_in": c.l_in, "stride": c.stride,
                         "padding": c.padding, "output_padding": c.output_padding, "dilation": c.dilation,
                         "groups": c.groups},
                "l_out": c.l_out, "outputs": c.numels()["y"], "flops": c.flops}


def modes_for(device: str, dtype_names: Sequence[str], backward: bool) -> List[Tuple[str, str]]:
    """(pass, dtype) pairs: the forward in every dtype; forward + backward in every dtype but strict
    fp32 on CUDA (issue 31 judges the CUDA backward in tf32 and bf16)."""
    modes = [("fwd", d) for d in dtype_names]
    if backward:
        modes += [("fwd+bwd", d) for d in dtype_names if not (device == "cuda" and d == "fp32")]
    return modes


def _max_error(ours, reference) -> float:
    """max over the outputs of max |ours - reference| / max |reference|, in float64 on the CPU (float32 on
    CUDA, where a float64 copy of a large output would cost memory), or in the reference's float64."""
    from torch_convt_op import bench
    if isinstance(ours, torch.Tensor):
        ours, reference = (ours,), (reference,)
    dtype = torch.float64 if ours[0].device.type == "cpu" or reference[0].dtype == torch.float64 else torch.float32
    return max(bench.relative_error(a.detach(), b.detach().to(dtype)) for a, b in zip(ours, reference))


def _run_cell(cell: Cell, inputs, timer, device: str) -> None:
    from torch_convt_op import bench, tolerances
    torch_impl, our_impl = bench.IMPLEMENTATIONS["torch"], bench.IMPLEMENTATIONS["ours"]
    make = bench.forward_fn if cell.pass_ == "fwd" else bench.forward_backward_fn
    outputs = ("y",) if cell.pass_ == "fwd" else ("y", "grad_input", "grad_weight", "grad_bias")
    reduction = max(tolerances.reduction_length(cell.case, output) for output in outputs)
    cell.tolerance = 2 * tolerances.tolerance(bench.DTYPES[cell.dtype], reduction, tf32=cell.dtype == "tf32")
    with bench.tf32_mode(cell.dtype), torch.no_grad() if cell.pass_ == "fwd" else contextlib.nullcontext():
        fns = [make(torch_impl, inputs, cell.case), make(our_impl, inputs, cell.case)]
        ours, theirs = fns[1](), fns[0]()
        cell.error = _max_error(ours, theirs)
        if cell.error > cell.tolerance:  # which of the two is off: both against float64 on the same inputs
            exact = make(bench.torch_op, {name: t.double() for name, t in inputs.items()}, cell.case)()
            cell.error64, cell.torch_error64 = _max_error(ours, exact), _max_error(theirs, exact)
        del ours, theirs
        cell.torch_ms, cell.ours_ms = timer.median_ms(fns)
    if device == "cuda":
        cell.torch_host_ms, cell.ours_host_ms = timer.host_ms
        torch.cuda.synchronize()


def _timer(device: str, min_time: float):
    from torch_convt_op import bench
    if device == "cuda":
        return bench.CudaTimer(min_time, min_runs=3, max_runs=200, warmup=2)
    if not bench.pin_malloc_thresholds():
        bench.log("warning: could not pin glibc's malloc thresholds; page faults may distort the CPU timings")
    return bench.CpuTimer(min_time, min_runs=3, warmup=1)


DEFAULT_MIN_TIME = {"cuda": 0.04, "cpu": 0.1}  # seconds of timed runs per implementation and cell


def run_sweep(count: int, seed: int, device: str, dtype_names: Sequence[str], backward: bool = True,
              min_time: Optional[float] = None, max_seconds: Optional[float] = None,
              log: Callable[[str], None] = None) -> dict:
    """Draws and times `count` shapes; returns {"shapes", "cells", "summary", ...} (see as_json)."""
    from torch_convt_op import bench
    log = log or bench.log
    min_time = DEFAULT_MIN_TIME[device] if min_time is None else min_time
    timer = _timer(device, min_time)
    shapes = draw_shapes(count, seed, device)
    modes = modes_for(device, dtype_names, backward)
    cells: List[Cell] = []
    start = time.perf_counter()
    timed = 0
    for index, (kind, case) in enumerate(shapes):
        if max_seconds is not None and index > 0 and time.perf_counter() - start > max_seconds:
            log(f"--max-seconds {max_seconds:g} reached: {index} of {count} shapes timed")
            break
        log(f"[{index + 1}/{count}] {case.name}: {case.describe()} (outputs {case.numels()['y'] / 1e6:.2f}M)")
        inputs_by_dtype = {}
        for pass_, dtype_name in modes:
            cell = Cell(index, case.name, kind, f"{pass_} {dtype_name}", pass_, dtype_name, case)
            try:
                if dtype_name not in inputs_by_dtype:
                    inputs_by_dtype[dtype_name] = bench.make_inputs(case, bench.DTYPES[dtype_name], device,
                                                                   seed=seed * 1000003 + index)
                _run_cell(cell, inputs_by_dtype[dtype_name], timer, device)
            except (RuntimeError, torch.OutOfMemoryError) as e:  # recorded; the sweep goes on
                cell.failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                if device == "cuda":
                    torch.cuda.synchronize()
            cells.append(cell)
            if cell.failure:
                log(f"  {cell.mode:12s} FAILED: {cell.failure}")
            else:
                flag = "  ERROR ABOVE TOLERANCE" if cell.flagged else ""
                log(f"  {cell.mode:12s} torch {cell.torch_ms:9.3f} ms  ours {cell.ours_ms:9.3f} ms  "
                    f"{cell.speedup:6.2f}x  err {cell.error:.1e}{flag}")
        del inputs_by_dtype
        if device == "cuda":
            torch.cuda.empty_cache()
        timed += 1
    summary = {}
    for pass_, dtype_name in modes:
        mode = f"{pass_} {dtype_name}"
        speedups = [c.speedup for c in cells if c.mode == mode and c.speedup]
        summary[mode] = distribution(speedups, TARGETS[(device, pass_)])
        summary[mode]["by_kind"] = {
            kind: {"count": len(s), "geomean": geomean(s), "min": min(s)}
            for kind in KINDS
            for s in [[c.speedup for c in cells if c.mode == mode and c.kind == kind and c.speedup]] if s}
        summary[mode]["flagged"] = sum(c.flagged for c in cells if c.mode == mode)
    return {"sweep": {"count": count, "timed": timed, "seed": seed, "device": device, "dtypes": list(dtype_names),
                      "backward": backward, "min_time": min_time, "max_seconds": max_seconds,
                      "seconds": time.perf_counter() - start},
            "shapes": [{"index": i, "name": c.name, "kind": k, "shape": compact(c), "describe": c.describe()}
                       for i, (k, c) in enumerate(shapes)],
            "cells": cells, "summary": summary}


# ---- reporting -----------------------------------------------------------------------------------

def as_json(result: dict, environment: dict) -> dict:
    return {"environment": environment, "sweep": result["sweep"], "shapes": result["shapes"],
            "summary": result["summary"], "rows": [c.as_dict() for c in result["cells"]]}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def format_report(result: dict, worst: int = 10) -> str:
    sweep, cells, summary = result["sweep"], result["cells"], result["summary"]
    lines = [f"sweep: seed {sweep['seed']}, {sweep['timed']} of {sweep['count']} shapes on {sweep['device']} "
             f"({sweep['seconds']:.0f} s); shapes as N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups:"]
    shapes = result["shapes"][:sweep["timed"]]
    lines += [f"  {s['name']:18s} {s['shape']}" for s in shapes]
    lines += ["", "| mode | shapes | geomean | p10 | median | min | < 1x | < target | < floor | flagged | acceptance |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, s in summary.items():
        if not s["count"]:
            lines.append(f"| {mode} | 0 | | | | | | | | {s['flagged']} | |")
            continue
        lines.append(f"| {mode} | {s['count']} | {s['geomean']:.2f}x | {s['p10']:.2f}x | {s['median']:.2f}x | "
                     f"{s['min']:.2f}x | {_pct(s['below_1x'])} | {_pct(s['below_target'])} (< {s['target']}x) | "
                     f"{_pct(s['below_floor'])} (< {s['floor']}x) | {s['flagged']} | "
                     f"{'met' if s['meets_acceptance'] else 'not met'} |")
    modes = [m for m in summary if summary[m]["count"]]
    if modes:
        lines += ["", "geomean (min) by kind:", "| kind | " + " | ".join(modes) + " |",
                  "|---|" + "---|" * len(modes)]
        for kind in KINDS:
            row = []
            for mode in modes:
                k = summary[mode]["by_kind"].get(kind)
                row.append(f"{k['geomean']:.2f}x ({k['min']:.2f}x, {k['count']})" if k else "")
            lines.append(f"| {kind} | " + " | ".join(row) + " |")
    for mode in modes:
        ranked = sorted((c for c in cells if c.mode == mode and c.speedup), key=lambda c: c.speedup)[:worst]
        lines += ["", f"worst {len(ranked)}, {mode}:", "| shape | kind | N,C_in,C_out,K,L_in,s,p,op,d,g | torch ms | "
                  "ours ms | speedup | error |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {c.name} | {c.kind} | {compact(c.case)} | {c.torch_ms:.3f} | {c.ours_ms:.3f} | "
                  f"{c.speedup:.2f}x | {c.error:.1e} |" for c in ranked]
    flagged = [c for c in cells if c.flagged]
    if flagged:
        lines += ["", f"FLAGGED ({len(flagged)}: error above tolerance or a failure):"]
        lines += [f"  {c.name} {c.mode} {compact(c.case)}: "
                  + (c.failure or f"error {c.error:.2e} against torch > {c.tolerance:.0e}"
                     + ("" if c.error64 is None else
                        f"; against float64 ours {c.error64:.2e}, torch {c.torch_error64:.2e}")) for c in flagged]
    checked = [c for c in cells if c.error64 is not None and not c.flagged]
    if checked:
        lines += ["", f"{len(checked)} cells differ from torch beyond the tolerance, but ours is the closer to float64 "
                      "(or within its tolerance):"]
        lines += [f"  {c.name} {c.mode}: against float64 ours {c.error64:.2e}, torch {c.torch_error64:.2e}"
                  for c in checked]
    return "\n".join(lines)


def main(args, device: str, dtype_names: List[str]) -> int:
    """bench.py's --sweep: runs, writes --json, prints the report; exit status 1 when a cell is flagged."""
    import json
    from torch_convt_op import bench
    if device == "cpu" and torch.get_num_threads() > 2 and not args.threads:
        bench.log(f"note: {torch.get_num_threads()} threads (--threads sets them)")
    result = run_sweep(args.sweep, args.seed, device, dtype_names, backward=not args.no_backward,
                       min_time=args.min_time, max_seconds=args.max_seconds)
    env = bench.environment(device, None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(as_json(result, env), f, indent=2)
        bench.log(f"wrote {args.json}")
    print(f"torch {env['torch']}, {env.get('gpu', 'CPU')}, {env['threads']} threads: {env['command']}")
    print(format_report(result))
    return 1 if any(c.flagged for c in result["cells"]) else 0
