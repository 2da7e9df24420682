"""torch_convt_op.ConvTranspose1d against torch.nn.ConvTranspose1d, and ConvTranspose1d.convert."""
import collections
import itertools
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import torch_convt_op
from torch_convt_op import ConvTranspose1d
from conftest import Case, quick, quick_params, relative_error, tolerance
from torch_convt_op.tolerances import reduction_length

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
OUR_OP = "convt.conv_transpose1d.default"


def case_of(module, x) -> Case:
    """The problem that the ConvTranspose1d `module` solves for the input x."""
    return Case(x.shape[0] if x.dim() == 3 else 1, module.in_channels, module.out_channels, module.kernel_size[0],
                x.shape[-1], module.stride[0], module.padding[0], module.output_padding[0], module.dilation[0],
                module.groups, bias=module.bias is not None)


def assert_close_to_ref(actual, expected, dtype, device, case=None, what="output", of_torch=False):
    """Our `what` of the problem `case` in dtype (float32 on CUDA may use TF32, PyTorch's default for
    convolutions) within the one table's tolerance (torch_convt_op/tolerances.py) of expected: a float64
    reference, or (of_torch) torch's own result in dtype, itself off by up to that tolerance, so twice it.
    float64's tolerance is the same for any problem (case may be None)."""
    if case is None and dtype != torch.float64:
        raise TypeError("the tolerance in a 16- or 32-bit dtype depends on the problem: pass its case")
    reduction = reduction_length(case, what) if case is not None else 1
    tol = tolerance(dtype, device, reduction) * (2 if of_torch else 1)
    err = relative_error(actual, expected)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:.3g}"


class OpLog(TorchDispatchMode):
    """Counts the operators that run below autograd."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def nn_twin(module, dtype=None):
    """An nn.ConvTranspose1d with the same configuration and state as ``module``."""
    twin = nn.ConvTranspose1d(module.in_channels, module.out_channels, module.kernel_size, module.stride,
                              module.padding, module.output_padding, module.groups, module.bias is not None,
                              module.dilation, device=module.weight.device, dtype=dtype or module.weight.dtype)
    twin.load_state_dict(module.state_dict())
    return twin


GRID = [dict(stride=s, padding=p, output_padding=op, groups=g, dilation=d, bias=b)
        for s, p, op, g, d, b in itertools.product([1, 2, 3], [0, 2], [0, 1], [1, 2], [1, 2], [True, False])
        if op < max(s, d)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", quick_params(GRID, GRID[::11]),
                         ids=lambda k: "-".join(f"{n}{v}" for n, v in k.items()))
def test_matches_nn(device, dtype, kwargs):
    ours = ConvTranspose1d(4, 6, 3, device=device, dtype=dtype, **kwargs)
    theirs = nn_twin(ours)
    ref = nn_twin(ours, torch.float64)
    x = torch.randn(3, 4, 9, device=device, dtype=dtype)
    y = ours(x)
    assert y.shape == theirs(x).shape
    assert_close_to_ref(y, theirs(x), dtype, device, case_of(ours, x), of_torch=True)
    assert_close_to_ref(y, ref(x.double()), dtype, device, case_of(ours, x))


@quick
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(device, dtype):
    ours = ConvTranspose1d(8, 4, 5, stride=2, padding=1, output_padding=1, groups=2, device=device, dtype=dtype)
    x = torch.randn(2, 8, 33, device=device, dtype=dtype)
    y = ours(x)
    assert y.dtype == dtype
    assert_close_to_ref(y, nn_twin(ours, torch.float64)(x.double()), dtype, device, case_of(ours, x))


@quick
@pytest.mark.parametrize("device", DEVICES)
def test_same_init_params_and_repr(device):
    args = (6, 4, 5)
    kwargs = dict(stride=3, padding=2, output_padding=1, groups=2, dilation=2, device=device)
    torch.manual_seed(7)
    ours = ConvTranspose1d(*args, **kwargs)
    torch.manual_seed(7)
    theirs = nn.ConvTranspose1d(*args, **kwargs)
    assert isinstance(ours, nn.ConvTranspose1d)
    assert repr(ours) == repr(theirs)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for (name, p), (name_nn, p_nn) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == name_nn and p.shape == p_nn.shape
        torch.testing.assert_close(p, p_nn, rtol=0, atol=0)
    assert ours.weight.abs().sum() > 0


@quick
def test_padding_mode_rejected():
    with pytest.raises(ValueError, match="zeros"):
        ConvTranspose1d(2, 2, 3, padding_mode="reflect")


@quick
@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_both_ways(device):
    kwargs = dict(stride=2, padding=1, groups=2, device=device)
    x = torch.randn(2, 4, 11, device=device)
    ours, theirs = ConvTranspose1d(4, 6, 4, **kwargs), nn.ConvTranspose1d(4, 6, 4, **kwargs)
    assert not torch.allclose(ours(x), theirs(x))  # independent random init
    theirs.load_state_dict(ours.state_dict(), strict=True)
    assert_close_to_ref(ours(x), theirs(x), torch.float32, device, case_of(ours, x), of_torch=True)

    ours2, theirs2 = ConvTranspose1d(4, 6, 4, **kwargs), nn.ConvTranspose1d(4, 6, 4, **kwargs)
    ours2.load_state_dict(theirs2.state_dict(), strict=True)
    assert_close_to_ref(ours2(x), theirs2(x), torch.float32, device, case_of(ours2, x), of_torch=True)


@quick
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batched", [True, False])
def test_output_size(device, batched):
    ours = ConvTranspose1d(4, 3, 3, stride=3, padding=1, dilation=2, device=device, dtype=torch.float64)
    theirs = nn_twin(ours)
    shape = (2, 4, 7) if batched else (4, 7)
    x = torch.randn(shape, device=device, dtype=torch.float64)
    min_len = (7 - 1) * 3 - 2 * 1 + 2 * (3 - 1) + 1
    for length in range(min_len, min_len + 3):
        for output_size in ([length], [*shape[:-2], 3, length]):
            y = ours(x, output_size=output_size)
            assert y.shape[-1] == length
            assert_close_to_ref(y, theirs(x, output_size=output_size), torch.float64, device)
    for bad in ([min_len - 1], [min_len + 3]):
        with pytest.raises(ValueError, match="output size"):
            ours(x, output_size=bad)


@quick
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_gradients(device, bias):
    ours = ConvTranspose1d(4, 6, 5, stride=2, padding=1, output_padding=1, groups=2, dilation=2, bias=bias,
                           device=device, dtype=torch.float64)
    theirs = nn_twin(ours)
    x = torch.randn(3, 4, 10, device=device, dtype=torch.float64, requires_grad=True)
    grad_y = torch.randn_like(theirs(x))
    grads = [torch.autograd.grad(m(x), [x, *m.parameters()], grad_y) for m in (ours, theirs)]
    assert len(grads[0]) == (3 if bias else 2)
    for g_ours, g_nn in zip(*grads):
        assert g_nn.abs().sum() > 0
        assert_close_to_ref(g_ours, g_nn, torch.float64, device)


# ---- convert ---------------------------------------------------------------------------------


class OwnForward(nn.ConvTranspose1d):
    """A user subclass with its own forward: convert must leave it alone."""

    def forward(self, input):
        return super().forward(input) * 0.5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.utils.parametrizations.weight_norm(nn.ConvTranspose1d(6, 6, 4, stride=2, padding=1))
        self.inner = nn.Sequential(nn.Conv1d(6, 6, 3, padding=1), nn.LeakyReLU(0.1),
                                   nn.ConvTranspose1d(6, 4, 5, stride=3, output_padding=1, groups=2, dilation=2))

    def forward(self, x):
        return self.inner(torch.tanh(self.up(x)))


def make_model(device):
    """The same model every call: seeded parameters, weight norms, hooks, eval mode, float64."""
    torch.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # old-style weight_norm is deprecated, still used
        old_style = nn.utils.weight_norm(nn.ConvTranspose1d(3, 6, 3, stride=2, bias=False))
    model = nn.Sequential(
        old_style,
        nn.ReLU(),
        Block(),
        OwnForward(4, 2, 3),
        nn.ConvTranspose1d(2, 2, 1),
    ).to(device, torch.float64)
    with torch.no_grad():  # make the weight-norm magnitudes differ from ||v||
        model[0].weight_g.mul_(torch.rand_like(model[0].weight_g) + 0.5)
        original0 = model[2].up.parametrizations.weight.original0
        original0.mul_(torch.rand_like(original0) + 0.5)
    model[2].inner[2].register_forward_hook(lambda module, args, out: out * 2 + 1)
    model[4].register_forward_pre_hook(lambda module, args: (args[0] - 0.25,))
    model.eval()
    model[2].train()  # a mix of modes
    return model


def conv_classes(model):
    return [type(m) for m in model.modules() if isinstance(m, nn.ConvTranspose1d)]


@quick
@pytest.mark.parametrize("device", DEVICES)
def test_convert(device):
    reference, model = make_model(device), make_model(device)
    params_before = list(model.named_parameters())
    modes_before = [m.training for m in model.modules()]
    hooks_before = [(dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()]

    assert ConvTranspose1d.convert(model) is model

    assert list(model.named_parameters()) == params_before  # same names, same Parameter objects
    assert [m.training for m in model.modules()] == modes_before
    assert [(dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()] == hooks_before
    assert model.state_dict().keys() == reference.state_dict().keys()
    assert [c.__name__ for c in conv_classes(model)] == [c.__name__ for c in conv_classes(reference)]
    assert type(model[3]) is OwnForward
    assert type(model[0]) is ConvTranspose1d and type(model[4]) is ConvTranspose1d
    assert isinstance(model[2].up, ConvTranspose1d)
    assert nn.utils.parametrize.is_parametrized(model[2].up, "weight")
    assert repr(model) == repr(reference)

    x = torch.randn(2, 3, 8, device=device, dtype=torch.float64, requires_grad=True)
    with OpLog() as log:
        y = model(x)
    # the four converted layers run our op; aten's convolution runs only for nn.Conv1d and OwnForward
    assert log.counts[OUR_OP] == 4
    assert log.counts["aten.convolution.default"] == 2
    with OpLog() as log:
        y_ref = reference(x)
    assert log.counts[OUR_OP] == 0
    assert_close_to_ref(y, y_ref, torch.float64, device)

    grad_y = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *model.parameters()], grad_y)
    grads_ref = torch.autograd.grad(y_ref, [x, *reference.parameters()], grad_y)
    for g, g_ref in zip(grads, grads_ref):
        assert_close_to_ref(g, g_ref, torch.float64, device)

    # still a parametrization that can be removed, leaving our class
    nn.utils.parametrize.remove_parametrizations(model[2].up, "weight")
    assert type(model[2].up) is ConvTranspose1d
    assert_close_to_ref(model(x), y_ref, torch.float64, device)


@quick
@pytest.mark.parametrize("device", DEVICES)
def test_convert_twice_and_single_module(device):
    model = ConvTranspose1d.convert(make_model(device))
    classes = conv_classes(model)
    x = torch.randn(2, 3, 8, device=device, dtype=torch.float64)
    y = model(x)
    assert ConvTranspose1d.convert(model) is model
    assert conv_classes(model) == classes
    torch.testing.assert_close(model(x), y, rtol=1e-12, atol=1e-12)  # cuDNN's Conv1d in the model may vary

    layer = nn.ConvTranspose1d(3, 5, 4, stride=2, device=device)
    weight = layer.weight
    assert ConvTranspose1d.convert(layer) is layer
    assert type(layer) is ConvTranspose1d and layer.weight is weight


@pytest.mark.parametrize("device", DEVICES)
def test_compile_converted_model(device):
    torch._dynamo.reset()
    reference, model = make_model(device), ConvTranspose1d.convert(make_model(device))
    x = torch.randn(2, 3, 8, device=device, dtype=torch.float64)
    y_ref = reference(x)

    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    assert_close_to_ref(torch.compile(model, backend=recording_backend, fullgraph=True)(x), y_ref,
                        torch.float64, device)
    targets = [node.target for gm in graphs for node in gm.graph.nodes]
    assert targets.count(torch.ops.convt.conv_transpose1d.default) == 4

    torch._dynamo.reset()
    # inductor re-associates the weight-norm arithmetic around our op: float64 rounding-level differences
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(x), y_ref, rtol=1e-7, atol=1e-7)


@quick
@pytest.mark.parametrize("device", DEVICES)
def test_export(device):
    layer = ConvTranspose1d(4, 6, 4, stride=2, padding=1, groups=2, device=device)
    x = torch.randn(2, 4, 16, device=device)
    exported = torch.export.export(layer, (x,))
    assert any(node.target is torch.ops.convt.conv_transpose1d.default for node in exported.graph.nodes)
    x2 = torch.randn(2, 4, 16, device=device)
    assert_close_to_ref(exported.module()(x2), nn_twin(layer)(x2), torch.float32, device, case_of(layer, x2),
                        of_torch=True)


@quick
def test_exported_from_package():
    assert torch_convt_op.ConvTranspose1d is ConvTranspose1d
