"""Mutation check of the CPU kernels: does the test suite fail on a wrong kernel?

    python tools/mutate.py [--only NAME,...] [--tests "PYTEST ARGS"] [--full] [--list] [--keep]

Copies the source tree (the files git knows, untracked ones included) to a temporary directory and
builds the library there once for the CPU (CUDA hidden). It then runs the tests on the unmutated copy (a
control: they must pass) and, for each mutant, applies one small break to
csrc/cpu/conv_transpose1d_cpu.cpp or csrc/cpu/kernels_avx2.cpp (a one-line replacement found by its
text, never by line number), rebuilds (ninja recompiles that file only), runs ``python -m
torch_convt_op.bench --check`` and the tests, and restores the file. A mutant is killed when --check or
a test fails (or either crashes or hangs), and survives when both pass. The tree this runs from is
never written.

The mutants break each form the CPU runs: the BLAS and direct forms (float64, and float32 on CPUs
without AVX2) and the AVX2 forms with their micro-kernels (float32 and the 16-bit types on AVX2 CPUs;
the AVX2 mutants need such a CPU to be killed). Some break a path only problems of several batch
rows a task reach (tests/test_coverage.py's cases of 32 short rows; up to about 4 threads).

The tests are by default the files that test values on the CPU's kernel paths (DEFAULT_TESTS); --full
runs the whole suite. Prints a table (mutant, --check, failing tests, the first of them per file) and
exits with status 1 when a mutant survives (or the control fails). Not run in CI: several minutes per
mutant on 2 cores.
"""
import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "csrc/cpu/conv_transpose1d_cpu.cpp"
AVX2_KERNELS = "csrc/cpu/kernels_avx2.cpp"
DEFAULT_TESTS = ["tests/test_ops.py", "tests/test_tiles.py", "tests/test_coverage.py",
                 "tests/test_opcheck.py::test_backward_output_mask_matches_reference"]


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    old: str  # text that occurs exactly once in `path`
    new: str
    path: str = KERNEL


MUTANTS = [
    # the BLAS and direct forms (float64; float32 on CPUs without AVX2)
    Mutant("taps-forward-tile-edge",
           "taps forward: the first column of every later column tile gets no taps (bias only)",
           "const int64_t lo = std::max(m0, tap.shift), hi",
           "const int64_t lo = std::max(m0 + (m0 > 0), tap.shift), hi"),
    Mutant("taps-grad-input-tile-edge", "taps grad_input: the first column of every later column tile gets no taps (0)",
           "const int64_t lo = std::max(i0, -tap.shift), hi",
           "const int64_t lo = std::max(i0 + (i0 > 0), -tap.shift), hi"),
    Mutant("taps-grad-weight-chunk-drop",
           "taps grad_weight: the last position of every whole 512-position chunk left out",
           "const int64_t count = std::min(kColumns, r.end - m);",
           "const int64_t count = std::min(kColumns - 1, r.end - m);"),
    Mutant("taps-grad-weight-wrong-phase", "taps grad_weight: each tap reads grad_y's next phase (strided)",
           "phases + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * capacity + m, capacity,",
           "phases + (tap.phase + 1) % p.stride * phase_stride + (n * p.out_channels + g * Cog) * capacity + m,"
           " capacity,"),
    Mutant("unrolled-forward-tile-edge", "unrolled forward: the last input of every tile adds nothing (col2im)",
           "const int64_t ib = std::min(i0 + width, ceil_div(j1 - offset, s));",
           "const int64_t ib = std::min(i0 + width - 1, ceil_div(j1 - offset, s));"),
    Mutant("direct-dropped-bias", "forward direct path (few channels, depthwise): no bias",
           "std::fill(out, out + p.length_out, bias_data ? bias_data[co] : scalar_t(0));",
           "std::fill(out, out + p.length_out, scalar_t(0));"),
    Mutant("direct-grad-input-range", "grad_input direct path: the last position of every tap's range left out",
           "for (int64_t m = r.begin; m < r.end; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];",
           "for (int64_t m = r.begin; m < r.end - 1; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];"),
    Mutant("grad-bias-last-position", "grad_bias: the last output position of each row left out",
           "grad_bias.copy_(grad_y_c.sum(at::IntArrayRef{0, 2}));",
           "grad_bias.copy_(grad_y_c.narrow(2, 0, std::max<int64_t>(p.length_out - 1, 1)).sum(at::IntArrayRef{0, 2}));"),
    Mutant("forward-dropped-tap", "taps and AVX2 packed forward: the last tap left out (taps_by_phase)",
           "if (tap.phase < static_cast<int64_t>(phases.size())) phases[tap.phase].push_back(k);",
           "if (tap.phase < static_cast<int64_t>(phases.size()) && k != p.kernel_size - 1)"
           " phases[tap.phase].push_back(k);"),
    # the AVX2 forms (float32, and the 16-bit types computed in float32)
    Mutant("avx2-forward-tile-column", "AVX2 packed forward: every later column tile reads x one position late",
           "int64_t stride = length, column = m0;",
           "int64_t stride = length, column = m0 + (m0 > 0);"),
    Mutant("avx2-forward-dropped-bias", "AVX2 packed forward: no bias in phases other than 0 (strided)",
           "all_finite &= avx2::write_row(tile + rr * width, cols, bias ? bias[co] : 0.0f,",
           "all_finite &= avx2::write_row(tile + rr * width, cols, bias && r == 0 ? bias[co] : 0.0f,"),
    Mutant("avx2-forward-batch-rows", "AVX2 packed forward: the batch rows of a task share one tile",
           "tiles.data() + (n - n0) * row_block * width, width, c0 > 0);",
           "tiles.data(), width, c0 > 0);"),
    Mutant("avx2-forward-channel-blocks", "AVX2 packed forward: each block of input channels overwrites the last",
           "tiles.data() + (n - n0) * row_block * width, width, c0 > 0);",
           "tiles.data() + (n - n0) * row_block * width, width, false);"),
    Mutant("avx2-forward-window-edge", "AVX2 packed forward on x in place: a padded window loses its last input",
           "std::memcpy(out + (a0 - lo), x_rows + ci * p.length_in + a0, (a1 - a0) * sizeof(float));",
           "std::memcpy(out + (a0 - lo), x_rows + ci * p.length_in + a0, (a1 - a0 - (a1 > a0)) * sizeof(float));"),
    Mutant("avx2-grad-input-tile-width", "AVX2 grad_input: the last column of every whole tile never written",
           "const int64_t i0 = cb * columns_per_task, cols = std::min(columns_per_task, p.length_in - i0);",
           "const int64_t i0 = cb * columns_per_task, cols = std::min(columns_per_task - 1, p.length_in - i0);"),
    Mutant("avx2-grad-input-rows-channel-blocks", "AVX2 grad_input, w's rows in place: later channel blocks read "
           "the wrong steps",
           "avx2::gemm_rows(rows, cols, kc, w + (g * Cig + row0) * depth + c0 * taps, depth,",
           "avx2::gemm_rows(rows, cols, kc, w + (g * Cig + row0) * depth + c0, depth,"),
    Mutant("avx2-grad-input-packed-channel-blocks", "AVX2 grad_input, w packed: each block of output channels "
           "overwrites the last",
           "avx2::gemm(rows, cols, kc, a + c0 * taps * panel, panel, panel * depth, b, i0, tile, width, c0 > 0);",
           "avx2::gemm(rows, cols, kc, a + c0 * taps * panel, panel, panel * depth, b, i0, tile, width, false);"),
    Mutant("avx2-grad-weight-dot-batch", "AVX2 grad_weight, dot products: the last batch row left out",
           "for (int64_t n = 0; n < p.batch && !range.empty(); ++n) {",
           "for (int64_t n = 0; n + 1 < p.batch && !range.empty(); ++n) {"),
    Mutant("avx2-grad-weight-nan", "AVX2 grad_weight, dot products: NaN everywhere (issue 34: --check passed such a "
           "mutant)",
           "grad_w[((g * Cig + c0 + r) * Cog + o0 + c) * K + k] = tile[r * kOutBlock + c];",
           "grad_w[((g * Cig + c0 + r) * Cog + o0 + c) * K + k] = NAN;"),
    Mutant("avx2-grad-weight-gemm-chunk", "AVX2 grad_weight, GEMM over positions: the last position of every whole "
           "512-position chunk left out",
           "const int64_t count = std::min(kChunk, positions - q0);",
           "const int64_t count = std::min(kChunk - 1, positions - q0);"),
    Mutant("avx2-grad-weight-gemm-batch-run", "AVX2 grad_weight, GEMM over positions: a chunk never moves on to the "
           "next batch row's grad_y",
           "const int64_t run = std::min(count - t0, p.length_in - i0);",
           "const int64_t run = count - t0;"),
    Mutant("avx2-streamed-tile", "AVX2 streamed forward: the last input of every whole 192-position tile left out",
           "const int64_t rows = std::min(kStreamedPositions, total - r0);",
           "const int64_t rows = std::min(kStreamedPositions - 1, total - r0);"),
    Mutant("avx2-scatter-col2im", "AVX2 scatter forward: the last input of every tile adds nothing (col2im)",
           "const int64_t ib = std::min(i0 + cols, ceil_div(j1 - offset, p.stride));",
           "const int64_t ib = std::min(i0 + cols - 1, ceil_div(j1 - offset, p.stride));"),
    # the AVX2 micro-kernels (kernels_avx2.cpp)
    Mutant("avx2-gemm-depth-block", "AVX2 GEMM: each block of 128 reduction steps overwrites the last",
           "const bool add = accumulate || k0 > 0;", "const bool add = accumulate;", AVX2_KERNELS),
    Mutant("avx2-gemm-copied-b", "AVX2 GEMM, B copied per column step (rows 4 KB apart): columns 8-15 one early",
           "_mm256_loadu_ps(b_steps[kk] + column + j + 8)", "_mm256_loadu_ps(b_steps[kk] + column + j + 7)",
           AVX2_KERNELS),
    Mutant("avx2-dot-tail", "AVX2 dot products: the last position of a row not a multiple of 8 left out",
           "tail_mask(length - m)", "tail_mask(length - m - 1)", AVX2_KERNELS),
    Mutant("avx2-dot-chunks", "AVX2 dot products: each chunk of 1024 positions overwrites the last",
           "const bool add = accumulate || m0 > 0;", "const bool add = accumulate;", AVX2_KERNELS),
    Mutant("avx2-nonfinite-unnoticed", "AVX2 epilogue: an Inf or NaN in a whole vector goes unnoticed (no rerun in a "
           "form without padding products)",
           "bool finite = _mm256_movemask_ps(_mm256_cmp_ps(check, check, _CMP_UNORD_Q)) == 0;",
           "bool finite = true;", AVX2_KERNELS),
]


@dataclasses.dataclass
class Outcome:
    check_failed: bool
    failed_tests: List[str]
    test_status: str  # "pass", "fail", "crash (rc N)", "timeout"
    seconds: float

    @property
    def killed(self) -> bool:
        return self.check_failed or self.test_status != "pass"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def source_files(root: str) -> List[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         check=True, capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p))]


def copy_tree(root: str, dest: str) -> None:
    for path in source_files(root):
        os.makedirs(os.path.dirname(os.path.join(dest, path)) or dest, exist_ok=True)
        shutil.copy2(os.path.join(root, path), os.path.join(dest, path))


def cpu_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_CUDA")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU build and CPU tests, on any machine
    return env


def build(work: str, logfile: str) -> None:
    with open(logfile, "a") as f:
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=work, env=cpu_env(),
                              stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"build failed (see {logfile})")


def run_tests(work: str, tests: List[str], timeout: float, logfile: str) -> Outcome:
    start = time.time()
    with open(logfile, "a") as f:
        f.write("\n==== bench --check\n")
        f.flush()
        try:
            check = subprocess.run([sys.executable, "-m", "torch_convt_op.bench", "--check", "--device", "cpu"],
                                   cwd=work, env=cpu_env(), stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            check_failed = check.returncode != 0
        except subprocess.TimeoutExpired:
            check_failed = True
        f.write(f"\n==== pytest {' '.join(tests)}\n")
        f.flush()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", *tests, "-q", "-rf", "-p", "no:cacheprovider"],
                                  cwd=work, env=cpu_env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(check_failed, [], "timeout", time.time() - start)
        f.write(done.stdout + done.stderr)
    failed = [m.group(1) for m in re.finditer(r"^FAILED (\S+)", done.stdout, re.M)]
    status = "pass" if done.returncode == 0 else "fail" if done.returncode == 1 else f"crash (rc {done.returncode})"
    return Outcome(check_failed, failed, status, time.time() - start)


def first_per_file(failed: List[str]) -> List[str]:
    """The first failing test of each file, in the order they ran."""
    seen, firsts = set(), []
    for node in failed:
        path = node.split("::")[0]
        if path not in seen:
            seen.add(path)
            firsts.append(node)
    return firsts


def table(results: Dict[str, Outcome]) -> str:
    lines = ["| mutant | killed | --check | tests failing | first failing test of each file |", "|---|---|---|---|---|"]
    for name, r in results.items():
        tests = r.test_status if r.test_status != "fail" else str(len(r.failed_tests))
        firsts = "<br>".join(first_per_file(r.failed_tests)) or "-"
        lines.append(f"| {name} | {'yes' if r.killed else '**no**'} | {'fails' if r.check_failed else 'passes'} | "
                     f"{tests if r.test_status != 'pass' else 0} | {firsts} |")
    return "\n".join(lines)


def mutate(text: str, mutant: Mutant) -> str:
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(f"mutant {mutant.name}: its text occurs {count} times in {mutant.path} (needs exactly 1); "
                         "update the mutant to the kernel")
    return text.replace(mutant.old, mutant.new)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--tests", help=f"pytest arguments (default: {' '.join(DEFAULT_TESTS)})")
    parser.add_argument("--full", action="store_true", help="run the whole suite (tests/) for each mutant")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary tree (and its logs)")
    parser.add_argument("--no-control", action="store_true", help="skip the run on the unmutated tree")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for --check and for the tests, each")
    args = parser.parse_args(argv)

    mutants = MUTANTS
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        unknown = sorted(set(names) - {m.name for m in MUTANTS})
        if unknown:
            parser.error(f"unknown mutants {', '.join(unknown)}")
        mutants = [m for m in MUTANTS if m.name in names]
    originals = {}  # path -> text
    for path in sorted({m.path for m in mutants}):
        with open(os.path.join(ROOT, path)) as f:
            originals[path] = f.read()
    for m in mutants:  # every mutant applies to its kernel, before anything is built
        mutate(originals[m.path], m)
    if args.list:
        for m in mutants:
            print(f"{m.name:38s} {m.description}")
        return 0
    tests = ["tests"] if args.full else args.tests.split() if args.tests else DEFAULT_TESTS

    work = tempfile.mkdtemp(prefix="convt-mutate-")
    logfile = os.path.join(work, "mutate.log")
    results: Dict[str, Outcome] = {}
    try:
        log(f"copying the tree to {work}; building (CPU)")
        copy_tree(ROOT, work)
        for stale in ("build",):
            shutil.rmtree(os.path.join(work, stale), ignore_errors=True)
        build(work, logfile)
        if not args.no_control:
            log(f"control (no mutant): {' '.join(tests)}")
            control = run_tests(work, tests, args.timeout, logfile)
            if control.killed:
                log(f"the unmutated tree fails (--check {'fails' if control.check_failed else 'passes'}, tests "
                    f"{control.test_status}: {control.failed_tests[:5]}); see {logfile}")
                return 1
            log(f"  passes ({control.seconds:.0f} s)")
        for m in mutants:
            log(f"mutant {m.name}: {m.description}")
            kernel = os.path.join(work, m.path)
            with open(kernel, "w") as f:
                f.write(mutate(originals[m.path], m))
            try:
                with open(logfile, "a") as f:
                    f.write(f"\n\n######## mutant {m.name}\n")
                build(work, logfile)
                results[m.name] = run_tests(work, tests, args.timeout, logfile)
            finally:
                with open(kernel, "w") as f:
                    f.write(originals[m.path])
            r = results[m.name]
            log(f"  {'killed' if r.killed else 'SURVIVED'} ({r.seconds:.0f} s): --check "
                f"{'fails' if r.check_failed else 'passes'}, tests {r.test_status} ({len(r.failed_tests)} failing)")
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    survived = [name for name, r in results.items() if not r.killed]
    print(f"{len(results) - len(survived)} of {len(results)} mutants killed"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
