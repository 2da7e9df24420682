// The box tiles' launcher (launch.h): the kernel parameters from the plan and the tensor maps, and
// the plan's columns mapped to the kernel instantiation. A launch carries the maps of kBoxWindowTaps
// taps at most (the parameters' size): a plan of more taps runs in launches of whole tap groups,
// each writing its taps of every slice of partial. Included by one instantiation file per dtype.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>

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
  const int64_t tiles_a_tap_group = plan.tiles / plan.tap_groups;
  for_each_box_launch(plan.tap_groups, plan.box_slots, [&](int first_group, int groups) {
    g.tap_groups = groups;
    g.tiles = tiles_a_tap_group * g.tap_groups;
    g.first_window_tap = first_group * plan.box_slots;
    for (int k = g.first_window_tap; k < std::min(plan.taps, g.first_window_tap + kBoxWindowTaps); ++k)
      g.grad_y_maps[k - g.first_window_tap] = grad_y_maps[k];
    auto run = [&](auto columns) {
      constexpr int kColumns = decltype(columns)::value;
      const auto kernel = grad_weight_boxes_kernel<T, kColumns>;
      C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
      launch_kernel(kernel, unsigned(g.tiles * g.slices), kPipelineThreads, g.smem_bytes, launch, partial, g);
    };
    switch (plan.box_columns) {
      case 64: run(std::integral_constant<int, 64>{}); break;
      case 128: run(std::integral_constant<int, 128>{}); break;
      default: run(std::integral_constant<int, 256>{}); break;
    }
  });
}

}  // namespace convt::cuda
