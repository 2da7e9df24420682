"""Static check of the warpgroup MMA kernels' machine code (SASS) for register hazards.

wgmma (HGMMA in SASS) runs asynchronously: until a WARPGROUP.DEPBAR retires its group, no other
instruction may write the A registers it reads or touch its accumulators. The compiler does not
always keep that (session 12: a tap's group left running gave wrong sums), so every kernel that
lets a group run past the next instructions is checked here along every path of its control-flow
graph, loops included.

    python tools/sass_hazards.py [torch_convt_op/_C.abi3.so]   # every kernel with HGMMA
    python tools/sass_hazards.py --sass kernel.sass            # one `cuobjdump -sass -fun` listing

Exit status 1 when any kernel has a hazard. Needs cuobjdump (CUDA toolkit) for a shared library.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, FrozenSet, List, Tuple

Group = Tuple[FrozenSet[int], FrozenSet[int]]  # (A registers, accumulator registers) of one HGMMA group
NO_REGISTERS: FrozenSet[int] = frozenset()
_MAX_GROUPS = 8  # running groups told apart; older ones are merged into one


def parse_listing(text: str) -> List[Tuple[int, str]]:
    """(address, instruction) for each instruction line of a cuobjdump -sass listing."""
    return [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", text, re.MULTILINE)]


def _registers(operand: str, count: int = 1) -> FrozenSet[int]:
    m = re.match(r"-?\|?R(\d+)\b", operand)
    return frozenset(range(int(m.group(1)), int(m.group(1)) + count)) if m else NO_REGISTERS


def _split(instruction: str) -> Tuple[bool, str, List[str]]:
    predicate = re.match(r"@!?U?P\w+\s+", instruction)
    body = instruction[predicate.end():] if predicate else instruction
    opcode, _, rest = body.partition(" ")
    return bool(predicate), opcode, [a.strip() for a in rest.split(",")] if rest else []


def _accumulators(opcode: str) -> int:
    n = re.search(r"\.64x(\d+)x", opcode)
    return int(n.group(1)) // 2 if n else 64


def _merge(a: Tuple[Group, ...], b: Tuple[Group, ...]) -> Tuple[Group, ...]:
    """Running groups on either path, aligned from the newest."""
    n = max(len(a), len(b))
    pad = ((NO_REGISTERS, NO_REGISTERS),)
    a, b = pad * (n - len(a)) + a, pad * (n - len(b)) + b
    return tuple((x[0] | y[0], x[1] | y[1]) for x, y in zip(a, b))


def find_hazards(instructions: List[Tuple[int, str]]) -> List[str]:
    """Instructions that write a running group's A registers or use its accumulators."""
    index = {address: i for i, (address, _) in enumerate(instructions)}
    running: Dict[int, Tuple[Group, ...]] = {0: ()}   # committed groups not retired, oldest first
    open_group: Dict[int, Group] = {0: (NO_REGISTERS, NO_REGISTERS)}  # HGMMA issued since the last commit
    work, hazards = [0], set()
    while work:
        i = work.pop()
        groups, current = running[i], open_group[i]
        address, instruction = instructions[i]
        predicated, opcode, args = _split(instruction)
        if opcode.startswith("HGMMA"):
            current = (current[0] | _registers(args[1], 4), current[1] | _registers(args[0], _accumulators(opcode)))
            if "gsb0" in instruction:  # the last HGMMA of a group
                groups, current = groups + (current,), (NO_REGISTERS, NO_REGISTERS)
                if len(groups) > _MAX_GROUPS:  # (a loop that never retires them) the oldest two as one
                    groups = ((groups[0][0] | groups[1][0], groups[0][1] | groups[1][1]),) + groups[2:]
        elif opcode.startswith("WARPGROUP.DEPBAR"):
            pending = int(args[-1], 0)
            groups = groups[len(groups) - pending:] if pending else ()
        elif not opcode.startswith("WARPGROUP") and groups:
            busy_a = frozenset().union(*(g[0] for g in groups))
            busy_d = frozenset().union(*(g[1] for g in groups))
            width = 4 if ".128" in opcode else 2 if ".64" in opcode else 1
            writes = args and not opcode.startswith(("ST", "BRA", "BAR", "RED", "ATOM", "EXIT", "RET"))
            written = _registers(args[0], width) if writes else NO_REGISTERS
            used = frozenset().union(*(_registers(a) for a in args)) if args else NO_REGISTERS
            if written & busy_a or used & busy_d:
                hazards.add((address, instruction))
        successors = []
        if opcode.split(".")[0] == "BRA":
            target = index.get(int(args[-1], 16)) if args and args[-1].startswith("0x") else None
            successors += [target] if target is not None else []
            successors += [i + 1] if predicated and i + 1 < len(instructions) else []
        elif not (opcode.startswith(("EXIT", "RET")) and not predicated) and i + 1 < len(instructions):
            successors.append(i + 1)
        for j in successors:
            merged = groups if j not in running else _merge(running[j], groups)
            merged_open = current if j not in open_group else (open_group[j][0] | current[0], open_group[j][1] | current[1])
            if running.get(j) != merged or open_group.get(j) != merged_open:
                running[j], open_group[j] = merged, merged_open
                work.append(j)
    return [f"{address:#06x} {instruction}" for address, instruction in sorted(hazards)]


def _cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return os.path.join(home, "bin", "cuobjdump")


def check_library(path: str) -> int:
    tool = _cuobjdump()
    listing = subprocess.run([tool, "-sass", path], check=True, capture_output=True, text=True).stdout
    kernels = sorted(set(re.findall(r"Function : (\S+)", listing)))
    failed = 0
    for name in kernels:
        text = subprocess.run([tool, "-sass", "-fun", name, path], check=True, capture_output=True, text=True).stdout
        instructions = parse_listing(text)
        if not any("HGMMA" in instruction for _, instruction in instructions):
            continue
        hazards = find_hazards(instructions)
        failed += bool(hazards)
        print(f"{'HAZARDS' if hazards else 'clean  '} {len(hazards):3d}  {name}")
        for hazard in hazards[:5]:
            print("         ", hazard)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "torch_convt_op", "_C.abi3.so"))
    parser.add_argument("--sass", help="check one cuobjdump -sass -fun listing instead")
    args = parser.parse_args()
    if args.sass:
        hazards = find_hazards(parse_listing(open(args.sass).read()))
        for hazard in hazards:
            print("hazard:", hazard)
        print(f"{len(hazards)} hazards")
        return 1 if hazards else 0
    return check_library(args.library)


if __name__ == "__main__":
    sys.exit(main())
