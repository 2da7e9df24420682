"""NaN and ±Inf in the input, the weight or grad_output propagate exactly where
torch.nn.functional.conv_transpose1d (float64) puts them: the same positions are NaN, +Inf and -Inf,
forward and backward, in every math mode (TF32 and 3xTF32 included)."""
import pytest
import torch

from conftest import DTYPES, ZERO_TAP_CHUNK_RANGE_CASES, Case, case_id, make_inputs, ours, quick_params, reference
from torch_convt_op.planner import explain

TENSOR_CORES = [
    Case(2, 32, 24, 3, 33, stride=2, padding=1, dilation=2),              # strided
    Case(2, 16, 24, 2, 70, stride=6, dilation=2, output_padding=5),       # phases without taps
    Case(2, 40, 48, 3, 70, padding=1),                                    # sm_90: warpgroup grad_weight
    Case(2, 16, 80, 3, 8500, padding=1),                                  # sm_90: pipelined forward (134 tiles)
    Case(2, 200, 24, 3, 150, stride=4, padding=1),                        # grad_input over grad_y deinterleaved
    Case(2, 80, 40, 7, 101, stride=3, padding=2),                         # sm_90: grad_weight over copies (7 of 9 (t, r))
    Case(5, 16, 2, 3, 8500, stride=4, padding=1),                         # sm_90: K < stride merged (rows without a tap)
    Case(2, 400, 24, 5, 300, stride=2, padding=2),                        # grad_input with zero taps, exact on warp tiles
    Case(2, 400, 24, 5, 8500, stride=2, padding=2),                       # sm_90: the same pipelined, exact on warpgroups
    Case(5, 96, 1, 5, 8500, stride=3, padding=1),                         # sm_90: a narrow forward merged with zero taps
    Case(4, 48, 3, 5, 12001, stride=4, padding=4, dilation=2),            # sm_90: the same with a dilated filter
    Case(2, 256, 128, 7, 3000, stride=5, padding=3),                      # sm_90: a wide forward merged with zero taps
    Case(2, 96, 2, 16, 20001, stride=5, padding=2, dilation=3),           # sm_90: dilated grad_input over the copy, zero taps
    Case(4, 128, 20, 2, 6000, stride=3, padding=1, dilation=2),           # sm_90: strided stores on 2 of 3 phases, bias first
    Case(2, 768, 384, 7, 301, stride=4, padding=1),                       # sm_90: zero taps over copies of x, exact on the copy
    Case(3, 2, 256, 17, 3000, stride=8, padding=4),                       # sm_90: 3xTF32 too: a wide forward of few channels merged
    Case(2, 64, 2, 7, 3000, padding=3),                                   # packed taps (a narrow output)
    Case(2, 48, 1, 16, 5000, stride=2, padding=7, dilation=3),            # packed taps, strided and dilated
]
SPECIAL_CASES = [
    Case(2, 4, 6, 3, 9),                                                  # tensor cores, channels padded
    *TENSOR_CORES,
    Case(2, 6, 12, 5, 37, stride=3, padding=2, dilation=2, groups=6),     # depthwise
    Case(1, 3, 2, 130, 5, stride=2, padding=3),                           # direct kernels (K > 128)
]


def _classes(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf, elementwise."""
    t = t.detach().to("cpu", torch.float64)
    return torch.isnan(t).long() + 2 * (t == float("inf")).long() + 3 * (t == float("-inf")).long()


def _inputs(case, dtype, device, requires_grad=False):
    """Random inputs whose weight values are bfloat16 numbers: exact in TF32, so the small part of a
    3xTF32 split is 0 and 0 x Inf in a correction product would show as NaN."""
    x, w, b = make_inputs(case, dtype, device)
    w = w.to(torch.bfloat16).to(dtype)
    return [t if t is None else t.clone().requires_grad_(requires_grad) for t in (x, w, b)]


def _plant(t: torch.Tensor, value: float, position: int = 1) -> torch.Tensor:
    """t with `value` at [0, 0, position] (one channel of the first group) and -value at its last
    element."""
    t = t.detach().clone()
    t[0, 0, position] = value
    t[-1, -1, -1] = -value
    return t


VALUES = dict(argnames="value", argvalues=[float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("where", ["input", "weight"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", quick_params(SPECIAL_CASES, SPECIAL_CASES[:1]), ids=case_id)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_forward_propagates_like_torch(case, dtype, where, value, device, tf32):
    """Exactly torch's classes, with one exception that torch's own CUDA convolution (cuDNN) shares:
    with Inf or NaN in the weight, the tensor-core GEMM multiplies the zeros of the padding by it, so
    output positions with a tap outside the input may be NaN where float64 is finite."""
    x, w, b = _inputs(case, dtype, device)
    if where == "input":
        x = _plant(x, value)
    else:
        w = _plant(w, value)
    expected, _ = reference(x, w, b, case)
    got, want = _classes(ours(x, w, b, case)), _classes(expected)
    if where == "weight" and device == "cuda" and _forward_on_tensor_cores(case, dtype):
        allowed = (got == 1) & _reads_padding(case)
        got = torch.where(allowed, want, got)
        assert not allowed.all(), "the exception covers every position: the test would not see a wrong class"
    assert torch.equal(got, want)


def _forward_on_tensor_cores(case, dtype) -> bool:
    """Whether the planner sends this forward to the implicit GEMM on the current GPU."""
    plan = explain(*case.sizes, dtype=dtype, tf32=torch.backends.cudnn.allow_tf32, device="cuda")
    return plan["forward"]["kernel"] == "gemm"


def _reads_padding(case) -> torch.Tensor:
    """(l_out,) bool: output positions with a tap whose input position lies outside [0, l_in)."""
    position = torch.arange(case.l_out)[:, None] + case.padding - case.dilation * torch.arange(case.k)[None, :]
    is_tap = position % case.stride == 0
    input_position = torch.div(position, case.stride, rounding_mode="floor")
    return (is_tap & ((input_position < 0) | (input_position >= case.l_in))).any(dim=1)


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("case,dtype,tf32", [
    (Case(2, 136, 200, 3, 20001, padding=1), torch.float32, True),                 # 4 phases
    (Case(4, 128, 128, 3, 3003, padding=2, groups=2), torch.float32, False),       # 4 phases, strict
    (Case(2, 136, 200, 3, 20004, padding=1), torch.bfloat16, True),                # 2 phases
], ids=lambda v: case_id(v) if isinstance(v, Case) else str(v), indirect=["tf32"])
def test_row_ends_stay_in_their_rows(case, dtype, value, device, tf32):
    """x's rows of no 16-byte multiple go to the pipelined forward as TMA boxes of rows back to back
    (map_row_phases), where positions past a row's ends hold the next or the previous row (those
    tiles go row by row): a value at a row's last position and one at the next row's first must
    reach only their own rows' outputs."""
    if device != "cuda":
        pytest.skip("a CUDA plan")
    plan = explain(case.n, case.c_in, case.c_out, case.k, case.l_in, padding=case.padding, groups=case.groups, dtype=dtype,
                   tf32=tf32)["forward"]
    assert plan["tensor_rows"] == 1 and plan["map_row_phases"] > 1, plan  # (on an H100 or H200)
    x, w, b = _inputs(case, dtype, device)
    x = x.detach().clone()
    x[0, 0, -1] = value
    x[0, 1, 0] = -value
    expected, _ = reference(x, w, b, case)
    assert torch.equal(_classes(ours(x, w, b, case)), _classes(expected))


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_exact_forward_sees_values_off_16_byte_boundaries(dtype, where, value, device, tf32):
    """A forward with an exact plan (zero taps merged, every math) over a contiguous x that starts 3
    elements past a 16-byte boundary and holds no whole number of 16-byte vectors: the merged tiles
    that a value at either end of x, or in the middle, reaches must flag it for the exact plan."""
    case = Case(2, 96, 1, 5, 8499, stride=3, padding=1)
    x, w, b = _inputs(case, dtype, device)
    storage = torch.empty(x.numel() + 3, dtype=dtype, device=device)
    x = storage[3:].view(x.shape).copy_(x)
    assert x.is_contiguous() and x.storage_offset() == 3
    x.view(-1)[{"first": 0, "middle": x.numel() // 2, "last": -1}[where]] = value
    expected, _ = reference(x, w, b, case)
    assert torch.equal(_classes(ours(x, w, b, case)), _classes(expected))


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", quick_params(SPECIAL_CASES, SPECIAL_CASES[:1]), ids=case_id)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_gradients_propagate_like_torch(case, dtype, value, device, tf32):
    """Inf/NaN in grad_output reach grad_input, grad_weight and grad_bias where torch puts them. (Not
    planted in the input: torch's grad_weight also turns NaN where a tap of a NaN input element falls
    outside the output, as 0 x NaN of its padding; ours leaves out the products that do not exist.)"""
    _assert_gradients_propagate(case, dtype, value, device, position=1)


def _assert_gradients_propagate(case, dtype, value, device, position):
    x, w, b = _inputs(case, dtype, device, requires_grad=True)
    y = ours(x, w, b, case)
    expected, inputs64 = reference(x, w, b, case)
    grad_y = _plant(torch.randn(expected.shape, dtype=torch.float64), value, position)
    grads = torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], grad_y.to(device=device, dtype=dtype))
    expected_grads = torch.autograd.grad(expected, [t for t in inputs64 if t is not None], grad_y)
    for grad, expected_grad in zip(grads, expected_grads):
        assert torch.equal(_classes(grad), _classes(expected_grad))


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_box_tiles_keep_grad_output_values_in_place(dtype, value, device, monkeypatch):
    """The sm_90 grad_weight box tiles (forced on: CONVT_GRAD_WEIGHT_BOXES=always; float32 in TF32,
    over grad_y unrolled by taps) read each tap's grad_y through a tensor map whose positions end
    where the tap's x positions do: a value at grad_y's last position reaches only the taps whose
    products hold it."""
    monkeypatch.setenv("CONVT_GRAD_WEIGHT_BOXES", "always")
    _assert_gradients_propagate(Case(2, 136, 48, 3, 150, padding=1), dtype, value, device, position=1)


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_channels_last_grad_input_keeps_values_in_place(dtype, value, device, monkeypatch):
    """grad_input over grad_y copied channels-last (forced on: CONVT_GRAD_INPUT_COPIES=always, TF32 and
    16-bit) with zero taps: the copy flags Inf or NaN, and the exact plan runs over grad_output."""
    monkeypatch.setenv("CONVT_GRAD_INPUT_COPIES", "always")
    _assert_gradients_propagate(Case(24, 100, 36, 7, 600, stride=4, padding=2, output_padding=1), dtype, value, device, position=1)


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_reduction_split_keeps_values_in_place(dtype, value, device, tf32, monkeypatch):
    """The reduction split (forced on: CONVT_GEMM_SPLITS=always) of a grad_input with zero taps, whose
    exact plan runs unsplit over the split's sums where grad_output holds Inf or NaN."""
    monkeypatch.setenv("CONVT_GEMM_SPLITS", "always")
    _assert_gradients_propagate(Case(3, 4, 600, 9, 80, stride=4, padding=3), dtype, value, device, position=7)


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_chunk_ranges_keep_values_in_place(dtype, value, device, tf32, workspace_16mb):
    """Chunk ranges of a grad_input with zero taps (ZERO_TAP_CHUNK_RANGE_CASES), whose exact plan runs
    over the ranges' sums where grad_output holds Inf or NaN; and of the TF32 forward where x does."""
    if device != "cuda":
        pytest.skip("a CUDA plan")
    case = ZERO_TAP_CHUNK_RANGE_CASES[0]
    _assert_gradients_propagate(case, dtype, value, device, position=7)
    x, w, b = _inputs(case, dtype, device)
    x = _plant(x, value, position=5)
    expected, _ = reference(x, w, b, case)
    assert torch.equal(_classes(ours(x, w, b, case)), _classes(expected))


@pytest.mark.parametrize(**VALUES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_mid_row_gradients_propagate_like_torch(dtype, value, device, tf32):
    """The same with the value in the middle of a long grad_output row, which the sm_90 warpgroup
    grad_weight stages in 16-byte chunks (the rows' ends go element by element)."""
    case = Case(2, 40, 48, 3, 300, padding=1)
    _assert_gradients_propagate(case, dtype, value, device, position=case.l_out // 2)
