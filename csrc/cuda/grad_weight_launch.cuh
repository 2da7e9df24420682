// The tensor-core grad_weight launchers (launch.h): the kernel parameters built from the plan and
// the plan's tile, tap-group size and options mapped to the kernel instantiation. Included by the
// instantiation files of one family and dtype each.
#pragma once

#include "cuda/gemm_launch.cuh"
#include "cuda/grad_weight_gemm.cuh"
#include "cuda/grad_weight_wgmma.cuh"

namespace convt::cuda {

// The kernels' parameters: the plan, its dividers, and x's tensor map (pipelined tiles)
inline WeightGradProblem make_weight_grad_problem(const WeightGradPlan& plan, const CUtensorMap* x_map) {
  WeightGradProblem g{};
  static_cast<WeightGradPlan&>(g) = plan;
  for (int q = 0; q < g.tap_groups; ++q) g.group_window_copies[q] = Divider(unsigned(g.group_window_copy_count[q]));
  g.div_chunks_per_row = Divider(unsigned(g.chunks_per_row));
  if (x_map != nullptr) g.x_map = *x_map;
  return g;
}

template <typename Kernel, typename T>
void launch_grad_weight_kernel(Kernel kernel, int threads, const WeightGradProblem& g, const T* x, const T* grad_y,
                               float* partial, float* bias_partial, Launch launch) {
  C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
  launch_kernel(kernel, unsigned(g.tiles * g.slices), threads, g.smem_bytes, launch, x, grad_y, partial, bias_partial, g);
}

// grad_weight_gemm_kernel: (ci warps, co warps) = (block_ci / 16, block_co / 32), and the group taps
template <typename scalar_t, Math kMath>
void launch_grad_weight_gemm(const WeightGradPlan& plan, const scalar_t* x, const scalar_t* grad_y, float* partial,
                             float* bias_partial, Launch launch) {
  using T = cuda_type<scalar_t>;
  const WeightGradProblem g = make_weight_grad_problem(plan, nullptr);
  auto run = [&](auto ci_warps, auto co_warps, auto group_taps) {
    constexpr int kCiWarps = decltype(ci_warps)::value, kCoWarps = decltype(co_warps)::value;
    constexpr int kTaps = decltype(group_taps)::value;
    launch_grad_weight_kernel(grad_weight_gemm_kernel<T, kMath, kCiWarps, kCoWarps, kTaps>, 32 * kCiWarps * kCoWarps, g,
                              as_cuda(x), as_cuda(grad_y), partial, bias_partial, launch);
  };
  auto with_tile = [&](auto group_taps) {
    if (g.block_ci == 64) {
      g.block_co == 64 ? run(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{}, group_taps)
                       : run(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{}, group_taps);
    } else {
      g.block_co == 64 ? run(std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{}, group_taps)
                       : run(std::integral_constant<int, 2>{}, std::integral_constant<int, 1>{}, group_taps);
    }
  };
  if constexpr (kMath != Math::k3xTF32) {  // (3xTF32 has no room for wide tap groups)
    if (g.group_taps == kGradWWideGroupTaps) return with_tile(std::integral_constant<int, kGradWWideGroupTaps>{});
  }
  with_tile(std::integral_constant<int, kGradWGroupTaps>{});
}

// grad_weight_wgmma_kernel of pipelined tiles or not (kPipelined: plan.stages > 0), merged phases or
// not (kMerged; one instantiation file each, so that they compile in parallel), by its tap slots (the
// group taps) and grad_bias
template <typename scalar_t, bool kPipelined, bool kMerged>
void launch_grad_weight_wgmma(const WeightGradPlan& plan, const CUtensorMap* x_map, const scalar_t* x,
                              const scalar_t* grad_y, float* partial, float* bias_partial, Launch launch) {
  using T = cuda_type<scalar_t>;
  TORCH_INTERNAL_ASSERT((plan.stages > 0) == kPipelined && bool(plan.merged) == kMerged, "convt: another wgmma grad_weight form");
  const WeightGradProblem g = make_weight_grad_problem(plan, x_map);
  auto run = [&](auto taps, auto sums_bias) {
    constexpr int kTaps = decltype(taps)::value;
    constexpr bool kSumsBias = decltype(sums_bias)::value;
    if constexpr (kPipelined) {
      launch_grad_weight_kernel(grad_weight_wgmma_pipelined_kernel<T, kTaps, kSumsBias, kMerged>, kPipelineThreads, g,
                                as_cuda(x), as_cuda(grad_y), partial, bias_partial, launch);
    } else {
      launch_grad_weight_kernel(grad_weight_wgmma_kernel<T, kTaps, kSumsBias, kMerged>, kWgmmaThreads, g, as_cuda(x),
                                as_cuda(grad_y), partial, bias_partial, launch);
    }
  };
  auto with_taps = [&](auto sums_bias) {
    switch (g.group_taps) {
      case 1: return run(std::integral_constant<int, 1>{}, sums_bias);
      case 2: return run(std::integral_constant<int, 2>{}, sums_bias);
      case 3: return run(std::integral_constant<int, 3>{}, sums_bias);
      default: return run(std::integral_constant<int, 4>{}, sums_bias);
    }
  };
  g.sums_bias ? with_taps(std::true_type{}) : with_taps(std::false_type{});
}

}  // namespace convt::cuda
