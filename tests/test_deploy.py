"""The ways users ship the op: AOTInductor packages (loaded by a fresh Python process and by the C++
runner examples/aoti_runner), CUDA graphs (torch.compile's "reduce-overhead" mode after an nn.Linear,
the wrong-stream bug class), and the HiFi-GAN example with the module swap."""
import contextlib
import copy
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Optional, Sequence, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import torch_convt_op
from conftest import DEVICES, assert_close, relative_error, requires_cuda, tf32_enabled, tolerance
from torch_convt_op import tolerances

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


class LinearThenUpsample(nn.Module):
    """(N, L, features) -> nn.Linear -> (N, C, L) -> our ConvTranspose1d -> tanh."""

    def __init__(self, features: int = 12, channels: int = 16):
        super().__init__()
        self.linear = nn.Linear(features, channels)
        self.upsample = torch_convt_op.ConvTranspose1d(channels, 8, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.upsample(self.linear(x).transpose(1, 2)))


# the most products summed into one output along LinearThenUpsample: 12 features in the linear layer, then
# 16 channels x 2 taps (K 4, stride 2: two taps a phase) and the bias in the upsampler
REDUCTION = 12 + 16 * 2 + 1


def _float64_twin(model: nn.Module) -> nn.Module:
    """The same model in float64 (the reference)."""
    return copy.deepcopy(model).double()


def _double_inputs(device, n=2, length=37, features=12):
    return torch.randn(n, length, features, dtype=torch.float64).to(device=device, dtype=torch.float32)


# ---- AOTInductor packages, loaded in a fresh process as a server would ----------------------------
# Where torch's AOTInductor loader dies on a signal on any package (issue 33: torch 2.11.0+cu130 with
# Ubuntu 24.04's g++ 13.3 loads a libstdc++ that the package's C++ clashes with), a plain control
# package (nn.Linear + ReLU) tells an environment fault from one of ours, and preloading the system
# compiler's libstdc++ (README.md's known issue) works around it. run_surviving_loader_faults does that
# for the Python loader and for the C++ runner alike.

def system_libstdcxx() -> Optional[str]:
    """The system compiler's libstdc++ (`g++ -print-file-name=libstdc++.so.6`), or None without one."""
    try:
        found = subprocess.run(["g++", "-print-file-name=libstdc++.so.6"], capture_output=True, text=True,
                               timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return found if os.path.isabs(found) and os.path.exists(found) else None  # (g++ echoes the bare name if none)


def died_on_a_signal(done: subprocess.CompletedProcess) -> bool:
    # a negative code: killed by that signal; 128 + N: a shell in between reported it so
    return done.returncode < 0 or done.returncode > 128


def _signal_name(done: subprocess.CompletedProcess) -> str:
    number = -done.returncode if done.returncode < 0 else done.returncode - 128
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclasses.dataclass
class Survived:
    """The run of ours that counts, and the LD_PRELOAD it needed (None: none)."""
    done: subprocess.CompletedProcess
    preload: Optional[str] = None

    def check(self, what: str) -> None:
        assert self.done.returncode == 0, (
            f"{what} failed (exit code {self.done.returncode}"
            f"{', LD_PRELOAD=' + self.preload if self.preload else ''}):\n{self.done.stderr[-3000:]}")


def run_surviving_loader_faults(ours: Callable[[dict], subprocess.CompletedProcess],
                                control: Callable[[dict], subprocess.CompletedProcess],
                                preload: Callable[[], Optional[str]] = system_libstdcxx) -> Survived:
    """Runs ours(env) (a process that loads our package; env: variables to add). If it dies on a signal:
    control(env), the same process on the control package, tells whether the loader dies on any package.
    If the control package loads, the fault is ours (the crash is returned, for the test to fail on);
    if it dies too, ours is run again with the system's libstdc++ preloaded. Skips only where the
    control package dies both with and without the preload (or no g++ names a libstdc++ to preload)."""
    done = ours({})
    if not died_on_a_signal(done):
        return Survived(done)
    plain_control = control({})
    if not died_on_a_signal(plain_control):
        return Survived(done)  # a package without our op loads: our package's crash is ours
    library = preload()
    if library is None:
        pytest.skip(f"this torch's AOTInductor loader dies ({_signal_name(plain_control)}) on a package without our "
                    "op too, and no g++ names a system libstdc++ to preload (README.md's known issue)")
    env = {"LD_PRELOAD": ":".join(filter(None, [library, os.environ.get("LD_PRELOAD")]))}
    again = ours(env)
    if again.returncode != 0 and control(env).returncode != 0:
        pytest.skip(f"this torch's AOTInductor loader dies ({_signal_name(plain_control)}) on a package without our "
                    f"op too, with and without LD_PRELOAD={library}")
    return Survived(again, env["LD_PRELOAD"])


# s: loading a small package and running it twice takes seconds; one that hangs counts as dead
SERVER_TIMEOUT = float(os.environ.get("CONVT_SERVER_TIMEOUT", 60))


def run_server(command: List[str], env: dict) -> subprocess.CompletedProcess:
    """Runs a server to its end, its output in files: a server that dies can leave children (Inductor's
    compile workers) holding inherited pipes open, which a read of pipes would wait for. It gets its own
    session, killed whole once it ends or when it outlives SERVER_TIMEOUT (then its exit code is
    -SIGKILL: a death like any other, so the control and the preload are tried as for a crash)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True)
        hung = False
        try:
            returncode = process.wait(timeout=SERVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            hung, returncode = True, -signal.SIGKILL
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        err.seek(0)
        stderr = err.read() + (f"\n(hung: killed after {SERVER_TIMEOUT} s)" if hung else "")
        done = subprocess.CompletedProcess(command, returncode, out.read(), stderr)
    # at once, so that a run stopped later still shows how each server ended
    report(kind="server", server=os.path.basename(command[0]), package=_package_name(command),
           preload=env.get("LD_PRELOAD"), returncode=returncode, hung=hung,
           seconds=round(time.perf_counter() - start, 1), timings=_timings(done), stderr_tail=stderr[-1500:])
    return done


def _package_name(command: List[str]) -> str:
    """The .pt2 a server command names (its file name), or '?'."""
    return next((os.path.basename(arg) for arg in command if arg.endswith(".pt2")), "?")


def _subprocess_env(extra: dict) -> dict:
    # PYTHONPATH: the test's own (the package under test, in tree or installed)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **extra}


# Loads an AOTInductor package in a fresh process (as a server would) and runs it on saved inputs.
# Python's tracebacks go to stderr if it dies on a signal or hangs (shortly before SERVER_TIMEOUT).
_LOAD_AND_RUN = """
import faulthandler, sys, time
sys.stdout.reconfigure(line_buffering=True)  # (each line on disk at once: a killed server's last stage shows)
faulthandler.enable()
faulthandler.dump_traceback_later(float(sys.argv[5]))
import torch, torch_convt_op
package, device, inputs, outputs = sys.argv[1:5]
xs = [x.to(device) for x in torch.load(inputs)]
print(f"inputs on {device}")
start = time.perf_counter()
loaded = torch._inductor.aoti_load_package(package)
print(f"loaded in {(time.perf_counter() - start) * 1e3:.1f} ms")
results = []
with torch.no_grad():
    for i, x in enumerate(xs):
        start = time.perf_counter()
        y = loaded(x)
        if y.is_cuda:
            torch.cuda.synchronize(y.device)
        print(f"run {i}: {(time.perf_counter() - start) * 1e3:.3f} ms")
        results.append(y.cpu())
torch.save(results, outputs)
"""


def python_server(package: pathlib.Path, device: str, inputs: pathlib.Path, outputs: pathlib.Path):
    """A function of env that loads and runs `package` in a fresh Python process."""
    def run(env: dict) -> subprocess.CompletedProcess:
        outputs.unlink(missing_ok=True)
        return run_server([sys.executable, "-c", _LOAD_AND_RUN, str(package), device, str(inputs), str(outputs),
                           str(max(1.0, SERVER_TIMEOUT - 10))], _subprocess_env(env))
    return run


def _python_control(packages: "Packages", device: str, directory: pathlib.Path):
    """python_server on the control package."""
    def run(env: dict) -> subprocess.CompletedProcess:
        return packages.run_control("python", device, env, lambda package, inputs: python_server(
            package, device, inputs, directory / "control_outputs.pt")(env))
    return run


def _timings(done: subprocess.CompletedProcess) -> str:
    """The "loaded in ..." and "run i: ..." lines of a server's output, on one line."""
    return "; ".join(line for line in done.stdout.splitlines() if line.startswith(("loaded", "run ")))


def report(**fields) -> None:
    """One JSON line for tools/device_aoti.sh's table, appended to $CONVT_AOTI_REPORT where that is set."""
    path = os.environ.get("CONVT_AOTI_REPORT")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps(fields) + "\n")


def _control_model(device: str) -> Tuple[nn.Module, List[torch.Tensor]]:
    """The control: nn.Linear + ReLU, no op of ours."""
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).to(device).eval()
    return model, [torch.randn(2, 37, 16)]


class Vocoder(nn.Module):
    """A small HiFi-GAN-like generator, (N, 16, L) -> (N, 1, 8 L): weight-normed convolutions, two of them
    nn.ConvTranspose1d upsamplers (converted to ours by make_vocoder), leaky ReLU, tanh."""

    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(16, 32, 7, padding=3))
        self.ups = nn.ModuleList([weight_norm(nn.ConvTranspose1d(32, 16, 8, stride=4, padding=2)),
                                  weight_norm(nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1))])
        self.post = weight_norm(nn.Conv1d(8, 1, 7, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for up in self.ups:
            x = up(F.leaky_relu(x, 0.1))
        return torch.tanh(self.post(F.leaky_relu(x, 0.1)))

    def bound(self, dtype: torch.dtype, device: str) -> float:
        """How far (max |difference| / max |eager output|) a packaged run may be from the eager run of the
        same model in `dtype`. Both run the same ops on the same values; they differ only where they
        round intermediate results (Inductor fuses weight norm and the activations, keeping their
        intermediates in float32 where eager rounds each op's output to `dtype`) and, on CUDA, in the
        algorithm cuDNN picks for the nn.Conv1d layers. Each stage where either rounds is within its
        tolerance (torch_convt_op/tolerances.py) of exact, relative to its result's scale: each weight
        norm (a norm over C_out/groups x K (ours) or C_in/groups x K elements), each convolution (its
        reduction length; TF32 where float32 on CUDA allows it) and each activation. Through layers of
        gain about 1 (weight norm) or at most 1 (leaky ReLU, tanh) these add up, so each run is within
        their sum of the exact result, and the two runs within twice that."""
        tf32 = dtype == torch.float32 and device.startswith("cuda") and tf32_enabled()
        stages = []
        for layer in [self.pre, *self.ups, self.post]:
            weight = layer.weight
            transposed = isinstance(layer, nn.ConvTranspose1d)
            taps = (tolerances.taps_per_phase(layer.kernel_size[0], layer.stride[0], layer.padding[0],
                                              layer.dilation[0]) if transposed else layer.kernel_size[0])
            c_in = layer.in_channels // layer.groups
            stages.append(tolerances.tolerance(dtype, weight[0].numel()))  # the weight norm
            stages.append(tolerances.tolerance(dtype, c_in * taps + 1, tf32))  # the convolution and bias
            stages.append(tolerances.tolerance(dtype, 1))  # leaky ReLU or tanh
        return 2 * sum(stages)


def make_vocoder(device: str, dtype: torch.dtype) -> Vocoder:
    """A Vocoder with its nn.ConvTranspose1d layers converted to ours, magnitudes of weight norm that
    differ from the norms of the directions, in `dtype` on `device`, eval mode."""
    model = torch_convt_op.ConvTranspose1d.convert(Vocoder())
    assert sum(type(m).__name__ == "ParametrizedConvTranspose1d" and isinstance(m, torch_convt_op.ConvTranspose1d)
               for m in model.modules()) == 2
    with torch.no_grad():
        for layer in [model.pre, *model.ups, model.post]:
            magnitude = layer.parametrizations.weight.original0
            magnitude.mul_(torch.rand_like(magnitude) + 0.5)
    return model.to(device, dtype).eval()


def _vocoder_inputs(dtype: torch.dtype) -> List[torch.Tensor]:
    """Random mels of lengths other than the one exported (the length is a dynamic dimension)."""
    return [torch.randn(2, 16, length, dtype=torch.float64).to(dtype) for length in (37, 101)]


class Packages:
    """AOTInductor packages built once per module (an Inductor compile takes 20-40 s on the CPU): the
    Vocoder's by device and dtype, with its model, and the control package by device (and its runs)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.built = {}
        self.control_runs = {}

    def _package(self, name: str, model: nn.Module, example: torch.Tensor, dynamic_shapes=None) -> pathlib.Path:
        start = time.perf_counter()
        program = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes)
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(self.root / f"{name}.pt2"))
        report(kind="compile", case=name, seconds=round(time.perf_counter() - start, 1))
        return pathlib.Path(path)

    def vocoder(self, device: str, dtype: torch.dtype) -> Tuple[Vocoder, pathlib.Path]:
        key = ("vocoder", device, dtype)
        if key not in self.built:
            torch.manual_seed(33)
            model = make_vocoder(device, dtype)
            example = torch.randn(2, 16, 50).to(device, dtype)
            length = torch.export.Dim("length", min=2, max=1 << 16)
            name = f"vocoder_{device}_{str(dtype).removeprefix('torch.')}"
            self.built[key] = model, self._package(name, model, example, {"x": {2: length}})
        return self.built[key]

    def control(self, device: str) -> Tuple[pathlib.Path, pathlib.Path]:
        """(the control package for `device`, a file of its inputs)"""
        key = ("control", device)
        if key not in self.built:
            model, inputs = _control_model(device)
            package = self._package(f"control_{device}", model, inputs[0].to(device))
            torch.save(inputs, self.root / f"control_{device}_inputs.pt")
            self.built[key] = package, self.root / f"control_{device}_inputs.pt"
        return self.built[key]

    def run_control(self, server: str, device: str, env: dict,
                    run: Callable[[pathlib.Path, pathlib.Path], subprocess.CompletedProcess]):
        """run(control package, its inputs) once per server, device and environment: whether the loader dies
        is the machine's, the same for every test."""
        key = (server, device, tuple(sorted(env.items())))
        if key not in self.control_runs:
            self.control_runs[key] = run(*self.control(device))
        return self.control_runs[key]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return Packages(tmp_path_factory.mktemp("aoti"))


def _check_against_eager(case: str, survived: Survived, actual: Sequence[torch.Tensor], model: Vocoder,
                         inputs: Sequence[torch.Tensor], device: str, dtype: torch.dtype) -> None:
    """Each packaged output against the eager model's on the same input, within model.bound; one report line."""
    bound = model.bound(dtype, device)
    with torch.no_grad():
        expected = [model(x.to(device)).cpu() for x in inputs]
    assert len(actual) == len(expected)
    shapes_match = all(a.shape == e.shape and a.dtype == e.dtype for a, e in zip(actual, expected))
    diffs = [(a.double() - e.double()).abs().max().item() if shapes_match else math.inf
             for a, e in zip(actual, expected)]
    errors = [d / e.double().abs().max().item() for d, e in zip(diffs, expected)]
    passed = shapes_match and all(torch.isfinite(a).all() for a in actual) and max(errors) <= bound
    report(kind="check", case=case, device=device, dtype=str(dtype).removeprefix("torch."), max_abs_diff=max(diffs),
           relative=max(errors), bound=bound, passed=bool(passed), preload=survived.preload,
           timings=_timings(survived.done))
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        assert torch.isfinite(a).all()
    assert max(errors) <= bound, f"{case}: max |packaged - eager| / max |eager| {max(errors):.3g} > {bound:.3g}"


VOCODER_DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", VOCODER_DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_aoti_vocoder_in_a_fresh_process(device, dtype, packages, tmp_path):
    """The Vocoder (our op in weight-normed, converted layers; a dynamic length), exported, packaged for
    `device`, then loaded and run by a fresh Python process, as a server would: the eager model's output."""
    model, package = packages.vocoder(device, dtype)
    inputs = _vocoder_inputs(dtype)
    torch.save(inputs, tmp_path / "inputs.pt")
    survived = run_surviving_loader_faults(python_server(package, device, tmp_path / "inputs.pt",
                                                         tmp_path / "outputs.pt"),
                                           _python_control(packages, device, tmp_path))
    survived.check("loading the package in a fresh Python process")
    _check_against_eager("python aoti_load_package", survived, torch.load(tmp_path / "outputs.pt"), model, inputs,
                         device, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_aot_inductor_package_gives_the_same_output(device, packages, tmp_path):
    """An nn.Linear before our op, packaged and run in a fresh process: the float64 model's output."""
    model = LinearThenUpsample().to(device).eval()
    inputs = [_double_inputs("cpu"), _double_inputs("cpu")]  # fresh data through the same package
    torch.save(inputs, tmp_path / "inputs.pt")
    program = torch.export.export(model, (inputs[0].to(device),))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "model.pt2"))
    survived = run_surviving_loader_faults(python_server(package, device, tmp_path / "inputs.pt",
                                                         tmp_path / "outputs.pt"),
                                           _python_control(packages, device, tmp_path))
    survived.check("loading the package in a fresh Python process")
    outputs = torch.load(tmp_path / "outputs.pt")
    with torch.no_grad():
        expected = [_float64_twin(model)(x.double().to(device)).cpu() for x in inputs]
    bound = tolerance(torch.float32, device, REDUCTION)
    errors = [relative_error(a, e) if a.shape == e.shape else math.inf for a, e in zip(outputs, expected)]
    report(kind="check", case="python nn.Linear model (vs float64)", device=device, dtype="float32",
           max_abs_diff=max((a - e).abs().max().item() if a.shape == e.shape else math.inf
                            for a, e in zip(outputs, expected)),
           relative=max(errors), bound=bound, passed=max(errors) <= bound, preload=survived.preload,
           timings=_timings(survived.done))
    for actual, wanted in zip(outputs, expected):
        assert torch.isfinite(actual).all()
        assert_close(actual, wanted, torch.float32, device, reduction=REDUCTION)


def test_run_server_returns_when_a_server_dies_or_hangs(monkeypatch):
    """A server that dies leaving a child behind returns at once, with its output; one that hangs is
    killed, with its whole session, at SERVER_TIMEOUT and reads as killed by SIGKILL."""
    monkeypatch.setattr(sys.modules[__name__], "SERVER_TIMEOUT", 3.0)
    orphan = "import os, signal, subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])"
    start = time.perf_counter()
    died = run_server([sys.executable, "-c", orphan + "; print('serving', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"],
                      dict(os.environ))
    assert died.returncode == -signal.SIGSEGV and died.stdout == "serving\n"
    assert time.perf_counter() - start < 2.5, "waited for the orphan that held the server's output"
    hung = run_server([sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(30)"],
                      dict(os.environ))
    assert hung.returncode == -signal.SIGKILL and died_on_a_signal(hung)
    assert hung.stdout == "loading\n" and "hung: killed after 3.0 s" in hung.stderr
    assert time.perf_counter() - start < 12


def _fake_server(crashes_without_preload: bool, crashes_with_preload: bool):
    """A process that dies on SIGSEGV (or not) depending on whether LD_PRELOAD is set."""
    def run(env):
        crash = crashes_with_preload if "LD_PRELOAD" in env else crashes_without_preload
        script = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)" if crash else "print('loaded')"
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})
    return run


def test_aoti_loader_fault_handling():
    """run_surviving_loader_faults' decisions, on processes that crash on cue (no package, no torch)."""
    library = system_libstdcxx()
    if library is None:
        pytest.skip("no g++ names a system libstdc++")
    works, environment_fault, fixed_by_preload = (_fake_server(False, False), _fake_server(True, True),
                                                  _fake_server(True, False))
    assert run_surviving_loader_faults(works, environment_fault).preload is None  # plain load works: no control run
    ours_crashes = run_surviving_loader_faults(environment_fault, works)  # the control loads: our fault, no retry
    assert died_on_a_signal(ours_crashes.done) and ours_crashes.preload is None
    fixed = run_surviving_loader_faults(fixed_by_preload, fixed_by_preload)  # environment fault, preload fixes it
    assert fixed.done.returncode == 0 and fixed.preload.split(":")[0] == library
    still = run_surviving_loader_faults(environment_fault, fixed_by_preload)  # the preload fixes the control only
    assert died_on_a_signal(still.done) and still.preload is not None
    with pytest.raises(pytest.skip.Exception, match="with and without LD_PRELOAD"):
        run_surviving_loader_faults(environment_fault, environment_fault)
    with pytest.raises(pytest.skip.Exception, match="no g.. names"):
        run_surviving_loader_faults(environment_fault, environment_fault, preload=lambda: None)


# ---- the C++ runner (examples/aoti_runner) --------------------------------------------------------

def _gxx_command(compiler: str, source: pathlib.Path, executable: pathlib.Path) -> List[str]:
    """The runner built by one compiler command, without CMake (README.md's "Deploying" shows it)."""
    torch_dir = pathlib.Path(torch.__file__).parent
    libraries = ["torch", "torch_cpu", "c10"] + [name for name in ("torch_cuda", "c10_cuda")
                                                  if (torch_dir / "lib" / f"lib{name}.so").exists()]
    return [compiler, "-std=c++20", "-O2", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
            f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}", str(source),
            "-o", str(executable), f"-L{torch_dir / 'lib'}", f"-Wl,-rpath,{torch_dir / 'lib'}", "-Wl,--no-as-needed",
            *[f"-l{name}" for name in libraries], "-Wl,--as-needed", "-ldl"]


@pytest.fixture(scope="module")
def aoti_runner(tmp_path_factory) -> pathlib.Path:
    """examples/aoti_runner built against this torch: with CMake where cmake is (README.md's commands),
    else (or where CMake fails, or CONVT_RUNNER_BUILD=g++) with one g++ command."""
    source, build = EXAMPLES / "aoti_runner", tmp_path_factory.mktemp("aoti_runner")
    failures = []
    start = time.perf_counter()
    cmake = shutil.which("cmake")
    if cmake and os.environ.get("CONVT_RUNNER_BUILD", "cmake") == "cmake":
        steps = [[cmake, "-S", str(source), "-B", str(build / "cmake"), "-DCMAKE_BUILD_TYPE=Release",
                  f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"],
                 [cmake, "--build", str(build / "cmake")]]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                failures.append(f"$ {' '.join(step)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
                break
        else:
            report(kind="build", case="aoti_runner (cmake)", seconds=round(time.perf_counter() - start, 1))
            return build / "cmake" / "aoti_runner"
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        assert not failures, "CMake failed, and there is no g++ to try:\n" + "\n".join(failures)
        pytest.skip("no C++ compiler (g++ or c++, or $CXX) to build examples/aoti_runner")
    command = _gxx_command(compiler, source / "aoti_runner.cpp", build / "aoti_runner")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, "\n".join(failures + [f"$ {' '.join(command)}\n{done.stderr[-4000:]}"])
    report(kind="build", case="aoti_runner (g++" + (" after CMake failed" if failures else "") + ")",
           seconds=round(time.perf_counter() - start, 1))
    return build / "aoti_runner"


def cpp_server(runner: pathlib.Path, package: pathlib.Path, device: str, inputs: pathlib.Path,
               outputs: pathlib.Path):
    """A function of env that runs `package` with the C++ runner (our library loaded by dlopen)."""
    def run(env: dict) -> subprocess.CompletedProcess:
        outputs.unlink(missing_ok=True)
        return run_server([str(runner), torch_convt_op.LIBRARY_PATH, str(package), device, str(inputs), str(outputs)],
                          {**os.environ, **env})
    return run


@pytest.mark.parametrize("dtype", VOCODER_DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_cpp_runner_matches_eager(device, dtype, packages, aoti_runner, tmp_path):
    """The Vocoder's package served by examples/aoti_runner (C++, no Python): the eager model's output."""
    model, package = packages.vocoder(device, dtype)
    inputs = _vocoder_inputs(dtype)
    torch.save(inputs, tmp_path / "inputs.pt")

    def control(env):
        return packages.run_control("C++", device, env, lambda package, inputs: cpp_server(
            aoti_runner, package, device, inputs, tmp_path / "control_outputs.pt")(env))

    survived = run_surviving_loader_faults(cpp_server(aoti_runner, package, device, tmp_path / "inputs.pt",
                                                      tmp_path / "outputs.pt"), control)
    survived.check("examples/aoti_runner")
    _check_against_eager("C++ aoti_runner", survived, list(torch.load(tmp_path / "outputs.pt")), model, inputs,
                         device, dtype)


@requires_cuda
def test_reduce_overhead_cuda_graphs_after_linear():
    model = LinearThenUpsample().cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):  # warm-up, recording, then replays with fresh inputs each time
            x = _double_inputs("cuda")
            actual = compiled(x).clone()
            assert_close(actual, _float64_twin(model)(x.double()), torch.float32, "cuda", reduction=REDUCTION)


def test_hifigan_example_runs_small_on_the_cpu():
    spec = importlib.util.spec_from_file_location("hifigan_example", EXAMPLES / "hifigan.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main(["--device", "cpu", "--small", "--frames", "6", "--repeats", "1"])
    assert results["error"] <= 1e-4
    assert set(results) == {"error", "eager", "torch.compile"}
