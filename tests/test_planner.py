"""The CUDA planner (csrc/plan.cpp), asked on the CPU for an H100's and an A100's limits: which kernel
each shape gets, and that every plan fits the card. No GPU needed: the planner is pure code. At the
end, the CPU's plan (explain(device="cpu")): which form this CPU runs for a shape."""
import json
import os
import random
import subprocess
import sys
import threading
import zlib

import pytest
import torch

import torch_convt_op  # noqa: F401  (loads torch.ops.convt)
from torch_convt_op import sweep
from torch_convt_op.planner import explain, summary

pytestmark = [pytest.mark.quick,  # (a few seconds: all of it is in the quick subset)
              pytest.mark.usefixtures("layers_as_given")]

CARDS = ["h100", "a100"]

# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups)
NAMED = {
    "kb64": (64, 128, 128, 3, 65536, 1, 0, 0, 1, 1),
    "kb74": (32, 32, 64, 5, 131072, 1, 0, 0, 3, 1),
    "kb79": (16, 32, 64, 3, 131072, 2, 1, 0, 2, 1),
    "hifigan_up0": (8, 512, 256, 16, 862, 8, 4, 0, 1, 1),
    "hifigan_up1": (8, 256, 128, 16, 6896, 8, 4, 0, 1, 1),
    "hifigan_up3": (8, 64, 32, 4, 110336, 2, 1, 0, 1, 1),
    "encodec_up1": (8, 256, 128, 10, 6000, 5, 0, 0, 1, 1),
    "grouped": (16, 128, 128, 5, 16384, 2, 2, 1, 1, 4),
    "depthwise": (16, 256, 256, 7, 16384, 1, 3, 0, 1, 256),
    "small": (1, 64, 64, 4, 1024, 2, 1, 0, 1, 1),
}
SMEM_PER_BLOCK = {"h100": 232448, "a100": 166912}
MATHS = [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True), (torch.float16, True)]
# tile shapes that hold one accumulator only: never in strict float32 (3xTF32 keeps two)
ONE_ACCUMULATOR = {("warp", 64, 256), ("warp", 128, 128), ("warpgroup", 128, 128), ("pipelined", 128, 256)}


def random_shapes(count, seed):
    """Layers of the kinds users run: any channels, K up to 64, strides, dilation, groups."""
    rng = random.Random(seed)
    shapes = []
    while len(shapes) < count:
        groups = rng.choice([1, 1, 1, 2, 4])
        c_in = groups * rng.choice([1, 3, 8, 16, 32, 48, 64, 128, 256, 512])
        c_out = groups * rng.choice([1, 2, 8, 16, 32, 64, 96, 128, 256])
        k = rng.choice([1, 2, 3, 4, 5, 7, 8, 10, 16, 20, 33, 64])
        stride = rng.choice([1, 1, 2, 3, 4, 5, 8])
        dilation = rng.choice([1, 1, 1, 2, 3])
        padding = rng.randrange(0, k * dilation // 2 + 1)
        output_padding = rng.randrange(0, min(stride, dilation)) if max(stride, dilation) > 1 else 0
        l_in = rng.choice([1, 7, 100, 862, 4096, 65536])
        n = rng.choice([1, 2, 8, 16])
        l_out = (l_in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
        if l_out >= 1:
            shapes.append((n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups))
    return shapes


def plans(shape, dtype, tf32, card):
    n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = shape
    return explain(n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups, dtype=dtype, tf32=tf32,
                   device=card)


def tile(plan):
    return plan["family"], plan["block_m"], plan["block_n"]


def beside_weight(plan):
    """A forward or grad_input plan's workspace beside its packed weight (at most 16 MB)"""
    return plan["workspace_bytes"] - plan["packed_weight_bytes"]


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_every_plan_fits_the_card(card, dtype, tf32):
    for shape in random_shapes(150, seed=zlib.crc32(f"{card} {dtype} {tf32}".encode())):
        plan = plans(shape, dtype, tf32, card)
        for name in ("forward", "grad_input", "grad_weight"):
            assert plan[name].get("smem_bytes", 0) <= SMEM_PER_BLOCK[card], (shape, name, plan[name])
        for name in ("forward", "grad_input"):
            if plan[name]["kernel"] == "gemm":
                assert plan[name]["tiles"] >= 1 and plan[name]["parts"] >= plan[name]["tiles"], (shape, plan[name])
                assert 2 <= plan[name]["stages"] <= 4 or plan[name]["family"] != "pipelined", (shape, plan[name])
                # one launch, whatever the weight's size; beside its packed weight, at most 16 MB
                assert plan[name]["launch_row_tiles"] == plan[name]["row_tiles"], (shape, plan[name])
                assert plan[name]["launch_chunks"] == plan[name]["chunks"], (shape, plan[name])
                assert beside_weight(plan[name]) <= 16 << 20, (shape, plan[name])


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_a100_has_no_sm90_kernels(dtype, tf32):
    for shape in random_shapes(150, seed=1) + list(NAMED.values()):
        plan = plans(shape, dtype, tf32, "a100")
        for name in ("forward", "grad_input"):
            assert plan[name].get("family", "warp") == "warp", (shape, name, plan[name])
        assert plan["grad_weight"]["kernel"] != "grad_weight_wgmma", shape


@pytest.mark.parametrize("card", CARDS)
def test_strict_float32_keeps_two_accumulators(card):
    for shape in random_shapes(150, seed=2) + list(NAMED.values()):
        plan = plans(shape, torch.float32, False, card)
        for name in ("forward", "grad_input"):
            if plan[name]["kernel"] == "gemm":
                assert tile(plan[name]) not in ONE_ACCUMULATOR, (shape, name, plan[name])
        assert plan["grad_weight"]["kernel"] != "grad_weight_wgmma", shape
        if plan["grad_weight"]["kernel"] == "grad_weight_gemm":
            assert plan["grad_weight"]["group_taps"] == 4, shape  # no wide tap groups
        assert plan["grad_bias"]["kernel"] == "row_sums", shape


@pytest.mark.parametrize("card", CARDS)
def test_float64_runs_on_cuda_cores(card):
    for shape in random_shapes(60, seed=3):
        plan = plans(shape, torch.float64, True, card)
        for name in ("forward", "grad_input", "grad_weight"):
            assert plan[name]["kernel"] in ("direct", "depthwise"), (shape, name, plan[name])


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_tensor_cores_for_every_shape(card, dtype, tf32):
    """float32 and 16-bit run on tensor cores whatever the channel counts (1 included) and up to 128
    taps; only one input channel a group, or up to 8 whose product with the output channels a group
    is at most 16 (tensor-core tiles would pad both to 16 or more), with at most 16 taps, takes the
    depthwise kernels instead: the backward passes always, the forward (whose threads loop over
    every tap of every input channel) only with one input channel, or at most 4 input and 2 output
    channels a group; one input channel with 64 outputs a group or more takes either (the GEMM where
    it pays: test_one_input_channel_forward_takes_the_gemm_where_its_pipelined_plan_pays); a forward or
    grad_input of 16 input channels a group or more and at most 64 (co, tap) columns may pack its taps
    instead (test_narrow_outputs_pack_their_taps)."""
    for shape in random_shapes(200, seed=4):
        n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = shape
        plan = plans(shape, dtype, tf32, card)
        cig, cog = c_in // groups, c_out // groups
        depthwise = (cig == 1 or (cig <= 8 and cig * cog <= 16)) and k <= 16
        forward_depthwise = depthwise and (cig == 1 or cig <= 4 and cog <= 2)
        for name, on_depthwise in (("forward", forward_depthwise), ("grad_input", depthwise)):
            expected = {"depthwise", "gemm"} if name == "forward" and cig == 1 and cog >= 64 else {"depthwise" if on_depthwise else "gemm"}
            if cig >= 16 and cog * k <= 64:
                expected.add("packed_taps")
            assert plan[name]["kernel"] in expected, (shape, name, plan[name])
        assert plan["grad_weight"]["kernel"] in (("depthwise",) if depthwise else ("grad_weight_gemm", "grad_weight_wgmma", "grad_weight_boxes"))


@pytest.mark.parametrize("card", CARDS)
def test_long_filters_run_in_steps_of_few_taps(card):
    """Any K up to 128, stride and dilation: a tensor-core plan whose steps hold what fits, and at
    most 2 * taps phase pairs (the size of GemmPlan::pair_begin)."""
    for k in (33, 40, 64, 100, 128):
        for stride in (1, 2, 3, 8):
            for dilation in (1, 2, 3):
                shape = (2, 64, 64, k, 500, stride, k // 3, 0, dilation, 1)
                for dtype, tf32 in MATHS:
                    plan = plans(shape, dtype, tf32, card)
                    for name in ("forward", "grad_input"):
                        g = plan[name]
                        assert g["kernel"] == "gemm", (shape, name, g)
                        assert 1 <= g["step_taps"] <= g["taps"] and g["out_phases"] * g["in_phases"] <= 2 * g["taps"]
                    assert plan["forward"]["smem_bytes"] <= SMEM_PER_BLOCK[card]
    assert plans((2, 64, 64, 129, 500, 1, 0, 0, 1, 1), torch.float32, True, card)["forward"]["kernel"] == "direct"


def extreme_shapes(count, seed):
    """Layers at the edges of every argument (the GPU fuzz's, and past them): channels 1 to 1,536 a
    group, K up to 200, strides and dilations up to 500, output padding up to either, up to 32 groups."""
    rng = random.Random(seed)
    shapes = []
    while len(shapes) < count:
        groups = rng.choice([1, 1, 2, 3, 4, 8, 32])
        per_group = lambda: rng.choice([rng.randint(1, 8), rng.randint(1, 64), rng.randint(1, 400), 768, 1536])
        c_in, c_out = groups * per_group(), groups * per_group()
        k = rng.choice([rng.randint(1, 9), rng.randint(1, 40), rng.randint(100, 200)])
        stride = rng.choice([rng.randint(1, 9), rng.randint(10, 64), rng.randint(65, 500)])
        dilation = rng.choice([1, rng.randint(1, 4), rng.randint(5, 500)])
        output_padding = rng.randint(0, max(stride, dilation) - 1)
        padding = rng.randint(0, dilation * (k - 1))
        l_in = rng.choice([1, rng.randint(1, 64), rng.randint(65, 5000), rng.randint(5001, 400000)])
        n = rng.choice([1, 2, rng.randint(1, 64)])
        if (l_in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 >= 1:
            shapes.append((n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups))
    return shapes


@pytest.mark.parametrize("card", CARDS)
def test_every_layer_plans_within_the_plan_limits(card):
    """The planner (host code, run before every CUDA call) plans any valid layer without error, and
    its GEMM plans stay within the plan's fixed arrays (at most 128 taps, 2 * taps + 1 phase pairs)
    and the card's shared memory: the CPU suite's guard for what the GPU fuzz found (a plan of 154
    merged taps written into 128-entry arrays)."""
    for shape in extreme_shapes(2000, seed=zlib.crc32(card.encode())):
        for dtype, tf32 in MATHS:
            plan = plans(shape, dtype, tf32, card)
            for name in ("forward", "grad_input"):
                g = plan[name]
                if g["kernel"] == "gemm":
                    assert 1 <= g["taps"] <= 128 and g["out_phases"] * g["in_phases"] <= 2 * g["taps"] + 1, (shape, name, g)
            for name in ("forward", "grad_input", "grad_weight"):
                assert plan[name].get("smem_bytes", 0) <= SMEM_PER_BLOCK[card], (shape, name, plan[name])


@pytest.mark.parametrize("card", CARDS)
def test_dilated_merges_stay_within_the_tap_limit(card, monkeypatch):
    """A narrow output's dilated filter merges its phases with zero taps, ceil(((K - 1) * dilation + 1) /
    stride) of them: only up to 128 (GemmPlan's tap arrays); dilation 256 at stride 5 would take 154,
    so those phases stay apart (found by the fuzz: the planner wrote past its arrays)."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    for shape in [(3, 69, 36, 4, 17, 5, 8, 45, 256, 3), (1, 16, 1, 3, 20000, 2, 0, 0, 150, 1), (2, 4, 4, 9, 33, 3, 4, 0, 397, 1)]:
        for dtype, tf32 in MATHS:
            plan = plans(shape, dtype, tf32, card)
            for name in ("forward", "grad_input"):
                assert plan[name]["kernel"] != "gemm" or plan[name]["taps"] <= 128, (shape, name, plan[name])
    if card == "a100":  # (no pipelined tiles: the phases stay apart there)
        return
    merged = plans((1, 16, 1, 3, 20000, 2, 0, 0, 63, 1), torch.float32, True, card)["forward"]  # 64 merged taps
    assert merged["row_phases"] == 2 and merged["zero_taps"] == 1 and merged["taps"] == 64, merged


def test_narrow_outputs(monkeypatch):
    """A waveform decoder (C_out 1-4): on sm_90a merged into rows on pipelined tiles (x, the large
    operand, read once rather than once a phase; K not a multiple of stride with zero taps), else
    16-row warp tiles (rows padded to 16, not 32 or 64); dilated filters too, with zero where the
    dilation does not divide a merged position."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    mergeable = (16, 512, 1, 16, 8000, 8, 4, 0, 1, 1)
    zero_taps = (3, 96, 1, 16, 100000, 10, 3, 0, 1, 1)  # (K not a multiple of stride)
    dilated = (3, 96, 1, 16, 100000, 10, 3, 0, 2, 1)
    for dtype, tf32 in MATHS:
        merged = plans(mergeable, dtype, tf32, "h100")["forward"]
        assert tile(merged) == ("pipelined", 16, 256) and merged["row_phases"] == 8, merged  # (8 merged rows)
        assert tile(plans(mergeable, dtype, tf32, "a100")["forward"]) == ("warp", 16, 256)
        padded = plans(zero_taps, dtype, tf32, "h100")["forward"]
        assert tile(padded) == ("pipelined", 16, 256) and (padded["row_phases"], padded["zero_taps"]) == (10, 1), padded
        assert tile(plans(zero_taps, dtype, tf32, "a100")["forward"]) == ("warp", 16, 256)
        spaced = plans(dilated, dtype, tf32, "h100")["forward"]  # (5 phases reached, ceil(31 / 10) taps)
        assert tile(spaced) == ("pipelined", 16, 256) and (spaced["row_phases"], spaced["zero_taps"], spaced["taps"]) == (10, 1, 4), spaced
        assert tile(plans(dilated, dtype, tf32, "a100")["forward"]) == ("warp", 16, 256)


def test_narrow_outputs_pack_their_taps():
    """A forward of few (co, tap) columns a group packs them as the GEMM's columns (docs/design.md
    §3.9) where the GEMM's padded MMA work binds it (96 MACs an x element or more) and packing more
    than halves it: C_out 2, K 7 at stride 1 (16 rows x 7 taps against 16 columns), groups of such,
    C_out 1 strided on cards without merged phases (16 rows x 7 taps); not merged phases of few taps
    (C_out 1, K 16, stride 8: 16 rows x 2 taps), short filters (C_out 3, K 3: 16 x 3), groups of one
    32-channel chunk, past 64 columns, below 16 input channels a group, or where the taps reach past
    half a block's 256 positions."""
    for dtype, tf32 in MATHS:
        for card in CARDS:
            packed = plans((1, 512, 2, 7, 1105461, 1, 0, 1, 2, 1), dtype, tf32, card)["forward"]
            assert packed["kernel"] == "packed_taps" and packed["columns"] == 16, packed
            assert packed["outputs"] == 254 - 12 + 1 and packed["chunks"] == 16, packed
            grouped = plans((4, 256, 8, 7, 5000, 1, 3, 0, 1, 4), dtype, tf32, card)["forward"]  # (2 x 7 columns a group)
            assert grouped["kernel"] == "packed_taps" and grouped["columns"] == 16 and grouped["chunks"] == 2, grouped
        assert plans((1, 256, 1, 7, 40000, 5, 1, 0, 1, 1), dtype, tf32, "a100")["forward"]["kernel"] == "packed_taps"
        for shape in ((16, 512, 1, 16, 8000, 8, 4, 0, 1, 1),  # merged phases
                      (1, 1024, 3, 3, 976562, 1, 0, 0, 1, 1),  # 48 MACs an element
                      (2, 64, 8, 7, 80000, 1, 3, 0, 1, 4),     # one chunk a group
                      (2, 512, 5, 13, 3000, 1, 6, 0, 1, 1),    # 65 columns
                      (2, 8, 2, 7, 30000, 1, 3, 0, 1, 1),      # 8 input channels
                      (2, 256, 1, 9, 30000, 1, 4, 0, 17, 1)):  # taps over 136 positions
            assert plans(shape, dtype, tf32, "h100")["forward"]["kernel"] == "gemm", shape


def test_narrow_outputs_pack_their_grad_input_taps():
    """grad_input of few (co, tap) columns a group reduces over them (docs/design.md §3.9) where that
    cuts the GEMM's reduction (C_out/groups padded to its chunk, once a tap), the columns are at most
    16 (TF32 32) and a group has 32 input channels or more: C_out 2, K 7 at stride 1 (16 columns; 16-bit
    columns at least 16), groups of such; 256 positions and 64 input channels a block's pass; C_out 2,
    K 16 at stride 5 (32 columns) in TF32 only. Not past 64 columns, at one tap of 28 channels (the
    GEMM's own 32), or with 8 or 16 input channels a group."""
    for dtype, tf32 in MATHS:
        for card in CARDS:
            packed = plans((1, 512, 2, 7, 1105461, 1, 0, 1, 2, 1), dtype, tf32, card)["grad_input"]
            assert packed["kernel"] == "packed_taps" and packed["columns"] == 16, packed
            assert packed["outputs"] == 256 and packed["chunks"] == 8 and packed["blocks"] == 4319, packed
            grouped = plans((4, 256, 8, 7, 5000, 1, 3, 0, 1, 4), dtype, tf32, card)["grad_input"]  # (2 x 7 columns a group)
            assert grouped["kernel"] == "packed_taps" and grouped["chunks"] == 1 and grouped["blocks"] == 4 * 4 * 20, grouped
        wide = plans((1, 768, 2, 16, 658829, 5, 5, 0, 1, 1), dtype, tf32, "h100")["grad_input"]
        assert (wide["kernel"] == "packed_taps") == (dtype == torch.float32 and tf32), (dtype, tf32, wide)
        for shape in ((2, 512, 4, 16, 482725, 8, 4, 0, 1, 1), (1, 208, 28, 1, 737283, 1, 0, 0, 1, 1),
                      (2, 512, 5, 13, 3000, 1, 6, 0, 1, 1), (2, 8, 2, 7, 30000, 1, 3, 0, 1, 1),
                      (2, 256, 128, 4, 37058, 3, 3, 0, 3, 16)):
            assert plans(shape, dtype, tf32, "h100")["grad_input"]["kernel"] != "packed_taps", shape


def test_long_filters_run_pipelined_in_runs_of_taps():
    """A filter whose taps do not fit one pipelined stage runs there in runs of taps, one run over one
    chunk a step (stride 1, and phases merged into rows), the packed weight within its bound."""
    for shape in ((2, 96, 136, 20, 12001, 1, 9, 0, 1, 1), (3, 72, 96, 128, 4000, 2, 63, 0, 1, 1)):
        for dtype, tf32 in MATHS:
            forward = plans(shape, dtype, tf32, "h100")["forward"]
            assert forward["family"] == "pipelined" and forward["in_phases"] > 1, (shape, forward)
            assert forward["step_taps"] * forward["in_phases"] >= forward["taps"], (shape, forward)
            assert beside_weight(forward) <= 16 << 20, (shape, forward)
            assert plans(shape, dtype, tf32, "a100")["forward"]["family"] == "warp"


def test_strided_forwards_run_pipelined_phase_by_phase(monkeypatch):
    """A wide strided forward whose phases do not merge (K not a multiple of stride) runs pipelined, its
    taps in runs where they are many: in strict float32 (3xTF32) each out phase of a tile in turn,
    where every phase is reached; in TF32 and 16-bit at stride 2 only, its two phases held together
    and stored as adjacent pairs (phase pair: 128-column tiles, two accumulator sets), at larger
    strides merged into rows with zero taps where those add at most half the MACs (else on the
    two-buffer kernels, whose staged output writes whole sectors, kept as the exact plan). Phases no
    tap reaches keep the two-buffer kernels."""
    # (v104's per-phase exact plans: the two-buffer kernels, not strided stores)
    monkeypatch.setenv("CONVT_STRIDED_STORES_FIRST", "never")
    for shape, runs in (((16, 1536, 512, 7, 1300, 2, 3, 1, 1, 1), False), ((8, 256, 256, 41, 4000, 4, 20, 0, 1, 1), True),
                        ((8, 128, 256, 103, 3000, 2, 51, 0, 1, 1), True)):
        forward = plans(shape, torch.float32, False, "h100")["forward"]
        assert forward["family"] == "pipelined" and forward["out_phases"] == shape[5], (shape, forward)
        assert forward["in_phases"] > 1 or not runs, (shape, forward)
        assert beside_weight(forward) <= 16 << 20, (shape, forward)
        for dtype in (torch.float32, torch.bfloat16):
            forward = plans(shape, dtype, True, "h100")["forward"]
            if shape[5] == 2:  # a phase pair
                assert forward["family"] == "pipelined" and forward["row_phases"] == 1, (shape, forward)
                assert forward["block_n"] == 128 or forward["block_m"] == 64, forward
            else:  # merged with zero taps, the two-buffer kernels' per-phase plan as the exact one
                assert forward["zero_taps"] == 1 and forward["exact_family"] != "pipelined", (shape, forward)
    gaps = plans((8, 256, 256, 5, 8000, 8, 2, 0, 1, 1), torch.float32, False, "h100")["forward"]  # 5 of 8 phases
    assert (gaps["row_phases"], gaps["column_positions"]) == (5, 8), gaps  # merged: the 5 phases with a tap


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_strided_forwards_of_warp_tiles_run_pipelined_with_strided_stores(dtype, tf32):
    """A strided forward that the warp tiles (mma.sync) would take, its phases unmerged, runs on the
    pipelined tiles with stores out_step apart, in every math: a long dilated filter reaching 4 of 8
    phases (the launcher writes the bias first), every phase of 3; a phase pair (adjacent pair stores) at
    any MACs. Not where an output takes fewer than kStridedStoreMacs MACs (the stores' cost) or rows are
    16 or fewer; one that the warpgroup tiles take keeps their staged output where an output takes
    fewer than kStridedStoreWarpgroupMacs (test_strided_stores_before_warpgroup_tiles)."""
    long_filter = plans((14, 256, 64, 127, 6496, 8, 122, 0, 2, 1), dtype, tf32, "h100")["forward"]
    assert long_filter["family"] == "pipelined", long_filter
    assert (long_filter["out_phases"], long_filter["column_positions"], long_filter["bias_first"]) == (4, 8, 1), long_filter
    every_phase = plans((4, 64, 40, 7, 5000, 3, 2, 0, 2, 1), dtype, tf32, "h100")["forward"]
    assert every_phase["family"] == "pipelined" and every_phase["out_phases"] == 3 and every_phase["bias_first"] == 0
    few_macs = plans((11, 8, 32, 5, 8528, 5, 2, 0, 2, 1), dtype, tf32, "h100")["forward"]  # 8 MACs an output
    assert few_macs["family"] == "warp", few_macs
    pair = plans((6, 48, 48, 5, 8001, 2, 2, 1, 1, 2), dtype, tf32, "h100")["forward"]  # 24 rows a group, 60 MACs
    assert pair["family"] == "pipelined", pair  # (3xTF32: no phase pair, 24 rows on 32-row tiles)
    if dtype == torch.float32 and not tf32:
        return
    with pytest.MonkeyPatch.context() as monkeypatch:  # (v104: strided stores in place of warp tiles only)
        monkeypatch.setenv("CONVT_STRIDED_STORES_FIRST", "never")
        wide = plans((2, 1024, 512, 9, 14085, 4, 10, 0, 3, 4), dtype, tf32, "h100")["forward"]
        assert wide["family"] == "warpgroup" and wide["out_phases"] == 4, wide


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_pipelined_plans_on_half_the_sms_before_two_buffer_plans(dtype, tf32):
    """A pipelined plan whose tiles do not fill the SMs runs where they reach half of them
    (kPipelinedLeastFill) rather than the two-buffer kernels' plan; below that, narrower row tiles
    where those reach half of them (32 x 256 where 128 x 128 tiles make 40), else the two-buffer plan
    (CONVT_NARROWER_PIPELINED=never: no narrower tiles)."""
    half = plans((1, 1024, 512, 4, 571, 8, 0, 4, 1, 1), dtype, tf32, "h100")["forward"]  # merged rows: 80 tiles
    assert half["family"] == "pipelined" and half["parts"] == 80 and half["bias_first"] == 1, half
    few = plans((1, 512, 256, 4, 571, 8, 0, 4, 1, 1), dtype, tf32, "h100")["forward"]  # 40 tiles of 128 rows
    assert few["family"] == "pipelined" and few["block_m"] < 128 and few["parts"] >= 66, few
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")
        assert plans((1, 512, 256, 4, 571, 8, 0, 4, 1, 1), dtype, tf32, "h100")["forward"]["family"] != "pipelined"


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_pipelined_parts_are_a_tiles_out_phases(dtype, tf32):
    """The pipelined kernel's parts, as the two-buffer kernels' direct stores, are a tile's out phases:
    a strided long filter of few tiles (36 tiles of 128 x 128, 8 phases) keeps its 128-row tiles on
    every SM rather than 32-row ones of 4x the tiles; a phase pair's part (stride 2 in TF32 and 16-bit)
    holds both of its phases. 3xTF32 keeps whole-tile parts (its merge rules were measured on them)."""
    strict = dtype == torch.float32 and not tf32
    long_filter = plans((3, 512, 256, 64, 628, 8, 35, 6, 3, 1), dtype, tf32, "h100")["forward"]
    assert long_filter["family"] == "pipelined" and long_filter["out_phases"] == 8, long_filter
    if not strict:
        assert tile(long_filter) == ("pipelined", 128, 128), long_filter
        assert long_filter["parts"] == 8 * long_filter["tiles"] >= 132, long_filter
    else:
        assert long_filter["parts"] == long_filter["tiles"], long_filter
    pair = plans((16, 1536, 512, 7, 1300, 2, 3, 1, 1, 1), dtype, tf32, "h100")["forward"]
    assert pair["family"] == "pipelined" and pair["out_phases"] == 2 and pair["parts"] == pair["tiles"], pair


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_pipelined_tiles_split_a_long_reduction_over_few_tiles(dtype, tf32, monkeypatch):
    """Wide channels on short rows (one pair at out_step 1, nothing merged): where neither pipelined tile
    reaches half the SMs, the 128 x 128 tiles run anyway if a reduction split (runs of chunks into fp32
    slices) brings their parts there, rather than the warp tiles' mma.sync; the split's parts fill at
    most the SMs. Not on an A100 (no pipelined tiles), not where the split cannot reach half of them,
    not under CONVT_PIPELINED_SPLITS=never (v101's plans)."""
    for shape in ((5, 1024, 1024, 16, 100, 8, 3, 3, 1, 1), (3, 1280, 1280, 7, 226, 4, 1, 0, 1, 1)):
        grad_input = plans(shape, dtype, tf32, "h100")["grad_input"]
        assert tile(grad_input) == ("pipelined", 128, 128) and grad_input["splits"] > 1, grad_input
        assert grad_input["float_sums"] == 1 and 132 // 2 <= grad_input["parts"] <= 132, grad_input  # (132 SMs)
        assert plans(shape, dtype, tf32, "a100")["grad_input"]["family"] == "warp"
        with monkeypatch.context() as env:
            env.setenv("CONVT_PIPELINED_SPLITS", "never")
            env.setenv("CONVT_NARROWER_PIPELINED", "never")
            assert plans(shape, dtype, tf32, "h100")["grad_input"]["family"] == "warp"
    forward = plans((1, 640, 1024, 3, 100, 1, 1, 0, 1, 1), dtype, tf32, "h100")["forward"]  # 8 tiles
    assert tile(forward) == ("pipelined", 128, 128) and forward["splits"] > 1, forward
    few = plans((1, 640, 256, 3, 100, 1, 1, 0, 1, 1), dtype, tf32, "h100")["forward"]  # 2 tiles
    assert few["family"] != "pipelined" or dtype.itemsize == 4 and not tf32, few  # (3xTF32: 40 chunks)


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_narrower_pipelined_tiles_where_the_rows_tile_does_not_half_fill(dtype, tf32, monkeypatch):
    """Where the row tiles a problem's rows call for (128, or 64, 32, 16 for narrow groups) do not bring
    the pipelined parts to half the SMs, narrower pipelined row tiles that do (and keep three stages)
    run in their place, before the two-buffer kernels: a K = 1 stride-4 forward of 310 rows on one
    batch element (45 parts of 128 rows: 80 of 32 rows, not the warp tiles' 150), a grad_input of 64
    rows at stride 8 over deinterleaved grad_y. Not a long filter whose narrower tiles keep two stages
    (3xTF32); CONVT_NARROWER_PIPELINED=never: v104's plans."""
    forward = plans((1, 540, 310, 1, 1883, 4, 0, 0, 1, 1), dtype, tf32, "h200")["forward"]
    assert forward["family"] == "pipelined" and forward["block_m"] in (16, 32) and forward["parts"] >= 66, forward
    grad_input = plans((7, 128, 64, 16, 1011, 8, 4, 0, 1, 1), dtype, tf32, "h200")["grad_input"]
    assert tile(grad_input) == ("pipelined", 32, 256) and grad_input["parts"] >= 66, grad_input
    if dtype == torch.float32 and not tf32:  # (per phase: the model merges it, strict_wide_merge_pays)
        with monkeypatch.context() as env:
            env.setenv("CONVT_STRICT_WIDE_MERGE", "never")
            long_filter = plans((13, 384, 384, 114, 123, 5, 54, 0, 1, 1), dtype, tf32, "h200")["forward"]
        assert long_filter["family"] != "pipelined" or long_filter["stages"] >= 3, long_filter
    monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")
    assert plans((1, 540, 310, 1, 1883, 4, 0, 0, 1, 1), dtype, tf32, "h200")["forward"]["family"] == "warp"
    assert tile(plans((7, 128, 64, 16, 1011, 8, 4, 0, 1, 1), dtype, tf32, "h200")["grad_input"]) != ("pipelined", 32, 256)


def test_fragment_taps_take_position_rows_over_copies(monkeypatch):
    """16-bit steps of several taps on 128-row tiles that read A by register fragments from x's or
    grad_y's own rows (tensor rows: permuted positions or boxes) cost kFragmentTapsTimeFactor their
    MMA time in the copies' models, so wide stride-1 bf16 layers of 3 taps run over channels-last
    copies on position rows (wgmma's A by descriptor), forward and grad_input; one-tap steps and
    narrow rows (32 and 64-row tiles) keep their permuted positions. CONVT_FRAGMENT_TAPS=never: v104's."""
    wide = (16, 1536, 768, 3, 1300, 1, 1, 0, 1, 1)
    plan = plans(wide, torch.bfloat16, True, "h200")
    assert plan["forward"]["position_rows"] == 1 and plan["forward"]["copy_channels_last"] == 1, plan["forward"]
    assert plan["grad_input"]["position_rows"] == 1 and plan["grad_input"]["channels_last_grad_y"] == 1, plan["grad_input"]
    one_tap = plans((16, 1280, 640, 1, 1300, 1, 0, 0, 1, 1), torch.bfloat16, True, "h200")
    assert one_tap["forward"]["permuted_positions"] == 1 and one_tap["grad_input"]["permuted_positions"] == 1, one_tap
    narrow = plans((4, 32, 8, 48, 39670, 10, 3, 2, 1, 1), torch.bfloat16, True, "h200")["grad_input"]
    assert narrow["block_m"] < 128 and narrow["permuted_positions"] == 1, narrow
    for tf32 in (True, False):  # (float: A fragments of 4 bytes, no such cost)
        assert plans(wide, torch.float32, tf32, "h200")["forward"]["copy_channels_last"] == 0
    monkeypatch.setenv("CONVT_FRAGMENT_TAPS", "never")
    plan = plans(wide, torch.bfloat16, True, "h200")
    assert plan["forward"]["permuted_positions"] == 1 and plan["grad_input"]["permuted_positions"] == 1, plan


@pytest.mark.parametrize("card", ["h100", "h200"])
def test_fragment_taps_on_warp_tiles_and_long_stride_one_forwards(card, monkeypatch):
    """The fragment taps' cost counts on warp tiles and, in stride-1 forwards of 6 or more taps a step,
    on any tile: 16-bit stride-1 forwards of long filters on 32, 64 and 128-row tiles run over
    channels-last copies of x (position rows), and strided grad_inputs that would run on warp tiles
    run over grad_y copied channels-last; short stride-1 filters (3 taps), strided forwards and
    grad_inputs on pipelined tiles keep their plans. CONVT_FRAGMENT_TAPS_ANY_TILE=never: v111's plans."""
    forwards = {(2, 128, 64, 48, 27549, 1, 0, 0, 1, 1): 64, (10, 32, 32, 64, 41498, 1, 0, 0, 1, 1): 32,
                (11, 1280, 640, 7, 955, 1, 0, 0, 1, 1): 128}
    for shape, rows in forwards.items():
        forward = plans(shape, torch.bfloat16, True, card)["forward"]
        assert forward["copy_channels_last"] == 1 and forward["position_rows"] == 1 and forward["block_m"] == rows, forward
    warp_grad_input = (2, 64, 64, 42, 32681, 2, 20, 0, 1, 1)
    g = plans(warp_grad_input, torch.bfloat16, True, card)["grad_input"]
    assert g["channels_last_grad_y"] == 1 and g["family"] == "pipelined", g
    for shape in ((10, 1280, 512, 3, 1089, 1, 1, 0, 1, 1), (10, 1024, 512, 4, 4393, 2, 0, 0, 1, 1)):
        assert plans(shape, torch.bfloat16, True, card)["forward"]["copy_batch"] == 0, shape
    assert plans((2, 170, 162, 5, 84019, 1, 2, 0, 1, 1), torch.bfloat16, True, card)["grad_input"]["channels_last_grad_y"] == 0
    for tf32 in (True, False):  # (4-byte A fragments: no such cost)
        assert plans((2, 128, 64, 48, 27549, 1, 0, 0, 1, 1), torch.float32, tf32, card)["forward"]["copy_channels_last"] == 0
    monkeypatch.setenv("CONVT_FRAGMENT_TAPS_ANY_TILE", "never")
    for shape in forwards:
        assert plans(shape, torch.bfloat16, True, card)["forward"]["copy_batch"] == 0, shape
    assert plans(warp_grad_input, torch.bfloat16, True, card)["grad_input"]["family"] == "warp"


@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.bfloat16, True)])
def test_strided_stores_before_warpgroup_tiles(dtype, tf32, monkeypatch):
    """A strided forward whose phases the pipelined kernel takes only with strided stores runs so, on
    128-column tiles, in place of the warpgroup tiles too where an output takes at least
    kStridedStoreWarpgroupMacs MACs (16-channel groups merged to 128 rows, 7 taps over 2 of 4 phases:
    448 MACs; a 48-tap filter: 3,686); below that (205 MACs) the warpgroup tiles' staged output
    stays. CONVT_STRIDED_STORES_FIRST=never (with CONVT_TAPLESS_PIPELINED=never, which takes the
    merged groups' tapless phases to the same tiles): v104's plans (warp tiles, 256 columns)."""
    grouped = plans((4, 256, 256, 7, 2417, 4, 4, 0, 2, 16), torch.bfloat16, True, "h200")["forward"]  # (TF32: no merge)
    assert tile(grouped) == ("pipelined", 128, 128) and grouped["bias_first"] == 1, grouped
    long_filter = plans((9, 384, 192, 48, 7408, 5, 68, 0, 3, 1), dtype, tf32, "h200")["forward"]
    assert tile(long_filter) == ("pipelined", 128, 128), long_filter
    few_macs = plans((2, 171, 162, 6, 45021, 5, 0, 0, 1, 1), dtype, tf32, "h200")["forward"]
    assert few_macs["family"] == "warpgroup", few_macs
    monkeypatch.setenv("CONVT_STRIDED_STORES_FIRST", "never")
    monkeypatch.setenv("CONVT_TAPLESS_PIPELINED", "never")
    assert plans((4, 256, 256, 7, 2417, 4, 4, 0, 2, 16), torch.bfloat16, True, "h200")["forward"]["family"] == "warp"
    assert plans((9, 384, 192, 48, 7408, 5, 68, 0, 3, 1), dtype, tf32, "h200")["forward"]["family"] == "warpgroup"


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_store_bound_strided_forwards_stage_whole_rows(dtype, tf32, monkeypatch):
    """A strided forward of at most kStoreBoundMacs MACs an output whose phases do not merge (4 input
    channels, one tap a phase, every phase reached) runs on warp tiles with staged output, whole rows
    stored, ahead of every other plan; not at 12 MACs an output at stride 2 (but in 3xTF32, whose
    phase-strided rule reaches stride 2), not where the phases merge (K a multiple of the stride).
    CONVT_STORE_BOUND=never: v104's plans."""
    strict = dtype == torch.float32 and not tf32
    narrow_in = plans((1, 4, 512, 4, 1650, 4, 3, 0, 3, 1), dtype, tf32, "h200")["forward"]
    assert tile(narrow_in) == ("warp", 32, 128) and narrow_in["stage_output"] == 1, narrow_in
    assert plans((5, 6, 64, 4, 10400, 2, 4, 0, 3, 1), dtype, tf32, "h200")["forward"]["stage_output"] == int(strict)
    merges = plans((2, 4, 512, 8, 5133, 4, 2, 0, 1, 1), dtype, tf32, "h200")["forward"]
    assert merges["family"] == "pipelined" and merges["row_phases"] > 1, merges
    monkeypatch.setenv("CONVT_STORE_BOUND", "never")
    assert plans((1, 4, 512, 4, 1650, 4, 3, 0, 3, 1), dtype, tf32, "h200")["forward"]["stage_output"] == 0


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_phase_strided_forwards_stage_whole_rows_up_to_32_macs(dtype, tf32):
    """A strided forward on more than 16 rows a group whose phases do not merge is store-bound up to
    kPhaseStridedStoreBoundMacs (32) MACs an output, at strides above 2 in TF32 and 16-bit and at
    stride 2 too in 3xTF32: 2 x 4 -> 1536, K = 11, dilation 2, stride 5 (12 MACs) and 3 x 7 -> 1024,
    K = 9, dilation 3, stride 4 (21 MACs) on staged 32 x 128 warp tiles (64 x 128 cannot stage at
    strides of 4 or more). 5 x 4 -> 512, K = 5, stride 2 (12 MACs) stages only in 3xTF32 (in TF32 and
    16-bit its phase pairs store adjacent elements). Not at 16 rows (5 x 3 -> 16, K = 11, stride 5),
    not at 40 MACs (4 x 20 -> 1024, K = 10, dilation 2, stride 5)."""
    strict = dtype == torch.float32 and not tf32
    for layer in ((2, 4, 1536, 11, 7300, 5, 8, 0, 2, 1), (3, 7, 1024, 9, 3154, 4, 10, 0, 3, 1)):
        forward = plans(layer, dtype, tf32, "h200")["forward"]
        assert tile(forward) == ("warp", 32, 128) and forward["stage_output"] == 1, forward
    stride_two = plans((5, 4, 512, 5, 4236, 2, 2, 0, 1, 1), dtype, tf32, "h200")["forward"]
    assert stride_two["stage_output"] == int(strict), stride_two
    for layer in ((5, 3, 16, 11, 84155, 5, 13, 0, 3, 1), (4, 20, 1024, 10, 2000, 5, 0, 0, 2, 1)):
        forward = plans(layer, dtype, tf32, "h200")["forward"]
        assert forward["stage_output"] == 0, (layer, forward)


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_pipelined_x_by_tma_boxes_where_rows_allow(dtype, tf32):
    """The pipelined forward stages x by TMA boxes (tensor_rows: one box a consumer warpgroup) in
    float and 16-bit alike where x's rows are 16-byte multiples. Other rows back to back go as super
    rows of the fewest rows whose length is one (map_row_phases), a box a channel phase, where those
    boxes pay: 256-column tiles over rows of 6 column tiles or more, 2 phases, or 4 in float with 2
    taps a step or more. Row by row otherwise (a bulk copy a row): on short steps the row copies,
    not the MMA, set the pace."""
    unit = 16 // dtype.itemsize  # (elements of 16 bytes)
    wide = dtype.itemsize == 2 or tf32  # (3xTF32: 128-column tiles)
    for n, c_in, c_out, k, stride, taps in ((10, 1536, 1536, 1, 1, 1), (16, 1536, 512, 4, 2, 2)):
        odd = 4 if dtype.itemsize == 4 and taps >= 2 else 0  # (16-bit: 8 phases)
        for l_in, boxes, phases in ((1600, 1, 1), (1600 + unit // 2, int(wide), 2 if wide else 1),
                                    (1601, int(wide and odd > 0), odd if wide and odd else 1)):
            forward = plans((n, c_in, c_out, k, l_in, stride, 0, 0, 1, 1), dtype, tf32, "h100")["forward"]
            if forward["copy_batch"] > 0:  # (16-bit rows row by row: over copies of x where the model has them faster)
                assert dtype.itemsize == 2 and forward["tensor_rows"] == 1 and not boxes, (l_in, forward)
                continue
            assert forward["family"] == "pipelined" and forward["block_n"] == (256 if wide else 128), (l_in, forward)
            assert (forward["tensor_rows"], forward["map_row_phases"]) == (boxes, phases), (l_in, forward)
            assert plans((n, c_in, c_out, k, l_in, stride, 0, 0, 1, 1), dtype, tf32, "a100")["forward"]["tensor_rows"] == 0
        # channels that are no whole super rows, and rows of fewer column tiles: row by row
        for shape in ((n, c_in - 1, c_out, k, 1600 + unit // 2, stride), (n, c_in, c_out, k, 4 * 256 + unit // 2, stride)):
            forward = plans(shape + (0, 0, 1, 1), dtype, tf32, "h100")["forward"]
            # (or over copies of x: 16-bit, channels-last, test_forward_copies_channels_last_for_position_rows)
            assert forward["family"] == "pipelined" and (forward["tensor_rows"] == 0 or forward["copy_batch"] > 0), (shape, forward)


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_tap_boxes_where_every_tap_offset_is_aligned(dtype, tf32):
    """16-bit pipelined plans whose x comes by TMA boxes of x's own rows (tensor_rows, map_row_phases
    1) take tap boxes (a box a tap and 64-column subtile, read by wgmma as A by descriptor) where
    every tap's offset is a multiple of 16 bytes: a TMA box starts at a 16-byte multiple of its row,
    and wgmma's MN-major A at one of its rows. K = 1, and K <= stride (the merged short filter's one
    tap); not taps one position apart (K above stride, K > 1 at stride 1). Not in float (TF32's A is
    K-major only), nor without TMA."""
    for shape, aligned in (((12, 1536, 768, 1, 1304, 1, 0, 0, 1, 1), True),
                           ((4, 100, 37, 1, 8200, 1, 0, 0, 1, 1), True),
                           ((2, 512, 512, 1, 9000, 1, 0, 0, 1, 2), True),
                           ((8, 512, 256, 4, 4096, 4, 0, 0, 1, 1), True),
                           ((4, 96, 40, 3, 8192, 4, 1, 2, 1, 1), True),
                           ((4, 512, 256, 4, 4096, 2, 1, 0, 1, 1), False),
                           ((8, 256, 128, 3, 8192, 1, 1, 0, 1, 1), False)):
        forward = plans(shape, dtype, tf32, "h100")["forward"]
        assert forward["family"] == "pipelined" and forward["tensor_rows"] == 1, (shape, forward)
        assert forward["tap_boxes"] == int(dtype.itemsize == 2 and aligned), (shape, forward)
        assert plans(shape, dtype, tf32, "a100")["forward"].get("tap_boxes", 0) == 0
    # grad_input of a stride-1 K = 1 layer: grad_y's rows, tap boxes too
    grad_input = plans((12, 1536, 768, 1, 1304, 1, 0, 0, 1, 1), dtype, tf32, "h100")["grad_input"]
    assert grad_input["tap_boxes"] == int(dtype.itemsize == 2), grad_input


def test_16_bit_register_fragments_read_permuted_positions(monkeypatch):
    """sm_90 16-bit pipelined plans whose A fragments load from tensor rows (no tap boxes, no position
    rows) permute each warp's positions (a lane's two fragment rows adjacent: 4-byte loads at even
    shifts, pair stores) where a tile's columns are consecutive out positions; not in float, not on
    tap boxes or position rows, not where x is staged row by row, not at a stride (merged rows, or
    per phase: the paired columns' stores fall apart), and `never` turns it off."""
    wide = (16, 1536, 512, 7, 1300, 1, 3, 0, 1, 1)  # tensor rows of 2 channel phases
    monkeypatch.setenv("CONVT_GRAD_INPUT_COPIES", "never")  # (grad_input on grad_y's own rows)
    monkeypatch.setenv("CONVT_FRAGMENT_TAPS", "never")  # (the forward on x's own rows, not copies)
    for name in ("forward", "grad_input"):
        g = plans(wide, torch.bfloat16, True, "h100")[name]
        assert g["tensor_rows"] == 1 and g["tap_boxes"] == 0 and g["permuted_positions"] == 1, (name, g)
        assert plans(wide, torch.float16, True, "h100")[name]["permuted_positions"] == 1
        for tf32 in (True, False):
            assert plans(wide, torch.float32, tf32, "h100")[name]["permuted_positions"] == 0
    k1 = plans((12, 1536, 768, 1, 1304, 1, 0, 0, 1, 1), torch.bfloat16, True, "h100")["forward"]
    assert k1["tap_boxes"] == 1 and k1["permuted_positions"] == 0, k1
    rows = plans((22, 256, 256, 5, 10188, 2, 1, 0, 1, 1), torch.bfloat16, True, "h100")["forward"]
    assert rows["tensor_rows"] == 0 and rows["permuted_positions"] == 0, rows
    for strided in ((8, 256, 128, 10, 6000, 5, 0, 0, 1, 1), (16, 128, 128, 5, 16384, 2, 2, 1, 1, 4)):  # merged; per phase
        g = plans(strided, torch.bfloat16, True, "h100")["forward"]
        assert g["tensor_rows"] == 1 and g["row_phases"] * g["out_phases"] > 1 and g["permuted_positions"] == 0, g
    monkeypatch.setenv("CONVT_PERMUTED_POSITIONS", "never")
    assert plans(wide, torch.bfloat16, True, "h100")["forward"]["permuted_positions"] == 0
    monkeypatch.delenv("CONVT_PERMUTED_POSITIONS")
    monkeypatch.delenv("CONVT_GRAD_INPUT_COPIES")
    # the kernels compile the permuted path only for 16-bit plans of unmerged rows and channels
    # (WarpgroupMma::kMayPermute): every plan that permutes, over a sweep's layers, is one of those
    permuted = 0
    for _, case in sweep.draw_shapes(120, 72, "cuda"):
        for dtype, tf32 in ((torch.bfloat16, True), (torch.float16, True), (torch.float32, True), (torch.float32, False)):
            for name, g in plans(case.sizes, dtype, tf32, "h100").items():
                if isinstance(g, dict) and g.get("permuted_positions", 0):
                    permuted += 1
                    assert dtype.itemsize == 2 and g["row_phases"] == 1 and g["channel_phases"] == 1, (case, name, g)
    assert permuted > 0


def test_forward_copies_channels_last_for_position_rows():
    """Forwards over copies of x (copy_batch) copy x channels-last where its channels make rows of
    16-byte multiples (C_in a multiple of 8 in 16-bit, of 4 in float): the pipelined kernel then reads
    x as position rows (a K-major A from each tap's row); not where the aligned copies take tap boxes
    (as fast: K = 1), nor where the channels do not allow it, nor in strict float32 (3xTF32 splits
    its A in registers: aligned copies, read as boxes)."""
    for c_in, channels_last in ((1024, True), (1020, False)):
        forward = plans((16, c_in, 512, 3, 1300, 2, 0, 0, 1, 1), torch.bfloat16, False, "h100")["forward"]
        assert forward["copy_batch"] == 6 and forward["copy_channels_last"] == int(channels_last), forward
        assert forward["position_rows"] == int(channels_last) and beside_weight(forward) <= 16 << 20, forward
    k1 = plans((12, 1536, 768, 1, 1300, 1, 0, 0, 1, 1), torch.bfloat16, False, "h100")["forward"]
    assert k1["copy_batch"] > 0 and k1["copy_channels_last"] == 0 and k1["tap_boxes"] == 1, k1
    for c_in, channels_last in ((1024, True), (1022, False)):
        forward = plans((16, c_in, 512, 3, 1302, 2, 0, 0, 1, 1), torch.float32, True, "h100")["forward"]
        assert forward["copy_batch"] > 0 and forward["copy_channels_last"] == int(channels_last), forward
        assert forward["position_rows"] == int(channels_last) and forward["tensor_rows"] == 1, forward
    strict = plans((10, 1280, 1280, 7, 299, 4, 1, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert strict["copy_batch"] > 0 and strict["copy_channels_last"] == 0 and strict["position_rows"] == 0, strict
    assert strict["tensor_rows"] == 1 and beside_weight(strict) <= 16 << 20, strict


def test_forward_copies_where_row_staging_adds_to_the_mma():
    """The copies' model adds a row-staged step's row copies to its MMAs (they did not overlap on an
    H200): wide layers of 3-4 taps a step, whose MMAs the old model had hiding the row copies, run
    over copies (16 x 1024 -> 512, K = 7, stride 2 on 1300 positions: 0.92 -> 0.48 ms measured);
    narrow ones stay on x's rows (the copy's bytes and launches outweigh a short reduction). TF32 as
    well, its MMAs at half the rate."""
    for shape in ((16, 1024, 512, 7, 1300, 2, 0, 0, 1, 1), (7, 1280, 640, 7, 485, 2, 2, 0, 1, 1)):
        forward = plans(shape, torch.bfloat16, False, "h100")["forward"]
        assert forward["copy_batch"] > 0 and forward["copy_channels_last"] == 1 and forward["position_rows"] == 1, forward
        assert beside_weight(forward) <= 16 << 20, forward
    for shape in ((13, 128, 64, 2, 11503, 2, 0, 0, 1, 1), (22, 256, 256, 5, 10188, 2, 1, 0, 1, 1)):
        forward = plans(shape, torch.bfloat16, False, "h100")["forward"]
        assert forward["copy_batch"] == 0 and forward["family"] == "pipelined" and forward["tensor_rows"] == 0, forward
    forward = plans((16, 1024, 512, 7, 1302, 2, 0, 0, 1, 1), torch.float32, True, "h100")["forward"]
    assert forward["copy_batch"] > 0 and forward["copy_channels_last"] == 1, forward
    assert plans((13, 128, 64, 2, 11503, 2, 0, 0, 1, 1), torch.float32, True, "h100")["forward"]["copy_batch"] == 0


def test_forward_copies_take_zero_tap_plans():
    """A plan with zero taps (K = 7 merged at stride 4: two taps a phase, one of them zero) takes the
    copies as any other pipelined plan, its exact plan (gated on a non-finite x) planned over the
    copy too: TF32 and 16-bit, not strict fp32 (no zero taps there)."""
    for dtype, tf32 in ((torch.float32, True), (torch.bfloat16, False)):
        forward = plans((11, 1536, 1536, 7, 298, 4, 1, 0, 1, 1), dtype, tf32, "h100")["forward"]
        assert forward["copy_batch"] > 0 and forward["zero_taps"] == 1 and forward["tensor_rows"] == 1, forward
        assert forward["exact_family"] in ("warp", "warpgroup", "pipelined"), forward
    # ... but not where the copy's plan would take fewer taps a step than the plan on x (a long filter
    # of 128 x 128 rows: 8 taps a step on x's rows, 4 on channels-last position rows)
    for dtype, tf32 in ((torch.float32, True), (torch.bfloat16, False)):
        forward = plans((6, 512, 128, 128, 965, 5, 0, 0, 1, 1), dtype, tf32, "h100")["forward"]
        assert forward["copy_batch"] == 0 and forward["zero_taps"] == 1 and forward["step_taps"] == 8, forward


def test_strict_wide_forwards_merge_where_strided_stores_cost_more():
    """A 3xTF32 forward of a wide output (C_out * stride above 64) merges its zero-tap phases where the
    per-phase tiles' stores, an element every out_step positions, cost more than twice the merged
    tiles' MMA work (strict_wide_merge_pays): few input channels (1 -> 512, K = 17, stride 8: the
    per-phase plan stored at ~0.2 TB/s); many channels keep the per-phase plan, as does a per-phase
    plan that stages its outputs (stored in order: 8 -> 32, K = 11, stride 5 on mma.sync tiles); TF32
    merges there as before; CONVT_STRICT_WIDE_MERGE=never keeps every strict wide forward per phase."""
    few = (15, 1, 512, 17, 350, 8, 0, 0, 1, 1)
    forward = plans(few, torch.float32, False, "h100")["forward"]
    assert forward["row_phases"] == 8 and forward["zero_taps"] == 1 and forward["family"] == "pipelined", forward
    assert forward["exact_family"] == "pipelined", forward
    dense = plans((8, 256, 256, 7, 2000, 4, 0, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert dense["row_phases"] == 1 and dense["zero_taps"] == 0, dense
    staged = plans((3, 8, 32, 11, 97820, 5, 4, 1, 1, 1), torch.float32, False, "h100")["forward"]
    assert staged["row_phases"] == 1 and staged["stage_output"] == 1, staged
    assert plans(few, torch.float32, True, "h100")["forward"]["row_phases"] == 8


def test_strict_wide_forwards_merge_where_per_phase_tiles_narrow(monkeypatch):
    """A 3xTF32 wide forward merges its zero-tap phases wherever its per-phase plan runs on pipelined
    row tiles narrower than its rows (plan_pipelined's narrower tiles, taken where 128-row ones reach
    too few parts), whatever the stores cost: 4 x 768 -> 192, K = 116, stride 10 on 345 positions
    (per phase: 16 x 256 tiles, 96 parts; merged: 128 x 128 tiles over the ten phases' rows) and
    6 x 256 -> 128, K = 82, stride 8 (per phase: 32 x 256). Not at stride 2: 11 x 123 -> 203, K = 9
    keeps its per-phase 32 x 256 tiles (so does its layer at stride 6, dilation 3, which runs as it)."""
    for layer, phases, per_phase_rows in (((4, 768, 192, 116, 345, 10, 53, 0, 1, 1), 10, 16),
                                          ((6, 256, 128, 82, 662, 8, 28, 3, 1, 1), 8, 32)):
        forward = plans(layer, torch.float32, False, "h100")["forward"]
        assert forward["row_phases"] == phases and forward["zero_taps"] == 1 and forward["block_m"] == 128, forward
        monkeypatch.setenv("CONVT_STRICT_WIDE_MERGE", "never")
        per_phase = plans(layer, torch.float32, False, "h100")["forward"]
        monkeypatch.delenv("CONVT_STRICT_WIDE_MERGE")
        assert per_phase["row_phases"] == 1 and per_phase["family"] == "pipelined", per_phase
        assert per_phase["block_m"] == per_phase_rows, per_phase
    stride_2 = plans((11, 123, 203, 9, 185, 2, 3, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert stride_2["row_phases"] == 1 and stride_2["family"] == "pipelined" and stride_2["block_m"] == 32, stride_2


def test_strict_wide_merge_override(monkeypatch):
    monkeypatch.setenv("CONVT_STRICT_WIDE_MERGE", "never")
    forward = plans((15, 1, 512, 17, 350, 8, 0, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert forward["row_phases"] == 1 and forward["zero_taps"] == 0, forward


def test_forward_copies_take_the_chunk_of_fewest_waves():
    """The batch chunk of a forward over copies of x is the one whose launches take the fewest waves of
    tiles (and launches), not the largest the workspace allows: 16 x 1536 -> 512, K = 3, stride 2 on
    1300 positions has 44 tiles a batch element; chunks of 4 (the most within 16 MB) are 176 tiles, 2
    waves each on 132 SMs (8 in all), chunks of 3 are 132, one wave each (6). Over channels-last
    copies, a chunk whose remainder's own plan would not run pipelined is not taken (a warp tile there
    ran a whole forward 1.5x slower); 7 x 1536 -> 768, K = 5 in TF32 in chunks of 5 leaves 2 elements,
    whose own plan runs pipelined with a reduction split."""
    forward = plans((16, 1536, 512, 3, 1300, 2, 0, 1, 1, 1), torch.bfloat16, False, "h100")["forward"]
    assert forward["copy_batch"] == 3 and forward["tiles"] == 132 and forward["family"] == "pipelined", forward
    assert beside_weight(forward) <= 16 << 20, forward
    forward = plans((7, 1536, 768, 5, 439, 1, 2, 0, 1, 1), torch.float32, True, "h100")["forward"]
    assert forward["copy_batch"] == 5 and forward["family"] == "pipelined", forward
    left = plans((2, 1536, 768, 5, 439, 1, 2, 0, 1, 1), torch.float32, True, "h100")["forward"]
    assert left["family"] == "pipelined" and left["splits"] > 1 and left["position_rows"] == 1, left


@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.bfloat16, False)])
def test_forward_over_aligned_x_copies(dtype, tf32):
    """Where the pipelined forward would stage x's rows one by one (no 16-byte multiple, no channel-phase
    boxes), it runs over copies of x in aligned rows, a batch chunk at a time (copy_batch), where the
    copy plans TMA boxes in one launch, a chunk's copy takes at most 16 MB beside the packed weight, and the
    cost model (the row copies' steps against the chunks' waves and the copies) gives the copies at
    most 0.9 of the time: wide layers of long reductions (TF32 too, but not with one tap: its MMAs
    at half the rate hide more of the row copies). Not where x's rows are aligned already, nor on
    narrow layers (few steps an element of x), nor without TMA."""
    unit = 16 // dtype.itemsize
    chunks = {2: (4, 6), 4: (0, 3)}[dtype.itemsize]  # (batch elements a chunk; 0: no copies)
    for (n, c_in, c_out, k, stride), chunk in zip(((12, 1536, 768, 1, 1), (16, 1024, 512, 3, 2)), chunks):
        aligned = plans((n, c_in, c_out, k, 1296, stride, 0, 0, 1, 1), dtype, tf32, "h100")["forward"]
        assert aligned["copy_batch"] == 0 and aligned["tensor_rows"] == 1, aligned
        forward = plans((n, c_in, c_out, k, 1296 + unit // 2, stride, 0, 0, 1, 1), dtype, tf32, "h100")["forward"]
        assert forward["copy_batch"] == chunk, forward
        if forward["copy_batch"]:
            assert forward["family"] == "pipelined" and forward["tensor_rows"] == 1, forward
            assert beside_weight(forward) <= 16 << 20, forward
        assert plans((n, c_in, c_out, k, 1296 + unit // 2, stride, 0, 0, 1, 1), dtype, tf32, "a100")["forward"]["copy_batch"] == 0
    # 16-bit: more chunks (one batch element each) would add waves of tiles
    assert plans((11, 256, 128, 5, 18442, 2, 1, 0, 1, 1), dtype, tf32, "h100")["forward"]["copy_batch"] == 0
    narrow = plans((4, 64, 32, 4, 100001, 2, 1, 0, 1, 1), dtype, tf32, "h100")["forward"]
    assert narrow["copy_batch"] == 0, narrow


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pipelined_width_by_waves(dtype):
    """Of 128 x 128 and 128 x 256 pipelined tiles the waves of their launches decide where their ratio
    is beyond what the wider tile's time (1.5-1.8 times the narrower one's, 1.6 at one tap a step)
    can make up, the columns they pad in between. 5 x 1536 -> 1536, K = 3 on 564 positions: 300 tiles
    of 128 columns are 3 waves on 132 SMs, 180 of 256 columns 2 (3 / 2 <= 1.5): 128 columns.
    10 x 1536 -> 1536, K = 1 on 1300 positions: 10 waves against 6 (above 1.6 at one tap a step):
    256, though they pad 9 % more columns. HiFi-GAN's first upsampler: 7 waves against 4, in
    between; 256 columns would pad 14 % more: 128."""
    few_tiles = plans((5, 1536, 1536, 3, 564, 1, 1, 0, 1, 1), dtype, True, "h100")["forward"]
    assert tile(few_tiles) == ("pipelined", 128, 128) and few_tiles["tiles"] == 300, few_tiles
    many_tiles = plans((10, 1536, 1536, 1, 1300, 1, 0, 0, 1, 1), dtype, True, "h100")["forward"]
    assert tile(many_tiles) == ("pipelined", 128, 256) and many_tiles["tiles"] == 720, many_tiles
    in_between = plans(NAMED["hifigan_up0"], dtype, True, "h100")["forward"]
    assert tile(in_between) == ("pipelined", 128, 128) and in_between["tiles"] == 896, in_between


def test_launches_of_a_split_weight_take_the_fewest_waves(workspace_16mb):
    """Where the packed weight is split over launches (over the 16 MB bound), the planner takes the launch
    size with the fewest waves in all, not the largest that fits: 16 x 1536 -> 1536, K = 1, strict
    fp32 (3xTF32, two weight parts): 12 row tiles of 176 tiles each, at most 10 a launch; 10 + 2 row
    tiles take 14 + 3 waves, 9 + 3 take 12 + 4."""
    plan = plans((16, 1536, 1536, 1, 1300, 1, 0, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert plan["row_tiles"] == 12 and plan["tiles"] == 12 * 176 and plan["launch_row_tiles"] == 9, plan
    assert plan["workspace_bytes"] <= 16 << 20


def test_split_weights_over_few_tiles_launch_ranges_of_chunks(workspace_16mb):
    """Where launches of row tiles would hold few tiles each (1 x 768 -> 768, K = 64 at 4,731
    positions: 37 tiles a row tile), or a single row tile packs more than 16 MB (a pipelined 128-row
    tile of it: 25 MB in TF32), a float output's launches take ranges of chunks over every row tile,
    each after the first adding to out; 16-bit outputs (a rounding a launch) and plans whose waves
    the row ranges already fill keep ranges of row tiles."""
    few_tiles = (1, 768, 768, 64, 4731, 1, 31, 0, 1, 1)
    for tf32 in (True, False):
        for name in ("forward", "grad_input"):
            g = plans(few_tiles, torch.float32, tf32, "h100")[name]
            assert g["family"] == "pipelined" and g["block_m"] == 128, (name, g)  # (one row tile: 25 MB, 50 MB in 3xTF32)
            assert g["launch_row_tiles"] == g["row_tiles"] and 1 <= g["launch_chunks"] < g["chunks"], (name, g)
            assert g["workspace_bytes"] <= 16 << 20, g
    g = plans(few_tiles, torch.bfloat16, True, "h100")["forward"]
    assert g["launch_chunks"] == g["chunks"] and g["launch_row_tiles"] < g["row_tiles"], g
    filled = plans((16, 1536, 1536, 1, 1300, 1, 0, 0, 1, 1), torch.float32, False, "h100")["forward"]
    assert filled["launch_chunks"] == filled["chunks"] and filled["launch_row_tiles"] == 9, filled


def test_strided_grad_input_reads_grad_y_deinterleaved():
    """A strided grad_input (dilation 1) reads grad_y's phases as channels: in place on sm_90a's
    warpgroup tiles where its phases merge (K a multiple of stride), grad_y's rows go in 16-byte
    copies and stride divides 8 (merged channels); else, where K is a multiple of stride or below it
    (every phase's taps at the same shifts), from a deinterleaved copy, a stride-1 problem of
    ceil(K / stride) taps (any stride, any length, any card), rather than a phase at a time, element
    by element, where the plan has more than two row tiles (the copy costs a pass over grad_y) or the
    math is 3xTF32 and the phases merge. K above stride and not a multiple of it takes the copy with
    zero taps where the per-phase plan's row tiles would read more 32-byte sectors of grad_y
    (row_tiles * min(stride, 32 / element size) passes) than the copy (2 + row_tiles), that plan
    kept as the exact one (zero weights would turn grad_y's Inf into NaN where it does not reach:
    it runs where grad_y is not finite); else, or dilated, it stays per phase. The merged in-place
    form of `in_place` (stride 4) feeds 1024 MACs a grad_y element: copied for 4-byte elements, in
    place for 16-bit ones (from 1536); at stride 8 (8-way conflicts) 16-bit ones copy from 1024 too."""
    in_place = (8, 512, 256, 8, 862, 4, 2, 0, 1, 1)  # L_out 3448: 16-byte rows
    eight_phases = (8, 512, 256, 16, 862, 8, 4, 0, 1, 1)  # L_out 6896, 1024 MACs a grad_y element
    unaligned = (14, 1024, 512, 4, 3974, 2, 0, 1, 1, 1)  # L_out 7951
    stride_6 = (12, 1024, 1024, 12, 1132, 6, 3, 1, 1, 1)
    not_merging = (8, 512, 256, 7, 2000, 2, 3, 1, 1, 1)  # 4 + 3 taps: 4 x 2 with one zero tap
    not_merging_narrow = (8, 128, 256, 7, 2000, 2, 3, 1, 1, 1)  # stride 2, two row tiles: per phase
    not_merging_stride_5 = (14, 200, 200, 8, 8353, 5, 1, 0, 1, 1)  # 2 + 2 rows tiles' sectors x 5 phases
    short_filter = (4, 1024, 256, 3, 2000, 8, 1, 0, 1, 1)  # K < stride: 3 phases, one tap
    two_row_tiles = (8, 256, 128, 10, 6000, 5, 0, 0, 1, 1)
    dilated = (8, 512, 256, 7, 2000, 2, 3, 1, 2, 1)
    for dtype, tf32 in MATHS:
        for card in ("h100", "a100"):
            merged = plans(in_place, dtype, tf32, card)["grad_input"]
            in_place_merged = card == "h100" and dtype.itemsize == 2
            assert (merged["channel_phases"], merged["deinterleaved"]) == ((4, 0) if in_place_merged else (1, 1)), merged
            g = plans(eight_phases, dtype, tf32, card)["grad_input"]
            assert (g["channel_phases"], g["deinterleaved"]) == (1, 1), g
            for shape in (unaligned, stride_6, short_filter):
                g = plans(shape, dtype, tf32, card)["grad_input"]
                assert g["kernel"] == "gemm" and g["deinterleaved"] == 1 and g["in_phases"] == 1, (shape, card, g)
                assert g["taps"] == -(-shape[3] // shape[5]) and g["channel_phases"] == 1, (shape, card, g)
            g = plans(not_merging, dtype, tf32, card)["grad_input"]
            assert (g["deinterleaved"], g["zero_taps"], g["taps"], g["in_phases"]) == (1, 1, 4, 1), (card, g)
            assert g["exact_family"] in ("pipelined", "warpgroup", "warp"), (card, g)
            g = plans(not_merging_narrow, dtype, tf32, card)["grad_input"]
            assert g["deinterleaved"] == 0 and g["in_phases"] == 2 and "exact_family" not in g, (card, g)
            g = plans(not_merging_stride_5, dtype, tf32, card)["grad_input"]
            assert (g["deinterleaved"], g["zero_taps"], g["taps"], g["in_phases"]) == (1, 1, 2, 1), (card, g)
            # two row tiles, and 32 rows with K % stride != 0: per phase on an A100; on an H100 the
            # per-phase plans' warpgroup tiles read grad_y element by element, and the copy's pipelines
            g = plans(two_row_tiles, dtype, tf32, card)["grad_input"]
            strict = dtype == torch.float32 and not tf32
            if card == "h100":
                assert g["deinterleaved"] == 1 and g["family"] == "pipelined", (card, g)
            else:
                assert g["deinterleaved"] == strict and (strict or g["in_phases"] > 1 and g["row_tiles"] <= 2), (card, g)
            assert plans(dilated, dtype, tf32, card)["grad_input"]["deinterleaved"] == 0
            g = plans((16, 128, 128, 5, 16384, 2, 2, 1, 1, 4), dtype, tf32, card)["grad_input"]
            if card == "h100":
                assert g["deinterleaved"] == 1 and g["family"] == "pipelined", (card, g)
            else:
                assert g["deinterleaved"] == 0 and g["in_phases"] == 2, (card, g)


@pytest.mark.parametrize("dtype, tf32", MATHS[:1] + MATHS[2:])
def test_grad_input_copies_grad_y_from_unpipelined_tiles(dtype, tf32):
    """grad_input copies grad_y deinterleaved where its per-phase plan reads grad_y element by element
    on unpipelined tiles and the copy's plan pipelines: warpgroup tiles (C_in/groups above 64), and
    mma.sync tiles of at least 32 C_in per group over 8 waves of tiles or more; narrower inputs and
    fewer tiles stay per phase (the copy's pass over grad_y costs more than it saves there)."""
    wide = (7, 192, 96, 5, 6003, 2, 1, 0, 1, 1)  # per phase: warpgroup tiles
    busy_warp = (3, 32, 16, 3, 1132489, 2, 1, 0, 1, 1)  # 32-row warp tiles, 13,272 tiles
    few_tiles = (13, 64, 32, 6, 3846, 3, 0, 2, 1, 1)  # 208 tiles
    narrow = (3, 8, 1536, 5, 466, 5, 0, 0, 1, 1)  # C_in 8
    for shape in (wide, busy_warp):
        g = plans(shape, dtype, tf32, "h100")["grad_input"]
        assert g["deinterleaved"] == 1 and g["family"] == "pipelined" and g["in_phases"] == 1, (shape, g)
    for shape in (few_tiles, narrow):
        g = plans(shape, dtype, tf32, "h100")["grad_input"]
        assert g["deinterleaved"] == 0 and g["family"] == "warp" and g["in_phases"] == shape[5], (shape, g)
    for shape in (wide, busy_warp):  # no pipelined tiles: per phase
        g = plans(shape, dtype, tf32, "a100")["grad_input"]
        assert g["deinterleaved"] == 0 and g["in_phases"] == 2, (shape, g)


def test_dilated_grad_input_reads_grad_y_deinterleaved(monkeypatch):
    """A dilated filter whose dilation and stride are coprime reaches every phase: grad_input reads
    grad_y deinterleaved too, tap k at phase k*dilation % stride and shift k*dilation // stride, the
    (shift, phase) pairs of no tap zero (the per-phase plan the exact one), where that grid holds at
    most twice K weights or, for K >= 16, the copy's channels fit one 64-channel chunk (a narrow
    output); dilation and stride with a common factor, wide outputs with a sparse grid and short
    narrow filters stay per phase."""
    narrow = (4, 96, 2, 16, 20001, 5, 2, 0, 3, 1)  # 10 shifts x 5 phases for 16 taps; 10 channels
    long_narrow = (3, 96, 3, 32, 20001, 8, 3, 0, 3, 1)  # 12 x 8 for 32 taps
    dense = (2, 128, 128, 20, 3000, 5, 0, 0, 2, 1)  # 8 x 5 for 20 taps: at most 2K
    short_narrow = (4, 96, 2, 3, 20001, 5, 2, 0, 3, 1)  # 2 x 5 for 3 taps
    wide_sparse = (4, 512, 256, 3, 3000, 5, 2, 0, 3, 1)  # 2 x 5 for 3 taps, 1280 channels
    common_factor = (4, 96, 2, 16, 20001, 6, 2, 0, 3, 1)
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's rule: narrow outputs may pack their taps)
    for dtype, tf32 in MATHS:
        for shape, taps in ((narrow, 10), (long_narrow, 12), (dense, 8)):
            g = plans(shape, dtype, tf32, "h100")["grad_input"]
            assert (g["deinterleaved"], g["zero_taps"], g["taps"]) == (1, 1, taps) and "exact_family" in g, (shape, g)
        for shape in (short_narrow, wide_sparse, common_factor):
            g = plans(shape, dtype, tf32, "h100")["grad_input"]
            assert g["deinterleaved"] == 0 and g["zero_taps"] == 0, (shape, g)


def test_grad_weight_runs_pipelined_over_copies(monkeypatch):
    """On sm_90a in TF32 and 16-bit, grad_weight runs on the pipelined warpgroup kernel over copies
    where it does not plan on the tensors as they are: x in aligned rows where its rows are not
    16-byte multiples (no tensor map), grad_y deinterleaved where its phases do not merge (dilation
    1; grad_bias then from its own row sums; dilated filters too, rows r at r*dilation - padding,
    ceil(K / stride) taps at the dilation, but not in 3xTF32 where that leaves one tap a phase).
    Elsewhere no copies. (With the box tiles off: wide 16-bit layers take them,
    test_grad_weight_box_tiles_where_their_time_is_less; against those, the tiles plan without the
    dilated copy.)"""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")

    def weight(shape, dtype=torch.float32, tf32=True, card="h100"):
        plan = plans(shape, dtype, tf32, card)
        return plan["grad_weight"], plan["grad_bias"]["kernel"]
    for dtype in (torch.float32, torch.bfloat16):
        g, bias = weight((19, 512, 256, 2, 6237, 2, 0, 0, 1, 1), dtype)  # merged, x rows of 6237
        assert (g["aligned_x"], g["deinterleaved_grad_y"], g["merged"]) == (1, 0, 1) and g["stages"] > 0, g
        assert bias == "with_grad_weight"
        g, bias = weight((16, 1024, 512, 7, 1300, 5, 4, 3, 1, 1), dtype)  # 7 taps at stride 5
        assert g["deinterleaved_grad_y"] == 1 and g["aligned_x"] == (dtype == torch.bfloat16) and g["stages"] > 0, g
        assert g["group_taps"] == 2 and bias == "row_sums", g  # ceil(7 / 5) taps
        g, _ = weight((2, 200, 24, 3, 1500, 4, 1, 0, 1, 1), dtype)  # 24 co x 3 phases: warpgroup tiles
        assert g["kernel"] == "grad_weight_wgmma" and g["deinterleaved_grad_y"] == 1 and g["group_taps"] == 1, g
        g, _ = weight(NAMED["kb64"], dtype)
        assert (g["aligned_x"], g["deinterleaved_grad_y"]) == (0, 0), g
        g, bias = weight((8, 512, 256, 7, 2000, 2, 3, 1, 2, 1), dtype)  # dilated: 2 rows of 4 taps at dilation 2
        assert g["deinterleaved_grad_y"] == 1 and g["stages"] > 0 and bias == "row_sums", g
        with pytest.MonkeyPatch.context() as env:
            env.setenv("CONVT_GRAD_WEIGHT_DILATED_COPY", "never")
            env.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")  # (16-bit: else unrolled, for its vector copies)
            g, _ = weight((8, 512, 256, 7, 2000, 2, 3, 1, 2, 1), dtype)
            assert g["deinterleaved_grad_y"] == 0 and g["stages"] == 0, g
    for dtype, tf32, card in ((torch.float32, False, "h100"), (torch.float32, True, "a100")):
        g, _ = weight((16, 1024, 512, 7, 1300, 5, 4, 3, 1, 1), dtype, tf32, card)
        assert (g["aligned_x"], g["deinterleaved_grad_y"], g["stages"]) == (0, 0, 0), g
    # 3xTF32, dilated narrow outputs: the copy where it cuts the taps (12 at stride 4: 3 a phase), not
    # where K <= stride leaves one a phase
    g, _ = weight((2, 64, 8, 12, 3000, 4, 3, 0, 2, 1), torch.float32, False)
    assert g["deinterleaved_grad_y"] == 1, g
    g, _ = weight((2, 64, 8, 3, 3000, 4, 1, 0, 2, 1), torch.float32, False)
    assert g["deinterleaved_grad_y"] == 0, g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_weight_merges_phases_of_few_channels_on_the_pipelined_tiles(dtype, monkeypatch):
    """On sm_90a in TF32 and 16-bit, strided layers whose channels would take the mma.sync tiles (C_in
    per group at most 64 with C_out per group at most 32, or C_in at most 32) merge their phases on
    the pipelined warpgroup tiles instead (64 / stride co of stride rows a tile, x aligned where it
    has no tensor map); unmerged (stride 1) they keep the mma.sync tiles, as everywhere with
    CONVT_GRAD_WEIGHT_PIPELINED=never; with =always the pipelined tiles take any channels; 3xTF32 and
    the A100 keep the mma.sync tiles."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    merged_narrow = [(27, 64, 32, 4, 35969, 2, 1, 0, 1, 1),  # x rows of odd length: aligned
                     (5, 32, 32, 8, 76169, 8, 4, 2, 1, 1),   # 8 co of 8 phases a tile
                     (4, 3, 128, 16, 24476, 8, 4, 0, 1, 1)]  # 3 ci
    for shape in merged_narrow:
        g = plans(shape, dtype, True, "h100")["grad_weight"]
        assert g["kernel"] == "grad_weight_wgmma" and g["merged"] == 1 and g["stages"] > 0, (shape, g)
        assert g["aligned_x"] == (shape[4] * dtype.itemsize % 16 != 0), (shape, g)  # (rows of whole 16 bytes: a tensor map)
        for card, tf32 in (("a100", True), ("h100", False)):
            if tf32 or dtype == torch.float32:
                assert plans(shape, dtype, tf32, card)["grad_weight"]["kernel"] == "grad_weight_gemm", (shape, card)
    unmerged = (8, 96, 48, 11, 27993, 1, 4, 0, 1, 4)  # stride 1, groups of 24 ci x 12 co
    assert plans(unmerged, dtype, True, "h100")["grad_weight"]["kernel"] == "grad_weight_gemm"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CONVT_GRAD_WEIGHT_PIPELINED", "never")
        env.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")  # (16-bit: else over copies, for their vector copies)
        for shape in merged_narrow:
            assert plans(shape, dtype, True, "h100")["grad_weight"]["kernel"] == "grad_weight_gemm", shape
        env.setenv("CONVT_GRAD_WEIGHT_PIPELINED", "always")
        g = plans(unmerged, dtype, True, "h100")["grad_weight"]
        assert g["kernel"] == "grad_weight_wgmma" and g["stages"] > 0, g


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_narrow_outputs_grad_weight_over_grad_y_deinterleaved(card, dtype, tf32):
    """Where grad_y deinterleaved takes less MMA work, padding included, grad_weight runs over it on
    any kernel: a narrow output's tile pads its channels to 32, which the phases then fill, with
    ceil(K / stride) taps instead of K; or over grad_y unrolled by taps where that takes less time
    still (a tap a row: half the MMA work of 2 or 4 deinterleaved taps). A wide output pads nothing
    and keeps its own plan."""
    for shape in ((10, 768, 1, 16, 104445, 8, 4, 0, 1, 1), (1, 1024, 3, 3, 976562, 4, 0, 1, 1, 1),
                  (2, 128, 2, 16, 297665, 4, 6, 0, 1, 1)):  # 2, 1 and 4 taps: one tap group, not one a phase
        plan = plans(shape, dtype, tf32, card)
        g = plan["grad_weight"]
        if card == "h100" and not (dtype == torch.float32 and not tf32):  # pipelined warpgroup tiles
            # (over copies, or unpipelined on x as it is where the copy of x costs more: the next test)
            assert g["kernel"] == "grad_weight_wgmma" and (g["stages"] > 0 or not g["aligned_x"]), g
            continue
        one_tap = shape[3] <= shape[5]  # K <= stride: one deinterleaved tap, which unrolling would not thin
        assert g["deinterleaved_grad_y"] + g["unrolled_grad_y"] == 1 and (g["deinterleaved_grad_y"] == 1 or not one_tap), g
        assert g["tap_groups"] == 1 and plan["grad_bias"]["kernel"] == "row_sums", g
    if card != "h100" or (dtype == torch.float32 and not tf32):  # (h100 TF32, 16-bit: pipelined over copies)
        with pytest.MonkeyPatch.context() as env:  # (16-bit: else over the copy for its vector copies, a test of its own)
            env.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")
            g = plans((8, 512, 256, 7, 2000, 2, 3, 1, 1, 1), dtype, tf32, card)["grad_weight"]
        assert g["deinterleaved_grad_y"] == 0, g


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_grad_weight_copies_what_16_bit_tiles_would_stage_element_by_element(card, dtype, tf32, monkeypatch):
    """Unpipelined 16-bit grad_weight tiles stage x rows of odd length, and grad_y rows of odd length or
    at a stride, one element at a time, at a fraction of their vector copies' rate: where that costs
    more than copies that give them vector copies, they run over those (x in aligned rows; grad_y
    deinterleaved, at stride 1 in aligned rows), on any card. The same layer with rows of even length
    takes no copy, nor does float32 (4-byte elements copy asynchronously), nor a short layer, where
    the copies' launches would cost more (measured 2x slower over them). CONVT_GRAD_WEIGHT_ELEMENT_COPIES
    =never plans as before the rule (no copies), =always over the copies wherever they plan."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    sixteen_bit = dtype != torch.float32

    def weight(shape, setting=None):
        with pytest.MonkeyPatch.context() as env:
            if setting:
                env.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", setting)
            return plans(shape, dtype, tf32, card)["grad_weight"]

    def copies(g):
        return g["aligned_x"], g["deinterleaved_grad_y"]
    odd_x = (1, 64, 64, 15, 934977, 1, 7, 0, 1, 2)     # groups of 32 x 32, x and grad_y rows of odd length
    strided = (1, 96, 48, 5, 442533, 4, 2, 0, 1, 2)    # x rows of odd length, grad_y at stride 4
    short = (8, 2, 32, 9, 2327, 4, 1, 1, 1, 1)         # 48 µs of grad_weight on an H200
    for shape in (odd_x, strided):
        g = weight(shape)
        assert copies(g) == ((1, 1) if sixteen_bit else (0, 0)) and g["stages"] == 0, (shape, g)
        if sixteen_bit:
            assert g["x_copy_elements"] > 1 and g["gy_copy_elements"] == 8, (shape, g)
        never = weight(shape, "never")
        assert copies(never) == (0, 0) and never["x_copy_elements"] == 1, (shape, never)
    even_x = odd_x[:4] + (odd_x[4] + 1,) + odd_x[5:]
    assert copies(weight(even_x)) == (0, 0)
    g = weight(short)
    assert copies(g) == (0, 0), g
    if sixteen_bit:
        assert g["x_copy_elements"] == 1 and g["gy_copy_elements"] == 1, g
        assert copies(weight(short, "always")) != (0, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_weight_copies_x_where_the_pipelined_kernel_pays_for_it(dtype):
    """grad_weight runs the pipelined kernel over x copied into aligned rows only where that kernel's
    time and the copy's are at most the unpipelined plan's on x as it is: a narrow output of few taps
    over a long x (C_out 3, K 1: little MMA work a position, the copy of x is most of the time) keeps
    x as it is; 16 taps over 128 channels copy it (more MMA work a position of x)."""
    keeps = plans((1, 1024, 3, 1, 976562, 1, 0, 0, 1, 1), dtype, True, "h100")["grad_weight"]
    assert keeps["kernel"] == "grad_weight_wgmma" and keeps["aligned_x"] == 0 and keeps["stages"] == 0, keeps
    copies = plans((2, 128, 2, 16, 297665, 4, 6, 0, 1, 1), dtype, True, "h100")["grad_weight"]
    assert copies["kernel"] == "grad_weight_wgmma" and copies["aligned_x"] == 1 and copies["stages"] > 0, copies


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_weight_warpgroup_tap_slots_and_slices(dtype, monkeypatch):
    """Pipelined warpgroup grad_weight tiles take the tap slots (1-4, every group of a plan with as
    many) whose tiles do the least work, a tile a tap's work more: K 5 at stride 1 in groups of 3 + 2,
    not 4 + 1; K 9 in 3 x 3; K 7 in 4 + 3; 5 merged taps (K 10 at stride 2) in 3 + 2. Unpipelined ones
    the most taps a phase has (2 to 3 taps a phase: 3; 17 or 18: 4). Pipelined slices make about two
    waves of blocks on the H100's 132 SMs, more where two waves leave one part-empty: 192 tiles in 2
    slices (3 waves of half tiles), 100 in 5; 128 tiles keep 2 (256 blocks: two waves all but full).
    (With the box tiles off, and the dilated copy: the unpipelined cases are dilated filters in place.)"""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_DILATED_COPY", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")  # (16-bit: else unpipelined ones run over copies)

    def weight(shape):
        g = plans(shape, dtype, True, "h100")["grad_weight"]
        assert g["kernel"] == "grad_weight_wgmma", g
        return g
    for shape, slots, groups in (((16, 1536, 512, 5, 1300, 1, 2, 0, 1, 1), 3, 2), ((2, 768, 512, 9, 300, 1, 4, 0, 1, 1), 3, 3),
                                 ((4, 256, 256, 7, 1000, 1, 3, 0, 1, 1), 4, 2), ((2, 136, 72, 10, 700, 2, 3, 0, 1, 1), 3, 2)):
        g = weight(shape)
        assert g["stages"] > 0 and (g["group_taps"], g["tap_groups"]) == (slots, groups), (shape, g)
    for shape, slots in (((2, 1024, 512, 9, 14085, 4, 10, 0, 3, 4), 3), ((15, 96, 48, 86, 2707, 5, 125, 0, 3, 1), 4)):
        g = weight(shape)
        assert g["stages"] == 0 and g["group_taps"] == slots, (shape, g)
    for shape, tiles, slices in (((16, 1536, 512, 5, 1300, 1, 2, 0, 1, 1), 192, 2), ((16, 1280, 640, 1, 1300, 1, 0, 0, 1, 1), 100, 5),
                                 ((13, 1024, 512, 3, 1662, 2, 0, 0, 1, 1), 128, 2)):
        g = weight(shape)
        assert (g["stages"] > 0, g["tiles"], g["slices"]) == (True, tiles, slices), (shape, g)


@pytest.mark.parametrize("dtype,tf32,card", [(torch.float32, True, "h100"), (torch.bfloat16, True, "h100"),
                                             (torch.float32, False, "h100"), (torch.float32, True, "a100")])
def test_narrow_outputs_take_grad_weight_over_grad_y_unrolled(dtype, tf32, card, monkeypatch):
    """Narrow outputs with several taps (any stride and dilation) run grad_weight over grad_y unrolled
    by taps, one tap of C_out * K channels, where that at least halves the MMA work, the copy
    included: the tiles' padded channels then take the taps. Not wide layers, nor long filters whose
    copy would outweigh what it saves; grad_bias then from grad_y's row sums. (With the box tiles
    off: in TF32 they read a wide layer's grad_y unrolled, test_tf32_box_tiles_over_grad_y_rows.)"""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    for shape in ((6, 1024, 1, 40, 127166, 10, 39, 5, 2, 1), (1, 512, 4, 9, 1953125, 1, 12, 2, 3, 1),
                  (1, 768, 1, 7, 1302083, 1, 6, 0, 2, 1), (2, 136, 1, 12, 3001, 5, 9, 0, 2, 1)):
        plan = plans(shape, dtype, tf32, card)
        g = plan["grad_weight"]
        assert g["unrolled_grad_y"] == 1 and g["deinterleaved_grad_y"] == 0 and g["tap_groups"] == 1, (shape, g)
        assert plan["grad_bias"]["kernel"] == "row_sums"
    for shape in ((16, 1536, 512, 5, 1300, 1, 2, 0, 1, 1), (14, 256, 64, 127, 6496, 8, 122, 0, 2, 1),
                  (5, 128, 32, 90, 49875, 8, 122, 7, 3, 1), (4, 256, 1, 1, 5000, 1, 0, 0, 1, 1)):
        assert plans(shape, dtype, tf32, card)["grad_weight"].get("unrolled_grad_y", 0) == 0, shape


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_grad_weight_of_wide_dilations_over_grad_y_unrolled(dtype, tf32):
    """Where no tiles plan on x's own problem (taps a dilation of 100 or more apart: their window
    outgrows the tiles' x rows), grad_weight runs on the tensor cores, not on the direct kernel: over
    grad_y unrolled by taps (one tap at shift 0) where no other copy plans, at any dilation (the
    copy's windows then hold fewer taps each, unroll_window). A stride of 900 leaves no window of 8 positions in the
    copy's 24 KB of float32 (of 16-bit elements they fit), and no unrolled plan."""
    for shape in ((2, 64, 3, 5, 2000, 1, 4, 0, 100, 1), (4, 96, 24, 3, 7000, 2, 0, 1, 512, 1),
                  (1, 32, 3, 5, 300, 1, 100, 0, 3000, 1)):
        g = plans(shape, dtype, tf32, "h100")["grad_weight"]
        assert g["kernel"] in ("grad_weight_gemm", "grad_weight_wgmma") and (g["unrolled_grad_y"] or g["deinterleaved_grad_y"]), (shape, g)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CONVT_GRAD_WEIGHT_UNROLLED", "always")
        env.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
        g = plans((2, 24, 2, 3, 100, 900, 5, 0, 1, 1), dtype, tf32, "h100")["grad_weight"]
        assert g["unrolled_grad_y"] == int(dtype != torch.float32), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_weight_unrolls_where_tap_groups_restage_x(dtype, monkeypatch):
    """grad_weight's choice of grad_y unrolled by taps weighs time, not MMA work alone: the tiles'
    reads count, each tap group staging x again, and unpipelined tiles run at half the pace. Narrow
    outputs whose taps spread over several tap groups (stride and dilation putting each in its own
    phase) take the unrolled copy, one tile reading x once (measured on an H200, 4-8x faster on the
    first three); so does a wider layer whose unrolled copy pipelines. Plans with merged phases keep
    them, and so does a short wide layer whose unrolled tiles would come in more waves (both
    measured slower unrolled). (With the box tiles off, and the dilated copy, which the first two take
    else: the first's, at K <= stride, the same copy as the unrolled one.)"""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_DILATED_COPY", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")  # (16-bit: the copies for vector copies weighed too)
    for shape in ((3, 64, 3, 7, 388877, 8, 5, 0, 3, 1), (3, 64, 4, 16, 116357, 10, 18, 0, 3, 1),
                  (9, 64, 4, 9, 337481, 1, 4, 0, 1, 1), (14, 555, 224, 12, 3355, 6, 9, 4, 3, 1)):
        with monkeypatch.context() as env:
            env.setenv("CONVT_GRAD_WEIGHT_UNROLLED", "never")
            never = plans(shape, dtype, True, "h100")["grad_weight"]
        g = plans(shape, dtype, True, "h100")["grad_weight"]
        assert never["tap_groups"] > 1 and g["unrolled_grad_y"] == 1 and g["tap_groups"] == 1, (shape, never, g)
    for shape in ((2, 256, 2, 32, 77818, 8, 10, 6, 1, 1), (10, 128, 1, 20, 162619, 10, 5, 0, 1, 1),
                  (9, 557, 499, 9, 121, 6, 13, 0, 4, 1)):
        assert plans(shape, dtype, True, "h100")["grad_weight"]["unrolled_grad_y"] == 0, shape


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_grad_weight_tiles_take_several_small_groups(dtype, tf32):
    """grad_weight's mma.sync tiles (32 ci x 32 co) over groups of at most 16 ci and 16 co take as
    many consecutive groups as fit (their products across groups computed, not stored): a quarter of
    the tiles at 8 x 8 channels a group. Groups that fill a tile, and warpgroup tiles, take one."""
    for shape, packed in (((1, 256, 256, 9, 226993, 1, 12, 0, 3, 32), 4), ((12, 128, 64, 7, 96165, 1, 9, 0, 3, 16), 4),
                          ((4, 512, 512, 3, 6405, 3, 2, 1, 2, 32), 2), ((16, 128, 128, 5, 16384, 2, 2, 1, 1, 4), 1)):
        g = plans(shape, dtype, tf32, "h100")["grad_weight"]
        assert g["kernel"] == "grad_weight_gemm" and g["packed_groups"] == packed, (shape, g)
        groups = shape[9]
        assert g["tiles"] == -(-groups // packed) * g["tap_groups"], (shape, g)
    g = plans((8, 512, 256, 7, 2000, 2, 3, 1, 1, 1), dtype, tf32, "h100")["grad_weight"]
    assert g.get("packed_groups", 1) == 1, g  # (16-bit: the box tiles, one group a tile)


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_grad_weight_tile_slices_take_several_items(dtype, tf32, monkeypatch):
    """grad_weight's mma.sync tiles cut their items into slices of at least four items (a block's
    fixed work is worth several): 16,256,256,5,702,g16's 8-16 tiles of 192 items take 48 slices, not
    one a block of one item; every mma.sync plan of random layers holds four items a slice or has one
    slice. CONVT_GRAD_WEIGHT_SLICE_ITEMS=1 gives v121's slices (one item a slice there)."""
    shape = (16, 256, 256, 5, 702, 1, 0, 0, 1, 16)
    g = plans(shape, dtype, tf32, "h100")["grad_weight"]
    assert g["kernel"] == "grad_weight_gemm" and g["items"] == 192 and g["slices"] == 48, g
    for layer in random_shapes(150, seed=122):
        g = plans(layer, dtype, tf32, "h100")["grad_weight"]
        if g["kernel"] == "grad_weight_gemm":
            assert g["slices"] == 1 or g["items"] // g["slices"] >= 4, (layer, g)
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_SLICE_ITEMS", "1")
    g = plans(shape, dtype, tf32, "h100")["grad_weight"]
    assert g["slices"] > 48 and -(-g["items"] // g["slices"]) <= 2, g
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_SLICE_ITEMS", "0")
    with pytest.raises(Exception, match="CONVT_GRAD_WEIGHT_SLICE_ITEMS"):
        plans(shape, dtype, tf32, "h100")


def test_grad_bias_row_sums_take_warps_or_blocks_by_price(monkeypatch):
    """grad_bias's row sums (where grad_weight does not sum it) take a warp a row where the rows are
    short, however few (16,256,256,5,702,g16's 4,096 rows of 706: one wave of warps where blocks of
    256 would run four of mostly idle threads), a block a row where rows are few and long, and a
    block a row segment where even those leave SMs idle (2 rows of ~100K: 6 segments).
    CONVT_ROW_SUM_WARPS=always|never takes one form."""
    for dtype, tf32 in MATHS:
        for shape, form in (((16, 256, 256, 5, 702, 1, 0, 0, 1, 16), (1, 1)), ((3, 16, 24, 3, 352, 2, 1, 1, 2, 1), (1, 1)),
                            ((3, 16, 24, 3, 4099, 2, 1, 1, 2, 1), (0, 1)), ((2, 16, 1, 3, 50001, 2, 1, 1, 2, 1), (0, 6))):
            bias = plans(shape, dtype, tf32, "h100")["grad_bias"]
            assert (bias["kernel"], bias["warp_rows"], bias["segments"]) == ("row_sums", *form), (shape, bias)
    shape = (16, 256, 256, 5, 702, 1, 0, 0, 1, 16)
    monkeypatch.setenv("CONVT_ROW_SUM_WARPS", "never")
    assert plans(shape, torch.bfloat16, True, "h100")["grad_bias"] == {"kernel": "row_sums", "warp_rows": 0, "segments": 1}
    monkeypatch.setenv("CONVT_ROW_SUM_WARPS", "always")
    assert plans((2, 16, 1, 3, 50001, 2, 1, 1, 2, 1), torch.bfloat16, True, "h100")["grad_bias"]["warp_rows"] == 1


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_grad_weight_tiles_store_partial_sums_taps_first_on_request(dtype, tf32, monkeypatch):
    """With CONVT_GRAD_WEIGHT_TAPS_FIRST=always the mma.sync and warpgroup grad_weight tiles store
    their partial sums taps first (a warp's stores of a tap along co); by default they keep grad_w's
    order; the box tiles keep it always."""
    shapes = random_shapes(60, seed=124)
    tiles = ("grad_weight_gemm", "grad_weight_wgmma")
    for setting, wanted in (("", 0), ("never", 0), ("always", 1)):
        monkeypatch.setenv("CONVT_GRAD_WEIGHT_TAPS_FIRST", setting)
        kernels = set()
        for layer in shapes:
            g = plans(layer, dtype, tf32, "h100")["grad_weight"]
            kernels.add(g["kernel"])
            if g["kernel"] in tiles:
                assert g["taps_first"] == wanted, (setting, layer, g)
        assert kernels & set(tiles), kernels


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_zero_tap_merge_follows_its_override(dtype, tf32, monkeypatch):
    """CONVT_ZERO_TAP_MERGE=never plans every forward per phase (no zero taps, no exact plan beside
    it); =always merges every forward the model merges and more (where the per-phase plan can stand
    as the exact one); the default is the model's choice between the two."""
    shapes = [shape for shape in random_shapes(80, seed=96) if shape[5] > 1 and shape[3] > shape[5] and shape[3] % shape[5]]
    shapes.append((9, 2, 256, 17, 2189, 8, 4, 0, 1, 1))
    merged = {}
    for setting in ("", "never", "always"):
        monkeypatch.setenv("CONVT_ZERO_TAP_MERGE", setting)
        merged[setting] = {shape for shape in shapes if plans(shape, dtype, tf32, "h100")["forward"].get("zero_taps")}
        if setting == "never":
            for shape in shapes:
                assert "exact_family" not in plans(shape, dtype, tf32, "h100")["forward"], shape
    assert not merged["never"] and merged[""] and merged[""] <= merged["always"], merged
    assert (9, 2, 256, 17, 2189, 8, 4, 0, 1, 1) in merged[""]


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_zero_tap_layers_of_the_cuda_tests_merge(dtype, tf32):
    """The layers that test_cuda.py (overlapped launches) and test_special_values.py (Inf and NaN in x)
    run as zero-tap merged forwards, with their gated exact plans, stay merged on an H100: their
    coverage of the merged rows' flag does not vanish with a planner change."""
    for shape in [(3, 4, 128, 17, 1801, 8, 4, 0, 1, 1), (2, 256, 128, 7, 3000, 5, 3, 0, 1, 1), (5, 96, 1, 5, 8500, 3, 1, 0, 1, 1),
                  (2, 96, 1, 5, 8499, 3, 1, 0, 1, 1)]:
        forward = plans(shape, dtype, tf32, "h100")["forward"]
        assert forward.get("zero_taps") == 1 and "exact_family" in forward, (shape, forward)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 4, 1024, 11, 430, 5, 3, 0, 1, 1), (2, 10, 448, 8, 25242, 5, 1, 0, 1, 1)], ids=str)
def test_wide_zero_tap_forward_keeps_its_staged_per_phase_plan(shape, dtype, monkeypatch):
    """A wide TF32 or 16-bit forward of few MACs an output (a few input channels) whose per-phase plan
    stages its output rows stays per phase, where CONVT_ZERO_TAP_MERGE=always would merge it with
    zero taps: that plan writes whole rows, while the merged tiles store pairs of phases apart."""
    forward = plans(shape, dtype, True, "h100")["forward"]
    assert not forward.get("zero_taps") and forward["stage_output"] == 1, forward
    monkeypatch.setenv("CONVT_ZERO_TAP_MERGE", "always")
    assert plans(shape, dtype, True, "h100")["forward"].get("zero_taps") == 1


def test_depthwise_forward_splits_wide_channel_multipliers():
    """One input channel with a wide channel multiplier on short rows (a narrow input): the depthwise
    forward's blocks take a share of a row's output channels, so that the blocks fill the SMs; a
    depthwise layer with rows enough keeps each row's channels in one block."""
    narrow_in = plans((14, 1, 512, 5, 310, 2, 3, 0, 2, 1), torch.float32, True, "h100")["forward"]
    assert narrow_in["kernel"] == "depthwise" and 14 * narrow_in["co_blocks"] >= 3 * 132, narrow_in  # (about 4 an SM)
    assert plans(NAMED["depthwise"], torch.float32, True, "h100")["forward"]["co_blocks"] == 1


def test_merged_phases_only_where_they_merge():
    for shape in random_shapes(200, seed=5):
        n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = shape
        plan = plans(shape, torch.bfloat16, True, "h100")["forward"]
        if plan["kernel"] == "gemm" and plan["row_phases"] > 1:
            # rows a phase with a tap: every phase, or a short filter's K (its column's positions the stride's)
            assert stride > 1 and plan["column_positions"] == stride, (shape, plan)
            short = k < stride and dilation == 1
            assert plan["row_phases"] == (k if short and k > 1 else stride), (shape, plan)
            assert plan["stored_row_phases"] == (k if short else stride), (shape, plan)
            if dilation > 1:  # a narrow output's dilated filter, zero taps
                assert (c_out // groups) * stride <= 64 and plan["zero_taps"] and "exact_family" in plan, (shape, plan)
                continue
            # zero taps, an exact plan beside: narrow outputs; wide ones where they add at most half the MACs
            padded = k > stride and ((c_out // groups) * stride <= 64 or 2 * -(-k // stride) * stride <= 3 * k)
            assert k % stride == 0 or k < stride or padded, (shape, plan)
            assert plan["zero_taps"] == (k > stride and k % stride != 0) == ("exact_family" in plan), (shape, plan)


@pytest.mark.parametrize("dtype, tf32", MATHS)
def test_one_tap_merges_only_narrow_outputs(dtype, tf32, monkeypatch):
    """K = 1 at stride 2 or more: a narrow output (C_out/groups x stride <= 64: its rows in one tile)
    merges its phases into rows, the tapless ones not stored (256 -> 32 at stride 2); a wide one runs
    its one phase with a tap alone (merged it would run stride x its MACs); CONVT_ONE_TAP_MERGE=always
    merges a wide one at stride 2, as before v121."""
    narrow, wide = (4, 256, 32, 1, 20000, 2, 0, 1, 1, 1), (9, 293, 273, 1, 11408, 2, 0, 1, 1, 1)
    merged = plans(narrow, dtype, tf32, "h100")["forward"]
    assert merged["kernel"] == "gemm" and merged["row_phases"] == 2 and merged["stored_row_phases"] == 1, merged
    for shape in (wide, (9, 293, 273, 1, 11408, 3, 0, 2, 1, 1)):
        alone = plans(shape, dtype, tf32, "h100")["forward"]
        assert alone["kernel"] == "gemm" and alone["row_phases"] == 1, (shape, alone)
    monkeypatch.setenv("CONVT_ONE_TAP_MERGE", "always")
    forced = plans(wide, dtype, tf32, "h100")["forward"]
    assert forced["row_phases"] == 2 and forced["stored_row_phases"] == 1, forced


def test_reduction_split_where_few_parts_reduce_long(monkeypatch):
    """A warp-tile plan whose parts leave the SMs idle over a long reduction splits each out phase's
    steps over parts that fill them, fp32 slices within the 16 MB workspace bound: grad_input of 8 input
    channels under 1536 output channels, 16 taps, 90 positions (3 tiles, 96 steps each). Plans that fill
    the SMs do not split, nor pipelined or staged-output ones; CONVT_GEMM_SPLITS=never turns it off,
    `always` splits wherever it applies."""
    narrow_in = (3, 8, 1536, 16, 90, 8, 4, 0, 1, 1)
    for dtype, tf32 in MATHS:
        g = plans(narrow_in, dtype, tf32, "h100")["grad_input"]
        assert g["family"] == "warp" and g["splits"] >= 8 and g["parts"] == g["tiles"] * g["splits"], (dtype, tf32, g)
        assert g["parts"] <= 2 * 132 and beside_weight(g) <= 16 << 20, g
    forward = plans((2, 1024, 24, 5, 60, 1, 2, 0, 1, 1), torch.bfloat16, True, "h100")["forward"]  # 2 tiles, 32 chunks
    assert forward["family"] == "warp" and forward["splits"] > 1, forward
    for shape in NAMED.values():
        for dtype, tf32 in MATHS:
            plan = plans(shape, dtype, tf32, "h100")
            for name in ("forward", "grad_input"):
                g = plan[name]
                if g["kernel"] == "gemm" and (g["parts"] >= 132 or g["family"] != "warp" or g["stage_output"]):
                    assert g["splits"] == 1, (shape, name, g)
    monkeypatch.setenv("CONVT_GEMM_SPLITS", "never")
    assert plans(narrow_in, torch.float32, True, "h100")["grad_input"]["splits"] == 1
    monkeypatch.setenv("CONVT_GEMM_SPLITS", "always")
    g = plans((2, 12, 600, 6, 64, 3, 0, 0, 1, 2), torch.bfloat16, True, "h100")["grad_input"]
    assert g["family"] == "warp" and g["splits"] > 1, g


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_chunk_ranges_sum_in_fp32(dtype, workspace_16mb, monkeypatch):
    """A 16-bit weight of more than 16 MB over few warp tiles (1 x 768 -> 384, K = 92 at 7,391
    positions: 54 MB; 64-row tiles of 9 MB, a launch of 58 tiles each) launches ranges of chunks over
    every row tile, their sums accumulated in one fp32 slice of out's shape that the packed weight
    shares the 16 MB with (float_sums); pipelined plans keep ranges of row tiles. (The warp tiles as
    v104 chose them: CONVT_NARROWER_PIPELINED=never, else the 32-row pipelined tiles take this layer.)"""
    monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")
    g = plans((1, 768, 384, 92, 7391, 1, 45, 0, 1, 1), dtype, True, "h100")["forward"]
    assert g["family"] == "warp" and g["float_sums"] == 1 and g["splits"] == 1, g
    assert g["launch_row_tiles"] == g["row_tiles"] and 1 <= g["launch_chunks"] < g["chunks"], g
    assert g["workspace_bytes"] <= 16 << 20, g
    pipelined = plans((1, 768, 768, 64, 4731, 1, 31, 0, 1, 1), dtype, True, "h100")["forward"]
    assert pipelined["family"] == "pipelined" and pipelined["float_sums"] == 0, pipelined
    assert pipelined["launch_chunks"] == pipelined["chunks"] and pipelined["launch_row_tiles"] < pipelined["row_tiles"], pipelined


def test_grad_weight_box_tiles_where_their_time_is_less(monkeypatch):
    """On sm_90a, 16-bit grad_weight takes the box tiles over grad_y copied channels-last (by phase at
    stride > 1) where they apply and their time model gives them less time than the other tiles':
    128 ci x up to 256 (tap slot, co) columns, a slot whole 64-co boxes. Wide layers on short rows
    (10,1280,1280,7,299,s4; hifigan_up0, 0.86x the merged tiles' time measured on an H200), at any
    stride and dilation, long filters (15,256,256,40,2875,s8,d3: launches of 32 taps' maps), and
    narrower ones where the margin is wide (13,150,90,12,9491,s4,d4); not
    kb64 (128 x 128 channels on rows of 65,536 positions: 2.9x slower measured), nor layers of 64
    output channels on long rows (21,128,64,2,43153,s2: 2.5x). (TF32's box tiles read grad_y's rows,
    not a channels-last copy: test_tf32_box_tiles_over_grad_y_rows.) Not without wgmma;
    CONVT_GRAD_WEIGHT_BOXES=always takes them wherever they apply, `never` nowhere. A plan's shared
    memory holds the tile's staged sums."""
    wide = (8, 1280, 1280, 5, 1159, 1, 2, 0, 1, 1)
    for shape in (wide, (10, 1280, 1280, 7, 299, 4, 1, 0, 1, 1), (4, 768, 512, 9, 1000, 3, 4, 1, 2, 1),
                  (13, 150, 90, 12, 9491, 4, 7, 3, 4, 1), NAMED["hifigan_up0"], (15, 256, 256, 40, 2875, 8, 0, 0, 3, 1)):
        for dtype in (torch.bfloat16, torch.float16):
            g = plans(shape, dtype, True, "h100")["grad_weight"]
            assert g["kernel"] == "grad_weight_boxes" and g["channels_last_grad_y"] == 1, (shape, g)
            assert g["aligned_x"] == int(shape[4] % 8 != 0), (shape, g)  # (rows of 16-byte multiples: x as it is)
            assert g["box_columns"] in (64, 128, 256) and g["block_co"] % 64 == 0, g
            assert g["box_columns"] == g["block_co"] * g["box_slots"] and g["tap_groups"] == -(-shape[3] // g["box_slots"]), g
            # the epilogue stages the tile's fp32 sums in the stages' bytes: 128 ci rows at a pitch of
            # the slots' co and 8 more floats each, rounded to 8 mod 32 (plan.h's box_staging_pitch)
            columns = g["box_slots"] * (g["block_co"] + 8)
            assert g["smem_bytes"] >= 128 * 4 * (columns + (40 - columns % 32) % 32), g
            assert plans(shape, dtype, True, "h100")["grad_bias"]["kernel"] == "row_sums"
    assert plans(wide, torch.bfloat16, True, "a100")["grad_weight"]["kernel"] != "grad_weight_boxes"
    narrow = (21, 128, 64, 2, 43153, 2, 0, 0, 1, 1)
    for shape in (narrow, NAMED["kb64"]):
        assert plans(shape, torch.bfloat16, True, "h100")["grad_weight"]["kernel"] == "grad_weight_wgmma", shape
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "always")
    assert plans(narrow, torch.bfloat16, True, "h100")["grad_weight"]["kernel"] == "grad_weight_boxes"
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    assert plans(wide, torch.bfloat16, True, "h100")["grad_weight"]["kernel"] == "grad_weight_wgmma"


def test_tf32_box_tiles_over_grad_y_rows(monkeypatch):
    """On sm_90a, TF32 grad_weight takes the box tiles with grad_y K-major (TF32's B has no N-major
    form): over grad_y's own rows where the problem is at stride 1 and every tap's shift a multiple of
    16 bytes (K = 1, or taps 4 positions apart), else over grad_y unrolled by taps (one tap at shift
    0, C_out * K channels), where their time model gives them less time than the other tiles' at
    kTf32GradWTilesFactor (1.8) times the 16-bit fit: wide layers (measured on an H200: 13,1536,
    1536,3,201,s8 2.6x, 16,1536,768,7,262,s8 2.9x, 3,1280,1280,7,1300,s8 1.6x faster; hifigan_up0),
    not long filters on few channels (2,128,64,16,113759,s8: 4.8x slower; 9,128,64,64,6191,s10:
    3.1x), nor where the unrolled copy would pass 1 GB (kb64). Strict float32 (3xTF32) and cards
    without wgmma never."""
    def weight(shape, dtype=torch.float32, tf32=True, card="h100"):
        return plans(shape, dtype, tf32, card)["grad_weight"]
    for shape in ((13, 1536, 1536, 3, 201, 8, 0, 5, 1, 1), (16, 1536, 768, 7, 262, 8, 0, 1, 1, 1), (3, 1280, 1280, 7, 1300, 8, 0, 1, 1, 1),
                  NAMED["hifigan_up0"]):
        g = weight(shape)
        assert g["kernel"] == "grad_weight_boxes" and (g["unrolled_grad_y"], g["channels_last_grad_y"]) == (1, 0), (shape, g)
        assert (g["tap_groups"], g["box_slots"]) == (1, 1) and g["box_ns"] <= g["tiles_ns"], (shape, g)
        assert summary(g).endswith("unrolled_grad_y"), summary(g)  # (the benchmark's plan column names the copy)
        assert weight(shape, tf32=False)["kernel"] != "grad_weight_boxes"
        assert weight(shape, card="a100")["kernel"] != "grad_weight_boxes"
    own_rows = weight((16, 1536, 768, 1, 1300, 1, 0, 0, 1, 1))
    assert own_rows["kernel"] == "grad_weight_boxes" and own_rows["unrolled_grad_y"] == 0, own_rows
    for shape in ((2, 128, 64, 16, 113759, 8, 4, 0, 1, 1), (9, 128, 64, 64, 6191, 10, 20, 5, 1, 1), NAMED["kb64"]):
        assert weight(shape)["kernel"] == "grad_weight_wgmma", shape
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "always")
    for shape, unrolled in (((2, 96, 72, 3, 800, 1, 4, 0, 4, 1), 0), ((2, 96, 72, 3, 800, 1, 3, 0, 4, 1), 1),
                            ((3, 136, 80, 1, 701, 1, 0, 0, 1, 1), 1), ((2, 96, 80, 1, 500, 3, 0, 2, 1, 1), 1)):
        g = weight(shape)  # (shifts -4, 0, 4: own rows; -3, 1, 5: unrolled; rows of 701 floats, or strided: unrolled)
        assert g["kernel"] == "grad_weight_boxes" and g["unrolled_grad_y"] == unrolled, (shape, g)
    assert weight(NAMED["kb64"])["kernel"] == "grad_weight_wgmma"  # (its unrolled copy: 6.4 GB)


def test_box_choice_shows_both_estimates():
    """The box tiles are weighed against the other tiles by two time models; explain shows both
    estimates (box_ns, tiles_ns) where they were weighed, and the choice follows them: the box tiles
    where theirs is at most the other's, in 16-bit and TF32, on wide and narrow layers alike."""
    shapes = ((10, 1280, 1280, 7, 299, 4, 1, 0, 1, 1), NAMED["hifigan_up0"], (16, 1024, 512, 4, 1300, 2, 1, 0, 1, 1),
              (8, 1280, 1280, 5, 1159, 1, 2, 0, 1, 1), (3, 1024, 1024, 3, 4418, 1, 1, 0, 1, 2),
              (13, 150, 90, 12, 9491, 4, 7, 3, 4, 1), (4, 302, 156, 7, 1739, 6, 9, 0, 4, 1), NAMED["kb64"])
    weighed = {torch.bfloat16: 0, torch.float32: 0}
    for shape in shapes:
        for dtype in weighed:
            g = plans(shape, dtype, True, "h100")["grad_weight"]
            if dtype == torch.float32 and "box_ns" not in g:  # (TF32 box tiles over grad_y K-major: not every layer)
                continue
            assert g["box_ns"] > 0 and g["tiles_ns"] > 0, (shape, dtype, g)
            assert (g["kernel"] == "grad_weight_boxes") == (g["box_ns"] <= g["tiles_ns"]), (shape, dtype, g)
            weighed[dtype] += 1
    assert weighed[torch.float32] >= 4, weighed


def test_small_16bit_layers_take_the_box_tiles():
    """Mid-sized 16-bit layers (steps of 0.1-0.3 ms) whose grad_weight the box tiles run in about half
    the warpgroup tiles' time (docs/perf/2026-12-06-small-grad-weight.md): the box tiles' fixed time is
    below their whole time there, so they are taken; kb64's long rows of 128 channels keep the tiles."""
    for shape in ((24, 128, 64, 5, 1186, 2, 1, 0, 1, 1), (2, 256, 256, 7, 3347, 2, 2, 0, 1, 2),
                  (5, 256, 256, 3, 2022, 2, 0, 0, 1, 1), (4, 512, 512, 3, 556, 2, 0, 0, 1, 1)):
        assert plans(shape, torch.bfloat16, True, "h100")["grad_weight"]["kernel"] == "grad_weight_boxes", shape
    assert plans(NAMED["kb64"], torch.bfloat16, True, "h100")["grad_weight"]["kernel"] == "grad_weight_wgmma"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_h100_named_shapes(dtype):
    """The choices the benchmark table rests on (docs/design.md §4)."""
    kb64 = plans(NAMED["kb64"], dtype, True, "h100")
    assert tile(kb64["forward"]) == ("pipelined", 128, 256) and kb64["forward"]["stages"] >= 3
    assert kb64["grad_weight"]["kernel"] == "grad_weight_wgmma" and kb64["grad_weight"]["stages"] >= 2
    assert kb64["grad_bias"]["kernel"] == "with_grad_weight"
    up0 = plans(NAMED["hifigan_up0"], dtype, True, "h100")
    assert up0["forward"]["family"] == "pipelined" and up0["forward"]["row_phases"] == 8
    assert up0["grad_input"]["family"] == "pipelined"  # deinterleaved (1024 MACs a grad_y element at stride 8)
    assert (up0["grad_input"]["deinterleaved"], up0["grad_input"]["channel_phases"]) == (1, 1)
    # (the box tiles: 16-bit 0.86x the merged tiles' time measured on an H200; TF32 over grad_y unrolled)
    assert up0["grad_weight"]["kernel"] == "grad_weight_boxes"
    kb74 = plans(NAMED["kb74"], dtype, True, "h100")
    assert tile(kb74["forward"]) == ("pipelined", 64, 256)
    kb79 = plans(NAMED["kb79"], dtype, True, "h100")  # strided, dilated: the staged-output warp tiles
    assert tile(kb79["forward"]) == ("warp", 64, 256) and kb79["forward"]["stage_output"] == 1
    assert plans(NAMED["depthwise"], dtype, True, "h100")["forward"]["kernel"] == "depthwise"
    small = plans(NAMED["small"], dtype, True, "h100")["forward"]
    assert tile(small) == ("warp", 32, 128)  # a few tiles: the smallest that fills the SMs


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_workspace_bound_splits_the_weight_over_launches(card, dtype, tf32, monkeypatch):
    """A 1536 -> 768, K 16, stride 8 upsampler's weight packs to 72 MB (TF32), 144 MB (3xTF32): by
    default in one launch, the workspace that packed weight and at most 16 MB beside it; under
    CONVT_MAX_WORKSPACE_MB=16 its launches take ranges of row tiles or of chunks, each within 16 MB."""
    weight_bytes = dtype.itemsize  # (3xTF32 on pipelined tiles packs two parts)
    for shape in [(4, 1536, 768, 16, 200, 8, 4, 0, 1, 1), (1, 1024, 1024, 64, 100, 1, 0, 0, 1, 1)]:
        _, c_in, c_out, k = shape[:4]
        monkeypatch.delenv("CONVT_MAX_WORKSPACE_MB", raising=False)
        for name, g in plans(shape, dtype, tf32, card).items():
            if name in ("forward", "grad_input"):
                assert g["kernel"] == "gemm" and g["launch_row_tiles"] == g["row_tiles"] and g["launch_chunks"] == g["chunks"], g
                assert weight_bytes * c_in * c_out * k <= g["packed_weight_bytes"] <= g["workspace_bytes"], (shape, name, g)
                assert beside_weight(g) <= 16 << 20, (shape, name, g)
        monkeypatch.setenv("CONVT_MAX_WORKSPACE_MB", "16")
        for name, g in plans(shape, dtype, tf32, card).items():
            if name in ("forward", "grad_input"):
                assert g["kernel"] == "gemm" and g["workspace_bytes"] <= 16 << 20, (shape, name, g)
                assert 1 <= g["launch_row_tiles"] < g["row_tiles"] or 1 <= g["launch_chunks"] < g["chunks"], (shape, name, g)


@pytest.mark.parametrize("value", ["0", "-4", "16MB", "2TB", "1.5", "lots"])
@pytest.mark.parametrize("variable,unit,shape", [
    ("CONVT_MAX_WORKSPACE_MB", "megabytes", (4, 1536, 768, 16, 200, 8, 4, 0, 1, 1)),
    ("CONVT_COPY_BANDWIDTH_GBPS", "GB/s", (1, 512, 512, 3, 18814, 2, 0, 0, 1, 1)),
    ("CONVT_GRAD_Y_ELEMENT_PACE_TENTHS", "tenths", (2, 256, 256, 11, 8267, 1, 5, 0, 1, 16)),
])
def test_planner_numbers_name_a_bad_value(variable, unit, shape, value, monkeypatch):
    """The planner's numeric variables (read_whole_number) reject anything but a whole number from 1,
    naming the variable and its unit."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(Exception, match=f"{variable} must be a whole number of {unit}"):
        plans(shape, torch.bfloat16, True, "h100")


@pytest.mark.parametrize("value", ["warp", "warp:48x128", "pipelined:128x512", "tiles:128x128", "warp:32x128:merged",
                                   "pipelined:128"])
def test_forced_gemm_tile_names_a_bad_value(value, monkeypatch):
    """CONVT_GEMM_TILE (a screen's forced tile shape) rejects anything but FAMILY:MxN[:unmerged] naming
    a tile shape of the planner, naming the variable; a good value plans that tile."""
    monkeypatch.setenv("CONVT_GEMM_TILE", value)
    with pytest.raises(Exception, match="CONVT_GEMM_TILE must be warp|warpgroup|pipelined:MxN"):
        plans((2, 64, 64, 5, 3000, 2, 2, 0, 1, 1), torch.bfloat16, True, "h200")
    monkeypatch.setenv("CONVT_GEMM_TILE", "warp:64x128")
    assert tile(plans((2, 64, 64, 5, 3000, 2, 2, 0, 1, 1), torch.bfloat16, True, "h200")["forward"]) == ("warp", 64, 128)


def test_forced_gemm_tile_refuses_what_the_kernels_lack(monkeypatch):
    """A forced one-accumulator pipelined tile (128 x 256) plans no phase pair (a stride-2 forward whose
    two out phases a tile holds in two accumulator sets: launch_pipelined_gemm has no such kernel);
    the layer goes to the direct kernels, while 128 x 128 plans the phase pair."""
    layer = (2, 96, 64, 3, 200, 2, 0, 0, 1, 1)
    for value in ("pipelined:128x256", "pipelined:128x256:unmerged"):
        monkeypatch.setenv("CONVT_GEMM_TILE", value)
        assert plans(layer, torch.float32, True, "h200")["forward"]["kernel"] == "direct", value
    monkeypatch.setenv("CONVT_GEMM_TILE", "pipelined:128x128")
    forward = plans(layer, torch.float32, True, "h200")["forward"]
    assert tile(forward) == ("pipelined", 128, 128) and forward["out_phases"] == 2, forward


def test_copy_bandwidth_prices_the_copies(monkeypatch):
    """The copies' model prices a pass over a copy at its bandwidth, CONVT_COPY_BANDWIDTH_GBPS (GB/s)
    where set: a 16-bit stride-2 grad_input takes its channels-last copy of grad_y at the default
    rate (2 TB/s), and the deinterleaved plan where copies run at half that or slower."""
    shape, dtype = (1, 512, 512, 3, 18814, 2, 0, 0, 1, 1), torch.bfloat16
    monkeypatch.delenv("CONVT_COPY_BANDWIDTH_GBPS", raising=False)
    monkeypatch.setenv("CONVT_FRAGMENT_TAPS", "never")  # (the deinterleaved plan priced as boxes, v104's model)
    g = plans(shape, dtype, True, "h200")["grad_input"]
    assert g["channels_last_grad_y"] == 1 and summary(g).endswith(" over channels-last grad_y"), g
    for slower in ("1000", "100"):
        monkeypatch.setenv("CONVT_COPY_BANDWIDTH_GBPS", slower)
        g = plans(shape, dtype, True, "h200")["grad_input"]
        assert g["channels_last_grad_y"] == 0 and "copies" not in summary(g) and "grad_y" not in summary(g), g


def test_grad_y_element_pace_prices_the_grad_y_copy(monkeypatch):
    """grad_weight's model charges a grad_y row staged one element at a time at stride 1 its pace: 3
    with several taps, 2 with one, CONVT_GRAD_Y_ELEMENT_PACE_TENTHS where set (a screen's variable):
    a bf16 layer of 16 taps and odd length takes the deinterleaved copy at the default pace and keeps
    grad_y as it is at 2; a one-tap layer keeps grad_y at the default; a strided layer's pace stays the
    stride's (2 + 0.5 a stride step), its plan the same."""
    taps, one_tap = (5, 5, 256, 16, 25876, 1, 7, 0, 1, 1), (3, 30, 273, 1, 47507, 1, 0, 0, 1, 1)
    strided = (30, 64, 32, 3, 2349, 2, 0, 0, 1, 1)
    monkeypatch.delenv("CONVT_GRAD_Y_ELEMENT_PACE_TENTHS", raising=False)
    assert plans(taps, torch.bfloat16, True, "h100")["grad_weight"]["deinterleaved_grad_y"] == 1
    assert plans(one_tap, torch.bfloat16, True, "h100")["grad_weight"]["deinterleaved_grad_y"] == 0
    strided_plan = plans(strided, torch.bfloat16, True, "h100")["grad_weight"]
    monkeypatch.setenv("CONVT_GRAD_Y_ELEMENT_PACE_TENTHS", "20")
    assert plans(taps, torch.bfloat16, True, "h100")["grad_weight"]["deinterleaved_grad_y"] == 0
    assert plans(strided, torch.bfloat16, True, "h100")["grad_weight"] == strided_plan


def test_summary_names_the_copies_of_x():
    """planner.summary names the copies a forward runs over (so tools/plan_changes.py sees a change of
    copies alone): a wide bf16 layer's forward over channels-last copies of x in chunks of the batch."""
    f = plans((16, 1024, 512, 7, 1300, 5, 1, 0, 1, 1), torch.bfloat16, True, "h200")["forward"]
    assert f["copy_batch"] > 0 and f["copy_channels_last"] == 1, f
    assert summary(f).endswith(f" over channels-last copies of x, {f['copy_batch']} a chunk"), summary(f)


def test_h200_plans_as_h100():
    for shape in list(NAMED.values()) + random_shapes(30, seed=6):
        assert plans(shape, torch.float32, True, "h200") == plans(shape, torch.float32, True, "h100")


def test_bad_requests_raise():
    with pytest.raises(RuntimeError, match="device must be"):
        explain(1, 8, 8, 3, 16, device="tpu")
    with pytest.raises(RuntimeError, match="sizes out of range"):
        explain(1, 8, 8, 3, 16, groups=3)
    with pytest.raises(RuntimeError, match="empty"):
        explain(1, 8, 8, 1, 1, padding=2)


def test_bench_explain_prints_every_pass():
    from torch_convt_op.bench import SHAPES, explain_table
    table = explain_table([SHAPES["kb64"], SHAPES["depthwise"]], ["tf32", "fp32", "bf16"], "a100")
    assert "plans for a100" in table and table.count("\n") == 1 + 6
    assert "gemm warp 128x128" in table and "depthwise" in table
    # every named shape and dtype on a card with wgmma: hifigan_up0's 16-bit grad_weight on box tiles
    table = explain_table(list(SHAPES.values()), ["tf32", "fp32", "bf16"], "h100")
    assert table.count("\n") == 1 + 3 * len(SHAPES)
    assert "grad_weight_boxes 128x4x64 4 stages over aligned_x + channels_last_grad_y" in table, table


def test_bench_explain_names_this_cpus_forms(monkeypatch, capsys):
    """`bench --explain cpu`: a CPU form (a CONVT_CPU_FORMS name) per shape, dtype and pass; tf32 refused."""
    from torch_convt_op import bench
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    bench.main(["--explain", "cpu", "--shapes", "kb64,depthwise", "--dtypes", "fp32,fp64"])
    table = capsys.readouterr().out
    assert "plans for cpu" in table and table.count("\n") == 2 + 4, table
    forms = {"direct", "taps", "unrolled", "folded", "packed", "packed_copy", "streamed", "scatter", "tap_rows", "dot",
             "positions", "sum"}
    for line in table.splitlines()[2:]:
        named = [cell.split()[0] for cell in line.split(None, 2)[2].split("|")]
        assert len(named) == 4 and set(named) <= forms, line
    with pytest.raises(SystemExit):
        bench.main(["--explain", "cpu", "--dtypes", "tf32"])


def test_busy_grad_input_reads_grad_y_copied_channels_last():
    """sm_90 16-bit and TF32 grad_input over grad_y copied channels-last (deinterleaved at stride > 1),
    read as position rows, where a grad_x element sums at least 256 products (C_out/groups * K) and
    the model has the copy's plan at most 0.9x the time of the plan on grad_y: wide strided layers
    whose plans load A's fragments in registers; not a narrow output (memory-bound), not strict
    float32 (not even forced: CONVT_GRAD_INPUT_COPIES=always), not an A100, and `never` turns it off."""
    wide = (10, 1024, 512, 2, 828, 2, 0, 0, 1, 1)  # deinterleaved without zero taps
    zero_taps = (11, 1536, 1536, 7, 298, 4, 1, 0, 1, 1)  # deinterleaved with zero taps: exact plan on grad_y
    long_filter = (14, 768, 384, 78, 329, 4, 37, 0, 1, 1)
    narrow = (3, 96, 3, 8, 179153, 4, 2, 0, 1, 1)  # 24 products an element
    for shape in (wide, zero_taps, long_filter):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            g = plans(shape, dtype, True, "h100")["grad_input"]
            assert g["channels_last_grad_y"] == 1 and g["position_rows"] == 1 and g["family"] == "pipelined", (shape, g)
            assert g["deinterleaved"] == 1 and g["channel_phases"] == 1, (shape, g)
            assert plans(shape, dtype, True, "a100")["grad_input"]["channels_last_grad_y"] == 0
        assert plans(shape, torch.float32, False, "h100")["grad_input"]["channels_last_grad_y"] == 0
    g = plans(zero_taps, torch.bfloat16, True, "h100")["grad_input"]
    assert g["zero_taps"] == 1 and g["exact_family"] in ("pipelined", "warpgroup", "warp"), g
    assert 0 < g["copy_ns"] <= 0.9 * g["grad_y_ns"], g  # (explain shows the model's two estimates)
    for dtype in (torch.bfloat16, torch.float32):
        assert plans(narrow, dtype, True, "h100")["grad_input"]["channels_last_grad_y"] == 0
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CONVT_GRAD_INPUT_COPIES", "always")
        assert plans(narrow, torch.bfloat16, True, "h100")["grad_input"]["channels_last_grad_y"] == 1
        assert plans(wide, torch.float32, False, "h100")["grad_input"]["channels_last_grad_y"] == 0
        env.setenv("CONVT_GRAD_INPUT_COPIES", "never")
        assert plans(wide, torch.bfloat16, True, "h100")["grad_input"]["channels_last_grad_y"] == 0
        assert plans(wide, torch.float32, True, "h100")["grad_input"]["channels_last_grad_y"] == 0


def test_busy_grad_input_reads_grad_y_deinterleaved_rather_than_in_place(monkeypatch):
    """Phases merged in place load fragments at a stride in shared memory, a cost that grows with the
    MMA work: where a grad_y element feeds at least 1024 MACs (C_in/groups * K/stride; 1536 for
    16-bit elements below 8 phases, whose loads move half the words), grad_input reads grad_y
    deinterleaved (on the GEMM: C_out 1, K 16 would take the packed taps)."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")
    for shape, copied_16_bit in (((2, 1024, 512, 16, 1300, 8, 4, 0, 1, 1), True), ((16, 1536, 512, 4, 1300, 2, 1, 0, 1, 1), True),
                                 ((2, 1040, 24, 16, 1201, 8, 4, 3, 1, 1), True), ((10, 768, 1, 16, 104445, 8, 4, 0, 1, 1), True),
                                 (NAMED["hifigan_up0"], True), ((2, 512, 256, 16, 3131, 8, 4, 0, 1, 1), True),
                                 ((4, 512, 256, 8, 3000, 4, 2, 0, 1, 1), False), ((8, 512, 256, 4, 2000, 2, 1, 0, 1, 1), False)):
        for dtype in (torch.float32, torch.bfloat16):
            copied = copied_16_bit or dtype.itemsize == 4
            g = plans(shape, dtype, True, "h100")["grad_input"]
            assert (g["deinterleaved"], g["channel_phases"]) == ((1, 1) if copied else (0, shape[5])), (shape, g)


def test_grad_input_deinterleave_override(monkeypatch):
    """CONVT_GRAD_INPUT_DEINTERLEAVE=always reads grad_y deinterleaved wherever that plans (here a
    16-bit grad_input the model keeps merged in place), never keeps every grad_input on grad_y as it
    is (here one the model copies)."""
    in_place, copied = (4, 512, 256, 8, 3000, 4, 2, 0, 1, 1), (2, 1024, 512, 16, 1300, 8, 4, 0, 1, 1)
    monkeypatch.setenv("CONVT_GRAD_INPUT_COPIES", "never")  # (grad_y itself or its deinterleaved copy)
    assert plans(in_place, torch.bfloat16, True, "h100")["grad_input"]["deinterleaved"] == 0
    assert plans(copied, torch.bfloat16, True, "h100")["grad_input"]["deinterleaved"] == 1
    monkeypatch.setenv("CONVT_GRAD_INPUT_DEINTERLEAVE", "always")
    assert plans(in_place, torch.bfloat16, True, "h100")["grad_input"]["deinterleaved"] == 1
    monkeypatch.setenv("CONVT_GRAD_INPUT_DEINTERLEAVE", "never")
    assert plans(copied, torch.bfloat16, True, "h100")["grad_input"]["deinterleaved"] == 0


def test_narrow_problems_with_few_taps_a_step_run_pipelined(monkeypatch):
    """Fewer than 8 rows and at most 192 MACs an element of `in` in 16-row tiles (12 taps a step, in
    every math: 3xTF32's warp tiles would pad the same rows): the pipelined kernel streams `in` where
    warp tiles would not."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    for shape, pass_ in (((1, 512, 1, 1, 1953125, 1, 0, 0, 1, 1), "forward"), ((1, 512, 2, 3, 1953125, 1, 2, 0, 2, 1), "forward"),
                         ((1, 512, 2, 5, 1953125, 1, 4, 0, 2, 1), "forward"), ((1, 512, 2, 13, 1953125, 1, 6, 0, 1, 1), "forward"),
                         ((2, 3, 96, 3, 30001, 1, 1, 0, 1, 1), "grad_input")):
        for dtype, tf32 in MATHS:
            g = plans(shape, dtype, tf32, "h100")[pass_]
            taps = shape[3]
            pipelined = 16 * taps <= 192
            assert (g["family"] == "pipelined" and g["block_m"] == 16) == pipelined, (shape, dtype, tf32, g)
    wider = plans((2, 200, 12, 3, 20001, 1, 0, 0, 1, 1), torch.float32, True, "h100")["forward"]  # 12 rows, 3 taps
    assert wider["family"] == "pipelined" and wider["block_m"] == 16, wider  # (the 8-32 rows' rule)


@pytest.mark.parametrize("dtype,tf32", MATHS)
def test_groups_of_8_to_32_rows_run_pipelined_where_it_pays(dtype, tf32, monkeypatch):
    """A forward or grad_input of 8-32 rows a group runs on the pipelined 16 or 32-row tiles, in runs
    of at most 16 taps, where over several out phases an output takes at least 32 MACs and, where a
    phase's taps take several runs (x staged again a run), a staged element feeds at least 512 MMA
    products a run: 32-row tiles, or 16-row tiles in 3xTF32 (three products a MAC); else on warp
    tiles. CONVT_NARROW_ROWS_PIPELINED=never keeps the warp tiles, always takes the pipelined ones."""
    strict = dtype == torch.float32 and not tf32
    cases = [  # (shape, pass, pipelined by the model)
        ((2, 200, 12, 3, 20001, 1, 1, 0, 1, 1), "forward", True),       # 12 rows, 3 taps
        ((22, 32, 16, 5, 18359, 2, 1, 0, 1, 1), "forward", True),       # strided, 80 MACs an output
        ((5, 8, 256, 16, 62014, 1, 7, 0, 1, 1), "grad_input", True),    # 8 rows, steps of 16 taps
        ((1, 32, 16, 64, 600000, 1, 27, 0, 1, 1), "forward", strict),   # 16 rows, runs of 16 of 64 taps
        ((2, 16, 16, 97, 160499, 1, 48, 0, 1, 1), "grad_input", strict),
        ((1, 64, 32, 64, 116264, 1, 31, 0, 1, 1), "forward", True),     # 32 rows, runs of 16 of 64 taps
        ((3, 32, 32, 128, 80077, 5, 61, 0, 1, 1), "grad_input", True),  # 32 rows, 128 taps, strided
        ((2, 8, 16, 4, 1773314, 2, 1, 0, 1, 1), "forward", False),      # strided, 16 MACs an output
    ]
    for shape, pass_, model in cases:
        for choice, expected in (("", model), ("never", False), ("always", True)):
            if choice == "always" and not model:
                continue  # (where a pipelined plan exists, which not every math has for these)
            monkeypatch.setenv("CONVT_NARROW_ROWS_PIPELINED", choice)
            g = plans(shape, dtype, tf32, "h100")[pass_]
            assert g["kernel"] == "gemm" and g["family"] == ("pipelined" if expected else "warp"), (shape, choice, g)
            if expected:
                assert g["block_m"] in (16, 32) and g["step_taps"] <= 16, (shape, choice, g)


def test_depthwise_forward_walks_its_phase_taps_where_it_skips_enough():
    """The depthwise forward visits only its output's phase's taps, tap_step = stride / gcd(dilation,
    stride) apart, where that skips 4 or more of an output's K taps (the walk's own cost: a table
    lookup and a loop of unknown step); else every tap (tap_step 1). CONVT_DEPTHWISE_PHASE_TAPS=
    always / never take it wherever it skips any / nowhere; grad_input never. (Strict fp32: one input
    channel of 512 outputs takes the GEMM in TF32.)"""
    cases = {  # (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups): tap_step
        (1, 1, 512, 16, 23524, 8, 4, 0, 1, 1): 8,     # skips 14 of 16
        (10, 1, 64, 10, 5435, 5, 2, 0, 1, 1): 5,      # 8 of 10
        (11, 512, 1024, 16, 908, 2, 7, 0, 1, 512): 2,  # 8 of 16
        (4, 64, 64, 12, 9000, 6, 3, 0, 4, 64): 3,     # gcd(4, 6) = 2: 8 of 12
        (14, 192, 192, 5, 477, 2, 1, 0, 1, 192): 1,    # 2.5 of 5
        (12, 768, 768, 4, 2740, 4, 1, 2, 1, 768): 1,   # 3 of 4
        (4, 128, 128, 4, 22370, 2, 2, 0, 2, 128): 1,   # dilation 2 at stride 2: every tap in one phase
        (16, 256, 256, 7, 16384, 1, 3, 0, 1, 256): 1,  # stride 1
    }
    for shape, tap_step in cases.items():
        plan = plans(shape, torch.float32, False, "h100")
        assert plan["forward"]["kernel"] == "depthwise" and plan["forward"]["tap_step"] == tap_step, (shape, plan)
        assert plan["grad_input"]["kernel"] != "depthwise" or plan["grad_input"]["tap_step"] == 1, (shape, plan)
    for setting, expected in (("always", 2), ("never", 1)):
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("CONVT_DEPTHWISE_PHASE_TAPS", setting)
            assert plans((14, 192, 192, 5, 477, 2, 1, 0, 1, 192), torch.float32, True, "h100")["forward"]["tap_step"] == expected
            assert plans((16, 256, 256, 7, 16384, 1, 3, 0, 1, 256), torch.float32, True, "h100")["forward"]["tap_step"] == 1


def test_groups_of_few_channels_merge_into_one_gemm_group(monkeypatch):
    """A forward whose groups have fewer than 32 output channels (16-bit) or at most 8 (TF32) merges
    G of them into one GEMM group with a block-diagonal weight, the largest G that plans within 128
    merged channels, not onto the unpipelined warpgroup tiles (6 x 96 -> 96 in 16 groups: 6,240 tiles
    of 16 x 256 padding 6 rows to 16, against 390 of 128 x 256); so does grad_input by its rows, the
    input channels of a group. Not strict fp32, not groups of 32 rows or more; CONVT_GROUP_MERGE=
    always merges wherever a merge plans, =never nowhere. Not where the depthwise kernels take the
    groups."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    small = (6, 96, 96, 5, 16578, 1, 2, 0, 1, 16)
    plan = plans(small, torch.bfloat16, False, "h100")
    assert plan["forward"]["merged_groups"] == 16 and plan["forward"]["tiles"] * 8 < 6240, plan
    assert plan["grad_input"]["merged_groups"] == 16, plan
    wide_inputs = (2, 512, 96, 5, 16578, 1, 2, 0, 1, 16)  # grad_input: 32 rows a group
    plan = plans(wide_inputs, torch.bfloat16, False, "h100")
    assert plan["forward"]["merged_groups"] > 1 and plan["grad_input"]["merged_groups"] == 1, plan
    assert plans(small, torch.float32, True, "h100")["forward"]["merged_groups"] > 1
    assert plans(small, torch.float32, False, "h100")["forward"]["merged_groups"] == 1
    twelve_rows = (2, 96, 96, 7, 33927, 1, 3, 0, 1, 8)
    assert plans(twelve_rows, torch.bfloat16, False, "h100")["forward"]["merged_groups"] == 8
    assert plans(twelve_rows, torch.float32, True, "h100")["forward"]["merged_groups"] == 1
    named_grouped = (16, 128, 128, 5, 16384, 2, 2, 1, 1, 4)  # 32 rows a group
    assert plans(named_grouped, torch.bfloat16, False, "h100")["forward"]["merged_groups"] == 1
    with pytest.MonkeyPatch.context() as monkeypatch:  # (v104's strided plans: 16 groups merge with strided stores first)
        monkeypatch.setenv("CONVT_STRIDED_STORES_FIRST", "never")
        no_warpgroup = plans((14, 96, 96, 16, 2092, 4, 21, 0, 3, 16), torch.bfloat16, False, "h100")["forward"]
        assert no_warpgroup["merged_groups"] == 8 and no_warpgroup["family"] == "pipelined", no_warpgroup
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("CONVT_GROUP_MERGE", "never")
        assert plans(small, torch.bfloat16, False, "h100")["forward"]["merged_groups"] == 1
        monkeypatch.setenv("CONVT_GROUP_MERGE", "always")
        assert plans(small, torch.bfloat16, False, "h100")["grad_input"]["merged_groups"] == 16
        assert plans(named_grouped, torch.bfloat16, False, "h100")["forward"]["merged_groups"] > 1
        wide = plans((2, 1024, 1024, 3, 3969, 2, 1, 0, 2, 2), torch.bfloat16, False, "h100")["forward"]
        assert wide["merged_groups"] == 1, wide
        depthwise = plans((2, 32, 64, 16, 900, 2, 7, 0, 1, 32), torch.float32, True, "h100")
        assert depthwise["forward"]["kernel"] == "depthwise" and "merged_groups" not in depthwise["forward"], depthwise


def test_tapless_phases_stage_whole_rows_on_warp_tiles():
    """A strided forward some of whose out phases no tap reaches, whose output of a reached phase
    takes at most 256 MACs (1,024 where half the phases or more are tapless), runs on warp tiles with
    staged output (64 x 128, else 32 x 128, that fill the SMs) in place of warpgroup or warp tiles'
    phase-strided stores, in every math; not where a pipelined plan is taken or an output takes more
    MACs (588 MACs with 1 of 5 phases tapless, 1,026 with 3 of 6, 1,280 with 2 of 3), nor in TF32
    and 16-bit where 2 or more phases are reached over 128 or more channels a group (v114).
    CONVT_STAGED_WARP_TILES=never: the tiles' phase-strided stores."""
    for dtype, tf32 in MATHS:
        staged = plans((4, 7, 64, 9, 8000, 4, 6, 0, 2, 1), dtype, tf32, "h100")["forward"]  # 64 rows, 2 of 4 phases
        assert tile(staged) == ("warp", 64, 128) and staged["stage_output"] == 1, staged
        staged = plans((2, 2, 512, 8, 697, 8, 3, 0, 2, 1), dtype, tf32, "h100")["forward"]  # 2 of 8 phases
        assert tile(staged) == ("warp", 32, 128) and staged["stage_output"] == 1, staged
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("CONVT_STAGED_WARP_TILES", "never")
            direct = plans((2, 2, 512, 8, 697, 8, 3, 0, 2, 1), dtype, tf32, "h100")["forward"]
            assert direct["stage_output"] == 0, direct
    for dtype, tf32 in ((torch.bfloat16, False), (torch.float32, True)):
        staged = plans((9, 80, 123, 4, 2590, 6, 0, 0, 2, 1), dtype, tf32, "h100")["forward"]
        assert tile(staged) == ("warp", 32, 128) and staged["stage_output"] == 1, staged
        assert tile(plans((4, 60, 189, 7, 2000, 4, 4, 0, 2, 1), dtype, tf32, "h100")["forward"]) == ("warp", 64, 128)
        # (more MACs: not staged; the warpgroup tiles' phase-strided stores, or the pipelined plans that
        # take their place: narrower row tiles, strided stores from kStridedStoreWarpgroupMacs)
        for shape in ((2, 588, 431, 4, 553, 5, 2, 0, 3, 1), (4, 768, 384, 5, 12113, 3, 5, 0, 3, 3),
                      (2, 342, 584, 7, 1198, 6, 3, 0, 2, 1)):  # 588 x 1, 256 x 5, 342 x 3
            forward = plans(shape, dtype, tf32, "h100")["forward"]
            assert forward["family"] in ("warpgroup", "pipelined") and forward["stage_output"] == 0, (shape, forward)
        staged = plans((3, 117, 126, 4, 4560, 5, 1, 0, 2, 1), dtype, tf32, "h100")["forward"]  # 4 of 5 reached
        assert tile(staged) == ("warp", 64, 128) and staged["stage_output"] == 1, staged
        # (155 channels over 3 of 5 reached phases: the pipelined tiles' strided stores, v114)
        assert plans((13, 155, 168, 3, 437, 5, 1, 0, 3, 1), dtype, tf32, "h100")["forward"]["family"] == "pipelined"
        pipelined = plans((4, 105, 153, 7, 1938, 3, 8, 0, 3, 1), dtype, tf32, "h100")["forward"]
        assert pipelined["family"] == "pipelined", pipelined
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("CONVT_STAGED_WARP_TILES", "never")
            assert plans((9, 80, 123, 4, 2590, 6, 0, 0, 2, 1), dtype, tf32, "h100")["forward"]["family"] == "warpgroup"


def test_staged_rows_where_no_staged_tile_fills_the_sms():
    """Where no staged warp tile fills the SMs, the one of most parts (32 x 128) still takes a strided
    forward that the store rules stage, whatever share of the SMs it fills (120 and 20 parts of
    132), in every math. CONVT_STAGED_PART_FILL=never: only tiles that fill the SMs, so these store
    each phase out_step apart (warpgroup or 64-row warp tiles)."""
    layers = {(2, 51, 147, 9, 1477, 6, 6, 3, 2, 1): 120, (1, 51, 147, 9, 400, 6, 6, 3, 2, 1): 20,
              (6, 8, 64, 8, 1048, 8, 3, 7, 2, 1): 108}
    for dtype, tf32 in MATHS:
        for shape, parts in layers.items():
            staged = plans(shape, dtype, tf32, "h100")["forward"]
            assert tile(staged) == ("warp", 32, 128) and staged["stage_output"] == 1 and staged["parts"] == parts, (shape, staged)
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("CONVT_STAGED_PART_FILL", "never")
            for shape in layers:
                assert plans(shape, dtype, tf32, "h100")["forward"]["stage_output"] == 0, shape


def test_tapless_phases_of_wide_groups_run_pipelined_strided_stores():
    """A strided forward some of whose out phases no tap reaches, of few MACs an output (the tapless
    rule's staged warp tiles), runs on pipelined tiles with strided stores in TF32 and 16-bit where two
    or more phases are reached and a group has at least 128 input channels; one reached phase (K = 1)
    or fewer channels stay on staged warp tiles. CONVT_TAPLESS_PIPELINED=never: staged everywhere."""
    pipelined = [(4, 144, 93, 2, 47225, 6, 0, 2, 3, 1), (5, 225, 73, 2, 30857, 4, 0, 0, 3, 1)]  # 2 phases reached
    staged = [(14, 39, 117, 7, 1143, 4, 1, 1, 2, 1),  # 39 channels
              (9, 144, 372, 1, 2428, 5, 0, 4, 1, 1)]  # K = 1: one phase reached
    for dtype, tf32 in MATHS:
        if dtype == torch.float32 and not tf32:
            continue  # (3xTF32 keeps its plans)
        for shape in pipelined:
            plan = plans(shape, dtype, tf32, "h100")["forward"]
            assert plan["family"] == "pipelined" and plan["out_phases"] == 2 and plan["stage_output"] == 0, (shape, plan)
        for shape in staged:
            plan = plans(shape, dtype, tf32, "h100")["forward"]
            assert plan["family"] == "warp" and plan["stage_output"] == 1, (shape, plan)
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("CONVT_TAPLESS_PIPELINED", "never")
            for shape in pipelined:
                plan = plans(shape, dtype, tf32, "h100")["forward"]
                assert plan["family"] == "warp" and plan["stage_output"] == 1, (shape, plan)


def test_groups_of_few_channels_run_depthwise():
    """Groups of 2-8 input channels whose product with the output channels a group is at most 16 run
    their backward passes on the depthwise kernels, and their forward (which stages the group's
    input rows and loops over all of their taps) with at most 4 input and 2 output channels a
    group; wider groups on tensor cores."""
    for shape, forward_depthwise in (((15, 64, 32, 5, 29509, 4, 0, 0, 1, 32), True), ((11, 96, 32, 9, 6182, 1, 8, 0, 2, 32), True),
                                     ((7, 256, 64, 7, 8000, 3, 2, 0, 1, 32), False), ((4, 64, 64, 5, 63657, 3, 1, 0, 1, 16), False),
                                     ((13, 96, 32, 16, 3784, 2, 5, 0, 1, 32), True), ((16, 96, 96, 5, 9644, 4, 0, 0, 1, 32), False),
                                     ((6, 192, 96, 4, 30000, 2, 1, 0, 1, 48), True)):
        for dtype, tf32 in MATHS:
            plan = plans(shape, dtype, tf32, "h100")
            kernels = [plan[name]["kernel"] for name in ("forward", "grad_input", "grad_weight")]
            assert kernels == ["depthwise" if forward_depthwise else "gemm", "depthwise", "depthwise"], (shape, plan)
    wide = plans((4, 64, 64, 5, 63657, 3, 1, 0, 1, 8), torch.float32, True, "h100")  # 8 x 8 a group
    assert wide["forward"]["kernel"] == "gemm" and wide["grad_weight"]["kernel"] != "depthwise", wide


def test_strict_narrow_merge_weighs_the_merged_tiles_own_rows(monkeypatch):
    """A strict-fp32 narrow output merges its zero-tap phases where the merged tiles' rows x merged
    taps are at most the per-phase tiles' rows x K (one output channel at stride 4: 16 rows, 8 taps
    of 16), except dense layers at stride 2, whose per-phase tiles hold both phases of a column pair
    (grouped ones merge)."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    dilated = (2, 256, 1, 16, 529871, 4, 5, 2, 2, 1)  # 8 merged taps of 16
    merged = plans(dilated, torch.float32, False, "h100")["forward"]
    assert merged["zero_taps"] == 1 and merged["block_m"] == 16 and merged["family"] == "pipelined", merged
    assert plans((1, 1024, 3, 3, 976562, 2, 0, 0, 1, 1), torch.float32, False, "h100")["forward"]["zero_taps"] == 0
    assert plans((8, 128, 3, 3, 19953, 5, 1, 0, 3, 1), torch.float32, False, "h100")["forward"]["zero_taps"] == 1
    assert plans((6, 64, 64, 9, 121145, 2, 0, 1, 1, 16), torch.float32, False, "h100")["forward"]["zero_taps"] == 1


def test_one_input_channel_forward_takes_the_gemm_where_its_pipelined_plan_pays():
    """One input channel a group with at least 64 outputs a group: the forward on the GEMM kernels
    where the plan is pipelined and an output has MACs enough for the padded channel (K over the
    phases its taps reach: TF32 any, 3xTF32 3, 16-bit 4 or x's rows by TMA), else depthwise; grad_input and narrower groups stay
    depthwise. CONVT_ONE_CHANNEL_GEMM=never keeps every one depthwise, always sends every one that
    plans to the GEMM, forward and grad_input."""
    def kernels(shape, dtype, tf32):
        plan = plans(shape, dtype, tf32, "h100")
        return plan["forward"]["kernel"], plan["grad_input"]["kernel"]

    long_filter = (5, 1, 1024, 16, 2978, 1, 7, 0, 1, 1)
    two_taps = (1, 1, 512, 2, 55468, 1, 0, 0, 1, 1)  # 16-bit: rows of 55468 elements, no TMA
    for dtype, tf32 in MATHS:
        assert kernels(long_filter, dtype, tf32) == ("gemm", "depthwise"), (dtype, tf32)
    assert kernels(two_taps, torch.float32, True) == ("gemm", "depthwise")
    assert kernels(two_taps, torch.float32, False) == ("depthwise", "depthwise")
    assert kernels(two_taps, torch.bfloat16, False) == ("depthwise", "depthwise")
    nine_taps_over_four_phases = (2, 1, 64, 9, 15744, 4, 2, 1, 1, 1)
    assert kernels(nine_taps_over_four_phases, torch.float32, True) == ("gemm", "depthwise")
    assert kernels(nine_taps_over_four_phases, torch.float32, False) == ("depthwise", "depthwise")
    assert kernels((7, 1, 128, 3, 31648, 1, 0, 0, 1, 1), torch.bfloat16, False) == ("gemm", "depthwise")  # TMA rows
    assert kernels((2, 1, 32, 16, 3000, 1, 7, 0, 1, 1), torch.float32, True) == ("depthwise", "depthwise")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("CONVT_ONE_CHANNEL_GEMM", "never")
        assert kernels(long_filter, torch.float32, True) == ("depthwise", "depthwise")
        monkeypatch.setenv("CONVT_ONE_CHANNEL_GEMM", "always")
        assert kernels(two_taps, torch.bfloat16, False) == ("gemm", "gemm")
        assert kernels((2, 1, 32, 16, 3000, 1, 7, 0, 1, 1), torch.float32, True) == ("depthwise", "depthwise")


def test_depthwise_grad_input_splits_wide_output_channels_over_blocks():
    """Few (n, ci) rows of many output channels would leave the SMs idle: depthwise grad_input splits
    C_out/groups over blocks (their sums added in order by a second kernel, at most 2 x 4 x SMs x
    2048 values), as the forward does; many rows keep one block a row segment."""
    for shape in ((1, 1, 1536, 5, 575, 5, 2, 3, 1, 1), (6, 1, 512, 8, 535, 4, 12, 0, 4, 1), (2, 1, 256, 4, 27510, 1, 1, 0, 1, 1)):
        for card, sms in (("h100", 132), ("a100", 108)):
            g = plans(shape, torch.float32, True, card)["grad_input"]
            n, c_out, l_in = shape[0], shape[2], shape[4]
            blocks = n * -(-l_in // 2048)
            assert g["kernel"] == "depthwise" and 1 < g["co_blocks"] <= c_out, (shape, card, g)
            assert 2 * g["co_blocks"] * blocks >= min(4 * sms, c_out * blocks), (shape, card, g)  # about four blocks an SM
            assert g["co_blocks"] * n * l_in <= 2 * 4 * sms * 2048, (shape, g)
    many_rows = plans((16, 512, 512, 5, 4000, 2, 2, 0, 1, 512), torch.float32, True, "h100")["grad_input"]
    assert many_rows["kernel"] == "depthwise" and many_rows["co_blocks"] == 1, many_rows


def test_depthwise_short_rows_take_row_groups():
    """Depthwise rows shorter than a block's 2048-output segment share a block: the most row groups
    (a power of two up to 8, groups of 32 threads or more) whose segment holds a whole row, while the
    rows' blocks still number four an SM; long rows, and few rows, keep one row a block."""
    depthwise = (12, 768, 768, 4, 125, 3, 0, 0, 1, 768)  # forward rows of 376 outputs, grad_input's of 125 inputs
    for dtype, tf32 in MATHS:
        g = plans(depthwise, dtype, tf32, "h100")
        assert g["forward"]["kernel"] == "depthwise" and g["forward"]["row_groups"] == 4, g["forward"]
        assert g["grad_input"]["kernel"] == "depthwise" and g["grad_input"]["row_groups"] == 8, g["grad_input"]
    for shape in ((12, 768, 768, 4, 3000, 3, 0, 0, 1, 768), (1, 64, 64, 3, 100, 1, 1, 0, 1, 64)):  # long rows; 64 rows
        g = plans(shape, torch.float32, True, "h100")
        assert g["forward"]["row_groups"] == 1 and g["grad_input"]["row_groups"] == 1, (shape, g)
    for _, case in sweep.draw_shapes(200, 76, "cuda"):
        for name, g in plans(case.sizes, torch.bfloat16, False, "h100").items():
            if isinstance(g, dict) and g.get("kernel") == "depthwise" and "row_groups" in g:
                length = case.sizes[4] if name == "grad_input" else None
                assert g["row_groups"] in (1, 2, 4, 8), (case, name, g)
                if length is not None and g["row_groups"] > 1:
                    assert 2048 // g["row_groups"] >= length, (case, g)


def test_narrow_forwards_merge_with_zero_taps(monkeypatch):
    """K above stride and not a multiple of it, with a narrow output (C_out/groups * stride <= 64,
    dilation 1): merged into rows with ceil(K / stride) taps, zero where t*stride + r >= K, the
    per-phase plan kept as the exact one (run where x is not finite; 3xTF32 only where the merged
    tiles' rows x merged taps are at most the per-phase tiles' rows x K; 16-bit only where
    the per-phase tiles would pad C_out/groups, below 16 rows); dilated filters too where they reach
    two phases or more (ceil(((K - 1) * dilation + 1) / stride) taps); wider outputs stay per phase
    (but see test_wide_strided_forwards_merge_with_zero_taps_where_per_phase_is_not_pipelined)."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's plans: narrow outputs pack their taps, test_narrow_outputs_pack_their_taps)
    dilated = (4, 48, 3, 5, 12001, 4, 4, 0, 2, 1)  # taps at positions 0, 2, ..., 8: phases 0 and 2, 3 merged taps
    for dtype, tf32 in MATHS:
        f = plans(dilated, dtype, tf32, "h100")["forward"]
        assert (f["family"], f["zero_taps"], f["taps"]) == ("pipelined", 1, 3), (dtype, f)  # (3xTF32: 16 x 3 <= 16 x 5)
    for shape in ((1, 768, 1, 16, 860816, 10, 6, 1, 1, 1), (4, 48, 3, 5, 12001, 4, 2, 0, 1, 1)):
        for dtype, tf32 in MATHS:
            f = plans(shape, dtype, tf32, "h100")["forward"]
            assert (f["family"], f["row_phases"], f["zero_taps"]) == ("pipelined", shape[5], 1), (shape, f)
            assert f["taps"] == -(-shape[3] // shape[5]) and "exact_family" in f, (shape, f)
    for shape in ((4, 48, 32, 5, 12001, 4, 2, 0, 1, 1), (4, 48, 32, 5, 12001, 4, 4, 0, 2, 1)):  # 128 rows
        f = plans(shape, torch.float32, True, "h100")["forward"]
        assert f["row_phases"] == 1 and f["zero_taps"] == 0 and "exact_family" not in f, (shape, f)
    for dtype, merged in ((torch.float32, 1), (torch.bfloat16, 0), (torch.float16, 0)):  # 32 rows a phase
        f = plans(NAMED["grouped"], dtype, True, "h100")["forward"]
        assert (f["row_phases"], f["zero_taps"]) == ((2, 1) if merged else (1, 0)), (dtype, f)


def test_exact_plans_store_every_position():
    """A plan merged with zero taps may write NaN (0 x Inf) at positions no tap reaches; its exact
    per-phase plan, run where x is not finite, stores every position over it, so it is never one
    that leaves the unreached phases to the launcher's bias (bias_first): such a layer runs per phase
    alone (a narrow dilated output whose per-phase plan has strided stores on 2 of 3 phases)."""
    for shape in ((4, 128, 20, 2, 6000, 3, 1, 0, 2, 1), (4, 48, 3, 5, 12001, 4, 4, 0, 2, 1), (2, 256, 16, 3, 9000, 4, 1, 0, 2, 1),
                  (3, 200, 12, 4, 8001, 5, 2, 0, 3, 1), (4, 48, 3, 5, 12001, 4, 2, 0, 1, 1)):
        for dtype, tf32 in MATHS:
            f = plans(shape, dtype, tf32, "h100")["forward"]
            if f.get("zero_taps") == 1:
                assert f["exact_bias_first"] == 0, (shape, dtype, tf32, f)
    alone = plans((4, 128, 20, 2, 6000, 3, 1, 0, 2, 1), torch.float32, True, "h100")["forward"]
    assert (alone["family"], alone["zero_taps"], alone["bias_first"]) == ("pipelined", 0, 1), alone


def test_wide_strided_forwards_merge_with_zero_taps_where_per_phase_is_not_pipelined(monkeypatch):
    """A wide output (C_out/groups * stride > 64) with K above stride and not a multiple of it merges
    into rows with zero taps where those add at most half the MACs (ceil(K / stride) * stride <= 1.5
    K) and its per-phase plan would not run pipelined (TF32 and 16-bit strided outputs: the
    two-buffer kernels), the per-phase plan kept as the exact one; 3xTF32, whose strided forwards
    run pipelined per phase, and filters the zero taps would pad more stay per phase."""
    merges = (12, 1280, 640, 7, 334, 5, 3, 0, 1, 1)  # 10 taps' MACs for 7
    # (v104's per-phase plans: the two-buffer kernels, not strided stores)
    monkeypatch.setenv("CONVT_STRIDED_STORES_FIRST", "never")
    for dtype, tf32 in MATHS:
        f = plans(merges, dtype, tf32, "h100")["forward"]
        if dtype == torch.float32 and not tf32:
            assert f["family"] == "pipelined" and (f["row_phases"], f["zero_taps"]) == (1, 0), f
            continue
        assert (f["family"], f["row_phases"], f["zero_taps"], f["taps"]) == ("pipelined", 5, 1, 2), (dtype, f)
        assert f["exact_family"] != "pipelined", f
    padded_more = (12, 1280, 640, 5, 334, 4, 1, 0, 1, 1)  # 8 taps' MACs for 5
    f = plans(padded_more, torch.float32, True, "h100")["forward"]
    assert (f["row_phases"], f["zero_taps"]) == (1, 0), f


def test_narrow_outputs_with_short_filters_merge_into_rows():
    """K < stride: rows (co, r) for the K phases with a tap, a column's out positions stride apart
    (the other phases hold the bias, filled first), so x is read once rather than once a phase and
    the MMA work is the per-phase plans'; narrow outputs in one tile, wide ones at any stride."""
    for shape in ((1, 1024, 3, 3, 976562, 4, 0, 1, 1, 1), (1, 768, 1, 3, 1302083, 5, 0, 2, 1, 1), (4, 72, 3, 3, 9001, 4, 1, 2, 1, 1)):
        for dtype in (torch.float32, torch.bfloat16):
            f = plans(shape, dtype, True, "h100")["forward"]
            assert f["family"] == "pipelined" and (f["row_phases"], f["column_positions"]) == (shape[3], shape[5]), f
            assert f["taps"] == 1 and f["out_phases"] == 1, f
    for stride in (4, 8):
        wide = plans((4, 1024, 1024, 3, 489, stride, 0, 1, 1, 1), torch.float32, True, "h100")["forward"]
        assert wide["family"] == "pipelined" and (wide["row_phases"], wide["column_positions"]) == (3, stride), wide


def test_plan_cache_answers_as_the_planner_from_many_threads():
    """Plans are kept by their whole key (problem, tensor facts, math, card, the CONVT_* planner
    overrides) in one table that threads share: 8 threads asking for mixed shapes, maths and cards at
    once get what planning every call (CONVT_PLAN_CACHE=never) gives, and a changed override is a new
    key (a merged forward plans unmerged under CONVT_GROUP_MERGE=never, merged again without it)."""
    shapes = [(6, 96, 96, 5, 16578, 1, 2, 0, 1, 16), (9, 80, 123, 4, 2590, 6, 0, 0, 2, 1), (16, 1024, 512, 3, 1300, 2, 0, 0, 1, 1),
              (1, 64, 64, 4, 1024, 2, 1, 0, 1, 1), (5, 1, 1024, 16, 2978, 1, 7, 0, 1, 1), (11, 1536, 1536, 7, 298, 4, 1, 0, 1, 1)]
    asks = [(shape, dtype, tf32, card) for shape in shapes for dtype, tf32 in MATHS for card in ("h100", "a100", "cpu")]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("CONVT_PLAN_CACHE", "never")
        expected = [plans(*ask) for ask in asks]
    results = [None] * 8

    def ask_all(thread):
        shift = thread * len(asks) // 8  # (each thread its own order: rotated, every other one reversed)
        order = list(range(len(asks)))[shift:] + list(range(len(asks)))[:shift]
        order = order[::-1] if thread % 2 else order
        answers = {}
        for _ in range(2):
            for i in order:
                answers[i] = plans(*asks[i])
        results[thread] = answers

    threads = [threading.Thread(target=ask_all, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for answers in results:
        assert [answers[i] for i in range(len(asks))] == expected
    merged = shapes[0], torch.bfloat16, False, "h100"
    assert plans(*merged)["forward"]["merged_groups"] == 16
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("CONVT_GROUP_MERGE", "never")
        assert plans(*merged)["forward"]["merged_groups"] == 1
    assert plans(*merged)["forward"]["merged_groups"] == 16


def test_forward_x_copies_override():
    """CONVT_FORWARD_X_COPIES=always takes the copies wherever they apply, =never nowhere (an A/B of
    both plans in one build); read once a process, so each setting runs in a process of its own."""
    script = ("import torch; from torch_convt_op.planner import explain; "
              "print([explain(*shape, dtype=torch.bfloat16, tf32=False, device='h100')['forward']['copy_batch'] "
              "for shape in ((11, 256, 128, 5, 18442, 2, 1, 0, 1, 1), (12, 1536, 768, 1, 1300, 1, 0, 0, 1, 1), "
              "(12, 1536, 768, 1, 1296, 1, 0, 0, 1, 1))])")
    expected = {"always": [1, 4, 0], "never": [0, 0, 0], "model": [0, 4, 0]}
    for setting, copy_batches in expected.items():
        env = dict(os.environ, CONVT_FORWARD_X_COPIES=setting)
        output = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert output.stdout.strip() == str(copy_batches), (setting, output.stdout, output.stderr)


# ---- the CPU's plan (csrc/cpu/conv_transpose1d_cpu.cpp, plan; docs/design.md §6.3) ----------------

# (N, C_in, C_out, K, L_in, stride, padding): whether the forward runs folded (one at::mm over the batch)
# on 8-float vectors (AVX2 only), and on 16-float vectors (AVX-512) where at::mm is fast (fast_blas)
CPU_FOLDED_CASES = [
    ((4, 512, 256, 4, 100, 2, 1), (True, True)),
    ((4, 320, 256, 4, 100, 2, 1), (False, True)),    # C_in/g below 384, from 256
    ((4, 200, 256, 4, 100, 2, 1), (False, False)),   # below 256
    ((1, 1280, 512, 5, 457, 1, 2), (True, True)),
    ((4, 512, 256, 8, 100, 2, 3), (False, True)),    # 8 taps: Z holds every tap's rows; at most 12
    ((4, 512, 256, 16, 100, 2, 7), (False, False)),  # 16 taps
    ((4, 512, 48, 4, 100, 2, 1), (False, False)),    # C_out/g < 64
    ((1, 512, 256, 4, 200, 2, 1), (False, True)),    # N * L_in < 256 columns, from 128
    ((1, 512, 256, 4, 100, 2, 1), (False, False)),   # below 128
]


def _folded(expected, bits, fast):
    """Whether a CPU_FOLDED_CASES case runs folded with these vectors and BLAS (16-float vectors
    without fast_blas: nowhere)"""
    narrow_vectors, fast_blas = expected
    return narrow_vectors if bits == 256 else fast_blas and fast == 1


def _cpu_forward_forms():
    """{shape: forward form} of CPU_FOLDED_CASES in this process, the AVX2 forms' vector width, and
    whether at::mm is taken to be fast"""
    forms = {shape: explain(*shape, device="cpu")["forward"] for shape, _ in CPU_FOLDED_CASES}
    facts = {(plan["vector_bits"], plan["fast_blas"]) for plan in forms.values()}
    assert len(facts) == 1, forms
    return {shape: plan["kernel"] for shape, plan in forms.items()}, *facts.pop()


def _in_own_process(script, *args, **variables):
    """Runs `script` (Python, with this module as `t` and args as sys.argv[1:]) in a process of its
    own with these environment variables: the CPU planner reads some of them once a process."""
    prefix = "import sys; sys.path.insert(0, sys.argv.pop(1)); import test_planner as t; "
    subprocess.run([sys.executable, "-c", prefix + script, os.path.dirname(os.path.abspath(__file__)), *map(str, args)],
                   env=dict(os.environ, **variables), check=True, timeout=300)


_FOLDED_SCRIPT = ("forms, bits, fast = t._cpu_forward_forms(); assert (bits, fast) == (int(sys.argv[1]), int(sys.argv[2])), (bits, fast); "
                  "bad = [s for s, e in t.CPU_FOLDED_CASES if (forms[s] == 'folded') != t._folded(e, bits, fast)]; "
                  "assert not bad, bad")


def test_cpu_forward_folds_the_batch_of_wide_short_filters(monkeypatch):
    """The folded forward where at::mm outruns the micro-kernel: on 8-float vectors C_in/g from 384,
    C_out/g >= 64, at most 7 taps, 256 columns; on 16-float vectors only where at::mm is MKL on an
    Intel CPU (fast_blas), and there from 256 input channels, up to 12 taps, from 128 columns. In this
    process and, in processes of their own (both variables are read once a process), with
    CONVT_CPU_FAST_BLAS 0 and 1 and, on an AVX-512 CPU, CONVT_CPU_VECTOR_BITS=256."""
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    forms, bits, fast = _cpu_forward_forms()
    if bits == 0:
        pytest.skip("this CPU runs no AVX2 forms")
    for shape, expected in CPU_FOLDED_CASES:
        assert (forms[shape] == "folded") == _folded(expected, bits, fast), (shape, bits, fast, forms[shape])
    settings = [({"CONVT_CPU_FAST_BLAS": str(f)}, bits, f) for f in (0, 1)]
    if bits == 512:
        settings.append(({"CONVT_CPU_VECTOR_BITS": "256", "CONVT_CPU_FAST_BLAS": "0"}, 256, 0))
    for variables, expected_bits, expected_fast in settings:
        _in_own_process(_FOLDED_SCRIPT, expected_bits, expected_fast, **variables)


# (N, C_in, C_out, K, L_in, stride, padding): grad_weight's form on 16-float vectors (AVX-512) where
# at::mm is MKL on an Intel CPU (fast_blas) and where it is not
CPU_GRAD_WEIGHT_CASES = [
    ((1, 1024, 512, 8, 100, 4, 2), "positions", "positions"),   # 8 taps: G^T by runs, one GEMM over every tap's columns
    ((1, 512, 256, 96, 119, 4, 46), "positions", "positions"),  # a long filter on a short row
    ((2, 256, 256, 64, 130, 5, 29), "positions", "positions"),
    ((1, 1024, 512, 7, 100, 4, 1), "taps", "positions"),        # 7 taps: G^T column by column
    ((4, 256, 256, 4, 300, 2, 1), "taps", "positions"),         # a short filter
    ((2, 128, 128, 16, 243, 8, 0), "positions", "positions"),   # 16 taps
]


def test_cpu_grad_weight_takes_blas_taps_only_where_blas_is_fast(monkeypatch):
    """On 16-float vectors, grad_weight of 64 channels a group or more in and out runs as the BLAS taps
    form only where at::mm is MKL on an Intel CPU, and there not for filters of 8 taps or more that
    grad_weight_by_gemm gives to the GEMM over positions (a GEMM a tap against one GEMM over every
    tap's columns, G^T built by runs of grad_y); elsewhere at::mm runs 8-float vectors, and the GEMM
    over positions takes them (CPU v50)."""
    _assert_fast_blas_forms("CPU_GRAD_WEIGHT_CASES", "grad_weight", monkeypatch)


# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups): grad_weight's form on
# 16-float vectors where at::mm is MKL on an Intel CPU (fast_blas) and where it is not
CPU_SHORT_FILTER_CASES = [
    ((26, 96, 48, 4, 44, 2, 1, 0, 1, 1), "taps", "positions"),     # 4 taps at stride 2
    ((17, 48, 48, 2, 54, 2, 0, 0, 1, 1), "taps", "positions"),     # K = stride
    ((3, 244, 63, 1, 63, 6, 0, 5, 1, 1), "positions", "positions"),  # K < stride: phases without a tap
    ((7, 512, 512, 7, 34, 3, 2, 0, 1, 32), "positions", "positions"),  # 16 channels a group on a row of 34
    ((8, 1024, 1024, 7, 174, 1, 3, 0, 2, 32), "unrolled", "positions"),  # 32 channels a group on a row of 174
]

# (argv: fast_blas, the cases' name here, the pass) each case's form where at::mm is fast and where not
_FAST_BLAS_SCRIPT = ("fast, cases, name = int(sys.argv[1]), getattr(t, sys.argv[2]), sys.argv[3]; "
                     "plans = {s: t.explain(*s, device='cpu')[name] for s, _, _ in cases}; "
                     "assert {(p['vector_bits'], p['fast_blas']) for p in plans.values()} == {(512, fast)}, plans; "
                     "bad = [(s, plans[s]['kernel']) for s, a, b in cases if plans[s]['kernel'] != (a if fast else b)]; "
                     "assert not bad, bad")


def _assert_fast_blas_forms(cases_name, pass_name, monkeypatch):
    """The forms of the cases named (shape, form where at::mm is MKL on an Intel CPU, form where not)
    for pass_name on 16-float vectors (else the test skips), in processes of their own with
    CONVT_CPU_FAST_BLAS 0 and 1 (read once a process)."""
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    if explain(*globals()[cases_name][0][0], device="cpu")[pass_name].get("vector_bits", 0) != 512:
        pytest.skip("this CPU runs no 16-float AVX2 forms")
    for fast in (0, 1):
        _in_own_process(_FAST_BLAS_SCRIPT, fast, cases_name, pass_name, CONVT_CPU_FAST_BLAS=str(fast))


def test_cpu_grad_weight_short_filters_take_blas_forms_where_blas_is_fast(monkeypatch):
    """On 16-float vectors where at::mm is MKL on an Intel CPU, filters of 2-7 taps, at least the
    stride, that the GEMM over positions would take (G^T built column by column) take the BLAS taps
    form, except groups of fewer than 64 input channels: those take the BLAS unrolled form on rows of
    50 inputs or more (CPU v44); elsewhere (K < stride, short rows, or at::mm not MKL) the positions
    form stays."""
    _assert_fast_blas_forms("CPU_SHORT_FILTER_CASES", "grad_weight", monkeypatch)


# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups): the forward's form on
# 16-float vectors where at::mm is MKL on an Intel CPU (fast_blas) and where it is not
CPU_NARROW_OUTPUT_CASES = [
    ((12, 1024, 3, 3, 1013, 10, 2, 0, 3, 1), "unrolled", "scatter"),
    ((2, 1024, 4, 16, 782, 8, 11, 0, 2, 1), "unrolled", "scatter"),
    ((3, 128, 8, 4, 1000, 2, 1, 0, 1, 2), "unrolled", "scatter"),     # 4 outputs and 64 inputs a group
    ((6, 256, 2, 3, 55236, 2, 0, 1, 1, 1), "scatter", "scatter"),     # 331K positions
    ((4, 48, 4, 3, 2000, 2, 1, 0, 1, 1), "scatter", "scatter"),       # 48 input channels
    ((4, 512, 5, 3, 1000, 2, 1, 0, 1, 1), "scatter", "scatter"),      # 5 output channels
]


def test_cpu_forward_of_narrow_outputs_unrolled_where_blas_is_fast(monkeypatch):
    """On 16-float vectors where at::mm is MKL on an Intel CPU, narrow outputs (at most 4 channels a
    group, from 64 input channels a group) on at most 131,072 positions that the AVX2 model gives to
    the scatter form run as the BLAS unrolled form (CPU v45); longer inputs, fewer input channels,
    wider outputs, and CPUs where at::mm is not MKL keep the scatter form."""
    _assert_fast_blas_forms("CPU_NARROW_OUTPUT_CASES", "forward", monkeypatch)


def _assert_wide_vector_forms(cases, pass_name, monkeypatch):
    """Each (shape, form) of cases: the planner's form for pass_name on this CPU, which must run the
    16-float AVX2 forms (else the test skips)."""
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    plans = {shape: explain(*shape, device="cpu")[pass_name] for shape, _ in cases}
    if {plan.get("vector_bits", 0) for plan in plans.values()} != {512}:
        pytest.skip("this CPU runs no 16-float AVX2 forms")
    for shape, form in cases:
        assert plans[shape]["kernel"] == form, (shape, plans[shape])


# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups): grad_input's form on
# 16-float vectors around the long filters on short rows (16 taps or more, at most 64 inputs)
CPU_LONG_FILTER_GRAD_INPUT_CASES = [
    ((1, 1024, 512, 16, 32, 8, 4, 0, 1, 1), "packed"),      # one batch row
    ((1, 6, 1536, 17, 36, 8, 4, 3, 1, 1), "packed"),        # few input channels
    ((7, 256, 128, 40, 32, 5, 17, 0, 1, 1), "packed"),      # 7 batch rows
    ((1, 1024, 1024, 16, 32, 4, 0, 1, 2, 16), "packed"),    # 16 groups, 4 taps a phase: not a GEMM a tap
    ((9, 1024, 512, 16, 66, 4, 6, 0, 1, 16), "taps"),       # 66 inputs: the short rows' batch rules
    ((8, 256, 128, 12, 40, 8, 2, 0, 1, 1), "taps"),         # 12 taps: the batch rules
]


def test_cpu_long_filter_grad_input_on_short_rows(monkeypatch):
    """On 16-float vectors, grad_input of a long filter on a short row runs packed at any batch (B's rows
    read in place at each tap's shift), not as the batch rules' GEMM a tap or one at::mm over an im2col."""
    _assert_wide_vector_forms(CPU_LONG_FILTER_GRAD_INPUT_CASES, "grad_input", monkeypatch)


# grad_input's form on 16-float vectors for rows longer than 128 inputs: the BLAS taps form at 6 or more
# (batch, group) items where each tap's GEMM reduces over 16 output channels or more and its weight block
# holds 8,192 elements or more (CPU v41), else packed
CPU_LONG_ROW_GRAD_INPUT_CASES = [
    ((8, 1024, 512, 2, 171, 2, 0, 0, 1, 1), "taps"),
    ((6, 512, 512, 5, 165, 2, 1, 0, 1, 1), "taps"),
    ((8, 64, 32, 4, 264, 2, 1, 0, 1, 1), "packed"),         # a block of 2,048
    ((11, 6, 256, 2, 549, 1, 0, 0, 1, 1), "packed"),        # 6 input channels: a block of 1,536
    ((4, 1536, 768, 3, 1000, 5, 0, 2, 1, 1), "packed"),     # 4 items
    ((10, 1024, 4, 16, 861, 4, 6, 0, 1, 1), "packed"),      # a narrow output: 4 channels to reduce over
    ((2, 512, 512, 4, 312, 2, 0, 0, 1, 32), "packed"),      # 16 x 16 blocks (64 items)
    ((1, 1024, 1024, 2, 442, 2, 0, 0, 1, 1), "packed"),     # one item
]


def test_cpu_grad_input_of_long_rows_takes_a_gemm_a_tap_at_six_items(monkeypatch):
    """On 16-float vectors, grad_input of rows longer than 128 inputs runs a GEMM a tap over grad_y's
    phases in place (the BLAS taps form) at 6 or more (batch, group) items and wide weight blocks, where
    the packed form would pack grad_y's rows for every block of input channels: not for narrow
    outputs, smaller weight blocks or fewer items."""
    _assert_wide_vector_forms(CPU_LONG_ROW_GRAD_INPUT_CASES, "grad_input", monkeypatch)


def test_cpu_one_channel_groups_run_the_direct_forms(monkeypatch):
    """One or two channels a group (C_in/g x C_out/g <= 2), wherever the AVX2 forms run: the forward on
    the tap rows at stride 1-2, at 3 taps a phase (K / stride) or more, or at strides up to 8 on rows of
    256 inputs or more, else on the direct loops;
    grad_input on the direct loops, grad_weight on rows of at most 256 inputs (longer rows: the dot
    form, whose per-row costs they spread)."""
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    short, long_rows, multiplier = (2, 1024, 1024, 9, 32, 2, 3, 0, 1, 1024), (16, 256, 256, 7, 4096, 1, 3, 0, 1, 256), \
        (2, 64, 128, 5, 200, 3, 2, 0, 1, 64)
    long_filter, strided_long_row, stride_9 = (3, 256, 512, 16, 32, 3, 6, 0, 1, 256), (2, 96, 96, 16, 5000, 8, 4, 0, 1, 96), \
        (2, 64, 64, 4, 3000, 9, 0, 0, 1, 64)
    if explain(*short, device="cpu")["forward"].get("vector_bits", 0) == 0:
        pytest.skip("this CPU runs no AVX2 forms")
    for shape, forward in ((short, "tap_rows"), (long_rows, "tap_rows"), (multiplier, "direct"), (long_filter, "tap_rows"),
                           (strided_long_row, "tap_rows"), (stride_9, "direct")):
        plan = explain(*shape, device="cpu")
        assert plan["forward"]["kernel"] == forward and plan["grad_input"]["kernel"] == "direct", (shape, plan)
        assert plan["grad_weight"]["kernel"] == ("direct" if shape[4] <= 256 else "dot"), (shape, plan)
    assert explain(2, 64, 64, 5, 200, 3, 2, 0, 1, 16, device="cpu")["grad_input"]["kernel"] != "direct"  # 4 x 4 a group


def test_cpu_plan_names_the_forms_it_runs(monkeypatch):
    """float64 runs the BLAS / direct forms (no AVX2 forms); CONVT_CPU_FORMS shows in the plan."""
    shape = (4, 512, 256, 4, 100, 2, 1)
    monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    plan = explain(*shape, dtype=torch.float64, device="cpu")
    assert {p["kernel"] for p in plan.values()} <= {"taps", "unrolled", "direct", "sum"}, plan
    assert plan["forward"]["vector_bits"] == 0
    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=unrolled,grad_weight=direct")
    plan = explain(*shape, device="cpu")
    assert plan["forward"]["kernel"] == "unrolled" and plan["grad_weight"]["kernel"] == "direct", plan



def test_narrow_row_cases_reach_the_pipelined_narrow_tiles(monkeypatch):
    """Each of conftest's NARROW_ROW_CASES (which test_tiles runs forced onto the pipelined kernel) moves
    the forward or grad_input of at least one math mode from warp tiles onto the pipelined 16 or 32-row
    tiles on an H100 under CONVT_NARROW_ROWS_PIPELINED=always; any other plan keeps its tiles."""
    from conftest import NARROW_ROW_CASES

    for case in NARROW_ROW_CASES:
        shape = case.sizes
        moved = []
        for dtype, tf32 in MATHS:
            monkeypatch.setenv("CONVT_NARROW_ROWS_PIPELINED", "never")
            before = plans(shape, dtype, tf32, "h100")
            monkeypatch.setenv("CONVT_NARROW_ROWS_PIPELINED", "always")
            after = plans(shape, dtype, tf32, "h100")
            for name in ("forward", "grad_input"):
                if before[name]["kernel"] == "gemm" and tile(before[name]) != tile(after[name]):
                    assert before[name]["family"] == "warp", (case, name, before[name])
                    assert tile(after[name]) in {("pipelined", 16, 256), ("pipelined", 32, 256)}, (case, name, after[name])
                    moved.append((dtype, tf32, name))
        assert moved, case


def test_plan_changes_lists_the_layers_an_override_moves(monkeypatch):
    """tools/plan_changes.py's last line: the sweep layers (seed 0, 60 drawn) whose forward or
    grad_input plan CONVT_NARROW_ROWS_PIPELINED=always changes against never, each of which does."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = [sys.executable, os.path.join(root, "tools", "plan_changes.py"), "--seeds", "0", "--count", "60",
               "--a", "CONVT_NARROW_ROWS_PIPELINED=never", "--b", "CONVT_NARROW_ROWS_PIPELINED=always",
               "--passes", "forward,grad_input", "--card", "h100"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    layers = [tuple(int(v) for v in item.split(",")) for item in output[-1].split(";") if item]
    assert layers and len(output) == len(layers) + 1, output
    for shape in layers:
        summaries = []
        for choice in ("never", "always"):
            monkeypatch.setenv("CONVT_NARROW_ROWS_PIPELINED", choice)
            summaries.append([summary(plans(shape, dtype, tf32, "h100")[name]) for dtype, tf32 in
                              ((torch.bfloat16, True), (torch.float32, True), (torch.float32, False))
                              for name in ("forward", "grad_input")])
        assert summaries[0] != summaries[1], shape


def test_plan_changes_compares_the_fields_named():
    """tools/plan_changes.py --fields: a change the summary leaves out (grad_weight's slices under
    CONVT_GRAD_WEIGHT_SLICE_ITEMS=1 against the planner's) lists no layer without the field named, and
    the layers it moves with it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tool = [sys.executable, os.path.join(root, "tools", "plan_changes.py"), "--seeds", "0", "--count", "40",
            "--passes", "grad_weight", "--dtypes", "bf16", "--card", "h100", "--a", "CONVT_GRAD_WEIGHT_SLICE_ITEMS=1"]

    def last_line(*arguments):
        output = subprocess.run(tool + list(arguments), capture_output=True, text=True, check=True).stdout
        return output.strip().splitlines()[-1] if output.strip() else ""

    assert last_line() == ""
    layers = [item for item in last_line("--fields", "slices").split(";") if item]
    assert layers, "no layer of seed 0's 40 has its slices moved"


def test_plan_changes_against_saved_plans(tmp_path):
    """tools/plan_changes.py --save then --against (the way to compare two builds) lists what --a and
    --b list: here one build under two settings of CONVT_NARROW_ROWS_PIPELINED."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tool = [sys.executable, os.path.join(root, "tools", "plan_changes.py"), "--seeds", "0", "--count", "40",
            "--passes", "forward,grad_input", "--card", "h100"]
    saved = str(tmp_path / "before.json")

    def last_line(*arguments):
        output = subprocess.run(tool + list(arguments), capture_output=True, text=True, check=True).stdout
        return output.strip().splitlines()[-1] if output.strip() else ""

    last_line("--save", saved, "--b", "CONVT_NARROW_ROWS_PIPELINED=never")
    against = last_line("--against", saved, "--b", "CONVT_NARROW_ROWS_PIPELINED=always")
    settings = last_line("--a", "CONVT_NARROW_ROWS_PIPELINED=never", "--b", "CONVT_NARROW_ROWS_PIPELINED=always")
    assert against and against == settings


def test_screen_estimate_times_this_builds_plans_by_the_variant_that_ran_them(tmp_path, monkeypatch):
    """tools/screen_estimate.py: a screened cell whose plan under this build one variant ran counts at
    that variant's time (1,540,310,1,1883,s4 TF32: v104's warp tiles at 2 ms, this build's narrower
    pipelined tiles at 1 ms, torch 1 ms: 0.5x -> 1x); a plan no variant ran counts at the baseline's
    time, listed as unmatched."""
    layer = (1, 540, 310, 1, 1883, 4, 0, 0, 1, 1)
    monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")
    old = summary(plans(layer, torch.float32, True, "h200")["forward"])
    monkeypatch.delenv("CONVT_NARROWER_PIPELINED")
    new = summary(plans(layer, torch.float32, True, "h200")["forward"])
    assert old != new
    screen = {"1,540,310,1,1883,4,0,0,1,1 tf32": {"ms": {"old": 2.0, "new": 1.0, "torch": 1.0}, "plans": [old, new]},
              "1,540,310,1,1883,4,0,0,1,1 bf16": {"ms": {"old": 2.0, "new": 1.0, "torch": 1.0}, "plans": [old, old]}}
    path = tmp_path / "screen.json"
    path.write_text(json.dumps(screen))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = [sys.executable, os.path.join(root, "tools", "screen_estimate.py"), str(path), "--baseline", "old"]
    lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[0].startswith("old ") and "geomean 0.500" in lines[0], lines
    assert lines[1].startswith("this build") and "geomean 0.707" in lines[1] and "min 0.50" in lines[1], lines
    assert "2 cells change plan (1 unmatched" in lines[2], lines


def test_grad_weight_counts_the_column_build_on_8_float_vectors():
    """On 8-float vectors (CONVT_CPU_VECTOR_BITS=256, or a CPU of AVX2 only) grad_weight's model counts
    G^T built column by column (filters shorter than 8 taps) at 5 cycles an element: a 128 x 64, K = 4,
    stride-2 layer on long rows takes the dot products; a filter of 8 taps or more (G^T copied by runs
    of a channel's taps, a cycle an element) keeps the GEMM over positions; runs of a dilated filter
    (copied element by element, 3 cycles) go to the dot products on long rows, and stay on the GEMM on
    short rows of a long filter, whose dot products pay a horizontal sum a block for few positions (in a
    fresh process: the vector width is read once a process)."""
    script = ("import torch, torch_convt_op; from torch_convt_op.planner import explain; "
              "f = lambda l: explain(*l, dtype=torch.float32, tf32=False, device='cpu')['grad_weight']; "
              "short, runs = f((5, 128, 64, 4, 2246, 2, 1, 0, 1, 1)), f((1, 512, 256, 64, 178, 8, 28, 0, 1, 1)); "
              "dilated_long_row, dilated_short_row = f((1, 521, 93, 10, 3095, 1, 1, 0, 4, 1)), "
              "f((1, 384, 384, 48, 211, 1, 47, 0, 2, 1)); "
              "print(short.get('vector_bits'), short['kernel'], runs['kernel'], dilated_long_row['kernel'], "
              "dilated_short_row['kernel'])")
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, CONVT_CPU_VECTOR_BITS="256"), check=True,
                         capture_output=True, text=True, timeout=300).stdout.split()
    if out[0] != "256":
        pytest.skip("this CPU runs no AVX2 forms")
    assert out[1:] == ["dot", "positions", "dot", "positions"], out
