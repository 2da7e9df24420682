"""Python layer of the operator: public wrappers, fake implementations, autograd.

Validation and shape arithmetic live in one C++ helper (csrc/convt.cpp). The fake
implementations reach it through ``convt::_conv_transpose1d_output_size`` (a composite op that
works on symbolic sizes), so real and traced calls raise the same errors.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

_IntOrList = Union[int, Sequence[int]]


def _as_list(value: _IntOrList) -> List[int]:
    return [value] if isinstance(value, int) else list(value)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: _IntOrList = 1,
                     padding: _IntOrList = 0, output_padding: _IntOrList = 0, groups: int = 1,
                     dilation: _IntOrList = 1) -> Tensor:
    """Drop-in for ``torch.nn.functional.conv_transpose1d``: same arguments, same result."""
    return torch.ops.convt.conv_transpose1d.default(input, weight, bias, _as_list(stride), _as_list(padding),
                                                    _as_list(output_padding), groups, _as_list(dilation))


def conv_transpose1d_backward(grad_output: Tensor, input: Tensor, weight: Tensor, stride: _IntOrList = 1,
                              padding: _IntOrList = 0, output_padding: _IntOrList = 0, groups: int = 1,
                              dilation: _IntOrList = 1,
                              output_mask: Sequence[bool] = (True, True, True)) -> Tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias); an output left out by ``output_mask`` is an empty tensor."""
    return torch.ops.convt.conv_transpose1d_backward.default(
        grad_output, input, weight, _as_list(stride), _as_list(padding), _as_list(output_padding), groups,
        _as_list(dilation), list(output_mask))


# ---- fake implementations -------------------------------------------------------------------

@torch.library.register_fake("convt::conv_transpose1d")
def _conv_transpose1d_fake(input, weight, bias=None, stride=(1,), padding=(0,), output_padding=(0,), groups=1,
                           dilation=(1,)):
    size = torch.ops.convt._conv_transpose1d_output_size(input, weight, bias, stride, padding, output_padding, groups,
                                                         dilation)
    return input.new_empty(size)


@torch.library.register_fake("convt::conv_transpose1d_backward")
def _conv_transpose1d_backward_fake(grad_output, input, weight, stride, padding, output_padding, groups, dilation,
                                    output_mask):
    torch.ops.convt._conv_transpose1d_backward_check(grad_output, input, weight, stride, padding, output_padding,
                                                     groups, dilation)
    out_channels = weight.size(1) * groups
    grad_input = input.new_empty(input.shape) if output_mask[0] else input.new_empty(0)
    grad_weight = weight.new_empty(weight.shape) if output_mask[1] else weight.new_empty(0)
    grad_bias = weight.new_empty(out_channels) if output_mask[2] else weight.new_empty(0)
    return grad_input, grad_weight, grad_bias


# ---- autograd ----------------------------------------------------------------------------------
# Forward: y = conv_transpose1d(x, w) + b. Its backward is the backward op.

def _forward_setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs
    ctx.save_for_backward(input, weight)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.has_bias = bias is not None


def _forward_backward(ctx, grad_output):
    input, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    grad_input, grad_weight, grad_bias = torch.ops.convt.conv_transpose1d_backward.default(
        grad_output, input, weight, *ctx.conv_args, mask)
    return (grad_input if mask[0] else None, grad_weight if mask[1] else None, grad_bias if mask[2] else None,
            None, None, None, None, None)


torch.library.register_autograd("convt::conv_transpose1d", _forward_backward, setup_context=_forward_setup_context)


# Backward op: (gx, gw, gb) = backward(gy, x, w). All three are linear in gy, gx is linear in w and
# gw in x. With cotangents (ggx, ggw, ggb) of (gx, gw, gb):
#   d/d gy = conv_transpose1d(ggx, w, ggb) + conv_transpose1d(x, ggw)
#   d/d x  = grad_input of backward(gy, x, ggw)
#   d/d w  = grad_weight of backward(gy, ggx, w)
# so double (and higher) backward runs on the same two ops.

def _backward_setup_context(ctx, inputs, output):
    grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask = inputs
    ctx.save_for_backward(grad_output, input, weight)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.output_mask = list(output_mask)


def _backward_backward(ctx, grad_grad_input, grad_grad_weight, grad_grad_bias):
    grad_output, input, weight = ctx.saved_tensors
    args = ctx.conv_args
    stride, padding, output_padding, groups, dilation = args
    has_ggx, has_ggw, has_ggb = (ctx.output_mask[i] and g is not None
                                 for i, g in enumerate((grad_grad_input, grad_grad_weight, grad_grad_bias)))
    d_grad_output = d_input = d_weight = None
    if ctx.needs_input_grad[0]:
        terms = []
        if has_ggx or has_ggb:
            terms.append(torch.ops.convt.conv_transpose1d.default(
                grad_grad_input if has_ggx else torch.zeros_like(input), weight,
                grad_grad_bias if has_ggb else None, stride, padding, output_padding, groups, dilation))
        if has_ggw:
            terms.append(torch.ops.convt.conv_transpose1d.default(
                input, grad_grad_weight, None, stride, padding, output_padding, groups, dilation))
        d_grad_output = sum(terms[1:], terms[0]) if terms else torch.zeros_like(grad_output)
    if ctx.needs_input_grad[1] and has_ggw:
        d_input = torch.ops.convt.conv_transpose1d_backward.default(
            grad_output, input, grad_grad_weight, *args, [True, False, False])[0]
    if ctx.needs_input_grad[2] and has_ggx:
        d_weight = torch.ops.convt.conv_transpose1d_backward.default(
            grad_output, grad_grad_input, weight, *args, [False, True, False])[1]
    return d_grad_output, d_input, d_weight, None, None, None, None, None, None


torch.library.register_autograd("convt::conv_transpose1d_backward", _backward_backward,
                                setup_context=_backward_setup_context)


# ---- autocast -----------------------------------------------------------------------------------
# In an autocast region the forward runs as torch's convolutions do: floating inputs on the region's
# device (float64 aside) are cast to the region's dtype (torch.get_autocast_dtype, so bfloat16 or
# float16 as the user chose), then the op runs with autocast off. The casts are differentiable, so
# float32 parameters get float32 gradients. (torch.library.register_autocast fixes one dtype.)

_autocast_library = torch.library.Library("convt", "IMPL")


def _register_autocast(device_type: str) -> None:
    key_name = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    key = getattr(torch._C.DispatchKey, key_name)
    op = torch.ops.convt.conv_transpose1d.default

    def cast(value, dtype):
        eligible = (isinstance(value, Tensor) and value.is_floating_point() and value.device.type == device_type
                    and value.dtype != torch.float64)
        return value.to(dtype) if eligible else value

    @op.py_impl(key)  # the same rule for tracing (torch.compile, torch.export)
    def run_in_region_dtype(input, weight, bias=None, stride=(1,), padding=(0,), output_padding=(0,), groups=1,
                            dilation=(1,)):
        dtype = torch.get_autocast_dtype(device_type)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return op(cast(input, dtype), cast(weight, dtype), cast(bias, dtype), stride, padding, output_padding,
                      groups, dilation)

    _autocast_library.impl("conv_transpose1d", lambda _keyset, *args, **kwargs: run_in_region_dtype(*args, **kwargs),
                           key_name, with_keyset=True)


for _device_type in ("cpu", "cuda"):
    _register_autocast(_device_type)
