"""Bad input raises a clear error naming the argument, in the cases where PyTorch raises, on every
device; and sizes beyond what the index math supports."""
import re

import pytest
import torch
import torch.nn.functional as F
from expecttest import assert_expected_inline

import torch_convt_op
from conftest import quick

pytestmark = quick  # every test here is in the quick subset


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


X, W = _x(2, 4, 5), _x(4, 3, 3)

# (name, call kwargs, text the error must contain)
BAD_INPUTS = [
    ("input 1-D", dict(input=_x(5)), "expected input to be 2-D (C_in, L_in) or 3-D (N, C_in, L_in)"),
    ("input 4-D", dict(input=_x(1, 2, 4, 5)), "expected input to be 2-D"),
    ("weight 2-D", dict(weight=_x(4, 3)), "expected weight to be 3-D"),
    ("C_in mismatch", dict(weight=_x(5, 3, 3)),
     "expected input[2, 4, 5] to have 5 channels (weight.size(0)), but got 4 channels instead"),
    ("groups not dividing", dict(groups=3), "expected groups (3) to divide the input channels (4)"),
    ("groups 0", dict(groups=0), "expected groups >= 1"),
    ("stride 0", dict(stride=0), "expected stride >= 1"),
    ("dilation 0", dict(dilation=0), "expected dilation >= 1"),
    ("negative padding", dict(padding=-1), "expected padding >= 0"),
    ("negative output_padding", dict(output_padding=-1), "expected output_padding >= 0"),
    ("output_padding too large", dict(stride=2, output_padding=2),
     "expected output_padding to be smaller than stride or dilation"),
    ("L_out < 1", dict(padding=10), "the output length (L_out) would be"),
    ("bias wrong size", dict(bias=_x(4)), "expected bias to be 1-D of size (C_out,) = (3)"),
    ("bias 2-D", dict(bias=_x(3, 1)), "expected bias to be 1-D"),
    ("stride list of 2", dict(stride=[1, 1]), "expected stride to be a single integer value"),
    ("mixed dtypes", dict(weight=_x(4, 3, 3, dtype=torch.float64)), "expected weight to have the same dtype as input"),
    ("bias dtype", dict(bias=_x(3, dtype=torch.float64)), "expected bias to have the same dtype as input"),
    ("integer dtype", dict(input=X.long(), weight=W.long()), "expected input to be float16, bfloat16, float32 or float64"),
    ("complex dtype", dict(input=X.cfloat(), weight=W.cfloat()), "expected input to be float16"),
    ("zero channels", dict(input=_x(2, 0, 5), weight=_x(0, 3, 3)), "expected input to have at least 1 channel"),
    ("zero length", dict(input=_x(2, 4, 0)), "expected input to have length (last dim) of at least 1"),
    ("zero kernel", dict(weight=_x(4, 3, 0)), "expected weight.size(2) (kernel size) >= 1"),
    # beyond what the index math supports (torch would try to allocate the output)
    ("stride 2^31", dict(stride=2**31), "expected stride < 2^31"),
    ("padding 2^31", dict(padding=2**31), "expected padding < 2^31"),
    ("dilation 2^31", dict(dilation=2**31), "expected dilation < 2^31"),
    ("output_padding 2^31", dict(stride=2**31 - 1, output_padding=2**31), "expected output_padding < 2^31"),
    ("groups 2^31", dict(groups=2**31), "expected groups < 2^31"),
]
TORCH_ACCEPTS = {"integer dtype", "complex dtype", "zero kernel", "stride 2^31", "padding 2^31", "dilation 2^31",
                 "output_padding 2^31", "groups 2^31"}


def _call(device="cpu", **overrides):
    kwargs = dict(input=X, weight=W, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1)
    kwargs.update(overrides)
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("name,overrides,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_clear_error(name, overrides, message, device):
    kwargs = _call(device, **overrides)
    with pytest.raises(RuntimeError, match="conv_transpose1d") as ours:
        torch_convt_op.conv_transpose1d(**kwargs)
    assert message in str(ours.value)
    if name not in TORCH_ACCEPTS and device == "cpu":  # (torch 2.11 crashes on some of these on CUDA)
        with pytest.raises(RuntimeError):
            F.conv_transpose1d(**kwargs)


@pytest.mark.parametrize("name,overrides,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_the_same_error_under_fake_tensors(name, overrides, message):
    from torch._subclasses.fake_tensor import FakeTensorMode

    kwargs = _call(**overrides)
    with FakeTensorMode() as mode:
        kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        with pytest.raises(RuntimeError) as ours:
            torch_convt_op.conv_transpose1d(**kwargs)
    assert message in str(ours.value)


def test_sizes_beyond_the_index_math_raise():
    """On fake tensors: real ones would take 8 GB each."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with pytest.raises(RuntimeError, match=re.escape("expected input length (last dim) < 2^31")):
            torch_convt_op.conv_transpose1d(torch.empty(1, 4, 2**31), torch.empty(4, 3, 3))
        with pytest.raises(RuntimeError, match=re.escape("expected weight.size(2) (kernel size) < 2^31")):
            torch_convt_op.conv_transpose1d(torch.empty(1, 4, 5), torch.empty(4, 3, 2**31))


def test_mixed_devices_raise():
    meta_weight = W.to("meta")
    with pytest.raises(RuntimeError, match="expected weight to be on the same device as input"):
        torch_convt_op.conv_transpose1d(X, meta_weight)


def test_backward_rejects_wrong_grad_output_shape():
    with pytest.raises(RuntimeError, match=r"expected grad_output of size \[2, 3, 7\]"):
        torch_convt_op.conv_transpose1d_backward(_x(2, 3, 8), X, W)


def test_error_message_text():
    with pytest.raises(RuntimeError) as error:
        torch_convt_op.conv_transpose1d(X, W, padding=10)
    assert_expected_inline(str(error.value).splitlines()[0], """conv_transpose1d: the output length (L_out) would be -13 = (L_in - 1)*stride - 2*padding + dilation*(K - 1) + output_padding + 1 with L_in=5, K=3, stride=1, padding=10, dilation=1, output_padding=0; it must be at least 1 (padding too large?)""")


def test_channel_mismatch_blames_the_input_as_torch_does():
    x, w = _x(2, 15, 20), _x(16, 4, 3)
    with pytest.raises(RuntimeError) as error:
        torch_convt_op.conv_transpose1d(x, w)
    assert_expected_inline(str(error.value).splitlines()[0], """conv_transpose1d: expected input[2, 15, 20] to have 16 channels (weight.size(0)), but got 15 channels instead""")
    with pytest.raises(RuntimeError, match=re.escape("expected input[2, 15, 20] to have 16 channels")):
        F.conv_transpose1d(x, w)


def test_schemas():
    assert_expected_inline(str(torch.ops.convt.conv_transpose1d.default._schema), """convt::conv_transpose1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=[1], int[1] padding=[0], int[1] output_padding=[0], int groups=1, int[1] dilation=[1]) -> Tensor""")
    assert_expected_inline(str(torch.ops.convt.conv_transpose1d_backward.default._schema), """convt::conv_transpose1d_backward(Tensor grad_output, Tensor input, Tensor weight, int[1] stride, int[1] padding, int[1] output_padding, int groups, int[1] dilation, bool[3] output_mask) -> (Tensor, Tensor, Tensor)""")
