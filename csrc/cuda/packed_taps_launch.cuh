// The packed-taps launchers (launch.h), forward and grad_input: the table from PackedTapsPlan::columns
// to the kernel instantiation. Included by the instantiation file of each dtype and math.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "cuda/launch.h"
#include "cuda/packed_taps.cuh"
#include "cuda/packed_taps_grad_input.cuh"

namespace convt::cuda {

// PackedTapsPlan::columns (8, 16, 32 or 64; plan.cpp's packed_taps_columns) as `run`'s template
// argument; a pass whose kernels start at kLeastColumns has no instantiation below them
template <int kLeastColumns, typename Run>
void with_packed_columns(int columns, const char* pass, Run&& run) {
  switch (columns) {
    case 8:
      if constexpr (kLeastColumns <= 8) return run(std::integral_constant<int, 8>());
      break;
    case 16: return run(std::integral_constant<int, 16>());
    case 32: return run(std::integral_constant<int, 32>());
    case 64: return run(std::integral_constant<int, 64>());
  }
  TORCH_INTERNAL_ASSERT(false, "convt: packed taps' ", pass, " of ", columns, " columns");
}

template <typename scalar_t, Math kMath>
void launch_packed_taps_forward(const ConvTParams& p, const PackedTapsPlan& plan, const scalar_t* x, const scalar_t* w,
                                const scalar_t* bias, scalar_t* y, Launch launch) {
  using T = cuda_type<scalar_t>;
  auto run = [&](auto columns) {
    const auto kernel = packed_taps_forward_kernel<T, kMath, decltype(columns)::value>;
    C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
    launch_kernel(kernel, unsigned(plan.blocks), kPackedTapsThreads, plan.smem_bytes, launch, as_cuda(x), as_cuda(w),
                  as_cuda(bias), as_cuda(y), p, plan);
  };
  with_packed_columns<8>(plan.columns, "forward", run);
}

template <typename scalar_t, Math kMath>
void launch_packed_taps_grad_input(const ConvTParams& p, const PackedTapsPlan& plan, const scalar_t* grad_y, const scalar_t* w,
                                   scalar_t* grad_x, Launch launch) {
  using T = cuda_type<scalar_t>;
  auto run = [&](auto columns) {
    const auto kernel = packed_taps_grad_input_kernel<T, kMath, decltype(columns)::value>;
    C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
    launch_kernel(kernel, unsigned(plan.blocks), kPackedTapsThreads, plan.smem_bytes, launch, as_cuda(grad_y), as_cuda(w),
                  as_cuda(grad_x), p, plan);
  };
  with_packed_columns<kMath == Math::k16Bit ? 16 : 8>(plan.columns, "grad_input", run);  // (16-bit: k16 steps)
}

}  // namespace convt::cuda
