"""Distributed training with the op (issue 32): DDP and FSDP2 against one process on the whole batch,
and DTensor's sharding strategies (torch_convt_op/distributed.py) against the unsharded op.

Each test runs WORLD_SIZE processes (torch.multiprocessing.spawn) joined by a process group that meets
through a file (no port to pick): gloo on the CPU; NCCL, one GPU a rank, in the tests that need 2 GPUs
(tools/device_dist.sh runs those). Rank 0 writes what it measured to a JSON file that the test reads.
"""
import dataclasses
import json
import os
import subprocess
import sys
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import torch_convt_op
from conftest import NEEDS_TWO_GPUS, relative_error
from torch_convt_op import tolerances

WORLD_SIZE = 2
HAS_GLOO = dist.is_available() and dist.is_gloo_available()
HAS_NCCL_PAIR = dist.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= 2
requires_gloo = pytest.mark.skipif(not HAS_GLOO, reason="needs torch.distributed with gloo")
requires_nccl_pair = pytest.mark.skipif(not HAS_NCCL_PAIR, reason=NEEDS_TWO_GPUS)


def report(**fields) -> None:
    """One JSON line for tools/device_dist.sh's table, appended to $CONVT_DIST_REPORT where that is set."""
    path = os.environ.get("CONVT_DIST_REPORT")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps(fields) + "\n")


# ---- registration ---------------------------------------------------------------------------------

_REGISTERED = """
import sys
import torch
from torch.distributed.tensor import DTensor
strategies = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
missing = [op for op in (torch.ops.convt.conv_transpose1d.default, torch.ops.convt.conv_transpose1d_backward.default)
           if op not in strategies]
assert not missing, missing
"""


@pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")
@pytest.mark.parametrize("first", ["torch_convt_op", "torch.distributed.tensor"])
def test_sharding_strategies_registered_in_either_import_order(first):
    """Importing the package leaves torch.distributed.tensor unimported (it takes most of a second);
    the strategies are registered whichever of the two comes first."""
    if first == "torch_convt_op":
        imports = ("import sys, torch_convt_op\n"
                   "assert 'torch.distributed.tensor' not in sys.modules\n"
                   "import torch.distributed.tensor\n")
    else:
        imports = "import torch.distributed.tensor, torch_convt_op\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the package under test
    done = subprocess.run([sys.executable, "-c", imports + _REGISTERED],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr


# ---- processes ------------------------------------------------------------------------------------

def _rank_main(rank: int, worker: Callable, backend: str, store: str, results: str, args: tuple) -> None:
    if backend == "nccl":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # the ranks share the machine's cores
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    try:
        measured = worker(rank, *args)
        # every rank's collectives done before any rank tears its group down (a rank that destroyed its
        # group while gloo still served the other's last exchange aborted: "terminate called without an
        # active exception")
        dist.barrier()
        if rank == 0:
            with open(results, "w") as file:
                json.dump(measured, file)
    finally:
        dist.destroy_process_group()
    # The rank's work is done and written: leave without the interpreter's teardown, where a gloo
    # thread still joinable when C++ static destructors run aborts the process (SIGABRT, "terminate
    # called without an active exception"; seen in CI after the barrier above too). A rank that raised
    # does not get here: spawn reports its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(worker: Callable, backend: str, directory, *args) -> Dict:
    """worker(rank, *args) on WORLD_SIZE processes in one process group; rank 0's return value.
    A rank's exception fails the caller with that rank's traceback."""
    store, results = directory / "store", directory / "results.json"
    # NVLink multicast (NVLS) off for NCCL: the machines this runs on must not depend on it
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(_rank_main, args=(worker, backend, str(store), str(results), args), nprocs=WORLD_SIZE, join=True)
    with open(results) as file:
        return json.load(file)


# ---- DDP and FSDP2 --------------------------------------------------------------------------------
# A small vocoder trained for STEPS steps of SGD with momentum on a batch of WORLD_SIZE x PER_RANK mels,
# each rank on its PER_RANK, against the same model trained in one process on the whole batch.

STEPS = 4
PER_RANK = 2
MEL_CHANNELS, FRAMES, UPSAMPLING = 8, 24, 8


def vocoder(device) -> nn.Module:
    """(N, 8, L) -> (N, 1, 8 L): weight-normed convolutions, two of them nn.ConvTranspose1d upsamplers
    converted to ours (one grouped), leaky ReLU, tanh. The same parameters in every process."""
    torch.manual_seed(0)
    model = nn.Sequential(
        weight_norm(nn.Conv1d(MEL_CHANNELS, 16, 7, padding=3)), nn.LeakyReLU(0.1),
        weight_norm(nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2)), nn.LeakyReLU(0.1),
        weight_norm(nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1, groups=2)), nn.LeakyReLU(0.1),
        weight_norm(nn.Conv1d(4, 1, 7, padding=3)), nn.Tanh())
    return torch_convt_op.ConvTranspose1d.convert(model).to(device)


def whole_batch(device):
    """Random mels and target waveforms for all ranks."""
    generator = torch.Generator().manual_seed(1)
    n = WORLD_SIZE * PER_RANK
    mel = torch.randn(n, MEL_CHANNELS, FRAMES, generator=generator)
    target = torch.rand(n, 1, FRAMES * UPSAMPLING, generator=generator) * 2 - 1
    return mel.to(device), target.to(device)


def train(model: nn.Module, mel: torch.Tensor, target: torch.Tensor, master: nn.Module = None) -> None:
    """STEPS steps on the mean squared error over the batch. With `master` (a float32 copy of a
    lower-precision `model`), the optimizer steps master's parameters with model's gradients in float32
    and copies them back rounded, as FSDP2's mixed precision does."""
    stepped = master if master is not None else model
    optimizer = torch.optim.SGD(stepped.parameters(), lr=0.05, momentum=0.9)
    for _ in range(STEPS):
        model.zero_grad()
        optimizer.zero_grad()
        loss = F.mse_loss(model(mel).float(), target)
        loss.backward()
        if master is not None:
            for low, high in zip(model.parameters(), master.parameters()):
                high.grad = low.grad.float()
        optimizer.step()
        if master is not None:
            with torch.no_grad():
                for low, high in zip(model.parameters(), master.parameters()):
                    low.copy_(high)


def parameter_differences(trained: Dict[str, torch.Tensor], reference: nn.Module, initial: nn.Module) -> Dict:
    """Per parameter: max |trained - reference| and how far training moved it (max |reference - initial|)."""
    moved = dict(initial.named_parameters())
    return {name: {"max_diff": (trained[name].float() - p.float()).abs().max().item(),
                   "moved": (p.float() - moved[name].float()).abs().max().item()}
            for name, p in reference.named_parameters()}


def _train_ddp(rank: int, device_type: str) -> Dict:
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # CUDA: strict float32
    mel, target = whole_batch(device)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    model = nn.parallel.DistributedDataParallel(vocoder(device), device_ids=[rank] if device_type == "cuda" else None)
    train(model, mel[mine], target[mine])
    trained = {name: p.detach() for name, p in model.module.named_parameters()}
    # every rank holds the same parameters, bit for bit
    gathered = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, {name: p.cpu() for name, p in trained.items()})
    same_on_every_rank = all(torch.equal(g[name], trained[name].cpu()) for g in gathered for name in trained)
    if rank != 0:
        return {}
    reference = vocoder(device)
    train(reference, mel, target)
    return {"parameters": parameter_differences(trained, reference, vocoder(device)),
            "same_on_every_rank": same_on_every_rank}


def _train_fsdp2(rank: int, device_type: str) -> Dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    mel, target = whole_batch(device)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    model = vocoder(device)
    mesh = init_device_mesh(device_type, (WORLD_SIZE,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    train(model, mel[mine], target[mine])
    trained = {name: p.full_tensor().detach() for name, p in model.named_parameters()}
    if rank != 0:
        return {}
    master = vocoder(device)
    train(vocoder(device).to(torch.bfloat16), mel.to(torch.bfloat16), target, master=master)
    return {"parameters": parameter_differences(trained, master, vocoder(device))}


def assert_parameters_match(result: Dict, tolerance: float, case: str, backend: str) -> None:
    """Each parameter within `tolerance` of the reference, relative to how far training moved it."""
    errors = {name: d["max_diff"] / d["moved"] for name, d in result["parameters"].items()}
    worst = max(errors, key=errors.get)
    max_diff = max(d["max_diff"] for d in result["parameters"].values())
    report(kind="training", case=case, backend=backend, max_param_diff=max_diff, worst=worst,
           relative=errors[worst], tolerance=tolerance, passed=errors[worst] <= tolerance)
    assert errors[worst] <= tolerance, (f"{worst}: max |difference| / max |update| = {errors[worst]:.3g} > "
                                        f"{tolerance:.3g}")


# Where the two runs may differ: each rank's gradients sum over its half of the batch and the all-reduce
# adds the halves, where the single run sums over the whole batch in one reduction (and divides the loss
# by the whole batch's size once). Each is within float32's accumulation bound of the exact gradient
# (tolerances.float32_accumulation), the longest reduction being the loss's mean and the last Conv1d's
# grad_weight, over every output position of the whole batch. Momentum SGD turns each step's gradient
# into an update the same way in both runs, so the updates differ by at most that much relative to their
# size: twice (both runs), for each of the model's 4 layers that a rounding error passes through (with a
# gain of about 1: weight norm, leaky ReLU, tanh).
_LONGEST_REDUCTION = WORLD_SIZE * PER_RANK * FRAMES * UPSAMPLING
_ROUNDED_STAGES = 2 * 4
FLOAT32_TRAINING = _ROUNDED_STAGES * tolerances.float32_accumulation(_LONGEST_REDUCTION)  # 1.1e-4
# FSDP2 with bfloat16 parameters and activations (param_dtype), float32 gradient reduction: the same, plus
# bfloat16's unit roundoff where each stage rounds (each rank's gradients, or the whole batch's)
BFLOAT16_TRAINING = _ROUNDED_STAGES * (tolerances.BFLOAT16_UNIT + tolerances.float32_accumulation(_LONGEST_REDUCTION))


# (backend, device type): gloo on the CPU, in CI; NCCL on 2 GPUs, in tools/device_dist.sh
BACKENDS = [pytest.param(("gloo", "cpu"), marks=requires_gloo, id="gloo-cpu"),
            pytest.param(("nccl", "cuda"), marks=requires_nccl_pair, id="nccl-2gpus")]


def _backend_name(backend: str) -> str:
    return "gloo (CPU)" if backend == "gloo" else f"nccl ({WORLD_SIZE} GPUs)"


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddp_matches_one_process_on_the_whole_batch(tmp_path, backend):
    result = run_ranks(_train_ddp, backend[0], tmp_path, backend[1])
    assert result["same_on_every_rank"]
    assert_parameters_match(result, FLOAT32_TRAINING, "DDP, float32", _backend_name(backend[0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fsdp2_mixed_precision_matches_one_process_on_the_whole_batch(tmp_path, backend):
    result = run_ranks(_train_fsdp2, backend[0], tmp_path, backend[1])
    assert_parameters_match(result, BFLOAT16_TRAINING, "FSDP2, bf16 params, fp32 reduce", _backend_name(backend[0]))


# ---- DTensor ----------------------------------------------------------------------------------------
# Each case: the op's inputs distributed with the placements of one strategy row (or of none), the
# forward and its gradients (through autograd, so the backward op's rows too) against the op on the
# whole tensors, in float64, and the collectives that ran while the op and the gradients were computed.

@dataclasses.dataclass(frozen=True)
class Sharded:
    """Placements ("R", "P" (Partial sum), "S<dim>") of input, weight, bias (None: no bias) and grad_output;
    the output's and the gradients' that the strategy rows give, or None where no row applies (DTensor
    must redistribute); the batch (None: an unbatched input), groups, and the tensors whose gradients
    autograd computes (the backward op's output_mask)."""
    input: str
    weight: str
    bias: Optional[str]
    grad_output: str
    output: Optional[str]
    grads: Optional[Tuple[str, ...]]
    n: Optional[int] = 4
    groups: int = 1
    wants: Tuple[str, ...] = ("input", "weight", "bias")


DTENSOR_CASES = {
    "batch": Sharded("S0", "R", "R", "S0", "S0", ("S0", "P", "P")),
    "batch, groups 2": Sharded("S0", "R", "R", "S0", "S0", ("S0", "P", "P"), groups=2),
    "batch, grad_weight only": Sharded("S0", "R", "R", "S0", "S0", ("P",), wants=("weight",)),
    "input channels": Sharded("S1", "S0", "R", "R", "P", ("S1", "S0", "R")),
    "input channels, no bias": Sharded("S1", "S0", None, "R", "P", ("S1", "S0")),
    "input channels, unbatched": Sharded("S0", "S0", "R", "R", "P", ("S0", "S0", "R"), n=None),
    "output channels": Sharded("R", "S1", "S0", "S1", "S1", ("P", "S1", "S0")),
    "output channels, unbatched": Sharded("R", "S1", "S0", "S0", "S0", ("P", "S1", "S0"), n=None),
    # no row applies: DTensor redistributes, and the results are the same
    "length (halos)": Sharded("S2", "R", "R", "S2", None, None),
    "input channels, groups 2": Sharded("S1", "S0", "R", "R", None, None, groups=2),
}
C_IN, C_OUT, K, L_IN, STRIDE, PADDING, OUTPUT_PADDING, DILATION = 8, 6, 4, 13, 2, 1, 1, 1


def _placement(name: str):
    from torch.distributed.tensor import Partial, Replicate, Shard
    return {"R": Replicate(), "P": Partial()}.get(name) or Shard(int(name[1:]))


def _conv_args(groups: int, stride: int = STRIDE):
    return [stride], [PADDING], [OUTPUT_PADDING], groups, [DILATION]


def _dtensor_case(mesh, case: Sharded) -> Dict:
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    generator = torch.Generator().manual_seed(2)

    def randn(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    x = randn(*([case.n] if case.n is not None else []), C_IN, L_IN)
    w = randn(C_IN, C_OUT // case.groups, K)
    b = randn(C_OUT) if case.bias is not None else None
    args = _conv_args(case.groups)
    y = torch.ops.convt.conv_transpose1d(x, w, b, *args)
    grad_y = randn(*y.shape)

    def gradients(x, w, b, y_of, grad_y):
        inputs = {"input": x, "weight": w, "bias": b}
        wanted = [inputs[name].requires_grad_() for name in case.wants if inputs[name] is not None]
        y = y_of(x, w, b)
        return y, torch.autograd.grad(y, wanted, grad_y)

    expected_y, expected_grads = gradients(x, w, b, lambda x, w, b: torch.ops.convt.conv_transpose1d(x, w, b, *args),
                                           grad_y)

    def distribute(t, placement):
        return distribute_tensor(t, mesh, [_placement(placement)]) if t is not None else None

    dx, dw, db = distribute(x, case.input), distribute(w, case.weight), distribute(b, case.bias)
    d_grad_y = distribute(grad_y, case.grad_output)
    forward_comms, backward_comms = CommDebugMode(), CommDebugMode()

    def sharded_forward(x, w, b):
        with forward_comms:
            return torch.ops.convt.conv_transpose1d(x, w, b, *args)

    with backward_comms:  # (the forward's collectives too: subtracted below)
        dy, grads = gradients(dx, dw, db, sharded_forward, d_grad_y)
    forward = forward_comms.get_comm_counts()
    backward = {str(op): n - forward.get(op, 0) for op, n in backward_comms.get_comm_counts().items()}
    return {"output": str(dy.placements[0]),
            "grads": [str(g.placements[0]) for g in grads],
            "forward_comms": {str(op): n for op, n in forward.items()},
            "backward_comms": {op: n for op, n in backward.items() if n},
            "errors": {what: relative_error(actual.full_tensor(), wanted)
                       for what, actual, wanted in zip(["output", *(f"grad_{name}" for name in case.wants)],
                                                       [dy, *grads], [expected_y, *expected_grads])}}


def _stride_after_stride(mesh) -> Dict:
    """The same DTensors with stride 2, then 3: the output shapes of both (DTensor caches a sharding
    decision, output shape included, by the arguments it is told matter)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    x = distribute_tensor(torch.randn(4, C_IN, L_IN, dtype=torch.float64), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(C_IN, C_OUT, K, dtype=torch.float64), mesh, [Replicate()])
    shapes = {}
    for stride in (2, 3):
        y = torch.ops.convt.conv_transpose1d(x, w, None, *_conv_args(1, stride))
        expected = torch.ops.convt.conv_transpose1d(x.full_tensor(), w.full_tensor(), None, *_conv_args(1, stride))
        shapes[stride] = {"dtensor": list(y.shape), "local": list(y.to_local().shape),
                          "expected": list(expected.shape)}
    return shapes


def _dtensor_cases(rank: int) -> Dict:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (WORLD_SIZE,))
    results = {name: _dtensor_case(mesh, case) for name, case in DTENSOR_CASES.items()}
    results["stride after stride"] = _stride_after_stride(mesh)
    return results


@pytest.fixture(scope="module")
def dtensor_results(tmp_path_factory):
    """Every DTENSOR_CASES case's measurements, from one pair of processes."""
    return run_ranks(_dtensor_cases, "gloo", tmp_path_factory.mktemp("dtensor"))


@requires_gloo
@pytest.mark.parametrize("name", DTENSOR_CASES)
def test_dtensor_matches_the_unsharded_op(dtensor_results, name):
    case, result = DTENSOR_CASES[name], dtensor_results[name]
    problems = [f"{what}: relative error {error:.3g}" for what, error in result["errors"].items()
                if not error <= tolerances.FLOAT64_TOLERANCE]
    if case.output is None:  # no strategy row: DTensor gathers what it needs
        if not result["forward_comms"]:
            problems.append("no collective, where a redistribution was expected")
    else:  # a strategy row: its placements, and no collective in the forward or the backward
        if result["output"] != str(_placement(case.output)):
            problems.append(f"output {result['output']}, not {case.output}")
        if result["grads"] != [str(_placement(p)) for p in case.grads]:
            problems.append(f"gradients {result['grads']}, not {list(case.grads)}")
        if result["forward_comms"] or result["backward_comms"]:
            problems.append(f"collectives: forward {result['forward_comms']}, backward {result['backward_comms']}")
    report(kind="dtensor", case=name, output=result["output"], grads=result["grads"],
           forward_comms=result["forward_comms"], backward_comms=result["backward_comms"],
           max_error=max(result["errors"].values()), passed=not problems)
    assert not problems, problems


@requires_gloo
def test_dtensor_cache_keys_stride(dtensor_results):
    """A second call that differs only in stride gets its own output shape (register_sharding alone would
    reuse the first call's: torch_convt_op/distributed.py's register)."""
    for stride, shapes in dtensor_results["stride after stride"].items():
        local_length = shapes["local"][2]
        assert shapes["dtensor"] == shapes["expected"] and local_length == shapes["expected"][2], (stride, shapes)
