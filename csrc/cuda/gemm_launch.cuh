// The implicit-GEMM launchers (launch.h) of the forward and grad_input: the kernel parameters built
// from the plan, the weight packing, and the table from a tile shape (plan.h's kGemmTileShapes) to
// the kernel instantiation. Included by the instantiation files of one family and dtype each.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <utility>

#include "cuda/implicit_gemm.cuh"
#include "cuda/launch.h"
#include "cuda/pipelined_gemm.cuh"

namespace convt::cuda {

// The kernels' parameters: the plan, its dividers, `in`'s tensor map (tensor_rows), the launch's
// flags (Launch::gate, Launch::nonfinite) and the fp32 slices (float_sums)
inline GemmProblem make_gemm_problem(const GemmPlan& plan, const CUtensorMap* in_map, const Launch& launch,
                                     float* slices = nullptr) {
  GemmProblem g{};
  static_cast<GemmPlan&>(g) = plan;
  g.gate = launch.gate;
  g.nonfinite = launch.nonfinite;
  g.slices = slices;
  g.div_splits = Divider(unsigned(g.splits));
  g.div_col_tiles = Divider(unsigned(g.col_tiles));
  g.div_row_tiles = Divider(unsigned(g.row_tiles));
  g.div_batch = Divider(unsigned(g.batch));
  g.div_groups = Divider(unsigned(g.groups));
  g.div_chunks = Divider(unsigned(g.chunks));
  g.div_in_phases = Divider(unsigned(g.in_phases));
  g.div_row_copies = Divider(unsigned(g.row_copies));
  g.div_row_phases = Divider(unsigned(g.row_phases));
  g.div_ksteps = Divider(unsigned(g.ksteps));
  g.div_weight_channel_phases = Divider(unsigned(g.weight_channel_phases));
  g.div_tile_parts = Divider(unsigned(g.tile_parts));
  if (in_map != nullptr) g.in_map = *in_map;
  return g;
}

// Calls f(std::integral_constant<int, shape>) for the tile shape `index` of kGemmTileShapes
template <typename F, int... kShapes>
void with_tile_shape(int index, F&& f, std::integer_sequence<int, kShapes...>) {
  ((index == kShapes ? (f(std::integral_constant<int, kShapes>{}), 0) : 0), ...);
}
template <typename F>
void with_tile_shape(int index, F&& f) {
  with_tile_shape(index, std::forward<F>(f), std::make_integer_sequence<int, kGemmTileShapeCount>{});
}

// Persistent blocks, as many as the SMs hold, each walking parts of tiles
template <typename Kernel, typename T>
void launch_persistent(Kernel kernel, int threads, const GemmProblem& g, const T* in, const uint32_t* packed_w,
                       const T* bias, T* out, Launch launch) {
  C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
  int blocks_per_sm = 0;
  C10_CUDA_CHECK(resident_blocks_per_sm(kernel, threads, g.smem_bytes, launch, &blocks_per_sm));
  const int64_t resident_blocks = int64_t(std::max(blocks_per_sm, 1)) * launch.sm_count;
  const unsigned blocks = unsigned(std::min(g.parts, resident_blocks));
  launch_kernel(kernel, blocks, threads, g.smem_bytes, launch, in, packed_w, bias, out, g);
}

constexpr int kPackThreads = 256;

template <typename scalar_t, Math kMath>
void pack_gemm_weight(const GemmPlan& plan, const GemmWeight& weight, const scalar_t* w, uint32_t* packed, Launch launch) {
  // blocks of kPackThreads 16-byte quads of a unit's slots (g, row_tile, chunk); where those are fewer
  // than eight blocks an SM, the part slots are shared out over blockIdx.z too
  const int64_t units = plan.groups * plan.row_tiles * plan.chunks, part_slots = int64_t(plan.weight_parts) * plan.taps;
  TORCH_INTERNAL_ASSERT(units * part_slots * plan.slot_words == packed_weight_words(plan) && plan.slot_words % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(packed) % 16 == 0,
                        "convt: packed weight layout");  // (16-byte quads)
  const int64_t quads = plan.slot_words / 4, pieces = (quads + kPackThreads - 1) / kPackThreads, blocks = units * pieces;
  const int64_t split = std::clamp<int64_t>((8 * int64_t(launch.sm_count) + blocks - 1) / blocks, 1, part_slots);
  const dim3 grid{unsigned(units), unsigned(pieces), unsigned(split)};
  launch_kernel(pack_gemm_weight_kernel<cuda_type<scalar_t>, kMath>, grid, kPackThreads, 0, launch, as_cuda(w), packed,
                make_gemm_problem(plan, nullptr, launch), weight);
}

// implicit_gemm_kernel of the warp or warpgroup tile shapes (kFamily: one instantiation file each, so
// that they compile in parallel): 8 warps, (256 / block_n) along the rows, each with block_m / (16 *
// warps along the rows) m16 tiles; warpgroup problems by the phases they merge and whether their rows
// sit at offsets
template <typename scalar_t, Math kMath, GemmFamily kFamily>
void launch_implicit_gemm(const GemmPlan& plan, const scalar_t* in, const uint32_t* packed_w, const scalar_t* bias,
                          scalar_t* out, float* slices, Launch launch) {
  using T = cuda_type<scalar_t>;
  const GemmProblem g = make_gemm_problem(plan, nullptr, launch, slices);
  TORCH_INTERNAL_ASSERT(kGemmTileShapes[plan.tile_shape].family == kFamily, "convt: a tile shape of another family");
  TORCH_INTERNAL_ASSERT(!plan.float_sums || (kFamily == GemmFamily::kWarpTiles && slices != nullptr),
                        "convt: fp32 sums on the unpipelined warpgroup tiles, or without their slices");
  with_tile_shape(plan.tile_shape, [&](auto shape_index) {
    constexpr GemmTileShape kShape = kGemmTileShapes[decltype(shape_index)::value];
    constexpr int kWarpsM = 256 / kShape.block_n, kWarpTilesM = kShape.block_m / (16 * kWarpsM);
    auto run = [&](auto kernel) { launch_persistent(kernel, kGemmThreads, g, as_cuda(in), packed_w, as_cuda(bias), as_cuda(out), launch); };
    if constexpr (kShape.family != kFamily || (kShape.one_accumulator && kMath == Math::k3xTF32)) {
      TORCH_INTERNAL_ASSERT(false, "convt: a tile shape launch_implicit_gemm does not have");
    } else if constexpr (kShape.family == GemmFamily::kWarpTiles) {
      run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM>);
    } else if constexpr (kShape.family == GemmFamily::kWarpgroupTiles) {
      if (g.row_phases > 1) {
        g.row_offsets ? run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM, true, true, Merge::kRows>)
                      : run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM, true, false, Merge::kRows>);
      } else if (g.channel_phases > 1) {
        run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM, true, false, Merge::kChannels>);
      } else {
        g.row_offsets ? run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM, true, true>)
                      : run(implicit_gemm_kernel<T, kMath, kWarpTilesM, kWarpsM, true>);
      }
    }
  });
}

// pipelined_gemm_kernel of a pipelined tile shape: block_m rows, block_n / 128 subtiles a consumer,
// by the phases the problem merges; kForm: the plan's pipeline_form (pipelined_gemm.cuh)
template <typename scalar_t, Math kMath, PipelineForm kForm>
void launch_pipelined_gemm(const GemmPlan& plan, const CUtensorMap* in_map, const scalar_t* in, const uint32_t* packed_w,
                           const scalar_t* bias, scalar_t* out, float* slices, Launch launch) {
  using T = cuda_type<scalar_t>;
  const GemmProblem g = make_gemm_problem(plan, in_map, launch, slices);
  TORCH_INTERNAL_ASSERT(pipeline_form(plan) == kForm, "convt: a pipelined problem's form");
  TORCH_INTERNAL_ASSERT(!plan.float_sums || (kForm == PipelineForm::kOnePair && plan.row_phases == 1 && plan.channel_phases == 1 &&
                                             slices != nullptr),
                        "convt: pipelined fp32 sums of several pairs or merged phases, or without their slices");
  with_tile_shape(plan.tile_shape, [&](auto shape_index) {
    constexpr GemmTileShape kShape = kGemmTileShapes[decltype(shape_index)::value];
    constexpr int kSubtiles = kShape.block_n / 128;
    auto run = [&](auto kernel) { launch_persistent(kernel, kPipelineThreads, g, as_cuda(in), packed_w, as_cuda(bias), as_cuda(out), launch); };
    constexpr bool kTwoSets = kMath == Math::k3xTF32 || kForm == PipelineForm::kPhasePair;  // (no 128 x 256)
    if constexpr (kShape.family != GemmFamily::kPipelined || (kShape.one_accumulator && kTwoSets)) {
      TORCH_INTERNAL_ASSERT(false, "convt: a tile shape launch_pipelined_gemm does not have");
    } else if constexpr (kForm == PipelineForm::kPhasePair) {  // (strided forwards: no merged phases)
      TORCH_INTERNAL_ASSERT(g.row_phases == 1 && g.channel_phases == 1, "convt: a phase pair with merged phases");
      run(pipelined_gemm_kernel<T, kMath, Merge::kNone, kShape.block_m, kSubtiles, kForm>);
    } else if (g.row_phases > 1) {
      run(pipelined_gemm_kernel<T, kMath, Merge::kRows, kShape.block_m, kSubtiles, kForm>);
    } else if (g.channel_phases > 1) {
      run(pipelined_gemm_kernel<T, kMath, Merge::kChannels, kShape.block_m, kSubtiles, kForm>);
    } else {
      run(pipelined_gemm_kernel<T, kMath, Merge::kNone, kShape.block_m, kSubtiles, kForm>);
    }
  });
}

}  // namespace convt::cuda
