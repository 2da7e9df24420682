"""torch.compile (dynamic shapes, one frame, backward through it) and torch.export round trips."""
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import torch_convt_op
from conftest import Case, assert_close, make_inputs, quick, reference, relative_error, tolerance
from torch_convt_op import tolerances


class Upsampler(torch.nn.Module):
    """Our op between two pointwise ops, so the graph has something to fuse around it."""

    def __init__(self, case: Case):
        super().__init__()
        _, w, b = make_inputs(case, torch.float32, "cpu")
        self.weight = torch.nn.Parameter(w)
        self.bias = torch.nn.Parameter(b)
        self.case = case

    def forward(self, x):
        c = self.case
        y = torch_convt_op.conv_transpose1d(torch.tanh(x), self.weight, self.bias, c.stride, c.padding,
                                            c.output_padding, c.groups, c.dilation)
        return torch.nn.functional.leaky_relu(y, 0.1)


CASE = Case(2, 8, 6, 4, 16, stride=2, padding=1, output_padding=1, groups=2)


def _eager(model, x):
    """The model in float64 with torch's own op (autograd flows to x)."""
    c = model.case
    x64 = x if x.dtype == torch.float64 else x.detach().double()
    w64, b64 = model.weight.detach().double(), model.bias.detach().double()
    y = torch.nn.functional.conv_transpose1d(torch.tanh(x64.cpu()), w64.cpu(), b64.cpu(), c.stride, c.padding,
                                             c.output_padding, c.groups, c.dilation)
    return torch.nn.functional.leaky_relu(y, 0.1)


@quick
def test_compile_dynamic_one_frame_with_backward(device):
    torch._dynamo.reset()
    model = Upsampler(CASE).to(device)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for length in (16, 23, 40, 57):
        x = torch.randn(2, 8, length, device=device, requires_grad=True)
        y = compiled(x)
        assert_close(y, _eager(model, x), torch.float32, device, case=dataclasses.replace(CASE, l_in=length))
        grad_y = torch.randn_like(y)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        # against the same model run eagerly on our op: leaky_relu's slope at y = 0 jumps from 0.1 to 1,
        # so against float64 an output within rounding of 0 (TF32: 1e-3 of scale) may take the other
        # slope; eager and compiled share the op's rounding (each within the bound of the exact result)
        (eager_grad_x,) = torch.autograd.grad(model(x), x, grad_y)
        reduction = tolerances.reduction_length(dataclasses.replace(CASE, l_in=length), "grad_input")
        assert relative_error(grad_x, eager_grad_x) <= 2 * tolerance(torch.float32, device, reduction)
    assert counter.frame_count == 1


@quick
def test_compile_unbatched_and_batched(device):
    torch._dynamo.reset()
    compiled = torch.compile(torch_convt_op.conv_transpose1d, fullgraph=True, dynamic=True)
    case = Case(1, 4, 6, 3, 9, stride=3, padding=1, output_padding=2, batched=False)
    x, w, b = make_inputs(case, torch.float32, device)
    assert_close(compiled(x, w, b, 3, 1, 2), reference(x, w, b, case)[0], torch.float32, device, case=case)


def test_export_save_load_in_fresh_process(tmp_path, device):
    model = Upsampler(CASE).to(device)
    x = torch.randn(2, 8, 16, device=device)
    length = torch.export.Dim("length", min=2, max=4096)
    program = torch.export.export(model, (x,), dynamic_shapes={"x": {2: length}})
    path = tmp_path / "upsampler.pt2"
    torch.export.save(program, str(path))
    x_other = torch.randn(2, 8, 33, device=device)
    torch.save({"x": x_other.cpu(), "y": model(x_other).detach().cpu()}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import torch
        import torch_convt_op  # registers convt::conv_transpose1d before the program loads
        program = torch.export.load({str(path)!r})
        io = torch.load({str(tmp_path / 'io.pt')!r})
        y = program.module()(io["x"].to({device!r}))
        assert y.shape == io["y"].shape, (y.shape, io["y"].shape)
        err = (y.cpu() - io["y"]).abs().max().item()
        assert err < 1e-5, err
        assert "convt.conv_transpose1d" in str(program.graph)
        print("OK")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


@quick
def test_export_graph_keeps_our_op(device):
    model = Upsampler(CASE).to(device)
    program = torch.export.export(model, (torch.randn(2, 8, 16, device=device),))
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert "convt.conv_transpose1d.default" in targets
