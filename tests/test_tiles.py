"""Tile edges: problems whose rows span several tiles of each kernel (conftest's CPU_TILE_CASES,
WIDE_TILE_CASES and GRAD_WEIGHT_TILE_CASES), the output and its three gradients against float64, with
fresh random data and poisoned outputs, on every device: the CPU's column tiles and grad_weight chunks,
the CUDA kernels' tiles."""
import pytest
import torch

from conftest import (CPU_TILE_CASES, CPU_TILE_SCALE, DTYPES, GRAD_WEIGHT_TILE_CASES, WIDE_TILE_CASES,
                      assert_backward_matches_reference, assert_gradients_deterministic, quick, requires_cuda)

# Math modes, (dtype, TF32 allowed), per device. CUDA: float32 with and without TF32, and the 16-bit types.
# The CPU computes float16 and bfloat16 in its float32 kernel and float64 in a kernel of its own: the
# CUDA kernels' cases run in those two, the CPU's own cases in every dtype.
CUDA_MODES = [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True), (torch.float16, True)]
CPU_MODES = [(torch.float64, False), (torch.float32, False)]
ALL_CPU_MODES = [(dtype, False) for dtype in DTYPES]


def _mode_id(device, dtype, tf32):
    name = str(dtype).removeprefix("torch.")
    if device == "cuda" and dtype == torch.float32:
        name += "-tf32" if tf32 else "-strict"
    return name


def device_params(cases, cpu_modes, cuda_modes, quick_cpu=()):
    """(device, case, dtype, tf32) for every case and mode: on the CPU each case with at most
    CPU_TILE_SCALE's batch elements and input positions (duplicates dropped), those in quick_cpu in the quick
    subset; on CUDA the cases as they are, skipped without a GPU."""
    params = []
    for device, modes in (("cpu", cpu_modes), ("cuda", cuda_modes)):
        seen = []
        for case in cases:
            if device == "cpu":
                case = case.scaled(**CPU_TILE_SCALE)
            if case in seen:
                continue
            seen.append(case)
            for dtype, tf32 in modes:
                marks = [requires_cuda] if device == "cuda" else [quick] if (case, dtype) in quick_cpu else []
                params.append(pytest.param(device, case, dtype, tf32, marks=marks,
                                           id=f"{device}-{case}-{_mode_id(device, dtype, tf32)}"))
    return params


FORWARD_AND_BACKWARD = (
    device_params(CPU_TILE_CASES, ALL_CPU_MODES, CUDA_MODES,
                  quick_cpu=[(CPU_TILE_CASES[0], torch.float32), (CPU_TILE_CASES[1], torch.bfloat16)])
    + device_params(WIDE_TILE_CASES, CPU_MODES, CUDA_MODES))


@pytest.mark.parametrize("device,case,dtype,tf32", FORWARD_AND_BACKWARD, indirect=["tf32"])
def test_tiles_forward_and_backward(device, case, dtype, tf32):
    assert_backward_matches_reference(case, dtype, device, check_forward=True)


@pytest.mark.parametrize("device,case,dtype,tf32", device_params(GRAD_WEIGHT_TILE_CASES, CPU_MODES, CUDA_MODES),
                         indirect=["tf32"])
def test_grad_weight_tiles(device, case, dtype, tf32):
    x, w, b = assert_backward_matches_reference(case, dtype, device)
    assert_gradients_deterministic(x, w, b, case)
