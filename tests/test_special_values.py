"""NaN and ±Inf in the input propagate exactly where torch.nn.functional.conv_transpose1d (float64)
puts them: the same positions are NaN, +Inf and -Inf, in every math mode (TF32 and 3xTF32 included)."""
import pytest
import torch

from conftest import DTYPES, Case, case_id, make_inputs, ours, reference

SPECIAL_CASES = [
    Case(2, 4, 6, 3, 9),                                                  # direct kernels
    Case(2, 32, 24, 3, 33, stride=2, padding=1, dilation=2),              # tensor cores, strided
    Case(2, 16, 24, 2, 70, stride=6, dilation=2, output_padding=5),       # phases without taps
    Case(2, 6, 12, 5, 37, stride=3, padding=2, dilation=2, groups=6),     # depthwise
]


def _classes(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf, elementwise."""
    t = t.detach().to("cpu", torch.float64)
    return torch.isnan(t).long() + 2 * (t == float("inf")).long() + 3 * (t == float("-inf")).long()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", SPECIAL_CASES, ids=case_id)
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"], indirect=True)
def test_special_values_propagate_like_torch(case, dtype, value, device, tf32):
    x, w, b = make_inputs(case, dtype, device)
    x = x.clone()
    x[0, 0, 1] = value          # one channel of the first group
    x[-1, -1, -1] = -value      # the last channel and position, opposite sign
    y = ours(x, w, b, case)
    expected, _ = reference(x, w, b, case)
    assert torch.equal(_classes(y), _classes(expected))
