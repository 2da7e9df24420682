"""Which of the sweep's layers a planner override moves: the layers drawn for some seeds whose plan of
some pass differs between two settings of the CONVT_* planner variables, on a named card, without a
GPU. Its last line is the layers for `tools/ab.py --layers`, so that an A/B times only those.

    python tools/plan_changes.py --seeds 7575,7676 --a CONVT_NARROW_ROWS_PIPELINED=never --b "" \\
        --dtypes bf16,tf32,fp32 --passes forward,grad_input

--a and --b each take VAR=VALUE,... ("" for the planner's own choice: every variable named in either
unset). A pass's plan counts as changed where torch_convt_op.planner.summary differs (kernel, tile
family and shape, stages, copies).
"""
import argparse
import os
import sys

import torch

from torch_convt_op import planner
from torch_convt_op.sweep import draw_shapes

DTYPES = {"bf16": (torch.bfloat16, True), "fp16": (torch.float16, True), "tf32": (torch.float32, True),
          "fp32": (torch.float32, False)}
PASSES = ("forward", "grad_input", "grad_weight", "grad_bias")


def parse_setting(text):
    """{variable: value} of 'VAR=VALUE,...'"""
    setting = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        variable, _, value = item.partition("=")
        if not variable.startswith("CONVT_"):
            sys.exit(f"{item!r}: a planner variable is named CONVT_...")
        setting[variable] = value
    return setting


def summaries(case, dtype_name, passes, setting, variables, card):
    """planner.summary of each pass on `card` under `setting` (the other `variables` unset)"""
    for variable in variables:
        os.environ.pop(variable, None)
    os.environ.update(setting)
    dtype, tf32 = DTYPES[dtype_name]
    plan = planner.explain(case.n, case.c_in, case.c_out, case.k, case.l_in, case.stride, case.padding, case.output_padding,
                           case.dilation, case.groups, dtype=dtype, tf32=tf32, device=card)
    return [planner.summary(plan[name]) for name in passes]


def layer_text(case):
    return ",".join(str(v) for v in (case.n, case.c_in, case.c_out, case.k, case.l_in, case.stride, case.padding,
                                     case.output_padding, case.dilation, case.groups))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", required=True, help="sweep seeds, comma-separated")
    parser.add_argument("--count", type=int, default=150, help="layers a seed (the sweep's N)")
    parser.add_argument("--a", required=True, help="the first setting: VAR=VALUE,... ('' for the planner's choice)")
    parser.add_argument("--b", required=True, help="the second setting")
    parser.add_argument("--dtypes", default="bf16,tf32,fp32", help=f"from {', '.join(DTYPES)}")
    parser.add_argument("--passes", default="forward,grad_input,grad_weight", help=f"from {', '.join(PASSES)}")
    parser.add_argument("--card", default="h200", help="the card planned for (planner.explain's device)")
    args = parser.parse_args()
    setting_a, setting_b = parse_setting(args.a), parse_setting(args.b)
    variables = set(setting_a) | set(setting_b)
    passes = [name for name in args.passes.split(",") if name]
    changed = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for kind, case in draw_shapes(args.count, seed, "cuda"):
            moves = []
            for dtype_name in args.dtypes.split(","):
                before = summaries(case, dtype_name, passes, setting_a, variables, args.card)
                after = summaries(case, dtype_name, passes, setting_b, variables, args.card)
                moves += [f"{dtype_name} {name}: {a} -> {b}" for name, a, b in zip(passes, before, after) if a != b]
            if moves:
                changed.append(layer_text(case))
                print(f"{seed} {kind} {changed[-1]}: " + "; ".join(moves))
    print(f"{len(changed)} layers change", file=sys.stderr)
    print(";".join(changed))


if __name__ == "__main__":
    main()
