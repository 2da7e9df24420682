"""Inside torch.autocast the op does what torch's convolutions do: floating inputs (float64 aside) run in
the region's dtype, the output has that dtype, and float32 leaves get float32 gradients; eager, swapped
into a model, and under torch.compile."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_convt_op
from conftest import CASES, Case, assert_close, make_inputs, ours, quick, reference, relative_error, tolerance
from torch_convt_op.tolerances import reduction_length

REGION_DTYPES = [torch.bfloat16, torch.float16]


@quick
@pytest.mark.parametrize("region_dtype", REGION_DTYPES, ids=str)
@pytest.mark.parametrize("case", [CASES[1], Case(2, 6, 12, 5, 37, stride=3, padding=2, groups=6),
                                  Case(2, 4, 6, 3, 9, stride=2, bias=False)], ids=str)
def test_runs_in_the_region_dtype(case, region_dtype, device):
    x, w, b = make_inputs(case, torch.float32, device, requires_grad=True)
    leaves = [t for t in (x, w, b) if t is not None]
    with torch.autocast(device, dtype=region_dtype):
        y = ours(x, w, b, case)
        torch_dtype = F.conv_transpose1d(x, w, b, case.stride, case.padding, case.output_padding, case.groups,
                                         case.dilation).dtype
    assert y.dtype == region_dtype == torch_dtype
    # exactly the op on inputs cast by hand, forward and backward
    cast = [t.to(region_dtype) if t is not None else None for t in (x, w, b)]
    by_hand = ours(*cast, case)
    assert torch.equal(y, by_hand)
    grad_y = torch.randn(y.shape, dtype=torch.float64).to(device, region_dtype)
    grads = torch.autograd.grad(y, leaves, grad_y)
    grads_by_hand = torch.autograd.grad(by_hand, leaves, grad_y)
    for grad, grad_by_hand in zip(grads, grads_by_hand):
        assert grad.dtype == torch.float32 and torch.equal(grad, grad_by_hand)
    expected, _ = reference(*cast, case)
    assert_close(y, expected, region_dtype, device, case=case)


@quick
def test_float64_is_left_alone(device):
    case = Case(2, 4, 6, 3, 9, stride=2, padding=1)
    x, w, b = make_inputs(case, torch.float64, device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = ours(x, w, b, case)
    assert y.dtype == torch.float64
    assert_close(y, reference(x, w, b, case)[0], torch.float64, device, case=case)


@quick
def test_outside_a_region_nothing_is_cast(device):
    case = Case(2, 4, 6, 3, 9)
    x, w, b = make_inputs(case, torch.float32, device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=False):
        assert ours(x, w, b, case).dtype == torch.float32


@quick
@pytest.mark.parametrize("region_dtype", REGION_DTYPES, ids=str)
def test_swapped_model_matches_torch_in_a_region(region_dtype, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv1d(8, 16, 3, padding=1), torch.nn.LeakyReLU(0.1),
                                torch.nn.ConvTranspose1d(16, 8, 16, stride=8, padding=4)).to(device)
    swapped = torch_convt_op.ConvTranspose1d.convert(copy.deepcopy(model))
    assert isinstance(swapped[2], torch_convt_op.ConvTranspose1d) and not isinstance(model[2], torch_convt_op.ConvTranspose1d)
    x = torch.randn(2, 8, 40, device=device)
    seen = []  # the upsampler's input, as the region hands it over
    swapped[2].register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    with torch.autocast(device, dtype=region_dtype):
        expected, actual = model(x), swapped(x)
    assert actual.dtype == expected.dtype == region_dtype
    # ours against float64 on the values it got (input, weight and bias in the region dtype), and against
    # torch's own result, which is off by up to the same tolerance
    (up_input,) = seen
    assert up_input.dtype == region_dtype
    layer = swapped[2]
    case = Case(2, 16, 8, 16, 40, stride=8, padding=4)
    weight, bias = (t.detach().to(region_dtype) for t in (layer.weight, layer.bias))
    assert_close(actual, reference(up_input, weight, bias, case)[0], region_dtype, device, case=case)
    assert relative_error(actual, expected) <= 2 * tolerance(region_dtype, device, reduction_length(case, "y"))


def test_compiled_in_a_region(device):
    case = Case(2, 8, 6, 4, 16, stride=2, padding=1, output_padding=1, groups=2)
    x, w, b = make_inputs(case, torch.float32, device, requires_grad=True)

    def f(x, w, b):
        with torch.autocast(device, dtype=torch.bfloat16):
            return torch.tanh(ours(x, w, b, case))

    eager = f(x, w, b)
    compiled = torch.compile(f, fullgraph=True)(x, w, b)
    assert compiled.dtype == eager.dtype == torch.bfloat16
    # the same bfloat16 op and tanh, each rounded to bfloat16: at most the rounding of each, twice the tolerance
    assert relative_error(compiled, eager) <= 2 * tolerance(torch.bfloat16, device, reduction_length(case, "y"))
    grads = torch.autograd.grad(compiled.float().sum(), (x, w, b))
    assert all(g.dtype == torch.float32 for g in grads)
