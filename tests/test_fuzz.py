"""Property-based sweep: forward and gradients equal torch.nn.functional.conv_transpose1d in float64,
over every argument, dtype and input layout, sizes from 0, channel counts for every kernel path and
lengths at tile edges.

Profiles (CONVT_FUZZ_PROFILE): "ci" (the default) is bounded for the CPU; "big" draws ten thousand
cases (CONVT_FUZZ_EXAMPLES) with longer rows and more channels, for the GPU (CONVT_FUZZ_DEVICES=cuda
keeps it there).
Anything the sweep ever finds is kept below as an @example regression case."""
import dataclasses
import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import DEVICES, DTYPES, LAYOUTS, Case, assert_close, make_inputs, ours, product_norms, reference

PROFILE = os.environ.get("CONVT_FUZZ_PROFILE", "ci")
settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("big", max_examples=int(os.environ.get("CONVT_FUZZ_EXAMPLES", 10000)), deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.load_profile(PROFILE)
FUZZ_DEVICES = os.environ.get("CONVT_FUZZ_DEVICES", ",".join(DEVICES)).split(",")

# Lengths around the CUDA tiles (128 columns per phase), 16-byte vectors and primes.
EDGE_LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257]
if PROFILE == "big":
    EDGE_LENGTHS += [383, 384, 385, 509, 511, 512, 513, 1021, 1024, 1031]
MAX_CHANNELS_PER_GROUP = 96 if PROFILE == "big" else 40  # >= 8 reaches the tensor-core kernels
MAX_KERNEL = 20 if PROFILE == "big" else 9


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(["narrow", "wide", "depthwise", "narrow_out"]))
    if kind == "depthwise":  # one input channel per group, any channel multiplier
        groups = draw(st.integers(1, 8))
        c_in, c_out = groups, groups * draw(st.integers(1, 3))
    elif kind == "narrow_out":  # waveform decoders: 1-4 outputs a group from 16 or more inputs (packed taps)
        groups = draw(st.sampled_from([1, 1, 2]))
        c_in, c_out = groups * draw(st.integers(16, max(16, MAX_CHANNELS_PER_GROUP))), groups * draw(st.integers(1, 4))
    else:
        groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
        per_group = st.integers(8, MAX_CHANNELS_PER_GROUP) if kind == "wide" else st.integers(1, 7)
        c_in, c_out = groups * draw(per_group), groups * draw(per_group)
    k = draw(st.integers(1, MAX_KERNEL))
    # one case in eight each: taps hundreds of positions apart (windows past the kernels' shared
    # memory), strides in the tens (many phases, most without taps)
    stride = draw(st.integers(10, 64) if draw(st.integers(0, 7)) == 0 else st.integers(1, 9))
    dilation = draw(st.integers(5, 400) if draw(st.integers(0, 7)) == 0 else st.integers(1, 4))
    output_padding = draw(st.integers(0, max(stride, dilation) - 1))
    padding = draw(st.integers(0, 8))
    l_in = draw(st.one_of(st.integers(1, 40), st.sampled_from(EDGE_LENGTHS)))
    batched = draw(st.booleans())
    case = Case(draw(st.integers(0, 3)) if batched else 1, c_in, c_out, k, l_in, stride, padding, output_padding,
                dilation, groups, bias=draw(st.booleans()), batched=batched, layout=draw(st.sampled_from(LAYOUTS)))
    return case if case.l_out >= 1 else dataclasses.replace(case, padding=0)


@example(  # planner bug (v56-v72): a dilated merge of 154 taps wrote past the planner's 128-entry arrays
    case=Case(3, 69, 36, 4, 17, 5, 8, 45, 256, 3), dtype=torch.float32, device=FUZZ_DEVICES[-1], tf32=True, seed=1,
    shared_step="model", packed_taps="model")
@example(  # test bug: a single-channel grad_bias of 16 terms that cancel to 0.015, judged relative to that sum
    case=Case(2, 4, 1, 7, 4, padding=1), dtype=torch.float32, device=FUZZ_DEVICES[-1], tf32=False, seed=0,
    shared_step="model", packed_taps="model")
@example(  # test bug: grad_output rounded to bfloat16 for us but not for the reference
    case=Case(3, 1, 1, 1, 14, bias=False, layout="offset"), dtype=torch.bfloat16, device=FUZZ_DEVICES[-1], tf32=False,
    seed=163607, shared_step="model", packed_taps="model")
@given(case=cases(), dtype=st.sampled_from(DTYPES), device=st.sampled_from(FUZZ_DEVICES), tf32=st.booleans(),
       seed=st.integers(0, 2**31 - 1), shared_step=st.sampled_from(["model", "always"]),
       packed_taps=st.sampled_from(["model", "always"]))
def test_matches_torch_in_float64(case, dtype, device, tf32, seed, shared_step, packed_taps):
    """(shared_step: CONVT_SHARED_STEP for the case: the planner's choice, or every layer whose stride
    and dilation share a factor run as the reduced layer, docs/design.md §2.1, on the CPU too;
    packed_taps: CONVT_PACKED_TAPS, the planner's choice or every CUDA forward it applies to, §3.9)"""
    saved = torch.backends.cudnn.allow_tf32, os.environ.get("CONVT_SHARED_STEP"), os.environ.get("CONVT_PACKED_TAPS")
    torch.backends.cudnn.allow_tf32 = tf32
    os.environ["CONVT_SHARED_STEP"] = shared_step
    os.environ["CONVT_PACKED_TAPS"] = packed_taps
    try:
        generator = torch.Generator().manual_seed(seed)
        x, w, b = make_inputs(case, dtype, device, requires_grad=True, generator=generator)
        y = ours(x, w, b, case)
        expected, inputs64 = reference(x, w, b, case)
        assert y.dtype == dtype and y.is_contiguous()
        assert_close(y, expected, dtype, device, norms=product_norms(x, w, case), case=case)
        if y.numel() == 0:
            return
        grad_y = torch.randn(expected.shape, dtype=torch.float64, generator=generator).to(dtype)  # exact in dtype
        wanted = [t for t in (x, w, b) if t is not None]
        grads = torch.autograd.grad(y, wanted, grad_y.to(device))
        expected_grads = torch.autograd.grad(expected, [t for t in inputs64 if t is not None], grad_y.double())
        names = ["grad_input", "grad_weight", "grad_bias"]
        for name, grad, expected_grad, norms in zip(names, grads, expected_grads, product_norms(x, w, case, grad_y)):
            assert_close(grad, expected_grad, dtype, device, name, norms, case=case)
    finally:
        torch.backends.cudnn.allow_tf32 = saved[0]
        for variable, value in (("CONVT_SHARED_STEP", saved[1]), ("CONVT_PACKED_TAPS", saved[2])):
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value


# (-k cuda / -m cuda select the fuzz where it draws CUDA devices: its id does not name them)
if "cuda" in FUZZ_DEVICES:
    test_matches_torch_in_float64 = pytest.mark.cuda(test_matches_torch_in_float64)
