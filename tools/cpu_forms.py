"""The CPU forms of one pass, timed against each other and torch in one process.

    python tools/cpu_forms.py PASS FORMS LAYER [LAYER ...]

PASS is fwd, gx (grad_input), gw (grad_weight) or step (a training step: the forward with a bias and
the gradients of x, w and bias, as the benchmark's fwd+bwd); FORMS a comma-separated list of
CONVT_CPU_FORMS form names (csrc/cpu/conv_transpose1d_cpu.cpp) for the pass (for step: whole
CONVT_CPU_FORMS settings with '+' for ',', e.g. grad_input=packed+grad_weight=dot), `default` (the
planner's choice) or `torch`; a name may repeat (its runs are reported apart, which shows order
effects); LAYER is N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups.
CONVT_CPU_FORMS is read at every call, so the forms alternate in rounds in one process: a VM's
drift between processes (up to 30 % on the 2-core machines of BENCHMARKS.md) cancels. Each form runs
twice untimed after a switch (the first calls after another form's are up to 2x slower: buffers of
other sizes, page faults), then its best of three calls counts; the figure is the median over the
rounds, in ms, two threads, with glibc's malloc thresholds pinned as the benchmark pins them (freed
scratch is reused warm, not mapped fresh: unpinned, a form's timings followed the process's
allocation history).
"""
import os
import statistics
import sys
import time

import torch

import torch_convt_op
from torch_convt_op import bench

PASSES = {"fwd": "forward", "gx": "grad_input", "gw": "grad_weight", "step": None}


def best_of(fn, calls: int = 3) -> float:
    fn()
    fn()
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def time_forms(layer: str, which: str, forms, rounds: int = 9) -> dict:
    n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = map(int, layer.split(","))
    args = (stride, padding, output_padding, groups, dilation)
    x = torch.randn(n, c_in, l_in, requires_grad=True)
    w = (torch.randn(c_in, c_out // groups, k) * 0.05).requires_grad_()
    bias = torch.randn(c_out, requires_grad=True)
    ops = {"ours": torch_convt_op.conv_transpose1d, "torch": torch.nn.functional.conv_transpose1d}
    outputs = {name: op(x, w, None, *args) for name, op in ops.items()}
    grad_y = torch.randn_like(outputs["ours"])
    runs = {}
    for index, form in enumerate(forms):
        side = "torch" if form == "torch" else "ours"
        if form in ("default", "torch"):
            env = ""
        else:
            env = form.replace("+", ",") if which == "step" else f"{PASSES[which]}={form}"
        if which == "fwd":
            fn = lambda op=ops[side]: op(x, w, None, *args)
        elif which == "step":
            fn = lambda op=ops[side]: torch.autograd.grad(op(x, w, bias, *args), (x, w, bias), grad_y)
        else:
            wrt = (x,) if which == "gx" else (w,)
            fn = lambda y=outputs[side], wrt=wrt: torch.autograd.grad(y, wrt, grad_y, retain_graph=True)
        runs[f"{form}#{index}"] = (env, fn)
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (env, fn) in runs.items():
            os.environ["CONVT_CPU_FORMS"] = env
            times[name].append(best_of(fn))
    os.environ["CONVT_CPU_FORMS"] = ""
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv) -> None:
    which, forms, layers = argv[0], argv[1].split(","), argv[2:]
    if which not in PASSES or not layers:
        raise SystemExit(__doc__)
    torch.set_num_threads(2)
    # as the benchmark does (bench.pin_malloc_thresholds): freed buffers stay in the heap, so a form's
    # big scratch does not come back as fresh pages (page faults) on one call and warm memory on the next
    if not bench.pin_malloc_thresholds():
        print("warning: could not pin glibc's malloc thresholds; page faults may distort the timings",
              file=sys.stderr)
    for layer in layers:
        result = time_forms(layer, which, forms)
        print(f"{layer} {which}: " + "  ".join(f"{name} {ms:.2f}" for name, ms in result.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
