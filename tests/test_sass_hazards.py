"""tools/sass_hazards.py finds the register hazards of asynchronous wgmma (HGMMA) in SASS listings:
writes to a running group's A registers and uses of its accumulators, along branches and loops, and
none once a WARPGROUP.DEPBAR has retired the group. Hand-written listings in cuobjdump's format."""
import importlib.util
import os

import pytest

from conftest import quick

pytestmark = quick  # every test here is in the quick subset (pure Python, milliseconds)

_PATH = os.path.join(os.path.dirname(__file__), "..", "tools", "sass_hazards.py")
_SPEC = importlib.util.spec_from_file_location("sass_hazards", _PATH)
sass_hazards = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sass_hazards)


def listing(*instructions: str) -> str:
    """Instructions at consecutive addresses (16 bytes apart), as cuobjdump -sass prints them."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {text} ;" for i, text in enumerate(instructions))


def hazards(*instructions: str):
    return sass_hazards.find_hazards(sass_hazards.parse_listing(listing(*instructions)))


GROUP = ["WARPGROUP.ARRIVE", "HGMMA.64x64x8.F32.TF32 R24, R120, gdesc[UR8], R24, gsb0"]  # A R120-R123, d R24-R55


@pytest.mark.parametrize("instruction,hazard", [
    ("LDS R121, [R10]", True),                    # overwrites A while the group runs
    ("FADD R60, R30, R61", True),                 # reads an accumulator
    ("MOV R40, R61", True),                       # writes an accumulator
    ("LDS R124, [R10]", False),                   # another register
    ("STS [R121], R60", False),                   # uses A as an address: a read
])
def test_a_running_group(instruction, hazard):
    found = hazards(*GROUP, instruction, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "EXIT")
    assert bool(found) == hazard
    if hazard:
        assert found[0].endswith(instruction)


def test_retired_groups_free_their_registers():
    assert hazards(*GROUP, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "LDS R121, [R10]", "MOV R40, R61", "EXIT") == []
    # at most one group left running: the older one is retired, the newer one is not
    second = ["WARPGROUP.ARRIVE", "HGMMA.64x64x8.F32.TF32 R24, R132, gdesc[UR8], R24, gsb0"]
    assert hazards(*GROUP, *second, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "LDS R121, [R10]", "EXIT") == []
    assert hazards(*GROUP, *second, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "LDS R133, [R10]", "EXIT") != []


def test_a_group_running_around_a_loop():
    """The loads at the top of a loop run again after the group issued at its bottom."""
    loop = ["LDS R120, [R10]", *GROUP, "ISETP.NE.AND P0, PT, R9, RZ, PT", "@P0 BRA 0x0"]
    assert hazards(*loop, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "EXIT") == ["0x0000 LDS R120, [R10]"]
    retired = ["LDS R120, [R10]", *GROUP, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P0 BRA 0x0", "EXIT"]
    assert hazards(*retired) == []


def test_a_branch_around_the_retirement():
    """A path that skips the DEPBAR keeps the group running."""
    found = hazards(*GROUP, "@P0 BRA 0x40", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "LDS R122, [R10]", "EXIT")
    assert found == ["0x0040 LDS R122, [R10]"]
