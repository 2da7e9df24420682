"""Shared test vocabulary: devices, dtypes and their tolerances, the argument grid, random inputs
and the float64 reference (torch.nn.functional.conv_transpose1d on the CPU)."""
import collections
import gc
import os
from typing import Optional

# CONVT_TEST_GPUS=n under pytest-xdist spreads the workers over n GPUs: worker i sees them rotated by i
# (its cuda:0 is GPU i mod n), so every card runs tests and each worker still sees all n for the
# two-GPU tests. Set before torch initialises CUDA, which reads CUDA_VISIBLE_DEVICES once.
_spread_gpus = int(os.environ.get("CONVT_TEST_GPUS") or 0)
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _spread_gpus > 1 and _xdist_worker.startswith("gw") and "CUDA_VISIBLE_DEVICES" not in os.environ:
    _first = int(_xdist_worker[2:]) % _spread_gpus
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str((_first + i) % _spread_gpus) for i in range(_spread_gpus))

import pytest
import torch
import torch.nn.functional as F

import torch_convt_op  # noqa: F401  (loads torch.ops.convt)

# Under pytest-xdist the workers share the cores: torch's default of one thread per core in each worker
# oversubscribes them (the CPU float64 references of big shapes crawl).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
from torch_convt_op import tolerances
from torch_convt_op.planner import explain
from torch_convt_op.shapes import Case  # one problem: sizes, arguments, input layout (shared with bench.py)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def tf32_enabled() -> bool:
    return torch.backends.cudnn.allow_tf32


def tolerance(dtype: torch.dtype, device: str, reduction: int) -> float:
    """The largest max |ours - reference| / scale (relative_error) of a correct result in dtype on device,
    each element a sum of at most `reduction` products (torch_convt_op/tolerances.py: the one table, which
    bench.py's --check uses too); TF32 where float32 on CUDA may use it."""
    tf32 = dtype == torch.float32 and device.startswith("cuda") and tf32_enabled()
    return tolerances.tolerance(dtype, reduction, tf32)


# Every argument and corner the op must get right.
CASES = [
    Case(2, 4, 6, 3, 9),                                          # plain
    Case(2, 8, 4, 5, 17, stride=2, padding=1),                    # strided
    Case(2, 6, 6, 4, 11, stride=2, padding=1, output_padding=1),  # output_padding
    Case(2, 4, 5, 3, 10, stride=5),                               # stride > kernel (gaps)
    Case(2, 4, 4, 3, 8, stride=2, dilation=3, output_padding=2),  # dilation > 1 with stride > 1
    Case(2, 4, 4, 3, 8, stride=3, dilation=2, padding=4),         # padding > stride
    Case(1, 6, 9, 4, 13, stride=4, groups=3),                     # groups
    Case(2, 8, 4, 3, 12, stride=2, padding=2, output_padding=1, groups=4),  # C_out/groups = 1
    Case(2, 8, 8, 7, 20, padding=3, groups=8),                    # depthwise
    Case(2, 5, 3, 1, 7),                                          # K = 1
    Case(2, 5, 3, 1, 7, stride=3, output_padding=2),              # K = 1, strided
    Case(3, 4, 3, 5, 1, stride=2),                                # L_in = 1
    Case(3, 4, 3, 5, 1, stride=1, padding=2),                     # L_in = 1, padded
    Case(0, 4, 6, 3, 9),                                          # N = 0
    Case(1, 4, 6, 3, 9, batched=False),                           # unbatched
    Case(2, 4, 6, 3, 9, bias=False),                              # no bias
    Case(2, 16, 12, 16, 21, stride=8, padding=4),                 # HiFi-GAN style upsampler
    Case(2, 12, 8, 10, 15, stride=5),                             # EnCodec style upsampler
    Case(2, 16, 16, 5, 19, stride=2, padding=2, output_padding=1, groups=4, layout="channels_last"),
    Case(2, 32, 24, 3, 33, stride=2, padding=1, dilation=2, layout="channels_last"),  # GEMM path, strided view
    # shapes for the CUDA tensor-core path (>= 8 channels per group): several input-channel chunks and
    # output-channel tiles, lengths that end mid-tile, every phase count
    Case(2, 80, 72, 3, 300, padding=1),
    Case(1, 24, 40, 7, 129, stride=3, padding=2, dilation=2, output_padding=1),
    Case(2, 64, 32, 4, 257, stride=2, padding=1, groups=2),
    Case(1, 16, 16, 16, 37, stride=8, padding=4, layout="channels_last"),
    Case(1, 16, 24, 10, 41, stride=5, output_padding=3, bias=False, batched=False),
    Case(1, 64, 16, 12, 50, stride=4, padding=2),  # one chunk, weight staged per phase
    Case(2, 16, 24, 2, 70, stride=6, dilation=2, output_padding=5),  # phases without taps, staged output
    Case(2, 16, 16, 3, 40, stride=11, padding=1),  # phases without taps, direct stores
    Case(1, 48, 40, 16, 30, stride=8, padding=4),  # HiFi-GAN-like, 64-row tiles: the staged output does not fit, direct stores
    Case(1, 160, 96, 16, 40, stride=8, padding=4),  # > 64 rows per group, a streamed 16-tap weight, a part-empty row tile
    # lengths that are multiples of 4 (16-byte copies of x and grad_output rows), odd largest shifts
    Case(2, 40, 48, 3, 128, padding=1),
    Case(2, 24, 40, 6, 256, padding=1, dilation=2),
    # taps hundreds of positions apart: x windows wider than the GEMM kernels' shared memory
    Case(2, 16, 16, 4, 40, padding=5, dilation=300),
    # depthwise kernels: a channel multiplier with stride and dilation, rows longer than a segment
    Case(2, 6, 12, 5, 37, stride=3, padding=2, output_padding=1, dilation=2, groups=6),
    Case(1, 4, 4, 7, 2500, padding=3, groups=4),
    # argument values far past the tensor sizes: a stride past the depthwise kernels' 32-bit phase math,
    # padding and dilation that cancel out
    Case(2, 2, 4, 2, 1, stride=2**30 + 1, dilation=5, groups=2),
    Case(1, 16, 8, 3, 3, stride=2**12, padding=2**12, output_padding=1, dilation=2**11),
]


# ---- tile edges -------------------------------------------------------------------------------------
# Problems whose rows span several tiles of each kernel, so that every tile edge and the last,
# part-empty tile are computed (tests/test_tiles.py runs them on every device).
#
# The CPU's BLAS taps form (csrc/cpu/conv_transpose1d_cpu.cpp: float64 here, and float32 on CPUs
# without AVX2, C_in/groups x C_out/groups > 64) cuts each phase of y, and grad_input, into column tiles
# of clamp(32768 / max(C_in/groups, C_out/groups), 128, 1024) rounded down to 16 positions, and sums
# grad_weight over chunks of 512 positions. Each case here has several of those tiles (counts in the
# comments: tiles of y's phases / of grad_input; grad_weight chunks of the longest tap), a last tile
# part-empty, small enough for a 2-core CI. The AVX2 forms (float32 and the 16-bit types) cut the same
# rows into tiles of 256 positions (192 in the streamed forward), several in every case here, and sum
# grad_weight over chunks of 1024 positions (dot products: the cases of 1025 positions and more) or 512
# (the GEMM form).
CPU_TILE_CASES = [
    Case(2, 80, 72, 3, 1300, padding=1),                 # 400 wide: 4 / 4, the last 100 wide; 3 chunks
    Case(2, 12, 16, 4, 2048, stride=2, padding=1, output_padding=1),  # 1024: phase 0 3 (the last 1 wide),
                                                                      # phase 1 2 / 2; 4 chunks
    Case(1, 24, 40, 5, 2500, padding=4, dilation=3),     # 816: taps 3 apart across the edges, 4 / 4; 5 chunks
    Case(2, 96, 64, 6, 900, stride=3, padding=2, output_padding=1, groups=2),  # 672 a group: 2 / 2; 2 chunks
    Case(2, 16, 24, 2, 1500, stride=3, dilation=3),      # 1024: phases 1 and 2 bias only (no tap), 2 / 2; 3 chunks
    Case(1, 256, 64, 4, 300, stride=2, padding=1),       # the narrowest, 128: 3 / 3, the last 44 wide; 1 chunk
    Case(1, 64, 48, 10, 700, stride=5),                  # 512: 2 / 2, two taps a phase; 2 chunks
    Case(2, 40, 48, 3, 1500, padding=1, layout="channels_last"),  # 672: 3 / 3 of a transposed input view; 3 chunks
    Case(1, 24, 16, 3, 2100, padding=1, bias=False, batched=False),  # 1024: 3 / 3, unbatched, no bias; 5 chunks
    Case(2, 16, 12, 3, 1025, padding=1),                 # 1024: 2 / 2; taps of 1024 and 1025 positions: 2 whole
                                                         # chunks, or a third of 1 position
    Case(2, 9, 8, 2, 513, stride=2),                     # 9 x 8 (the fewest channels on the GEMM path): 1 / 1;
                                                         # taps of 513 positions, 2 chunks
]

# The CUDA kernels' tiles (below). The CPU runs these too, with at most CPU_TILE_SCALE's batch elements
# and input positions (test_tiles.py's device_params): still 2 to 17 of its column tiles (all but a few
# of GRAD_WEIGHT_TILE_CASES) and 2 to 6 grad_weight chunks.
CPU_TILE_SCALE = {"n": 2, "l_in": 2600}

# Problems with enough tiles to fill an H100's 132 SMs with the 64-row warp tiles (plan_gemm gives
# problems with fewer tiles smaller ones): 64 x 256 tiles for 33-64 rows, and for more rows 128 x 128
# (3 taps a step) or 128 x 64 (strided upsampling); on an H100 or H200 every group of more than 64
# rows runs on 128 x 128 warpgroup tiles (wgmma) instead. In the forward and in grad_input (rows =
# C_in there). Strided upsampling with direct stores (no room to stage a tile's interleaved output)
# has blocks walk each tile's out_phases as parts of their own, several parts per block, with and
# without phases no tap reaches (bias only). Warpgroup tiles take rows that do not start 16-byte
# aligned in 16-byte chunks, each row's window at its own shift (the first column tile of a row
# element by element). On warpgroup tiles a strided problem with dilation 1 and K a multiple of
# stride merges its phases: the forward into rows (stride x C_out rows), grad_input, where stride
# divides 8, into channels (stride x C_out channels, grad_y rows staged whole): even and odd
# strides, padding below and above stride, groups, output_padding, part-empty tiles, rows not
# 16-byte aligned. Strict float32 (3xTF32) takes the pipelined tiles too, and mma.sync tiles elsewhere.
WIDE_TILE_CASES = [
    Case(8, 36, 50, 5, 4500, padding=2, dilation=2),  # 64 x 256, adjacent stores, part-empty m16 tiles
    Case(8, 48, 40, 4, 4500, stride=2, padding=1),    # 64 x 256, staged interleaved output
    Case(4, 96, 160, 3, 4200, padding=1),             # 128 x 128, a part-empty row tile
    Case(4, 96, 160, 3, 4202, padding=1),             # rows 8-byte (float) or 4-byte (16-bit) aligned: shifted windows
    Case(3, 160, 96, 4, 2001, padding=1),             # rows of an odd length: windows at odd shifts
    Case(4, 64, 160, 16, 2000, stride=8, padding=4),  # 128 x 64, 2048 parts, every phase reached; merged
    Case(3, 48, 160, 5, 1500, stride=8, padding=2),   # 128 x 64, 5 of 8 phases reached
    Case(3, 40, 96, 16, 1001, stride=8, padding=4),   # merged, rows of an odd length
    Case(3, 48, 40, 10, 3000, stride=5, padding=3, output_padding=2),  # merged, odd stride: 200 rows
    Case(5, 40, 48, 4, 4000, stride=2, padding=1),    # merged, pairs at odd positions: 96 rows
    Case(2, 64, 96, 6, 3000, stride=3, padding=4, groups=2),  # merged, padding above stride, two groups
    Case(12, 96, 40, 16, 1500, stride=8, padding=4),  # merged forward (320 rows) and grad_input (320 channels)
    Case(8, 80, 36, 10, 2500, stride=5, padding=7, output_padding=3),  # merged forward; grad_input by phase
    Case(4, 160, 64, 4, 3000, stride=2, padding=1, groups=2),  # merged grad_input, odd padding, two groups
    # The pipelined warpgroup kernel (enough tiles of 256 or 128 columns to fill the SMs): a last chunk
    # of channels part-empty (zero rows), part-empty row tiles, rows of an odd length (windows from
    # their 16-byte boundaries, the row ends element by element); merged rows and channels
    Case(2, 136, 200, 3, 20001, padding=1),
    Case(12, 72, 136, 16, 3001, stride=8, padding=4),
    # rows of no 16-byte multiple by TMA boxes of their channel phases (map_row_phases), two groups on
    # 64 x 256 tiles, the first and last column tiles (reading past a row's ends) row by row: 4 phases
    # in float (forward and grad_input), 2 in 16-bit (forward; grad_input 2 in float)
    Case(4, 128, 128, 3, 3003, padding=2, groups=2),
    Case(4, 128, 128, 3, 3004, padding=2, groups=2),
    # 16-bit rows of no 16-byte multiple in a wide layer: the forward over aligned copies of x, 5
    # batch elements a chunk (the last chunk one), TMA boxes on each (float: row by row on x)
    Case(16, 1024, 512, 3, 1300, stride=2),
    # float rows of no 16-byte multiple in a wide layer: TF32 over copies of x, channels-last (C_in a
    # multiple of 4: position rows) or aligned (TMA boxes); strict float32 over aligned copies (3xTF32
    # splits its A in registers: boxes); 16-bit over copies as above
    Case(4, 1024, 512, 4, 189, stride=8),
    Case(3, 1022, 512, 3, 402, stride=5),
    # ... a zero-tap plan's (K = 7 merged at stride 4: 2 taps a phase, one of them zero) over copies,
    # its exact plan gated over each chunk's copy (TF32 and 16-bit)
    Case(3, 1024, 512, 7, 301, stride=4, padding=1),
    # 16-bit tap boxes (a TMA box a tap and 64-column subtile, wgmma's A by descriptor): K = 1 with a
    # part-empty last chunk (100 channels) on 64 x 256 tiles, forward and grad_input; two groups;
    # K <= stride (the merged short filter's one tap), padding and output_padding
    Case(4, 100, 37, 1, 8200),
    Case(2, 512, 512, 1, 9000, groups=2),
    Case(4, 96, 40, 3, 8192, stride=4, padding=1, output_padding=2),
    # 16-bit x with its channels contiguous (a transposed view): position rows, a TMA box of positions
    # x channels a consumer read as a K-major A from each tap's row; taps one position apart, merged rows
    Case(4, 96, 160, 3, 4200, padding=1, layout="channels_last"),
    Case(4, 64, 160, 16, 2000, stride=8, padding=4, layout="channels_last"),
    # rows padded to 16-byte multiples (layout "padded": a row stride above their length, NaN
    # between): one TMA box a consumer over rows x's map holds to their length
    Case(4, 128, 128, 3, 3003, padding=2, groups=2, layout="padded"),
    # its 64 x 256 tiles (33-64 rows): merged rows (48, forward) and channels (48, grad_input); rows of
    # an odd length; and the first case above (50 rows, grad_input 36)
    Case(8, 40, 24, 4, 4500, stride=2, padding=1),
    Case(6, 56, 40, 3, 6001, padding=1),
    # and one out phase of a strided forward (dilation a multiple of stride: no tap reaches the other
    # phases, bias only): out rows of an odd length (pair stores on every other row), phase 0 on
    # 128-row tiles, stride 3
    Case(4, 32, 64, 3, 9000, stride=2, padding=1, dilation=2),
    Case(4, 48, 96, 3, 6000, stride=2, padding=2, output_padding=1, dilation=2),
    Case(4, 40, 48, 3, 9000, stride=3, padding=1, dilation=3),
    # staged output with phases no tap reaches (a block's y_s all zeros again after each tile): 2 of
    # 4 phases, a row's last column tile part-empty, 188 tiles on 16 x 256 (strict float32; TF32
    # and 16-bit merge with zero taps, this the exact plan); 1 of 2 phases, 136 rows on 128-row
    # warpgroup tiles (the second 8 rows), 576 tiles
    Case(4, 48, 3, 5, 12001, stride=4, padding=4, dilation=2),
    Case(12, 48, 136, 3, 3001, stride=2, padding=2, dilation=2),
    # ... on warp tiles in place of warpgroup tiles' phase-strided stores (more than 64 rows, half the
    # phases or more tapless; 16-bit and TF32): 2 of 4 phases on 64 x 128, 3 of 6 on 32 x 128 (a 123-row
    # group's last tile 27 rows), K = 1 with 1 of 6 phases and output_padding 5
    Case(4, 60, 189, 7, 2000, stride=4, padding=4, dilation=2),
    Case(3, 80, 123, 4, 1500, stride=6, dilation=2),
    Case(4, 40, 147, 1, 3000, stride=6, output_padding=5),
    # ... fewer than half the phases tapless, few MACs an output: 3 of 5 phases reached (155 input
    # channels, 64 x 128), 4 of 5 (117, 32 x 128)
    Case(13, 155, 168, 3, 437, stride=5, padding=1, dilation=3),
    Case(3, 117, 126, 4, 2000, stride=5, padding=1, dilation=2),
    # ... in place of the warp tiles' (64 x 256 for 64 rows, 16-bit and TF32: 2 of 4 phases, 7 input
    # channels; 128 x 64 in 3xTF32: 2 of 8 phases, 2 input channels, 32 x 128 staged)
    Case(4, 7, 64, 9, 8000, stride=4, padding=6, dilation=2),
    Case(2, 2, 512, 8, 697, stride=8, padding=3, dilation=2),
    # ... store-bound at a stride above 2 (every phase reached, 12 MACs an output: 16-bit and TF32 on
    # 32 x 128, v109): 136 rows, the last row tile 8 rows
    Case(2, 4, 136, 11, 3000, stride=5, padding=8, dilation=2),
    # narrow outputs whose phases merge, on the 16 x 256 pipelined tiles: 16 merged rows (2 x 8) and
    # 15 (3 x 5, an odd stride); a phase's taps, 2 and 2, in one step; 20 merged rows (4 x 5) on the
    # 32 x 256 tiles; a narrow output of stride 1 (not merged), 5 taps a step on 16 x 256
    Case(4, 64, 2, 16, 9000, stride=8, padding=4),
    Case(4, 48, 3, 10, 9001, stride=5, padding=2, output_padding=1),
    Case(2, 64, 4, 10, 60000, stride=5, padding=3),
    Case(1, 64, 2, 5, 300000, padding=2),
    # grad_input of a dilated filter over grad_y deinterleaved (dilation 3, stride 5: every phase),
    # 10 shifts x 5 phases holding 16 taps, the rest zero: a narrow output
    Case(4, 96, 2, 16, 20001, stride=5, padding=2, dilation=3),
    # weights packing to more than 16 MB over few tiles: one launch (under a 16 MB workspace bound,
    # test_tiles' chunk ranges), stride 1 and 2
    Case(1, 512, 512, 17, 300, padding=8),
    Case(1, 512, 512, 17, 300, stride=2, padding=8),
    # long filters: runs of a phase pair's taps, one step each (64 taps of one phase; 100 taps at
    # stride 3, dilated; 40 taps at stride 10 merged into 4 merged taps) and channels 1-7
    Case(2, 96, 80, 64, 1500, padding=20),
    Case(2, 40, 36, 100, 600, stride=3, padding=7, output_padding=2, dilation=2),
    Case(3, 96, 48, 40, 700, stride=10, padding=15),
    Case(3, 5, 7, 7, 4000, stride=2, padding=3, output_padding=1),
    # the pipelined kernel's runs of taps, a step each (one run over one chunk): 20 taps at stride 1
    # (runs of 4 or 8), 64 merged taps (runs of 4 or 8, TMA boxes for float)
    Case(2, 96, 136, 20, 12001, padding=9),
    Case(3, 72, 96, 128, 4000, stride=2, padding=63),
    # strict float32's strided forwards phase by phase (K not a multiple of stride, every phase
    # reached): 4 and 3 taps at stride 2, out rows of an odd length, 128-row tiles; 3, 3, 3 and 2 taps
    # at stride 4 on 64 x 256 tiles; 41 taps at stride 4 in runs
    Case(8, 96, 80, 7, 6000, stride=2, padding=3),
    Case(8, 40, 56, 11, 5000, stride=4, padding=5),
    Case(8, 72, 96, 41, 4000, stride=4, padding=20),
    # and in TF32 and 16-bit at stride 2, the phase pairs: the first of these (tap 0 in phase 1: the
    # sets swapped; every other out row unaligned for pair stores) on 128 x 128 tiles, and 64 x 256 tiles
    Case(8, 48, 56, 5, 8001, stride=2, padding=2),
    # narrow outputs with K < stride merged into rows (rows of phases without a tap not stored, out
    # filled with the bias first): 3 co x 4 phases, 3 taps; one co x 5 phases, 2 taps from phase
    # origin 3, without bias
    Case(4, 72, 3, 3, 9001, stride=4, padding=1, output_padding=2),
    Case(3, 40, 1, 2, 16001, stride=5, padding=3, bias=False),
    # and wide outputs with K < stride, their rows the K phases with a tap (a column's positions
    # stride apart): 136 x 3 rows at stride 8 (two row tiles: 408 rows), 80 x 2 at stride 5
    Case(4, 160, 136, 3, 3001, stride=8, padding=1, output_padding=5),
    Case(8, 96, 80, 2, 3001, stride=5, output_padding=3),
    Case(4, 96, 72, 3, 3001, stride=4, padding=1, output_padding=1),  # wide: 288 rows, 72 without a tap
    # a phase pair over 3 chunks of 64 channels (16-bit; the last part-empty) at K = 7
    Case(8, 160, 72, 7, 3001, stride=2, padding=3, output_padding=1),
    # grad_input over grad_y deinterleaved (phases that merge, not in place): out rows of an odd length,
    # two groups, 128-row tiles; stride 6 (does not divide 8); 40 rows on warp tiles (grad_input's rows
    # are C_in); and the merged forward's case above (stride 5, 80 rows: grad_input 80 x 180 channels)
    Case(8, 160, 96, 6, 6001, stride=3, padding=2, groups=2),
    Case(12, 144, 48, 12, 3000, stride=6, padding=3, output_padding=1),
    Case(4, 40, 24, 4, 3001, stride=2, padding=1),
    # and K below stride (more than two row tiles): 3 taps at stride 4 (3 phases, one tap)
    Case(2, 200, 24, 3, 1500, stride=4, padding=1),
    # where a grad_y element feeds >= 1536 MACs (C_in/groups * K/stride) rather than in place: two
    # launches of row tiles; and a copy of 300 phases (one position a block of the copy kernel)
    Case(2, 1040, 24, 16, 1201, stride=8, padding=4, output_padding=3),
    Case(2, 40, 24, 300, 97, stride=300, padding=7),
    # and K above stride, not a multiple of it: zero taps (the exact per-phase plan gated off where
    # grad_y is finite): 3 x 2 (t, r), one zero, pipelined; 2 x 5, three zero, warp tiles
    Case(4, 400, 40, 5, 3001, stride=2, padding=2),
    Case(2, 300, 48, 7, 2001, stride=5, padding=1),
    # groups of a few input channels on the depthwise kernels: 2 x 1 a group at stride 4; 3 x 1
    # dilated; 4 x 4 at stride 3 with output padding (the forward on tensor cores); 3 x 3 without
    # bias (forward on tensor cores); 8 x 2 (forward on tensor cores); 4 x 2
    Case(3, 64, 32, 5, 4001, stride=4, groups=32),
    Case(2, 96, 32, 9, 3001, padding=8, dilation=2, groups=32),
    Case(2, 64, 64, 5, 2001, stride=3, padding=1, output_padding=2, groups=16),
    Case(2, 48, 48, 4, 3001, stride=2, padding=1, groups=16, bias=False),
    Case(2, 256, 64, 7, 3001, stride=3, padding=2, groups=32),
    Case(2, 192, 96, 4, 3001, stride=2, padding=1, groups=48),
    # depthwise grad_input of a few rows of many output channels: co blocks summed in order
    Case(1, 1, 1536, 5, 575, stride=5, padding=2, output_padding=3),
    Case(3, 1, 512, 8, 535, stride=4, padding=12, dilation=4),
    # narrow forwards with K above stride, not a multiple of it, merged into rows with zero taps (the
    # exact per-phase plan gated off where x is finite): 3 co x 4 phases, 2 taps; one co x 10, 2 taps
    Case(4, 48, 3, 5, 12001, stride=4, padding=2),
    Case(2, 40, 1, 16, 20001, stride=10, padding=6, output_padding=1),
    # narrow problems (fewer than 8 rows, few taps a step) on pipelined 64-row tiles: one output
    # channel, K = 1; three, 3 dilated taps (strict float32: warp tiles); grad_input of 3 input channels
    Case(2, 200, 1, 1, 20001),
    Case(2, 96, 3, 3, 30001, padding=2, dilation=2),
    Case(2, 3, 96, 3, 30001, padding=1),
    # strided forwards whose warp tiles give way to pipelined tiles with strided stores (TF32 and
    # 16-bit too; 128 MACs an output or more): 2 of 4 phases reached (out holds the bias first), 2 of 6 without bias (zero
    # first), every phase of 3 reached, and a long dilated filter in runs of 17 taps
    Case(4, 64, 48, 5, 6001, stride=4, padding=3, dilation=2),
    Case(3, 32, 40, 9, 8001, stride=6, padding=5, dilation=3, bias=False),
    Case(4, 64, 40, 7, 5000, stride=3, padding=2, dilation=2),
    Case(12, 64, 48, 33, 4000, stride=4, padding=16, dilation=2),
    # and a phase pair (16-bit) of 24 rows a group, out rows of an odd length, two groups
    Case(6, 48, 48, 5, 8001, stride=2, padding=2, output_padding=1, groups=2),
    # a pipelined plan on 80 tiles, fewer than the SMs (merged rows of a short filter; the two-buffer
    # kernels' many parts run slower)
    Case(1, 1024, 512, 4, 571, stride=8, output_padding=4),
    # the depthwise forward's blocks of output rows (one input channel, a wide channel multiplier,
    # short rows): 97 rows in blocks of 2, the last one row; two groups of 65 rows
    Case(6, 1, 97, 5, 300, stride=2, padding=3, dilation=2),
    Case(4, 2, 130, 4, 200, stride=3, groups=2),
]


# grad_weight's four tile kernels (16 x 32 warp tiles): 32 or 64 ci x 32 or 64 co by the channels per
# group, and on sm_90 its warpgroup tiles (the cases after their comment), every tile part-empty, with
# stride 1 (vector copies of grad_y: 16 bytes, 8 bytes where rows are 8-byte aligned only, 16-bit
# pairs) and stride 2 (element copies).
# grad_bias comes along where every phase has a tap: in the mma.sync tiles in TF32 where its slots fit
# (the blocks of a phase take the items in turns), in the warpgroup tiles from the A values of each
# phase's smallest shift (slice 0 adds the positions those skip: a phase whose smallest shift is
# above 0, output_padding; merged, each row (co, r) of its own phase); else from its own pass (a phase
# without taps; 16-bit mma.sync tiles). The cases up to the warpgroup tiles' (GRAD_WEIGHT_MMA_SYNC_CASES)
# take the mma.sync tiles with CONVT_GRAD_WEIGHT_PIPELINED=never (on sm_90 the strided ones would
# merge their phases on the pipelined tiles), and run the pipelined tiles of any channels too (=always).
GRAD_WEIGHT_MMA_SYNC_CASES = [
    Case(4, 24, 20, 3, 900, padding=1),                 # 32 ci x 32 co
    Case(3, 24, 40, 3, 902, padding=1),                 # rows of 902: float in 8-byte copies, 16-bit in pairs
    Case(3, 40, 24, 3, 1004, padding=1),                # rows of 1004: float in 16-byte, 16-bit in 8-byte copies
    Case(4, 40, 24, 4, 700, stride=2, padding=1),       # 64 ci x 32 co, strided
    Case(3, 20, 56, 5, 800, padding=3, dilation=2),     # 32 ci x 64 co
    Case(2, 80, 48, 3, 600, stride=2, groups=2),        # 64 ci x 32 co per group, two groups
    Case(2, 24, 40, 10, 400, stride=2, padding=3),      # 5 taps a phase: one 8-tap group (two 4-tap in 3xTF32)
    Case(2, 24, 40, 18, 400, stride=2, padding=5),      # 9 taps a phase: 8 + 1 (4 + 4 + 1 in 3xTF32)
    Case(2, 80, 40, 10, 400, stride=2, padding=3),      # two ci tiles (x two tap groups in 3xTF32) take turns
    Case(1, 80, 24, 10, 20, stride=2, padding=3),       # one item: fewer than the turns
    Case(3, 40, 24, 2, 500, stride=3, output_padding=2),  # a phase without taps
    Case(3, 24, 40, 5, 999, stride=3, padding=2),       # x rows of odd length: 16-bit element copies in batches
    # groups of a few channels: several groups a tile (packed_groups), the products across them not stored
    Case(2, 64, 64, 5, 700, stride=2, padding=2, groups=8),    # 8 ci x 8 co a group: four a tile, two tiles
    Case(3, 72, 36, 7, 500, padding=9, dilation=3, groups=9),  # 8 x 4: four a tile, the last tile one group
    Case(2, 96, 96, 3, 600, stride=3, output_padding=1, groups=6),  # 16 x 16: two a tile; three phases of a tap
]
GRAD_WEIGHT_TILE_CASES = GRAD_WEIGHT_MMA_SYNC_CASES + [
    # warpgroup tiles (sm_90; C_in and C_out per group above 32): 64 co x 64 ci, items of x positions
    Case(3, 40, 72, 3, 902, padding=1),                 # part-empty tiles; x in 8-byte copies (float) or pairs;
                                                        # gy in chunks from windows at every offset (16-bit: odd ones)
    Case(2, 48, 40, 3, 1000),                           # x in 16-byte copies; gy in chunks, 16-bit windows at even offsets
    Case(2, 72, 40, 4, 1001, stride=2, padding=1),      # x rows of odd length: element copies; gy de-interleaved
    Case(2, 96, 80, 5, 700, padding=2, dilation=3, groups=2),  # 5 taps a phase: 3 + 2 slots' groups, a window of span 12
    Case(2, 40, 72, 4, 777, padding=2),                 # 4 taps at consecutive shifts (16-bit: shared A words)
    Case(3, 48, 72, 3, 1001, padding=1),                # gy rows of odd length in chunks: 16-bit rows at alternating
                                                        # parities (no shared A words); x element copies in batches
    Case(2, 40, 40, 4, 998),                            # the same with 4 taps, x in pairs
    Case(2, 72, 40, 3, 500, stride=2, output_padding=1, dilation=3),  # phase 1's shifts start at 1
    Case(4, 64, 96, 3, 20000, padding=1),               # slices of several items
    # merged phases (dilation 1, stride dividing K): 64 div stride co of stride rows a tile
    Case(2, 40, 72, 10, 700, stride=2, padding=3),      # 5 merged taps: groups of 3 + 2
    Case(2, 72, 48, 12, 600, stride=4, padding=6, output_padding=3),  # 3 taps from shift -1, rows past phase origin 2
    Case(3, 48, 40, 10, 1200, stride=5),                # stride 5: 12 co (60 rows) a tile
    Case(2, 40, 36, 16, 333, stride=8, padding=5),      # stride 8, rows of an odd length, tiles of 8 co, 4 in the last
    # pipelined warpgroup tiles (C_in per group above 64, x rows of whole 16 bytes: a tensor map):
    # 64 co x 128 ci, two consumer warpgroups of 64 ci each
    Case(3, 136, 72, 3, 2000),                          # two ci tiles, the last 8 ci (one warpgroup empty); gy
                                                        # rows of 2002: windows at every offset; a part-empty last item
    Case(2, 100, 48, 4, 1000, padding=2),               # 4 taps at consecutive shifts; the second warpgroup 36 ci
    Case(2, 136, 48, 4, 2000, padding=1),               # gy rows of odd length (2001): 16-bit rows at both parities
    Case(2, 96, 40, 3, 1024, padding=1, layout="transposed"),  # x's batch stride below its channels' (N*L a channel)
    Case(2, 160, 80, 16, 1000, stride=8, padding=4, groups=2),  # merged, two groups of 80 ci, 8 co of 8 rows a tile
    Case(3, 72, 48, 12, 600, stride=4, padding=6, output_padding=3),  # merged, rows past phase origin 2
    Case(2, 72, 40, 3, 700, padding=1, dilation=140),   # float windows of 356: two pipelined stages do not fit,
                                                        # 64 co x 64 ci tiles do (16-bit: still pipelined)
    Case(2, 136, 72, 5, 2000, padding=2),               # 5 taps: groups of 3 + 2 (the second's last slot empty)
    Case(2, 768, 512, 9, 300, padding=4),               # 9 taps in 3 groups of 3: 144 tiles, 2 slices on 132 SMs
    # pipelined over copies (sm_90a, TF32 and 16-bit): x in aligned rows (merged, rows of 999); grad_y
    # deinterleaved (7 taps at stride 3: 3 phases of 3 taps, the last zero in phases 1 and 2; x rows of
    # 1001 aligned too; output_padding past the copy: grad_bias from row sums); 3 taps at stride 5 (3
    # phases, one tap); two groups of 80 ci, 40 co x 2 phases; x every other element of a longer row
    Case(2, 80, 48, 4, 999, stride=2, padding=1),
    Case(2, 80, 40, 7, 1001, stride=3, padding=2, output_padding=2),
    Case(2, 96, 40, 3, 700, stride=5, padding=1),
    Case(2, 160, 80, 5, 600, stride=2, padding=2, output_padding=1, groups=2),
    Case(2, 96, 48, 3, 800, stride=2, padding=1, layout="strided"),
    # narrow outputs over grad_y deinterleaved on the mma.sync tiles (less MMA work: the phases take
    # the tile's padded channels; any card, any math): one co of 16 taps at stride 8 (8 phases of 2
    # taps: 8 channels of 2 taps); 3 taps at stride 4 (K < stride: 3 phases, one tap) with output_padding
    # past the copy; two groups of 3 co, 6 taps at stride 3
    Case(2, 40, 1, 16, 900, stride=8, padding=4),
    Case(3, 24, 2, 3, 1001, stride=4, padding=1, output_padding=3),
    Case(2, 48, 6, 6, 700, stride=3, padding=1, groups=2),
    # warpgroup tiles for narrow outputs where C_in per group exceeds 64: one co,
    # 16 taps at stride 8 merged (8 of a tile's 64 rows); 3 co at stride 1, pipelined, 3 co x 4
    # phases deinterleaved
    Case(2, 136, 1, 16, 1201, stride=8, padding=4),
    Case(2, 136, 3, 5, 2000, padding=2),
    Case(2, 96, 3, 3, 1500, stride=4, padding=1),
    # narrow outputs over grad_y unrolled by taps (one tap of C_out * K channels; any card, any math):
    # one co of 12 taps at stride 5, dilation 2 (taps past both ends of grad_y); 4 co of 9 taps at
    # stride 1, dilation 3, x rows of odd length (aligned for the pipelined tiles, sm_90a); two groups
    # of 2 co x 10 taps, output_padding
    Case(2, 136, 1, 12, 3001, stride=5, padding=9, dilation=2),
    Case(1, 96, 4, 9, 20001, padding=12, dilation=3),
    Case(2, 144, 4, 10, 1500, stride=3, padding=4, output_padding=2, dilation=2, groups=2),
]

# grad_weight of dilated filters over grad_y deinterleaved (forced in their test: CONVT_GRAD_WEIGHT_DILATED_COPY=always):
# rows r at r * dilation - padding, ceil(K / stride) taps at the dilation: 8 taps at stride 3,
# dilation 2 (3 rows of 3, 3, 2 taps; x rows of 1001 aligned); dilation 2 at stride 4 (rows 2 apart:
# phases 0 and 2 twice); 10 taps at stride 5, dilation 3, output_padding
DILATED_GRAD_WEIGHT_COPY_CASES = [
    Case(2, 80, 40, 8, 1001, stride=3, padding=5, dilation=2),
    Case(2, 96, 48, 6, 700, stride=4, padding=6, dilation=2),
    Case(1, 72, 40, 10, 500, stride=5, padding=3, output_padding=1, dilation=3),
]

# grad_weight over grad_y unrolled by taps (forced: CONVT_GRAD_WEIGHT_UNROLLED=always), the copy's
# windows (unroll_window: 512 positions, 24 KB staged): rows of 1,504 in three whole windows and one of
# 480; taps 3000 apart, windows of 2 taps (float32; 4 in 16-bit) and a last short tap group, most
# windows past an end of grad_y; a stride of 700, windows of 8 positions (float32; 16 in 16-bit)
UNROLLED_GRAD_Y_CASES = [
    Case(2, 64, 4, 9, 1500, stride=3, padding=4),
    Case(1, 32, 3, 5, 300, padding=100, dilation=3000),
    Case(2, 24, 2, 3, 100, stride=700, padding=5, output_padding=3),
]

# grad_weight over the copies that give 16-bit tiles vector copies where they would stage x or grad_y
# one element at a time (CONVT_GRAD_WEIGHT_ELEMENT_COPIES=always; the box tiles and the pipelined tiles
# of any channels off): x in aligned rows, grad_y deinterleaved (at stride 1 in aligned rows, rows at
# -padding; dilated: taps at the dilation)
ELEMENT_COPY_CASES = [
    Case(2, 24, 20, 5, 901, padding=2),                 # stride 1, x and grad_y rows of odd length
    Case(2, 20, 40, 3, 777, padding=2, dilation=2),     # stride 1, dilated: the copy's taps 2 apart
    Case(3, 24, 40, 5, 999, stride=3, padding=2),       # x rows of odd length, grad_y at stride 3
    Case(4, 40, 24, 4, 700, stride=2, padding=1),       # grad_y at stride 2 only
    Case(2, 48, 40, 3, 1001, padding=1),                # warpgroup tiles (64 x 64)
    Case(2, 64, 64, 5, 701, stride=2, padding=2, groups=8),  # 8 x 8 groups, four a tile
    Case(2, 24, 40, 4, 303, stride=2, padding=1, output_padding=1, layout="strided"),  # x every other element
]
# grad_input over grad_y copied channels-last (CONVT_GRAD_INPUT_COPIES=always; DataPlan::channels_last_grad_y):
# each plans it on an H100 or H200 in 16-bit and TF32 (pipelined tiles: enough of them to half-fill the SMs)
GRAD_INPUT_COPY_CASES = [
    Case(8, 96, 40, 3, 1200, padding=1),                      # stride 1: grad_y channels-last, rows of 40 channels
    Case(12, 96, 40, 5, 1000, padding=4, dilation=2),         # stride 1, dilated
    Case(12, 96, 40, 4, 700, stride=2, padding=1),            # two phases of two taps
    Case(24, 100, 36, 7, 600, stride=4, padding=2, output_padding=1),  # zero taps (7 of 8), exact plan behind the flag
    Case(12, 72, 33, 3, 900, stride=5, padding=1),            # K below stride: 3 of 5 phases, rows of 99 channels in 104
    Case(12, 96, 130, 6, 900, stride=3, padding=2),           # three 64-co tiles of the copy, the last 2 co
    Case(12, 96, 20, 16, 700, stride=8, padding=4),           # 8 phases of 2 taps
]
# The box tiles (sm_90a, 16-bit and TF32; C_in per group above 64, C_out per group above 32): 128 ci x
# up to 256 (tap slot, co) columns, x's and each tap's grad_y rows by TMA boxes (16-bit: channels-last,
# by phase at stride > 1; TF32: grad_y's own rows or unrolled by taps); on CUDA the cases above run
# with them turned off (CONVT_GRAD_WEIGHT_BOXES=never) so that the other kernels keep their cover.
BOX_TILE_CASES = [
    Case(3, 136, 72, 3, 2000),                          # two ci tiles, the last 8 ci (one warpgroup empty); a
                                                        # part-empty last item
    Case(2, 100, 48, 4, 1000, padding=2),               # the second warpgroup 36 ci
    Case(2, 96, 40, 3, 1024, padding=1, layout="transposed"),  # x's batch stride below its channels'
    Case(2, 160, 80, 5, 600, padding=2, groups=2),      # two groups of 80 ci x 40 co
    Case(2, 80, 70, 7, 1001, padding=5),                # grad_y's copy in rows of 72 channels; x rows of 1001 aligned
    Case(2, 768, 512, 9, 300, padding=4),               # 9 taps in tap groups, several co tiles
    Case(2, 144, 48, 5, 700, padding=7, dilation=3),    # dilated: shifts from -7 to 5
    Case(2, 72, 40, 3, 5, padding=12, dilation=10),     # taps whose x positions all lie outside grad_y
    Case(2, 72, 40, 32, 400, padding=10),               # 32 taps (one launch's kBoxWindowTaps) of 40 co
    Case(2, 136, 72, 40, 300, stride=8, padding=16, dilation=3),  # 40 taps: a second window of tap groups
    Case(1, 96, 80, 70, 200, padding=30),               # 70 taps: three windows, the last of 6 taps
    Case(3, 200, 264, 1, 700),                          # one tap, 256 co a tile and 8 in the next
    Case(4, 128, 128, 3, 20000, padding=1),             # slices of many items
    Case(2, 136, 72, 4, 700, stride=2, padding=1),      # stride 2: two taps a phase
    Case(2, 100, 80, 7, 501, stride=3, padding=2, output_padding=1),  # phases of unequal length
    Case(2, 128, 96, 16, 300, stride=8, padding=4),     # 8 phases of 2 taps, two co tiles
    Case(2, 72, 40, 6, 50, stride=5, padding=9, dilation=2),  # dilated at stride: taps past both ends
    Case(2, 80, 40, 3, 1, stride=5, output_padding=1),  # L_out 4 < stride: a phase without positions
    Case(2, 160, 96, 4, 333, stride=2, padding=1, groups=2),  # two groups at stride 2
    Case(2, 96, 40, 4, 1024, stride=4, layout="transposed"),  # strided, x's batch stride below its channels'
    Case(2, 96, 72, 3, 800, padding=4, dilation=4),     # TF32: shifts -4, 0, 4 (16 bytes): grad_y's own rows
    Case(3, 136, 80, 1, 701),                           # TF32: rows of 701 floats (no 16-byte multiple): unrolled
    Case(2, 96, 80, 1, 500, stride=3, output_padding=2),  # TF32: K = 1 at stride 3, unrolled
]

# Groups of 8-32 rows (C_out/groups forward, C_in/groups grad_input) on the pipelined kernel's 16 and
# 32-row tiles (CONVT_NARROW_ROWS_PIPELINED=always): on an H100 or H200 each moves the forward or
# grad_input of at least one math mode off the warp tiles (test_planner checks which).
NARROW_ROW_CASES = [
    Case(1, 32, 16, 64, 40000, padding=31),             # 64 taps: 16 rows forward, 32 grad_input
    Case(2, 16, 16, 124, 20000, padding=61),            # 124 taps on 16 rows both ways
    Case(2, 64, 32, 128, 20000),                        # 128 taps (kMaxGemmTaps), 32 rows forward
    Case(2, 32, 8, 40, 40000, stride=2, padding=19),    # 8 rows forward, strided; grad_y deinterleaved
    Case(2, 8, 256, 16, 20000, padding=7),              # 8 rows grad_input
    Case(2, 96, 48, 3, 20000, padding=3, dilation=3, groups=3),  # three groups of 16 rows, dilated
    Case(2, 64, 64, 7, 20000, padding=3, groups=4),     # four groups of 16 rows
    Case(4, 20, 12, 9, 9001, stride=3, padding=4, output_padding=2, dilation=2),  # 12 rows, strided, dilated
    Case(2, 24, 16, 95, 12247, stride=8, padding=32, output_padding=5, dilation=3),  # 95 dilated taps at stride 8
]

# The reduction split (GemmPlan::splits: warp tiles whose parts leave SMs idle over a long reduction,
# each out phase's steps over several parts, fp32 slices added in order with the bias): the model
# takes it on the first three on an H100 or H200; test_tiles forces it (CONVT_GEMM_SPLITS=always)
# on all of them.
SPLIT_TILE_CASES = [
    Case(3, 8, 1536, 16, 90, stride=8, padding=4),      # grad_input: 3 tiles of 96 steps, 1536 channels
    Case(2, 1024, 24, 5, 60, padding=2),                # forward: 2 tiles of 24 rows, 32 chunks, the bias
    Case(2, 768, 20, 4, 50, stride=2, padding=1),       # forward: two out phases, strided slice stores
    Case(3, 4, 600, 9, 80, stride=4, padding=3),        # grad_input deinterleaved with zero taps
    Case(2, 12, 600, 6, 64, stride=3, groups=2),        # grad_input: two groups
    Case(1, 3, 520, 7, 200, padding=3, dilation=2),     # grad_input: dilated, runs of uneven length
]

# The pipelined kernel's reduction split (one pair at out_step 1: a part a run of chunks into an fp32
# slice): wide channels on short rows, whose 128 x 128 tiles leave most SMs idle; the model splits them
# on an H100 or H200 in every math: a stride-1 forward and grad_input (16-bit over channels-last
# copies), the same dilated (float: rows staged one by one), grad_input deinterleaved at stride 4 and
# at stride 3 (16-bit over grad_y copied channels-last).
PIPELINED_SPLIT_CASES = [
    Case(1, 640, 1024, 3, 100, padding=1),
    Case(2, 640, 768, 5, 90, padding=2, dilation=3),
    Case(2, 256, 512, 8, 40, stride=4, padding=2),
    Case(3, 160, 1024, 6, 30, stride=3, padding=1),
]

# Weights that pack to more than 16 MB on few warp tiles, under a 16 MB workspace bound (the tests' fixture
# workspace_16mb): launches of chunk ranges over every row tile, a 16-bit out's sums accumulated in one
# fp32 slice (GemmPlan::float_sums), a float out's added to it.
CHUNK_RANGE_CASES = [
    Case(1, 1024, 640, 32, 90, padding=16),             # 42 MB in bf16: 3 launches of 12 chunks, 10 tiles
    Case(2, 640, 1024, 24, 60, stride=2, padding=8),    # two out phases; grad_input deinterleaved, 2 launches
]

# Float outs in chunk ranges, on the pipelined tiles in most (every later launch's sums added to out's):
# one out phase at stride 1, three unmerged out phases (strict fp32's pairs form), rows merged over 8
# phases, and grad_input with zero taps (TF32's forward merged with zero taps).
FLOAT_CHUNK_RANGE_CASES = [
    Case(2, 256, 768, 24, 1024, padding=11),
    Case(2, 256, 768, 32, 1024, stride=3, padding=14),
    Case(1, 256, 384, 48, 256, stride=8, padding=20),
    Case(2, 768, 128, 48, 1024, stride=5, padding=21),
]

# Chunk ranges of plans with zero taps (the exact plan gated behind them): grad_input deinterleaved with
# zero taps in every CUDA mode (16-bit into an fp32 slice), the TF32 forward merged with zero taps
ZERO_TAP_CHUNK_RANGE_CASES = [
    Case(1, 384, 384, 69, 300, stride=10, padding=27, output_padding=6),
]


# Input layouts (see relaid): a transposed (N, L, C) view, every other position of a longer row, rows
# not 16-byte aligned, rows padded to a 16-byte multiple.
LAYOUTS = ["contiguous", "channels_last", "strided", "offset", "padded"]


def case_id(case: Case) -> str:
    return str(case)


def relaid(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout (a leaf without grad): "contiguous"; "channels_last"
    (the last two dims swapped in memory); "transposed" (the first two swapped); "last_first" (the
    last dim outermost); "strided" (every other element of rows whose gaps hold NaN); "offset" (rows
    starting one element into their storage, so not 16-byte aligned); "padded" (rows at a stride of
    the next multiple of 8 elements above their length, 16 bytes in 16-bit and 32 in float, NaN
    between: TMA boxes over rows longer than x's)."""
    t = t.detach()
    if layout == "contiguous":
        return t.contiguous()
    if layout == "channels_last":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "transposed":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "last_first":
        return t.movedim(-1, 0).contiguous().movedim(0, -1)
    length = t.shape[-1]
    row = {"strided": 2 * length, "offset": length + 1, "padded": (length // 8 + 1) * 8}[layout]
    spread = torch.full((*t.shape[:-1], row), float("nan"), dtype=t.dtype, device=t.device)
    if layout == "strided":
        spread[..., ::2] = t
        return spread[..., ::2]
    if layout == "padded":
        spread[..., :length] = t
        return spread[..., :length]
    spread[..., 1:] = t
    return spread[..., 1:]


def cuda_plans(case: Case, dtype: torch.dtype, tf32: bool = False) -> dict:
    """The planner's choice for a case on this GPU (torch_convt_op.planner.explain)."""
    return explain(*case.sizes, dtype=dtype, tf32=tf32, device="cuda")


def make_inputs(case: Case, dtype: torch.dtype, device: str, requires_grad: bool = False, generator=None):
    """Fresh random input (in case.layout), weight and bias (None when case.bias is False)."""
    def randn(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=generator).to(device=device, dtype=dtype)

    x = relaid(randn(case.n, case.c_in, case.l_in), case.layout)
    if not case.batched:
        x = x[0]
    w = randn(case.c_in, case.c_out // case.groups, case.k)
    b = randn(case.c_out) if case.bias else None
    for t in (x, w, b):
        if t is not None:
            t.requires_grad_(requires_grad)
    return x, w, b


def reference(x, w, b, case: Case):
    """torch.nn.functional.conv_transpose1d in float64 on the CPU, with autograd if the inputs need it."""
    def up(t):
        if t is None:
            return None
        return t.detach().to("cpu", torch.float64).requires_grad_(t.requires_grad)

    x64, w64, b64 = up(x), up(w), up(b)
    y = F.conv_transpose1d(x64, w64, b64, case.stride, case.padding, case.output_padding, case.groups, case.dilation)
    return y, (x64, w64, b64)


def ours(x, w, b, case: Case):
    return torch_convt_op.conv_transpose1d(x, w, b, case.stride, case.padding, case.output_padding, case.groups,
                                           case.dilation)


def relative_error(actual: torch.Tensor, expected: torch.Tensor, norms: Optional[torch.Tensor] = None) -> float:
    """The largest error over the largest expected value, or over the largest of `norms` (see
    product_norms) where that is larger."""
    actual = actual.detach().to("cpu", torch.float64)
    expected = expected.detach().to("cpu", torch.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.numel() == 0:
        return 0.0
    assert torch.isfinite(actual).all(), "non-finite values (an element never written?)"
    scale = expected.abs().max()
    if norms is not None:
        scale = torch.maximum(scale, norms.max())
    return ((actual - expected).abs().max() / scale.clamp_min(1e-30)).item()


def assert_close(actual, expected, dtype, device, what="output", norms=None, *, case: Optional[Case] = None,
                 reduction: Optional[int] = None):
    """actual within tolerance of the float64 `expected`: `what` ("output" (or "output[...]"), "grad_input",
    "grad_weight" or "grad_bias") of the problem `case`, or a result summing at most `reduction` products."""
    if reduction is None:
        if case is None:
            raise TypeError("assert_close needs the case or the reduction length")
        reduction = tolerances.reduction_length(case, what)
    err = relative_error(actual, expected, norms)
    tol = tolerance(dtype, device, reduction)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:.3g} (reduction length {reduction})"


def assert_gradients_close(y, expected, inputs, inputs64, case: Case, dtype, device):
    """The gradients of our y (from inputs x, w, b) and of the float64 reference `expected` (from
    inputs64) for one random grad_output (the same values, exact in dtype, for both) agree; unwritten
    gradient elements show as NaN."""
    grad_y = torch.randn_like(expected).to(dtype).to(torch.float64)
    poison_allocator(device)
    grads = torch.autograd.grad(y, [t for t in inputs if t is not None], grad_y.to(device, dtype))
    expected_grads = torch.autograd.grad(expected, [t for t in inputs64 if t is not None], grad_y)
    names = ("grad_input", "grad_weight", "grad_bias")
    for name, grad, expected_grad, norms in zip(names, grads, expected_grads, product_norms(*inputs[:2], case, grad_y)):
        assert grad.dtype == dtype
        assert_close(grad, expected_grad, dtype, device, name, norms, case=case)


def assert_backward_matches_reference(case: Case, dtype, device, check_forward: bool = False):
    """Fresh inputs (requires_grad) and a poisoned allocator; our gradients (and, given
    check_forward, our y) against the float64 reference. Returns (x, w, b) for further checks."""
    x, w, b = make_inputs(case, dtype, device, requires_grad=True)
    poison_allocator(device)
    y = ours(x, w, b, case)
    expected, inputs64 = reference(x, w, b, case)
    if check_forward:
        assert_close(y, expected, dtype, device, norms=product_norms(x, w, case), case=case)
    assert_gradients_close(y, expected, (x, w, b), inputs64, case, dtype, device)
    return x, w, b


def assert_gradients_deterministic(x, w, b, case: Case, runs: int = 3):
    """The same grad_output gives bit-identical gradients of x, w and b, run after run."""
    wanted = [t for t in (x, w, b) if t is not None]
    grad_y = torch.randn_like(ours(x, w, b, case))
    results = [torch.autograd.grad(ours(x, w, b, case), wanted, grad_y) for _ in range(runs)]
    for result in results[1:]:
        assert all(torch.equal(first, again) for first, again in zip(results[0], result))


def product_norms(x, w, case: Case, grad_y=None):
    """Per element of y (and, given grad_y, of grad_input, grad_weight and grad_bias): the
    root-sum-square of the products that are summed into it, in float64. A rounded sum is off by
    rounding errors of that size even where the products cancel to a result near 0, where an error
    relative to the result alone would fail a correct sum (a single-channel grad_bias of 16 terms)."""
    def squared(t):
        return t.detach().to("cpu", torch.float64).square().requires_grad_()

    x2, w2 = squared(x), squared(w)
    y2 = F.conv_transpose1d(x2, w2, None, case.stride, case.padding, case.output_padding, case.groups, case.dilation)
    if grad_y is None:
        return y2.detach().sqrt()
    gy2 = grad_y.detach().to("cpu", torch.float64).square()
    grad_x2, grad_w2 = torch.autograd.grad(y2, (x2, w2), gy2)
    grad_b2 = gy2.sum(dim=[d for d in range(gy2.dim()) if d != gy2.dim() - 2])  # over batch and length
    return [t.sqrt() for t in (grad_x2, grad_w2, grad_b2)]


def poison_allocator(device: str, nbytes: int = 1 << 24):
    """Leave NaNs in memory the allocator hands out next, so an unwritten output element shows."""
    junk = torch.full((nbytes // 4,), float("nan"), dtype=torch.float32, device=device)
    del junk
    # `del` frees the block (nothing else refers to it). A full collection, which frees other garbage too, takes
    # ~0.1 s once the suite has collected its tests: most of a small CPU test's time, so on GPUs only.
    if device != "cpu":
        gc.collect()


@pytest.fixture
def tf32(request):
    """torch.backends.cudnn.allow_tf32 set to the parameter for the test, restored after."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = request.param
    yield request.param
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def layers_as_given(monkeypatch):
    """The plans of each layer as given (CONVT_SHARED_STEP=never): a layer whose stride and dilation share
    a factor runs on CUDA as the reduced layer (tests/test_shared_step.py), where tests that name a
    layer's own kernels would see the reduced layer's."""
    monkeypatch.setenv("CONVT_SHARED_STEP", "never")


@pytest.fixture
def workspace_16mb(monkeypatch):
    """The forward's and grad_input's workspace bound at 16 MB (CONVT_MAX_WORKSPACE_MB): a weight that
    packs to more takes launches of row-tile or chunk ranges instead of one launch."""
    monkeypatch.setenv("CONVT_MAX_WORKSPACE_MB", "16")


# ---- the quick subset (python -m pytest tests -q -m quick) ---------------------------------------
# A test joins it with @quick; a test over many parameters can put only some in it, with quick_params.
quick = pytest.mark.quick


def pytest_configure(config):
    """Registers the markers where pyproject.toml is not read (the tests run from a copy, as .ci/run does
    against the wheel)."""
    if not any(line.startswith("quick:") for line in config.getini("markers")):
        config.addinivalue_line("markers", "quick: a representative subset, under 2 minutes on 2 CPU cores")
    if not any(line.startswith("cuda:") for line in config.getini("markers")):
        config.addinivalue_line("markers", CUDA_MARKER)


CUDA_MARKER = "cuda: runs on a CUDA device (requires_cuda tests, DEVICES cases on cuda, the fuzz where it draws cuda): -m cuda"


def pytest_collection_modifyitems(config, items):
    """Every test that needs a GPU carries the `cuda` marker, so that `-m cuda` selects it whether or
    not its id names the device: the CUDA-only tests (behind requires_cuda, whose parameters seldom name
    the device) and the cases of a test parametrized over DEVICES whose device is CUDA."""
    for item in items:
        needs_gpu = any(mark.name == "skipif" and mark.kwargs.get("reason") in (NEEDS_CUDA, NEEDS_TWO_GPUS)
                        for mark in item.iter_markers())
        callspec = getattr(item, "callspec", None)
        on_gpu = callspec is not None and any(str(value).startswith("cuda") for value in callspec.params.values())
        if needs_gpu or on_gpu:
            item.add_marker(pytest.mark.cuda)


def quick_params(values, chosen):
    """values for @pytest.mark.parametrize, those in `chosen` marked quick."""
    return [pytest.param(v, marks=quick) if v in chosen else v for v in values]


# ---- skips: reasons that say what the machine lacks ---------------------------------------------
NEEDS_CUDA = "needs CUDA"
NEEDS_TWO_GPUS = "needs 2 GPUs"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NEEDS_CUDA)
requires_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason=NEEDS_TWO_GPUS)


def needs_memory(gib: float, device: str) -> str:
    """The reason for a skip for want of memory on device ("cpu": RAM)."""
    return f"needs >= {gib:.0f} GB free {'GPU memory' if device.startswith('cuda') else 'RAM'}"


def _needs_a_gpu(reason: str) -> bool:
    return reason in (NEEDS_CUDA, NEEDS_TWO_GPUS) or reason.endswith("GPU memory")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # (outermost: the line comes after the short test summary)
def pytest_terminal_summary(terminalreporter):
    """One line after the session: how many tests were skipped for want of a GPU (and of which kind)."""
    yield
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = [str(r.longrepr[2]).removeprefix("Skipped: ") if isinstance(r.longrepr, tuple) else "" for r in skipped]
    for_gpu = collections.Counter(reason for reason in reasons if _needs_a_gpu(reason))
    if not for_gpu:
        return
    count, kinds = sum(for_gpu.values()), ", ".join(f"{reason}: {n}" for reason, n in for_gpu.most_common())
    others = len(skipped) - count
    tests = "test" if count == 1 else "tests"
    if torch.cuda.is_available():
        line = f"convt: {count} {tests} skipped for want of more GPUs or GPU memory ({kinds})"
    else:
        line = (f"convt: {count} {tests} skipped because there is no GPU ({kinds}): run the suite on a GPU machine "
                "to cover them")
    if others:
        line += f"; {others} more for other reasons (pytest -rs lists them)"
    terminalreporter.write_line(line, yellow=True)
