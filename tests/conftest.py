"""Shared test vocabulary: devices, dtypes and their tolerances, the argument grid, random inputs
and the float64 reference (torch.nn.functional.conv_transpose1d on the CPU)."""
import collections
import gc
from typing import Optional

import pytest
import torch
import torch.nn.functional as F

import torch_convt_op  # noqa: F401  (loads torch.ops.convt)
from torch_convt_op.shapes import Case  # one problem: sizes, arguments, input layout (shared with bench.py)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# max |ours - reference| / max |reference| allowed, per dtype
_TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
_TF32_TOLERANCE = 3e-3


def tf32_enabled() -> bool:
    return torch.backends.cudnn.allow_tf32


def tolerance(dtype: torch.dtype, device: str) -> float:
    if dtype == torch.float32 and device.startswith("cuda") and tf32_enabled():
        return _TF32_TOLERANCE
    return _TOLERANCE[dtype]


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


# Input layouts (see relaid): a transposed (N, L, C) view, every other position of a longer row, rows
# not 16-byte aligned.
LAYOUTS = ["contiguous", "channels_last", "strided", "offset"]


def case_id(case: Case) -> str:
    return str(case)


def relaid(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout (a leaf without grad): "contiguous"; "channels_last"
    (the last two dims swapped in memory); "transposed" (the first two swapped); "last_first" (the
    last dim outermost); "strided" (every other element of rows whose gaps hold NaN); "offset" (rows
    starting one element into their storage, so not 16-byte aligned)."""
    t = t.detach()
    if layout == "contiguous":
        return t.contiguous()
    if layout == "channels_last":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "transposed":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "last_first":
        return t.movedim(-1, 0).contiguous().movedim(0, -1)
    spread = torch.full((*t.shape[:-1], 2 * t.shape[-1] if layout == "strided" else t.shape[-1] + 1), float("nan"),
                        dtype=t.dtype, device=t.device)
    if layout == "strided":
        spread[..., ::2] = t
        return spread[..., ::2]
    assert layout == "offset", layout
    spread[..., 1:] = t
    return spread[..., 1:]


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


def assert_close(actual, expected, dtype, device, what="output", norms=None):
    err = relative_error(actual, expected, norms)
    tol = tolerance(dtype, device)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:.3g}"


def assert_gradients_close(y, expected, inputs, inputs64, case: Case, dtype, device):
    """The gradients of our y (from inputs x, w, b) and of the float64 reference `expected` (from
    inputs64) for one random grad_output agree; unwritten gradient elements show as NaN."""
    grad_y = torch.randn_like(expected)
    poison_allocator(device)
    grads = torch.autograd.grad(y, [t for t in inputs if t is not None], grad_y.to(device, dtype))
    expected_grads = torch.autograd.grad(expected, [t for t in inputs64 if t is not None], grad_y)
    names = ("grad_input", "grad_weight", "grad_bias")
    for name, grad, expected_grad, norms in zip(names, grads, expected_grads, product_norms(*inputs[:2], case, grad_y)):
        assert grad.dtype == dtype
        assert_close(grad, expected_grad, dtype, device, name, norms)


def assert_backward_matches_reference(case: Case, dtype, device, check_forward: bool = False):
    """Fresh inputs (requires_grad) and a poisoned allocator; our gradients (and, given
    check_forward, our y) against the float64 reference. Returns (x, w, b) for further checks."""
    x, w, b = make_inputs(case, dtype, device, requires_grad=True)
    poison_allocator(device)
    y = ours(x, w, b, case)
    expected, inputs64 = reference(x, w, b, case)
    if check_forward:
        assert_close(y, expected, dtype, device, norms=product_norms(x, w, case))
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


# ---- the quick subset (python -m pytest tests -q -m quick) ---------------------------------------
# A test joins it with @quick; a test over many parameters can put only some in it, with quick_params.
quick = pytest.mark.quick


def pytest_configure(config):
    """Registers the marker where pyproject.toml is not read (the tests run from a copy, as .ci/run does
    against the wheel)."""
    if not any(line.startswith("quick:") for line in config.getini("markers")):
        config.addinivalue_line("markers", "quick: a representative subset, under 2 minutes on 2 CPU cores")


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
