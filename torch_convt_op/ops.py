"""Python layer of the operator: public wrappers, fake implementations, vmap rules, autocast
(autograd is C++).

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
# Both ops' autograd formulas are registered in C++ (csrc/autograd.cpp, the Autograd key): no Python
# runs per call, and double backward runs on the same two ops.


# ---- vmap ----------------------------------------------------------------------------------------
# torch.func.vmap folds the vmapped dimension into the op's own dimensions, so a vmapped call is one
# launch, not a loop over examples:
#  - only activations vmapped (input, grad_output): into the batch, (B, N, ...) -> (B*N, ...);
#  - the weight or bias vmapped, or a vmapped grad_weight or grad_bias asked for (per-example
#    gradients): into the groups. Example b's channels become groups [b*groups, (b+1)*groups):
#    x (N, B*C_in, L), w (B*C_in, C_out/groups, K), b (B*C_out), groups*B, and y (N, B*C_out, L_out)
#    holds example b's output channels at [b*C_out, (b+1)*C_out).
# An unbatched (C, L) input gets a batch of one. Unvmapped operands are expanded (views) along B.

def _vmapped_first(t: Tensor, dim: Optional[int], size: int) -> Tensor:
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


def _with_batch(t: Tensor, unbatched: bool) -> Tensor:
    """(B, C, L) as (B, 1, C, L) where the op's operands are unbatched (C, L)."""
    return t.unsqueeze(1) if unbatched else t


@torch.library.register_vmap("convt::conv_transpose1d")
def _conv_transpose1d_vmap(info, in_dims, input, weight, bias=None, stride=(1,), padding=(0,), output_padding=(0,),
                           groups=1, dilation=(1,)):  # (arguments at their defaults may be left out)
    input_dim, weight_dim, bias_dim = (tuple(in_dims) + (None, None))[:3]
    size = info.batch_size
    unbatched = input.dim() - (input_dim is not None) == 2
    x = _with_batch(_vmapped_first(input, input_dim, size), unbatched)  # (B, N, C_in, L)
    op = torch.ops.convt.conv_transpose1d.default
    if weight_dim is None and bias_dim is None:
        y = op(x.flatten(0, 1), weight, bias, stride, padding, output_padding, groups, dilation)
        y = y.unflatten(0, (size, -1))
    else:
        w = _vmapped_first(weight, weight_dim, size).flatten(0, 1)
        b = None if bias is None else _vmapped_first(bias, bias_dim, size).flatten()
        y = op(x.transpose(0, 1).flatten(1, 2), w, b, stride, padding, output_padding, groups * size, dilation)
        y = y.unflatten(1, (size, -1)).transpose(0, 1)
    return (y.squeeze(1) if unbatched else y), 0


@torch.library.register_vmap("convt::conv_transpose1d_backward")
def _conv_transpose1d_backward_vmap(info, in_dims, grad_output, input, weight, stride, padding, output_padding, groups,
                                    dilation, output_mask):
    grad_output_dim, input_dim, weight_dim = in_dims[:3]
    size = info.batch_size
    unbatched = input.dim() - (input_dim is not None) == 2
    gy = _with_batch(_vmapped_first(grad_output, grad_output_dim, size), unbatched)  # (B, N, C_out, L_out)
    x = _with_batch(_vmapped_first(input, input_dim, size), unbatched)               # (B, N, C_in, L)
    op = torch.ops.convt.conv_transpose1d_backward.default
    if weight_dim is None and not output_mask[1] and not output_mask[2]:
        grad_input, grad_weight, grad_bias = op(gy.flatten(0, 1), x.flatten(0, 1), weight, stride, padding,
                                                output_padding, groups, dilation, output_mask)
        grad_input = grad_input.unflatten(0, (size, -1))
    else:
        w = _vmapped_first(weight, weight_dim, size)
        grad_input, grad_weight, grad_bias = op(gy.transpose(0, 1).flatten(1, 2), x.transpose(0, 1).flatten(1, 2),
                                                w.flatten(0, 1), stride, padding, output_padding, groups * size,
                                                dilation, output_mask)
        if output_mask[0]:
            grad_input = grad_input.unflatten(1, (size, -1)).transpose(0, 1)
        if output_mask[1]:
            grad_weight = grad_weight.unflatten(0, (size, -1))
        if output_mask[2]:
            grad_bias = grad_bias.unflatten(0, (size, -1))
    if output_mask[0] and unbatched:
        grad_input = grad_input.squeeze(1)
    # (an output left out by output_mask is the op's empty tensor, the same for every example)
    return (grad_input, grad_weight, grad_bias), tuple(0 if asked else None for asked in output_mask)


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
