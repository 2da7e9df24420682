"""Every shape class of issue 31 on every path: channels 1-7 in and out, K up to 512, up to 64 taps per
phase, long filters with stride and dilation, grouped narrow layers, wide channels on short inputs.
Forward and the three gradients against the float64 reference, fresh random data, poisoned outputs
(tests/conftest.py's helpers and tolerances).

On the CPU each case runs on the planner's choice, on the planner's choice for a CPU without AVX2
("portable"), and on every form of the CPU kernels that applies to the dtype (CONVT_CPU_FORMS,
csrc/cpu/conv_transpose1d_cpu.cpp): the AVX2 forms for float32 and the 16-bit types (computed in
float32) where the CPU has AVX2, the BLAS and direct forms for every dtype. On CUDA each case runs on
the planner's choice."""
import glob
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest
import torch

import torch_convt_op

from conftest import (DEVICES, DTYPES, Case, assert_backward_matches_reference, case_id, make_inputs, ours,
                      quick_params)

# (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups)
CASES = [
    Case(2, 1, 7, 5, 37, stride=2, padding=1),                                   # one input channel
    Case(2, 7, 1, 5, 37, stride=3, padding=2, output_padding=1),                 # one output channel
    Case(2, 3, 5, 7, 29, padding=3, dilation=2),                                 # 3 -> 5, dilated
    Case(1, 2, 4, 16, 41, stride=8, padding=4),                                  # narrow waveform upsampler
    Case(1, 6, 4, 40, 33, stride=4, padding=18),                                 # K 40
    Case(1, 5, 6, 64, 20, stride=8, padding=28),                                 # K 64
    Case(1, 8, 8, 64, 30, padding=31),                                           # 64 taps per phase
    Case(1, 3, 4, 128, 9, stride=2, padding=60),                                 # K 128, 64 taps per phase
    Case(1, 4, 3, 512, 5, stride=4, padding=200),                                # K 512 on a short input
    Case(1, 6, 10, 48, 25, stride=3, padding=40, output_padding=1, dilation=2),  # long K, stride and dilation
    Case(2, 12, 8, 9, 40, stride=2, padding=4, groups=4),                        # grouped, 3 -> 2 per group
    Case(1, 8, 16, 5, 31, padding=2, groups=8),                                  # depthwise, multiplier 2
    Case(1, 96, 80, 4, 13, stride=2, padding=1),                                 # wide channels, short input
    Case(2, 130, 100, 16, 9, stride=8, padding=4),                               # wide, part-filled panels
    Case(1, 70, 13, 7, 200, stride=4, padding=3),                                # inputs past a 192-position tile
    Case(1, 20, 24, 3, 300, stride=1, padding=1, groups=2),                      # long input, two groups
    # many batch rows on short inputs: the AVX2 forward and grad_input run several a task, in blocks of
    # input (output) channels; grad_weight's GEMM form sums 640 positions, chunks across batch rows
    Case(32, 160, 80, 4, 20, stride=2, padding=1),
    Case(32, 48, 80, 4, 20, stride=2, padding=1),  # one row block, more batch blocks: grad_input packs w once
    Case(2, 24, 256, 4, 20, stride=2, padding=1),  # weight rows of 4 KB: the streamed forward copies B's blocks
    Case(1, 256, 128, 4, 40, stride=2, padding=1),  # wide on few positions: the planner's grad_input is unrolled
    Case(3, 64, 48, 24, 32, stride=8, padding=8),   # a long filter on short rows: unrolled too (AVX-512)
]
QUICK_CASES = [CASES[0], CASES[1], CASES[7], CASES[10], CASES[12], CASES[14]]

# CONVT_CPU_FORMS values: None is the planner's choice, "portable" the planner's choice on a CPU without AVX2
PORTABLE = "portable"
AVX2_FORMS = [
    "forward=packed,grad_input=packed,grad_weight=dot",
    "forward=packed_copy,grad_weight=positions",
    "forward=streamed",
    "forward=scatter",
    "forward=tap_rows",
]
BLAS_FORMS = [
    "forward=taps,grad_input=taps,grad_weight=taps",
    "forward=unrolled,grad_input=unrolled,grad_weight=unrolled",
    "forward=direct,grad_input=direct,grad_weight=direct",
    "forward=folded",
]


def _params():
    """(device, dtype, forms) triples: on the CPU every form that applies to the dtype (16-bit types:
    the planner and one AVX2 and one BLAS set, as they run the float32 code), on CUDA the planner."""
    params = []
    for device in DEVICES:
        for dtype in DTYPES:
            if device != "cpu":
                forms = [None]
            elif dtype == torch.float32:
                forms = [None, PORTABLE, *AVX2_FORMS, *BLAS_FORMS]
            elif dtype == torch.float64:
                forms = [None, *BLAS_FORMS]
            else:
                forms = [None, PORTABLE, AVX2_FORMS[0], BLAS_FORMS[0]]
            params += [(device, dtype, forms_) for forms_ in forms]
    return params


PARAMS = _params()
QUICK_PARAMS = [p for p in PARAMS if p[1] == torch.float32]


def _id(param):
    device, dtype, forms = param
    return f"{device}-{str(dtype).removeprefix('torch.')}-{forms or 'planner'}"


@pytest.mark.parametrize("device_dtype_forms", quick_params(PARAMS, QUICK_PARAMS), ids=_id)
@pytest.mark.parametrize("case", quick_params(CASES, QUICK_CASES), ids=case_id)
def test_shape_classes_match_reference(case, device_dtype_forms, monkeypatch):
    device, dtype, forms = device_dtype_forms
    if forms is None:
        monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    else:
        monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    assert_backward_matches_reference(case, dtype, device, check_forward=True)


@pytest.mark.quick
@pytest.mark.parametrize("k", range(1, 10))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_blas_taps_grad_weight_interleaves_every_filter_length(k, dtype, monkeypatch):
    """The BLAS taps form's grad_weight sums each tap's (C_in/g x C_out/g) matrix into rows (C_in, K,
    C_out/g) and transposes every input channel's block into w's (C_out/g, K) row, with the tap loop
    unrolled for each K up to 8 and a loop past that: every length lands each tap in its place."""
    monkeypatch.setenv("CONVT_CPU_FORMS", "grad_weight=taps")
    case = Case(2, 12, 10, k, 23, stride=2, padding=k // 2, groups=2)
    assert_backward_matches_reference(case, dtype, "cpu")


# Row lengths on either side of the AVX2 GEMM's vector and column step widths (8 / 16 floats, 16 / 32
# with AVX-512), run in forms whose GEMM columns are the positions (the packed forward and grad_input)
# or 13 x 3 (co, k) pairs (the positions grad_weight)
TAIL_ROW_LENGTHS = [1, 7, 9, 16, 17, 31, 33, 47, 48, 49, 100]
TAIL_FORMS = "forward=packed,grad_input=packed,grad_weight=positions"


def tail_case(l_in):
    return Case(2, 8, 13, 3, l_in, stride=1, padding=1)


@pytest.mark.quick
@pytest.mark.parametrize("l_in", TAIL_ROW_LENGTHS)
def test_micro_kernel_last_column_step_covers_every_row_length(l_in, monkeypatch):
    """The AVX2 GEMM runs its last column step one vector wide where at most one vector of columns is
    left (kernels_avx2.cpp's tail kernels): every row length lands each column, against float64 (this
    CPU's vectors; test_avx2_vectors_where_the_cpu_has_avx512 runs the 8-float ones)."""
    monkeypatch.setenv("CONVT_CPU_FORMS", TAIL_FORMS)
    assert_backward_matches_reference(tail_case(l_in), torch.float32, "cpu", check_forward=True)


# grad_weight's dot products (grad_weight=dot) in the blocks of the dot kernels (up to 3 x 4, 6 x 4 on
# 16-float vectors: 1, 2, 5, 7 and 13 input channels leave last blocks of every row count; 1, 3 and 4
# output channels over 3 taps, of 1-4 columns) over row lengths on either side of their unrolled steps
# (8-32 positions with AVX2, 16-64 with AVX-512)
DOT_BLOCK_CASES = [Case(2, c_in, c_out, 3, l_in, padding=1) for c_in, c_out in ((1, 1), (2, 3), (5, 4), (7, 1), (13, 3))
                   for l_in in (1, 15, 17, 33, 63, 65, 100)]
DOT_FORMS = "grad_weight=dot"


@pytest.mark.quick
@pytest.mark.parametrize("case", DOT_BLOCK_CASES, ids=case_id)
def test_dot_blocks_cover_every_row_and_length(case, monkeypatch):
    """The dot-product grad_weight sums every (input channel, tap, output channel) over every position
    whatever block of the kernel it falls in and however many positions its unrolled loop leaves
    (this CPU's vectors; test_avx2_vectors_where_the_cpu_has_avx512 runs the 8-float ones)."""
    monkeypatch.setenv("CONVT_CPU_FORMS", DOT_FORMS)
    assert_backward_matches_reference(case, torch.float32, "cpu")


# grad_input's packed form over A's rows in place (gemm_rows: batch 1, one block of positions, every
# tap's phase reached): 7, 11 and 13 input channels leave last panels of 1, 5 and 1 rows; 13 x 11
# (co, k) steps span two 128-step blocks; rows of one column step up to past kRowsInPlaceSteps (whose
# kernels read the rows in place, the longest packed a block at a time)
IN_PLACE_CASES = [Case(1, c_in, 13, 11, l_in, stride=2, padding=3) for c_in in (7, 11, 13) for l_in in (5, 40, 300)]
IN_PLACE_FORMS = "grad_input=packed"


@pytest.mark.quick
@pytest.mark.parametrize("case", IN_PLACE_CASES, ids=case_id)
def test_grad_input_reads_weight_rows_in_place(case, monkeypatch):
    """grad_input's GEMM over the weight's rows in place (kernels_avx2.cpp, gemm_rows) lands every
    input channel and position, whatever panel row and column step it falls in (this CPU's vectors;
    test_avx2_vectors_where_the_cpu_has_avx512 runs the 8-float ones)."""
    monkeypatch.setenv("CONVT_CPU_FORMS", IN_PLACE_FORMS)
    assert_backward_matches_reference(case, torch.float32, "cpu")


# Depthwise and two-channel groups on the forward's tap rows (forward_tap_rows): strides 1-9 (2-8
# interleaved by whole vectors, the rest of a row and stride 9 one value at a time), rows around its
# 64-output blocks and 8-output vectors, dilation, output padding, taps past the row's ends
DIRECT_CASES = [
    Case(2, 6, 6, 31, 150, padding=15, groups=6),                                 # long filter, stride 1
    Case(1, 4, 8, 3, 63, padding=1, groups=4),                                    # multiplier 2, 63 outputs
    Case(2, 4, 4, 4, 101, stride=2, padding=1, output_padding=1, groups=4),       # stride 2, odd length
    Case(1, 6, 3, 7, 70, stride=3, padding=2, dilation=2, groups=3),              # two inputs a group, dilated
    Case(2, 2, 2, 16, 9, stride=8, padding=4, groups=2),                          # stride 8 on a short row
    Case(1, 3, 3, 12, 5, stride=2, padding=0, output_padding=1, dilation=3, groups=3),  # taps past both ends
    Case(2, 4, 4, 9, 50, stride=4, padding=3, output_padding=2, groups=4),        # stride 4, 3 blocks and a rest
    Case(1, 2, 4, 6, 40, stride=5, padding=1, groups=2),                          # stride 5, multiplier 2
    Case(1, 2, 2, 20, 30, stride=9, padding=5, groups=2),                         # stride 9: one value at a time
]


@pytest.mark.quick
@pytest.mark.parametrize("case", DIRECT_CASES, ids=case_id)
def test_tap_rows_forward_matches_reference(case, monkeypatch):
    """The forward's tap rows (float32 on AVX2, the planner's for few channels a group: output rows of
    taps over input rows copied with zeros around them, phases interleaved) against float64, and its
    fallback where an output is not finite: Inf in the weight lands as in the direct loops."""
    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=tap_rows")
    assert_backward_matches_reference(case, torch.float32, "cpu", check_forward=True)
    x, w, b = make_inputs(case, torch.float32, "cpu")
    w[0, 0, 0] = float("inf")
    y = ours(x, w, b, case)
    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=direct")
    assert torch.equal(_classes(y), _classes(ours(x, w, b, case)))


def _classes(t):
    t = t.detach().to("cpu", torch.float64)
    return torch.isnan(t).long() + 2 * (t == float("inf")).long() + 3 * (t == float("-inf")).long()


@pytest.mark.quick
@pytest.mark.parametrize("forms", ["forward=packed,grad_input=packed", "forward=packed_copy", "forward=streamed",
                                   "forward=scatter"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=["inf", "nan"])
@pytest.mark.parametrize("case", [
    Case(2, 16, 12, 7, 30, stride=2, padding=4),  # phases of 29 and 28 outputs, written element by element
    Case(2, 16, 12, 7, 34, padding=4),            # rows of 32 outputs written as whole vectors only
], ids=case_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_weight_inf_and_nan_land_where_the_products_put_them(case, dtype, forms, value, monkeypatch):
    """The packed AVX2 forms multiply the zeros around the input by the weight, and the unrolled
    grad_input the zeros of grad_y's im2col (the second case's BLAS form, and float64's); where an
    output is not finite (noticed in whole vectors and in a row's scalar tail) they hand the pass to a
    form that forms no such product, so Inf and NaN land where the products that exist put them: as in
    the direct loops. (torch's own float64 CPU convolution does not always: on these cases it has NaN at
    outputs that no Inf reaches.) float64 runs its planner's forms."""
    x, w, b = make_inputs(case, dtype, "cpu")
    w[0, 0, 0] = value  # tap 0 reaches outside the input at the first and last outputs of its phase
    grad_y = torch.randn(case.n, case.c_out, case.l_out, dtype=dtype)

    def run():
        x_, w_ = x.clone().requires_grad_(), w.clone()
        y = ours(x_, w_, b, case)
        return y, torch.autograd.grad(y, x_, grad_y)[0]

    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=direct,grad_input=direct")
    expected_y, expected_grad_x = run()
    monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    y, grad_x = run()
    assert torch.isinf(expected_y).any() or torch.isnan(expected_y).any()
    # the last output of tap 0's phase: tap 0 would read past the input there, so no Inf reaches it
    last = max(j for j in range(case.l_out) if (j + case.padding) % case.stride == 0)
    assert (last + case.padding) // case.stride >= case.l_in
    assert torch.isfinite(expected_y[:, 0, last]).all()
    assert torch.equal(_classes(y), _classes(expected_y))
    assert torch.equal(_classes(grad_x), _classes(expected_grad_x))


@pytest.mark.quick
@pytest.mark.parametrize("forms", ["grad_weight=positions", "grad_weight=dot", "grad_weight=unrolled",
                                   "grad_weight=taps"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=["inf", "nan"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_input_inf_and_nan_reach_grad_weight_as_in_the_direct_loops(dtype, forms, value, monkeypatch):
    """grad_weight's GEMM over positions and its unrolled form multiply x by the zeros of grad_y's
    im2col; where grad_w is not finite they hand the pass to a form that forms no such product (dot
    products, taps), so Inf and NaN land as in the direct loops. float64 runs its planner's forms where
    the AVX2 ones are named."""
    case = Case(2, 16, 12, 7, 30, padding=4)  # 7 taps a phase: the BLAS form is unrolled
    x, w, b = make_inputs(case, dtype, "cpu")
    x[0, 0, 0] = value   # taps 0-3 reach outside grad_y from the first input,
    x[1, 3, -1] = value  # taps 3-6 from the last
    grad_y = torch.randn(case.n, case.c_out, case.l_out, dtype=dtype)

    def run():
        w_ = w.clone().requires_grad_()
        return torch.autograd.grad(ours(x, w_, b, case), w_, grad_y)[0]

    monkeypatch.setenv("CONVT_CPU_FORMS", "grad_weight=direct")
    expected = run()
    monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    got = run()
    assert torch.isfinite(expected[0, :, 0]).all() and not torch.isfinite(expected[0, :, 6]).any()
    assert torch.equal(_classes(got), _classes(expected))


@pytest.mark.parametrize("forms", [None, "forward=packed_copy,grad_weight=dot", "grad_weight=positions"])
def test_long_input_float32(forms, monkeypatch):
    """An input longer than the padded copy of x the packed forward can make (4M floats): x read in
    place, padded windows at its ends only, even where the copy is asked for."""
    if forms is None:
        monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    else:
        monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    assert_backward_matches_reference(Case(1, 8, 6, 9, 600_000, stride=1, padding=3), torch.float32, "cpu",
                                      check_forward=True)


def test_streamed_forward_in_chunks_of_batch_rows(monkeypatch):
    """An input larger than the x^T the streamed forward packs at once (4M floats): it runs in chunks of
    batch rows (here 2 + 1), each packed and multiplied in turn; segments of outputs split each row."""
    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=streamed")
    assert_backward_matches_reference(Case(3, 64, 12, 5, 30_000, stride=2, padding=2, output_padding=1),
                                      torch.float32, "cpu", check_forward=True)


@pytest.mark.parametrize("case", [
    Case(2, 96, 1, 3, 5000, stride=4, padding=1, dilation=2),  # 3 rows (co, k): several streamed tiles a segment
    Case(1, 40, 2, 2, 7000, stride=3, output_padding=2),       # 4 rows, 2 output channels
    Case(3, 33, 1, 5, 4500, padding=2),                         # 5 rows at stride 1, a row's tail past a vector
], ids=case_id)
def test_scatter_forward_streams_few_rows(case, monkeypatch):
    """The scatter forward's blocks of at most 5 rows (co, k) stream x's rows 2048 positions at a time
    (avx2::stream_rows): long rows of narrow outputs against float64."""
    monkeypatch.setenv("CONVT_CPU_FORMS", "forward=scatter")
    assert_backward_matches_reference(case, torch.float32, "cpu", check_forward=True)


@pytest.mark.quick
@pytest.mark.parametrize("forms", [None, "forward=packed,grad_input=packed,grad_weight=dot",
                                   "forward=streamed,grad_weight=positions", "forward=scatter"])
@pytest.mark.parametrize("case", [Case(2, 40, 36, 7, 300, stride=2, padding=3), Case(1, 96, 80, 4, 13, stride=2),
                                  Case(3, 45, 21, 5, 20, stride=3, padding=1)],
                         ids=case_id)
def test_cpu_results_do_not_depend_on_the_thread_count(case, forms, monkeypatch):
    """The CPU's orders of summation depend on the problem only: the same inputs give bit-identical
    outputs and gradients on 1 thread and on several (the third case's streamed forward is one block
    of output channels on 1 thread, two of 11 and 10 on several)."""
    if forms is None:
        monkeypatch.delenv("CONVT_CPU_FORMS", raising=False)
    else:
        monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    x, w, b = make_inputs(case, torch.float32, "cpu", requires_grad=True)
    grad_y = torch.randn(case.n, case.c_out, case.l_out)
    saved = torch.get_num_threads()
    results = []
    try:
        for threads in (1, max(2, saved)):
            torch.set_num_threads(threads)
            y = ours(x, w, b, case)
            results.append((y, *torch.autograd.grad(y, (x, w, b), grad_y)))
    finally:
        torch.set_num_threads(saved)
    assert all(torch.equal(one, several) for one, several in zip(*results))


def _run_forms(case, forms, monkeypatch, inputs, grad_y):
    monkeypatch.setenv("CONVT_CPU_FORMS", forms)
    x, w, b = (t.detach().clone().requires_grad_() for t in inputs)
    y = ours(x, w, b, case)
    return (y, *torch.autograd.grad(y, (x, w, b), grad_y))


@pytest.mark.quick
@pytest.mark.parametrize("case, blas_forms", [
    (Case(2, 6, 8, 5, 40, stride=2, padding=1), BLAS_FORMS[2]),     # 6 x 8 channels: direct loops
    (Case(2, 24, 16, 4, 300, stride=2, padding=1), BLAS_FORMS[0]),  # 2 taps a phase: a GEMM per tap
    (Case(2, 24, 16, 12, 90, stride=2, padding=5), BLAS_FORMS[1]),  # 6 taps a phase: one GEMM over all taps
], ids=lambda v: v if isinstance(v, str) else case_id(v))
def test_portable_plan_runs_the_forms_of_a_cpu_without_avx2(case, blas_forms, monkeypatch):
    """CONVT_CPU_FORMS=portable plans float32 as on a CPU without AVX2 and FMA: bit for bit the BLAS or
    direct form that blas_form picks for the problem (so the forms such a CPU runs are tested here too)."""
    inputs = make_inputs(case, torch.float32, "cpu")
    grad_y = torch.randn(case.n, case.c_out, case.l_out)
    portable = _run_forms(case, PORTABLE, monkeypatch, inputs, grad_y)
    forced = _run_forms(case, blas_forms, monkeypatch, inputs, grad_y)
    assert all(torch.equal(a, b) for a, b in zip(portable, forced))


@pytest.mark.parametrize("value", ["forward=stremed", "grad_input=dot", "backward=taps", "avx2"])
def test_unknown_cpu_forms_are_errors(value, monkeypatch):
    case = Case(1, 4, 4, 3, 10)
    monkeypatch.setenv("CONVT_CPU_FORMS", value)
    with pytest.raises(RuntimeError, match="CONVT_CPU_FORMS"):
        ours(*make_inputs(case, torch.float32, "cpu"), case)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 kernels")
def test_avx2_vectors_where_the_cpu_has_avx512():
    """CONVT_CPU_VECTOR_BITS=256 runs the GEMM's AVX2 micro-kernels on a CPU with AVX-512F too, which
    otherwise takes its 16-float ones: the suite tests the kernels of the CPU it runs on, this test the
    others (on an AVX2-only CPU the same kernels again). CPU tile cases' forward and gradients, the
    last column step's row lengths, the dot blocks and the weight rows in place, in a fresh process
    (the setting is read once a process), against float64."""
    tests = os.path.dirname(os.path.abspath(__file__))
    script = ("import os, sys, torch; sys.path.insert(0, sys.argv[1]); "
              "from conftest import CPU_TILE_CASES, CPU_TILE_SCALE, assert_backward_matches_reference; "
              "import test_coverage as t; "
              "[assert_backward_matches_reference(c.scaled(**CPU_TILE_SCALE), torch.float32, 'cpu', check_forward=True) "
              "for c in CPU_TILE_CASES]; "
              "os.environ['CONVT_CPU_FORMS'] = t.TAIL_FORMS; "
              "[assert_backward_matches_reference(t.tail_case(l), torch.float32, 'cpu', check_forward=True) "
              "for l in t.TAIL_ROW_LENGTHS]; "
              "os.environ['CONVT_CPU_FORMS'] = t.DOT_FORMS; "
              "[assert_backward_matches_reference(c, torch.float32, 'cpu') for c in t.DOT_BLOCK_CASES]; "
              "os.environ['CONVT_CPU_FORMS'] = t.IN_PLACE_FORMS; "
              "[assert_backward_matches_reference(c, torch.float32, 'cpu') for c in t.IN_PLACE_CASES]")
    subprocess.run([sys.executable, "-c", script, tests], env=dict(os.environ, CONVT_CPU_VECTOR_BITS="256"), check=True,
                   timeout=600)


def _functions_with_avx(library):
    """Demangled names of the library's functions holding an AVX (VEX- or EVEX-encoded) instruction."""
    listing = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", library], check=True, capture_output=True,
                             text=True).stdout
    found, function = set(), None
    for line in listing.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            function = header.group(1)
            continue
        instruction = re.match(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)", line)
        if instruction and function and (instruction.group(1).startswith("v")
                                         or re.search(r"%[yz]mm", instruction.group(2))):
            found.add(function)
    return found


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None,
                    reason="needs an x86-64 library and objdump")
def test_avx_instructions_only_in_the_avx2_kernels():
    """The library runs on x86-64 CPUs without AVX2: only csrc/cpu/kernels_avx2.cpp's functions (which the
    planner calls only where avx2::available()) hold AVX instructions; no flag or header put any elsewhere."""
    libraries = glob.glob(os.path.join(os.path.dirname(torch_convt_op.__file__), "_C*.so"))
    assert len(libraries) == 1, libraries
    functions = _functions_with_avx(libraries[0])
    outside = sorted(f for f in functions if not re.match(r"^(\S+ )?convt::cpu::avx2::", f))
    assert not outside, outside[:10]
    assert any("convt::cpu::avx2::" in f for f in functions)  # the kernels are there, compiled for AVX2
