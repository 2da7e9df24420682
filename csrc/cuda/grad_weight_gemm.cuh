// Tensor-core grad_weight (DESIGN.md §3): a reduction over batch and length, deterministic.
//
//   grad_w[g*Cig + ci, co, k] = sum over n, m of x[n, g*Cig + ci, m - shift_k] * gy[n, g*Cog + co, m*stride + phase_k]
//
// is, for each tap, a GEMM with M = ci, N = co and the reduction over positions (n, m). Taps of one
// phase read the same gy positions, so they are handled together in tap groups of up to
// 4 or 8 (kGroupTaps; the x window of the group covers every shift). A block owns one output tile
// (group, 32 or 64 ci, 32 or 64 co, tap group) and one slice of the (n, m-chunk) items; it stages per item
//   gy_s[co][q]   gy[n, co, (m0 + q)*stride + phase]       q in [0, kGradWPositions)
//   x_s[ci][q]    x[n, ci, m0 + q - group_shift_max]         q in [0, kGradWPositions + span)
// (zero outside the tensors), double-buffered in the input's own type, runs mma.sync (4 or 8 warps,
// 2 or 4 x 2, a 16 ci x 32 co warp tile per tap), and writes its fp32 sums to partial[slice].
// Contiguous, aligned rows move in asynchronous copies of 16 or 8 bytes (or 4: pairs of 16-bit values),
// other rows one element at a time (asynchronously for float). A second kernel adds the slices in
// order (sum_slices_kernel): no atomics, the same inputs give bit-identical gradients.
// On sm_90, where C_in and C_out per group exceed 32, grad_weight_wgmma.cuh computes the same sums
// on warpgroup MMA instead (plan_grad_weight: WeightGradProblem::warpgroups).
//
// grad_bias[co] = sum over n, j of gy[n, co, j] comes along in TF32 where every phase has a tap
// (sums_bias), in TF32's pass over the landed copies (16-bit has no such pass; one added for the
// sums cost 1-4 % even where it went unused: grouped bf16 fwd+bwd 1.122 -> 1.166 ms). Every block
// of a phase (ci tiles x the phase's tap groups) stages each of its slice's items, so the items are
// dealt round robin to those blocks; each block adds the gy copies of its own items, before TF32
// rounding, into a shared slot of the thread's own (bias_s[co][copy index within the row]). At the
// end it sums each co's slots in order into bias_partial[slice][ci tile][tap group][co], and
// sum_slices adds those in order.
//
// float32 goes through TF32 mma (m16n8k8) as TF32 (rounded to nearest) or 3xTF32 (strict), as the
// forward; bfloat16 and float16 through their own mma (m16n8k16, fp32 accumulation), two positions
// to a 32-bit register. A tap whose x window starts at an odd position reads its A pairs as two
// 16-bit loads.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "plan.h"
#include "problem.h"
#include "cuda/implicit_gemm.cuh"

namespace convt::cuda {

// A block is kCiWarps x kCoWarps warps of 16 ci x 32 co: 32 ci (kCiWarps 2) where C_in per group is
// at most 32, else 64 (kCiWarps 4: each staged gy element feeds twice the ci); 32 co (kCoWarps 1)
// where C_out per group is at most 32, else 64 (kCoWarps 2: each staged x element feeds twice the co).
constexpr int kGradWTilesN = 4;                  // n8 tiles (of co) per warp: a 16 ci x 32 co warp tile
template <int kCoWarps>
constexpr int kGradWBlockCoOf = kCoWarps * kGradWTilesN * 8;
template <int kCiWarps, int kCoWarps>
constexpr int kGradWThreadsOf = 32 * kCiWarps * kCoWarps;

// The kernels' parameters: the plan (plan.h), and the dividers and tensor map that the launcher
// builds from it (make_weight_grad_problem).
struct WeightGradProblem : WeightGradPlan {
  Divider group_window_copies[kMaxGemmTaps];  // group_window_copy_count[q]: the copy loops divide by it
  Divider div_chunks_per_row;                 // item -> (n, chunk) without a 64-bit division per item
  CUtensorMap x_map;                          // pipelined tiles: x as (position, channel, batch)
};

// One 32-bit register of an mma fragment from the staged value(s) at `at`: a float (TF32 or 3xTF32),
// or two 16-bit values, at[0] in the low half; `aligned`: `at` is 4-byte aligned (16-bit only).
template <typename T>
__device__ __forceinline__ uint32_t fragment_word(const T* at, bool aligned) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(*at);
  } else {
    const unsigned short* halves = reinterpret_cast<const unsigned short*>(at);
    return aligned ? *reinterpret_cast<const uint32_t*>(at) : uint32_t(halves[0]) | (uint32_t(halves[1]) << 16);
  }
}

// Where block blockIdx.x works (both grad_weight kernels): block = slice * tiles + tile, tile =
// ((g * ci_tiles + ci_tile) * co_tiles + co_tile) * tap_groups + tap_group; the tile's first ci and
// co, and how many of its block_ci x block_co rows and columns lie inside the group
struct WeightGradTile {
  int64_t slice, g, first_ci, first_co;
  int tap_group, ci_tile, ci_count, co_count;
  __device__ __forceinline__ WeightGradTile(const WeightGradProblem& p, int block_ci, int block_co) {
    const int64_t tile = blockIdx.x % p.tiles;
    slice = blockIdx.x / p.tiles;
    tap_group = int(tile % p.tap_groups);
    const int co_tile = int(tile / p.tap_groups % p.co_tiles);
    ci_tile = int(tile / p.tap_groups / p.co_tiles % p.ci_tiles);
    g = tile / p.tap_groups / p.co_tiles / p.ci_tiles;
    first_ci = g * p.cig + int64_t(ci_tile) * block_ci, first_co = g * p.cog + int64_t(co_tile) * block_co;
    const int64_t ci_left = p.cig - int64_t(ci_tile) * block_ci, co_left = p.cog - int64_t(co_tile) * block_co;
    ci_count = ci_left < block_ci ? int(ci_left) : block_ci;
    co_count = co_left < block_co ? int(co_left) : block_co;
  }
  // partial's index of (ci, co) of the tile, tap k (partial[slice][(g*Cig + ci) * Cog + co][k])
  __device__ __forceinline__ int64_t partial_index(const WeightGradProblem& p, int ci, int co, int k) const {
    return ((first_ci + ci) * p.cog + (first_co - g * p.cog + co)) * p.taps + k;
  }
};

// body(std::integral_constant<int, elements>) for the copy sizes there are (16 or 8 bytes' worth of
// T, or a 16-bit pair): the staging loops' index math with constants
template <typename T, typename Body>
__device__ __forceinline__ void with_copy_size(int elements, Body&& body) {
  if (elements == 16 / int(sizeof(T))) {
    body(std::integral_constant<int, 16 / sizeof(T)>{});
  } else if (elements == 8 / int(sizeof(T))) {
    body(std::integral_constant<int, 8 / sizeof(T)>{});
  } else if constexpr (sizeof(T) == 2) {
    body(std::integral_constant<int, 2>{});
  }
}
// One element global -> shared, 0 where !inside: a synchronous load of a 16-bit value, or an
// asynchronous 4-byte copy of a float (from `aligned`, an aligned address it does not read, where
// !inside)
template <typename T>
__device__ __forceinline__ void copy_element(T* to, const T* from, bool inside, const T* aligned) {
  if constexpr (sizeof(T) == 2) {
    *to = inside ? *from : from_float<T>(0.0f);
  } else {
    cp_async_4(to, inside ? from : aligned, inside ? 4 : 0);
  }
}
// elements of a `vector`-element copy inside a row that has `left` elements from its start
__device__ __forceinline__ int elements_inside(int64_t left, int vector) {
  return left <= 0 ? 0 : left >= vector ? vector : int(left);
}

// Registers by the threads an SM must hold (ptxas's own choice was 128 for every 4-tap kernel and
// 224-228 for the 8-tap ones; H100 fwd+bwd): 256-thread blocks of 4 taps two an SM, at most 128
// registers (at 150-156: kb64 TF32 14.7 -> 17.8 ms, hifigan_up1 3.76 -> 4.16); the other kernels
// 384 threads an SM, at most 170 (4 taps, 128 -> 150-156: kb79 bf16 2.06 -> 1.96, grouped bf16
// 0.92 -> 0.88; 8 taps, 228 -> 168: kb74 TF32 3.99 -> 3.52); 256-thread blocks of 8 taps one an SM.
// 3xTF32 one block (its 216 registers: capped at 128 they spill).
template <Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
constexpr int kGradWMinBlocksOf = kMath == Math::k3xTF32                   ? 1
                               : kGradWThreadsOf<kCiWarps, kCoWarps> == 256 ? (kGroupTaps == kGradWGroupTaps ? 2 : 1)
                                                                         : 384 / kGradWThreadsOf<kCiWarps, kCoWarps>;

template <typename T, Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
__global__ void __launch_bounds__(kGradWThreadsOf<kCiWarps, kCoWarps>, (kGradWMinBlocksOf<kMath, kCiWarps, kCoWarps, kGroupTaps>))
    grad_weight_gemm_kernel(const T* __restrict__ x, const T* __restrict__ gy, float* __restrict__ partial,
                            float* __restrict__ bias_partial, const __grid_constant__ WeightGradProblem p) {
  constexpr int kGradWThreads = kGradWThreadsOf<kCiWarps, kCoWarps>, kGradWBlockCi = 16 * kCiWarps;
  constexpr int kGradWBlockCo = kGradWBlockCoOf<kCoWarps>;
  constexpr bool k16 = kMath == Math::k16Bit;
  static_assert(k16 == (sizeof(T) == 2), "16-bit inputs use the 16-bit mma, float32 TF32 or 3xTF32");
  constexpr int kGyRow = grad_w_gy_row(sizeof(T));
  const int x_row = grad_w_window_row(p.window_row_elements, sizeof(T));
  extern __shared__ __align__(16) unsigned char wg_smem[];
  T* gy_buffers = reinterpret_cast<T*>(wg_smem);       // 2 x kGradWBlockCo x kGyRow
  T* x_buffers = gy_buffers + 2 * kGradWBlockCo * kGyRow;  // 2 x kGradWBlockCi x x_row
  float* bias_s = reinterpret_cast<float*>(x_buffers + 2 * kGradWBlockCi * x_row);  // kGradWBlockCo x bias_slots, if summed
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_ci = (warp % kCiWarps) * 16, warp_co = (warp / kCiWarps) * kGradWTilesN * 8;

  const WeightGradTile tile(p, kGradWBlockCi, kGradWBlockCo);
  const int64_t slice = tile.slice, g = tile.g, first_ci = tile.first_ci, first_co = tile.first_co;
  const int tap_group = tile.tap_group, ci_tile = tile.ci_tile, ci_count = tile.ci_count, co_count = tile.co_count;
  const int phase = p.group_phase[tap_group], count = p.group_count[tap_group];
  const int shift_max = p.group_shift_max[tap_group];
  // grad_bias: this block's turn among bias_share blocks of the phase
  const int bias_share = p.ci_tiles * p.group_phase_groups[tap_group];
  const int bias_rank = ci_tile * p.group_phase_groups[tap_group] + p.group_phase_index[tap_group];

  // x_s position q holds x position m0 - shift_max - x_lead + q
  const int x_vector = p.x_copy_elements, gy_vector = p.gy_copy_elements;
  const int x_lead = p.group_lead[tap_group];
  const int x_positions = kGradWPositions + p.group_span[tap_group] + x_lead;
  const Divider& x_vectors_per_row = p.group_window_copies[tap_group];  // ceil(x_positions / x_vector)

  // Stage item (n, m chunk) into buffer `buffer`: vector copies spread over the block, or one
  // element at a time with a warp per row and lanes along positions. The visitors get the shared
  // slot, the source, for vector copies the vector size and how many of its elements lie inside,
  // and the copy's grad_bias slot (gy; nullptr for x); the same walk serves the pass over this
  // thread's landed copies below, so a bias slot always belongs to the same thread.
  auto for_each_copy = [&](int64_t item, int buffer, auto&& vector_copy, auto&& element_copy) {
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t n = row.div, m0 = int64_t(row.mod) * kGradWPositions;
    T* gy_s = gy_buffers + buffer * kGradWBlockCo * kGyRow;
    const T* gy_n = gy + n * p.gy_batch_stride + first_co * p.gy_channel_stride;
    if (gy_vector > 1) {  // stride 1: gy positions m0 + q
      with_copy_size<T>(gy_vector, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value, kVectorsPerRow = kGradWPositions / kVector;
        // float's 16-byte copies unrolled; the rest rolled (unrolled, 16-bit pair copies took 32 more
        // registers and float's 8-byte copies 30 to 38: TF32 kernels 128 -> 166)
        constexpr int kUnroll = !k16 && kVector == 4 ? 4 : 1;
#pragma unroll(kUnroll)
        for (int index = threadIdx.x; index < kGradWBlockCo * kVectorsPerRow; index += kGradWThreads) {
          const int co = index / kVectorsPerRow, q = index % kVectorsPerRow * kVector;
          const int64_t j = m0 + q;
          const int inside = co < co_count ? elements_inside(p.length_out - j, kVector) : 0;
          vector_copy(gy_s + co * kGyRow + q, inside ? gy_n + co * p.gy_channel_stride + j : gy, vector, inside,
                      bias_s + index);  // slot co * bias_slots + index % kVectorsPerRow
        }
      });
    } else {
      for (int co = warp; co < kGradWBlockCo; co += kGradWThreads / 32) {
        for (int q = lane; q < kGradWPositions; q += 32) {
          const int64_t j = (m0 + q) * p.stride + phase;
          element_copy(gy_s + co * kGyRow + q, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                       co < co_count && j < p.length_out, bias_s + co * p.bias_slots + lane);
        }
      }
    }
    T* x_s = x_buffers + buffer * kGradWBlockCi * x_row;
    const T* x_n = x + n * p.x_batch_stride + first_ci * p.x_channel_stride;
    const int64_t first_position = m0 - shift_max - x_lead;
    if (x_vector > 1) {  // first_position is a multiple of x_vector: copies lie wholly inside or outside [0, L_in) but at the end
      with_copy_size<T>(x_vector, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value;
        constexpr int kUnroll = !k16 && kVector == 4 ? 4 : 1;
#pragma unroll(kUnroll)
        for (int index = threadIdx.x; index < kGradWBlockCi * int(x_vectors_per_row.divisor); index += kGradWThreads) {
          const auto row = x_vectors_per_row.divmod(unsigned(index));
          const int ci = int(row.div), q = int(row.mod) * kVector;
          const int64_t i = first_position + q;
          const int inside = ci < ci_count && i >= 0 ? elements_inside(p.length_in - i, kVector) : 0;
          vector_copy(x_s + ci * x_row + q, inside ? x_n + ci * p.x_channel_stride + i : x, vector, inside, nullptr);
        }
      });
    } else {
      for (int ci = warp; ci < kGradWBlockCi; ci += kGradWThreads / 32) {
        for (int q = lane; q < x_positions; q += 32) {
          const int64_t i = first_position + q;
          element_copy(x_s + ci * x_row + q, x_n + ci * p.x_channel_stride + i * p.x_length_stride,
                       ci < ci_count && i >= 0 && i < p.length_in, nullptr);
        }
      }
    }
  };
  auto stage = [&](int64_t item, int buffer) {
    for_each_copy(
        item, buffer,
        [&](T* to, const T* from, auto vector, int inside, float*) {
          cp_async<decltype(vector)::value * int(sizeof(T))>(to, from, inside * int(sizeof(T)));
        },
        [&](T* to, const T* from, bool inside, float*) { copy_element(to, from, inside, x); });
  };

  // TF32: once this thread's copies have landed (cp.async.wait_group), round them to TF32 in place,
  // once instead of at every fragment load; on the block's grad_bias items (bias_item) add each gy
  // copy into its slot first.
  constexpr bool kTF32 = kMath == Math::kTF32;
  auto finish_own_copies = [&](int64_t item, int buffer, bool bias_item) {
    if constexpr (kTF32) {
      auto finish = [&](float* values, int count, float* bias_slot) {
        if (bias_item && bias_slot != nullptr) {
          float sum = 0.0f;
          for (int e = 0; e < count; ++e) sum += values[e];
          *bias_slot += sum;
        }
        for (int e = 0; e < count; ++e) values[e] = __uint_as_float(to_tf32(values[e]));
      };
      for_each_copy(
          item, buffer, [&](float* to, const T*, int vector, int, float* bias_slot) { finish(to, vector, bias_slot); },
          [&](float* to, const T*, bool, float* bias_slot) { finish(to, 1, bias_slot); });
    }
  };

  Accumulator<kMath> acc[kGroupTaps][kGradWTilesN];
#pragma unroll
  for (int t = 0; t < kGroupTaps; ++t)
#pragma unroll
    for (int nt = 0; nt < kGradWTilesN; ++nt) acc[t][nt].clear();
  const int64_t begin = slice * p.items / p.slices, end = (slice + 1) * p.items / p.slices;
  const bool sums_bias = kTF32 && p.sums_bias;
  if (sums_bias) {
    for (int i = threadIdx.x; i < kGradWBlockCo * p.bias_slots; i += kGradWThreads) bias_s[i] = 0.0f;
    __syncthreads();
  }
  if (begin < end) stage(begin, 0);
  cp_async_commit();
  int buffer = 0, bias_turn = bias_rank;  // items until this block's next grad_bias item
  for (int64_t item = begin; item < end; ++item, buffer ^= 1) {
    if (item + 1 < end) stage(item + 1, buffer ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    const bool bias_item = sums_bias && bias_turn == 0;
    bias_turn = bias_turn == 0 ? bias_share - 1 : bias_turn - 1;
    finish_own_copies(item, buffer, bias_item);
    __syncthreads();
    const T* gy_s = gy_buffers + buffer * kGradWBlockCo * kGyRow;
    const T* x_s = x_buffers + buffer * kGradWBlockCi * x_row;
    const int r = lane / 4, c = lane % 4;
    const int64_t m0 = int64_t(p.div_chunks_per_row.mod(unsigned(item))) * kGradWPositions;
    // A k-step covers kK positions. This lane's two registers of a fragment hold positions `first`
    // and first + kNext (TF32), or the pairs from there (16-bit, the lower position in the low half).
    constexpr int kK = k16 ? 16 : 8, kNext = kK / 2;
    const int lane_position = k16 ? 2 * c : c;
    // kEdge: some tap's x position m - shift falls outside [0, L_in) in this item. Such a product
    // does not exist: its gy value is left out (x_s holds 0 there, but 0 x Inf or NaN in gy is NaN).
    auto multiply = [&](auto edge) {
      constexpr bool kEdge = decltype(edge)::value;
#pragma unroll
      for (int kstep = 0; kstep < kGradWPositions / kK; ++kstep) {
        const int first = kstep * kK + lane_position;
        // B = gy (k = position, n = co), two tiles per ldmatrix: matrix m is register m % 2 (positions
        // from kstep * kK + (m % 2) * kNext) of tile nt + m / 2, its rows co; lane l gives row l % 8
        // of matrix l / 8 (gy_s rows and those offsets are 16-byte aligned)
        uint32_t b[kGradWTilesN][2];
#pragma unroll
        for (int nt = 0; nt < kGradWTilesN; nt += 2) {
          const int matrix = lane / 8;
          const T* row = gy_s + (warp_co + (nt + matrix / 2) * 8 + lane % 8) * kGyRow + kstep * kK + (matrix % 2) * kNext;
          uint32_t d[4];
          ldmatrix_x4(d, row);
          b[nt][0] = d[0], b[nt][1] = d[1], b[nt + 1][0] = d[2], b[nt + 1][1] = d[3];
        }
#pragma unroll
        for (int t = 0; t < kGroupTaps; ++t) {
          if (t >= count) break;
          // A = x shifted for tap t (m = ci, k = position): rows ci r and r + 8
          const int shift = p.group_tap_shift[p.group_first[tap_group] + t];
          const int tap_lead = shift_max - shift + x_lead;  // x_s position of the item's position 0 for this tap
          const bool aligned = tap_lead % 2 == 0;            // (16-bit pairs: `first` is even)
          // (added as pointer steps: the k-step's offset stays an immediate; as one int sum it cost 32 registers)
          const T* row = x_s + (warp_ci + r) * x_row + kstep * kK + lane_position + tap_lead;
          const uint32_t a[4] = {fragment_word(row, aligned), fragment_word(row + 8 * x_row, aligned),
                                 fragment_word(row + kNext, aligned), fragment_word(row + 8 * x_row + kNext, aligned)};
          uint32_t b_tap[kGradWTilesN][2];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            auto exists = [&](int position) {  // x position m - shift of this item's position
              const int64_t i = m0 + position - shift;
              return !kEdge || (i >= 0 && i < p.length_in);
            };
            const int position = first + kNext * half;
            uint32_t keep = exists(position) ? ~0u : 0u;  // 16-bit: the low half, then the high one
            if constexpr (k16) keep = (keep & 0xffffu) | (exists(position + 1) ? 0xffff0000u : 0u);
#pragma unroll
            for (int nt = 0; nt < kGradWTilesN; ++nt) b_tap[nt][half] = b[nt][half] & keep;
          }
#pragma unroll
          for (int nt = 0; nt < kGradWTilesN; ++nt) mma_step<T, kMath>(acc[t][nt], a, b_tap[nt]);
        }
      }
    };
    const int shift_min = shift_max - p.group_span[tap_group];
    if (m0 < shift_max || m0 + kGradWPositions - 1 - shift_min >= p.length_in) {
      multiply(std::true_type{});
    } else {
      multiply(std::false_type{});
    }
    __syncthreads();  // this buffer is consumed before the item after next overwrites it
  }
  cp_async_wait<0>();

  if (sums_bias) {  // each co's slots, in slot order
    __syncthreads();
    if (threadIdx.x < co_count) {
      float total = 0.0f;
      for (int slot = 0; slot < p.bias_slots; ++slot) total += bias_s[threadIdx.x * p.bias_slots + slot];
      const int64_t bias_slice = (slice * p.ci_tiles + ci_tile) * p.tap_groups + tap_group;
      bias_partial[bias_slice * p.groups * p.cog + first_co + threadIdx.x] = total;
    }
  }

  // partial[slice][(g*Cig + ci) * Cog + co][k]: element e of tile nt sits at ci row lane/4 (+8 for
  // e >= 2) and co column 2*(lane%4) + e%2.
  float* out = partial + slice * (p.groups * p.cig * p.cog * p.taps);
#pragma unroll
  for (int t = 0; t < kGroupTaps; ++t) {
    if (t >= count) break;
    const int k = p.group_tap[p.group_first[tap_group] + t];
#pragma unroll
    for (int nt = 0; nt < kGradWTilesN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ci = warp_ci + lane / 4 + (e / 2) * 8, co = warp_co + nt * 8 + 2 * (lane % 4) + e % 2;
        if (ci < ci_count && co < co_count)
          out[tile.partial_index(p, ci, co, k)] = acc[t][nt].value(e);
      }
  }
}

}  // namespace convt::cuda
