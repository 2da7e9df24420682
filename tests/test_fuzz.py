"""Property-based sweep: forward and gradients equal torch.nn.functional.conv_transpose1d in float64.

The CI profile is bounded (HYPOTHESIS_PROFILE=ci, the default); CONVT_FUZZ_PROFILE=big runs thousands."""
import os

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import DEVICES, Case, make_inputs, ours, reference, relative_error

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("big", max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("CONVT_FUZZ_PROFILE", "ci"))


@st.composite
def cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
    c_in = groups * draw(st.integers(1, 6))
    c_out = groups * draw(st.integers(1, 6))
    k = draw(st.integers(1, 9))
    stride = draw(st.integers(1, 9))
    dilation = draw(st.integers(1, 4))
    output_padding = draw(st.integers(0, max(stride, dilation) - 1))
    padding = draw(st.integers(0, 8))
    l_in = draw(st.integers(1, 40))
    l_out = (l_in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
    if l_out < 1:
        padding = 0
    batched = draw(st.booleans())
    n = draw(st.integers(0, 3)) if batched else 1
    return Case(n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups,
                bias=draw(st.booleans()), batched=batched,
                layout=draw(st.sampled_from(["contiguous", "channels_last"])))


@given(case=cases(), device=st.sampled_from(DEVICES), seed=st.integers(0, 2**31 - 1))
def test_matches_torch_in_float64(case, device, seed):
    generator = torch.Generator().manual_seed(seed)
    x, w, b = make_inputs(case, torch.float64, device, requires_grad=True, generator=generator)
    y = ours(x, w, b, case)
    expected, inputs64 = reference(x, w, b, case)
    assert relative_error(y, expected) < 1e-12
    if y.numel() == 0:
        return
    grad_y = torch.randn(expected.shape, dtype=torch.float64, generator=generator)
    wanted = [t for t in (x, w, b) if t is not None]
    grads = torch.autograd.grad(y, wanted, grad_y.to(device))
    expected_grads = torch.autograd.grad(expected, [t for t in inputs64 if t is not None], grad_y)
    for grad, expected_grad in zip(grads, expected_grads):
        assert relative_error(grad, expected_grad) < 1e-12
