"""How far a correct result may be from float64: the one table of tolerances that the tests and
``python -m torch_convt_op.bench --check`` use.

An error is max |ours - reference| / scale, the reference computed in float64 from the very values
our op got (inputs and grad_output already in the op's dtype), and scale max |reference| (the tests
take the larger of that and the largest root-sum-square of the products summed into one element,
tests/conftest.py's product_norms).

A correct kernel's error has three parts, each bounded here:

- rounding the result to the output dtype, once: at most half a unit in the last place of the
  largest element's binade, 2^-p of scale for a p-bit significand (bfloat16 2^-8, float16 2^-11);
- TF32 operands (float32 on CUDA with TF32 allowed): each operand rounded to nearest to an 11-bit
  significand, so each product is off by at most 2^-10 of itself and by about 0.6 * 2^-11 as a root
  mean square, errors of random sign: relative to the result's scale their sum is off by about
  3e-4 (tests/test_cuda.py's TF32 tests measure 2e-4 to 4.9e-4 against max |reference|).
  TF32_OPERANDS allows 8e-4; a sum of fewer than TF32_FEW_PRODUCTS products has few errors to
  cancel and is allowed 2^-10 of scale, one product's bound (an H200 measured 8.2e-4 on a grad_input
  of C_out 1, K 1, and 8.03e-4 on a grouped grad_input of R = 5), within issue 34's 1e-3 in all;
- accumulating a reduction of R products in float32 (bfloat16 and float16 are accumulated in float32
  too, the CPU's whole computation and the tensor cores' products): rounding errors of random sign
  that grow as sqrt(R) relative to the result's scale (recursive summation: about 0.4 * 2^-24 *
  sqrt(R); tensor cores that truncate partial sums measured 2.9 * 2^-24 * sqrt(R), strict float32
  (3xTF32) on hifigan_up0's grad_input, R = 4096). float32_accumulation allows 2^-24 * (16 + 8 sqrt(R)).

So a dropped tap (an error of about 1/sqrt(taps) of scale), a dropped bias, a wrong phase, an element
at a tile edge read or written one place off, or one position in hundreds left out of a grad_weight
sum (an error of 1e-2 to 1 of scale) fails every bound here, while a correct kernel meets each bound
with a margin of 2 or more.

float64 keeps a fixed 1e-12: float64's rounding over any reduction in the tests is far below it, and
the reference is itself a float64 computation with its own rounding.
"""
import collections
import math

import torch

# unit roundoffs (half the spacing of the numbers in [1, 2))
FLOAT32_UNIT = 2.0 ** -24
BFLOAT16_UNIT = 2.0 ** -8
FLOAT16_UNIT = 2.0 ** -11

FLOAT64_TOLERANCE = 1e-12
TF32_OPERANDS = 8e-4  # rounding both operands of every product to TF32 (see above)
TF32_FEW_PRODUCTS = 8  # below, a sum's TF32 operands are allowed 2^-10 of scale

# what rounding the output to each dtype adds
_OUTPUT_ROUNDING = {torch.float32: FLOAT32_UNIT, torch.bfloat16: BFLOAT16_UNIT, torch.float16: FLOAT16_UNIT}


def float32_accumulation(reduction: int) -> float:
    """Summing `reduction` products in float32, relative to the result's scale."""
    return FLOAT32_UNIT * (16 + 8 * math.sqrt(max(reduction, 1)))


def tolerance(dtype: torch.dtype, reduction: int, tf32: bool = False) -> float:
    """The largest error (max |ours - float64| / scale) a correct result in `dtype` may have, where each
    element sums at most `reduction` products (reduction_length), with TF32 tensor cores (float32 only)
    when `tf32`."""
    if dtype == torch.float64:
        return FLOAT64_TOLERANCE
    if dtype not in _OUTPUT_ROUNDING:
        raise ValueError(f"no tolerance for {dtype}")
    tf32_operands = 2.0 ** -10 if reduction < TF32_FEW_PRODUCTS else TF32_OPERANDS
    operands = tf32_operands if tf32 and dtype == torch.float32 else 0.0
    return _OUTPUT_ROUNDING[dtype] + operands + float32_accumulation(reduction)


# the outputs' names: the tests' ("output", "grad_input", ...) and --check's ("y", "grad_x", ...)
_OUTPUT_NAMES = {"output": "y", "y": "y", "grad_input": "grad_input", "grad_x": "grad_input",
                 "grad_weight": "grad_weight", "grad_w": "grad_weight", "grad_bias": "grad_bias"}


def taps_per_phase(k: int, stride: int, padding: int, dilation: int) -> int:
    """The most taps that feed one output phase (output positions j of one j mod stride)."""
    return max(collections.Counter((tap * dilation - padding) % stride for tap in range(k)).values())


def reduction_length(case, output: str) -> int:
    """The most products summed into one element of `output` ("y" or "output", "grad_input" or "grad_x",
    "grad_weight" or "grad_w", "grad_bias") of the problem `case` (a torch_convt_op.shapes.Case):
    y: C_in/groups input channels times the taps of a phase (and the bias); grad_input: C_out/groups
    times every tap; grad_weight: every (batch, input position); grad_bias: every (batch, output
    position)."""
    name = _OUTPUT_NAMES.get(output.split("[")[0])
    if name is None:
        raise ValueError(f"unknown output {output!r}; known: {', '.join(_OUTPUT_NAMES)}")
    n = max(case.n, 1)
    if name == "y":
        taps = taps_per_phase(case.k, case.stride, case.padding, case.dilation)
        return case.c_in // case.groups * taps + 1
    if name == "grad_input":
        return case.c_out // case.groups * case.k
    if name == "grad_weight":
        return n * case.l_in
    return n * case.l_out
