// Tensor-core forward: the polyphase implicit GEMM of DESIGN.md §3, native NCL.
//
// A block owns batch element n, group g, a tile of kBlockM output channels and a tile of kBlockN
// outputs m of every phase, i.e. the kBlockN*stride consecutive output positions
// j in [m0*stride, (m0 + kBlockN)*stride). For each chunk of the group's input channels it stages
//   w_s[k][co][ci]  the weight of every tap (ci contiguous, "K-major"),
//   x_s[pos][ci]    x[n, ci, i0 + pos] for the positions every tap of the tile reads,
// then for each phase runs GEMM  Y_phase[co, m] += sum over taps k of that phase, ci:
//   W[ci, co, k] * X[ci, m - shift_k]   (convt.h: j = (m)*stride + phase, i = m - shift_k)
// with mma.sync, 8 warps in a 2 x 4 grid. Results of every phase are interleaved in out_s[co][j]
// (float32; also the accumulator between chunks), and the epilogue adds the bias and writes the
// block's rows of y with coalesced stores.
#pragma once

#include "convt.h"
#include "cuda/mma.cuh"

namespace convt::cuda {

constexpr int kMmaWarpsM = 2, kMmaWarpsN = 4, kMmaThreads = 32 * kMmaWarpsM * kMmaWarpsN;
constexpr int kMmaBlockM = 64;  // output channels per block: 2 warps x 2 m16 tiles
constexpr int kMmaWarpTilesM = kMmaBlockM / (kMmaWarpsM * 16);

// The launch geometry and shared-memory layout of one problem, computed on the host (make_mma_shape).
struct MmaShape {
  int64_t co_tiles, m_tiles;  // tiles of C_out/groups and of the phase length
  int block_n;                // outputs m per phase in a tile (kMmaWarpsN * n_tiles * 8)
  int chunk;                  // input channels per shared-memory stage (a multiple of 16)
  int row_words;              // words per row of w_s and x_s: chunk words + 4 (conflict-free fragments)
  int x_rows;                 // positions in x_s: block_n + shift_max - shift_min
  int out_cols;               // columns of out_s: block_n*stride + 4
  int64_t shift_min, shift_max;
  size_t smem_bytes;
};

// Word (4-byte) fragment loads shared by every math mode: a k-step covers 8 words of a row
// (8 TF32 values or 16 bf16/fp16 values). base points at word 0 of the tile's first row.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint32_t* base, int row_words, int lane) {
  const int r = lane / 4, c = lane % 4;
  a[0] = base[r * row_words + c];
  a[1] = base[(r + 8) * row_words + c];
  a[2] = base[r * row_words + c + 4];
  a[3] = base[(r + 8) * row_words + c + 4];
}
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const uint32_t* base, int row_words, int lane) {
  const int n = lane / 4, c = lane % 4;
  b[0] = base[n * row_words + c];
  b[1] = base[n * row_words + c + 4];
}

// big + small TF32 parts of float32 values (3xTF32)
template <int N>
__device__ __forceinline__ void split_tf32(const uint32_t (&v)[N], uint32_t (&big)[N], uint32_t (&small)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float value = __uint_as_float(v[e]);
    big[e] = to_tf32(value);
    small[e] = to_tf32(value - __uint_as_float(big[e]));
  }
}

template <typename T, Math kMath>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kMath == Math::kTF32) {
    mma_tf32(d, a, b);
  } else if constexpr (kMath == Math::k3xTF32) {
    uint32_t a_big[4], a_small[4], b_big[2], b_small[2];
    split_tf32(a, a_big, a_small);
    split_tf32(b, b_big, b_small);
    mma_tf32(d, a_small, b_big);
    mma_tf32(d, a_big, b_small);
    mma_tf32(d, a_big, b_big);
  } else {
    mma_16bit<T>(d, a, b);
  }
}

// One element as stored in shared memory: TF32 rounded to nearest for kTF32 (so fragments need no
// conversion), float32 bits for 3xTF32 (split at fragment load), the 16-bit value itself otherwise.
template <typename T, Math kMath>
__device__ __forceinline__ void store_operand(uint32_t* words, int64_t element, T value) {
  if constexpr (kMath == Math::kTF32) {
    words[element] = to_tf32(to_float(value));
  } else if constexpr (kMath == Math::k3xTF32) {
    words[element] = __float_as_uint(to_float(value));
  } else {
    reinterpret_cast<T*>(words)[element] = value;
  }
}

template <typename T, Math kMath, int kNTiles>
__global__ void __launch_bounds__(kMmaThreads) forward_mma_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                  const T* __restrict__ bias, T* __restrict__ y,
                                                                  ConvTParams p, MmaShape t) {
  constexpr int kElementsPerWord = kMath == Math::k16Bit ? 2 : 1;
  constexpr int kWarpN = kNTiles * 8;  // outputs m per warp
  extern __shared__ __align__(16) uint32_t smem[];
  uint32_t* w_s = smem;                                          // [K][kMmaBlockM][row_words]
  uint32_t* x_s = w_s + p.kernel_size * kMmaBlockM * t.row_words;  // [x_rows][row_words]
  float* out_s = reinterpret_cast<float*>(x_s + t.x_rows * t.row_words);  // [kMmaBlockM][out_cols]

  // blockIdx.x -> (co tile, m tile, group, n), co tile fastest so that the blocks sharing an x tile run together
  int64_t block = blockIdx.x;
  const int64_t co_tile = block % t.co_tiles;
  block /= t.co_tiles;
  const int64_t m_tile = block % t.m_tiles;
  block /= t.m_tiles;
  const int64_t g = block % p.groups, n = block / p.groups;
  const int64_t co0 = co_tile * kMmaBlockM;  // within the group
  const int64_t m0 = m_tile * t.block_n;
  const int64_t i0 = m0 - t.shift_max;  // x position of x_s row 0
  const int64_t ci_group = g * p.in_channels_per_group, co_group = g * p.out_channels_per_group;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_row = (warp % kMmaWarpsM) * kMmaWarpTilesM * 16, warp_col = (warp / kMmaWarpsM) * kWarpN;
  const int chunk_elements = t.chunk;  // input channels per stage

  for (int64_t c0 = 0; c0 < p.in_channels_per_group; c0 += chunk_elements) {
    __syncthreads();  // the previous chunk's fragments are consumed
    // w_s[k][co][ci] = w[ci_group + c0 + ci, co0 + co, k]; zero outside the group / tile
    for (int64_t e = threadIdx.x; e < int64_t(p.kernel_size) * kMmaBlockM * chunk_elements; e += kMmaThreads) {
      const int64_t k = e % p.kernel_size, co = (e / p.kernel_size) % kMmaBlockM,
                    ci = e / (p.kernel_size * kMmaBlockM);
      const bool inside = c0 + ci < p.in_channels_per_group && co0 + co < p.out_channels_per_group;
      const T value = inside ? w[(ci_group + c0 + ci) * p.w_in_stride + (co0 + co) * p.w_out_stride + k * p.w_tap_stride]
                             : from_float<T>(0.0f);
      store_operand<T, kMath>(w_s, (k * kMmaBlockM + co) * t.row_words * kElementsPerWord + ci, value);
    }
    // x_s[pos][ci] = x[n, ci_group + c0 + ci, i0 + pos]; zero outside [0, L_in) and the group
    for (int64_t e = threadIdx.x; e < int64_t(t.x_rows) * chunk_elements; e += kMmaThreads) {
      const int64_t pos = e % t.x_rows, ci = e / t.x_rows, i = i0 + pos;
      const bool inside = c0 + ci < p.in_channels_per_group && i >= 0 && i < p.length_in;
      const T value =
          inside ? x[n * p.x_batch_stride + (ci_group + c0 + ci) * p.x_channel_stride + i * p.x_length_stride]
                 : from_float<T>(0.0f);
      store_operand<T, kMath>(x_s, pos * t.row_words * kElementsPerWord + ci, value);
    }
    __syncthreads();

    for (int64_t phase = 0; phase < p.stride; ++phase) {
      float acc[kMmaWarpTilesM][kNTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMmaWarpTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            // accumulator element e of tile (mt, nt): row lane/4 (+8 for e >= 2), column 2*(lane%4) + e%2
            const int row = warp_row + mt * 16 + lane / 4 + (e / 2) * 8;
            const int m = warp_col + nt * 8 + 2 * (lane % 4) + e % 2;
            acc[mt][nt][e] = c0 == 0 ? 0.0f : out_s[row * t.out_cols + m * p.stride + phase];
          }
      for (int64_t k = 0; k < p.kernel_size; ++k) {
        const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
        if (tap.phase != phase) continue;
        // output m of the tile reads x_s row (m - m0) + (shift_max - shift_k)
        const int x_row = warp_col + int(t.shift_max - tap.shift);
        const uint32_t* w_tap = w_s + (k * kMmaBlockM + warp_row) * t.row_words;
        const uint32_t* x_tap = x_s + x_row * t.row_words;
        for (int word = 0; word < chunk_elements / kElementsPerWord; word += 8) {
          uint32_t a[kMmaWarpTilesM][4], b[kNTiles][2];
#pragma unroll
          for (int mt = 0; mt < kMmaWarpTilesM; ++mt) load_a(a[mt], w_tap + mt * 16 * t.row_words + word, t.row_words, lane);
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) load_b(b[nt], x_tap + nt * 8 * t.row_words + word, t.row_words, lane);
#pragma unroll
          for (int mt = 0; mt < kMmaWarpTilesM; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) mma_step<T, kMath>(acc[mt][nt], a[mt], b[nt]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMmaWarpTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = warp_row + mt * 16 + lane / 4 + (e / 2) * 8;
            const int m = warp_col + nt * 8 + 2 * (lane % 4) + e % 2;
            out_s[row * t.out_cols + m * p.stride + phase] = acc[mt][nt][e];
          }
    }
  }
  __syncthreads();

  // epilogue: y[n, co_group + co0 + row, m0*stride + col] = out_s[row][col] + bias
  const int64_t tile_cols = int64_t(t.block_n) * p.stride, j0 = m0 * p.stride;
  for (int64_t e = threadIdx.x; e < kMmaBlockM * tile_cols; e += kMmaThreads) {
    const int64_t row = e / tile_cols, col = e % tile_cols;
    const int64_t co = co0 + row, j = j0 + col;
    if (co >= p.out_channels_per_group || j >= p.length_out) continue;
    float value = out_s[row * t.out_cols + col];
    if (bias) value += to_float(bias[co_group + co]);
    y[(n * p.out_channels + co_group + co) * p.length_out + j] = from_float<T>(value);
  }
}

}  // namespace convt::cuda
