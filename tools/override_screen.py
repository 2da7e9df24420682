"""Planner overrides screened in one process: each layer's pass timed under several CONVT_* settings
and torch's own op, side by side.

    python tools/override_screen.py grad_input --layers "7,192,96,5,6003,2,1,0,1,1;..." --dtypes bf16,tf32 \\
        --variants "model=;copies=CONVT_GRAD_INPUT_COPIES:always;deint=CONVT_GRAD_INPUT_DEINTERLEAVE:always" \\
        --json screen.json

The pass is fwd, fwd+bwd (autograd: the gradients of x, w and bias), grad_input (output_mask (T, F,
F)), grad_weight (grad_weight with grad_bias) or grad_bias (alone). --variants:
'name=VAR:VALUE+VAR:VALUE;...' ('name=' for the planner's own choice;
'p32=CONVT_GEMM_TILE:pipelined:32x256' forces one tile shape). The planner reads these variables at
every plan and keys its plan cache by them, so one process serves every variant (tools/ab.py starts
a process a build and round; this times several settings of one build in a fraction of that, where
the build is the same). Prints per
layer and dtype torch ms / ours ms for each variant, torch's ms and the plan summary under each
variant (fwd+bwd: the forward's, grad_input's and grad_weight's); --json writes the times and plans.
Times: triton.testing.do_bench medians (CUDA events, L2 flushed). Needs CUDA and a built package on
PYTHONPATH.
"""
import argparse
import json
import os

import torch

import torch_convt_op
from torch_convt_op import planner

MASKS = {"grad_input": [True, False, False], "grad_weight": [False, True, True], "grad_bias": [False, False, True]}


def parse_variants(text):
    """[(name, [(VAR, VALUE), ...])] of 'name=VAR:VALUE+VAR:VALUE;name2='"""
    variants = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, settings = item.partition("=")
        variants.append((name, [tuple(kv.split(":", 1)) for kv in settings.split("+") if kv]))
    return variants


def pass_fn(pass_name, use_torch, tensors, layer):
    """A callable that runs the pass once, ours or torch's"""
    n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = layer
    x, w, b, grad, xg, wg, bg = tensors
    args = (stride, padding, output_padding, groups, dilation)
    op = torch.nn.functional.conv_transpose1d if use_torch else torch_convt_op.conv_transpose1d
    if pass_name == "fwd":
        return lambda: op(x, w, b, *args)
    if pass_name == "fwd+bwd":
        return lambda: op(xg, wg, bg, *args).backward(grad)
    mask = MASKS[pass_name]
    if use_torch:
        return lambda: torch.ops.aten.convolution_backward(grad, x, w, [c_out], [stride], [padding], [dilation], True,
                                                           [output_padding], groups, mask)
    return lambda: torch_convt_op.conv_transpose1d_backward(grad, x, w, stride, padding, output_padding, groups, dilation, mask)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pass_name", choices=["fwd", "fwd+bwd", "grad_input", "grad_weight", "grad_bias"])
    parser.add_argument("--layers", required=True, help="'N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups;...'")
    parser.add_argument("--dtypes", default="bf16,tf32", help="from bf16, tf32 (float32, TF32 allowed), fp32 (strict)")
    parser.add_argument("--variants", default="model=", help="'name=VAR:VALUE+VAR:VALUE;...'")
    parser.add_argument("--json", help="write {layer dtype: {ms: {variant: ms}, plans: [...]}} here")
    args = parser.parse_args()
    import triton.testing  # (the GPU machine's; not needed for --help)

    variants = parse_variants(args.variants)
    plan_passes = {"fwd": ["forward"], "fwd+bwd": ["forward", "grad_input", "grad_weight"]}.get(args.pass_name, [args.pass_name])
    results = {}
    print(f"{'layer':40s} dtype " + " ".join(f"{name:>9s}" for name, _ in variants) + f" {'torch ms':>9s}   plans ({', '.join(plan_passes)})")
    for text in filter(None, (part.strip() for part in args.layers.split(";"))):
        layer = tuple(int(v) for v in text.split(","))
        n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = layer
        for dtype_name in args.dtypes.split(","):
            dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            tf32 = dtype_name != "fp32"
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(n, c_in, l_in, device="cuda", dtype=dtype, generator=gen)
            w = torch.randn(c_in, c_out // groups, k, device="cuda", dtype=dtype, generator=gen) * 0.1
            b = torch.randn(c_out, device="cuda", dtype=dtype, generator=gen)
            grad = torch.randn_like(torch.nn.functional.conv_transpose1d(x, w, b, stride, padding, output_padding, groups, dilation))
            tensors = (x, w, b, grad) + tuple(t.detach().requires_grad_() for t in (x, w, b))
            times, plans = {}, []
            for name, settings in variants + [("torch", [])]:
                saved = dict(os.environ)
                os.environ.update(dict(settings))
                try:
                    if name != "torch":
                        explained = planner.explain(*layer, dtype=dtype, tf32=tf32, device="cuda")
                        plans.append(", ".join(planner.summary(explained[pass_]) for pass_ in plan_passes))
                    fn = pass_fn(args.pass_name, name == "torch", tensors, layer)
                    times[name] = triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
            results[f"{text} {dtype_name}"] = {"ms": times, "plans": plans}
            print(f"{text:40s} {dtype_name:5s} " + " ".join(f"{times['torch'] / times[name]:9.2f}" for name, _ in variants) +
                  f" {times['torch']:9.4f}   " + " | ".join(plans), flush=True)
            del x, w, b, grad, tensors
            torch.cuda.empty_cache()
            if args.json:  # (after every layer: a screen cut short by a timeout keeps what it timed)
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
