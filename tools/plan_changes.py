"""Which of the sweep's layers a planner change moves: the layers drawn for some seeds whose plan of
some pass differs between two settings of the CONVT_* planner variables, or between this build and
the plans another build saved, on a named card, without a GPU. Its last line is the layers for
`tools/ab.py --layers`, so that an A/B times only those.

    python tools/plan_changes.py --seeds 7575,7676 --a CONVT_NARROW_ROWS_PIPELINED=never --b "" \\
        --dtypes bf16,tf32,fp32 --passes forward,grad_input

--a and --b each take VAR=VALUE,... ("" for the planner's own choice: every variable named in either
unset). A pass's plan counts as changed where torch_convt_op.planner.summary differs (kernel, tile
family and shape, stages, copies), or one of the plan fields --fields names (e.g. `--fields
slices,taps_first`: a change the summary leaves out). A change of the planner's code: `--save
before.json` on the old build, then `--against before.json` on the new one (same seeds, count,
card; --b on both sides).
"""
import argparse
import json
import os
import sys

import torch

from torch_convt_op import planner
from torch_convt_op.sweep import compact, draw_shapes

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


def summaries(case, dtype_name, passes, setting, variables, card, fields=()):
    """planner.summary of each pass on `card` under `setting` (the other `variables` unset), followed
    by the `fields` the pass's plan has ('slices=48')"""
    for variable in variables:
        os.environ.pop(variable, None)
    os.environ.update(setting)
    dtype, tf32 = DTYPES[dtype_name]
    plan = planner.explain(*case.sizes, dtype=dtype, tf32=tf32, device=card)
    return [" ".join([planner.summary(plan[name])] + [f"{field}={plan[name][field]}" for field in fields if field in plan[name]])
            for name in passes]


def plan_table(seeds, count, dtype_names, passes, setting, variables, card, fields=()):
    """{(seed, kind, layer, dtype): [summary (and fields) of each pass]} under `setting`"""
    table = {}
    for seed in seeds:
        for kind, case in draw_shapes(count, seed, "cuda"):
            for dtype_name in dtype_names:
                table[(seed, kind, compact(case), dtype_name)] = summaries(case, dtype_name, passes, setting, variables, card,
                                                                           fields)
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", required=True, help="sweep seeds, comma-separated")
    parser.add_argument("--count", type=int, default=150, help="layers a seed (the sweep's N)")
    parser.add_argument("--a", help="the first setting: VAR=VALUE,... ('' for the planner's choice)")
    parser.add_argument("--b", default="", help="the second setting (default: the planner's choice)")
    parser.add_argument("--save", help="write this build's plans under --b to this JSON file, and stop")
    parser.add_argument("--against", help="compare this build's plans under --b with those --save wrote")
    parser.add_argument("--dtypes", default="bf16,tf32,fp32", help=f"from {', '.join(DTYPES)}")
    parser.add_argument("--passes", default="forward,grad_input,grad_weight", help=f"from {', '.join(PASSES)}")
    parser.add_argument("--card", default="h200", help="the card planned for (planner.explain's device)")
    parser.add_argument("--fields", default="", help="plan fields compared besides the summary, comma-separated")
    args = parser.parse_args()
    if (args.a is None) == (args.save is None and args.against is None):
        sys.exit("give --a (two settings of this build), or --save / --against (two builds)")
    setting_a, setting_b = parse_setting(args.a or ""), parse_setting(args.b)
    variables = set(setting_a) | set(setting_b)
    passes = [name for name in args.passes.split(",") if name]
    seeds, dtype_names = [int(s) for s in args.seeds.split(",")], args.dtypes.split(",")
    fields = [name for name in args.fields.split(",") if name]
    after = plan_table(seeds, args.count, dtype_names, passes, setting_b, variables, args.card, fields)
    if args.save:
        with open(args.save, "w") as out:
            json.dump({"card": args.card, "passes": passes, "fields": fields, "plans": [[*key, plans] for key, plans in after.items()]}, out)
        return
    if args.against:
        with open(args.against) as saved:
            before_file = json.load(saved)
        saved_fields = before_file.get("fields", [])
        if before_file["card"] != args.card or before_file["passes"] != passes or saved_fields != fields:
            sys.exit(f"{args.against} holds {before_file['passes']} with fields {saved_fields} on {before_file['card']}:"
                     " plan the same")
        before = {tuple(item[:4]): item[4] for item in before_file["plans"]}
        if set(before) != set(after):
            sys.exit(f"{args.against} holds other layers or dtypes: the same --seeds, --count and --dtypes")
    else:
        before = plan_table(seeds, args.count, dtype_names, passes, setting_a, variables, args.card, fields)
    changed, moves = [], {}
    for (seed, kind, layer, dtype_name), plans in after.items():
        moves.setdefault((seed, kind, layer), [])
        moves[(seed, kind, layer)] += [f"{dtype_name} {name}: {a} -> {b}" for name, a, b in
                                       zip(passes, before[(seed, kind, layer, dtype_name)], plans) if a != b]
    for (seed, kind, layer), layer_moves in moves.items():
        if layer_moves:
            changed.append(layer)
            print(f"{seed} {kind} {layer}: " + "; ".join(layer_moves))
    print(f"{len(changed)} layers change", file=sys.stderr)
    print(";".join(changed))


if __name__ == "__main__":
    main()
