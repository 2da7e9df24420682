"""The ways users ship the op: an AOTInductor package, CUDA graphs (torch.compile's
"reduce-overhead" mode after an nn.Linear, the wrong-stream bug class), and the HiFi-GAN example
with the module swap."""
import copy
import importlib.util
import pathlib
import subprocess
import sys

import pytest
import torch
from torch import nn

import torch_convt_op
from conftest import DEVICES, assert_close, requires_cuda

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


class LinearThenUpsample(nn.Module):
    """(N, L, features) -> nn.Linear -> (N, C, L) -> our ConvTranspose1d -> tanh."""

    def __init__(self, features: int = 12, channels: int = 16):
        super().__init__()
        self.linear = nn.Linear(features, channels)
        self.upsample = torch_convt_op.ConvTranspose1d(channels, 8, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.upsample(self.linear(x).transpose(1, 2)))


# the most products summed into one output along LinearThenUpsample: 12 features in the linear layer, then
# 16 channels x 2 taps (K 4, stride 2: two taps a phase) and the bias in the upsampler
REDUCTION = 12 + 16 * 2 + 1


def _float64_twin(model: nn.Module) -> nn.Module:
    """The same model in float64 (the reference)."""
    return copy.deepcopy(model).double()


def _double_inputs(device, n=2, length=37, features=12):
    return torch.randn(n, length, features, dtype=torch.float64).to(device=device, dtype=torch.float32)


# Loads an AOTInductor package in a fresh process (as a server would) and runs it on saved inputs.
_LOAD_AND_RUN = """
import sys, torch, torch_convt_op
package, inputs, outputs = sys.argv[1:]
loaded = torch._inductor.aoti_load_package(package)
with torch.no_grad():
    torch.save([loaded(x).cpu() for x in torch.load(inputs)], outputs)
"""


def _package_and_run(model, inputs, directory):
    """(outputs of the packaged model in a fresh process, or None, and that process's return code)."""
    directory.mkdir()
    program = torch.export.export(model, (inputs[0],))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(directory / "model.pt2"))
    torch.save(inputs, directory / "inputs.pt")
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, package, str(directory / "inputs.pt"),
                           str(directory / "outputs.pt")], capture_output=True, text=True)
    return (torch.load(directory / "outputs.pt") if done.returncode == 0 else None), done


@pytest.mark.parametrize("device", DEVICES)
def test_aot_inductor_package_gives_the_same_output(device, tmp_path):
    model = LinearThenUpsample().to(device).eval()
    inputs = [_double_inputs(device), _double_inputs(device)]  # fresh data through the same package
    outputs, done = _package_and_run(model, inputs, tmp_path / "ours")
    if outputs is None and done.returncode < 0:  # killed by a signal: can this torch load any package?
        control = nn.Sequential(nn.Linear(12, 16), nn.Tanh()).to(device).eval()
        if _package_and_run(control, inputs, tmp_path / "control")[0] is None:
            pytest.skip(f"this torch's AOTInductor loader crashes (signal {-done.returncode}) on a package "
                        "without our op too")
    assert outputs is not None, done.stderr[-3000:]
    with torch.no_grad():
        for x, actual in zip(inputs, outputs):
            assert torch.isfinite(actual).all()
            assert_close(actual, _float64_twin(model)(x.double()), torch.float32, device, reduction=REDUCTION)


@requires_cuda
def test_reduce_overhead_cuda_graphs_after_linear():
    model = LinearThenUpsample().cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):  # warm-up, recording, then replays with fresh inputs each time
            x = _double_inputs("cuda")
            actual = compiled(x).clone()
            assert_close(actual, _float64_twin(model)(x.double()), torch.float32, "cuda", reduction=REDUCTION)


def test_hifigan_example_runs_small_on_the_cpu():
    spec = importlib.util.spec_from_file_location("hifigan_example", EXAMPLES / "hifigan.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main(["--device", "cpu", "--small", "--frames", "6", "--repeats", "1"])
    assert results["error"] <= 1e-4
    assert set(results) == {"error", "eager", "torch.compile"}
