"""Layers whose stride and dilation share a factor (docs/design.md §2.1, SharedStep in csrc/plan.h):
their taps reach only the out positions first + m*step, step = gcd(stride, dilation), which are the
layer at stride/step and dilation/step; the front end runs that layer and writes the bias alone
elsewhere. CONVT_SHARED_STEP=always runs it on the CPU too (the model: CUDA only), =never nowhere.
Forward and the three gradients against the float64 reference (fresh random data, poisoned outputs)."""
import math

import pytest
import torch

from conftest import DEVICES, DTYPES, Case, assert_backward_matches_reference, case_id, quick_params
from torch_convt_op import planner

# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups)
CASES = [
    Case(2, 5, 6, 4, 37, stride=4, padding=1, dilation=2),                      # step 2, first 1, a short last block
    Case(2, 8, 6, 3, 29, stride=2, padding=2, output_padding=1, dilation=4),    # step 2, first 0: stride 1 reduced
    Case(1, 6, 9, 5, 40, stride=6, padding=7, output_padding=5, dilation=3),    # step 3, first 2
    Case(3, 12, 8, 2, 33, stride=4, output_padding=3, dilation=4, groups=2),  # step 4: stride 1 reduced, groups
    Case(2, 7, 3, 6, 21, stride=6, padding=11, dilation=4, bias=False),         # step 2, stride 3 reduced, no bias
    Case(1, 4, 4, 3, 25, stride=8, padding=5, output_padding=1, dilation=2, layout="strided"),  # x strided, stride 4
    Case(2, 3, 5, 1, 1, stride=4, padding=1, output_padding=3, dilation=4),     # first >= L_out: bias alone
    Case(1, 72, 130, 4, 70, stride=4, padding=3, dilation=2),                   # the tensor-core tiles
    Case(2, 5, 7, 3, 31, stride=4, dilation=2),                                 # first 0 in the last, short block
]
QUICK_CASES = [CASES[0], CASES[2], CASES[6]]


@pytest.mark.parametrize("shared_step", ["model", "always", "never"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", quick_params(CASES, QUICK_CASES), ids=case_id)
def test_layers_of_a_shared_step_match_reference(case, device, dtype, shared_step, monkeypatch):
    monkeypatch.setenv("CONVT_SHARED_STEP", shared_step)
    assert_backward_matches_reference(case, dtype, device, check_forward=True)


# The forward's scratch a window of positions at a time (half of CONVT_MAX_WORKSPACE_MB = 1: 512 KB):
# several batch elements a window, one element in windows of positions (the last one short)
WINDOW_CASES = [
    Case(9, 6, 16, 5, 3000, stride=4, padding=2, output_padding=1, dilation=2),
    Case(3, 5, 40, 3, 5001, stride=4, dilation=2),  # (a last, short block holding a reached position)
    Case(2, 4, 32, 3, 9000, stride=2, padding=3, dilation=2),
    Case(1, 3, 64, 2, 1500, stride=12, padding=200, output_padding=11, dilation=6),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", WINDOW_CASES, ids=case_id)
def test_a_shared_step_forward_in_windows_matches_reference(case, device, monkeypatch):
    monkeypatch.setenv("CONVT_SHARED_STEP", "always")
    monkeypatch.setenv("CONVT_MAX_WORKSPACE_MB", "1")
    assert case.n * case.c_out * case.l_out // math.gcd(case.stride, case.dilation) * 4 > 1 << 19  # (over the scratch)
    assert_backward_matches_reference(case, torch.float32, device, check_forward=True)


def _plans(case, device, monkeypatch, setting=None):
    if setting is None:
        monkeypatch.delenv("CONVT_SHARED_STEP", raising=False)
    else:
        monkeypatch.setenv("CONVT_SHARED_STEP", setting)
    return planner.explain(*case.sizes, dtype=torch.bfloat16, tf32=True, device=device)


@pytest.mark.quick
def test_the_planner_reduces_a_shared_step_on_cuda(monkeypatch):
    """On an H200 the forward, grad_input and grad_weight of a wide layer of stride 4 and dilation 2 (512
    inputs a group x 4 taps at stride 2: 1,024 MACs a reached output) are the plans of the layer at
    stride 2, dilation 1 (whose phases merge: the pipelined kernel), tagged with the step; grad_bias
    sums the whole grad_y. Coprime stride and dilation are not reduced; on the CPU only =always
    reduces; =never nowhere."""
    layer = Case(7, 1024, 1024, 4, 2097, stride=4, padding=1, dilation=2, groups=2)
    reduced = Case(7, 1024, 1024, 4, 2097, stride=2, padding=1, dilation=1, groups=2)  # (padding (1 + 1) / 2)
    plans = _plans(layer, "h200", monkeypatch)
    for name in ("forward", "grad_input", "grad_weight"):
        assert plans[name]["shared_step"] == 2, (name, plans[name])
    forward = plans["forward"]
    assert (forward["family"], forward["row_phases"]) == ("pipelined", 2), forward
    reduced_plans = _plans(reduced, "h200", monkeypatch)
    assert planner.summary(forward) == planner.summary(reduced_plans["forward"])
    assert plans["grad_bias"]["kernel"] == "row_sums"
    assert "shared_step" not in _plans(layer, "h200", monkeypatch, "never")["forward"]
    coprime = Case(2, 64, 64, 4, 500, stride=4, padding=1, dilation=3)
    assert "shared_step" not in _plans(coprime, "h200", monkeypatch)["forward"]
    assert "shared_step" not in _plans(layer, "cpu", monkeypatch)["forward"]
    assert _plans(layer, "cpu", monkeypatch, "always")["forward"]["shared_step"] == 2


# (C_in, C_out, K, stride, dilation, groups): which passes the model reduces on CUDA: the forward where the
# reduced layer takes at least 400 MACs a reached output (C_in/groups x K / (stride / step)), the
# backward where C_in/groups >= 32
PASSES_REDUCED = [
    ((32, 64, 3, 2, 2, 1), False, True),      # kb79: 96 MACs; 32 inputs
    ((185, 210, 5, 4, 2, 1), True, True),     # 462 MACs
    ((40, 91, 10, 4, 2, 1), False, True),     # 200 MACs
    ((8, 512, 17, 8, 4, 1), False, False),    # 68 MACs; 8 inputs
    ((512, 512, 7, 3, 3, 4), True, True),     # 128 x 7 MACs at stride 1
    ((30, 252, 8, 2, 4, 1), False, False),    # 240 MACs; 30 inputs
    ((192, 192, 3, 3, 3, 16), False, False),  # 12 inputs a group
]


@pytest.mark.quick
@pytest.mark.parametrize("layer,forward,backward", PASSES_REDUCED, ids=str)
def test_which_passes_of_a_shared_step_the_model_reduces(layer, forward, backward, monkeypatch):
    c_in, c_out, k, stride, dilation, groups = layer
    plans = _plans(Case(2, c_in, c_out, k, 900, stride=stride, padding=1, dilation=dilation, groups=groups), "h200",
                   monkeypatch)
    assert ("shared_step" in plans["forward"]) == forward, plans["forward"]
    for name in ("grad_input", "grad_weight"):
        assert ("shared_step" in plans[name]) == backward, plans[name]
