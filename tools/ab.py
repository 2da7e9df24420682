"""A/B timing of two or more builds of torch_convt_op on one GPU, interleaved in rounds.

Each build is a folder holding a built `torch_convt_op` package (a source tree after
`python setup.py build_ext --inplace`). Two builds cannot share one process (both register the
`convt` operators), so each round runs each build in a fresh process, in turn; a build's figure is
the median over rounds of its per-round medians (triton.testing.do_bench: CUDA events, L2 flushed).

    python tools/ab.py base=/path/to/old new=. --shapes kb64,kb74 --dtypes tf32,fp32,bf16 --rounds 2 --backward

A build named by the folder `@torch` times torch.nn.functional.conv_transpose1d instead (cuDNN, the
same inputs): `python tools/ab.py torch=@torch new=. --layers ...`. A build given as
`name=folder,VAR=VALUE,...` runs with those environment variables too: one build under two planner
overrides (`rows=.,CONVT_FORWARD_X_COPIES=never copies=.,CONVT_FORWARD_X_COPIES=always`).

--layers takes further layers as N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups,
separated by ';' (e.g. a sweep's layers), timed after --shapes. --passes also times grad_input alone and grad_weight with grad_bias alone;
--only times just the cells named (fwd, fwd+bwd, grad_input, grad_weight), e.g. --only grad_weight.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

SHAPES = {  # (N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups)
    "kb64": (64, 128, 128, 3, 65536, 1, 0, 0, 1, 1),
    "kb74": (32, 32, 64, 5, 131072, 1, 0, 0, 3, 1),
    "kb79": (16, 32, 64, 3, 131072, 2, 1, 0, 2, 1),
    "hifigan_up0": (8, 512, 256, 16, 862, 8, 4, 0, 1, 1),
    "hifigan_up1": (8, 256, 128, 16, 6896, 8, 4, 0, 1, 1),
    "hifigan_up2": (8, 128, 64, 4, 55168, 2, 1, 0, 1, 1),
    "hifigan_up3": (8, 64, 32, 4, 110336, 2, 1, 0, 1, 1),
    "encodec_up1": (8, 256, 128, 10, 6000, 5, 0, 0, 1, 1),
    "grouped": (16, 128, 128, 5, 16384, 2, 2, 1, 1, 4),
    "depthwise": (16, 256, 256, 7, 16384, 1, 3, 0, 1, 256),
    "small": (1, 64, 64, 4, 1024, 2, 1, 0, 1, 1),
}


def parse_layers(text):
    """{compact string: layer} of --layers' 'N,C_in,...;N,C_in,...'"""
    layers = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        values = tuple(int(v) for v in item.split(","))
        if len(values) != 10:
            sys.exit(f"--layers: {item!r} needs 10 sizes (N,C_in,C_out,K,L_in,stride,padding,output_padding,dilation,groups)")
        layers[item] = values
    return layers


def worker(shapes, dtypes, cells, use_torch):
    """Times this process's torch_convt_op (use_torch: torch's own op), the cells named in `cells`
    (fwd, fwd+bwd, grad_input, grad_weight); prints {key: ms} as JSON."""
    import torch
    import triton.testing

    if use_torch:
        conv_transpose1d = torch.nn.functional.conv_transpose1d
    else:
        import torch_convt_op
        conv_transpose1d = torch_convt_op.conv_transpose1d

    results = {}
    for name in shapes:
        n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups = SHAPES[name]
        for dtype_name in dtypes:
            dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            torch.backends.cudnn.allow_tf32 = dtype_name == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(n, c_in, l_in, device="cuda", dtype=dtype, generator=gen)
            w = torch.randn(c_in, c_out // groups, k, device="cuda", dtype=dtype, generator=gen) * 0.1
            b = torch.randn(c_out, device="cuda", dtype=dtype, generator=gen)
            args = (stride, padding, output_padding, groups, dilation)

            def forward():
                return conv_transpose1d(x, w, b, *args)

            if "fwd" in cells:
                results[f"{name} {dtype_name} fwd"] = triton.testing.do_bench(forward, warmup=25, rep=100, return_mode="median")
            if "fwd+bwd" in cells:
                xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
                grad = torch.randn_like(forward())

                def forward_backward():
                    conv_transpose1d(xg, wg, bg, *args).backward(grad)

                results[f"{name} {dtype_name} fwd+bwd"] = triton.testing.do_bench(forward_backward, warmup=10, rep=100,
                                                                                   return_mode="median")
            if "grad_input" in cells or "grad_weight" in cells:  # each gradient alone: grad_input; grad_weight with grad_bias
                grad = torch.randn_like(forward())
                for pass_name, mask in (("grad_input", [True, False, False]), ("grad_weight", [False, True, True])):
                    if pass_name not in cells:
                        continue
                    if use_torch:
                        def backward_pass(mask=mask):
                            return torch.ops.aten.convolution_backward(grad, x, w, [c_out], [stride], [padding], [dilation],
                                                                       True, [output_padding], groups, mask)
                    else:
                        def backward_pass(mask=mask):
                            return torch_convt_op.conv_transpose1d_backward(grad, x, w, stride, padding, output_padding,
                                                                            groups, dilation, mask)
                    results[f"{name} {dtype_name} {pass_name}"] = triton.testing.do_bench(backward_pass, warmup=10, rep=100,
                                                                                         return_mode="median")
            del x, w, b
            torch.cuda.empty_cache()
    print("AB-RESULTS " + json.dumps(results))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", help="name=folder, the first is the reference")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="named shapes ('' for none)")
    parser.add_argument("--layers", default="", help="further layers, 'N,C_in,...,groups;...'")
    parser.add_argument("--dtypes", default="tf32,fp32,bf16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backward", action="store_true", help="also time forward + backward")
    parser.add_argument("--passes", action="store_true", help="also time grad_input and grad_weight (+ grad_bias) alone")
    parser.add_argument("--only", default="", help="time just these cells: a comma list of fwd, fwd+bwd, grad_input, grad_weight")
    parser.add_argument("--json", help="write the medians here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    layers = parse_layers(args.layers)
    SHAPES.update(layers)
    shapes, dtypes = [name for name in args.shapes.split(",") if name] + list(layers), args.dtypes.split(",")
    if args.worker:
        cells = set(args.only.split(",")) if args.only else {"fwd"} | ({"fwd+bwd"} if args.backward else set()) | (
            {"grad_input", "grad_weight"} if args.passes else set())
        return worker(shapes, dtypes, cells, args.torch)
    # name=folder[,VAR=VALUE...]: the build's processes also get those environment variables
    builds, build_env = {}, {}
    for item in args.builds:
        name, spec = item.split("=", 1)
        folder, *settings = spec.split(",")
        builds[name], build_env[name] = folder, dict(setting.split("=", 1) for setting in settings)
    runs = {name: [] for name in builds}
    for round_index in range(args.rounds):
        for name, folder in builds.items():
            use_torch = folder == "@torch"
            env = dict(os.environ, **build_env[name]) if use_torch else dict(os.environ, PYTHONPATH=os.path.abspath(folder), **build_env[name])
            command = [sys.executable, os.path.abspath(__file__), "x=x", "--worker", "--shapes", args.shapes,
                       "--layers", args.layers, "--dtypes", args.dtypes] + (["--backward"] if args.backward else [])
            command += ["--passes"] if args.passes else []
            command += ["--only", args.only] if args.only else []
            command += ["--torch"] if use_torch else []
            output = subprocess.run(command, env=env, cwd=None if use_torch else os.path.abspath(folder), capture_output=True,
                                    text=True)
            lines = [line for line in output.stdout.splitlines() if line.startswith("AB-RESULTS ")]
            if output.returncode != 0 or not lines:
                sys.exit(f"{name} failed (round {round_index}):\n{output.stdout[-3000:]}\n{output.stderr[-3000:]}")
            runs[name].append(json.loads(lines[0][len("AB-RESULTS "):]))
    medians = {name: {key: statistics.median(run[key] for run in rounds) for key in rounds[0]} for name, rounds in runs.items()}
    names = list(builds)
    reference = names[0]
    print(f"{'case':44s}" + "".join(f"{name:>12s}" for name in names) + "".join(f"{name + '/' + reference:>16s}" for name in names[1:]))
    for key in medians[reference]:
        row = f"{key:44s}" + "".join(f"{medians[name][key]:12.4f}" for name in names)
        row += "".join(f"{medians[name][key] / medians[reference][key]:16.3f}" for name in names[1:])
        print(row)
    for name in names[1:]:  # (the distribution of name/reference over every cell)
        ratios = [medians[name][key] / medians[reference][key] for key in medians[reference]]
        geomean = math.exp(statistics.fmean(math.log(ratio) for ratio in ratios))
        print(f"{name}/{reference}: geomean {geomean:.3f} over {len(ratios)} cells, {sum(r < 0.95 for r in ratios)} more than 5 % "
              f"faster, {sum(r > 1.05 for r in ratios)} more than 5 % slower")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(medians, f, indent=1)


if __name__ == "__main__":
    main()
