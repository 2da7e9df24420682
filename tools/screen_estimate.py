"""What a planner change would buy on layers already screened, without a GPU: each screened cell's
plan under this build, matched to the screened variant that ran the same plan, stands for its time.

    python tools/screen_estimate.py screen_fwd.json screen_gi.json --baseline model --card h200

The JSON files are tools/override_screen.py's (--json: per 'layer dtype' the ms of each variant and
torch, and each variant's plan summaries). Screen the candidate plans first (CONVT_* overrides,
CONVT_GEMM_TILE's forced tiles), then change the planner and run this on the same files: it prints,
over the cells, the geomean speedup over torch, the cells below 1x and 0.85x and the minimum of the
--baseline variant and of this build's plans, and each cell whose plan changed. A cell whose new plan
no variant ran counts at the baseline's time and is listed as unmatched (screen it). --pass: the
pass the screens timed (fwd, fwd+bwd, grad_input, grad_weight; default fwd).
"""
import argparse
import json
import math

import torch

from torch_convt_op import planner

DTYPES = {"bf16": (torch.bfloat16, True), "tf32": (torch.float32, True), "fp32": (torch.float32, False)}
PASSES = {"fwd": ["forward"], "fwd+bwd": ["forward", "grad_input", "grad_weight"], "grad_input": ["grad_input"],
          "grad_weight": ["grad_weight"]}


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("screens", nargs="+", help="tools/override_screen.py --json files")
    parser.add_argument("--baseline", default="model", help="the variant the change is measured against")
    parser.add_argument("--pass", dest="pass_name", choices=sorted(PASSES), default="fwd",
                        help="the pass the screens timed (override_screen's first argument)")
    parser.add_argument("--card", default="h200", help="the card planned for (planner.explain's device)")
    args = parser.parse_args()
    before, after, changed, unmatched = [], [], [], 0
    for path in args.screens:
        for key, cell in json.load(open(path)).items():
            text, dtype_name = key.split()
            layer = tuple(int(v) for v in text.split(","))
            names = [name for name in cell["ms"] if name != "torch"]
            plans = dict(zip(names, cell["plans"]))
            passes = PASSES[args.pass_name]
            dtype, tf32 = DTYPES[dtype_name]
            explained = planner.explain(*layer, dtype=dtype, tf32=tf32, device=args.card)
            plan = ", ".join(planner.summary(explained[name]) for name in passes)
            torch_ms = cell["ms"]["torch"]
            base = torch_ms / cell["ms"][args.baseline]
            matches = [name for name in names if plans[name] == plan]
            if plans[args.baseline] == plan:
                new = base
            elif matches:
                new = torch_ms / cell["ms"][matches[0]]
                changed.append(f"  {key:44s} {base:5.2f} -> {new:5.2f} ({matches[0]}: {plan})")
            else:
                new, unmatched = base, unmatched + 1
                changed.append(f"  {key:44s} {base:5.2f} -> unmatched ({plan})")
            before.append(base)
            after.append(new)
    for label, values in ((args.baseline, before), ("this build", after)):
        print(f"{label:12s} cells {len(values)}: geomean {geomean(values):.3f}, below 1x {sum(v < 1 for v in values)}, "
              f"below 0.85x {sum(v < 0.85 for v in values)}, min {min(values):.2f}")
    print(f"{len(changed)} cells change plan ({unmatched} unmatched: their baseline time counted)")
    print("\n".join(changed))


if __name__ == "__main__":
    main()
