"""DTensor sharding strategies for ``convt::conv_transpose1d`` and ``convt::conv_transpose1d_backward``.

``import torch_convt_op`` registers them as soon as ``torch.distributed.tensor`` is imported (before or
after it), without importing DTensor itself; ``register()`` registers them now.

The placements on one mesh dimension (DTensor combines them over the dimensions of a mesh and runs
the op on each rank's local tensors with the same arguments); c is the channel dimension of the input
and output (1, or 0 for an unbatched input):

    forward          y             <- input        weight       bias
    replicated       Replicate     <- Replicate    Replicate    Replicate
    batch            Shard(0)      <- Shard(0)     Replicate    Replicate     (any groups)
    input channels   Partial(sum)  <- Shard(c)     Shard(0)     Partial(sum)  (groups == 1)
    output channels  Shard(c)      <- Replicate    Shard(1)     Shard(0)      (groups == 1)

    backward         grad_input  grad_weight   grad_bias  <- grad_output  input      weight
    replicated       Replicate   Replicate     Replicate  <- Replicate    Replicate  Replicate
    batch            Shard(0)    Partial(sum)  Partial    <- Shard(0)     Shard(0)   Replicate
    input channels   Shard(c)    Shard(0)      Replicate  <- Replicate    Shard(c)   Shard(0)
    output channels  Partial     Shard(1)      Shard(0)   <- Shard(c)     Replicate  Shard(1)

An output that the backward's ``output_mask`` leaves out is an empty tensor, Replicate. With input
channels sharded each rank adds its share of the bias (a replicated bias becomes Partial locally, by
division, without communication), so that the sum over ranks adds it once.

Where no row applies DTensor redistributes the inputs to the cheapest row that does (an all-gather
at worst):

- the length dimension is never sharded: an output position depends on input positions up to
  (K-1)*dilation away, so a shard would need its neighbours' edges (halos), which are not exchanged;
- channel rows need groups == 1. Each rank runs the op with the caller's ``groups``: on a shard of
  whole groups it would need groups / shards instead, and a shard of the weight's dim 1 holds part of
  every group's output channels (an interleaved, not a contiguous, slice of the output);
- channel rows need the channel counts to divide evenly over the mesh's devices: an uneven split can
  leave a rank without channels, which the op (like torch) rejects.
"""
from typing import List, Optional, Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
from torch.distributed.tensor.experimental import register_sharding

__all__ = ["register"]

_FORWARD = torch.ops.convt.conv_transpose1d.default
_BACKWARD = torch.ops.convt.conv_transpose1d_backward.default

# The argument that follows the tensors in both schemas (stride): it and every one after it keys
# DTensor's cache of sharding decisions.
_FIRST_NON_TENSOR_ARGUMENT = 3


def _channel_dim(spec: DTensorSpec) -> int:
    return spec.ndim - 2


def _splits_evenly(size: int, spec: DTensorSpec) -> bool:
    """`size` divides evenly over every device of the mesh, however its dimensions combine."""
    return size % spec.mesh.size() == 0


def _forward_strategies(input: DTensorSpec, weight: DTensorSpec, bias: Optional[DTensorSpec] = None,
                        stride: Sequence[int] = (1,), padding: Sequence[int] = (0,),
                        output_padding: Sequence[int] = (0,), groups: int = 1, dilation: Sequence[int] = (1,)):
    """The forward's rows (module docstring): (output placements, [input, weight, bias] placements) each.
    The defaults are the schema's: DTensor leaves out trailing arguments that equal them."""
    c = _channel_dim(input)
    with_bias = bias is not None

    def row(y, x, w, b):
        return [y], [x, w, b if with_bias else None]

    rows = [row(Replicate(), Replicate(), Replicate(), Replicate())]
    if input.ndim == 3:
        rows.append(row(Shard(0), Shard(0), Replicate(), Replicate()))
    if groups == 1 and _splits_evenly(weight.shape[0], input):
        rows.append(row(Partial(), Shard(c), Shard(0), Partial()))
    if groups == 1 and _splits_evenly(weight.shape[1], input):
        rows.append(row(Shard(c), Replicate(), Shard(1), Shard(0)))
    return rows


def _backward_strategies(grad_output: DTensorSpec, input: DTensorSpec, weight: DTensorSpec, stride: Sequence[int],
                         padding: Sequence[int], output_padding: Sequence[int], groups: int,
                         dilation: Sequence[int], output_mask: Sequence[bool]):
    """The backward's rows (module docstring): ([grad_input, grad_weight, grad_bias] placements,
    [grad_output, input, weight] placements) each."""
    c = _channel_dim(input)

    def row(outputs: List, inputs: List):
        return [p if wanted else Replicate() for p, wanted in zip(outputs, output_mask)], inputs

    rows = [row([Replicate()] * 3, [Replicate()] * 3)]
    if input.ndim == 3:
        rows.append(row([Shard(0), Partial(), Partial()], [Shard(0), Shard(0), Replicate()]))
    if groups == 1 and _splits_evenly(weight.shape[0], input):
        rows.append(row([Shard(c), Shard(0), Replicate()], [Replicate(), Shard(c), Shard(0)]))
    if groups == 1 and _splits_evenly(weight.shape[1], input):
        rows.append(row([Partial(), Shard(1), Shard(0)], [Shard(c), Replicate(), Shard(1)]))
    return rows


def register() -> None:
    """Registers both ops' sharding strategies with DTensor (a second call changes nothing)."""
    register_sharding(_FORWARD)(_forward_strategies)
    register_sharding(_BACKWARD)(_backward_strategies)
    # register_sharding keys the cache on the arguments from the first plain `int` (groups) on, which
    # leaves out stride, padding and output_padding: a call that differed from an earlier one only in
    # those would get the earlier output shape (tests/test_distributed.py shows it).
    schema_info = RuntimeSchemaInfo(static_argnum=_FIRST_NON_TENSOR_ARGUMENT, needs_pytree=True)
    propagator = DTensor._op_dispatcher.sharding_propagator
    for op in (_FORWARD, _BACKWARD):
        propagator.op_to_schema_info[op] = schema_info
