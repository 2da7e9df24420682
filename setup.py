"""Builds torch_convt_op._C: the C++ CPU library always, the CUDA kernels when a CUDA toolkit,
a CUDA build of torch and a GPU are present (or FORCE_CUDA=1). The library holds no Python: the package
loads it with torch.ops.load_library, and a C++ process can load it the same way."""
import glob
import os
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def want_cuda():
    """CUDA kernels when asked (FORCE_CUDA=1, e.g. to build wheels on a machine without a GPU), or when
    a toolkit, a CUDA build of torch and a GPU are all present."""
    if os.environ.get("FORCE_CUDA", "0") == "1":
        return True
    return CUDA_HOME is not None and torch.version.cuda is not None and torch.cuda.is_available()


def extension():
    # at::parallel_for is inline OpenMP in ATen's headers: without -fopenmp it runs serially. The
    # OpenMP runtime is the libgomp that torch has loaded already. -g0: no debug info (a smaller library).
    # No -march or -mavx2: the library runs on any CPU of its architecture; csrc/cpu/kernels_avx2.cpp
    # compiles its AVX2 functions for that instruction set one by one, chosen at run time.
    openmp = ["-fopenmp"] if sys.platform.startswith("linux") else []
    cxx_flags = ["-O3", "-g0"] + openmp
    cpp_sources = sources("csrc/*.cpp") + sources("csrc/cpu/*.cpp")
    if not want_cuda():
        return CppExtension("torch_convt_op._C", cpp_sources, include_dirs=[os.path.join(ROOT, "csrc")],
                            extra_compile_args={"cxx": cxx_flags}, extra_link_args=openmp, py_limited_api=True)
    # Hopper is built as sm_90a (runs on every sm_90 GPU) for the warpgroup (wgmma) kernels
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "8.0;9.0").replace(" ", ";").split(";")
    archs = ["9.0a" + arch[3:] if arch.split("+")[0] == "9.0" else arch for arch in archs]
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
    defines = ["-DCONVT_WGMMA"] if any(a.startswith("9.0a") for a in archs) else []
    # One translation unit per kernel family and dtype (csrc/cuda/instantiations/, written by
    # tools/generate_instantiations.py): ninja compiles them in parallel (MAX_JOBS), and nvcc
    # compiles each file's architectures in parallel (--threads).
    nvcc_flags = ["-O3", "-lineinfo", "--expt-relaxed-constexpr", f"--threads={len(archs)}"] + defines
    cuda_sources = sources("csrc/cuda/*.cpp") + sources("csrc/cuda/instantiations/*.cu")
    return CUDAExtension("torch_convt_op._C", cpp_sources + cuda_sources, include_dirs=[os.path.join(ROOT, "csrc")],
                         extra_compile_args={"cxx": cxx_flags + defines, "nvcc": nvcc_flags},
                         extra_link_args=openmp, py_limited_api=True)


setup(
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
