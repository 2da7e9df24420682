"""Per-pass times of ours and torch's on layers from the sweep, for A/B runs of two builds.

    python tools/pass_times.py TREE OUT.json [--grad-weight-only]

imports torch_convt_op from TREE (a built source tree), times grad_input (output_mask (T, F, F)) and
grad_weight + grad_bias ((F, T, T)) of conv_transpose1d_backward against torch's
aten.convolution_backward with the same mask, in TF32 and bf16 (triton's do_bench medians, which
flush L2), and writes {"layer|dtype|pass": [ours ms, torch ms]}. Run it once per tree in one device
call and compare the JSON files (BENCHMARKS.md shows such a table).
"""
import json
import sys

LAYERS = {  # N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups
    "upsampler s6": (2, 512, 256, 12, 22617, 6, 3, 3, 1, 1),
    "upsampler s2": (14, 1024, 512, 4, 3974, 2, 0, 1, 1, 1),
    "wide_short s1 odd": (14, 1024, 512, 7, 1277, 1, 3, 0, 1, 1),
    "wide_short s8": (9, 1024, 512, 3, 282, 8, 0, 5, 1, 1),
    "narrow_out s8": (2, 512, 4, 16, 482725, 8, 4, 0, 1, 1),
    "narrow_out s10": (3, 96, 1, 16, 1882353, 10, 3, 0, 1, 1),
    "narrow_in s5": (3, 3, 1024, 5, 1385, 5, 2, 0, 2, 1),
    "generic s1 odd": (8, 96, 160, 5, 4001, 1, 2, 0, 1, 1),
}


def main() -> None:
    tree, out_path = sys.argv[1], sys.argv[2]
    sys.path.insert(0, tree)
    import torch
    import triton.testing
    import torch_convt_op
    passes = [("grad_input", [True, False, False]), ("grad_weight+bias", [False, True, True])]
    if "--grad-weight-only" in sys.argv:
        passes = passes[1:]
    times = {}
    torch.backends.cudnn.allow_tf32 = True
    for name, (n, c_in, c_out, k, l_in, s, p, op, d, g) in LAYERS.items():
        for dtype_name, dtype in [("tf32", torch.float32), ("bf16", torch.bfloat16)]:
            torch.manual_seed(0)
            x = torch.randn(n, c_in, l_in, device="cuda", dtype=dtype)
            w = torch.randn(c_in, c_out // g, k, device="cuda", dtype=dtype)
            grad_y = torch.randn_like(torch_convt_op.conv_transpose1d(x, w, None, s, p, op, g, d))
            for pass_name, mask in passes:
                ours = triton.testing.do_bench(lambda: torch.ops.convt.conv_transpose1d_backward(
                    grad_y, x, w, [s], [p], [op], g, [d], mask), warmup=5, rep=40)
                theirs = triton.testing.do_bench(lambda: torch.ops.aten.convolution_backward(
                    grad_y, x, w, [c_out], [s], [p], [d], True, [op], g, mask), warmup=5, rep=40)
                times[f"{name}|{dtype_name}|{pass_name}"] = [ours, theirs]
    with open(out_path, "w") as f:
        json.dump(times, f, indent=1)


if __name__ == "__main__":
    main()
