// Warpgroup grad_weight (wgmma, sm_90a: TF32 and 16-bit, C_in and C_out per group above 32). The sum
// of grad_weight_gemm.cuh with the roles of x and gy turned around, the reduction over x positions i:
//
//   grad_w[g*Cig + ci, co, k] = sum over n, i of gy[n, g*Cog + co, (i + shift_k)*stride + phase_k] * x[n, g*Cig + ci, i]
//
// For each tap a GEMM with M = co (A, 64 x K, from registers: each tap reads gy at its own shift) and
// N = ci (B, K x 64, from shared memory by descriptor). A block is one warpgroup; it owns one output
// tile (group, 64 co, 64 ci, tap group: kTaps slots for up to kTaps taps of one phase; a group with
// fewer computes its first tap in the empty slots and does not write them, so that no branch lies
// between the wgmma of a k-step, where ptxas would inject waits) and one slice of the items (n,
// chunk of kGradWPositions x positions from i0). Per item it stages
//   x_s[ci][q]             x[n, ci, i0 + q]                                 q in [0, kGradWPositions)
//   gy_s[co][offset + q]   gy[n, co, (i0 + shift_min + q)*stride + phase]   q in [0, kGradWPositions + span)
// (zero outside the tensors), double-buffered in the input's type: x_s as wgmma's B (K-major rows of
// 128 bytes, swizzled: wgmma.cuh; float rows are two such halves), gy_s in padded rows, each window
// at its row's offset (0, or where 16-byte chunks put it: the window start's misalignment). Tap t's A
// at k-step position q reads gy_s[co][offset + q + shift_t - shift_min]. Items cover x positions [0, L_in)
// only, so every product lies inside x; in the last chunk of a row the A values of positions
// i >= L_in are dropped (x_s holds 0 there, but 0 x Inf or NaN in gy is NaN). Float copies are
// rounded to TF32 in place once landed. The fp32 sums go to partial[slice] as in grad_weight_gemm.cuh,
// added by sum_slices_kernel in a fixed order.
//
// grad_bias[co] = sum over n, j of gy[n, co, j] comes along (kSumsBias) where every phase has a tap:
// tap slot 0 of a phase's first tap group has the phase's smallest shift, so over all items its A
// values cover the phase positions m in [shift_min, L_in + shift_min) once each (the edge items'
// dropped values included: they lie past that range). The blocks of ci tile 0 and of each phase's
// first group (bias blocks) add those values up; slice 0's add the positions outside that range,
// [0, shift_min) and [L_in + shift_min, phase length), from global memory. The sums take gy as it is:
//  - 16-bit: slot 0's wgmma is m64n72, its B 8 more rows (the ones column: a row of 1.0, seven of
//    0) in every block, so column 64 of its accumulators sums A exactly (fp32 products of 16-bit
//    values and 1.0, fp32 accumulation) at no instruction an item;
//  - TF32 (whose A would be rounded): bias blocks add slot 0's A registers as they load them, and
//    leave gy_s unrounded and round their A registers instead.
// Each thread holds the sums of its two rows; the four lanes of a row add theirs in a fixed order
// into bias_partial[slice][phase][co], which sum_slices adds in order.
//
// Merged phases (kMerged, where dilation is 1 and stride s divides K; plan_grad_weight): tap k =
// t*s + r reads gy at (i + t - padding div s)*s + r - phase_origin (phase_origin = padding mod s), so
// the phases r become rows. Row (co, r) = co*s + r of a tile (64 div s co, all their phases) is the
// stride-1 operand gy'[(co, r), m] = gy[co, m*s + r - phase_origin], tap slot t at shift t - padding
// div s (consecutive shifts). A step stages each co's whole window, elements
//   gy_s[co][offset + e]   gy[n, co, (i0 + shift_min)*s - phase_origin + e]   e in [0, (kGradWPositions + span)*s)
// (in 16-byte chunks where rows allow, as stride 1), and row (co, r)'s A at position q of tap slot t
// reads gy_s[co][offset + (q + t)*s + r]: a warp's 8 rows x 4 positions are 32 words in at most
// two co rows (rows ≡ 4s words mod 32: conflict-free where s divides 8), 16-bit pairs two loads s
// apart. x is staged once for every phase. Row (co, r) is phase (r - phase_origin) mod s of the
// unmerged sums, one phase lower where r < phase_origin: grad_bias's edge sums and bias_partial
// take each row so.
//
// Pipelined (kPipelined; plan_grad_weight where gy goes in chunks, C_in per group exceeds 64 and x
// has a tensor map): tiles of 64 co x 128 ci, one block an SM of two consumer warpgroups (ci 0-63
// and 64-127 of the tile: the same A rows, each its own x_s) and a producer warpgroup, through a ring
// of p.stages stages (both x_s and a gy_s) with a `full` and an `empty` mbarrier each. The producer
// copies, the consumers only load A and run wgmma (the cp.async staging, its TF32 pass and two block
// barriers an item of the kernel above go; H100 kb64 TF32 grad_weight 3.26 -> 1.98 ms, bf16 1.36 ->
// 0.93, hifigan_up1 TF32 0.66 -> 0.39):
//  - x_s: its first thread's TMA boxes of p.x_map (64 ci x 128 bytes, swizzled as wgmma's B, zeros
//    outside x; float as TFLOAT32, which the copy rounds to nearest, ties to even);
//  - gy_s: every producer thread's share of the windows' 16-byte chunks from their 16-byte
//    boundaries (cp.async), its arrival on `full` once they land; an item whose windows reach past
//    a row's ends goes a lane a row (stage_window: the whole chunks in one bulk copy, the ends
//    element by element). One bulk copy a row for every item measured 2x slower on kb64 bf16 (64
//    small copies an item).
// TF32 A values round in registers as they load (gy_s is not rounded: warpgroup 0 of the bias blocks
// sums them unrounded, as the bias blocks above do).
#pragma once

#include <type_traits>

#include "cuda/grad_weight_gemm.cuh"
#include "cuda/pipelined_gemm.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

constexpr int kWgmmaThreads = 128;                     // one warpgroup

// Bytes of one x_s buffer: sizeof(T) / 2 halves (along positions) of kWgmmaBlockCi rows of 128 bytes,
// with the ones column kWgmmaOnesRows more rows (16-bit: one half)
template <typename T, bool kOnesColumn>
constexpr int kWgmmaXBytesOf = (kWgmmaBlockCi + (kOnesColumn ? kWgmmaOnesRows : 0)) * kGradWPositions * int(sizeof(T));

// kPipelined: the pipelined tiles (above): 384 threads, one block an SM
template <typename T, int kTaps, bool kSumsBias, bool kMerged, bool kPipelined>
__global__ void __launch_bounds__(kPipelined ? kPipelineThreads : kWgmmaThreads, kPipelined ? 1 : wgmma_min_blocks(kTaps))
    grad_weight_wgmma_kernel(const T* __restrict__ x, const T* __restrict__ gy, float* __restrict__ partial,
                             float* __restrict__ bias_partial, const __grid_constant__ WeightGradProblem p) {
#if CONVT_WGMMA_AVAILABLE  // (sm_90a only: other archs get an empty kernel)
  constexpr bool k16 = sizeof(T) == 2;
  using Kind = std::conditional_t<k16, T, Tf32>;
  // grad_bias by the ones column (16-bit) or by register sums in bias blocks (TF32)
  constexpr bool kOnesColumn = kSumsBias && k16, kRegisterSums = kSumsBias && !k16;
  constexpr int kXBytes = kWgmmaXBytesOf<T, kOnesColumn>, kHalfBytes = kWgmmaBlockCi * kWgmmaRowBytes;
  // gy_s: gy_rows rows of gy_row elements (merged: a row per co, the window row as planned)
  const int gy_row = kMerged ? p.window_row_elements : grad_w_window_row(p.window_row_elements, sizeof(T));
  const int gy_rows = kMerged ? p.block_co : kWgmmaBlockCo;
  // buffers: two (pipelined: a stage's x_s for each consumer warpgroup, `stages` stages)
  constexpr int kXPerBuffer = kPipelined ? 2 : 1;
  const int buffers = kPipelined ? p.stages : 2;
  extern __shared__ __align__(kMaxSwizzleAtomBytes) unsigned char wgmma_smem[];  // x buffers first: atoms aligned
  unsigned char* x_buffers = wgmma_smem;                                          // buffers x kXPerBuffer x kXBytes
  T* gy_buffers = reinterpret_cast<T*>(wgmma_smem + buffers * kXPerBuffer * kXBytes);  // buffers x gy_rows x gy_row
  // warp: of the warpgroup; wg: the consumer warpgroup (pipelined; its ci are 64 * wg past the tile's)
  const int lane = threadIdx.x % 32, warp = kPipelined ? threadIdx.x / 32 % 4 : threadIdx.x / 32;
  const int wg = kPipelined ? threadIdx.x / kWgmmaThreads : 0;

  const WeightGradTile tile(p, kXPerBuffer * kWgmmaBlockCi, gy_rows);
  const int tap_group = tile.tap_group, ci_count = tile.ci_count, co_count = tile.co_count;
  const int phase = p.group_phase[tap_group], count = p.group_count[tap_group];
  const int shift_min = p.group_shift_max[tap_group] - p.group_span[tap_group];
  const int gy_positions = kGradWPositions + p.group_span[tap_group];
  const int gy_elements = kMerged ? gy_positions * p.stride : gy_positions;  // of a window row
  const bool bias_block = kSumsBias && tile.ci_tile == 0 && wg == 0 && p.group_phase_index[tap_group] == 0;
  // A row a_row of the tile: its co, its phase r past each tap's k (merged: row co*s + r, else 0),
  // and as a row of unmerged sums its phase and the phase position of tap slot 0's first A value
  struct TileRow {
    int co, r, phase, shift_min;
  };
  auto tile_row = [&](int a_row) {
    if constexpr (kMerged) {
      const int co = a_row / p.stride, r = a_row % p.stride, past_origin = r - p.phase_origin;
      return past_origin < 0 ? TileRow{co, r, past_origin + p.stride, shift_min - 1} : TileRow{co, r, past_origin, shift_min};
    } else {
      return TileRow{a_row, 0, phase, shift_min};
    }
  };
  // 16-bit groups of 3 taps at consecutive shifts share their A words (multiply's kPairs; H100 kb64
  // bf16 grad_weight 1.63 -> 1.27 ms with grad_bias's ones column; 2-tap groups measured slower,
  // hifigan_up1 bf16 0.90 -> 0.98 ms, and 4-tap groups unmeasured: both read each tap's words apart)
  bool consecutive = !kMerged && k16 && kTaps == 3 && count == kTaps;
#pragma unroll
  for (int t = 1; t < kTaps; ++t) consecutive = consecutive && p.group_tap_shift[p.group_first[tap_group] + t] == shift_min + t;
  // gy rows go in 16-byte chunks from the window start's aligned-down address (gy_s row position
  // window_offset) where the plan allows (gy_copy_elements = kChunk: stride 1 or merged, rows of
  // whole 32-bit words) and the item's chunks lie inside the rows; else element by element from
  // position 0. The window of phase positions from m starts at row element window_start(m): m itself
  // at stride 1 (strided windows go in chunks only merged).
  constexpr int kChunk = 16 / int(sizeof(T));
  const Divider& gy_chunks_per_row = p.group_window_copies[tap_group];  // ceil((kChunk - 1 + gy_elements) / kChunk)
  const int gy_chunks = int(gy_chunks_per_row.divisor), gy_chunk_elements = gy_chunks * kChunk;
  auto window_start = [&](int64_t first_position) {
    return kMerged ? first_position * p.stride - p.phase_origin : first_position;
  };
  auto chunked = [&](int64_t first_element) {
    return p.gy_copy_elements == kChunk && first_element >= kChunk - 1 && first_element + gy_chunk_elements <= p.length_out;
  };
  auto window_offset = [&](const T* window, bool chunks) { return chunks ? elements_past_16_bytes(window) : 0; };

  // x_s element (ci, q): byte b = q * sizeof(T) of the row lies in half b / 128, at 16-byte chunk
  // (b % 128) / 16 swizzled by the row's place in its atom of 8 (wgmma.cuh)
  auto x_slot = [&](unsigned char* x_s, int ci, int q) {
    const int byte = q * int(sizeof(T)), in_row = byte % kWgmmaRowBytes;
    return reinterpret_cast<T*>(x_s + byte / kWgmmaRowBytes * kHalfBytes + ci * kWgmmaRowBytes +
                                ((in_row / 16) ^ swizzle_of_row(ci % 8, kWgmmaRowBytes)) * 16 + in_row % 16);
  };
  // Item (n, chunk) into buffer `buffer`: x in vector copies (a thread keeps its column q and steps
  // through the rows) or one element at a time with a warp per row and lanes along positions; gy in
  // chunks spread over the block or element by element. The visitors get the shared slot, the
  // source, for vector copies the vector size, and how many elements lie inside (or whether the
  // element does); the same walk serves the TF32 pass over this thread's landed copies. The loops
  // stay rolled (unrolled, the addresses they hoisted out of the item loop took 40-56 registers).
  // gy_copies false: x's copies only.
  auto for_each_copy = [&](int64_t item, int buffer, auto&& vector_copy, auto&& element_copy, bool gy_copies) {
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t n = row.div, i0 = int64_t(row.mod) * kGradWPositions;
    unsigned char* x_s = x_buffers + buffer * kXBytes;
    const T* x_n = x + n * p.x_batch_stride + tile.first_ci * p.x_channel_stride;
    if (p.x_copy_elements > 1) {  // i0 is a multiple of every vector size: a copy stays in one 16-byte chunk
      with_copy_size<T>(p.x_copy_elements, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value, kVectorsPerRow = kGradWPositions / kVector;
        constexpr int kRowsApart = kWgmmaThreads / kVectorsPerRow;  // 16-byte copies: 8 or 16, the same swizzle
        const int q = threadIdx.x % kVectorsPerRow * kVector, first_ci = threadIdx.x / kVectorsPerRow;
        const int inside_row = elements_inside(p.length_in - (i0 + q), kVector);
        T* const first_slot = x_slot(x_s, first_ci, q);
        const T* from = x_n + first_ci * p.x_channel_stride + i0 + q;
#pragma unroll 1
        for (int ci = first_ci; ci < kWgmmaBlockCi; ci += kRowsApart, from += kRowsApart * p.x_channel_stride) {
          const int inside = ci < ci_count ? inside_row : 0;
          T* const slot = kRowsApart % 8 == 0 ? first_slot + (ci - first_ci) * (kWgmmaRowBytes / int(sizeof(T)))
                                              : x_slot(x_s, ci, q);
          vector_copy(slot, inside ? from : x, vector, inside);
        }
      });
    } else {
#pragma unroll 1
      for (int ci = warp; ci < kWgmmaBlockCi; ci += kWgmmaThreads / 32) {
        for (int q = lane; q < kGradWPositions; q += 32) {
          const int64_t i = i0 + q;
          element_copy(x_slot(x_s, ci, q), x_n + ci * p.x_channel_stride + i * p.x_length_stride,
                       ci < ci_count && i < p.length_in);
        }
      }
    }
    if (!gy_copies) return;
    T* gy_s = gy_buffers + buffer * gy_rows * gy_row;
    const T* gy_n = gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride;
    const int64_t first_position = i0 + shift_min, first_element = window_start(first_position);
    if (chunked(first_element)) {  // (rows past co_count: zeros, from row 0's first chunk)
      // a walk over the 64 x gy_chunks chunks: this thread's first (row, chunk), and the step to the
      // next one, kWgmmaThreads chunks on (no division in the loop; computed per item: held across
      // items, the four values cost the 3-tap kernels 8-16 more bytes of stack)
      const auto first_chunk = gy_chunks_per_row.divmod(threadIdx.x), step = gy_chunks_per_row.divmod(kWgmmaThreads);
      const int rows_step = int(step.div), chunks_step = int(step.mod);
      int co = int(first_chunk.div), chunk = int(first_chunk.mod);
#pragma unroll 1
      while (co < gy_rows) {
        const int inside = co < co_count ? kChunk : 0;
        const T* window = gy_n + (inside ? co : 0) * p.gy_channel_stride + first_element;
        vector_copy(gy_s + co * gy_row + chunk * kChunk, window - window_offset(window, true) + chunk * kChunk,
                    std::integral_constant<int, kChunk>{}, inside);
        co += rows_step, chunk += chunks_step;
        if (chunk >= gy_chunks) chunk -= gy_chunks, ++co;
      }
    } else if constexpr (kMerged) {  // a warp per row, kInFlight elements a lane at a time (16-bit: synchronous loads)
      constexpr int kInFlight = 4, kWarps = kWgmmaThreads / 32;
      for (int co = warp; co < gy_rows; co += kWarps) {
        for (int first = lane; first < gy_elements; first += 32 * kInFlight) {
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) {
            const int e = first + 32 * u;
            const int64_t j = first_element + e;
            if (e < gy_elements)
              element_copy(gy_s + co * gy_row + e, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                           co < co_count && j >= 0 && j < p.length_out);
          }
        }
      }
    } else {  // rows kRowsInFlight at a time: a 16-bit copy is a synchronous load, several in flight before their stores
      constexpr int kRowsInFlight = 4, kWarps = kWgmmaThreads / 32;
      for (int first_row = warp; first_row < kWgmmaBlockCo; first_row += kWarps * kRowsInFlight) {
        for (int q = lane; q < gy_positions; q += 32) {
          const int64_t m = first_position + q, j = m * p.stride + phase;
#pragma unroll
          for (int r = 0; r < kRowsInFlight; ++r) {
            const int co = first_row + r * kWarps;
            element_copy(gy_s + co * gy_row + q, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                         co < co_count && m >= 0 && j < p.length_out);
          }
        }
      }
    }
  };
  auto stage = [&](int64_t item, int buffer) {
    for_each_copy(
        item, buffer,
        [&](T* to, const T* from, auto vector, int inside) {
          cp_async<decltype(vector)::value * int(sizeof(T))>(to, from, inside * int(sizeof(T)));
        },
        [&](T* to, const T* from, bool inside) { copy_element(to, from, inside, x); }, true);
  };
  // TF32: round this thread's landed copies in place, once instead of at every fragment load (gy's
  // but in bias blocks)
  auto round_own_copies = [&](int64_t item, int buffer) {
    if constexpr (!k16) {
      for_each_copy(
          item, buffer, [&](T* to, const T*, auto vector, int) { round_to_tf32<decltype(vector)::value>(to); },
          [&](T* to, const T*, bool) { round_to_tf32<1>(to); }, !(kRegisterSums && bias_block));
    }
  };

  float acc[kTaps][kWgmmaBlockCi / 2];  // wgmma.cuh's d of each tap slot
#pragma unroll
  for (int t = 0; t < kTaps; ++t)
#pragma unroll
    for (int e = 0; e < kWgmmaBlockCi / 2; ++e) acc[t][e] = 0.0f;
  float bias_sums[2] = {0.0f, 0.0f};  // TF32 bias blocks: rows co 16 * warp + lane / 4 and 8 more
  float ones_acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // 16-bit: slot 0's columns 64-71 (column 64: the sums)
  if constexpr (kOnesColumn) {  // rows 64-71 of every x_s buffer: 1.0, then zeros (16 bytes a thread)
    const T one = from_float<T>(1.0f);
    uint16_t one_bits;
    memcpy(&one_bits, &one, sizeof(one));
    const uint32_t one_pair = one_bits * 0x10001u;
    const int byte = threadIdx.x % 64 * 16;  // byte of the buffer's 8 rows
    const uint32_t word = byte < kWgmmaRowBytes ? one_pair : 0u;
    auto write_ones = [&](int buffer) {
      *reinterpret_cast<uint4*>(x_buffers + buffer * kXBytes + kWgmmaBlockCi * kWgmmaRowBytes + byte) =
          make_uint4(word, word, word, word);
    };
    if constexpr (kPipelined) {
      for (int buffer = threadIdx.x / 64; buffer < buffers * kXPerBuffer; buffer += kPipelineThreads / 64) write_ones(buffer);
      fence_async_shared();  // read by wgmma (the block barrier below)
    } else {
      write_ones(threadIdx.x / 64);
    }
  }
  // Item `item` from x_s (this warpgroup's) and gy_s, both landed: the products into acc
  auto compute_item = [&](int64_t item, const unsigned char* x_s, const T* gy_s) {
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t i0 = int64_t(row.mod) * kGradWPositions, first_element = window_start(i0 + shift_min);
    // A k-step covers kK positions (32 bytes of an x_s row). This lane's two registers of a fragment
    // hold positions `first` and first + kNext (TF32), or the pairs from there (16-bit, the lower
    // position in the low half); its rows are co 16 * warp + lane / 4 and 8 more, each from its
    // window's offset in gy_s
    constexpr int kK = k16 ? 16 : 8, kNext = kK / 2;
    const int lane_position = k16 ? 2 * (lane % 4) : lane % 4;
    const bool chunks = kPipelined || chunked(first_element);  // (pipelined: every window from its 16-byte boundary)
    const T* a_rows[2];     // merged: row (co, r) at tap slot 0, else at shift 0
    int window_parity = 0;  // of every row's offset (16-bit chunks: rows of whole 32-bit words)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // (merged rows past the tile's: its last gy_s row, whose products are not written)
      const TileRow a_row = tile_row(16 * warp + lane / 4 + 8 * half);
      const int co = kMerged ? min(a_row.co, gy_rows - 1) : a_row.co, r = a_row.r;
      const int offset = window_offset(gy + row.div * p.gy_batch_stride + (tile.first_co + co) * p.gy_channel_stride + first_element, chunks);
      a_rows[half] = kMerged ? gy_s + co * gy_row + offset + r + lane_position * p.stride
                             : gy_s + co * gy_row + offset + lane_position - shift_min;
      window_parity = offset % 2;
    }
    // kEdge: the item reaches past L_in; the A values of positions i >= L_in are dropped
    const int positions_inside = int(min(int64_t(kGradWPositions), p.length_in - i0));
    // kBias: a TF32 bias block (its register sums, and the rounding of A). kPairs >= 0: 16-bit taps at
    // consecutive shifts, whose pairs start kPairs + t elements past tap 0's aligned word (kPairs:
    // window_parity): the words of each register place load once for all taps (kWords of them).
    auto multiply = [&](auto edge, auto bias, auto pairs) {
      constexpr bool kEdge = decltype(edge)::value, kBias = decltype(bias)::value;
      constexpr bool kRoundA = kBias || (kPipelined && !k16);  // TF32 from unrounded gy_s (pipelined: always)
      constexpr int kPairs = decltype(pairs)::value, kWords = kPairs < 0 ? 1 : (kPairs + kTaps) / 2 + 1;
      // Two sets of A registers: k-step s loads set s % 2 while the wgmma of k-step s - 1 (set
      // (s + 1) % 2) may still run; the wait for at most one running group after each commit frees
      // the set loaded next. The sets and the accumulators are pinned by empty asm operands so that
      // the compiler neither reuses nor copies them while a group runs.
      uint32_t a[2][kTaps][4];
#pragma unroll
      for (int kstep = 0; kstep < kGradWPositions / kK; ++kstep) {
        uint32_t (&set)[kTaps][4] = a[kstep % 2];
        uint32_t words[4][kWords];  // kPairs >= 0: register place r (as set[t][r]) from the aligned word of tap 0's pair
        if constexpr (kPairs >= 0) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const uint32_t* aligned = reinterpret_cast<const uint32_t*>(a_rows[r % 2] + shift_min + kstep * kK - kPairs + kNext * (r / 2));
#pragma unroll
            for (int w = 0; w < kWords; ++w) words[r][w] = aligned[w];
          }
        }
#pragma unroll
        // merged: register place e's value of slot t lies t positions (t*stride elements) past slot
        // 0's; with the 16-bit pair's second value there are kTaps (+ 1) of them (slots past count
        // repeat tap 0)
        constexpr int kMergedValues = kTaps + (k16 ? 1 : 0);
        uint32_t merged_values[4][kMergedValues];  // 16-bit: the value's bits in the low half
        if constexpr (kMerged) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const T* at = a_rows[e % 2] + (kstep * kK + kNext * (e / 2)) * p.stride;
#pragma unroll
            for (int v = 0; v < kMergedValues; ++v) {
              if constexpr (k16) {
                merged_values[e][v] = reinterpret_cast<const unsigned short*>(at)[v * p.stride];
              } else {
                merged_values[e][v] = __float_as_uint(at[v * p.stride]);
              }
            }
          }
        }
#pragma unroll
        for (int t = 0; t < kTaps; ++t) {
          if constexpr (kMerged) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const bool own = t < count;  // (selects between constant indices: the values stay in registers)
              set[t][e] = own ? merged_values[e][t] : merged_values[e][0];
              if constexpr (k16) set[t][e] |= (own ? merged_values[e][t + 1] : merged_values[e][1]) << 16;
            }
          } else if constexpr (kPairs >= 0) {
            const int o = kPairs + t, w = o / 2;  // tap t's pair: element o past the aligned word
#pragma unroll
            for (int r = 0; r < 4; ++r) set[t][r] = o % 2 == 0 ? words[r][w] : __funnelshift_r(words[r][w], words[r][min(w + 1, kWords - 1)], 16);
          } else {
            const int shift = p.group_tap_shift[p.group_first[tap_group] + (t < count ? t : 0)];
            // 16-bit: odd, the pairs start at odd elements (lane_position is even); each is cut from the
            // two aligned words around it (two loads and a funnel shift, the same for both cases)
            const int odd = k16 ? (window_parity - shift_min + shift) & 1 : 0;
            const T* at = a_rows[0] + shift + kstep * kK - odd;
            const T* at_below = a_rows[1] + shift + kstep * kK - odd;  // 8 rows down
            auto word = [&](const T* aligned_at) {
              if constexpr (k16) {
                const uint32_t* words = reinterpret_cast<const uint32_t*>(aligned_at);
                return __funnelshift_r(words[0], words[1], 16 * odd);
              } else {
                return __float_as_uint(*aligned_at);
              }
            };
            set[t][0] = word(at), set[t][1] = word(at_below);
            set[t][2] = word(at + kNext), set[t][3] = word(at_below + kNext);
          }
          if constexpr (kEdge) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int q = kstep * kK + lane_position + kNext * half;  // item position of register half * 2 (and + 1)
              uint32_t keep = q < positions_inside ? ~0u : 0u;          // 16-bit: the low half, then the high one
              if constexpr (k16) keep = (keep & 0xffffu) | (q + 1 < positions_inside ? 0xffff0000u : 0u);
              set[t][2 * half] &= keep, set[t][2 * half + 1] &= keep;
            }
          }
          if constexpr (kBias) {  // slot 0's sums (registers 0, 2: row g; 1, 3: row g + 8)
            if (t == 0) {
#pragma unroll
              for (int half = 0; half < 2; ++half) bias_sums[half] += __uint_as_float(set[0][half]) + __uint_as_float(set[0][half + 2]);
            }
          }
          if constexpr (kRoundA) {
#pragma unroll
            for (int e = 0; e < 4; ++e) set[t][e] = to_tf32(__uint_as_float(set[t][e]));
          }
        }
        // B: the k-step's 32 bytes of the x_s rows
        const int byte = kstep * 32;
        const uint64_t b = swizzled_b_descriptor<kWgmmaRowBytes>(x_s + byte / kWgmmaRowBytes * kHalfBytes + byte % kWgmmaRowBytes);
#pragma unroll
        for (int t = 0; t < kTaps; ++t) wgmma_fence_operand(set[t]), wgmma_fence_accumulators(acc[t]);
        if constexpr (kOnesColumn) wgmma_fence_accumulators(ones_acc);
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < kTaps; ++t) {
          if constexpr (kOnesColumn) {
            if (t == 0) {
              wgmma_kstep_n72<Kind>(acc[0], ones_acc, set[0], b);
              continue;
            }
          }
          wgmma_kstep<Kind, kWgmmaBlockCi>(acc[t], set[t], b);
        }
        wgmma_commit();
#pragma unroll
        for (int t = 0; t < kTaps; ++t) wgmma_fence_accumulators(acc[t]);
        if constexpr (kOnesColumn) wgmma_fence_accumulators(ones_acc);
        wgmma_wait<1>();  // k-step s - 1 is done: its set is loaded next
        if (kstep > 0) {
#pragma unroll
          for (int t = 0; t < kTaps; ++t) wgmma_fence_operand(a[(kstep + 1) % 2][t]);
        }
      }
      wgmma_wait<0>();  // before the buffer's next use and before the accumulators are read
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        wgmma_fence_operand(a[(kGradWPositions / kK - 1) % 2][t]);
        wgmma_fence_accumulators(acc[t]);
      }
      if constexpr (kOnesColumn) wgmma_fence_accumulators(ones_acc);
    };
    auto multiply_item = [&](auto edge) {
      using Generic = std::integral_constant<int, -1>;
      if (kRegisterSums && bias_block) {
        multiply(edge, std::bool_constant<kRegisterSums>{}, Generic{});
        return;
      }
      if constexpr (k16 && !kMerged) {
        if (consecutive) {
          window_parity ? multiply(edge, std::false_type{}, std::integral_constant<int, 1>{})
                        : multiply(edge, std::false_type{}, std::integral_constant<int, 0>{});
          return;
        }
      }
      multiply(edge, std::false_type{}, Generic{});
    };
    if (positions_inside < kGradWPositions) {
      multiply_item(std::true_type{});
    } else {
      multiply_item(std::false_type{});
    }
  };
  const int64_t begin = tile.slice * p.items / p.slices, end = (tile.slice + 1) * p.items / p.slices;
  if constexpr (kPipelined) {
    // the ring: stage s is x_s buffers 2s (ci 0-63) and 2s + 1 (ci 64-127) and gy_s buffer s, filled
    // when full[s] completes (an arrival of each producer thread, after its copies, and every
    // announced byte), free again when empty[s] has the consumers' 8 warps
    uint64_t* full = reinterpret_cast<uint64_t*>(gy_buffers + buffers * gy_rows * gy_row);
    uint64_t* empty = full + buffers;
    if (threadIdx.x == 0) {
      for (int s = 0; s < buffers; ++s) {
        mbarrier_init(full + s, kWgmmaThreads);
        mbarrier_init(empty + s, kPipelineConsumerThreads / 32);
      }
      mbarrier_init_fence();
    }
    __syncthreads();
    if (threadIdx.x >= kPipelineConsumerThreads) {  // ---- the producer warpgroup ----
      set_max_registers<kProducerRegisters, false>();
      const int producer = threadIdx.x - kPipelineConsumerThreads;
      // a walk over the co_count x gy_chunks chunks of an item's windows, kWgmmaThreads chunks apart
      // (as for_each_copy's)
      const auto first_chunk = gy_chunks_per_row.divmod(producer), step = gy_chunks_per_row.divmod(kWgmmaThreads);
      const int rows_step = int(step.div), chunks_step = int(step.mod);
      int stage = 0;
      uint32_t parity = 0;
      for (int64_t item = begin; item < end; ++item) {
        mbarrier_wait(empty + stage, parity ^ 1);
        uint64_t* landed = full + stage;
        const auto row = p.div_chunks_per_row.divmod(unsigned(item));
        const int n = int(row.div), i0 = int(row.mod) * kGradWPositions;
        // x: a box of 64 ci x 128 bytes of positions per consumer warpgroup and half, swizzled as wgmma's
        // B (the tensor map's), zeros past the tensor's positions and channels
        if (producer == 0) {
          constexpr int kHalves = int(sizeof(T)) / 2, kHalfPositions = kWgmmaRowBytes / int(sizeof(T));
          mbarrier_expect_bytes(landed, kXPerBuffer * kHalves * kHalfBytes);
          for (int w = 0; w < kXPerBuffer; ++w)
            for (int half = 0; half < kHalves; ++half)
              tensor_copy_to_shared(x_buffers + (stage * kXPerBuffer + w) * kXBytes + half * kHalfBytes, &p.x_map,
                                    i0 + half * kHalfPositions, int(tile.first_ci) + w * kWgmmaBlockCi, n, landed);
        }
        // gy: each row's window from its 16-byte boundary (rows past co_count are not staged: their
        // products are not written); inside the rows in 16-byte cp.async copies from every producer
        // thread (one bulk copy a row measured 2x slower on kb64 bf16: 64 small copies an item),
        // at a row's ends by the first warp, a lane a row (stage_window)
        T* gy_s = gy_buffers + stage * gy_rows * gy_row;
        const T* gy_n = gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride;
        const int first_element = int(window_start(i0 + shift_min));
        if (chunked(first_element)) {
          int co = int(first_chunk.div), chunk = int(first_chunk.mod);
#pragma unroll 1
          while (co < co_count) {
            const T* window = gy_n + co * p.gy_channel_stride + first_element;
            cp_async_16(gy_s + co * gy_row + chunk * kChunk, window - elements_past_16_bytes(window) + chunk * kChunk);
            co += rows_step, chunk += chunks_step;
            if (chunk >= gy_chunks) chunk -= gy_chunks, ++co;
          }
          cp_async_arrive(landed);
        } else {
          for (int co = producer; co < co_count && producer < 32; co += 32) {
            const T* gy_co = gy_n + co * p.gy_channel_stride;
            stage_window(gy_s + co * gy_row, gy_co, first_element - elements_past_16_bytes(gy_co + first_element), p.length_out,
                         gy_chunk_elements, landed);
          }
          fence_async_shared();  // these stores before later bulk copies into the stage
          mbarrier_arrive(landed);
        }
        if (++stage == buffers) stage = 0, parity ^= 1;
      }
      return;
    }
    set_max_registers<kConsumerRegisters, true>();
    int stage = 0;
    uint32_t parity = 0;
    for (int64_t item = begin; item < end; ++item) {
      mbarrier_wait(full + stage, parity);
      // (float x_s lands rounded to TF32: the tensor map's TFLOAT32; gy's A values round as they load)
      compute_item(item, x_buffers + (stage * kXPerBuffer + wg) * kXBytes, gy_buffers + stage * gy_rows * gy_row);
      __syncwarp();
      if (lane == 0) mbarrier_arrive(empty + stage);
      if (++stage == buffers) stage = 0, parity ^= 1;
    }
  } else {
    if (begin < end) stage(begin, 0);
    cp_async_commit();
    int buffer = 0;
    for (int64_t item = begin; item < end; ++item, buffer ^= 1) {
      if (item + 1 < end) stage(item + 1, buffer ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      round_own_copies(item, buffer);
      fence_async_shared();  // x_s (cp.async and the rounding stores) is read by wgmma
      __syncthreads();
      compute_item(item, x_buffers + buffer * kXBytes, gy_buffers + buffer * gy_rows * gy_row);
      __syncthreads();  // this buffer is consumed before the item after next overwrites it
    }
    cp_async_wait<0>();
  }

  if (bias_block) {
    if constexpr (kOnesColumn) {  // column 64: lanes 4g's accumulators 0 (row g) and 2 (row g + 8)
      bias_sums[0] = lane % 4 == 0 ? ones_acc[0] : 0.0f;
      bias_sums[1] = lane % 4 == 0 ? ones_acc[2] : 0.0f;
    }
    // slice 0: the phase positions outside slot 0's range, [0, covered_begin) and [covered_end,
    // phase_length), lanes of a row taking every fourth of the (n, position) pairs
    if (tile.slice == 0) {
      // add(address of batch element n's position) for this lane's share of a row's positions outside
      // its range (a row of `row_phase` whose slot 0 starts at `row_shift_min`; from the tile's first co)
      auto for_each_edge_position = [&](int row_phase, int row_shift_min, auto&& add) {
        const int64_t phase_length = (int64_t(p.length_out) - row_phase + p.stride - 1) / p.stride;
        const int64_t covered_begin = std::clamp<int64_t>(row_shift_min, 0, phase_length);
        const int64_t covered_end = std::clamp<int64_t>(int64_t(p.length_in) + row_shift_min, covered_begin, phase_length);
        const int64_t head = covered_begin, per_row = head + phase_length - covered_end;
        for (int64_t index = lane % 4; index < p.batch * per_row; index += 4) {
          const int64_t n = index / per_row, r = index % per_row, m = r < head ? r : covered_end + (r - head);
          add(gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride + (m * p.stride + row_phase) * p.gy_length_stride);
        }
      };
      if constexpr (kMerged) {  // each row its own phase
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const TileRow a_row = tile_row(16 * warp + lane / 4 + 8 * half);
          if (a_row.co < co_count)
            for_each_edge_position(a_row.phase, a_row.shift_min,
                                   [&](const T* at) { bias_sums[half] += to_float(at[a_row.co * p.gy_channel_stride]); });
        }
      } else {  // both rows of the tile's phase
        for_each_edge_position(phase, shift_min, [&](const T* at) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int co = 16 * warp + lane / 4 + 8 * half;
            if (co < co_count) bias_sums[half] += to_float(at[co * p.gy_channel_stride]);
          }
        });
      }
    }
    // bias_partial[slice][phase][g*Cog + co]: the four lanes of each row added in a fixed order
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = bias_sums[half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const TileRow a_row = tile_row(16 * warp + lane / 4 + 8 * half);
      if (lane % 4 == 0 && a_row.co < co_count)
        bias_partial[(tile.slice * p.stride + a_row.phase) * (p.groups * p.cog) + tile.first_co + a_row.co] = sum;
    }
  }

  // partial[slice][(g*Cig + ci) * Cog + co][k]: acc[t][4j + e] is row 16 * warp + lane / 4 + 8 * (e / 2),
  // ci 8j + 2 * (lane % 4) + e % 2 (wgmma.cuh); merged, slot t's k is group_tap (its k of r = 0) + r
  float* out = partial + tile.slice * (p.groups * p.cig * p.cog * p.taps);
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    if (t >= count) break;
    const int k = p.group_tap[p.group_first[tap_group] + t];
#pragma unroll
    for (int e = 0; e < kWgmmaBlockCi / 2; ++e) {
      const TileRow a_row = tile_row(16 * warp + lane / 4 + 8 * (e % 4 / 2));
      const int ci = kWgmmaBlockCi * wg + 8 * (e / 4) + 2 * (lane % 4) + e % 2;
      if (ci < ci_count && a_row.co < co_count)
        out[tile.partial_index(p, ci, a_row.co, k + a_row.r)] = acc[t][e];
    }
  }
#endif
}

}  // namespace convt::cuda
