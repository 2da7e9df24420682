"""torch.library.opcheck: schema, fake implementation, autograd registration, AOT dispatch."""
import pytest
import torch

from conftest import CASES, case_id, make_inputs, quick_params


# The quick subset's cases: plain, strided with padding, groups, N = 0, unbatched, channels-last (GEMM path)
QUICK_CASES = [CASES[0], CASES[1], CASES[6], CASES[13], CASES[14], CASES[19]]


def _backward_args(case, x, w):
    y = torch.ops.convt.conv_transpose1d(x, w, None, [case.stride], [case.padding], [case.output_padding],
                                         case.groups, [case.dilation])
    return (torch.randn_like(y), x, w, [case.stride], [case.padding], [case.output_padding], case.groups,
            [case.dilation], [True, True, True])


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("case", quick_params(CASES, QUICK_CASES), ids=case_id)
def test_opcheck_forward(case, requires_grad, device):
    x, w, b = make_inputs(case, torch.float64, device, requires_grad=requires_grad)
    args = (x, w, b, [case.stride], [case.padding], [case.output_padding], case.groups, [case.dilation])
    torch.library.opcheck(torch.ops.convt.conv_transpose1d.default, args)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("case", quick_params(CASES[:6] + CASES[13:15], QUICK_CASES), ids=case_id)
def test_opcheck_backward(case, requires_grad, device):
    x, w, _ = make_inputs(case, torch.float64, device, requires_grad=requires_grad)
    args = _backward_args(case, x.detach(), w.detach())
    for t in args[:3]:
        t.requires_grad_(requires_grad)
    torch.library.opcheck(torch.ops.convt.conv_transpose1d_backward.default, args)
