#!/usr/bin/env bash
# One device call for a kernel change: this tree and a reference built side by side, this tree's CUDA
# tests, then tools/ab.py of both against torch. Where git is (the reference as a tar, since the
# device machine gets the working tree without .git):
#
#     git archive REF > .ab/ref.tar
#
# then on the GPU machine, from the repository root (carry .ab, and .whl for wheels it lacks, which
# are installed first):
#
#     bash tools/device_ab.sh .ab/ref.tar "tests/test_cuda.py -k cuda" "--layers '...' --dtypes tf32,bf16 --backward"
#
# The second argument is pytest's (run with -n 8: pytest-xdist is there), the third tools/ab.py's
# (after `main=<ref> new=. torch=@torch`); an empty argument skips that part. Logs and ab.json go to
# $OUT (the device tool's folder) or /tmp/device_ab. Times: two builds ~125 s at 16 cores, the CUDA
# test files ~140 s, ab.py ~5 s a process and round plus the timings.
set -uo pipefail
cd "$(dirname "$0")/.."
ref_tar="$1" tests="${2:-}" ab_args="${3:-}"
out="${OUT:-/tmp/device_ab}"
mkdir -p "$out"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
ref=/tmp/device_ab_ref
rm -rf "$ref" && mkdir -p "$ref" && tar -xf "$ref_tar" -C "$ref" || exit 1
start=$(date +%s)
(cd "$ref" && MAX_JOBS=8 python3 setup.py build_ext --inplace > "$out/build_ref.log" 2>&1) &
MAX_JOBS=10 python3 setup.py build_ext --inplace > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
wait $! || { tail -30 "$out/build_ref.log"; exit 1; }
echo "builds $(( $(date +%s) - start )) s"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$tests" ]; then
  start=$(date +%s)
  eval timeout ${TEST_TIMEOUT:-600} python3 -m pytest -q -n 8 -p no:cacheprovider "$tests" > "$out/tests.log" 2>&1
  echo "tests rc $? $(( $(date +%s) - start )) s"; tail -3 "$out/tests.log"
fi
if [ -n "$ab_args" ]; then
  start=$(date +%s)
  eval python3 tools/ab.py main="$ref" new=. torch=@torch "$ab_args" --json "$out/ab.json" > "$out/ab.log" 2>&1
  echo "ab rc $? $(( $(date +%s) - start )) s"; cat "$out/ab.log"
fi
