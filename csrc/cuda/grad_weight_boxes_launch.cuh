// The box tiles' launcher (launch.h): the kernel parameters from the plan and the tensor maps, and
// the plan's columns mapped to the kernel instantiation. Included by one instantiation file per dtype.
#pragma once

#include <c10/cuda/CUDAException.h>

#include "cuda/gemm_launch.cuh"
#include "cuda/grad_weight_boxes.cuh"

namespace convt::cuda {

template <typename scalar_t>
void launch_grad_weight_boxes(const WeightGradPlan& plan, const CUtensorMap* x_map, const CUtensorMap* grad_y_maps,
                              float* partial, Launch launch) {
  using T = cuda_type<scalar_t>;
  TORCH_INTERNAL_ASSERT(plan.box_columns > 0 && plan.taps <= kMaxBoxTaps, "convt: not a box plan");
  WeightBoxProblem g{};
  static_cast<WeightGradPlan&>(g) = plan;
  g.x_map = *x_map;
  for (int k = 0; k < plan.taps; ++k) g.grad_y_maps[k] = grad_y_maps[k];
  auto run = [&](auto columns) {
    constexpr int kColumns = decltype(columns)::value;
    const auto kernel = grad_weight_boxes_kernel<T, kColumns>;
    C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
    kernel<<<unsigned(g.tiles * g.slices), kPipelineThreads, g.smem_bytes, launch.stream>>>(partial, g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  switch (plan.box_columns) {
    case 64: return run(std::integral_constant<int, 64>{});
    case 128: return run(std::integral_constant<int, 128>{});
    default: return run(std::integral_constant<int, 256>{});
  }
}

}  // namespace convt::cuda
