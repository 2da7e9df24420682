"""Mutation check of the CPU kernels: does the test suite fail on a wrong kernel?

    python tools/mutate.py [--only NAME,...] [--tests "PYTEST ARGS"] [--full] [--list] [--keep]

Copies the source tree (the files git knows, untracked ones included) to a temporary directory and
builds the library there once for the CPU (CUDA hidden). It then runs the tests on the unmutated copy (a
control: they must pass) and, for each mutant, applies one small break to
csrc/cpu/conv_transpose1d_cpu.cpp (a one-line replacement found by its text, never by line number),
rebuilds (ninja recompiles that file only), runs ``python -m torch_convt_op.bench --check`` and the
tests, and restores the file. A mutant is killed when --check or a test fails (or either crashes or
hangs), and survives when both pass. The tree this runs from is never written.

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
DEFAULT_TESTS = ["tests/test_ops.py", "tests/test_tiles.py",
                 "tests/test_opcheck.py::test_backward_output_mask_matches_reference"]


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    old: str  # text that occurs exactly once in KERNEL
    new: str


MUTANTS = [
    Mutant("forward-tile-edge", "forward GEMM: the first column of every later column tile gets no taps (bias only)",
           "const int64_t lo = std::max(m0, tap.shift), hi",
           "const int64_t lo = std::max(m0 + (m0 > 0), tap.shift), hi"),
    Mutant("grad-input-tile-edge", "grad_input GEMM: the first column of every later column tile gets no taps (0)",
           "const int64_t lo = std::max(i0, -tap.shift), hi",
           "const int64_t lo = std::max(i0 + (i0 > 0), -tap.shift), hi"),
    Mutant("grad-input-tile-width", "grad_input GEMM: the last column of every whole tile never written",
           "width = std::min(columns, p.length_in - i0);",
           "width = std::min(columns - 1, p.length_in - i0);"),
    Mutant("grad-weight-chunk-drop", "grad_weight GEMM: the last position of every whole 512-position chunk left out",
           "const int64_t count = std::min(kGradWeightColumns, r.end - m);",
           "const int64_t count = std::min(kGradWeightColumns - 1, r.end - m);"),
    Mutant("grad-weight-chunk-shift", "grad_weight GEMM: every later chunk reads x one position early",
           "p.length_in + m - tap.shift) * Cig",
           "p.length_in + m - tap.shift - (m > r.begin)) * Cig"),
    Mutant("forward-dropped-tap", "forward GEMM: the last tap left out",
           "if (tap.phase != phase) continue;",
           "if (tap.phase != phase || k == p.kernel_size - 1) continue;"),
    Mutant("forward-dropped-bias", "forward GEMM: no bias in phases other than 0 (strided)",
           "bias_data ? bias_data[g * Cog + co] : scalar_t(0)",
           "bias_data && phase == 0 ? bias_data[g * Cog + co] : scalar_t(0)"),
    Mutant("direct-dropped-bias", "forward direct path (few channels, depthwise): no bias",
           "std::fill(out, out + p.length_out, bias_data ? bias_data[co] : scalar_t(0));",
           "std::fill(out, out + p.length_out, scalar_t(0));"),
    Mutant("grad-weight-wrong-phase", "grad_weight GEMM: each tap reads grad_y's next phase (strided)",
           "phases_data + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * phase_capacity + m,",
           "phases_data + (tap.phase + 1) % p.stride * phase_stride + (n * p.out_channels + g * Cog) * phase_capacity"
           " + m,"),
    Mutant("direct-grad-input-range", "grad_input direct path: the last position of every tap's range left out",
           "for (int64_t m = r.begin; m < r.end; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];",
           "for (int64_t m = r.begin; m < r.end - 1; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];"),
    Mutant("grad-weight-nan", "grad_weight GEMM: NaN everywhere (issue 34: --check passed such a mutant)",
           "at::Tensor grad_w_taps = at::zeros({p.kernel_size, p.groups, Cog, Cig}, w.options());",
           "at::Tensor grad_w_taps = at::full({p.kernel_size, p.groups, Cog, Cig}, NAN, w.options());"),
    Mutant("grad-bias-last-position", "grad_bias: the last output position of each row left out",
           "grad_bias.copy_(grad_y_c.sum(at::IntArrayRef{0, 2}));",
           "grad_bias.copy_(grad_y_c.narrow(2, 0, std::max<int64_t>(p.length_out - 1, 1)).sum(at::IntArrayRef{0, 2}));"),
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
        raise ValueError(f"mutant {mutant.name}: its text occurs {count} times in {KERNEL} (needs exactly 1); "
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
    with open(os.path.join(ROOT, KERNEL)) as f:
        original = f.read()
    for m in mutants:  # every mutant applies to this kernel, before anything is built
        mutate(original, m)
    if args.list:
        for m in mutants:
            print(f"{m.name:26s} {m.description}")
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
        kernel = os.path.join(work, KERNEL)
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
            with open(kernel, "w") as f:
                f.write(mutate(original, m))
            try:
                with open(logfile, "a") as f:
                    f.write(f"\n\n######## mutant {m.name}\n")
                build(work, logfile)
                results[m.name] = run_tests(work, tests, args.timeout, logfile)
            finally:
                with open(kernel, "w") as f:
                    f.write(original)
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
