"""torch.func on our op: grad, vjp, jacrev, jvp, functional_call and vmap (batching rules, no
per-example loop), against the same transforms of torch.nn.functional.conv_transpose1d in float64.

Every test runs in float64 (ours runs its exact kernels there, so results agree with torch's to
rounding) on every device. torch's per-example vmap fallback warns ("There is a performance drop
because we have not yet implemented the batching rule for convt::..."); that warning is an error
here, so a missing batching rule of ours fails (torch's own gaps, e.g. aten::_weight_norm, only warn).
"""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, hessian, jacrev, jvp, vjp, vmap

import torch_convt_op
from conftest import DEVICES

TOLERANCE = 1e-10  # relative to the largest reference value: float64 sums in another order

# (stride, padding, output_padding, groups, dilation) with C_in 4 and C_out 6
ARGUMENTS = [(1, 0, 0, 1, 1), (2, 1, 1, 2, 1), (3, 2, 0, 1, 2)]
BATCH = 3  # the vmapped size


@pytest.fixture(autouse=True)
def no_fallback_warnings():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="There is a performance drop .* convt::")
        yield


def assert_close(actual, expected):
    scale = expected.abs().max().clamp_min(1e-30)
    assert actual.shape == expected.shape
    assert ((actual - expected).abs().max() / scale).item() <= TOLERANCE


def operands(device, arguments, generator, batch=()):
    groups = arguments[3]
    x = torch.randn(*batch, 2, 4, 9, dtype=torch.float64, device=device, generator=generator)
    w = torch.randn(*batch, 4, 6 // groups, 5, dtype=torch.float64, device=device, generator=generator)
    b = torch.randn(*batch, 6, dtype=torch.float64, device=device, generator=generator)
    return x, w, b


def ours(arguments):
    return lambda x, w, b=None: torch_convt_op.conv_transpose1d(x, w, b, *arguments)


def torchs(arguments):
    return lambda x, w, b=None: F.conv_transpose1d(x, w, b, *arguments)


def generator_on(device, seed=0):
    return torch.Generator(device=device).manual_seed(seed)


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("argnums", [0, 1, 2, (0, 1, 2)])
def test_grad(device, arguments, argnums):
    x, w, b = operands(device, arguments, generator_on(device))
    actual = grad(lambda *a: ours(arguments)(*a).sin().sum(), argnums=argnums)(x, w, b)
    expected = grad(lambda *a: torchs(arguments)(*a).sin().sum(), argnums=argnums)(x, w, b)
    for a, e in zip(*(t if isinstance(t, tuple) else (t,) for t in (actual, expected))):
        assert_close(a, e)


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_grad_of_grad(device, arguments):
    x, w, b = operands(device, arguments, generator_on(device))

    def second(f):
        return grad(lambda w: grad(lambda x, w: f(x, w, b).sin().sum(), argnums=(0, 1))(x, w)[0].pow(2).sum())(w)

    assert_close(second(ours(arguments)), second(torchs(arguments)))


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_vjp_and_jacrev(device, arguments):
    x, w, b = operands(device, arguments, generator_on(device))
    out, ours_vjp = vjp(ours(arguments), x, w, b)
    expected_out, torchs_vjp = vjp(torchs(arguments), x, w, b)
    assert_close(out, expected_out)
    cotangent = torch.randn(out.shape, dtype=out.dtype, device=device, generator=generator_on(device, 1))
    for a, e in zip(ours_vjp(cotangent), torchs_vjp(cotangent)):
        assert_close(a, e)
    # (jacrev: one vjp per output element, vmapped: the backward op's batching rule)
    for argnum in range(3):
        assert_close(jacrev(ours(arguments), argnums=argnum)(x, w, b), jacrev(torchs(arguments), argnums=argnum)(x, w, b))


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_jvp(device, arguments):
    x, w, b = operands(device, arguments, generator_on(device))
    tangents = operands(device, arguments, generator_on(device, 1))
    out, tangent = jvp(ours(arguments), (x, w, b), tangents)
    expected_out, expected_tangent = jvp(torchs(arguments), (x, w, b), tangents)
    assert_close(out, expected_out)
    assert_close(tangent, expected_tangent)


@pytest.mark.parametrize("argnums", [0, 1, 2, (0, 1, 2)])
@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_jvp_of_grad(device, arguments, argnums):
    """Forward mode through the backward op (Hessian-vector products): every primal has a tangent, and
    grad_output (of sin) depends on all of them."""
    x, w, b = operands(device, arguments, generator_on(device))
    tangents = operands(device, arguments, generator_on(device, 1))

    def gradient(f):
        return grad(lambda *a: f(*a).sin().sum(), argnums=argnums)

    out, tangent = jvp(gradient(ours(arguments)), (x, w, b), tangents)
    expected_out, expected_tangent = jvp(gradient(torchs(arguments)), (x, w, b), tangents)
    def flat(*results):
        return [t for result in results for t in (result if isinstance(result, tuple) else (result,))]

    for a, e in zip(flat(out, tangent), flat(expected_out, expected_tangent), strict=True):
        assert_close(a, e)


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_hessian(device, arguments):
    """torch.func.hessian (jacfwd of jacrev) with respect to the weight and to the input."""
    x, w, b = operands(device, arguments, generator_on(device))
    for argnum in (0, 1):
        actual = hessian(lambda *a: ours(arguments)(*a).sin().sum(), argnums=argnum)(x, w, b)
        expected = hessian(lambda *a: torchs(arguments)(*a).sin().sum(), argnums=argnum)(x, w, b)
        assert_close(actual, expected)


# which operands are vmapped (in_dims of x, w, b), and at which dimension
VMAPPED = [(0, None, None), (None, 0, None), (None, None, 0), (1, 0, 0), (2, None, 0), (0, 0, None)]


@pytest.mark.parametrize("in_dims", VMAPPED, ids=str)
@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("device", DEVICES)
def test_vmap_forward_equals_a_loop(device, arguments, in_dims):
    batched = operands(device, arguments, generator_on(device), batch=(BATCH,))
    inputs = [t.movedim(0, d) if d is not None else t[0] for t, d in zip(batched, in_dims)]
    actual = vmap(ours(arguments), in_dims=in_dims)(*inputs)
    expected = torch.stack([torchs(arguments)(*(t[i] if d is not None else t[0] for t, d in zip(batched, in_dims)))
                            for i in range(BATCH)])
    assert_close(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_of_unbatched_inputs(device):
    """An example of (C_in, L), torch's unbatched form, vmapped into (B, C_in, L)."""
    arguments = ARGUMENTS[1]
    x, w, b = operands(device, arguments, generator_on(device), batch=(BATCH,))
    actual = vmap(ours(arguments), in_dims=(0, None, None))(x[:, 0], w[0], b[0])
    expected = torch.stack([torchs(arguments)(x[i, 0], w[0], b[0]) for i in range(BATCH)])
    assert_close(actual, expected)


def vocoder_like(device):
    """Two upsampling layers with weight norm, as ConvTranspose1d.convert users have them."""
    torch.manual_seed(0)
    layers = [nn.utils.parametrizations.weight_norm(nn.ConvTranspose1d(8, 4, 8, stride=4, padding=2)), nn.LeakyReLU(0.1),
              nn.ConvTranspose1d(4, 2, 5, stride=2, padding=2, output_padding=1, groups=2), nn.Tanh()]
    return nn.Sequential(*layers).double().to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_gradients_of_a_converted_model_equal_a_loop(device):
    """vmap(grad(loss)) over examples (DP-SGD's per-sample gradients) through functional_call."""
    reference = vocoder_like(device)
    model = torch_convt_op.ConvTranspose1d.convert(copy.deepcopy(reference))
    params = {name: p.detach() for name, p in model.named_parameters()}
    assert params.keys() == dict(reference.named_parameters()).keys()
    examples = torch.randn(BATCH, 8, 11, dtype=torch.float64, device=device, generator=generator_on(device))
    targets = torch.randn(BATCH, 2, 88, dtype=torch.float64, device=device, generator=generator_on(device, 1))

    def loss(module):
        return lambda p, x, t: (functional_call(module, p, (x.unsqueeze(0),)).squeeze(0) - t).pow(2).mean()

    per_sample = vmap(grad(loss(model)), in_dims=(None, 0, 0))(params, examples, targets)
    for name in params:
        expected = torch.stack([grad(loss(reference))(params, examples[i], targets[i])[name] for i in range(BATCH)])
        assert_close(per_sample[name], expected)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_over_weights_of_an_ensemble(device):
    """vmap over stacked parameters of several models (torch.func.stack_module_state), one input."""
    reference = [vocoder_like(device) for _ in range(BATCH)]
    for i, module in enumerate(reference):
        for p in module.parameters():
            p.data.add_(0.1 * i)
    models = [torch_convt_op.ConvTranspose1d.convert(copy.deepcopy(m)) for m in reference]
    params, buffers = torch.func.stack_module_state(models)
    x = torch.randn(2, 8, 11, dtype=torch.float64, device=device, generator=generator_on(device))
    actual = vmap(lambda p, b: functional_call(models[0], (p, b), (x,)), in_dims=(0, 0))(params, buffers)
    expected = torch.stack([m(x) for m in reference])
    assert_close(actual, expected)
