#!/usr/bin/env bash
# Issue 33 on a GPU machine: AOTInductor packages that call our op, loaded by a fresh Python process
# and by the C++ runner (examples/aoti_runner), on CUDA, in float32 and bfloat16, each output against the
# eager model's (CI runs the same tests on the CPU). Run from the repository root once the library is
# built there:
#
#     python3 setup.py build_ext --inplace
#     bash tools/device_aoti.sh
#
# It runs tests/test_deploy.py's CUDA AOTInductor tests in five processes side by side (each server
# and dtype; the nn.Linear model with the loader-fault handling; the C++ runner built with CMake where cmake
# is, else one g++ command), then prints a table of every comparison (case, device, dtype,
# max |packaged - eager|, that over max |eager| against its bound, the LD_PRELOAD it needed, the
# server's load and run times), the compile and build times, and what failed. Within ~300 s:
# CONVT_AOTI_TIMEOUT (default 285) is the whole run's limit. PYTHON (default python3) picks the
# interpreter. Exit code: 0 all passed; 1 a test failed, a CUDA comparison was skipped or CUDA is
# missing; 124 out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
limit="${CONVT_AOTI_TIMEOUT:-285}"
# s: a server that loads and runs longer hangs. Generous: torch 2.11's aoti_load_package picks the CPU's
# vector ISA by compiling probes and loading each in a child Python (import torch each time), one
# process at a time under a file lock, so a load beside four other test processes takes tens of seconds.
export CONVT_SERVER_TIMEOUT="${CONVT_SERVER_TIMEOUT:-180}"
work="${CONVT_AOTI_LOGS:-$(mktemp -d)}"  # the pytest logs (CONVT_AOTI_LOGS: a folder to keep them in)
mkdir -p "$work"
export CONVT_AOTI_REPORT="$work/report.jsonl"
: > "$CONVT_AOTI_REPORT"
start=$SECONDS

echo "== environment"
"$python" - <<'EOF'
import shutil, subprocess, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}"
      + (f" ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else ""))
gxx = shutil.which("g++")
version = subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0] if gxx else None
libstdcxx = subprocess.run([gxx, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip() if gxx else None
print(f"cmake: {shutil.which('cmake')}; g++: {version}; g++'s libstdc++: {libstdcxx}")
import torch_convt_op
print(f"library: {torch_convt_op.LIBRARY_PATH}")
EOF
if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "FAIL: CUDA is not available to $python: the CUDA rows would be skipped"
    exit 1
fi

# pytest in the background, stopped at the seconds given; its output goes to $work/<name>.log
start_pytest() {
    local name="$1" seconds="$2"; shift 2
    timeout -k 10 "$seconds" "$python" -m pytest tests/test_deploy.py -q -rfEs --tb=short -p no:cacheprovider \
        -p no:warnings --log-level=WARNING --durations=0 "$@" > "$work/$name.log" 2>&1 &
    pids[$name]=$!
}
# Each process compiles its own packages (an Inductor compile is mostly one core), so the CUDA cases run
# side by side: one process per server and dtype, one for the nn.Linear model (with the CUDA-graphs test
# and the loader-fault handling); the CPU cases are CI's.
declare -A pids rcs
names="python_float32 python_bfloat16 cpp_float32 cpp_bfloat16 linear"
budget=$((limit - 10))
for dtype in float32 bfloat16; do
    start_pytest "python_$dtype" "$budget" -k "vocoder and cuda and $dtype"
    start_pytest "cpp_$dtype" "$budget" -k "cpp_runner and cuda and $dtype"
done
start_pytest linear "$budget" -k "(aot_inductor_package_gives_the_same_output and cuda) or reduce_overhead or fault_handling"
for name in $names; do
    wait "${pids[$name]}"
    rcs[$name]=$?
    echo
    echo "== pytest $name: exit ${rcs[$name]}"
    # the assertion and the server's last words (a traceback, its stderr), then pytest's summary
    grep -E "^E |aoti_runner:|hung|Fatal Python error|^  File |Error" "$work/$name.log" | head -n 40
    tail -n 8 "$work/$name.log"
    if [ "${rcs[$name]}" -eq 124 ] || [ "${rcs[$name]}" -eq 137 ]; then
        echo "TIMED OUT after ${budget} s: the table below shows what finished"
    fi
done

echo
echo "== results (max abs diff: packaged - eager; relative: that / max |eager|, passes at <= bound)"
"$python" - "$CONVT_AOTI_REPORT" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
checks = [r for r in rows if r["kind"] == "check"]
header = ("case", "device", "dtype", "max abs diff", "relative", "bound", "result", "LD_PRELOAD", "server times")
table = [header] + [(r["case"], r["device"], r["dtype"], f"{r['max_abs_diff']:.3g}", f"{r['relative']:.3g}",
                     f"{r['bound']:.3g}", "pass" if r["passed"] else "FAIL", r["preload"] or "-", r["timings"])
                    for r in checks]
widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
for row in table:
    print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
if not checks:
    print("(no comparison finished)")
for r in rows:
    if r["kind"] in ("compile", "build"):
        print(f"{r['kind']} {r['case']}: {r['seconds']} s")
print("server runs (each process that loaded a package):")
for r in rows:
    if r["kind"] == "server":
        ended = "hung" if r["hung"] else f"exit {r['returncode']}"
        print(f"  {r['server']} {r['package']}: {ended} after {r['seconds']} s"
              f"{', LD_PRELOAD=' + r['preload'] if r['preload'] else ''}; {r['timings'] or '-'}")
        if r["returncode"] != 0:  # its last words: a traceback (faulthandler's, for a hang) or an error
            print("    " + "\n    ".join(r["stderr_tail"].strip().splitlines()[-12:]))
failed = [f"{r['case']} {r['device']} {r['dtype']}" for r in checks if not r["passed"]]
if failed:
    print("FAILED comparisons: " + "; ".join(failed))
done = {(r["case"], r["device"], r["dtype"]) for r in checks}
missing = [" ".join(key) for key in [(case, "cuda", dtype) for case in ("python aoti_load_package", "C++ aoti_runner")
                                     for dtype in ("float32", "bfloat16")] if key not in done]
if missing:
    print("MISSING CUDA comparisons (skipped or not reached): " + "; ".join(missing))
sys.exit(2 if missing else 0)
EOF
table=$?

echo
echo "total: $((SECONDS - start)) s"
for name in $names; do
    grep -E "^(FAILED|ERROR) " "$work/$name.log" | sed "s/^/$name: /"
done
echo "logs: $work"
summary="$(for name in $names; do printf '%s exit %s, ' "$name" "${rcs[$name]}"; done)"
summary="${summary%, }"
for rc in "${rcs[@]}"; do
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "RESULT: OUT OF TIME ($summary)"
        exit 124
    fi
done
for rc in "${rcs[@]}"; do
    if [ "$rc" -ne 0 ]; then
        echo "RESULT: FAILED ($summary; lines above name the tests)"
        exit 1
    fi
done
if [ "$table" -ne 0 ]; then
    echo "RESULT: INCOMPLETE: the tests passed but not every CUDA comparison ran (skip reasons above)"
    exit 1
fi
echo "RESULT: all passed"
