// The epilogue of grad_weight_wgmma_kernel: a block's sums -> partial[slice] and bias_partial[slice]
// (docs/design.md §5.1, §5.4), which sum_slices_kernel adds in a fixed order (§8).
//
// Stores go straight from the accumulator registers (a thread's values lie 2 ci apart: no wide
// store to gain). An asynchronous form (the tile staged in shared memory and written by bulk copies
// that the MMA warps do not wait for, e.g. a consumer's tile stored while it computes its next)
// would be another struct with the same store_bias / store_tile, plus a staging buffer in the
// shared-memory layout and a wait for the bulk group before the buffer's reuse and at exit; the
// kernel picks the struct.
#pragma once

#include <algorithm>

#include "cuda/grad_weight_wgmma_tile.cuh"

namespace convt::cuda {

template <class Tr>
struct WgmmaWeightGradEpilogue {
  using T = typename Tr::Element;
  using Accumulators = WgmmaWeightGradAccumulators<Tr::kTaps>;
  const WeightGradProblem& p;
  const WgmmaWeightGradTile<Tr>& tile;
  const T* gy;
  float* partial;
  float* bias_partial;

  // grad_bias's partial sums of a bias block: column 64 of the ones column (16-bit) or the register
  // sums (TF32), slice 0 adding the phase positions outside tap slot 0's range from gy; then
  // bias_partial[slice][phase][g*Cog + co], the four lanes of each row added in a fixed order
  __device__ __forceinline__ void store_bias(const Accumulators& acc) const {
    if (!tile.bias_block) return;
    const int lane = tile.lane, warp = tile.warp;
    float (&bias_sums)[2] = acc.bias_sums;
    if constexpr (Tr::kOnesColumn) {  // column 64: lanes 4g's accumulators 0 (row g) and 2 (row g + 8)
      bias_sums[0] = lane % 4 == 0 ? acc.ones_acc[0] : 0.0f;
      bias_sums[1] = lane % 4 == 0 ? acc.ones_acc[2] : 0.0f;
    }
    if (tile.slice == 0) {
      if constexpr (Tr::kMerged) {  // each row its own phase
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const auto a_row = tile.row(16 * warp + lane / 4 + 8 * half);
          if (a_row.co < tile.co_count)
            for_each_edge_position(a_row.phase, a_row.shift_min,
                                   [&](const T* at) { bias_sums[half] += to_float(at[a_row.co * p.gy_channel_stride]); });
        }
      } else {  // both rows of the tile's phase
        for_each_edge_position(tile.phase, tile.shift_min, [&](const T* at) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int co = 16 * warp + lane / 4 + 8 * half;
            if (co < tile.co_count) bias_sums[half] += to_float(at[co * p.gy_channel_stride]);
          }
        });
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = bias_sums[half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const auto a_row = tile.row(16 * warp + lane / 4 + 8 * half);
      if (lane % 4 == 0 && a_row.co < tile.co_count)
        bias_partial[(tile.slice * p.stride + a_row.phase) * (p.groups * p.out_channels_per_group) + tile.first_co + a_row.co] = sum;
    }
  }

  // add(address of batch element n's position, from the tile's first co) for this lane's share (every
  // fourth of the (n, position) pairs) of the phase positions outside the range of tap slot 0 of a
  // row of `row_phase` whose slot 0 starts at `row_shift_min`: [0, covered_begin) and [covered_end,
  // phase_length)
  template <typename Add>
  __device__ __forceinline__ void for_each_edge_position(int row_phase, int row_shift_min, Add&& add) const {
    const int64_t phase_length = (int64_t(p.length_out) - row_phase + p.stride - 1) / p.stride;
    const int64_t covered_begin = std::clamp<int64_t>(row_shift_min, 0, phase_length);
    const int64_t covered_end = std::clamp<int64_t>(int64_t(p.length_in) + row_shift_min, covered_begin, phase_length);
    const int64_t head = covered_begin, per_row = head + phase_length - covered_end;
    for (int64_t index = tile.lane % 4; index < p.batch * per_row; index += 4) {
      const int64_t n = index / per_row, r = index % per_row, m = r < head ? r : covered_end + (r - head);
      add(gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride + (m * p.stride + row_phase) * p.gy_length_stride);
    }
  }

  // partial[slice] at WeightGradTile::partial_index for the tap slots the group has: acc[t][4j + e] is row
  // 16 * warp + lane / 4 + 8 * (e / 2), ci 8j + 2 * (lane % 4) + e % 2 (wgmma.cuh); merged, slot t's
  // k is group_tap (its k of r = 0) + r
  __device__ __forceinline__ void store_tile(const Accumulators& acc) const {
    const int lane = tile.lane, warp = tile.warp;
    float* out = partial + tile.slice * (p.groups * p.in_channels_per_group * p.out_channels_per_group * p.taps);
#pragma unroll
    for (int t = 0; t < Tr::kTaps; ++t) {
      if (t >= tile.count) break;
      const int k = p.group_tap[p.group_first[tile.tap_group] + t];
#pragma unroll
      for (int e = 0; e < kWgmmaBlockCi / 2; ++e) {
        const auto a_row = tile.row(16 * warp + lane / 4 + 8 * (e % 4 / 2));
        const int ci = kWgmmaBlockCi * tile.wg + 8 * (e / 4) + 2 * (lane % 4) + e % 2;
        if (ci < tile.ci_count && a_row.co < tile.co_count) out[tile.partial_index(p, ci, a_row.co, k + a_row.r)] = acc.acc[t][e];
      }
    }
  }
};

}  // namespace convt::cuda
