// grad_input of the packed taps (docs/design.md §3.9; PackedTapsPlan): a narrow output's grad_x as
// one GEMM whose reduction runs over a group's (co, tap) columns.
//
//   PackedGradInputLoader    G (a block's positions x the columns, gathered from grad_y once a block)
//                            and w (kPackedGradInputChunk channels x the columns), global -> shared
//   PackedGradInputMainloop  mma.sync over the columns: grad_x[q, ci] = sum_j G[q, j] * w[ci, j]
//   PackedGradInputEpilogue  the accumulators to grad_x through a stage in shared memory: whole
//                            channel rows of the block's positions, 128 bytes a store instruction
//
// A block takes the positions [first_position, first_position + kPackedTapsRows) of one (batch
// element, group) row of grad_x and every input channel of the group, a chunk at a time; each warp
// owns 32 positions (two m16 tiles) x the chunk's channels (eight n8 tiles).
#pragma once

#include <cstdint>

#include "cuda/gemm_mainloop.cuh"  // Accumulator, mma_step
#include "cuda/grid_dependency.cuh"
#include "cuda/mma.cuh"
#include "cuda/packed_taps.cuh"    // PackedBits, packed_operand
#include "plan.h"
#include "problem.h"

namespace convt::cuda {

// Shared memory (plan.h's layout, which the planner's smem_bytes counts): G's kPackedTapsRows rows,
// then w's kPackedGradInputChunk rows, each kRow elements by column, then the epilogue's stage
template <typename T, int kColumns>
struct PackedGradInputLayout {
  static constexpr int kRow = packed_operand_row(kColumns, int(sizeof(T)));
  static constexpr int kGElements = kPackedTapsRows * kRow;
};

template <typename T, Math kMath, int kColumns>
struct PackedGradInputLoader {
  using Bits = PackedBits<T>;
  using Layout = PackedGradInputLayout<T, kColumns>;
  static_assert(kPackedTapsRows == kPackedTapsThreads, "a thread gathers one position's row of G");
  static_assert(kPackedGradInputChunk * kColumns % kPackedTapsThreads == 0, "w's chunk splits evenly over the threads");

  // G[r, j] = grad_y[co, (first_position + r) * stride - padding + tap * dilation] at j = co * K + tap:
  // zero outside grad_y's row, past C_out/groups x K columns and at positions past L_in
  __device__ __forceinline__ static void load_g(Bits* g_s, const Bits* grad_y_rows, const ConvTParams& p,
                                                int64_t first_position, int tid) {
    const int64_t position = first_position + tid;
    const int64_t first_output = position * p.stride - p.padding;
    const int taps = int(p.kernel_size), columns = int(p.out_channels_per_group) * taps;
    const bool in_row = position < p.length_in;
    Bits* row = g_s + tid * Layout::kRow;
    int co = 0, tap = 0;
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      const int64_t output = first_output + tap * p.dilation;
      const bool valid = in_row && j < columns && output >= 0 && output < p.length_out;
      row[j] = packed_operand<kMath>(valid ? __ldg(grad_y_rows + co * p.y_channel_stride + output * p.y_length_stride) : Bits(0));
      if (++tap == taps) tap = 0, ++co;
    }
  }

  // w's rows of chunk `chunk`: W[c, j] = w[first_channel + c, co, tap] (zero past the group's channels
  // and past the columns)
  __device__ __forceinline__ static void load_w(Bits* w_s, const Bits* w_rows, const ConvTParams& p, int64_t chunk, int tid) {
    const int64_t first_channel = chunk * kPackedGradInputChunk;
    const int taps = int(p.kernel_size), columns = int(p.out_channels_per_group) * taps;
#pragma unroll
    for (int i = 0; i < kPackedGradInputChunk * kColumns / kPackedTapsThreads; ++i) {
      const int item = tid + i * kPackedTapsThreads, c = item / kColumns, j = item % kColumns;
      const int64_t channel = first_channel + c;
      const bool valid = j < columns && channel < p.in_channels_per_group;
      const Bits value = valid ? __ldg(w_rows + channel * p.w_in_stride + (j / taps) * p.w_out_stride + (j % taps) * p.w_tap_stride)
                               : Bits(0);
      w_s[c * Layout::kRow + j] = packed_operand<kMath>(value);
    }
  }
};

// A warp's 32 positions x a chunk's 64 channels, over every column. Fragments (g = lane / 4, c =
// lane % 4): TF32 A a0 = G[g][c], a1 = G[g + 8][c], a2 = G[g][c + 4], a3 = G[g + 8][c + 4], B b0 =
// W[g][c], b1 = W[g][c + 4]; 16-bit the pairs at 2c and 2c + 8 (the lower column in the low half)
template <typename T, Math kMath, int kColumns>
struct PackedGradInputMainloop {
  using Bits = PackedBits<T>;
  using Layout = PackedGradInputLayout<T, kColumns>;
  static constexpr int kStep = kMath == Math::k16Bit ? 16 : 8;
  static constexpr int kChannelTiles = kPackedGradInputChunk / 8;
  static_assert(kColumns % kStep == 0, "16-bit columns come in k16 steps");
  Accumulator<kMath> acc[2][kChannelTiles];

  __device__ __forceinline__ static void fragment(uint32_t (&v)[2], const Bits* at) {
    if constexpr (kMath == Math::k16Bit) {
      v[0] = *reinterpret_cast<const uint32_t*>(at), v[1] = *reinterpret_cast<const uint32_t*>(at + 8);
    } else {
      v[0] = at[0], v[1] = at[4];
    }
  }

  __device__ __forceinline__ void run(const Bits* g_s, const Bits* w_s, int warp, int lane) {
    const int g = lane / 4, c = lane % 4, column = kMath == Math::k16Bit ? 2 * c : c;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int n = 0; n < kChannelTiles; ++n) acc[m][n].clear();
    }
#pragma unroll
    for (int k0 = 0; k0 < kColumns; k0 += kStep) {
      uint32_t a[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const Bits* at = g_s + (warp * 32 + m * 16 + g) * Layout::kRow + k0 + column;
        uint32_t upper[2], lower[2];  // (rows g and g + 8)
        fragment(upper, at);
        fragment(lower, at + 8 * Layout::kRow);
        a[m][0] = upper[0], a[m][1] = lower[0], a[m][2] = upper[1], a[m][3] = lower[1];
      }
#pragma unroll
      for (int n = 0; n < kChannelTiles; ++n) {
        uint32_t b[2];
        fragment(b, w_s + (n * 8 + g) * Layout::kRow + k0 + column);
#pragma unroll
        for (int m = 0; m < 2; ++m) mma_step<T, kMath>(acc[m][n], a[m], b);
      }
    }
  }
};

// The block's accumulators (256 positions x a chunk's 64 channels) to grad_x, 32 channels a pass
// through the stage S[channel][position] (floats, rows of kPackedGradInputStageRow = 256 + 4): each
// warp writes its fragments at S[8t + 2c + e][32 warp + 16m + 8h + g] (banks 8c + g), then each warp
// stores 4 whole channel rows of 256 positions. 16-bit rows go out as 4-byte pairs from the row's
// first 4-byte boundary (a lone first or last element as itself): a store instruction is 128 bytes
// of one row, not 64; float rows one element a lane (128 bytes)
template <typename T, Math kMath, int kColumns>
struct PackedGradInputEpilogue {
  using Mainloop = PackedGradInputMainloop<T, kMath, kColumns>;
  static constexpr int kTilesAPass = kPackedGradInputPassChannels / 8;  // n8 tiles
  static constexpr int kRowsAWarp = kPackedGradInputPassChannels / (kPackedTapsThreads / 32);

  __device__ __forceinline__ static void store_row(const float* staged, T* row, int positions, int lane) {
    if constexpr (sizeof(T) == 2) {
      const int first = int(reinterpret_cast<uintptr_t>(row) / sizeof(T) % 2);  // (the first position on a 4-byte boundary)
      const int pairs = (positions - first) / 2;
      for (int k = lane; k < pairs; k += 32) {
        const int position = first + 2 * k;
        alignas(4) T pair[2] = {from_float<T>(staged[position]), from_float<T>(staged[position + 1])};
        *reinterpret_cast<uint32_t*>(row + position) = *reinterpret_cast<const uint32_t*>(pair);
      }
      if (lane == 0 && first == 1) row[0] = from_float<T>(staged[0]);
      if (lane == 1 && first + 2 * pairs < positions) row[positions - 1] = from_float<T>(staged[positions - 1]);
    } else {
      for (int position = lane; position < positions; position += 32) row[position] = from_float<T>(staged[position]);
    }
  }

  __device__ __forceinline__ static void store(const Mainloop& mainloop, float* stage, T* grad_x_rows, const ConvTParams& p,
                                               int64_t first_channel, int64_t positions_left, int warp, int lane) {
    const int g = lane / 4, c = lane % 4;
    const int positions = positions_left < kPackedTapsRows ? int(positions_left) : kPackedTapsRows;
#pragma unroll
    for (int pass = 0; pass < Mainloop::kChannelTiles / kTilesAPass; ++pass) {
#pragma unroll
      for (int t = 0; t < kTilesAPass; ++t) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // (rows g and g + 8 x columns 2c and 2c + 1)
            stage[(t * 8 + 2 * c + i % 2) * kPackedGradInputStageRow + warp * 32 + m * 16 + (i / 2) * 8 + g] =
                mainloop.acc[m][pass * kTilesAPass + t].value(i);
          }
        }
      }
      __syncthreads();  // (every warp's fragments staged)
      const int64_t pass_channel = first_channel + pass * kPackedGradInputPassChannels;
#pragma unroll 1
      for (int r = warp * kRowsAWarp; r < (warp + 1) * kRowsAWarp; ++r) {
        if (pass_channel + r < p.in_channels_per_group) {
          store_row(stage + r * kPackedGradInputStageRow, grad_x_rows + (pass_channel + r) * p.length_in, positions, lane);
        }
      }
      __syncthreads();  // (every row stored before the next pass's fragments)
    }
  }
};

// (two blocks an SM, 128 registers a thread: the kernel is bound by its stores, which want warps;
// 3xTF32's two accumulators a tile need one block's 255)
template <typename T, Math kMath, int kColumns>
__global__ void __launch_bounds__(kPackedTapsThreads, kMath == Math::k3xTF32 ? 1 : 2)
    packed_taps_grad_input_kernel(const T* __restrict__ grad_y, const T* __restrict__ w, T* __restrict__ grad_x,
                                  const ConvTParams p, const PackedTapsPlan plan) {
  begin_dependent_grid();
  using Bits = PackedBits<T>;
  using Layout = PackedGradInputLayout<T, kColumns>;
  extern __shared__ __align__(16) unsigned char smem[];
  Bits* g_s = reinterpret_cast<Bits*>(smem);
  Bits* w_s = g_s + Layout::kGElements;
  float* stage_s = reinterpret_cast<float*>(w_s + kPackedGradInputChunk * Layout::kRow);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;

  const int64_t tile = int64_t(blockIdx.x) % plan.blocks_per_row, row = int64_t(blockIdx.x) / plan.blocks_per_row;
  const int64_t group = row % p.groups, n = row / p.groups;
  const int64_t first_position = tile * kPackedTapsRows;
  const Bits* grad_y_rows =
      reinterpret_cast<const Bits*>(grad_y) + n * p.y_batch_stride + group * p.out_channels_per_group * p.y_channel_stride;
  const Bits* w_rows = reinterpret_cast<const Bits*>(w) + group * p.in_channels_per_group * p.w_in_stride;
  // grad_x is contiguous (N, C_in, L_in): this row's channels from the group's first
  T* grad_x_rows = grad_x + (n * p.in_channels + group * p.in_channels_per_group) * p.length_in + first_position;

  PackedGradInputLoader<T, kMath, kColumns>::load_g(g_s, grad_y_rows, p, first_position, tid);
  PackedGradInputMainloop<T, kMath, kColumns> mainloop;
  for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
    PackedGradInputLoader<T, kMath, kColumns>::load_w(w_s, w_rows, p, chunk, tid);
    __syncthreads();  // (G, at the first chunk, and this chunk's w)
    mainloop.run(g_s, w_s, warp, lane);
    // (its passes' barriers also order every warp's reads of w before the next chunk's)
    PackedGradInputEpilogue<T, kMath, kColumns>::store(mainloop, stage_s, grad_x_rows, p, chunk * kPackedGradInputChunk,
                                                       p.length_in - first_position, warp, lane);
  }
}

}  // namespace convt::cuda
