// The packed-taps forward (docs/design.md §3.9; PackedTapsPlan): narrow outputs as one GEMM whose
// columns are the (co, tap) pairs of a group, then a sum over taps from shared memory.
//
//   PackedTapsLoader    a stage of x (kPackedTapsChunk channels x kPackedTapsRows positions) and of
//                       w (the chunk's channels x the (co, tap) columns), global -> registers -> shared
//   PackedTapsMainloop  mma.sync over a stage: Y[q, j] += x[c, q] * w[c, j]
//   the kernel's epilogue  Y to shared memory, then each output j sums Y[q, co * K + tap] over the
//                          taps that reach it, adds the bias and stores
//
// A block takes one (batch element, group) row's outputs [first_output, first_output + outputs) and
// the input positions q = first_position + r, r in [0, kPackedTapsRows), that reach them. Registers
// hold the next stage's loads while the tensor cores run on the current one (two shared stages).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/gemm_mainloop.cuh"  // Accumulator, mma_step, split_tf32
#include "cuda/grid_dependency.cuh"
#include "cuda/mma.cuh"
#include "plan.h"
#include "problem.h"

namespace convt::cuda {

// 16-bit operands as their bits (no conversions), float32 ones as theirs (TF32: rounded on the way in)
template <typename T>
using PackedBits = std::conditional_t<sizeof(T) == 2, unsigned short, uint32_t>;
template <Math kMath, typename Bits>
__device__ __forceinline__ Bits packed_operand(Bits value) {
  if constexpr (kMath == Math::kTF32) return to_tf32(__uint_as_float(value));
  return value;
}

// Shared memory of one stage (plan.h's layout, which the planner's smem_bytes counts): x rows of
// kXRow elements by channel, then w rows of kWRow by column; the epilogue's Y rows of kSumRow floats
template <typename T, int kColumns>
struct PackedTapsStage {
  static constexpr int kXRow = kPackedTapsXRow;
  static constexpr int kWRow = packed_taps_w_row(int(sizeof(T)));
  static constexpr int kXElements = kPackedTapsChunk * kXRow;
  static constexpr int kElements = packed_taps_stage_elements(kColumns, int(sizeof(T)));
  static constexpr int kSumRow = packed_taps_sum_row(kColumns);
};

template <typename T, Math kMath, int kColumns>
struct PackedTapsLoader {
  using Bits = PackedBits<T>;
  using Stage = PackedTapsStage<T, kColumns>;
  static_assert(kPackedTapsRows == kPackedTapsThreads, "a thread loads one position of every channel of a stage");
  static constexpr int kWeightsPerThread = kPackedTapsChunk * kColumns / kPackedTapsThreads;

  Bits x_values[kPackedTapsChunk];
  Bits w_values[kWeightsPerThread];

  // Stage `chunk`: channel c of the group at position `position` (zero outside the row and past the
  // group's channels), and w[c, co, tap] at column co * K + tap (zero past C_out/groups x K)
  __device__ __forceinline__ void load(const Bits* x_rows, const Bits* w_rows, const ConvTParams& p, int64_t position,
                                       int64_t chunk, int tid) {
    const int64_t first_channel = chunk * kPackedTapsChunk;
    const bool in_row = position >= 0 && position < p.length_in;
    const Bits* x_at = x_rows + first_channel * p.x_channel_stride + (in_row ? position : 0) * p.x_length_stride;
    const int channel_stride = int(p.x_channel_stride);  // (a chunk's rows within 2^31 elements: plan_packed_taps)
    const int channels = int(p.in_channels_per_group - first_channel);
#pragma unroll
    for (int r = 0; r < kPackedTapsChunk; ++r) {
      x_values[r] = in_row && r < channels ? __ldg(x_at + r * channel_stride) : Bits(0);
    }
    const int taps = int(p.kernel_size), columns = int(p.out_channels_per_group) * taps;
#pragma unroll
    for (int i = 0; i < kWeightsPerThread; ++i) {
      const int item = tid + i * kPackedTapsThreads, r = item % kPackedTapsChunk, column = item / kPackedTapsChunk;
      const int64_t channel = first_channel + r, co = column / taps, tap = column % taps;
      w_values[i] = column < columns && channel < p.in_channels_per_group
                        ? __ldg(w_rows + channel * p.w_in_stride + co * p.w_out_stride + tap * p.w_tap_stride)
                        : Bits(0);
    }
  }

  __device__ __forceinline__ void store(Bits* stage, int tid) const {
#pragma unroll
    for (int r = 0; r < kPackedTapsChunk; ++r) stage[r * Stage::kXRow + tid] = packed_operand<kMath>(x_values[r]);
    Bits* w_stage = stage + Stage::kXElements;
#pragma unroll
    for (int i = 0; i < kWeightsPerThread; ++i) {
      const int item = tid + i * kPackedTapsThreads;
      w_stage[(item / kPackedTapsChunk) * Stage::kWRow + item % kPackedTapsChunk] = packed_operand<kMath>(w_values[i]);
    }
  }
};

// A warp's 32 rows (two m16 tiles) x every column, over one stage's channels. Fragments (g = lane / 4,
// c = lane % 4): TF32 A = x^T from x_s[channel][position] (a0 = X[c][g], a1 = X[c][g + 8], a2 =
// X[c + 4][g], a3 = X[c + 4][g + 8]); 16-bit A by ldmatrix.trans of the same layout; B from
// w_s[column][channel] (b0 at channel c or 2c, b1 four or eight channels on).
template <typename T, Math kMath, int kColumns>
struct PackedTapsMainloop {
  using Bits = PackedBits<T>;
  using Stage = PackedTapsStage<T, kColumns>;
  static constexpr int kTiles = kColumns / 8;
  static constexpr int kStepChannels = kMath == Math::k16Bit ? 16 : 8;
  Accumulator<kMath> acc[2][kTiles];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int n = 0; n < kTiles; ++n) acc[m][n].clear();
    }
  }

  __device__ __forceinline__ void run(const Bits* stage, int warp, int lane) {
    const int g = lane / 4, c = lane % 4;
    const Bits* w_stage = stage + Stage::kXElements;
#pragma unroll
    for (int k0 = 0; k0 < kPackedTapsChunk; k0 += kStepChannels) {
      uint32_t a[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int row = warp * 32 + m * 16;
        if constexpr (kMath == Math::k16Bit) {
          const int matrix = lane / 8;  // (channels 0-7 | 8-15) x (rows 0-7 | 8-15)
          ldmatrix_x4_trans(a[m], stage + (k0 + (matrix / 2) * 8 + lane % 8) * Stage::kXRow + row + (matrix % 2) * 8);
        } else {
          const Bits* x_at = stage + (k0 + c) * Stage::kXRow + row + g;
          a[m][0] = x_at[0], a[m][1] = x_at[8], a[m][2] = x_at[4 * Stage::kXRow], a[m][3] = x_at[4 * Stage::kXRow + 8];
        }
      }
      uint32_t a_big[2][4], a_small[2][4];
      if constexpr (kMath == Math::k3xTF32) {
#pragma unroll
        for (int m = 0; m < 2; ++m) split_tf32(a[m], a_big[m], a_small[m]);
      }
#pragma unroll
      for (int n = 0; n < kTiles; ++n) {
        uint32_t b[2];
        const Bits* w_at = w_stage + (n * 8 + g) * Stage::kWRow + k0;
        if constexpr (kMath == Math::k16Bit) {
          b[0] = *reinterpret_cast<const uint32_t*>(w_at + 2 * c);
          b[1] = *reinterpret_cast<const uint32_t*>(w_at + 2 * c + 8);
        } else {
          b[0] = w_at[c], b[1] = w_at[c + 4];
        }
        if constexpr (kMath == Math::k3xTF32) {  // (mma_step's products, A split once a k-step, not once a tile)
          uint32_t b_big[2], b_small[2];
          split_tf32(b, b_big, b_small);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            mma_tf32(acc[m][n].correction, a_small[m], b_big);
            mma_tf32(acc[m][n].correction, a_big[m], b_small);
            mma_tf32(acc[m][n].main, a_big[m], b_big);
          }
        } else {
#pragma unroll
          for (int m = 0; m < 2; ++m) mma_step<T, kMath>(acc[m][n], a[m], b);
        }
      }
    }
  }
};

template <typename T, Math kMath, int kColumns>
__global__ void __launch_bounds__(kPackedTapsThreads)
    packed_taps_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y,
                               const ConvTParams p, const PackedTapsPlan plan) {
  begin_dependent_grid();
  using Bits = PackedBits<T>;
  using Stage = PackedTapsStage<T, kColumns>;
  extern __shared__ __align__(16) unsigned char smem[];
  Bits* stages = reinterpret_cast<Bits*>(smem);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;

  // (batch element, group) row and its outputs; the first input position that reaches them
  const int64_t tile = int64_t(blockIdx.x) % plan.blocks_per_row, row = int64_t(blockIdx.x) / plan.blocks_per_row;
  const int64_t group = row % p.groups, n = row / p.groups;
  const int64_t first_output = tile * plan.outputs;
  const int64_t first_position = floor_div(first_output + p.padding - (p.kernel_size - 1) * p.dilation, p.stride);
  const Bits* x_rows = reinterpret_cast<const Bits*>(x) + n * p.x_batch_stride + group * p.in_channels_per_group * p.x_channel_stride;
  const Bits* w_rows = reinterpret_cast<const Bits*>(w) + group * p.in_channels_per_group * p.w_in_stride;

  PackedTapsLoader<T, kMath, kColumns> loader;
  PackedTapsMainloop<T, kMath, kColumns> mainloop;
  mainloop.clear();
  loader.load(x_rows, w_rows, p, first_position + tid, 0, tid);
  loader.store(stages, tid);
  __syncthreads();
  for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
    const bool next = chunk + 1 < plan.chunks;
    if (next) loader.load(x_rows, w_rows, p, first_position + tid, chunk + 1, tid);  // (in flight during the MMAs)
    mainloop.run(stages + (chunk % 2) * Stage::kElements, warp, lane);
    if (next) loader.store(stages + ((chunk + 1) % 2) * Stage::kElements, tid);
    __syncthreads();
  }

  // Y[r, column] to shared memory (the stages are free: the loop ended on a barrier)
  float* sums = reinterpret_cast<float*>(smem);
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int t = 0; t < kColumns / 8; ++t) {
      float* at = sums + (warp * 32 + m * 16 + g) * Stage::kSumRow + t * 8 + 2 * c;
      at[0] = mainloop.acc[m][t].value(0), at[1] = mainloop.acc[m][t].value(1);
      at[8 * Stage::kSumRow] = mainloop.acc[m][t].value(2), at[8 * Stage::kSumRow + 1] = mainloop.acc[m][t].value(3);
    }
  }
  __syncthreads();

  // Output j = first_output + t of channel co sums Y[row, co * K + tap] over the taps whose input
  // position first_position + row, row = (u - tap * dilation) / stride with u = t + base, is whole and
  // in [0, L_in) (docs/design.md §3.9). base = first_output + padding - first_position * stride lies in
  // [(K - 1) * dilation, (K - 1) * dilation + stride), so u - tap * dilation >= 0: 32-bit arithmetic.
  // Those taps are tap_step = stride / gcd(stride, dilation) apart, their rows row_step = dilation /
  // gcd apart: an output walks at most tap_step taps to its first (one division), then only its own.
  // Consecutive threads take consecutive outputs.
  const int stride = int(p.stride), dilation = int(p.dilation), taps = int(p.kernel_size);
  int common = stride;
  for (int rest = dilation; rest != 0;) {
    const int next = common % rest;
    common = rest, rest = next;
  }
  const int tap_step = stride / common, row_step = dilation / common;
  const int dilation_rows = dilation / stride, dilation_rest = dilation % stride;
  const int base = int(first_output + p.padding - first_position * p.stride);
  const int first_row = first_position < 0 ? int(-first_position) : 0;
  const int end_row = p.length_in - first_position < kPackedTapsRows ? int(p.length_in - first_position) : kPackedTapsRows;
  const int outputs = int(plan.outputs < p.length_out - first_output ? plan.outputs : p.length_out - first_output);
  const int64_t first_co = group * p.out_channels_per_group;
  T* y_at = y + n * p.y_batch_stride + first_co * p.y_channel_stride + first_output * p.y_length_stride;
  for (int t = tid; t < outputs; t += kPackedTapsThreads) {
    const int u = t + base;
    int first_tap = 0, first_tap_row = u / stride, rest = u % stride;
    while (rest != 0 && first_tap < tap_step) {  // (u - tap * dilation: the next tap's row and remainder)
      ++first_tap, first_tap_row -= dilation_rows, rest -= dilation_rest;
      if (rest < 0) rest += stride, first_tap_row -= 1;
    }
    if (rest != 0) first_tap = taps;  // (no tap reaches this output)
    for (int co = 0; co < int(p.out_channels_per_group); ++co) {
      const float* co_sums = sums + co * taps;
      float sum = 0.0f;
      for (int tap = first_tap, row = first_tap_row; tap < taps; tap += tap_step, row -= row_step) {
        if (row >= first_row && row < end_row) sum += co_sums[row * Stage::kSumRow + tap];
      }
      if (bias != nullptr) sum += to_float(bias[first_co + co]);
      y_at[co * p.y_channel_stride + t * p.y_length_stride] = from_float<T>(sum);
    }
  }
}

}  // namespace convt::cuda
