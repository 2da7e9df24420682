"""Several threads calling the op at once, as a server does: each on its own mix of shapes, dtypes
and (on CUDA) streams, every result equal to the one the same call gives single-threaded. The op
keeps no plan cache or other shared state between calls; this guards that it stays so (and that
per-call host work such as shared-memory attributes and tensor maps is safe to run concurrently)."""
import contextlib
import threading

import pytest
import torch

from conftest import Case, make_inputs, ours

# one shape per kernel family, small: the tensor-core GEMM (merged, pipelined, warp tiles, runs of
# taps), grad_weight's tiles, depthwise and direct
SHAPES = [
    Case(2, 64, 64, 3, 4500, padding=1),
    Case(4, 64, 2, 16, 2000, stride=8, padding=4),
    Case(2, 40, 36, 64, 300, padding=20),
    Case(2, 24, 40, 7, 129, stride=3, padding=2, dilation=2, output_padding=1),
    Case(2, 16, 16, 5, 300, padding=2, groups=16),
    Case(1, 3, 2, 130, 20, stride=2, padding=3),
]
THREADS = 8
ROUNDS = 3  # each thread's calls again and again: more chances for two threads to meet in one kernel's host setup


def _work(device):
    """(case, dtype, inputs) for every thread: each its own order of the shapes and dtypes."""
    dtypes = [torch.float32, torch.bfloat16] if device == "cuda" else [torch.float32, torch.float64]
    generator = torch.Generator().manual_seed(0)
    work = []
    for thread in range(THREADS):
        calls = [(case, dtypes[(i + thread) % len(dtypes)]) for i, case in enumerate(SHAPES)]
        calls = calls[thread % len(calls):] + calls[:thread % len(calls)]
        work.append([(case, dtype, make_inputs(case, dtype, device, generator=generator)) for case, dtype in calls])
    return work


def _run(calls, stream=None):
    """forward and the three gradients of each call (on `stream`, CUDA)"""
    results = []
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for case, dtype, (x, w, b) in calls:
            inputs = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
            y = ours(inputs[0], inputs[1], inputs[2] if b is not None else None, case)
            grads = torch.autograd.grad(y, inputs, torch.ones_like(y))
            results.append([y.detach()] + [g.detach() for g in grads])
    if stream is not None:
        stream.synchronize()
    return results


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_threads_at_once_match_one_thread(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    work = _work(device)
    expected = [_run(calls) for calls in work]
    got = [None] * THREADS
    errors = []

    def thread_main(index):
        try:
            stream = torch.cuda.Stream() if device == "cuda" else None
            got[index] = [_run(work[index], stream) for _ in range(ROUNDS)]
        except Exception as error:  # reported below, with the thread
            errors.append((index, error))

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for index in range(THREADS):
        for round_results in got[index]:
            for call, (want, have) in enumerate(zip(expected[index], round_results)):
                for a, b in zip(want, have):
                    assert torch.equal(a, b), (index, work[index][call][0], work[index][call][1])
