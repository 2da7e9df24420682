"""The ways users ship the op: an AOTInductor package, CUDA graphs (torch.compile's
"reduce-overhead" mode after an nn.Linear, the wrong-stream bug class), and the HiFi-GAN example
with the module swap."""
import importlib.util
import pathlib

import pytest
import torch
from torch import nn

import torch_convt_op
from conftest import DEVICES, assert_close

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


class LinearThenUpsample(nn.Module):
    """(N, L, features) -> nn.Linear -> (N, C, L) -> our ConvTranspose1d -> tanh."""

    def __init__(self, features: int = 12, channels: int = 16):
        super().__init__()
        self.linear = nn.Linear(features, channels)
        self.upsample = torch_convt_op.ConvTranspose1d(channels, 8, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.upsample(self.linear(x).transpose(1, 2)))


def _double_inputs(device, n=2, length=37, features=12):
    return torch.randn(n, length, features, dtype=torch.float64).to(device=device, dtype=torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_aot_inductor_package_gives_the_same_output(device, tmp_path):
    model = LinearThenUpsample().to(device).eval()
    x = _double_inputs(device)
    program = torch.export.export(model, (x,))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "model.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        for inputs in (x, _double_inputs(device)):  # fresh data through the same package
            expected = model(inputs)
            actual = loaded(inputs)
            assert torch.isfinite(actual).all()
            assert_close(actual, expected.double(), torch.float32, device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reduce_overhead_cuda_graphs_after_linear():
    model = LinearThenUpsample().cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):  # warm-up, recording, then replays with fresh inputs each time
            x = _double_inputs("cuda")
            actual = compiled(x).clone()
            assert_close(actual, model(x).double(), torch.float32, "cuda")


def test_hifigan_example_runs_small_on_the_cpu():
    spec = importlib.util.spec_from_file_location("hifigan_example", EXAMPLES / "hifigan.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main(["--device", "cpu", "--small", "--frames", "6", "--repeats", "1"])
    assert results["error"] <= 1e-4
    assert set(results) == {"error", "eager", "torch.compile"}
