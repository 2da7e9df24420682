"""CUDA-only semantics: TF32 and strict float32 precision, tile edges on the tensor-core path (and, in
tests/test_tiles.py, with the CPU, problems of many tiles), streams, CUDA graphs, devices."""
import pytest
import torch
import torch.nn.functional as F

from conftest import (Case, assert_backward_matches_reference, assert_close, assert_gradients_deterministic, cuda_plans,
                      make_inputs, ours, poison_allocator, product_norms, reference, relative_error, requires_cuda,
                      requires_two_gpus)

pytestmark = requires_cuda


PRECISION_CASES = [
    Case(4, 128, 128, 3, 1000),                                 # kb64-like
    Case(2, 32, 64, 5, 3000, dilation=3),                       # kb74-like
    Case(2, 32, 64, 3, 3000, stride=2, padding=1, dilation=2),  # kb79-like
    Case(2, 128, 64, 16, 200, stride=8, padding=4),             # HiFi-GAN-like
    Case(2, 64, 32, 10, 300, stride=5),                         # EnCodec-like
    Case(2, 128, 128, 5, 700, stride=2, padding=2, output_padding=1, groups=4),
    Case(2, 32, 32, 7, 500, padding=3, groups=32),              # depthwise (direct path)
    Case(2, 128, 128, 3, 17000, padding=1),                     # kb64-like, pipelined tiles (fill 132 SMs)
]


def _kernelbench_inputs(case):
    """KernelBench's data: randn input, nn.ConvTranspose1d's default initialisation."""
    x, _, _ = make_inputs(case, torch.float32, "cuda")
    module = torch.nn.ConvTranspose1d(case.c_in, case.c_out, case.k, case.stride, case.padding, case.output_padding,
                                      case.groups, case.bias, case.dilation, device="cuda")
    return x, module.weight.detach(), module.bias.detach() if case.bias else None


def _torch(x, w, b, case):
    return F.conv_transpose1d(x, w, b, case.stride, case.padding, case.output_padding, case.groups, case.dilation)


def _rounded_to_tf32(t):
    """float32 t rounded to TF32 (10 mantissa bits) to nearest as cuDNN rounds on this GPU: ties to even on
    sm_90 and later, away from zero before (csrc/cuda/mma.cuh's to_tf32)."""
    bits = t.detach().contiguous().view(torch.int32)
    half = 0xFFF + ((bits >> 13) & 1) if torch.cuda.get_device_capability(t.device)[0] >= 9 else 0x1000
    return ((bits + half) & ~0x1FFF).view(torch.float32)


TF32_CASES = [c for c in PRECISION_CASES if c.groups < c.c_in]  # depthwise runs in float32 on the CUDA cores


@pytest.mark.parametrize("tf32", [True], indirect=True)
@pytest.mark.parametrize("case", TF32_CASES, ids=str)
def test_tf32_products_are_of_rounded_operands(case, tf32):
    """TF32: x and w rounded to TF32 to nearest (ties as cuDNN's kernels for the GPU break them), products
    summed in float32; ours is float64's result on the rounded operands, to float32 accumulation. Ties
    broken the other way differ by up to |x w| 2^-11, about 1e-4 here."""
    x, w, b = _kernelbench_inputs(case)
    expected = reference(_rounded_to_tf32(x), _rounded_to_tf32(w), b, case)[0]
    torch.testing.assert_close(ours(x, w, b, case).double().cpu(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tf32", [True], indirect=True)
@pytest.mark.parametrize("case", TF32_CASES, ids=str)
def test_tf32_agrees_with_torch(case, tf32):
    """KernelBench's allclose(atol=rtol=1e-4) against torch's own TF32 result, wherever cuDNN's kernel breaks
    ties as ours do. cuDNN picks a kernel a shape, and its kernels differ there (on an H100, session 23: its
    Hopper kernels to even, as ours, on kb64, kb79 and the kb64-like case of 17,000 positions; its sm_80
    kernel away from zero on kb74; five of the seven cases here break them another way, and skip)."""
    x, w, b = _kernelbench_inputs(case)
    theirs = _torch(x, w, b, case)
    rounded = reference(_rounded_to_tf32(x), _rounded_to_tf32(w), b, case)[0]
    if not torch.allclose(theirs.double().cpu(), rounded, atol=1e-5, rtol=1e-5):
        pytest.skip("cuDNN's kernel for this shape breaks TF32 ties another way (or does not use TF32)")
    torch.testing.assert_close(ours(x, w, b, case), theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tf32", [True], indirect=True)
@pytest.mark.parametrize("case", PRECISION_CASES, ids=str)
def test_tf32_error_is_tf32_rounding(case, tf32):
    """Against float64, our TF32 result is within TF32 rounding (unit roundoff 2^-11 ~ 4.9e-4), or no worse
    than cuDNN's. cuDNN does not always use TF32 (then it is float32-accurate)."""
    x, w, b = _kernelbench_inputs(case)
    expected = reference(x, w, b, case)[0]
    ours_error = relative_error(ours(x, w, b, case), expected)
    assert ours_error <= max(4.9e-4, 1.5 * relative_error(_torch(x, w, b, case), expected))


@pytest.mark.parametrize("tf32", [False], indirect=True)
@pytest.mark.parametrize("case", PRECISION_CASES, ids=str)
def test_strict_float32_is_float32_accurate(case, tf32):
    x, w, b = make_inputs(case, torch.float32, "cuda")
    y = ours(x, w, b, case)
    assert_close(y, reference(x, w, b, case)[0], torch.float32, "cuda", case=case)  # no TF32: float32's bound


# Weights that pack to more than 16 MB (32 MB in TF32 and 16-bit, 64 MB in 3xTF32's two parts): one
# launch, or under a 16 MB workspace bound launches of row-tile ranges, each packing its own rows into
# one buffer; two groups in each launch
PACKED_IN_LAUNCHES_CASES = [
    Case(1, 1024, 1024, 8, 40, stride=2, padding=3),
    Case(2, 1024, 1536, 8, 30, stride=4, padding=2, groups=2),
]


@pytest.mark.parametrize("dtype, tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)],
                         ids=str, indirect=["tf32"])
@pytest.mark.parametrize("case", PACKED_IN_LAUNCHES_CASES, ids=str)
@pytest.mark.parametrize("max_workspace_mb", [None, "16"], ids=["default", "16mb"])
def test_weight_packed_in_launches(case, dtype, tf32, max_workspace_mb, monkeypatch):
    if max_workspace_mb is not None:
        monkeypatch.setenv("CONVT_MAX_WORKSPACE_MB", max_workspace_mb)
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


# Depthwise problems with rows long enough that grad_weight splits each weight row into slices of
# its inputs (a block each, added in order by a second pass), at lengths the slices do not divide.
DEPTHWISE_LONG_ROW_CASES = [
    Case(3, 4, 4, 7, 5003, padding=3, groups=4),                                        # few rows, 4 slices
    Case(2, 6, 12, 5, 4099, stride=3, padding=2, output_padding=1, dilation=2, groups=6),  # channel multiplier 2
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", DEPTHWISE_LONG_ROW_CASES, ids=str)
def test_depthwise_long_rows_backward(case, dtype):
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


# Depthwise rows shorter than a block's segment, several a block (DepthwisePlan::row_groups): row
# counts no multiple of the groups (the last block's groups past the last row), one and two input
# channels a group, a channel multiplier of 2 with dilation, and the forward over its phases' taps.
DEPTHWISE_SHORT_ROW_CASES = [
    Case(9, 513, 513, 4, 60, stride=3, groups=513),
    Case(12, 768, 768, 4, 125, stride=3, groups=768),
    Case(10, 1100, 550, 3, 100, stride=2, padding=1, groups=550),
    Case(8, 600, 1200, 5, 90, stride=2, padding=4, dilation=2, groups=600),
    Case(9, 520, 520, 16, 30, stride=8, padding=4, groups=520),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", DEPTHWISE_SHORT_ROW_CASES, ids=str)
def test_depthwise_short_rows_in_row_groups(case, dtype, layers_as_given):
    plan = cuda_plans(case, dtype)
    assert plan["forward"]["kernel"] == "depthwise" and plan["forward"]["row_groups"] > 1, plan["forward"]
    assert plan["grad_input"]["kernel"] == "depthwise" and plan["grad_input"]["row_groups"] > 1, plan["grad_input"]
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)
    assert_gradients_deterministic(x, w, b, case)


# The depthwise forward over each output's phase's taps (tap_step = stride / gcd(dilation, stride)
# apart) and over every tap: one input channel a group and several, phases with no tap, taps reaching
# past the row's ends, strides above the block's phase table (kDwThreads = 256: the taps found by a
# scan), K = 16 (kDwMaxTaps), against float64 in each walk.
DEPTHWISE_PHASE_TAP_CASES = [
    Case(2, 1, 48, 16, 3001, stride=8, padding=4),
    Case(3, 1, 64, 10, 1777, stride=5, padding=2, output_padding=3),
    Case(2, 12, 24, 12, 1500, stride=6, padding=7, dilation=4, groups=12),  # gcd 2: tap_step 3
    Case(2, 8, 4, 8, 1200, stride=4, padding=2, groups=2),  # 4 input channels a group
    Case(2, 32, 64, 16, 900, stride=2, padding=7, groups=32),
    Case(2, 16, 16, 5, 700, stride=3, padding=2, output_padding=2, groups=16),
    Case(2, 4, 8, 9, 40, stride=300, padding=5, output_padding=11, dilation=7, groups=4),
]


@pytest.mark.parametrize("walk", ["always", "never"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", DEPTHWISE_PHASE_TAP_CASES, ids=str)
def test_depthwise_forward_phase_taps(case, dtype, walk, monkeypatch, layers_as_given):
    monkeypatch.setenv("CONVT_DEPTHWISE_PHASE_TAPS", walk)
    plan = cuda_plans(case, dtype)
    assert plan["forward"]["kernel"] == "depthwise", plan
    assert (plan["forward"]["tap_step"] > 1) == (walk == "always"), plan
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


# Groups merged into one GEMM group (a block-diagonal packed weight, CONVT_GROUP_MERGE=always: the
# largest merge that plans; the planner's rule besides): forward and grad_input, strided and dilated,
# group counts of 4-16, channels a group that are no multiple of 8, merged rows padded to the tile.
MERGED_GROUP_CASES = [
    Case(3, 64, 32, 3, 3001, padding=1, groups=8),
    Case(2, 96, 48, 16, 2000, stride=3, padding=6, groups=4),
    Case(2, 96, 96, 5, 2500, padding=2, groups=16),
    Case(2, 128, 128, 3, 3000, padding=3, dilation=3, groups=8),
    Case(2, 64, 64, 5, 3001, stride=2, padding=5, dilation=3, groups=4),
    Case(2, 48, 24, 7, 1501, stride=4, padding=2, output_padding=1, groups=6),
    Case(2, 40, 60, 4, 999, stride=2, padding=1, output_padding=1, groups=5),
]


@pytest.mark.parametrize("merge", ["always", "model"])
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)],
                         ids=["tf32", "strict", "bf16"], indirect=["tf32"])
@pytest.mark.parametrize("case", MERGED_GROUP_CASES, ids=str)
def test_merged_groups(case, dtype, tf32, merge, monkeypatch):
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's merged groups: these would pack their taps)
    monkeypatch.setenv("CONVT_GROUP_MERGE", merge)
    monkeypatch.setenv("CONVT_NARROWER_PIPELINED", "never")  # (the tiles these cases' merges were chosen on)
    plan = cuda_plans(case, dtype, tf32)
    assert merge != "always" or plan["forward"]["merged_groups"] > 1, plan
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


@pytest.mark.parametrize("case,dtype,tf32", [(Case(4, 128, 64, 5, 3001, stride=2, padding=2, groups=8), torch.bfloat16, True),
                                             (Case(4, 128, 128, 5, 3001, stride=2, padding=2, groups=16), torch.float32, True)],
                         ids=["bf16", "tf32"], indirect=["tf32"])
def test_merged_groups_over_copies_of_x(case, dtype, tf32, monkeypatch):
    """A merged forward over copies of x (CONVT_FORWARD_X_COPIES=always): the block-diagonal weight
    with the copy's strides, bf16 and TF32 (which merges groups of <= 8 outputs only; 64 / 8 outputs
    take the warp tiles, no copies), against float64."""
    monkeypatch.setenv("CONVT_PACKED_TAPS", "never")  # (the GEMM's merged groups: these would pack their taps)
    monkeypatch.setenv("CONVT_FORWARD_X_COPIES", "always")
    plan = cuda_plans(case, dtype, tf32)["forward"]
    assert plan["merged_groups"] > 1 and plan["copy_batch"] > 0, plan
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


# One input channel a group on tensor cores (CONVT_ONE_CHANNEL_GEMM=always: forward and grad_input;
# the planner's own choice takes the forward only where it pays): channels padded to the MMA's,
# stride 1 and strided, K up to 17
ONE_CHANNEL_GEMM_CASES = [
    Case(2, 1, 96, 16, 3000, padding=7),
    Case(2, 1, 64, 5, 2001, stride=3, padding=1, output_padding=2),
    Case(1, 1, 130, 17, 1500, stride=8, padding=4),
]


@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)],
                         ids=["tf32", "strict", "bf16"], indirect=["tf32"])
@pytest.mark.parametrize("case", ONE_CHANNEL_GEMM_CASES, ids=str)
def test_one_input_channel_on_tensor_cores(case, dtype, tf32, monkeypatch):
    monkeypatch.setenv("CONVT_ONE_CHANNEL_GEMM", "always")
    plan = cuda_plans(case, dtype, tf32)
    assert plan["forward"]["kernel"] == "gemm" and plan["grad_input"]["kernel"] == "gemm", plan
    assert_backward_matches_reference(case, dtype, "cuda", check_forward=True)


# The packed-taps forward (CONVT_PACKED_TAPS=always; docs/design.md §3.9): C_out/groups 1-4 by K 1-16
# (columns 1-64: every n8 tile count), strides 1-8 with dilation and padding, output_padding, groups,
# channels past a 32-channel chunk, rows of one block and of many (a halo up to half a block's 256
# positions: K 16 x dilation 8), no bias, non-contiguous x
PACKED_TAPS_CASES = [
    Case(2, 64, 2, 7, 3000, padding=3),
    Case(1, 96, 1, 1, 777),
    Case(3, 40, 4, 16, 1201, stride=1, padding=60, dilation=8, bias=False),
    Case(2, 77, 3, 5, 2000, stride=2, padding=2, output_padding=1),
    Case(2, 128, 1, 16, 900, stride=8, padding=4),
    Case(1, 33, 4, 9, 5, stride=3, padding=1, output_padding=2, dilation=2),
    Case(2, 64, 4, 4, 1500, stride=4, groups=2),
    Case(2, 48, 2, 3, 2500, padding=1, layout="strided"),
    Case(1, 256, 2, 9, 40000, padding=4, layout="offset"),
]


@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True),
                                        (torch.float16, True)], ids=["tf32", "strict", "bf16", "fp16"], indirect=["tf32"])
@pytest.mark.parametrize("case", PACKED_TAPS_CASES, ids=str)
def test_packed_taps_forward(case, dtype, tf32, monkeypatch):
    monkeypatch.setenv("CONVT_PACKED_TAPS", "always")
    assert cuda_plans(case, dtype, tf32)["forward"]["kernel"] == "packed_taps"
    x, w, b = make_inputs(case, dtype, "cuda")
    poison_allocator("cuda")
    y = ours(x, w, b, case)
    expected, _ = reference(x, w, b, case)
    assert_close(y, expected, dtype, "cuda", norms=product_norms(x, w, case), case=case)


# ... and its grad_input (packed_taps_grad_input.cuh): the same layers, the (co, tap) columns as the
# reduction, a grad_x row's positions in blocks of 256 (rows past L_in unwritten) and its channels in
# chunks of 64 (the tails past 64, 96, 128); grad_y contiguous or with its positions 2 elements apart
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True),
                                        (torch.float16, True)], ids=["tf32", "strict", "bf16", "fp16"], indirect=["tf32"])
@pytest.mark.parametrize("case", PACKED_TAPS_CASES, ids=str)
@pytest.mark.parametrize("grad_y_layout", ["contiguous", "strided"])
def test_packed_taps_grad_input(case, dtype, tf32, grad_y_layout, monkeypatch):
    monkeypatch.setenv("CONVT_PACKED_TAPS", "always")
    assert cuda_plans(case, dtype, tf32)["grad_input"]["kernel"] == "packed_taps"
    x, w, b = make_inputs(case, dtype, "cuda", requires_grad=True)
    y = ours(x, w, b, case)
    expected, (x64, _, _) = reference(x, w, b, case)
    grad_y64 = torch.randn_like(expected).to(dtype).to(torch.float64)
    grad_y = grad_y64.to("cuda", dtype)
    if grad_y_layout == "strided":
        grad_y = torch.stack([grad_y, torch.full_like(grad_y, float("nan"))], dim=-1)[..., 0]
    poison_allocator("cuda")
    grad_x, = torch.autograd.grad(y, [x], grad_y)
    expected_grad_x, = torch.autograd.grad(expected, [x64], grad_y64)
    norms = product_norms(x, w, case, grad_y64)[0]
    assert_close(grad_x, expected_grad_x, dtype, "cuda", "grad_input", norms, case=case)


# grad_bias by row sums (16-bit, and float32 where some phase has no tap: here phase 0): 16-byte loads
# from each row's first 16-byte boundary, with the elements before it and after the last whole vector
# one at a time (8202 outputs a row: rows start at every alignment), or none (8200)
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True),
                                        (torch.float16, True)], ids=str, indirect=["tf32"])
@pytest.mark.parametrize("length", [4099, 4100])
def test_grad_bias_row_sums(length, dtype, tf32):
    case = Case(3, 16, 24, 3, length, stride=2, padding=1, output_padding=1, dilation=2)
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


# ... a warp a row where the rows are short, however few (RowSumsPlan: 72 rows of 705-706 outputs,
# every alignment): against the float64 reference, bit-identical run to run
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True),
                                        (torch.float16, True)], ids=str, indirect=["tf32"])
@pytest.mark.parametrize("length", [352, 353])
def test_grad_bias_row_sums_of_short_rows(length, dtype, tf32):
    case = Case(3, 16, 24, 3, length, stride=2, padding=1, output_padding=1, dilation=2)
    assert cuda_plans(case, dtype, tf32)["grad_bias"] == {"kernel": "row_sums", "warp_rows": 1, "segments": 1}
    x, w, b = assert_backward_matches_reference(case, dtype, "cuda")
    assert_gradients_deterministic(x, w, b, case)


# ... and in segments where the N * C_out rows leave SMs idle (RowSumsPlan's segments: here 2 rows of
# ~100K outputs, 6 segments): each segment's whole vectors, the row's first and last elements in its
# first and last segment; grad_y contiguous or strided (its positions 16 bytes apart or more: shared
# out one at a time), against the float64 sum; run to run the same bits
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("length", [50001, 50002])
@pytest.mark.parametrize("grad_y_layout", ["contiguous", "strided"])
def test_grad_bias_row_sums_in_segments(length, dtype, grad_y_layout):
    case = Case(2, 16, 1, 3, length, stride=2, padding=1, output_padding=1, dilation=2)
    assert cuda_plans(case, dtype, True)["grad_bias"]["kernel"] == "row_sums"
    x, w, b = make_inputs(case, dtype, "cuda")
    b.requires_grad_(True)
    y = ours(x, w, b, case)
    if grad_y_layout == "contiguous":
        grad_y = torch.randn(*y.shape, dtype=torch.float64).to("cuda", dtype)
    else:  # (positions 8 elements apart: no 16-byte vectors)
        grad_y = torch.randn(*y.shape, 8, dtype=torch.float64).to("cuda", dtype)[..., 0]
    grad_bias, = torch.autograd.grad(y, b, grad_y, retain_graph=True)
    assert_close(grad_bias, grad_y.double().sum(dim=(0, 2)), dtype, "cuda", "grad_bias", case=case)
    again, = torch.autograd.grad(y, b, grad_y)
    assert torch.equal(grad_bias, again)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("length", [1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257, 1021])
@pytest.mark.parametrize("stride", [1, 2, 3, 8])
def test_tile_edges(length, stride, dtype):
    case = Case(2, 24, 72, 4, length, stride=stride, padding=min(stride, 2), output_padding=stride - 1)
    x, w, b = make_inputs(case, dtype, "cuda")
    assert_close(ours(x, w, b, case), reference(x, w, b, case)[0], dtype, "cuda", case=case)


def test_non_default_stream_and_two_streams_at_once():
    case = Case(2, 64, 64, 3, 4096, stride=2, padding=1)
    inputs = [make_inputs(case, torch.float32, "cuda") for _ in range(2)]
    expected = [reference(*i, case)[0] for i in inputs]
    streams = [torch.cuda.Stream() for _ in range(2)]
    torch.cuda.synchronize()
    results = []
    for stream, i in zip(streams, inputs):
        with torch.cuda.stream(stream):
            results.append(ours(*i, case))
    for stream, y, e in zip(streams, results, expected):
        stream.synchronize()
        assert_close(y, e, torch.float32, "cuda", case=case)


def test_cuda_graph_capture_and_replay():
    case = Case(2, 64, 32, 4, 512, stride=2, padding=1)
    x, w, b = make_inputs(case, torch.float32, "cuda")
    ours(x, w, b, case)  # warm up (kernel attributes) outside the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        y = ours(x, w, b, case)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(y, reference(x, w, b, case)[0], torch.float32, "cuda", case=case)


OVERLAP_CASES = [  # plans of several launches in a row
    (Case(3, 4, 128, 17, 1801, stride=8, padding=4), torch.bfloat16),  # zero-tap merged forward + gated exact plan
    (Case(3, 4, 128, 17, 1801, stride=8, padding=4), torch.float32),
    (Case(4, 256, 256, 11, 416, stride=5, padding=3), torch.bfloat16),  # layout copies, box tiles, row sums
    (Case(2, 768, 768, 16, 300, stride=2, padding=7, groups=2), torch.bfloat16),  # channels-last copies
    (Case(9, 40, 150, 11, 271, stride=6, padding=2), torch.float32),  # deinterleaved grad_y, slices summed
]


@pytest.mark.parametrize("nonfinite_x", [False, True], ids=["finite", "inf_in_x"])
@pytest.mark.parametrize("case,dtype", OVERLAP_CASES, ids=str)
def test_overlapped_launches_match_serial_ones(case, dtype, nonfinite_x, monkeypatch):
    """Each kernel starting while the one before it finishes (sm_90's programmatic dependent launch,
    CONVT_OVERLAP_LAUNCHES=always) gives bit for bit what serial launches (the default) give, output
    and gradients, the gated exact plan behind an Inf in x included: every kernel waits for its
    predecessor before it touches memory (csrc/cuda/grid_dependency.cuh)."""
    x, w, b = make_inputs(case, dtype, "cuda", requires_grad=True)
    if nonfinite_x:
        with torch.no_grad():
            x[0, 0, case.l_in // 2] = float("inf")
    grad_y = torch.randn_like(ours(x, w, b, case))
    results = {}
    for setting in ("default", "always"):
        if setting == "default":
            monkeypatch.delenv("CONVT_OVERLAP_LAUNCHES", raising=False)
        else:
            monkeypatch.setenv("CONVT_OVERLAP_LAUNCHES", "always")
        poison_allocator("cuda")
        y = ours(x, w, b, case)
        results[setting] = (y.detach(),) + torch.autograd.grad(y, (x, w, b), grad_y)
    names = ("output", "grad_input", "grad_weight", "grad_bias")
    for name, serial, overlapped in zip(names, results["default"], results["always"]):
        torch.testing.assert_close(overlapped, serial, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{name}: {m}")
    if not nonfinite_x:
        assert_close(results["always"][0], reference(x, w, b, case)[0], dtype, "cuda", case=case)


SECOND_DEVICE_CASES = [  # one per kernel family
    (Case(2, 32, 32, 3, 256, stride=2), torch.float32),                       # tensor cores
    (Case(2, 24, 40, 7, 129, stride=3, padding=2, dilation=2), torch.bfloat16),  # tensor cores, staged output
    (Case(2, 6, 12, 5, 37, stride=3, padding=2, groups=6), torch.float16),    # depthwise
    (Case(2, 4, 6, 3, 9, stride=2), torch.float64),                           # direct
]


@requires_two_gpus
@pytest.mark.parametrize("case,dtype", SECOND_DEVICE_CASES, ids=str)
def test_second_device(case, dtype):
    """Tensors on cuda:1 while cuda:0 is current: the device guard puts every launch and allocation on cuda:1."""
    assert torch.cuda.current_device() == 0
    x, w, b = make_inputs(case, dtype, "cuda:1", requires_grad=True)
    y = ours(x, w, b, case)
    assert y.device == torch.device("cuda:1")
    expected, inputs64 = reference(x, w, b, case)
    assert_close(y, expected, dtype, "cuda", case=case)
    grad_y = torch.randn(expected.shape, dtype=torch.float64).to(dtype)
    grads = torch.autograd.grad(y, (x, w, b), grad_y.to("cuda:1"))
    expected_grads = torch.autograd.grad(expected, inputs64, grad_y.double())
    for name, grad, expected_grad in zip(("grad_input", "grad_weight", "grad_bias"), grads, expected_grads):
        assert grad.device == torch.device("cuda:1")
        assert_close(grad, expected_grad, dtype, "cuda", name, case=case)
