"""torch.library.opcheck: schema, fake implementation, autograd registration, AOT dispatch; and the
backward op's output_mask, each pattern's gradients against float64."""
import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_convt_op
from conftest import (CASES, CPU_TILE_CASES, DTYPES, assert_close, case_id, make_inputs, poison_allocator, product_norms,
                      quick, quick_params, relaid)


# The quick subset's cases: plain, strided with padding, groups, N = 0, unbatched, channels-last (GEMM path)
QUICK_CASES = [CASES[0], CASES[1], CASES[6], CASES[13], CASES[14], CASES[19]]

# Every output_mask of the backward op, all-false included (three empty outputs)
MASKS = list(itertools.product([False, True], repeat=3))
FULL_MASK = (True, True, True)

# opcheck runs the op many times over (fake tensors, AOT tracing): the backward's opchecks run each case
# with at most this many batch elements and input positions
OPCHECK_SCALE = {"n": 2, "l_in": 48}


def mask_id(mask) -> str:
    return "mask=" + "".join("1" if m else "0" for m in mask)


def _backward_args(case, x, w, grad_y, mask):
    return (grad_y, x, w, [case.stride], [case.padding], [case.output_padding], case.groups, [case.dilation],
            list(mask))


def _grad_output(case, x, w, dtype=torch.float64):
    """A fresh random grad_output of y's shape, in case.layout."""
    y = torch.ops.convt.conv_transpose1d(x, w, None, [case.stride], [case.padding], [case.output_padding],
                                         case.groups, [case.dilation])
    return relaid(torch.randn(y.shape, dtype=torch.float64).to(x.device, dtype), case.layout)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("case", quick_params(CASES, QUICK_CASES), ids=case_id)
def test_opcheck_forward(case, requires_grad, device):
    x, w, b = make_inputs(case, torch.float64, device, requires_grad=requires_grad)
    args = (x, w, b, [case.stride], [case.padding], [case.output_padding], case.groups, [case.dilation])
    torch.library.opcheck(torch.ops.convt.conv_transpose1d.default, args)


def _backward_opchecks():
    """Every case with every mask, its inputs requiring grad (the autograd registration and a traced backward of
    the backward), and every case without grad with the full mask; the quick subset's cases with the full mask."""
    params = []
    for case, mask, requires_grad in ([(case, mask, True) for case in CASES for mask in MASKS]
                                      + [(case, FULL_MASK, False) for case in CASES]):
        marks = [quick] if case in QUICK_CASES and mask == FULL_MASK else []
        params.append(pytest.param(case, mask, requires_grad, marks=marks,
                                   id=f"{case_id(case)}-{mask_id(mask)}-{'requires_grad' if requires_grad else 'no_grad'}"))
    return params


@pytest.mark.parametrize("case,mask,requires_grad", _backward_opchecks())
def test_opcheck_backward(case, mask, requires_grad, device):
    case = case.scaled(**OPCHECK_SCALE)
    x, w, _ = make_inputs(case, torch.float64, device)
    args = _backward_args(case, x, w, _grad_output(case, x, w), mask)
    for t in args[:3]:
        t.requires_grad_(requires_grad)
    torch.library.opcheck(torch.ops.convt.conv_transpose1d_backward.default, args)


# The backward op called directly with each mask, against float64 autograd through torch's own op: the
# direct path (strided, grouped), depthwise, the GEMM path (contiguous, a transposed and a strided input
# view with grad_output laid out alike, groups, several column tiles), an empty batch and an unbatched input.
MASK_VALUE_CASES = [
    CASES[1],                                           # direct, strided
    CASES[6],                                           # direct, groups
    CASES[8],                                           # depthwise
    CASES[13],                                          # N = 0
    CASES[14],                                          # unbatched
    CASES[19],                                          # GEMM, channels-last input and grad_output
    dataclasses.replace(CASES[31], layout="strided"),   # GEMM, every other element of NaN-padded rows
    CASES[22],                                          # GEMM, two groups, strided
    CPU_TILE_CASES[1],                                  # GEMM, several column tiles and grad_weight chunks
]


@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", quick_params(MASK_VALUE_CASES, MASK_VALUE_CASES[:3]), ids=case_id)
def test_backward_output_mask_matches_reference(case, dtype, mask, device):
    x, w, _ = make_inputs(case, dtype, device)
    grad_y = _grad_output(case, x, w, dtype)
    poison_allocator(device)
    if mask == FULL_MASK:  # the wrapper's default
        grads = torch_convt_op.conv_transpose1d_backward(grad_y, x, w, *case.args[:3], case.groups, case.dilation)
    else:
        grads = torch_convt_op.conv_transpose1d_backward(grad_y, x, w, *case.args[:3], case.groups, case.dilation,
                                                         output_mask=mask)
    x64, w64, b64 = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (x, w, torch.zeros(case.c_out)))
    expected = F.conv_transpose1d(x64, w64, b64, case.stride, case.padding, case.output_padding, case.groups,
                                  case.dilation)
    grad_y64 = grad_y.to("cpu", torch.float64)
    expected_grads = torch.autograd.grad(expected, (x64, w64, b64), grad_y64)
    norms = product_norms(x, w, case, grad_y64)
    for wanted, name, grad, expected_grad, norm in zip(mask, ("grad_input", "grad_weight", "grad_bias"), grads,
                                                       expected_grads, norms):
        assert grad.dtype == dtype and grad.device == x.device, name
        if not wanted:
            assert grad.numel() == 0, name
            continue
        assert grad.shape == expected_grad.shape, name
        assert_close(grad, expected_grad, dtype, device, name, norm, case=case)
