"""The benchmark's sweep (torch_convt_op/sweep.py): valid, deterministic draws of every kind, and a tiny
CPU run through the command line with its report and JSON."""
import collections
import json

import pytest
import torch
import torch.nn.functional as F

from torch_convt_op import bench, sweep

pytestmark = pytest.mark.quick  # (a few seconds: all of it is in the quick subset)

TINY = {"outputs": (2e3, 2e4), "flops": 2e7, "inputs": 1e6, "min_l_in": 4}  # sizes for a run that takes a second


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_draws_are_valid_for_torch(device):
    for seed in range(3):
        for kind, case in sweep.draw_shapes(96, seed, device):
            sweep.assert_valid(case)
            x = torch.empty(case.n, case.c_in, case.l_in, device="meta")
            w = torch.empty(case.c_in, case.c_out // case.groups, case.k, device="meta")
            y = F.conv_transpose1d(x, w, None, case.stride, case.padding, case.output_padding, case.groups,
                                   case.dilation)
            assert tuple(y.shape) == (case.n, case.c_out, case.l_out), (kind, case)
            assert case.flops <= sweep.SIZES[device]["flops"] or case.n == 1, (kind, case)
            assert case.numels()["x"] <= sweep.SIZES[device]["inputs"], (kind, case)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_draws_are_sized_for_the_device(device):
    lo, hi = sweep.SIZES[device]["outputs"]
    outputs = [case.numels()["y"] for _, case in sweep.draw_shapes(160, 7, device)]
    assert max(outputs) <= 2 * hi
    # most land in the range; the FLOPs cap and the layers' length ranges move the others down
    assert sum(lo / 2 <= y <= 2 * hi for y in outputs) >= 0.7 * len(outputs)


def test_draws_are_deterministic_and_kinds_equal():
    first = sweep.draw_shapes(40, 11, "cpu")
    assert first == sweep.draw_shapes(40, 11, "cpu")
    assert first[:5] == sweep.draw_shapes(5, 11, "cpu")  # shape i does not depend on the sweep's length
    assert first != sweep.draw_shapes(40, 12, "cpu")
    # the CPU and CUDA sweeps of one seed draw the same layers at different sizes
    cuda = sweep.draw_shapes(40, 11, "cuda")
    assert [(k, c.c_in, c.c_out, c.k, c.stride, c.groups) for k, c in first] == \
           [(k, c.c_in, c.c_out, c.k, c.stride, c.groups) for k, c in cuda]
    for block in range(5):
        kinds = [kind for kind, _ in first[block * len(sweep.KINDS):(block + 1) * len(sweep.KINDS)]]
        assert sorted(kinds) == sorted(sweep.KINDS)
    counts = collections.Counter(kind for kind, _ in sweep.draw_shapes(160, 3, "cuda"))
    assert set(counts.values()) == {160 // len(sweep.KINDS)}


def test_shape_classes_are_drawn():
    cases = [(kind, case) for seed in range(4) for kind, case in sweep.draw_shapes(64, seed, "cuda")]
    assert any(c.c_out <= 4 and c.c_in >= 64 for k, c in cases if k == "narrow_out")
    assert all(c.k >= 40 for k, c in cases if k == "long_k")
    assert all(c.c_in <= 8 for k, c in cases if k == "narrow_in")
    assert any(c.groups == c.c_in for k, c in cases if k == "grouped")  # depthwise
    assert all(c.groups > 1 for k, c in cases if k == "grouped")
    assert all(c.c_in >= 1024 and 100 <= c.l_in <= 1300 and c.n <= 16 for k, c in cases if k == "wide_short")
    assert any(c.dilation > 1 for _, c in cases) and any(c.output_padding > 0 for _, c in cases)


def test_distribution():
    stats = sweep.distribution([0.25, 1.0, 2.0, 8.0], sweep.TARGETS[("cpu", "fwd")])
    assert stats["geomean"] == pytest.approx(2 ** 0.5)
    assert stats["min"] == 0.25 and stats["below_1x"] == 0.25 and stats["below_floor"] == 0.25
    assert stats["p10"] == pytest.approx(0.475)
    assert not stats["meets_acceptance"]
    assert sweep.distribution([1.0] * 20, sweep.TARGETS[("cpu", "fwd")])["meets_acceptance"]


def test_tiny_cpu_sweep_from_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sweep.SIZES, "cpu", TINY)
    monkeypatch.setattr(sweep, "DEFAULT_MIN_TIME", {"cpu": 0.0, "cuda": 0.0})
    path = tmp_path / "sweep.json"
    with pytest.raises(SystemExit) as exit_status:
        bench.main(["--device", "cpu", "--sweep", "3", "--seed", "5", "--json", str(path)])
    assert exit_status.value.code == 0  # no cell flagged
    out = capsys.readouterr().out
    assert "| fwd fp32 | 3 |" in out and "| fwd+bwd fp32 | 3 |" in out and "worst 3, fwd fp32:" in out
    for _, case in sweep.draw_shapes(3, 5, "cpu"):
        assert sweep.compact(case) in out  # the shape list, to reproduce the run
    data = json.loads(path.read_text())
    assert data["sweep"]["seed"] == 5 and data["sweep"]["timed"] == 3
    assert [s["shape"] for s in data["shapes"]] == [sweep.compact(c) for _, c in sweep.draw_shapes(3, 5, "cpu")]
    assert len(data["rows"]) == 6
    for row in data["rows"]:
        assert row["mode"] in ("fwd fp32", "fwd+bwd fp32") and row["kind"] in sweep.KINDS
        assert row["torch_ms"] > 0 and row["ours_ms"] > 0 and row["speedup"] > 0
        assert row["error"] <= row["tolerance"] and not row["flagged"]
        assert set(row["args"]) == {"n", "c_in", "c_out", "k", "l_in", "stride", "padding", "output_padding",
                                    "dilation", "groups"}
    for mode in ("fwd fp32", "fwd+bwd fp32"):
        summary = data["summary"][mode]
        assert summary["count"] == 3
        assert summary["min"] <= summary["p10"] <= summary["geomean"] * 10
        assert set(summary) >= {"geomean", "p10", "min", "below_1x", "below_target", "below_floor", "by_kind"}


def test_forward_only_and_time_limit(monkeypatch):
    monkeypatch.setitem(sweep.SIZES, "cpu", TINY)
    result = sweep.run_sweep(4, 2, "cpu", ["fp32"], backward=False, min_time=0.0, max_seconds=0.0,
                             log=lambda _: None)
    assert result["sweep"]["timed"] == 1  # the limit is checked before each shape after the first
    assert list(result["summary"]) == ["fwd fp32"] and len(result["cells"]) == 1
    assert "worst 1, fwd fp32:" in sweep.format_report(result)


def test_a_difference_from_torch_is_judged_against_float64(monkeypatch):
    monkeypatch.setitem(sweep.SIZES, "cpu", TINY)
    ours = bench.IMPLEMENTATIONS["ours"]
    torch_op = bench.IMPLEMENTATIONS["torch"]
    # torch off by 1 %, ours exact: not flagged, the float64 errors recorded
    monkeypatch.setitem(bench.IMPLEMENTATIONS, "torch", lambda x, w, b, shape: torch_op(x, w, b, shape) * 1.01)
    monkeypatch.setitem(bench.IMPLEMENTATIONS, "ours", ours)
    result = sweep.run_sweep(1, 0, "cpu", ["fp32"], min_time=0.0, log=lambda _: None)
    for cell in result["cells"]:
        assert not cell.flagged and cell.error > cell.tolerance
        assert cell.error64 < 1e-5 < cell.torch_error64


def test_a_wrong_result_is_flagged(monkeypatch):
    monkeypatch.setitem(sweep.SIZES, "cpu", TINY)
    ours = bench.IMPLEMENTATIONS["ours"]
    monkeypatch.setitem(bench.IMPLEMENTATIONS, "ours", lambda x, w, b, shape: ours(x, w, b, shape) * 1.01)
    result = sweep.run_sweep(1, 0, "cpu", ["fp32"], min_time=0.0, log=lambda _: None)
    assert all(cell.flagged for cell in result["cells"])
    assert "FLAGGED (2" in sweep.format_report(result)
