"""Python layer of the operator: public wrappers, fake implementations, autocast (autograd is C++).

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
