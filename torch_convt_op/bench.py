"""Benchmark and self-check: ``python -m torch_convt_op.bench [--device cpu|cuda] [--backward] [--check]``.

Times ``torch_convt_op.conv_transpose1d`` side by side with ``torch.nn.functional.conv_transpose1d``
in one process on the same random inputs (docs/design.md §10), and reports the speedup, the
error of both against a float64 reference and, on CUDA, the percentage of the roofline floor and
the memory each allocates beyond its output. Progress goes to stderr; the table, last, to stdout.

Method
  CUDA: CUDA events around each call, warm-up first, median of many runs; torch and ours alternate
        run by run; before every run the L2 is flushed (a 256 MB buffer written) and the GPU spins
        for longer than the host takes to enqueue the call, so the events time the device's work,
        not the host's (CudaTimer; the sweep's JSON keeps each side's host ms a call).
  CPU:  time.perf_counter, warm-up first, median; torch and ours alternate run by run so that both
        see the same machine state; glibc's malloc thresholds pinned (pin_malloc_thresholds) so
        page faults do not swamp the timings. Needs an otherwise idle machine: with few cores, one
        other busy process makes multi-threaded timings several times slower and erratic.
  CPU shapes are scaled to N=2, L_in=4096; CUDA shapes are full size.

Roofline floor (CUDA) = max(bytes / bandwidth, flops / peak), with
  bytes = (x + w + bias + y) elements * element size, each read or written once,
  flops = 2 * N * C_in * (C_out / groups) * K * L_in,
  bandwidth measured in the same run by a large device-to-device copy (read + write bytes), and
  peak = the dense H100 SXM figures in PEAK_FLOPS. These peaks are assumptions: other GPUs (or
  H100 PCIe) differ, so the % of floor is only meaningful on an H100 SXM.

``--check`` instead runs a quick correctness check: every shape scaled small, forward and the three
gradients, in every dtype of the device (or those of --dtypes), against a float64 reference within
torch_convt_op/tolerances.py's bounds; the exit status is 1 on any mismatch or non-finite error.
"""
import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

import torch_convt_op
from torch_convt_op import tolerances
from torch_convt_op.shapes import Case

# ---- shapes --------------------------------------------------------------------------------------


# docs/design.md §10: (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups)
SHAPES: Dict[str, Case] = {s.name: s for s in [
    Case(64, 128, 128, 3, 65536, 1, 0, 0, 1, 1, name="kb64"),
    Case(32, 32, 64, 5, 131072, 1, 0, 0, 3, 1, name="kb74"),
    Case(16, 32, 64, 3, 131072, 2, 1, 0, 2, 1, name="kb79"),
    Case(8, 512, 256, 16, 862, 8, 4, 0, 1, 1, name="hifigan_up0"),
    Case(8, 256, 128, 16, 6896, 8, 4, 0, 1, 1, name="hifigan_up1"),
    Case(8, 128, 64, 4, 55168, 2, 1, 0, 1, 1, name="hifigan_up2"),
    Case(8, 64, 32, 4, 110336, 2, 1, 0, 1, 1, name="hifigan_up3"),
    Case(8, 256, 128, 10, 6000, 5, 0, 0, 1, 1, name="encodec_up1"),
    Case(16, 128, 128, 5, 16384, 2, 2, 1, 1, 4, name="grouped"),
    Case(16, 256, 256, 7, 16384, 1, 3, 0, 1, 256, name="depthwise"),
    Case(1, 64, 64, 4, 1024, 2, 1, 0, 1, 1, name="small"),
]}

CPU_SCALE = {"n": 2, "l_in": 4096}    # the CPU benchmark size (issue 2)
CHECK_SCALE = {"n": 2, "l_in": 64}    # --check size

# ---- dtypes ----------------------------------------------------------------------------------------
# "tf32" and "fp32" are both float32; they differ in whether tensor cores may round to TF32.

DTYPES = {"tf32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp64": torch.float64}
DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                 "float64": "fp64", "double": "fp64"}
DEFAULT_DTYPES = {"cpu": "fp32", "cuda": "tf32,fp32,bf16"}

# Assumed dense peak FLOP/s of an H100 SXM (no sparsity), per dtype; fp32/fp64 without tensor cores.
PEAK_FLOPS = {"tf32": 494.7e12, "bf16": 989e12, "fp16": 989e12, "fp32": 67e12, "fp64": 67e12}

# --check's dtypes when --dtypes is not given: every dtype (and float32 math mode) the device has
CHECK_DTYPES = {"cpu": "fp64,fp32,bf16,fp16", "cuda": "tf32,fp32,bf16,fp16,fp64"}


def tolerance(shape: Case, dtype_name: str, output: str) -> float:
    """max |ours - ref| / max |ref| allowed for `output` (y, grad_x, grad_w, grad_bias) of shape in dtype_name:
    torch_convt_op/tolerances.py, the table the tests use too."""
    return tolerances.tolerance(DTYPES[dtype_name], tolerances.reduction_length(shape, output),
                                tf32=dtype_name == "tf32")


@contextlib.contextmanager
def tf32_mode(dtype_name: str):
    """TF32 on for "tf32", off for everything else, restored afterwards."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- inputs and the two implementations --------------------------------------------------------

def make_inputs(shape: Case, dtype: torch.dtype, device: str, seed: int = 0) -> Dict[str, torch.Tensor]:
    """Random x, w, bias and grad_y (never zeros), with w scaled so that y has unit-order values."""
    gen = torch.Generator(device=device).manual_seed(seed)
    fan = shape.c_in // shape.groups * shape.k
    sizes = {"x": (shape.n, shape.c_in, shape.l_in), "w": (shape.c_in, shape.c_out // shape.groups, shape.k),
             "bias": (shape.c_out,), "grad_y": (shape.n, shape.c_out, shape.l_out)}
    scale = {"w": fan ** -0.5}
    return {name: torch.randn(size, generator=gen, device=device).mul_(scale.get(name, 1.0)).to(dtype)
            for name, size in sizes.items()}


def torch_op(x, w, bias, shape: Case):
    stride, padding, output_padding, groups, dilation = shape.args
    return F.conv_transpose1d(x, w, bias, stride, padding, output_padding, groups, dilation)


def our_op(x, w, bias, shape: Case):
    return torch_convt_op.conv_transpose1d(x, w, bias, *shape.args)


IMPLEMENTATIONS = {"torch": torch_op, "ours": our_op}


def forward_fn(op, inputs, shape: Case) -> Callable[[], torch.Tensor]:
    return lambda: op(inputs["x"], inputs["w"], inputs["bias"], shape)


def forward_backward_fn(op, inputs, shape: Case) -> Callable[[], tuple]:
    """y = op(x, w, bias) and the gradients of x, w and bias for grad_y (no accumulation into .grad)."""
    leaves = [inputs[name].detach().requires_grad_() for name in ("x", "w", "bias")]

    def run():
        y = op(*leaves, shape)
        return torch.autograd.grad(y, leaves, inputs["grad_y"])
    return run


# ---- timing ------------------------------------------------------------------------------------


def pin_malloc_thresholds() -> bool:
    """Stop glibc from returning freed memory to the OS and mapping it fresh later.

    With glibc's default, dynamic mmap threshold, whether a big tensor lands in reused heap memory
    or in freshly mapped pages (one page fault per 4 KiB, which in this VM can cost more than the
    convolution itself) depends on the process's allocation history, so the same call measured
    0.5 ms in one run and 2.3 ms in the next. Pinning the thresholds makes every allocation reuse
    warm memory, which is what a steady-state training or inference loop sees. Returns whether it
    applied (glibc only)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


class CpuTimer:
    def __init__(self, min_time: float, min_runs: int = 5, max_runs: int = 10000, warmup: int = 2):
        self.min_time, self.min_runs, self.max_runs, self.warmup = min_time, min_runs, max_runs, warmup

    def median_ms(self, fns: Sequence[Callable]) -> List[float]:
        """Median ms of each fn; the fns alternate run by run."""
        for _ in range(self.warmup):
            for fn in fns:
                fn()
        times: List[List[float]] = [[] for _ in fns]
        start = time.perf_counter()
        while len(times[0]) < self.max_runs and (
                len(times[0]) < self.min_runs or time.perf_counter() - start < self.min_time * len(fns)):
            for fn, ts in zip(fns, times):
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
        return [statistics.median(ts) for ts in times]


class CudaTimer:
    """Median device ms of each fn; the fns alternate run by run (the order turning each round), so a
    slow spell of the machine falls on all of them alike. Before every run the L2 is flushed (a
    256 MB buffer written), and before the flush the GPU spins (`torch.cuda._sleep`) longer than the
    host takes to enqueue the run: the events then time the kernels and not the host's launches. A
    small training step enqueues for longer than its kernels run (Python, autograd, the dispatcher),
    and without the spin its events would time that host time and its jitter. `host_ms` keeps each
    fn's median enqueue time of the last `median_ms`."""
    L2_FLUSH_BYTES = 256 * 1024 * 1024
    SPIN_MARGIN = 1.5  # the spin is SPIN_MARGIN x the longest host time + SPIN_EXTRA_MS
    SPIN_EXTRA_MS = 0.05

    def __init__(self, min_time: float, min_runs: int = 10, max_runs: int = 1000, warmup: int = 3):
        self.min_time, self.min_runs, self.max_runs, self.warmup = min_time, min_runs, max_runs, warmup
        self.flush_buffer = torch.empty(self.L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        self.cycles_per_ms = self._spin_rate()
        self.host_ms: List[float] = []

    @staticmethod
    def _spin_rate() -> float:
        cycles = 2_000_000
        torch.cuda._sleep(cycles // 10)  # the first spin loads its kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / start.elapsed_time(end)

    def _host_ms(self, fn: Callable) -> float:
        """Enqueue time of one call into an idle queue."""
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        torch.cuda.synchronize()
        return ms

    def _event_ms(self, fns: Sequence[Callable], rounds: int, spin_ms: float) -> List[List[float]]:
        spin_cycles = int(spin_ms * self.cycles_per_ms)
        events = [[] for _ in fns]
        for r in range(rounds):
            order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
            for i in order:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(spin_cycles)
                self.flush_buffer.zero_()
                start.record()
                fns[i]()
                end.record()
                events[i].append((start, end))
        torch.cuda.synchronize()
        return [[start.elapsed_time(end) for start, end in pairs] for pairs in events]

    def median_ms(self, fns: Sequence[Callable]) -> List[float]:
        for fn in fns:  # the warm-up: kernels loaded, plans cached, the allocator's blocks in place
            fn()
        self.host_ms = [statistics.median(self._host_ms(fn) for _ in range(max(2, self.warmup))) for fn in fns]
        spin_ms = self.SPIN_MARGIN * max(self.host_ms) + self.SPIN_EXTRA_MS
        estimates = [statistics.median(ms) for ms in self._event_ms(fns, self.warmup, spin_ms)]
        typical = math.exp(sum(math.log(max(ms, 1e-3)) for ms in estimates) / len(estimates))
        runs = max(self.min_runs, min(self.max_runs, math.ceil(self.min_time * 1e3 / typical)))
        return [statistics.median(ms) for ms in self._event_ms(fns, runs, spin_ms)]


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device memory bandwidth in bytes/s from a device-to-device copy, counting read + write."""
    src = torch.empty(nbytes // 2, dtype=torch.int8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = CudaTimer(min_time=0.2).median_ms([lambda: dst.copy_(src)])[0]
    del src, dst
    return nbytes / (ms * 1e-3)


def extra_memory_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Peak memory allocated by one forward call beyond its output."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = fn()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - y.untyped_storage().nbytes()
    del y
    return extra


# ---- accuracy ----------------------------------------------------------------------------------

REFERENCE_MAX_ELEMENTS = 1 << 26  # batch elements used for the float64 reference, at most


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value - reference| / max |reference|."""
    diff = (value.to(reference.dtype) - reference).abs().max().item()
    return diff / max(reference.abs().max().item(), 1e-30)


def forward_errors(shape: Case, inputs, outputs: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """Error of each output against float64 on the same (rounded) inputs, on the first batch elements
    when the full reference would be too big (batch elements are independent)."""
    n = max(1, min(shape.n, REFERENCE_MAX_ELEMENTS // max(1, shape.numels()["y"] // shape.n)))
    reference = torch_op(inputs["x"][:n].double(), inputs["w"].double(), inputs["bias"].double(), shape)
    return {name: relative_error(y[:n], reference) for name, y in outputs.items()}


# ---- the benchmark -----------------------------------------------------------------------------

@dataclasses.dataclass
class Row:
    shape: str
    dtype: str
    torch_ms: float
    ours_ms: float
    torch_err: float
    ours_err: float
    floor_ms: Optional[float] = None
    torch_extra_mb: Optional[float] = None
    ours_extra_mb: Optional[float] = None
    torch_fwd_bwd_ms: Optional[float] = None
    ours_fwd_bwd_ms: Optional[float] = None

    @property
    def speedup(self) -> float:
        return self.torch_ms / self.ours_ms

    @property
    def fwd_bwd_speedup(self) -> Optional[float]:
        return self.torch_fwd_bwd_ms / self.ours_fwd_bwd_ms if self.ours_fwd_bwd_ms else None

    @property
    def pct_of_floor(self) -> Optional[float]:
        return 100 * self.floor_ms / self.ours_ms if self.floor_ms else None

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "speedup": self.speedup, "fwd_bwd_speedup": self.fwd_bwd_speedup,
                "pct_of_floor": self.pct_of_floor}


def floor_ms(shape: Case, dtype_name: str, bandwidth: float) -> float:
    nbytes = sum(shape.numels().values()) * DTYPES[dtype_name].itemsize
    return 1e3 * max(nbytes / bandwidth, shape.flops / PEAK_FLOPS[dtype_name])


def bench_one(shape: Case, dtype_name: str, device: str, timer, backward: bool,
              bandwidth: Optional[float]) -> Row:
    inputs = make_inputs(shape, DTYPES[dtype_name], device)
    with tf32_mode(dtype_name):
        forwards = [forward_fn(op, inputs, shape) for op in IMPLEMENTATIONS.values()]
        with torch.no_grad():
            torch_ms, ours_ms = timer.median_ms(forwards)
            errors = forward_errors(shape, inputs, dict(zip(IMPLEMENTATIONS, (fn() for fn in forwards))))
        row = Row(shape.name, dtype_name, torch_ms, ours_ms, errors["torch"], errors["ours"])
        if device == "cuda":
            row.floor_ms = floor_ms(shape, dtype_name, bandwidth)
            with torch.no_grad():
                row.torch_extra_mb, row.ours_extra_mb = (extra_memory_bytes(fn) / 2**20 for fn in forwards)
        if backward:
            row.torch_fwd_bwd_ms, row.ours_fwd_bwd_ms = timer.median_ms(
                [forward_backward_fn(op, inputs, shape) for op in IMPLEMENTATIONS.values()])
    return row


def format_table(rows: List[Row], device: str, backward: bool) -> str:
    columns: List[Tuple[str, Callable[[Row], str]]] = [
        ("shape", lambda r: r.shape), ("dtype", lambda r: r.dtype),
        ("torch ms", lambda r: f"{r.torch_ms:.3f}"), ("ours ms", lambda r: f"{r.ours_ms:.3f}"),
        ("speedup", lambda r: f"{r.speedup:.2f}x"),
    ]
    if device == "cuda":
        columns += [("% of floor", lambda r: f"{r.pct_of_floor:.0f}%")]
    if backward:
        columns += [("torch fwd+bwd ms", lambda r: f"{r.torch_fwd_bwd_ms:.3f}"),
                    ("ours fwd+bwd ms", lambda r: f"{r.ours_fwd_bwd_ms:.3f}"),
                    ("fwd+bwd speedup", lambda r: f"{r.fwd_bwd_speedup:.2f}x")]
    columns += [("torch err", lambda r: f"{r.torch_err:.1e}"), ("ours err", lambda r: f"{r.ours_err:.1e}")]
    if device == "cuda":
        columns += [("torch extra MB", lambda r: f"{r.torch_extra_mb:.0f}"),
                    ("ours extra MB", lambda r: f"{r.ours_extra_mb:.0f}")]
    lines = ["| " + " | ".join(name for name, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    return "\n".join(lines)


def save_png(rows: List[Row], path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"--png: matplotlib is not installed (pip install matplotlib); {path} not written")
        return
    series = [("forward", lambda r: r.speedup)]
    if rows and rows[0].ours_fwd_bwd_ms is not None:
        series.append(("fwd+bwd", lambda r: r.fwd_bwd_speedup))
    labels = [f"{r.shape}\n{r.dtype}" for r in rows]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows)), 4))
    for i, (name, value) in enumerate(series):
        ax.bar([j + i * width for j in range(len(rows))], [value(r) for r in rows], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(rows))], labels, rotation=60, fontsize=7)
    ax.set_ylabel("speedup over torch (higher is better)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    log(f"wrote {path}")


def environment(device: str, bandwidth: Optional[float]) -> dict:
    env = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "torch": torch.__version__,
           "device": device, "threads": torch.get_num_threads(),
           "command": " ".join(["python -m torch_convt_op.bench", *sys.argv[1:]])}
    if device == "cuda":
        env.update(gpu=torch.cuda.get_device_name(), copy_bandwidth_bytes_per_s=bandwidth,
                   assumed_peak_flops=PEAK_FLOPS)
    return env


def run_benchmark(shapes: List[Case], dtype_names: List[str], device: str, backward: bool,
                  min_time: float) -> Tuple[List[Row], dict]:
    bandwidth = None
    if device == "cuda":
        timer = CudaTimer(min_time)
        bandwidth = copy_bandwidth()
        log(f"device-to-device copy bandwidth: {bandwidth / 1e12:.2f} TB/s")
    else:
        timer = CpuTimer(min_time)
        if not pin_malloc_thresholds():
            log("warning: could not pin glibc's malloc thresholds; page faults may distort the CPU timings")
        shapes = [s.scaled(**CPU_SCALE) for s in shapes]
    rows = []
    for shape in shapes:
        for dtype_name in dtype_names:
            log(f"{shape.name} {dtype_name}: {shape.describe()} ...")
            row = bench_one(shape, dtype_name, device, timer, backward, bandwidth)
            fwd_bwd = f", fwd+bwd {row.torch_fwd_bwd_ms:.3f} / {row.ours_fwd_bwd_ms:.3f} ms" if backward else ""
            log(f"  torch {row.torch_ms:.3f} ms, ours {row.ours_ms:.3f} ms ({row.speedup:.2f}x){fwd_bwd}")
            rows.append(row)
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows, environment(device, bandwidth)


# ---- --check -------------------------------------------------------------------------------------

def check_one(shape: Case, dtype_name: str, device: str) -> List[Tuple[str, float]]:
    """(output name, error) of y, grad_x, grad_w, grad_bias against float64 on the same inputs."""
    inputs = make_inputs(shape, DTYPES[dtype_name], device)
    with tf32_mode(dtype_name):
        leaves = [inputs[k].detach().requires_grad_() for k in ("x", "w", "bias")]
        y = our_op(*leaves, shape)
        grads = torch.autograd.grad(y, leaves, inputs["grad_y"])
    ref_leaves = [inputs[k].detach().cpu().double().requires_grad_() for k in ("x", "w", "bias")]
    y_ref = torch_op(*ref_leaves, shape)
    grads_ref = torch.autograd.grad(y_ref, ref_leaves, inputs["grad_y"].cpu().double())
    names = ["y", "grad_x", "grad_w", "grad_bias"]
    return [(name, relative_error(v.detach().cpu(), r.detach()))
            for name, v, r in zip(names, (y, *grads), (y_ref, *grads_ref))]


def run_check(shapes: List[Case], dtype_names: List[str], device: str) -> bool:
    """Every output of every shape and dtype within its tolerance; an error that is not a finite number
    (NaN or Inf in an output) fails too. Prints a line per shape and dtype (the output nearest its bound,
    or every one that fails) and returns whether all passed."""
    print(f"library {torch_convt_op.LIBRARY_PATH}")
    ok = True
    for shape in (s.scaled(**CHECK_SCALE) for s in shapes):
        for dtype_name in dtype_names:
            # (error / tolerance, name, error, tolerance); NaN and Inf errors count as infinitely over
            results = []
            for name, error in check_one(shape, dtype_name, device):
                tol = tolerance(shape, dtype_name, name)
                results.append((error / tol if math.isfinite(error) else math.inf, name, error, tol))
            failed = [r for r in results if not r[0] <= 1]
            ok &= not failed
            for _, name, error, tol in failed or [max(results)]:
                print(f"{'FAIL' if failed else 'ok  '} {shape.name:12s} {dtype_name:5s} "
                      f"{'' if failed else 'worst '}{name} error {error:.1e} (tolerance {tol:.1e})", flush=True)
    print("check passed" if ok else "check FAILED")
    return ok


def explain_table(shapes: List[Case], dtype_names: List[str], card: str) -> str:
    """The planner's choice per shape, dtype and pass (torch_convt_op.planner); card "cpu": this CPU's forms."""
    from .planner import PASSES, explain, summary
    lines = [f"plans for {card}:", f"{'shape':12s} {'dtype':5s} " + " | ".join(f"{name:40s}" for name in PASSES)]
    for shape in shapes:
        for dtype_name in dtype_names:
            plan = explain(shape.n, shape.c_in, shape.c_out, shape.k, shape.l_in, shape.stride, shape.padding,
                           shape.output_padding, shape.dilation, shape.groups, dtype=DTYPES[dtype_name],
                           tf32=dtype_name != "fp32", device=card)
            lines.append(f"{shape.name:12s} {dtype_name:5s} " + " | ".join(f"{summary(plan[name]):40s}" for name in PASSES))
    return "\n".join(lines)


# ---- command line --------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torch_convt_op.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when available (default)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names (default: all)")
    parser.add_argument("--dtypes", help="comma-separated from tf32,fp32,bf16,fp16,fp64 "
                                         f"(default: {DEFAULT_DTYPES['cpu']} on CPU, {DEFAULT_DTYPES['cuda']} on CUDA)")
    parser.add_argument("--backward", action="store_true", help="also time forward+backward (grads of x, w, bias)")
    parser.add_argument("--min-time", type=float, default=None,
                        help="seconds of timed runs per implementation and measurement (default 2 on CPU, 0.5 on CUDA)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads for CPU runs")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--png", metavar="PATH", help="also draw the speedups (needs matplotlib)")
    parser.add_argument("--explain", nargs="?", const="auto", choices=["auto", "h100", "h200", "a100", "cuda", "cpu"],
                        help="print which kernel the planner picks for each shape, pass and dtype, on this GPU "
                             "(auto, the default: cuda when available, else h100), a named card, or cpu (the "
                             "forms this CPU runs); runs nothing")
    parser.add_argument("--check", action="store_true",
                        help="run the correctness self-check (shapes scaled small) instead of the benchmark")
    sweep = parser.add_argument_group("sweep (torch_convt_op/sweep.py)")
    sweep.add_argument("--sweep", type=int, metavar="N",
                       help="time N random realistic shapes (not the named ones) and print the distribution")
    sweep.add_argument("--seed", type=int, default=0, help="the sweep's draw (default 0)")
    sweep.add_argument("--no-backward", action="store_true", help="sweep: time the forward only")
    sweep.add_argument("--max-seconds", type=float, help="sweep: time no further shape after this many seconds")
    return parser.parse_args(argv)


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: CUDA is not available in this torch build or machine")
    return name


def resolve_shapes(spec: str) -> List[Case]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        sys.exit(f"--shapes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    return [SHAPES[n] for n in names]


def resolve_dtypes(spec: Optional[str], device: str) -> List[str]:
    names = [DTYPE_ALIASES.get(n.strip(), n.strip()) for n in (spec or DEFAULT_DTYPES[device]).split(",")]
    unknown = [n for n in names if n not in DTYPES]
    if unknown:
        sys.exit(f"--dtypes: unknown {', '.join(unknown)}; known: {', '.join(DTYPES)}")
    if device == "cpu" and "tf32" in names:
        sys.exit("--dtypes: tf32 applies to CUDA only; use fp32 on the CPU")
    return names


def main(argv=None) -> None:
    args = parse_args(argv)
    device = resolve_device(args.device)
    shapes = resolve_shapes(args.shapes)
    dtype_names = resolve_dtypes(args.dtypes, device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.explain:
        card = args.explain if args.explain != "auto" else "cuda" if torch.cuda.is_available() else "h100"
        print(explain_table(shapes, resolve_dtypes(args.dtypes, "cpu" if card == "cpu" else "cuda"), card))
        return
    if args.check:
        dtype_names = resolve_dtypes(args.dtypes or CHECK_DTYPES[device], device)
        sys.exit(0 if run_check(shapes, dtype_names, device) else 1)
    if args.sweep is not None:
        from . import sweep
        sys.exit(sweep.main(args, device, dtype_names))
    min_time = args.min_time if args.min_time is not None else (2.0 if device == "cpu" else 0.5)
    rows, env = run_benchmark(shapes, dtype_names, device, args.backward, min_time)
    title = f"torch_convt_op vs torch {env['torch']} on {env.get('gpu', 'CPU')}"
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": [r.as_dict() for r in rows]}, f, indent=2)
        log(f"wrote {args.json}")
    if args.png:
        save_png(rows, args.png, title)
    print(format_table(rows, device, args.backward))


if __name__ == "__main__":
    main()
