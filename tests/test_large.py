"""Sizes past 32-bit indexing: outputs with more than 2^31 elements (every kernel path, on each device
with the memory for them), and rows long enough that the CPU's GEMM micro-kernel cannot take them.
Checked on windows (start, middle, end) against torch.nn.functional.conv_transpose1d in float64 on
the matching input slice."""
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import Case, assert_close, make_inputs, needs_memory, ours, requires_cuda


def window_reference(x, w, b, case: Case, start: int, width: int) -> torch.Tensor:
    """Output positions [start, start + width) in float64, from the input positions that reach them:
    y[j] gets x[i] * w[k] for j = i*stride + k*dilation - padding."""
    span = case.dilation * (case.k - 1)
    first = max(0, -(-(start + case.padding - span) // case.stride))
    last = min(case.l_in - 1, (start + width - 1 + case.padding) // case.stride)
    window = torch.zeros(x.shape[0], case.c_out, width, dtype=torch.float64)
    if first <= last:
        part = F.conv_transpose1d(x[..., first:last + 1].double().cpu(), w.double().cpu(), None, case.stride, 0, 0,
                                  case.groups, case.dilation)
        offset = first * case.stride - case.padding - start  # window position of part's position 0
        lo, hi = max(0, offset), min(width, offset + part.shape[-1])
        window[..., lo:hi] = part[..., lo - offset:hi - offset]
    if b is not None:
        window += b.double().cpu()[:, None]
    return window


def check_windows(y, x, w, b, case, dtype, device, width=4096):
    length = y.shape[-1]
    for start in (0, length // 2 - width // 2, length - width):
        expected = window_reference(x, w, b, case, start, width)
        assert_close(y[..., start:start + width], expected, dtype, device, f"output[{start}:{start + width}]",
                     case=case)


def large_inputs(case: Case, dtype, device, requires_grad=False):
    """Fresh random input, weight and bias drawn on `device` (drawing billions in float64 is slow)."""
    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_(requires_grad)

    return randn(case.n, case.c_in, case.l_in), randn(case.c_in, case.c_out // case.groups, case.k), randn(case.c_out)


def _free_gib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else 0.0
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


def _needed_gib(case: Case, dtype, device: str) -> float:
    """Input plus output, with room: the CPU runs 16-bit values in float32 buffers (a peak of 3x the
    fp16 case's bytes, measured), the GPU needs little beyond the tensors."""
    elements = case.n * (case.c_in * case.l_in + case.c_out * case.l_out)
    return (1.5 if device == "cuda" else 4.5) * elements * torch.empty(0, dtype=dtype).element_size() / 2**30


LARGE_CASES = [  # (case, dtype): more than 2^31 output elements each
    (Case(2, 16, 64, 3, 2**24 + 1, padding=1), torch.float16),                        # tensor cores, out_step 1
    (Case(1, 16, 32, 4, 2**25 + 3, stride=2, padding=1), torch.float32),              # tensor cores, staged
    (Case(1, 2, 2, 5, 2**30 + 9, stride=2, padding=2, groups=2), torch.bfloat16),     # depthwise, L_out > 2^31
    (Case(1, 2, 1, 3, 2**30 + 5, stride=2, output_padding=1), torch.float64),         # direct kernels, L_out > 2^31
]


@pytest.mark.parametrize("case,dtype", LARGE_CASES, ids=lambda v: str(v))
def test_outputs_past_2_31_elements(case, dtype, device):
    needed = _needed_gib(case, dtype, device)
    if _free_gib(device) < needed:
        pytest.skip(needs_memory(needed, device))
    x, w, b = large_inputs(case, dtype, device)
    y = ours(x, w, b, case)
    assert y.numel() > 2**31
    check_windows(y, x, w, b, case, dtype, device)


@pytest.mark.skipif(_free_gib("cuda") < 48, reason=needs_memory(48, "cuda"))
@requires_cuda  # (the closer mark is evaluated first)
def test_gradients_past_2_31_elements():
    case = Case(2, 16, 64, 3, 2**24 + 1, padding=1)
    x, w, b = large_inputs(case, torch.float16, "cuda", requires_grad=True)
    y = ours(x, w, b, case)
    grad_y = torch.randn_like(y)
    grad_x, grad_w = torch.autograd.grad(y, (x, w), grad_y)
    # grad_input window: the forward's adjoint, a strided conv1d of grad_y, over the slice it reads
    start, width = x.shape[-1] // 2, 4096
    expected = F.conv1d(grad_y[..., start:start + width + 2].double().cpu(), w.double().cpu())
    assert_close(grad_x[..., start + 1:start + width + 1], expected[..., :width], torch.float16, "cuda", "grad_input",
                 case=case)
    # grad_weight in full: grad_w[ci, co, k] = sum over n, i of x[n, ci, i] gy[n, co, i + k - 1], float64 in chunks
    expected_w = torch.zeros(w.shape, dtype=torch.float64, device="cuda")
    length, chunk = x.shape[-1], 2**22
    for k in range(case.k):
        shift = k - case.padding
        for first in range(max(0, -shift), min(length, length - shift), chunk):
            last = min(first + chunk, length, length - shift)
            expected_w[:, :, k] += torch.einsum("ncl,nol->co", x[..., first:last].double(),
                                                grad_y[..., first + shift:last + shift].double())
    assert_close(grad_w, expected_w, torch.float16, "cuda", "grad_weight", case=case)


def test_cpu_rows_longer_than_the_micro_kernel_takes():
    """float32 rows of 2^24 + positions: leading dimensions past what oneDNN's brgemm accepts."""
    case = Case(1, 2, 3, 3, 2**24 + 3, stride=1, padding=1)
    x, w, b = make_inputs(case, torch.float32, "cpu")
    y = ours(x, w, b, case)
    check_windows(y, x, w, b, case, torch.float32, "cpu")
