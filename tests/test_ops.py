"""convt.conv_transpose1d and its backward against a float64 reference, over every argument."""
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torch_convt_op
from conftest import (CASES, DTYPES, Case, assert_backward_matches_reference, assert_close, assert_gradients_deterministic,
                      case_id, make_inputs, ours, poison_allocator, product_norms, quick, reference, relaid, relative_error)


@quick
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_forward_matches_reference(case, dtype, device):
    x, w, b = make_inputs(case, dtype, device)
    poison_allocator(device)
    y = ours(x, w, b, case)
    expected, _ = reference(x, w, b, case)
    assert y.dtype == dtype and y.device.type == device
    assert y.is_contiguous()
    assert_close(y, expected, dtype, device, norms=product_norms(x, w, case), case=case)


@quick
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradients_match_reference(case, dtype, device):
    assert_backward_matches_reference(case, dtype, device)


# A weight or bias in any layout (an nn.Module's may be a view): tensor-core, depthwise and direct paths
@quick
@pytest.mark.parametrize("layout", ["transposed", "last_first", "strided"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", [CASES[0], CASES[1], Case(2, 6, 12, 5, 37, stride=3, padding=2, groups=6),
                                  Case(2, 4, 6, 3, 9, stride=2)], ids=case_id)
def test_weight_and_bias_in_any_layout(case, dtype, layout, device):
    x, w, b = make_inputs(case, dtype, device)
    w, b = relaid(w, layout).requires_grad_(), relaid(b, "strided" if layout == "transposed" else layout).requires_grad_()
    assert not w.is_contiguous()
    x.requires_grad_()
    y = ours(x, w, b, case)
    expected, inputs64 = reference(x, w, b, case)
    assert_close(y, expected, dtype, device, case=case)
    grad_y = torch.randn_like(expected).to(dtype)  # the same values, exact in dtype, for ours and the reference
    grads = torch.autograd.grad(y, (x, w, b), grad_y.to(device))
    expected_grads = torch.autograd.grad(expected, inputs64, grad_y.double())
    for name, grad, expected_grad in zip(("grad_input", "grad_weight", "grad_bias"), grads, expected_grads):
        assert_close(grad, expected_grad, dtype, device, what=name, case=case)


@pytest.mark.parametrize("case", [Case(2, 4, 6, 3, 5, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
                                  Case(1, 3, 2, 4, 4, stride=3, bias=False, batched=False),
                                  Case(2, 4, 4, 2, 3, groups=4, layout="channels_last")], ids=case_id)
def test_gradcheck_and_gradgradcheck(case, device):
    x, w, b = make_inputs(case, torch.float64, device, requires_grad=True)
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def f(*args):
        return ours(args[0], args[1], args[2] if case.bias else None, case)

    assert gradcheck(f, inputs)
    assert gradgradcheck(f, inputs)


@quick
def test_output_is_fresh(device):
    case = Case(1, 4, 4, 1, 8)  # K = 1, stride 1: the output has the input's shape
    x, w, b = make_inputs(case, torch.float32, device)
    y = ours(x, w, b, case)
    assert y.untyped_storage().data_ptr() not in (x.untyped_storage().data_ptr(), w.untyped_storage().data_ptr())


@quick
def test_empty_batch_gives_empty_output_and_zero_weight_gradients(device):
    case = Case(0, 4, 6, 3, 9)
    x, w, b = make_inputs(case, torch.float32, device, requires_grad=True)
    y = ours(x, w, b, case)
    assert y.shape == (0, 6, 11)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))
    assert x.grad.shape == x.shape


@quick
@pytest.mark.parametrize("case", [CASES[2], CASES[8]], ids=case_id)
def test_gradients_are_deterministic(case, device):
    x, w, b = make_inputs(case, torch.float32, device, requires_grad=True)
    assert_gradients_deterministic(x, w, b, case)


@quick
def test_accepts_int_or_one_element_lists(device):
    case = Case(2, 4, 6, 3, 9, stride=2, padding=1, output_padding=1, dilation=2)
    x, w, b = make_inputs(case, torch.float64, device)
    as_ints = torch_convt_op.conv_transpose1d(x, w, b, 2, 1, 1, 1, 2)
    as_lists = torch_convt_op.conv_transpose1d(x, w, b, [2], (1,), [1], 1, (2,))
    as_op = torch.ops.convt.conv_transpose1d(x, w, b, [2], [1], [1], 1, [2])
    assert torch.equal(as_ints, as_lists) and torch.equal(as_ints, as_op)
    assert relative_error(as_ints, reference(x, w, b, case)[0]) < 1e-12


@quick
def test_defaults_match_functional(device):
    case = Case(2, 4, 6, 3, 9)
    x, w, b = make_inputs(case, torch.float64, device)
    assert relative_error(torch.ops.convt.conv_transpose1d(x, w), reference(x, w, None, case)[0]) < 1e-12
