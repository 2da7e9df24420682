"""Where a layer's time goes: device time of each kernel, ours and torch's, on the same inputs.

    python tools/kernel_times.py --layers "15,3,1024,8,68,8,0,7,1,1;12,1536,768,1,1300,1,0,0,1,1" --dtypes tf32,bf16

For each layer (N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups, as tools/ab.py
takes them) and dtype: the forward and forward + backward (the gradients of x, w and bias) of
torch_convt_op and of torch.nn.functional.conv_transpose1d, each run --calls times under
torch.profiler after a warm-up; prints both totals in µs a call and the --top kernels of each side's
forward + backward (a kernel's µs a call summed over its launches). Needs CUDA and a built package
(run from a built source tree, or with it on PYTHONPATH). Times include no L2 flush: use tools/ab.py
or the benchmark for the figures to quote; this says which kernel to look at. Each side's line also
gives its host µs a call: the wall time of --calls forward + backward calls issued back to back with
no synchronization, a call's share (the host's work, where the GPU keeps up: a host-bound step
costs at least this).

Ours launch serially unless the environment sets CONVT_OVERLAP_LAUNCHES=always: an overlapped
launch starts while its predecessor still runs, so the profiler's time of each kernel would then
include its wait for the one before and the kernels' sum would overstate the call.
"""
import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile

import torch_convt_op


def kernel_times(fn, calls):
    """{kernel name: device µs a call} of fn, run `calls` times after 3 warm-up calls"""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] += event.device_time_total / calls
    return times


def host_us(fn, calls):
    """Host µs a call of fn: `calls` calls issued without synchronization (after 3 warm-up calls and
    a synchronization, so that the GPU's queue starts empty)"""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", required=True, help="'N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups;...'")
    parser.add_argument("--dtypes", default="tf32,bf16", help="from tf32 (float32, TF32 allowed), fp32 (strict), bf16, fp16")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    dtypes = {"tf32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for layer in filter(None, (part.strip() for part in args.layers.split(";"))):
        n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = (int(v) for v in layer.split(","))
        for dtype_name in args.dtypes.split(","):
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
            dtype = dtypes[dtype_name]
            x = torch.randn(n, c_in, l_in, device="cuda", dtype=dtype, requires_grad=True)
            w = (torch.randn(c_in, c_out // groups, k, device="cuda", dtype=dtype) * 0.1).requires_grad_()
            b = torch.randn(c_out, device="cuda", dtype=dtype, requires_grad=True)
            conv_args = (stride, padding, output_padding, groups, dilation)
            sides = {}
            for side, conv in (("torch", torch.nn.functional.conv_transpose1d), ("ours", torch_convt_op.conv_transpose1d)):
                grad = torch.randn_like(conv(x, w, b, *conv_args))
                forward = kernel_times(lambda: conv(x, w, b, *conv_args), args.calls)
                step = lambda: torch.autograd.grad(conv(x, w, b, *conv_args), (x, w, b), grad)
                both = kernel_times(step, args.calls)
                sides[side] = (forward, both, host_us(step, args.calls))
            print(f"== {layer} {dtype_name}: " + " | ".join(
                f"{side} fwd {sum(forward.values()):.0f} fwd+bwd {sum(both.values()):.0f} µs (host {host:.0f})"
                for side, (forward, both, host) in sides.items()))
            for side, (_, both, _) in sides.items():
                print(f"   {side:5s} " + "; ".join(f"{name[:64]} {us:.0f}" for name, us in both.most_common(args.top)))
            del x, w, b
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
