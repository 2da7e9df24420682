// grad_weight_gemm_kernel's epilogue: the block's fp32 sums to its slice of the partial sums, which
// sum_slices_kernel adds in order (docs/design.md §5.1, §8), and the grad_bias slots' sums (§5.4).
#pragma once

#include "cuda/grad_weight_gemm_mainloop.cuh"

namespace convt::cuda {

// Stores straight from the accumulators, each thread its own elements. An asynchronous form (the
// tile staged in shared memory and written by bulk copies that the MMA warps do not wait for) would
// be another struct with the same store_bias() and store_tile(), picked in the kernel by type.
template <typename T, Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
struct GradWGemmEpilogue {
  using Smem = GradWGemmSharedStorage<T, kCiWarps, kCoWarps>;
  using Work = GradWGemmWork<kCiWarps, kCoWarps>;
  using Accumulators = typename GradWGemmMainloop<T, kMath, kCiWarps, kCoWarps, kGroupTaps>::Accumulators;

  const WeightGradProblem& p;
  const Work& work;

  // bias_partial[slice][ci tile][tap group][co] = the sum of co's slots, in slot order (the slots
  // complete and visible to the block).
  __device__ __forceinline__ void store_bias(const Smem& smem, float* bias_partial) const {
    const WeightGradTile& tile = work.tile;
    if (threadIdx.x < tile.co_count) {
      float total = 0.0f;
      for (int slot = 0; slot < p.bias_slots; ++slot) total += smem.bias_s[threadIdx.x * p.bias_slots + slot];
      const int64_t bias_slice = (tile.slice * p.ci_tiles + tile.ci_tile) * p.tap_groups + tile.tap_group;
      bias_partial[bias_slice * p.groups * p.out_channels_per_group + tile.first_co + threadIdx.x] = total;
    }
  }

  // partial[slice] at WeightGradTile::partial_index for the group's taps (a pack's products across
  // groups left out): element e of tile nt sits at ci row lane/4 (+8 for e >= 2) and co column
  // 2*(lane%4) + e%2 of the warp's tile.
  __device__ __forceinline__ void store_tile(const Accumulators& acc, float* partial) const {
    const WeightGradTile& tile = work.tile;
    const int lane = work.lane, warp_ci = work.warp_ci, warp_co = work.warp_co, count = work.count;
    float* out = partial + tile.slice * (p.groups * p.in_channels_per_group * p.out_channels_per_group * p.taps);
#pragma unroll
    for (int t = 0; t < kGroupTaps; ++t) {
      if (t >= count) break;
      const int k = p.group_tap[p.group_first[tile.tap_group] + t];
#pragma unroll
      for (int nt = 0; nt < kGradWTilesN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ci = warp_ci + lane / 4 + (e / 2) * 8, co = warp_co + nt * 8 + 2 * (lane % 4) + e % 2;
          if (ci < tile.ci_count && co < tile.co_count && tile.same_group(p, ci, co))
            out[tile.partial_index(p, ci, co, k)] = acc[t][nt].value(e);
        }
    }
  }
};

}  // namespace convt::cuda
