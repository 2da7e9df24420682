// Tensor-core forward: the polyphase implicit GEMM of DESIGN.md §3, native NCL.
//
// A (persistent) block walks tiles: batch element n, group g, a tile of kMmaBlockM output channels and
// block_n outputs m of every phase (output positions j = m*stride + phase). For each phase it runs
//   Y_phase[co, m] = sum over the phase's taps k and input channels ci of W[ci, co, k] * X[ci, m - shift_k]
// (convt.h) as an implicit GEMM on mma.sync, 8 warps in a 2 x 4 grid, accumulators in registers,
// staging per chunk of input channels
//   w_s[tap][co][ci]  weight taps, copied from the pre-packed weight (pack_weight_kernel)
//   x_s               x[n, ci, i0 + pos] for every position the tile's taps read: float as [ci][pos]
//                     by cp.async, double-buffered across tiles when the weight is resident; 16-bit as
//                     [pos][ci] (ci pairs per word)
// and writes the phase's outputs, plus bias, straight to y.
#pragma once

#include "convt.h"
#include "cuda/mma.cuh"

namespace convt::cuda {

constexpr int kMmaWarpsM = 2, kMmaWarpsN = 4, kMmaThreads = 32 * kMmaWarpsM * kMmaWarpsN;
constexpr int kMmaBlockM = 64;  // output channels per block: 2 warps x 2 m16 tiles
constexpr int kMmaWarpTilesM = kMmaBlockM / (kMmaWarpsM * 16);
constexpr int kMmaWarpTilesN = 4;  // n8 tiles per warp: a block covers 4 * 4 * 8 = 128 outputs m per phase

// The launch geometry and shared-memory layout of one problem, computed on the host (make_mma_shape).
struct MmaShape {
  int64_t co_tiles, m_tiles, chunks;  // tiles of C_out/groups, of the phase length, chunks of C_in/groups
  int block_n;                        // outputs m per phase in a tile (kMmaWarpsN * kMmaWarpTilesN * 8)
  int chunk;                          // input channels per chunk (a multiple of 16)
  int row_words;                      // words per row of w_s and x_s: chunk words + 4 (conflict-free fragments)
  int x_rows;                         // positions x_s holds: block_n + shift_max - shift_min
  int x_words;                        // words of one x_s buffer
  int x_buffers;                      // 2 when float x tiles are prefetched (cp.async) while computing
  int weight_slots;                   // taps w_s holds: K (resident weight) or the most taps of one phase
  int64_t shift_max;                  // shift of the last tap: x_s row 0 is input m0 - shift_max
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

// B fragment from float x_s[ci][pos] (channel rows, row stride x_row_words ≡ 8 mod 32: conflict-free):
// b0 = X[ci = word + lane%4][pos = lane/4], b1 = X[ci + 4][pos]. base points at (word, first position).
__device__ __forceinline__ void load_b_channel_rows(uint32_t (&b)[2], const uint32_t* base, int x_row_words, int lane) {
  const int n = lane / 4, c = lane % 4;
  b[0] = base[c * x_row_words + n];
  b[1] = base[(c + 4) * x_row_words + n];
}

// 4-byte asynchronous copy global -> shared, zero-filled when !inside (src is then not read).
__device__ __forceinline__ void cp_async_4(uint32_t* shared, const void* global, bool inside) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global), "r"(inside ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

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

// One element as stored in shared memory or the packed weight: TF32 rounded to nearest for kTF32 (so
// weight fragments need no conversion), float32 bits for 3xTF32 (split at fragment load), the 16-bit
// value itself otherwise. (Float x tiles arrive raw by cp.async and are rounded at fragment load.)
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

// The weight packed once per call in the order and form the kernel stages it: words
// packed[g][co_tile][chunk][k][co][row_words], each word as store_operand writes it, zero padded.
// The weight packed once per call in the order and form the kernel stages it: words
// packed[g][co_tile][chunk][k][co][row_words], each word as store_operand writes it, zero padded.
template <typename T, Math kMath>
__global__ void pack_weight_kernel(const T* __restrict__ w, uint32_t* __restrict__ packed, ConvTParams p, MmaShape t) {
  constexpr int kElementsPerWord = kMath == Math::k16Bit ? 2 : 1;
  const int64_t row_elements = int64_t(t.row_words) * kElementsPerWord;
  const int64_t count = p.groups * t.co_tiles * t.chunks * p.kernel_size * kMmaBlockM * row_elements;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += int64_t(blockDim.x) * gridDim.x) {
    int64_t rest = e;
    const int64_t ci = rest % row_elements;
    rest /= row_elements;
    const int64_t co = rest % kMmaBlockM;
    rest /= kMmaBlockM;
    const int64_t k = rest % p.kernel_size;
    rest /= p.kernel_size;
    const int64_t chunk = rest % t.chunks;
    rest /= t.chunks;
    const int64_t co_tile = rest % t.co_tiles, g = rest / t.co_tiles;
    const int64_t ci_in_group = chunk * t.chunk + ci, co_in_group = co_tile * kMmaBlockM + co;
    const bool inside = ci < t.chunk && ci_in_group < p.in_channels_per_group && co_in_group < p.out_channels_per_group;
    const T value = inside ? w[(g * p.in_channels_per_group + ci_in_group) * p.w_in_stride +
                               co_in_group * p.w_out_stride + k * p.w_tap_stride]
                           : from_float<T>(0.0f);
    store_operand<T, kMath>(packed, e, value);
  }
}

template <typename T, Math kMath>
__global__ void __launch_bounds__(kMmaThreads, 2) forward_mma_kernel(const T* __restrict__ x,
                                                                  const uint32_t* __restrict__ packed_w,
                                                                  const T* __restrict__ bias, T* __restrict__ y,
                                                                  ConvTParams p, MmaShape t) {
  constexpr int kElementsPerWord = kMath == Math::k16Bit ? 2 : 1;
  // float x tiles: x_s[ci][pos] (raw float32), filled by cp.async; 16-bit: x_s[pos][ci] (pairs of ci per word)
  constexpr bool kChannelRows = kMath != Math::k16Bit;
  constexpr int kNTiles = kMmaWarpTilesN;
  constexpr int kWarpN = kNTiles * 8;  // outputs m per warp
  extern __shared__ __align__(16) uint32_t smem[];
  const int tile_words = kMmaBlockM * t.row_words;  // one tap of w_s
  uint32_t* w_s = smem;                             // [weight_slots][kMmaBlockM][row_words]
  uint32_t* x_buffers = w_s + t.weight_slots * tile_words;  // x_buffers of x_words each
  const int x_row_words = t.x_words / t.chunk;      // kChannelRows: words per channel row
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_row = (warp % kMmaWarpsM) * kMmaWarpTilesM * 16, warp_col = (warp / kMmaWarpsM) * kWarpN;
  // With one chunk and every tap in shared memory (weight_slots == K) the weight stays resident
  // while the block walks its tiles; otherwise each (phase, chunk) stages that phase's taps.
  const bool resident = t.chunks == 1 && t.weight_slots == p.kernel_size;
  const bool prefetch = t.x_buffers == 2;  // resident float: x of the next tile loads during this one
  // stride 1 and even rows: a lane's two adjacent outputs go out as one aligned 2-element store
  const bool paired_stores = p.stride == 1 && p.length_out % 2 == 0;
  int64_t resident_key = -1;               // (group, co tile) whose weight w_s holds

  // Persistent blocks: tile -> (m tile, n, group, co tile), m tile fastest.
  struct TileCoords {
    int64_t m0, n, g, co_tile, weight_key;
  };
  auto coords = [&](int64_t tile) {
    const int64_t weight_key = tile / (t.m_tiles * p.batch);
    return TileCoords{(tile % t.m_tiles) * t.block_n, (tile / t.m_tiles) % p.batch, weight_key % p.groups,
                      weight_key / p.groups, weight_key};
  };
  // x_s = x[n, g*Cig + chunk*t.chunk + ci, m0 - shift_max + pos], zero outside [0, L_in) and the group;
  // a warp per channel row, lanes along positions (coalesced reads). Float: asynchronous (commit/wait by
  // the caller); 16-bit: synchronous.
  auto stage_x = [&](const TileCoords& c, int64_t chunk, uint32_t* x_s) {
    const int64_t i0 = c.m0 - t.shift_max;
    const T* x_group = x + c.n * p.x_batch_stride + c.g * p.in_channels_per_group * p.x_channel_stride;
    for (int ci = warp; ci < t.chunk; ci += kMmaWarpsM * kMmaWarpsN) {
      const int64_t ci_in_group = chunk * t.chunk + ci;
      const bool channel_inside = ci_in_group < p.in_channels_per_group;
      const T* x_row = x_group + ci_in_group * p.x_channel_stride;
#pragma unroll 4
      for (int pos = lane; pos < t.x_rows; pos += 32) {
        const int64_t i = i0 + pos;
        const bool inside = channel_inside && i >= 0 && i < p.length_in;
        if constexpr (kChannelRows) {
          cp_async_4(x_s + ci * x_row_words + pos, inside ? x_row + i * p.x_length_stride : x, inside);
        } else {
          store_operand<T, kMath>(x_s, int64_t(pos) * t.row_words * kElementsPerWord + ci,
                                  inside ? x_row[i * p.x_length_stride] : from_float<T>(0.0f));
        }
      }
    }
  };
  // stage_x and wait for it (the non-prefetching paths)
  auto stage_x_now = [&](const TileCoords& c, int64_t chunk, uint32_t* x_s) {
    stage_x(c, chunk, x_s);
    if constexpr (kChannelRows) {
      cp_async_commit();
      cp_async_wait<0>();
    }
  };
  // w_s = the packed weight of every tap (resident) or of the taps of `phase`, 16-byte copies
  auto stage_weight = [&](const TileCoords& c, int64_t chunk, int64_t phase) {
    const uint32_t* w_tile = packed_w + c.weight_key * t.chunks * p.kernel_size * tile_words;
    int slot = 0;
    for (int64_t k = 0; k < p.kernel_size; ++k) {
      if (!resident && tap_of(k, p.stride, p.padding, p.dilation).phase != phase) continue;
      const uint4* from = reinterpret_cast<const uint4*>(w_tile + (chunk * p.kernel_size + k) * tile_words);
      uint4* to = reinterpret_cast<uint4*>(w_s + slot * tile_words);
      for (int v = threadIdx.x; v < tile_words / 4; v += kMmaThreads) to[v] = from[v];
      ++slot;
    }
  };

  if (prefetch && blockIdx.x < t.m_tiles * p.batch * p.groups * t.co_tiles) {
    stage_x(coords(blockIdx.x), 0, x_buffers);
    cp_async_commit();
  }
  int buffer = 0;
  const int64_t tiles = t.m_tiles * p.batch * p.groups * t.co_tiles;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, buffer ^= prefetch ? 1 : 0) {
    const TileCoords c = coords(tile);
    uint32_t* x_s = x_buffers + buffer * t.x_words;
    if (prefetch) {
      // x of the next tile goes to the other buffer while this one computes
      if (tile + gridDim.x < tiles) stage_x(coords(tile + gridDim.x), 0, x_buffers + (buffer ^ 1) * t.x_words);
      cp_async_commit();
      if (c.weight_key != resident_key) stage_weight(c, 0, -1);
      resident_key = c.weight_key;
      cp_async_wait<1>();  // this tile's x has landed
      __syncthreads();
    } else if (t.chunks == 1) {
      // one chunk: x once per tile (and a resident weight when the tile's weight changes)
      __syncthreads();  // the previous tile's fragments are consumed
      stage_x_now(c, 0, x_s);
      if (resident && c.weight_key != resident_key) stage_weight(c, 0, -1);
      resident_key = c.weight_key;
      __syncthreads();
    }
    for (int64_t phase = 0; phase < p.stride; ++phase) {
      float acc[kMmaWarpTilesM][kNTiles][4] = {};
      bool phase_has_taps = false;  // with stride > the kernel's span some phases get bias only
      for (int64_t k = 0; k < p.kernel_size; ++k) phase_has_taps |= tap_of(k, p.stride, p.padding, p.dilation).phase == phase;
      for (int64_t chunk = 0; phase_has_taps && chunk < t.chunks; ++chunk) {
        if (!resident) {  // this phase's taps (and, with several chunks, this chunk of x)
          __syncthreads();
          if (t.chunks > 1) stage_x_now(c, chunk, x_s);
          stage_weight(c, chunk, phase);
          __syncthreads();
        }
        int slot = 0;
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          if (tap.phase != phase) continue;
          // output m of the tile reads x_s position (m - m0) + (shift_max - shift_k)
          const int x_pos = warp_col + int(t.shift_max - tap.shift);
          const uint32_t* w_tap = w_s + (resident ? k : slot) * tile_words + warp_row * t.row_words;
          ++slot;
          for (int word = 0; word < t.chunk / kElementsPerWord; word += 8) {
            uint32_t a[kMmaWarpTilesM][4], b[kNTiles][2];
#pragma unroll
            for (int mt = 0; mt < kMmaWarpTilesM; ++mt) load_a(a[mt], w_tap + mt * 16 * t.row_words + word, t.row_words, lane);
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) {
              if constexpr (kChannelRows) {
                load_b_channel_rows(b[nt], x_s + word * x_row_words + x_pos + nt * 8, x_row_words, lane);
                if constexpr (kMath == Math::kTF32) {  // round to nearest TF32 (the weight is packed rounded)
                  b[nt][0] = to_tf32(__uint_as_float(b[nt][0]));
                  b[nt][1] = to_tf32(__uint_as_float(b[nt][1]));
                }
              } else {
                load_b(b[nt], x_s + (x_pos + nt * 8) * t.row_words + word, t.row_words, lane);
              }
            }
#pragma unroll
            for (int mt = 0; mt < kMmaWarpTilesM; ++mt)
#pragma unroll
              for (int nt = 0; nt < kNTiles; ++nt) mma_step<T, kMath>(acc[mt][nt], a[mt], b[nt]);
          }
        }
      }
      // y[n, co, m*stride + phase] = acc + bias. Accumulator element e of tile (mt, nt) sits at
      // row lane/4 (+8 for e >= 2) and column 2*(lane%4) + e%2 of the tile.
#pragma unroll
      for (int mt = 0; mt < kMmaWarpTilesM; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t co = c.co_tile * kMmaBlockM + warp_row + mt * 16 + lane / 4 + half * 8;
          if (co >= p.out_channels_per_group) continue;
          const int64_t channel = c.g * p.out_channels_per_group + co;
          const float bias_value = bias ? to_float(bias[channel]) : 0.0f;
          T* y_row = y + (c.n * p.out_channels + channel) * p.length_out;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
            const int64_t m = c.m0 + warp_col + nt * 8 + 2 * (lane % 4);  // this lane's columns m, m + 1
            const float v0 = acc[mt][nt][half * 2] + bias_value, v1 = acc[mt][nt][half * 2 + 1] + bias_value;
            if (paired_stores && m + 1 < p.length_out) {
              store_pair(y_row + m, v0, v1);  // a quad of lanes fills whole 32-byte sectors
            } else {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int64_t j = (m + e) * p.stride + phase;
                if (j < p.length_out) y_row[j] = from_float<T>(e == 0 ? v0 : v1);
              }
            }
          }
        }
    }
    if (prefetch) __syncthreads();  // this buffer is consumed before the next prefetch overwrites it
  }
  if (prefetch) cp_async_wait<0>();
}

}  // namespace convt::cuda
