"""Forward and backward of convt::conv_transpose1d over shapes that reach every CUDA kernel, in every
dtype, under compute-sanitizer's memcheck, racecheck, initcheck and synccheck.

    python tools/sanitize.py            # every tool; one summary line per tool, exit 1 on any error
    python tools/sanitize.py --tool racecheck  # (leaves out the mbarrier-ordered kernels: MBARRIER_KERNELS)
    python tools/sanitize.py --inner    # the workload alone (what runs under each tool)
    python tools/sanitize.py --shapes 28,29  # only these shapes of the workload (SHAPES, WIDE_TILE_SHAPES, NARROW_ROW_SHAPES)
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]

# (N, C_in, C_out, K, L_in, stride, padding, output_padding, groups, dilation, channels_last input)
SHAPES = [
    (2, 80, 72, 3, 300, 1, 1, 0, 1, 1, False),   # tensor cores: several channel chunks, out_step 1 (sm_90: wgmma grad_weight)
    (2, 40, 48, 3, 128, 1, 1, 0, 1, 1, False),   # rows of a multiple of 8 elements: 16-byte copies in every dtype
    (2, 48, 40, 3, 1000, 1, 0, 0, 1, 1, False),  # sm_90 grad_weight: gy chunks at even offsets, 3 taps at consecutive shifts
    (2, 72, 40, 3, 500, 2, 0, 1, 1, 3, False),   # sm_90 grad_weight with grad_bias: a phase whose shifts start at 1
    (2, 96, 80, 3, 1001, 1, 1, 0, 1, 1, False),  # sm_90 implicit GEMM: rows of an odd length, windows at shifts
    (2, 136, 72, 3, 304, 1, 0, 0, 1, 1, False),  # sm_90 pipelined grad_weight: two ci tiles, the last part-empty
    (1, 40, 80, 3, 17000, 1, 1, 0, 1, 1, False),  # sm_90 pipelined forward, 128-row tiles (TF32: x_s by TMA; 3xTF32)
    (2, 40, 56, 3, 17000, 1, 1, 0, 1, 1, False),  # sm_90 pipelined 64 x 256 tiles, forward and grad_input
    (2, 32, 64, 3, 17000, 2, 1, 0, 1, 2, False),  # sm_90 pipelined forward of one out phase (3xTF32), rows of odd length
    (2, 40, 56, 3, 16999, 1, 1, 0, 1, 1, False),  # sm_90 pipelined forward, x rows not 16-byte multiples (TF32 rounded in registers)
    (4, 40, 24, 4, 9000, 2, 1, 0, 1, 1, False),  # sm_90 pipelined forward with its phases merged into rows (16-bit too)
    (1, 24, 40, 7, 129, 3, 2, 1, 1, 2, False),   # staged interleaved output
    (2, 64, 32, 4, 257, 2, 1, 0, 2, 1, False),   # groups, 32-row tiles
    (2, 16, 24, 2, 70, 6, 0, 5, 1, 2, False),    # phases that no tap reaches, staged
    (2, 16, 16, 3, 40, 11, 1, 0, 1, 1, False),   # phases that no tap reaches, direct stores
    (1, 64, 32, 16, 50, 8, 4, 0, 1, 1, False),   # HiFi-GAN-like: 16 taps, resident weight
    (1, 160, 96, 16, 40, 8, 4, 0, 1, 1, False),  # > 64 rows per group, streamed weight, a part-empty row tile
    (2, 32, 24, 3, 33, 2, 1, 0, 1, 2, True),     # a transposed (N, L, C) input view
    (2, 6, 12, 5, 37, 3, 2, 1, 6, 2, False),     # depthwise with a channel multiplier
    (1, 4, 4, 7, 2500, 1, 3, 0, 4, 1, False),    # depthwise, rows longer than a segment
    (2, 4, 6, 3, 9, 1, 0, 0, 1, 1, False),       # few channels: padded to the k-step and the tile
    (2, 512, 1, 16, 100, 8, 4, 0, 1, 1, False),  # one output channel (few tiles): 16 x 256 warp tiles
    (4, 64, 2, 16, 9000, 8, 4, 0, 1, 1, False),  # two output channels: sm_90 merged into 16 rows, pipelined
    (2, 3, 64, 7, 300, 1, 3, 0, 1, 1, False),    # three input channels
    (2, 64, 48, 64, 90, 1, 20, 0, 1, 1, False),  # 64 taps of one phase: steps of a run of taps each
    (2, 48, 40, 100, 60, 3, 7, 2, 1, 2, False),  # 100 taps, strided and dilated: runs per phase
    (1, 3, 2, 130, 5, 2, 3, 0, 1, 1, False),     # more taps than the tensor cores take: direct kernels
    (2, 16, 16, 4, 40, 1, 5, 0, 1, 300, False),  # taps hundreds of positions apart: grad_weight over grad_y unrolled (float64: direct)
    (2, 96, 136, 20, 12001, 1, 9, 0, 1, 1, False),  # sm_90 pipelined runs of taps (the several-pair kernels)
    (8, 96, 80, 7, 6000, 2, 3, 0, 1, 1, False),  # sm_90 3xTF32 pipelined out phase by out phase (several pairs)
    (4, 40, 24, 4, 3001, 2, 1, 0, 1, 1, False),  # grad_input over grad_y deinterleaved (odd length), warp tiles
    (8, 160, 96, 6, 6001, 3, 2, 0, 2, 1, False),  # the same, sm_90 pipelined, two groups
    (6, 1, 97, 5, 300, 2, 3, 0, 1, 2, False),    # depthwise forward in blocks of output rows, the last one row
    (2, 80, 40, 7, 1001, 3, 2, 2, 1, 1, False),  # sm_90 pipelined grad_weight over x aligned and grad_y deinterleaved
    (2, 200, 24, 3, 1500, 4, 1, 0, 1, 1, False),  # grad_input over grad_y deinterleaved, K < stride (3 phases, one tap)
    (4, 72, 3, 3, 9001, 4, 1, 2, 1, 1, False),  # sm_90 K < stride merged into rows, rows without a tap not stored
    (2, 1040, 24, 16, 1201, 8, 4, 3, 1, 1, False),  # grad_input deinterleaved (>= 1536 MACs a grad_y element), two launches
    (2, 40, 24, 300, 97, 300, 7, 0, 1, 1, False),  # a deinterleave copy of 300 phases, one position a block
    (4, 400, 40, 5, 3001, 2, 2, 0, 1, 1, False),  # grad_input with zero taps, the exact plan behind the copy's flag
    (2, 64, 64, 5, 301, 3, 1, 2, 16, 1, False),  # groups of 4 x 4 channels: depthwise backward kernels
    (1, 1024, 1024, 8, 40, 2, 3, 0, 1, 1, False),  # a weight packing to more than 16 MB, in one launch
    (2, 64, 64, 5, 301, 3, 1, 2, 32, 1, False),  # groups of 2 x 2 channels: every depthwise kernel
    (1, 1, 1536, 5, 575, 5, 2, 3, 1, 1, False),  # depthwise grad_input over co blocks summed in order
    (2, 1, 48, 16, 301, 8, 4, 0, 1, 1, False),   # depthwise forward over its phase's taps (tap_step 8)
    (2, 4, 8, 9, 40, 300, 5, 11, 4, 7, False),   # the same past the phase table (stride 300: taps by a scan)
    (4, 1024, 512, 4, 189, 8, 0, 0, 1, 1, False),  # sm_90 float forward over copies of x (TF32 channels-last, 3xTF32 aligned)
    (3, 80, 123, 4, 1500, 6, 0, 0, 1, 2, False),  # sm_90 staged warp tiles in place of warpgroup tiles (3 of 6 phases tapless)
    (2, 96, 96, 5, 4000, 1, 2, 0, 16, 1, False),  # groups merged into one GEMM group (block-diagonal packed weight), forward and grad_input
    (3, 1024, 512, 7, 301, 4, 1, 0, 1, 1, False),  # sm_90 zero-tap forward over copies of x, its exact plan gated on the copy
    (2, 1, 96, 16, 1500, 1, 7, 0, 1, 1, False),  # one input channel's forward on the GEMM (its channel padded in smem)
    (4, 7, 64, 9, 8000, 4, 6, 0, 1, 2, False),  # staged 64 x 128 warp tiles in place of 64 x 256 (2 of 4 phases tapless)
    (2, 1024, 512, 7, 100, 8, 0, 1, 1, 1, False),  # sm_90 box tiles: TF32 over grad_y unrolled, 16-bit over grad_y by phase
    (2, 256, 256, 1, 256, 1, 0, 0, 1, 1, False),  # sm_90 TF32 box tiles over grad_y's own rows
    (1, 32, 3, 5, 300, 1, 100, 0, 1, 3000, False),  # grad_y unrolled in windows of 2 taps (16-bit: 4), most past grad_y
]


MODES = [("float32", True), ("float32", False), ("float16", False), ("bfloat16", False), ("float64", False)]
# Shapes with enough tiles to fill 132 SMs with the implicit GEMM's 64-row warp tiles, which only TF32
# and the 16-bit dtypes use: 64 x 256 tiles (33-64 rows) and 128 x 128 (more rows; on sm_90 warpgroup
# tiles, wgmma: stride 1 with 16-word chunks, and strided upsampling with its phases merged into
# rows in the forward and into channels in grad_input)
WIDE_TILE_SHAPES = [
    (8, 48, 40, 4, 4500, 2, 1, 0, 1, 1, False),
    (4, 96, 160, 3, 4200, 1, 1, 0, 1, 1, False),
    (4, 64, 96, 16, 4200, 8, 4, 0, 1, 1, False),
    (3, 48, 40, 10, 3000, 5, 3, 2, 1, 1, False),  # merged phases at an odd stride: a part-empty row tile
    (12, 96, 40, 16, 1500, 8, 4, 0, 1, 1, False),  # merged phases in grad_input too
]
WIDE_TILE_MODES = [("float32", True), ("bfloat16", False)]
# Groups of 8-32 rows on the pipelined 16 and 32-row tiles, in runs of at most 16 taps (where that pays;
# all of them under CONVT_NARROW_ROWS_PIPELINED=always): enough tiles to reach half the SMs
NARROW_ROW_SHAPES = [
    (1, 32, 16, 64, 40000, 1, 31, 0, 1, 1, False),  # 16 rows forward, 32 grad_input, 64 taps
    (2, 8, 256, 16, 20000, 1, 7, 0, 1, 1, False),   # 8 rows grad_input
    (2, 96, 48, 3, 20000, 1, 3, 0, 3, 3, False),    # three groups of 16 rows, dilated
    (4, 20, 12, 9, 9001, 3, 4, 2, 1, 2, False),     # 12 rows, strided and dilated
]
NARROW_ROW_MODES = [("float32", True), ("float32", False), ("bfloat16", False)]


def exercise(only=None) -> None:
    import torch
    import torch.nn.functional as F

    import torch_convt_op

    generator = torch.Generator().manual_seed(0)
    runs = 0
    work = ([(shape, MODES) for shape in SHAPES] + [(shape, WIDE_TILE_MODES) for shape in WIDE_TILE_SHAPES] +
            [(shape, NARROW_ROW_MODES) for shape in NARROW_ROW_SHAPES])
    if only is not None:
        work = [work[index] for index in only]
    for shape, modes in work:
        n, c_in, c_out, k, l_in, stride, padding, output_padding, groups, dilation, channels_last = shape
        for dtype_name, tf32 in modes:
            dtype = getattr(torch, dtype_name)
            torch.backends.cudnn.allow_tf32 = tf32

            def randn(*size):
                return torch.randn(*size, dtype=torch.float64, generator=generator).to("cuda", dtype)

            x = randn(n, l_in, c_in).transpose(1, 2) if channels_last else randn(n, c_in, l_in)
            w, b = randn(c_in, c_out // groups, k), randn(c_out)
            x, w, b = (t.requires_grad_(True) for t in (x, w, b))
            args = stride, padding, output_padding, groups, dilation
            y = torch_convt_op.conv_transpose1d(x, w, b, *args)
            grads = torch.autograd.grad(y, (x, w, b), torch.randn_like(y))
            expected = F.conv_transpose1d(*(t.detach().double() for t in (x, w, b)), *args)
            error = ((y.double() - expected).abs().max() / expected.abs().max()).item()
            assert error < 5e-2 and all(torch.isfinite(g).all() for g in grads), (shape, dtype, error)
            runs += 1
    torch.cuda.synchronize()
    print(f"sanitize workload: {runs} forward+backward runs ok")


# The kernels whose shared-memory stages only mbarriers order (pipelined_gemm_kernel,
# grad_weight_wgmma_pipelined_kernel, grad_weight_boxes_kernel): racecheck does not model mbarrier ordering and reports hazards
# on them that the PTX memory model rules out (tools/racecheck_probe.cu,
# docs/perf/2026-11-27-racecheck-probe.md), so racecheck leaves them out and must be clean on the rest;
# memcheck, initcheck and synccheck cover them.
MBARRIER_KERNELS = ("pipelined", "boxes")  # (substrings of exactly those kernels' names)


def run_tool(tool: str, timeout: float, shapes: str) -> tuple:
    exclude = [arg for name in MBARRIER_KERNELS for arg in ("--kernel-name-exclude", f"kns={name}")] if tool == "racecheck" else []
    command = ["compute-sanitizer", "--tool", tool, *exclude, "--error-exitcode", "3", "--print-limit", "20",
               sys.executable, __file__, "--inner"] + (["--shapes", shapes] if shapes else [])
    start = time.time()
    # its own process group, so that a timeout also stops the workload the sanitizer started
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return False, -1, time.time() - start
    summary = re.findall(r"ERROR SUMMARY: (\d+) error", output) or re.findall(r"RACECHECK SUMMARY: (\d+) hazard", output)
    errors = int(summary[-1]) if summary else -1
    ok = process.returncode == 0 and errors == 0 and "runs ok" in output
    if not ok:
        print(output[-6000:])
    return ok, errors, time.time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", choices=TOOLS, action="append", help="run only these (default: all)")
    parser.add_argument("--inner", action="store_true", help="run the workload without a sanitizer")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per tool")
    parser.add_argument("--shapes", help="indices of the workload's shapes to run (default: all)")
    args = parser.parse_args(argv)
    if args.inner:
        exercise([int(index) for index in args.shapes.split(",")] if args.shapes else None)
        return 0
    rows = []
    for tool in args.tool or TOOLS:
        ok, errors, seconds = run_tool(tool, args.timeout, args.shapes)
        rows.append(f"| {tool} | {errors} | {'clean' if ok else 'FAILED'} | {seconds:.0f} s |")
    print("| tool | errors | verdict | time |\n|---|---|---|---|\n" + "\n".join(rows))
    return 0 if all("clean" in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
