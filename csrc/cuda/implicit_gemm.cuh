// Tensor-core implicit GEMM for the forward and for grad_input (DESIGN.md §3), native NCL.
//
// Both are the same problem with roles swapped. Writing tap k's offset k*dilation - padding as
// shift_k*stride + phase_k (convt.h):
//   forward     y[n, co, m*stride + r]  = bias[co] + sum_{k: phase_k = r} sum_ci W[ci, co, k] x[n, ci, m - shift_k]
//   grad_input  gx[n, ci, i]            =            sum_k sum_co W[ci, co, k] gy[n, co, (i + shift_k)*stride + phase_k]
// so one kernel computes
//   out[n, row, col*out_step + out_phase] = bias[row]
//       + sum_{taps t of out_phase} sum_ch A_t[row, ch] * in[n, ch, (col + offset_t)*in_step + in_phase_t]
// with (rows, channels, out_step, in_step, offset_t, out_phase_t, in_phase_t) =
//   forward     (C_out, C_in,  stride, 1,      -shift_k, phase_k, 0)
//   grad_input  (C_in,  C_out, 1,      stride, +shift_k, 0,       phase_k)
// per group, A_t being W[:, :, k] seen as (rows x channels). GemmProblem carries this.
//
// Merged phases (the strided forward on warpgroup tiles, where dilation is 1 and stride divides K):
// with phase_origin = padding mod stride, tap k = t*stride + r feeds out position
// col*stride + r - phase_origin from in[col - t + padding div stride], for every phase r alike. So
// the phases become rows: row R = co*stride + r of A_t is W[:, co, t*stride + r], one problem with
// out_step 1, stride*C_out rows and K/stride taps, every x chunk staged once for all phases, and a
// thread's adjacent rows store adjacent out positions (row_phases, phase_origin). grad_input the
// same way round: tap k = t*stride + r reads grad_y[(i + t)*stride + r - padding], so the phases
// become channels: channel (co, r) at column m is grad_y[co, m*stride + r - padding], and A_t's
// column (co, r) is W[:, co, t*stride + r]: stride*C_out channels, K/stride taps, grad_y rows
// staged whole in 16-byte copies and read phase by phase by the fragment loads (channel_phases).
//
// A tile is (n, group, block_m rows, block_n columns col0 + [0, block_n) of every out_phase), i.e.
// block_n*out_step consecutive out positions. It runs in steps (out_phase, in_phase, chunk of
// channels), visiting only phases that have taps (persistent blocks walk the tiles, or with direct
// stores each out_phase of a tile on its own: GemmProblem::tile_parts). Each step stages in shared memory
//   x_s[ch][pos]   in[n, ch, (col0 + first_offset - lead + pos)*in_step + in_phase], zero outside
//   w_s[slot]      A of the step's taps, in mma fragment order (pack_gemm_weight_kernel)
// and runs mma.sync on 8 warps (warp tiles of 16, 32 or 64 rows x 32 columns; see kBlockMOf). Steps are
// double-buffered with cp.async: the next step's loads fly while this one computes. When the weight
// of a row tile (every chunk and tap) fits, it stays resident and only x moves. Float x is rounded
// to TF32 once in shared memory. Output: when phases interleave (out_step > 1) and it fits, each
// out_phase's accumulators go to y_s[row][position], and at the end of the tile every out position
// of the tile, phases without taps included (bias only), is written from y_s in 16-byte vectors by
// whole warps along the row; otherwise the accumulators are stored directly (two adjacent outputs
// per store at out_step 1).
#pragma once

#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "plan.h"
#include "problem.h"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// Tile shapes: 8 warps in a kWarpsM x (8 / kWarpsM) grid, each with kWarpTilesM m16 x kWarpTilesN n8
// mma tiles: 32 x 128 (<1, 2>), 64 x 128 (<2, 2>), 128 x 64 (<2, 4>), 64 x 256 (<4, 1>) or
// 128 x 128 (<4, 2>) rows x columns. The last two (64-row warp tiles) are for TF32 and 16-bit only:
// 3xTF32's two sets of accumulators would spill.
// Warpgroup tiles (wgmma, sm_90a; TF32 and 16-bit): 128 x 128 (<4, 2>) with the roles of the operands
// turned around, out^T = in^T A^T: each of the two warpgroups computes 64 columns x the 128 rows,
// in^T (64 columns x 8 or 16 channels) from registers loaded out of x_s, A^T from the step's weight
// slot in shared memory (the swizzled layout of wgmma.cuh, pack_gemm_weight_kernel). Warpgroup
// problems of one phase pair with contiguous rows run pipelined instead where they plan
// (pipelined_gemm.cuh: the same tiles, 256 columns wide, fed by a producer warp's bulk copies).
constexpr int kGemmWarps = 8, kGemmThreads = 32 * kGemmWarps;
constexpr int kWarpTilesN = 4;
template <int kWarpTilesM, int kWarpsM>
constexpr int kBlockMOf = kWarpsM * kWarpTilesM * 16;
template <int kWarpsM>
constexpr int kBlockNOf = kGemmWarps / kWarpsM * kWarpTilesN * 8;

using Divider = at::cuda::detail::IntDivider<unsigned int>;

// The kernels' parameters: the plan (plan.h), and the dividers and tensor map that the launcher
// builds from it (make_gemm_problem).
struct GemmProblem : GemmPlan {
  Divider div_col_tiles, div_row_tiles, div_batch, div_groups, div_chunks, div_in_phases, div_row_copies, div_tile_parts;
  Divider div_row_phases;
  CUtensorMap in_map;  // tensor_rows: `in` as (position, channel, batch)
};

// Which phases a warpgroup problem merges: into rows (row_phases, the forward) or into channels
// (channel_phases, grad_input)
enum class Merge { kNone, kRows, kChannels };

// Where a tile sits. Resident weights: (group, row tile) outermost, so a block keeps its weight;
// otherwise row tiles innermost, so concurrent tiles share their x in L2.
struct GemmTile {
  int64_t n;
  int g, row_tile, col_tile;
  __device__ GemmTile(unsigned tile, const GemmProblem& p) {
    if (p.resident) {
      auto q = p.div_col_tiles.divmod(tile);
      col_tile = int(q.mod);
      q = p.div_batch.divmod(q.div);
      n = q.mod;
      q = p.div_row_tiles.divmod(q.div);
      row_tile = int(q.mod);
      g = int(q.div);
    } else {
      auto q = p.div_row_tiles.divmod(tile);
      row_tile = int(q.mod);
      q = p.div_col_tiles.divmod(q.div);
      col_tile = int(q.mod);
      q = p.div_groups.divmod(q.div);
      g = int(q.mod);
      n = q.div;
    }
  }
  __device__ int64_t weight_key() const { return (int64_t(g) << 32) + row_tile; }
};

// A reduction step of a tile: step = (out_phase * in_phases + in_phase) * chunks + chunk (list
// indices); its taps are step_tap[first_tap, end_tap).
struct GemmStep {
  int out_phase, in_phase, chunk, first_tap, end_tap;
  __device__ GemmStep(int step, const GemmProblem& p) {
    const auto q = p.div_chunks.divmod(unsigned(step));
    const auto phases = p.div_in_phases.divmod(q.div);
    chunk = int(q.mod), in_phase = int(phases.mod), out_phase = int(phases.div);
    first_tap = p.pair_begin[q.div];
    end_tap = p.pair_begin[q.div + 1];
  }
};

// ---- asynchronous copies -------------------------------------------------------------------------

// 4, 8 or 16 bytes global -> shared; the first `bytes` come from global, the rest is zero.
__device__ __forceinline__ void cp_async_4(void* shared, const void* global, int bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_8(void* shared, const void* global, int bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, int bytes = 16) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
// A copy of kSize bytes (16, 8 or 4), the first `bytes` of them from global
template <int kSize>
__device__ __forceinline__ void cp_async(void* shared, const void* global, int bytes) {
  if constexpr (kSize == 16) {
    cp_async_16(shared, global, bytes);
  } else if constexpr (kSize == 8) {
    cp_async_8(shared, global, bytes);
  } else {
    cp_async_4(shared, global, bytes);
  }
}
// `words` words global -> shared by the block, 16 bytes a thread at a time (16-byte aligned, words a
// multiple of 4): one shared address and one pointer stepped per copy
__device__ __forceinline__ void copy_words_async(uint32_t* shared, const uint32_t* global, int words) {
  unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared)) + threadIdx.x * 16;
  const uint32_t* from = global + threadIdx.x * 4;
  for (int v = threadIdx.x * 4; v < words; v += kGemmThreads * 4, to += kGemmThreads * 16, from += kGemmThreads * 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// ---- operands ------------------------------------------------------------------------------------

// big + small TF32 parts of float32 values (3xTF32). A non-finite value makes its small part NaN
// (inf - inf); Accumulator::value drops the correction products then.
template <int N>
__device__ __forceinline__ void split_tf32(const uint32_t (&v)[N], uint32_t (&big)[N], uint32_t (&small)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float value = __uint_as_float(v[e]);
    big[e] = to_tf32(value);
    small[e] = to_tf32(value - __uint_as_float(big[e]));
  }
}

// The four fp32 accumulators of one mma tile. 3xTF32 keeps the big x big products (`main`) apart
// from the two correction products: when an operand is infinite or NaN, main already holds what
// float32 arithmetic gives (inf or NaN) and the corrections (NaN from the split, or 0 x inf) must
// not turn an infinity into NaN. With finite operands the corrections are finite and add in.
template <Math kMath>
struct Accumulator {
  float main[4], correction[4];  // `correction` is dead, so takes no registers, unless kMath is 3xTF32
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int e = 0; e < 4; ++e) main[e] = correction[e] = 0.0f;
  }
  __device__ __forceinline__ float value(int e) const {
    if constexpr (kMath == Math::k3xTF32) return isfinite(main[e]) ? main[e] + correction[e] : main[e];
    return main[e];
  }
};

template <typename T, Math kMath>
__device__ __forceinline__ void mma_step(Accumulator<kMath>& d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kMath == Math::kTF32) {
    mma_tf32(d.main, a, b);
  } else if constexpr (kMath == Math::k3xTF32) {
    uint32_t a_big[4], a_small[4], b_big[2], b_small[2];
    split_tf32(a, a_big, a_small);
    split_tf32(b, b_big, b_small);
    mma_tf32(d.correction, a_small, b_big);
    mma_tf32(d.correction, a_big, b_small);
    mma_tf32(d.main, a_big, b_big);
  } else {
    mma_16bit<T>(d.main, a, b);
  }
}

// B fragment of one n8 tile and k-step from x_s[ch][pos]. `column` points at channel 0 of this lane's
// column (lane / 4); c = lane % 4. TF32 (k8): b0 = X[c][col], b1 = X[c + 4][col] (x_s is already rounded).
// 16-bit (k16): b0 = X[2c, 2c + 1][col], b1 = X[2c + 8, 2c + 9][col], the lower channel in the low half.
// With row_offsets, rows 2c and 2c + 8 (TF32: c and c + 4) sit shifted by shift_low, rows 2c + 1 and
// 2c + 9 by shift_high (row shifts repeat every 4 (float) or 8 (16-bit) channels: GemmProblem).
template <typename T, Math kMath>
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const T* column, int row_elements, int c, int shift_low = 0,
                                       int shift_high = 0) {
  if constexpr (kMath == Math::k16Bit) {
    const unsigned short* x16 = reinterpret_cast<const unsigned short*>(column);
    auto pair = [&](int ch) {
      return uint32_t(x16[ch * row_elements + shift_low]) | (uint32_t(x16[(ch + 1) * row_elements + shift_high]) << 16);
    };
    b[0] = pair(2 * c);
    b[1] = pair(2 * c + 8);
  } else {
    b[0] = __float_as_uint(column[c * row_elements + shift_low]);
    b[1] = __float_as_uint(column[(c + 4) * row_elements + shift_low]);
  }
}

// load_b for merged channels (GemmProblem::channel_phases): this lane's channels of the k-step sit at
// column[phase_low] and column[phase_high], a 16-bit channel pair at two adjacent elements (the next
// phase of the same row: channel_phases is even).
template <typename T, Math kMath>
__device__ __forceinline__ void load_b_merged(uint32_t (&b)[2], const T* column, int phase_low, int phase_high) {
  if constexpr (kMath == Math::k16Bit) {
    const unsigned short* x16 = reinterpret_cast<const unsigned short*>(column);
    b[0] = uint32_t(x16[phase_low]) | (uint32_t(x16[phase_low + 1]) << 16);
    b[1] = uint32_t(x16[phase_high]) | (uint32_t(x16[phase_high + 1]) << 16);
  } else {
    b[0] = __float_as_uint(column[phase_low]);
    b[1] = __float_as_uint(column[phase_high]);
  }
}

// A packed once per call: words packed[g][row_tile][chunk][part][slot][slot_words], where slot i
// holds tap step_tap[i] (the taps of a step are consecutive slots), each word one TF32 value (rounded
// to nearest for kTF32; for 3xTF32 raw float32 bits, split at use, or on pipelined tiles, whose wgmma
// reads A from shared memory, split here: part 0 the big TF32 parts, part 1 the small ones) or two
// 16-bit channels. Zero outside the problem. Within a slot, (row, word) of the block_m x (8 * ksteps)-word tile sits
//   mma.sync tiles:  in fragment order [m16 tile][k-step][lane][4], lane's 4 words rows (lane/4,
//                    lane/4 + 8) x word columns (lane%4, lane%4 + 4) of the m16 x 8-word fragment
//                    (a0 a1 a2 a3 of mma.sync)
//   warpgroup tiles: as B of wgmma (A^T, K-major, swizzled rows of 32 * ksteps bytes; wgmma.cuh)
// A_t[row, ch] = w[...]: GemmWeight (plan.h).

template <typename T, Math kMath>
__global__ void pack_gemm_weight_kernel(const T* __restrict__ w, uint32_t* __restrict__ packed, GemmProblem p,
                                        GemmWeight a, int64_t words) {
  constexpr int kChannelsPerWord = kMath == Math::k16Bit ? 2 : 1;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < words; e += int64_t(blockDim.x) * gridDim.x) {
    const int in_slot = int(e % p.slot_words);
    int tile_row, word;  // of the slot's block_m x (8 * ksteps)-word tile
    if (p.warpgroups) {
      const int row_bytes = p.ksteps * 32, byte = in_slot * 4, atom_row = byte / row_bytes % 8;
      tile_row = byte / row_bytes;
      word = (((byte % row_bytes / 16) ^ swizzle_of_row(atom_row, row_bytes)) * 16 + byte % 16) / 4;
    } else {
      const int part = in_slot % 4, lane = in_slot / 4 % 32, kstep = in_slot / 128 % p.ksteps;
      tile_row = in_slot / (128 * p.ksteps) * 16 + lane / 4 + (part % 2) * 8;
      word = kstep * 8 + lane % 4 + (part / 2) * 4;
    }
    int64_t rest = e / p.slot_words;
    const int part_slot = int(rest % (p.weight_parts * p.taps));
    const int t = p.step_tap[part_slot % p.taps];  // slot i holds tap step_tap[i]
    const bool small_part = part_slot >= p.taps;
    rest /= p.weight_parts * p.taps;
    const int chunk = int(rest % p.chunks);
    rest /= p.chunks;
    const int row_tile = int(rest % p.row_tiles);
    const int64_t g = rest / p.row_tiles;
    const int64_t row = int64_t(row_tile) * p.block_m + tile_row;
    const int64_t w_row = row / p.row_phases;  // (merged phases: GemmProblem::row_phases, channel_phases)
    uint32_t value = 0;
    for (int half = 0; half < kChannelsPerWord; ++half) {
      const int64_t ch = int64_t(chunk) * p.chunk_channels + word * kChannelsPerWord + half;
      const int64_t w_ch = ch / p.channel_phases;
      const int phase = int(row % p.row_phases + ch % p.channel_phases);  // (one of the two is 0)
      const int tap = t * p.row_phases * p.channel_phases + phase;
      const bool inside = row < p.rows_per_group && ch < p.channels_per_group;
      const T element = inside ? w[g * a.group_stride + w_row * a.row_stride + w_ch * a.channel_stride + tap * a.tap_stride]
                               : from_float<T>(0.0f);
      if constexpr (kMath == Math::kTF32) {
        value = to_tf32(to_float(element));
      } else if constexpr (kMath == Math::k3xTF32) {
        const uint32_t raw[1] = {__float_as_uint(to_float(element))};
        uint32_t big[1], small[1];
        split_tf32(raw, big, small);
        value = p.weight_parts == 1 ? raw[0] : small_part ? small[0] : big[0];
      } else {
        value |= uint32_t(*reinterpret_cast<const unsigned short*>(&element)) << (16 * half);
      }
    }
    packed[e] = value;
  }
}

// ---- the kernel ----------------------------------------------------------------------------------

// kShiftedRows: a warpgroup problem with row_offsets (its own instantiation: the shifts' code in the
// tap loop slowed the aligned rows' forward by 2.5-8 %, session 15). kMerge: a warpgroup problem
// with merged phases (its own instantiations, so that the other kernels keep their code).
template <typename T, Math kMath, int kWarpTilesM, int kWarpsM, bool kWarpgroups = false, bool kShiftedRows = false,
          Merge kMerge = Merge::kNone>
__global__ void __launch_bounds__(kGemmThreads, kMath == Math::k3xTF32 ? 1 : 2)  // 3xTF32: room for two accumulators
    implicit_gemm_kernel(const T* __restrict__ in, const uint32_t* __restrict__ packed_w, const T* __restrict__ bias,
                         T* __restrict__ out, const __grid_constant__ GemmProblem p) {
  constexpr int kBlockM = kBlockMOf<kWarpTilesM, kWarpsM>, kBlockN = kBlockNOf<kWarpsM>;
  static_assert(!kWarpgroups || (kMath != Math::k3xTF32 && kBlockM == 128 && kBlockN == 128));
  static_assert(kWarpgroups || kMerge == Merge::kNone);
  extern __shared__ __align__(kMaxSwizzleAtomBytes) uint32_t smem[];  // weight slots first: swizzle atoms aligned
  const int weight_buffers = p.resident ? 1 : 2;
  uint32_t* w_buffers = smem;                                                  // weight_buffers x slots x slot_words
  T* x_buffers = reinterpret_cast<T*>(smem + weight_buffers * p.weight_slots * p.slot_words);  // 2 x x_words
  float* y_s = reinterpret_cast<float*>(smem + weight_buffers * p.weight_slots * p.slot_words + 2 * p.x_words);
  const int x_buffer_elements = p.x_words * 4 / int(sizeof(T));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_mtile = (warp % kWarpsM) * kWarpTilesM;           // first m16 tile of this warp
  const int warp_col = (warp / kWarpsM) * kWarpTilesN * 8;        // first column of this warp
  const int steps = p.out_phases * p.in_phases * p.chunks;          // reduction steps of a tile
  const int phase_steps = p.in_phases * p.chunks;                   // steps of one out_phase
  const int part_steps = p.tile_parts == 1 ? steps : phase_steps;   // steps of one part (tile_parts: 1 or out_phases)
  const int64_t tile_words = int64_t(p.taps) * p.slot_words;        // one (g, row_tile, chunk) of packed_w

  // body(ch, copy) for this thread's copies of x_s: the chunk_channels (merged channels: staged_rows)
  // x row_copies copies of a step spread over the whole block (the staging and the rounding pass walk
  // the same ones)
  auto for_each_x_copy = [&](auto&& body) {
    // (a loop of its own: one loop with the bound chosen by kMerge changed ten float kernels' SASS)
    if constexpr (kMerge == Merge::kChannels) {
      for (int index = threadIdx.x; index < p.staged_rows * p.row_copies; index += kGemmThreads) {
        const auto q = p.div_row_copies.divmod(unsigned(index));
        body(int(q.div), int(q.mod));
      }
      return;
    }
    for (int index = threadIdx.x; index < p.chunk_channels * p.row_copies; index += kGemmThreads) {
      const auto q = p.div_row_copies.divmod(unsigned(index));
      body(int(q.div), int(q.mod));
    }
  };

  // row_offsets: whether a tile's windows, starting at position `first`, go in chunks (a row's shift
  // is elements_past_16_bytes of its window start)
  auto chunked_rows = [](int first) { return first >= 16 / int(sizeof(T)) - 1; };

  // Stage x (and, unless resident, the step's taps of A) for (tile, step) into buffer `buffer`.
  auto stage = [&](const GemmTile& tile, const GemmStep& step, int buffer) {
    if (!p.resident) {  // the step's taps are consecutive slots of packed_w
      const uint32_t* from = packed_w +
          ((int64_t(tile.g) * p.row_tiles + tile.row_tile) * p.chunks + step.chunk) * tile_words + step.first_tap * p.slot_words;
      uint32_t* to = w_buffers + buffer * p.weight_slots * p.slot_words;
      const int words = (step.end_tap - step.first_tap) * p.slot_words;
      copy_words_async(to, from, words);
    }
    // x_s[ch][pos] = in[n, ch, position(pos)], copy_elements at a time
    T* x_s = x_buffers + buffer * x_buffer_elements;
    const int first = tile.col_tile * kBlockN + p.first_offset - p.lead;  // column of x_s position 0
    const int in_phase = p.in_phase_value[step.in_phase];
    const int64_t first_channel = int64_t(tile.g) * p.channels_per_group + int64_t(step.chunk) * p.chunk_channels;
    const T* in_chunk = in + tile.n * p.in_batch_stride + first_channel * p.in_channel_stride;
    auto channel_inside = [&](int ch) { return int64_t(step.chunk) * p.chunk_channels + ch < p.channels_per_group; };
    // one element a copy (in_step > 1, or rows not aligned): pos of x_s reads this position of `in`
    auto element_position = [&](int pos) { return (first + pos) * p.in_step + in_phase; };
    auto element_inside = [&](int ch, int position) { return channel_inside(ch) && position >= 0 && position < p.in_length; };
    if constexpr (kMerge == Merge::kChannels) {  // whole rows of `in`, 16-byte copies (copy_elements)
      constexpr int kChunk = 16 / int(sizeof(T));
      const int64_t group_rows = p.channels_per_group / p.channel_phases;  // rows of `in` a group has
      const int64_t first_row = int64_t(step.chunk) * p.staged_rows;      // of the group
      const T* in_rows = in + tile.n * p.in_batch_stride + (tile.g * group_rows + first_row) * p.in_channel_stride;
      const int first_position = (tile.col_tile * kBlockN + p.first_offset) * p.channel_phases - p.channel_origin - p.lead;
      for_each_x_copy([&](int row, int copy) {
        const int position = first_position + copy * kChunk;  // (a multiple of kChunk: lead)
        const int inside = first_row + row < group_rows && position >= 0 ? max(0, min(kChunk, p.in_length - position)) : 0;
        const T* from = inside ? in_rows + row * p.in_channel_stride + position : in;
        cp_async<16>(x_s + row * p.x_row_elements + copy * kChunk, from, inside * int(sizeof(T)));
      });
      return;
    }
    if constexpr (kShiftedRows) {  // (in_step 1, copy_elements 16 bytes' worth)
      constexpr int kChunk = 16 / int(sizeof(T));
      if (chunked_rows(first)) {  // each row from its window start rounded down to 16 bytes
        for_each_x_copy([&](int ch, int copy) {
          const int position = first - elements_past_16_bytes(in_chunk + ch * p.in_channel_stride + first) + copy * kChunk;
          const int inside = channel_inside(ch) ? max(0, min(kChunk, p.in_length - position)) : 0;
          const T* from = inside ? in_chunk + ch * p.in_channel_stride + position : in;
          cp_async<16>(x_s + ch * p.x_row_elements + copy * kChunk, from, inside * int(sizeof(T)));
        });
      } else {  // the row start is within a chunk: element by element, unshifted
        for_each_x_copy([&](int ch, int copy) {
          T values[kChunk];
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            const int position = first + copy * kChunk + e;
            const bool inside = element_inside(ch, position);
            if constexpr (sizeof(T) == 2) {
              values[e] = inside ? in_chunk[ch * p.in_channel_stride + position] : from_float<T>(0.0f);
            } else {
              cp_async_4(x_s + ch * p.x_row_elements + copy * kChunk + e, inside ? in_chunk + ch * p.in_channel_stride + position : in,
                         inside ? 4 : 0);
            }
          }
          if constexpr (sizeof(T) == 2) {
#pragma unroll
            for (int e = 0; e < kChunk; ++e) x_s[ch * p.x_row_elements + copy * kChunk + e] = values[e];
          }
        });
      }
      return;
    }
    if constexpr (sizeof(T) == 2) {
      if (p.copy_elements == 1) {
        // 16-bit elements have no asynchronous copy: synchronous loads, kLoadsInFlight of them issued
        // before their stores (not one load and its store at a time, each waiting its full latency)
        constexpr int kLoadsInFlight = 4;
        const int copies = p.chunk_channels * p.row_copies;
        for (int first_index = threadIdx.x; first_index < copies; first_index += kGemmThreads * kLoadsInFlight) {
          T values[kLoadsInFlight];
          int slots[kLoadsInFlight];
#pragma unroll
          for (int u = 0; u < kLoadsInFlight; ++u) {
            const int index = first_index + u * kGemmThreads;
            const auto q = p.div_row_copies.divmod(unsigned(index));
            const int ch = int(q.div), position = element_position(int(q.mod));
            const bool inside = index < copies && element_inside(ch, position);
            values[u] = inside ? in_chunk[ch * p.in_channel_stride + position * p.in_length_stride] : from_float<T>(0.0f);
            slots[u] = index < copies ? ch * p.x_row_elements + int(q.mod) : -1;
          }
#pragma unroll
          for (int u = 0; u < kLoadsInFlight; ++u)
            if (slots[u] >= 0) x_s[slots[u]] = values[u];
        }
        return;
      }
    }
    // in_step 1, contiguous aligned rows, `first` a multiple of copy_elements: copies of kBytes
    auto copy_vectors = [&](auto bytes) {
      constexpr int kBytes = decltype(bytes)::value, kElements = kBytes / int(sizeof(T));
      for_each_x_copy([&](int ch, int copy) {
        const int position = first + copy * kElements;
        const int inside = channel_inside(ch) && position >= 0 ? max(0, min(kElements, p.in_length - position)) : 0;
        const T* from = inside ? in_chunk + ch * p.in_channel_stride + position : in;
        cp_async<kBytes>(x_s + ch * p.x_row_elements + copy * kElements, from, inside * int(sizeof(T)));
      });
    };
    const int copy_bytes = p.copy_elements * int(sizeof(T));
    if (copy_bytes == 16) {
      copy_vectors(std::integral_constant<int, 16>());
    } else if (copy_bytes == 8) {
      copy_vectors(std::integral_constant<int, 8>());
    } else if constexpr (sizeof(T) == 2) {  // pairs (single 16-bit elements: above)
      copy_vectors(std::integral_constant<int, 4>());
    } else {  // one float a copy
      for_each_x_copy([&](int ch, int pos) {
        const int position = element_position(pos);
        const bool inside = element_inside(ch, position);
        const T* from = inside ? in_chunk + ch * p.in_channel_stride + position * p.in_length_stride : in;
        cp_async_4(x_s + ch * p.x_row_elements + pos, from, inside ? 4 : 0);
      });
    }
  };

  // kTF32: round this thread's copies of x_s (landed: cp.async.wait_group) to TF32 in place, once
  // per step instead of at every fragment load.
  auto round_x = [&](int buffer) {
    if constexpr (kMath == Math::kTF32) {
      float* x_s = x_buffers + buffer * x_buffer_elements;
      auto round_copies = [&](auto elements) {  // copies of kElements floats, in one shared load and store
        constexpr int kElements = decltype(elements)::value;
        struct alignas(4 * kElements) Copy { float v[kElements]; };
        for_each_x_copy([&](int ch, int copy) {
          Copy* values = reinterpret_cast<Copy*>(x_s + ch * p.x_row_elements + copy * kElements);
          Copy c = *values;
#pragma unroll
          for (int e = 0; e < kElements; ++e) c.v[e] = __uint_as_float(to_tf32(c.v[e]));
          *values = c;
        });
      };
      if (p.copy_elements == 4) {
        round_copies(std::integral_constant<int, 4>());
      } else if (p.copy_elements == 2) {
        round_copies(std::integral_constant<int, 2>());
      } else {
        round_copies(std::integral_constant<int, 1>());
      }
    }
  };

  // The tile's rows of out, and their bias
  auto out_row = [&](const GemmTile& tile, int row) {
    return out + (tile.n * p.groups + tile.g) * p.rows_per_group * p.out_length + int64_t(row) * p.out_length;
  };
  auto bias_of = [&](const GemmTile& tile, int row) {
    return bias ? to_float(bias[int64_t(tile.g) * p.rows_per_group + row]) : 0.0f;
  };
  // Staged output: the tile's out positions of a row start at y_s element `shift` of that row, so
  // that 16-byte vectors of y_s rows and of out rows line up.
  constexpr int kVector = 16 / sizeof(T);
  auto first_position = [&](const GemmTile& tile) { return int64_t(tile.col_tile) * kBlockN * p.out_step; };
  auto shift_of = [&](const T* out_positions) { return int(reinterpret_cast<uintptr_t>(out_positions) / sizeof(T) % kVector); };
  // phases that no tap reaches keep the zeros of a cleared y_s (the flush clears what it reads)
  const bool clear_y_s = p.stage_output && p.out_phases < p.out_step;
  if (clear_y_s) {
    for (int v = threadIdx.x * 4; v < kBlockM * p.y_row_elements; v += kGemmThreads * 4)
      *reinterpret_cast<float4*>(y_s + v) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  Accumulator<kMath> acc[kWarpTilesM][kWarpTilesN];  // mma.sync tiles
  float wg_acc[kWarpgroups ? kBlockM / 2 : 1];         // warpgroup tiles (wgmma.cuh's d)
  uint32_t wg_sets[kWarpgroups ? 2 * 2 * 4 : 1];      // warpgroup tiles: two sets of A fragments (run_tap)
  auto clear_accumulators = [&] {
    if constexpr (kWarpgroups) {
#pragma unroll
      for (int e = 0; e < kBlockM / 2; ++e) wg_acc[e] = 0.0f;
    } else {
#pragma unroll
      for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kWarpTilesN; ++nt) acc[mt][nt].clear();
    }
  };
  // Merged phases (warpgroup tiles): wg_acc[4j + e] is row first_row + 8j + e % 2 (first_row even),
  // column col + 8 * (e / 2). Row R is out row R / row_phases at position column*row_phases +
  // R % row_phases - phase_origin, so each even row and the next are adjacent positions of one out
  // row (a pair store where aligned) unless the even row is a last phase.
  auto store_merged_phases = [&](const GemmTile& tile) {
    if constexpr (kMerge == Merge::kRows) {
      const int col = tile.col_tile * kBlockN + (warp / 4) * 64 + (warp % 4) * 16 + lane / 4;
      const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
      const int64_t group_rows = p.rows_per_group / p.row_phases;  // out rows of a group
      T* const group_out = out + (tile.n * p.groups + tile.g) * group_rows * p.out_length;
      auto bias_at = [&](int out_row) { return bias ? to_float(bias[int64_t(tile.g) * group_rows + out_row]) : 0.0f; };
      auto store = [&](int out_row, int position, float value) {
        if (position >= 0 && position < p.out_length) group_out[int64_t(out_row) * p.out_length + position] = from_float<T>(value);
      };
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const int row = first_row + 8 * j;
        if (row >= p.rows_per_group) continue;
        const auto q = p.div_row_phases.divmod(unsigned(row));
        const int out_row = int(q.div), phase = int(q.mod);
        const bool adjacent = phase + 1 < p.row_phases;  // row + 1: the next position of the same out row
        const bool next_inside = row + 1 < p.rows_per_group;
        const float bias_value = bias_at(out_row), next_bias = adjacent || !next_inside ? bias_value : bias_at(out_row + 1);
#pragma unroll
        for (int side = 0; side < 2; ++side) {
          const int column = col + 8 * side;
          const int position = column * p.row_phases + phase - p.phase_origin;
          const float first = wg_acc[4 * j + 2 * side] + bias_value, second = wg_acc[4 * j + 2 * side + 1] + next_bias;
          if (!adjacent) {
            store(out_row, position, first);
            if (next_inside) store(out_row + 1, column * p.row_phases - p.phase_origin, second);
          } else if (p.out_length % 2 == 0 && position % 2 == 0 && position >= 0 && position + 1 < p.out_length) {
            store_pair(group_out + int64_t(out_row) * p.out_length + position, first, second);
          } else {
            store(out_row, position, first);
            store(out_row, position + 1, second);
          }
        }
      }
    }
  };
  // The accumulators of one out_phase: to y_s, or straight to out (plus bias). Element e of tile
  // (mt, nt) sits at row lane/4 (+8 for e >= 2) and column 2*(lane%4) + e%2 of the tile.
  auto store_phase = [&](const GemmTile& tile, int out_phase) {
    const int phase = p.out_phase_value[out_phase];
    const int columns = p.out_length > phase ? (p.out_length - phase + p.out_step - 1) / p.out_step : 0;
    if constexpr (kWarpgroups) {
      if constexpr (kMerge == Merge::kRows) {
        store_merged_phases(tile);
        return;
      }
      // wg_acc[4j + e] is row 8j + 2c + e % 2, column (this warp's 16) g + 8 * (e / 2): per row, two
      // columns. Row pointers and bounds from this thread's first row (64-bit math once, not per row).
      const int warp_first_col = (warp / 4) * 64 + (warp % 4) * 16 + lane / 4;
      const int col = tile.col_tile * kBlockN + warp_first_col;
      const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
      const int64_t rows_left = p.rows_per_group - first_row;
      T* const first_row_positions = out_row(tile, first_row);
      const T* const first_row_bias = bias ? bias + tile.g * p.rows_per_group + first_row : nullptr;
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = 8 * j + half;  // from first_row
          const float first = wg_acc[4 * j + half], second = wg_acc[4 * j + 2 + half];  // columns col, col + 8
          T* out_positions = first_row_positions + int64_t(row) * p.out_length;
          if (p.stage_output) {
            float* y = y_s + (row + 2 * (lane % 4)) * p.y_row_elements + shift_of(out_positions + first_position(tile)) +
                       phase + warp_first_col * p.out_step;
            y[0] = first;
            y[8 * p.out_step] = second;
            continue;
          }
          if (row >= rows_left) continue;
          const float bias_value = first_row_bias ? to_float(first_row_bias[row]) : 0.0f;
          T* out_first = out_positions + int64_t(col) * p.out_step + phase;
          if (col < columns) out_first[0] = from_float<T>(first + bias_value);
          if (col + 8 < columns) out_first[8 * p.out_step] = from_float<T>(second + bias_value);
        }
      return;
    }
    const bool paired = p.out_step == 1 && p.out_length % 2 == 0;  // two adjacent columns, one aligned store
#pragma unroll
    for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tile_row = (warp_mtile + mt) * 16 + lane / 4 + half * 8;
        const int row = tile.row_tile * kBlockM + tile_row;
        T* out_positions = out_row(tile, row);
        if (p.stage_output) {
          float* y = y_s + tile_row * p.y_row_elements + shift_of(out_positions + first_position(tile)) + phase;
#pragma unroll
          for (int nt = 0; nt < kWarpTilesN; ++nt) {
            const int tile_col = warp_col + nt * 8 + 2 * (lane % 4);
            y[tile_col * p.out_step] = acc[mt][nt].value(half * 2);
            y[(tile_col + 1) * p.out_step] = acc[mt][nt].value(half * 2 + 1);
          }
          continue;
        }
        if (row >= p.rows_per_group) continue;
        const float bias_value = bias_of(tile, row);
#pragma unroll
        for (int nt = 0; nt < kWarpTilesN; ++nt) {
          const int col = tile.col_tile * kBlockN + warp_col + nt * 8 + 2 * (lane % 4);
          const float v0 = acc[mt][nt].value(half * 2) + bias_value, v1 = acc[mt][nt].value(half * 2 + 1) + bias_value;
          if (paired && col + 1 < columns) {
            store_pair(out_positions + col, v0, v1);
          } else {
            const int64_t position = int64_t(col) * p.out_step + phase;
            if (col < columns) out_positions[position] = from_float<T>(v0);
            if (col + 1 < columns) out_positions[position + p.out_step] = from_float<T>(v1);
          }
        }
      }
  };

  // The tile's kBlockN * out_step out positions, a warp per row. Staged: from y_s plus bias, in
  // 16-byte vectors (elements at the ends of the row segment one by one). Not staged: the positions
  // of phases no tap reaches get the bias.
  auto finish_tile = [&](const GemmTile& tile) {
    if (!p.stage_output && p.out_phases == p.out_step) return;
    const int positions = int(min(int64_t(kBlockN) * p.out_step, p.out_length - first_position(tile)));
    for (int tile_row = warp; tile_row < kBlockM; tile_row += kGemmThreads / 32) {
      const int row = tile.row_tile * kBlockM + tile_row;
      if (row >= p.rows_per_group) break;
      const float bias_value = bias_of(tile, row);
      T* out_positions = out_row(tile, row) + first_position(tile);
      if (!p.stage_output) {
        for (int pos = lane; pos < positions; pos += 32) {
          bool reached = false;
          for (int r = 0; r < p.out_phases; ++r) reached |= p.out_phase_value[r] == pos % p.out_step;
          if (!reached) out_positions[pos] = from_float<T>(bias_value);
        }
        continue;
      }
      const int shift = shift_of(out_positions);
      T* out_vectors = out_positions - shift;  // 16-byte aligned
      float* y = y_s + tile_row * p.y_row_elements;
      for (int begin = lane * kVector; begin < shift + positions; begin += 32 * kVector) {
        float values[kVector];
#pragma unroll
        for (int e = 0; e < kVector; e += 4) {
          float4* from = reinterpret_cast<float4*>(y + begin + e);
          const float4 v = *from;
          if (clear_y_s) *from = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          values[e] = v.x + bias_value, values[e + 1] = v.y + bias_value;
          values[e + 2] = v.z + bias_value, values[e + 3] = v.w + bias_value;
        }
        if (begin >= shift && begin + kVector <= shift + positions) {
          store_vector(out_vectors + begin, values);
        } else {
#pragma unroll
          for (int e = 0; e < kVector; ++e)
            if (begin + e >= shift && begin + e < shift + positions) out_vectors[begin + e] = from_float<T>(values[e]);
        }
      }
    }
  };

  int64_t resident_key = -1;
  // a part's tile, and its first step
  auto tile_of = [&](unsigned part) { return GemmTile(p.div_tile_parts.div(part), p); };
  auto first_step_of = [&](unsigned part) { return int(p.div_tile_parts.mod(part)) * part_steps; };
  unsigned part_index = blockIdx.x;
  if (part_index >= p.parts) return;
  GemmTile tile = tile_of(part_index);
  int step_index = first_step_of(part_index), phase_step = 0, buffer = 0;  // phase_step: of step_index's out_phase
  stage(tile, GemmStep(step_index, p), 0);
  cp_async_commit();
  clear_accumulators();
  while (true) {
    const bool phase_ends = phase_step == phase_steps - 1, tile_ends = step_index == steps - 1;
    if (p.resident && tile.weight_key() != resident_key) {  // (re)load the resident weight, and wait for it
      const int64_t words = p.chunks * tile_words;  // every chunk and tap of (g, row_tile)
      const uint32_t* from = packed_w + (int64_t(tile.g) * p.row_tiles + tile.row_tile) * words;
      copy_words_async(w_buffers, from, int(words));
      cp_async_commit();
      cp_async_wait<0>();
      resident_key = tile.weight_key();
    }
    // the next step, prefetched into the other buffer while this one computes
    const bool next_part = p.tile_parts > 1 ? phase_ends : tile_ends;
    const unsigned next_index = next_part ? part_index + gridDim.x : part_index;
    const bool has_next = next_index < p.parts;
    const int next_step = next_part ? (has_next ? first_step_of(next_index) : 0) : step_index + 1;
    const GemmTile next = next_part && has_next ? tile_of(next_index) : tile;
    if (has_next) stage(next, GemmStep(next_step, p), buffer ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    round_x(buffer);
    if constexpr (kWarpgroups) fence_async_shared();  // the weight slots (cp.async) are read by wgmma
    __syncthreads();

    const GemmStep step(step_index, p);
    const uint32_t* w_s = w_buffers + (p.resident ? 0 : buffer * p.weight_slots * p.slot_words);
    const T* x_s = x_buffers + buffer * x_buffer_elements;
    // row_offsets: this lane's rows' shifts in this step's x_s (load_b; 0 where the tile went element by element)
    int shift_low = 0, shift_high = 0;
    // merged channels: where this lane's channels c and c + 4 (16-bit: 2c and 2c + 8) of a k-step sit
    // in x_s (as channel (co, r): co*x_row_elements + r; header comment)
    int phase_low = 0, phase_high = 0;
    if constexpr (kMerge == Merge::kChannels) {
      const int low = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4, high = low + (kMath == Math::k16Bit ? 8 : 4);
      phase_low = low / p.channel_phases * p.x_row_elements + low % p.channel_phases;
      phase_high = high / p.channel_phases * p.x_row_elements + high % p.channel_phases;
    }
    if constexpr (kShiftedRows) {
      const int first = tile.col_tile * kBlockN + p.first_offset - p.lead;
      if (chunked_rows(first)) {
        const int64_t first_channel = int64_t(tile.g) * p.channels_per_group + int64_t(step.chunk) * p.chunk_channels;
        const int low = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4;
        const T* window = in + tile.n * p.in_batch_stride + (first_channel + low) * p.in_channel_stride + first;
        shift_low = elements_past_16_bytes(window), shift_high = elements_past_16_bytes(window + p.in_channel_stride);
      }
    }
    for (int i = step.first_tap; i < step.end_tap; ++i) {
      const int t = p.step_tap[i];
      const int slot = p.resident ? step.chunk * p.taps + i : i - step.first_tap;
      if constexpr (kWarpgroups) {
        // in^T fragments of this warp's 16 columns (from x_s like mma.sync's B of columns g and g + 8),
        // then the k-steps of wgmma on the slot's A^T, in two groups of half the k-steps: one group's
        // fragments load while the other's wgmma runs (two register sets, wg_set[half]; a group is
        // waited for when at most the next one runs, before its set loads again two groups later;
        // the sets and the accumulators are pinned by empty asm operands meanwhile)
        auto run_tap = [&](auto ksteps) {
          constexpr int kKsteps = decltype(ksteps)::value, kHalf = kKsteps / 2;
          using Kind = std::conditional_t<std::is_same_v<T, float>, Tf32, T>;
          const T* x_tap = x_s + (warp / 4) * 64 + (warp % 4) * 16 + lane / 4 + p.tap_offset[t] - p.first_offset + p.lead;
          if constexpr (kMerge == Merge::kChannels)
            x_tap = x_s + ((warp / 4) * 64 + (warp % 4) * 16 + lane / 4 + p.tap_offset[t] - p.first_offset) * p.channel_phases + p.lead;
          const char* w_slot = reinterpret_cast<const char*>(w_s + slot * p.slot_words);
          uint32_t (&sets)[2][kHalf][4] = *reinterpret_cast<uint32_t(*)[2][kHalf][4]>(wg_sets);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            uint32_t (&a)[kHalf][4] = sets[half];
#pragma unroll
            for (int k = 0; k < kHalf; ++k) {
              uint32_t low[2], high[2];  // columns g and g + 8
              if constexpr (kMerge == Merge::kChannels) {
                constexpr int kKstepChannels = kMath == Math::k16Bit ? 16 : 8;
                const T* x_kstep = x_tap + (half * kHalf + k) * kKstepChannels / p.channel_phases * p.x_row_elements;
                load_b_merged<T, kMath>(low, x_kstep, phase_low, phase_high);
                load_b_merged<T, kMath>(high, x_kstep + 8 * p.channel_phases, phase_low, phase_high);
              } else {
                const T* x_kstep = x_tap + (half * kHalf + k) * (kMath == Math::k16Bit ? 16 : 8) * p.x_row_elements;
                load_b<T, kMath>(low, x_kstep, p.x_row_elements, lane % 4, shift_low, shift_high);
                load_b<T, kMath>(high, x_kstep + 8, p.x_row_elements, lane % 4, shift_low, shift_high);
              }
              a[k][0] = low[0], a[k][1] = high[0], a[k][2] = low[1], a[k][3] = high[1];
              wgmma_fence_operand(a[k]);
            }
            wgmma_fence_accumulators(wg_acc);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < kHalf; ++k)
              wgmma_kstep<Kind, kBlockM>(wg_acc, a[k], swizzled_b_descriptor<kKsteps * 32>(w_slot + (half * kHalf + k) * 32));
            wgmma_commit();
            wgmma_fence_accumulators(wg_acc);
            wgmma_wait<1>();  // the group before is done: the other set may load
#pragma unroll
            for (int k = 0; k < kHalf; ++k) wgmma_fence_operand(sets[half ^ 1][k]);
          }
        };
        if (p.ksteps == 4) {  // 2 or 4
          run_tap(std::integral_constant<int, 4>());
        } else {
          run_tap(std::integral_constant<int, 2>());
        }
        continue;
      }
      // column col of the tile reads x_s position (col - col0) + offset_t - first_offset + lead
      const T* x_tap = x_s + warp_col + lane / 4 + p.tap_offset[t] - p.first_offset + p.lead;
      const uint32_t* w_tap = w_s + slot * p.slot_words + warp_mtile * p.ksteps * kFragmentWords + lane * 4;
      // k-steps `count` at a time (unrolled together: their loads can run ahead of the mma)
      auto run_ksteps = [&](int first_kstep, auto count) {
#pragma unroll
        for (int kstep = first_kstep; kstep < first_kstep + decltype(count)::value; ++kstep) {
          uint32_t a[kWarpTilesM][4], b[kWarpTilesN][2];
#pragma unroll
          for (int mt = 0; mt < kWarpTilesM; ++mt) {
            const uint4 v = *reinterpret_cast<const uint4*>(w_tap + (mt * p.ksteps + kstep) * kFragmentWords);
            a[mt][0] = v.x, a[mt][1] = v.y, a[mt][2] = v.z, a[mt][3] = v.w;
          }
          const int first_channel = kstep * (kMath == Math::k16Bit ? 16 : 8);
#pragma unroll
          for (int nt = 0; nt < kWarpTilesN; ++nt)
            load_b<T, kMath>(b[nt], x_tap + first_channel * p.x_row_elements + nt * 8, p.x_row_elements, lane % 4);
#pragma unroll
          for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
            for (int nt = 0; nt < kWarpTilesN; ++nt) mma_step<T, kMath>(acc[mt][nt], a[mt], b[nt]);
        }
      };
      if (p.ksteps == 2) {  // ksteps is 2, 4 or 8
        run_ksteps(0, std::integral_constant<int, 2>());
      } else {
        for (int kstep = 0; kstep < p.ksteps; kstep += 4) run_ksteps(kstep, std::integral_constant<int, 4>());
      }
    }
    if constexpr (kWarpgroups) {  // the step's last group, before the accumulators are read or the buffers reused
      wgmma_wait<0>();
#pragma unroll
      for (int w = 0; w < 4; ++w) wgmma_fence_operand(*reinterpret_cast<uint32_t(*)[4]>(wg_sets + 4 * w));
      wgmma_fence_accumulators(wg_acc);
    }
    if (phase_ends) {
      store_phase(tile, step.out_phase);
      clear_accumulators();
    }
    if (tile_ends) {
      if (p.stage_output) __syncthreads();  // y_s complete
      finish_tile(tile);
    }
    __syncthreads();  // this buffer (and y_s) is consumed: the next iteration may overwrite it
    if (!has_next) break;
    part_index = next_index;
    step_index = next_step;
    phase_step = phase_ends ? 0 : phase_step + 1;  // parts start with an out_phase
    tile = next;
    buffer ^= 1;
  }
  cp_async_wait<0>();
}

}  // namespace convt::cuda
