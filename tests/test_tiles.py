"""Tile edges: problems whose rows span several tiles of each kernel (conftest's CPU_TILE_CASES,
WIDE_TILE_CASES and GRAD_WEIGHT_TILE_CASES), the output and its three gradients against float64, with
fresh random data and poisoned outputs, on every device: the CPU's column tiles and grad_weight chunks,
the CUDA kernels' tiles: each case's own plan (layers_as_given: its dilated strided cases would run
reduced, tests/test_shared_step.py)."""
import pytest
import torch

from conftest import (BOX_TILE_CASES, CHUNK_RANGE_CASES, Case, CPU_TILE_CASES, CPU_TILE_SCALE,
                      DILATED_GRAD_WEIGHT_COPY_CASES, DTYPES, ELEMENT_COPY_CASES, FLOAT_CHUNK_RANGE_CASES,
                      GRAD_INPUT_COPY_CASES, GRAD_WEIGHT_MMA_SYNC_CASES, GRAD_WEIGHT_TILE_CASES, NARROW_ROW_CASES,
                      PIPELINED_SPLIT_CASES, SPLIT_TILE_CASES, UNROLLED_GRAD_Y_CASES, WIDE_TILE_CASES, ZERO_TAP_CHUNK_RANGE_CASES,
                      assert_backward_matches_reference, assert_gradients_deterministic, cuda_plans, quick,
                      requires_cuda)

pytestmark = pytest.mark.usefixtures("layers_as_given")

# Math modes, (dtype, TF32 allowed), per device. CUDA: float32 with and without TF32, and the 16-bit types.
# The CPU computes float16 and bfloat16 in its float32 kernel and float64 in a kernel of its own: the
# CUDA kernels' cases run in those two, the CPU's own cases in every dtype.
CUDA_MODES = [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True), (torch.float16, True)]
CPU_MODES = [(torch.float64, False), (torch.float32, False)]
ALL_CPU_MODES = [(dtype, False) for dtype in DTYPES]


def _mode_id(device, dtype, tf32):
    name = str(dtype).removeprefix("torch.")
    if device == "cuda" and dtype == torch.float32:
        name += "-tf32" if tf32 else "-strict"
    return name


def device_params(cases, cpu_modes, cuda_modes, quick_cpu=()):
    """(device, case, dtype, tf32) for every case and mode: on the CPU each case with at most
    CPU_TILE_SCALE's batch elements and input positions (duplicates dropped), those in quick_cpu in the quick
    subset; on CUDA the cases as they are, skipped without a GPU."""
    params = []
    for device, modes in (("cpu", cpu_modes), ("cuda", cuda_modes)):
        seen = []
        for case in cases:
            if device == "cpu":
                case = case.scaled(**CPU_TILE_SCALE)
            if case in seen:
                continue
            seen.append(case)
            for dtype, tf32 in modes:
                marks = [requires_cuda] if device == "cuda" else [quick] if (case, dtype) in quick_cpu else []
                params.append(pytest.param(device, case, dtype, tf32, marks=marks,
                                           id=f"{device}-{case}-{_mode_id(device, dtype, tf32)}"))
    return params


FORWARD_AND_BACKWARD = (
    device_params(CPU_TILE_CASES, ALL_CPU_MODES, CUDA_MODES,
                  quick_cpu=[(CPU_TILE_CASES[0], torch.float32), (CPU_TILE_CASES[1], torch.bfloat16)])
    + device_params(WIDE_TILE_CASES, CPU_MODES, CUDA_MODES))


@pytest.mark.parametrize("device,case,dtype,tf32", FORWARD_AND_BACKWARD, indirect=["tf32"])
def test_tiles_forward_and_backward(device, case, dtype, tf32):
    assert_backward_matches_reference(case, dtype, device, check_forward=True)


@pytest.mark.parametrize("device,case,dtype,tf32", device_params(GRAD_WEIGHT_TILE_CASES, CPU_MODES, CUDA_MODES),
                         indirect=["tf32"])
def test_grad_weight_tiles(device, case, dtype, tf32, monkeypatch):
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_PIPELINED", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "never")  # (the 16-bit element copies keep their cover)
    x, w, b = assert_backward_matches_reference(case, dtype, device)
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", GRAD_WEIGHT_MMA_SYNC_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_grad_weight_pipelined_tiles_of_any_channels(case, dtype, tf32, monkeypatch):
    """The mma.sync tiles' cases on the pipelined warpgroup tiles (forced: CONVT_GRAD_WEIGHT_PIPELINED=always;
    on an H100 or H200 in TF32 and 16-bit, 128-ci tiles over a few channels, groups, merged phases),
    against float64, deterministic; strict float32 on the kernels it plans."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_PIPELINED", "always")
    plan = cuda_plans(case, dtype, tf32)["grad_weight"]
    if torch.cuda.get_device_capability() == (9, 0) and (dtype != torch.float32 or tf32):
        assert plan["kernel"] == "grad_weight_wgmma" and plan["stages"] > 0, plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


# grad_weight's partial sums in both orders (WeightGradPlan::taps_first; every other test runs the
# planner's, grad_w's order): packed groups with several items a slice, 8-tap groups, warpgroup tiles,
# merged phases, pipelined tiles
PARTIAL_ORDER_CASES = [
    Case(2, 64, 64, 5, 700, stride=2, padding=2, groups=8),
    Case(2, 24, 40, 18, 400, stride=2, padding=5),
    Case(4, 64, 96, 3, 20000, padding=1),
    Case(3, 48, 40, 10, 1200, stride=5),
    Case(3, 136, 72, 3, 2000),
]


@requires_cuda
@pytest.mark.parametrize("case", PARTIAL_ORDER_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
@pytest.mark.parametrize("taps_first", ["always", "never"])
def test_grad_weight_partial_sums_in_either_order(case, dtype, tf32, taps_first, monkeypatch):
    """The mma.sync and warpgroup tiles' partial sums taps first (CONVT_GRAD_WEIGHT_TAPS_FIRST=always)
    or in grad_w's order (=never, the planner's), each summed into grad_w by sum_slices: against
    float64, deterministic."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_TAPS_FIRST", taps_first)
    plan = cuda_plans(case, dtype, tf32)["grad_weight"]
    assert plan["kernel"] in ("grad_weight_gemm", "grad_weight_wgmma") and plan["taps_first"] == (taps_first == "always"), plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", ELEMENT_COPY_CASES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda v: str(v).removeprefix("torch."))
def test_grad_weight_over_copies_for_vector_copies(case, dtype, monkeypatch):
    """16-bit grad_weight over the copies that spare its tiles element-by-element staging (forced:
    CONVT_GRAD_WEIGHT_ELEMENT_COPIES=always; the box tiles and the pipelined tiles of any channels
    off): x in aligned rows and/or grad_y deinterleaved, at stride 1 grad_y in aligned rows, against
    float64, deterministic."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_ELEMENT_COPIES", "always")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_PIPELINED", "never")  # (else strided plans merge, pipelined over copies anyway)
    plan = cuda_plans(case, dtype, True)["grad_weight"]
    assert plan["aligned_x"] + plan["deinterleaved_grad_y"] + plan["unrolled_grad_y"] > 0, plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", DILATED_GRAD_WEIGHT_COPY_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_grad_weight_over_dilated_copy(case, dtype, tf32, monkeypatch):
    """grad_weight of a dilated strided filter over grad_y deinterleaved at the dilation (forced:
    CONVT_GRAD_WEIGHT_DILATED_COPY=always, so that every math runs it; the box tiles off; pipelined in TF32 and 16-bit, in 3xTF32
    where the copy pads less), against float64, deterministic."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_DILATED_COPY", "always")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    plan = cuda_plans(case, dtype, tf32)["grad_weight"]
    if torch.cuda.get_device_capability() == (9, 0) and (dtype != torch.float32 or tf32):
        assert plan["deinterleaved_grad_y"] == 1 and plan["stages"] > 0, plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", UNROLLED_GRAD_Y_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_grad_weight_over_unrolled_grad_y(case, dtype, tf32, monkeypatch):
    """grad_weight over grad_y unrolled by taps (forced: CONVT_GRAD_WEIGHT_UNROLLED=always, the box
    tiles off) through the copy's windows of positions and taps, in every math, against float64,
    deterministic."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_UNROLLED", "always")
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "never")
    assert cuda_plans(case, dtype, tf32)["grad_weight"]["unrolled_grad_y"] == 1
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", GRAD_INPUT_COPY_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_grad_input_over_channels_last_copies(case, dtype, tf32, monkeypatch):
    """grad_input over grad_y copied channels-last (forced on: CONVT_GRAD_INPUT_COPIES=always) on an
    H100 or H200 in 16-bit and TF32, against float64; strict float32 keeps its own plan."""
    monkeypatch.setenv("CONVT_GRAD_INPUT_COPIES", "always")
    plan = cuda_plans(case, dtype, tf32)["grad_input"]
    if torch.cuda.get_device_capability() == (9, 0) and (dtype != torch.float32 or tf32):
        assert plan["channels_last_grad_y"] == 1, plan
    assert_backward_matches_reference(case, dtype, "cuda")


@requires_cuda
@pytest.mark.parametrize("case", BOX_TILE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_grad_weight_box_tiles(case, dtype, tf32, monkeypatch):
    """The box tiles (forced on: CONVT_GRAD_WEIGHT_BOXES=always) on an H100 or H200 in 16-bit (over
    grad_y channels-last) and TF32 (over grad_y unrolled by taps, or its own rows where every shift is
    a multiple of 16 bytes), against float64, deterministic; strict float32 on the kernels it plans."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "always")
    plan = cuda_plans(case, dtype, tf32)["grad_weight"]
    if torch.cuda.get_device_capability() == (9, 0) and (dtype != torch.float32 or tf32):
        assert plan["kernel"] == "grad_weight_boxes", plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", NARROW_ROW_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_narrow_rows_pipelined(case, dtype, tf32, monkeypatch):
    """Groups of 8-32 rows on the pipelined kernel (forced on: CONVT_NARROW_ROWS_PIPELINED=always), in
    every math mode: y and the gradients against float64."""
    monkeypatch.setenv("CONVT_NARROW_ROWS_PIPELINED", "always")
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


@requires_cuda
@pytest.mark.parametrize("case", SPLIT_TILE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_reduction_split(case, dtype, tf32, monkeypatch):
    """The reduction split (forced on: CONVT_GEMM_SPLITS=always) of the forward and grad_input in every
    math mode: y and the gradients against float64, deterministic."""
    monkeypatch.setenv("CONVT_GEMM_SPLITS", "always")
    plan = cuda_plans(case, dtype, tf32)
    assert max(plan[name].get("splits", 1) for name in ("forward", "grad_input")) > 1, plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", PIPELINED_SPLIT_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_pipelined_reduction_split(case, dtype, tf32):
    """The pipelined kernel's reduction split as the model plans it (on an H100 or H200: the forward or
    grad_input of each case in every math), parts of a tile over runs of chunks into fp32 slices: y and
    the gradients against float64, deterministic."""
    plan = cuda_plans(case, dtype, tf32)
    if torch.cuda.get_device_capability() == (9, 0):
        assert any(plan[name]["family"] == "pipelined" and plan[name]["splits"] > 1 for name in ("forward", "grad_input")), plan
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)
    assert_gradients_deterministic(x, w, b, case)


@requires_cuda
@pytest.mark.parametrize("case", CHUNK_RANGE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_chunk_range_launches(case, dtype, tf32, workspace_16mb, monkeypatch):
    """Launches of chunk ranges (a weight of more than the 16 MB bound over few tiles): 16-bit sums accumulated in
    an fp32 slice, float ones added to out; y and the gradients against float64. (The tiles the cases were
    chosen on: CONVT_NARROWER_PIPELINED=never.)"""
    monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")
    plan = cuda_plans(case, dtype, tf32)
    for name in ("forward", "grad_input"):
        assert plan[name]["launch_chunks"] < plan[name]["chunks"], plan[name]
        assert plan[name]["float_sums"] == (dtype.itemsize == 2), plan[name]
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


@requires_cuda
@pytest.mark.parametrize("case", FLOAT_CHUNK_RANGE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES[:2], ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_float_chunk_range_launches(case, dtype, tf32, workspace_16mb):
    """A float out's launches of chunk ranges (every later launch's sums added to out's), on the
    pipelined tiles in most of these plans; y and the gradients against float64."""
    plan = cuda_plans(case, dtype, tf32)
    split = [name for name in ("forward", "grad_input")
             if plan[name]["launch_chunks"] < plan[name]["chunks"] and not plan[name]["float_sums"]]
    assert split, plan
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


@requires_cuda
@pytest.mark.parametrize("case", ZERO_TAP_CHUNK_RANGE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES, ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_chunk_range_launches_with_zero_taps(case, dtype, tf32, workspace_16mb):
    """Chunk ranges of a plan with zero taps (a long filter at stride 10, its weight over the 16 MB bound
    once packed): grad_input's launches, and the TF32 forward's; y and the gradients against float64."""
    plan = cuda_plans(case, dtype, tf32)
    names = ("forward", "grad_input") if dtype == torch.float32 and tf32 else ("grad_input",)
    for name in names:
        assert plan[name]["zero_taps"] == 1 and plan[name]["launch_chunks"] < plan[name]["chunks"], plan[name]
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


# Every tile shape the planner's CONVT_GEMM_TILE can force (tools/override_screen.py's A/B of the tile
# choice), on the problem merged where one merges (pipelined and warpgroup tiles, as the planner takes
# them) and on the problem itself: layers of each form the planner treats apart (compact rows of a
# filter shorter than the stride, merged phases, dilated strided phases, 16-channel groups, a narrow
# input, a narrow output, stride 1, a phase pair). A shape that does not plan for a layer leaves it to the direct
# kernels; every one gives y and the gradients of float64's.
FORCED_TILES = [f"{family}:{shape}{merge}" for family, shapes in (("warp", ("16x256", "32x128", "64x128", "128x64",
                                                                           "64x256", "128x128")),
                                                                 ("warpgroup", ("128x128",)),
                                                                 ("pipelined", ("16x256", "32x256", "64x256", "128x128",
                                                                                "128x256")))
                for shape in shapes for merge in ("", ":unmerged")]
FORCED_TILE_CASES = [
    Case(2, 160, 96, 3, 200, stride=5, padding=1, output_padding=4),   # K < stride: compact rows
    Case(2, 40, 80, 8, 150, stride=4, padding=2),                      # K a multiple of stride: merged phases
    Case(2, 64, 64, 7, 300, stride=4, padding=4, dilation=2, groups=4),  # 16 channels a group, dilated
    Case(1, 40, 24, 1, 300, stride=4),                                 # K = 1, tapless phases
    Case(2, 4, 72, 4, 250, stride=4, padding=3, dilation=3),           # narrow input
    Case(2, 48, 3, 9, 400, stride=2, padding=4, dilation=2),           # narrow output
    Case(2, 24, 40, 5, 300, padding=2),                                # stride 1
    Case(2, 96, 64, 3, 200, stride=2),                                 # a phase pair (two accumulator sets)
]


@requires_cuda
@pytest.mark.parametrize("tile", FORCED_TILES)
@pytest.mark.parametrize("case", FORCED_TILE_CASES, ids=str)
@pytest.mark.parametrize("dtype,tf32", CUDA_MODES[:3], ids=lambda v: str(v).removeprefix("torch."), indirect=["tf32"])
def test_forced_tile_shapes(case, dtype, tf32, tile, monkeypatch):
    monkeypatch.setenv("CONVT_GEMM_TILE", tile)
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)
