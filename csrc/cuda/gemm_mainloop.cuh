// The MMA pieces of the implicit GEMM (docs/design.md §3.3-§3.7): operands and accumulators,
// mma.sync warp tiles, the warpgroup (wgmma) tap shared by both kernels, and each kernel's
// mainloop over a step's (implicit_gemm_kernel) or a tile's (pipelined_gemm_kernel) taps.
#pragma once

#include <type_traits>

#include "cuda/gemm_loader.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// ---- operands ------------------------------------------------------------------------------------

// big + small TF32 parts of float32 values (3xTF32, docs/design.md §7). A non-finite value makes its
// small part NaN (inf - inf); Accumulator::value drops the correction products then.
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
// (The warpgroups' in^T fragments hold the same, from rows that may sit apart: load_channel_rows.)
template <typename T, Math kMath>
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const T* column, int row_elements, int c) {
  if constexpr (kMath == Math::k16Bit) {
    const unsigned short* x16 = reinterpret_cast<const unsigned short*>(column);
    auto pair = [&](int ch) { return uint32_t(x16[ch * row_elements]) | (uint32_t(x16[(ch + 1) * row_elements]) << 16); };
    b[0] = pair(2 * c);
    b[1] = pair(2 * c + 8);
  } else {
    b[0] = __float_as_uint(column[c * row_elements]);
    b[1] = __float_as_uint(column[(c + 4) * row_elements]);
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

// Where this lane's rows of a k-step sit in x_s beyond its column: row_offsets' shifts of its rows,
// or with merged channels the offsets of its channels c and c + 4 (16-bit: 2c and 2c + 8) as channel
// (co, r) = co*x_row_elements + r (load_b_merged). Otherwise set_half_bases and set_lane_offsets
// make of them the fragments' rows: a chunk's channels in halves of a k-step (8 channels, TF32 4), half h at
// `half_base[h]` elements from the lane's column, and in a half the lane's channels 2c and 2c + 1
// (TF32: c) at `lane_offset` (load_channel_rows).
// paired_positions (GemmPlan::permuted_positions): the lane's second fragment row (M row g + 8) is
// the position after its first, not 8 on, and at an even address the two come by 4-byte loads
// (load_position_pair).
struct LaneRows {
  int shift_low = 0, shift_high = 0, phase_low = 0, phase_high = 0;
  int lane_offset[2] = {0, 0};
  int half_base[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool paired_positions = false;
};
// The MMA's k index kappa of a chunk is x_s row kappa: with `phases` channel phases
// (GemmPlan::map_row_phases) the rows of phase j (kappa / (staged_rows / phases)) start at
// j * map_phase_elements, that phase's shift late (channel_phase_shift), and hold channels
// (kappa mod (staged_rows / phases)) * phases + j (the packed weight's k index the same,
// pack_gemm_weight_kernel); a half of a k-step lies in one phase. Phases 1: row kappa is channel kappa.
template <typename T, Math kMath>
__device__ __forceinline__ void set_half_bases(const GemmProblem& p, int phases, LaneRows& rows) {
  constexpr int kHalfChannels = kMath == Math::k16Bit ? 8 : 4;
  const int phase_rows = p.staged_rows / phases;
#pragma unroll
  for (int h = 0; h < 8; ++h) {
    const int first = h * kHalfChannels, phase = phases > 1 ? first / phase_rows : 0;
    rows.half_base[h] = phases > 1 ? phase * p.map_phase_elements + (first % phase_rows) * p.x_row_elements + channel_phase_shift<T>(p, phase)
                                   : first * p.x_row_elements;
  }
}
// The lane's channels 2c and 2c + 1 (TF32: c) in a half, with row_offsets' shifts
template <Math kMath>
__device__ __forceinline__ void set_lane_offsets(const GemmProblem& p, int lane, LaneRows& rows) {
  const int c = lane % 4;
  if constexpr (kMath == Math::k16Bit) {
    rows.lane_offset[0] = 2 * c * p.x_row_elements + rows.shift_low, rows.lane_offset[1] = (2 * c + 1) * p.x_row_elements + rows.shift_high;
  } else {
    rows.lane_offset[0] = c * p.x_row_elements + rows.shift_low;
  }
}
// A warpgroup's in^T fragment (load_b's registers) of k-step `kstep` from the rows LaneRows places
template <typename T, Math kMath>
__device__ __forceinline__ void load_channel_rows(uint32_t (&b)[2], const T* column, const LaneRows& rows, int kstep) {
  const T* low = column + rows.half_base[2 * kstep];
  const T* high = column + rows.half_base[2 * kstep + 1];
  if constexpr (kMath == Math::k16Bit) {
    const unsigned short* low16 = reinterpret_cast<const unsigned short*>(low);
    const unsigned short* high16 = reinterpret_cast<const unsigned short*>(high);
    b[0] = uint32_t(low16[rows.lane_offset[0]]) | (uint32_t(low16[rows.lane_offset[1]]) << 16);
    b[1] = uint32_t(high16[rows.lane_offset[0]]) | (uint32_t(high16[rows.lane_offset[1]]) << 16);
  } else {
    b[0] = __float_as_uint(low[rows.lane_offset[0]]);
    b[1] = __float_as_uint(high[rows.lane_offset[0]]);
  }
}
// load_channel_rows of two adjacent positions (`low` at `column`, `high` the next) at an even
// position (4-byte aligned, 16-bit): a 4-byte load a channel row gives both, PRMT pairs the channels
template <typename T>
__device__ __forceinline__ void load_position_pair(uint32_t (&low)[2], uint32_t (&high)[2], const T* column, const LaneRows& rows,
                                                   int kstep) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const T* half = column + rows.half_base[2 * kstep + h];
    const uint32_t first = *reinterpret_cast<const uint32_t*>(half + rows.lane_offset[0]);   // channel 2c at p, p + 1
    const uint32_t second = *reinterpret_cast<const uint32_t*>(half + rows.lane_offset[1]);  // channel 2c + 1
    low[h] = __byte_perm(first, second, 0x5410);   // position p: 2c low, 2c + 1 high
    high[h] = __byte_perm(first, second, 0x7632);  // position p + 1
  }
}
template <Math kMath>
__device__ __forceinline__ void merged_channel_offsets(const GemmProblem& p, int lane, LaneRows& rows) {
  const int low = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4, high = low + (kMath == Math::k16Bit ? 8 : 4);
  rows.phase_low = low / p.channel_phases * p.x_row_elements + low % p.channel_phases;
  rows.phase_high = high / p.channel_phases * p.x_row_elements + high % p.channel_phases;
}

// ---- warpgroup tiles: the tap of both kernels ----------------------------------------------------

// Where a tap's operands sit: this lane's first column in x_s, and the tap's weight slot (3xTF32:
// and its small parts). Each kernel computes them (WarpgroupMma::run_tap calls its `operands`).
template <typename T>
struct TapOperands {
  const T* x_tap;
  const char* w_slot;
  const char* w_small_slot;
};

// A consumer warpgroup's wgmma state (docs/design.md §3.5): kSubtiles 64-column subtiles x kBlockM
// rows. acc[s][4j + e] is row first_row + 8j + e % 2 (first_row = row_tile * kBlockM + 2 * (lane %
// 4)), column col(s) + 8 * (e / 2) (col(s): this lane's first column of subtile s); 3xTF32 keeps the
// correction products apart (Accumulator). The A fragments load in two sets, one group of k-steps'
// while the other's wgmma runs. Every array stays statically indexed, in registers.
template <typename T, Math kMath, Merge kMerge, int kBlockM, int kSubtiles>
struct WarpgroupMma {
  static constexpr bool k3xTF32 = kMath == Math::k3xTF32;
  // Permuted positions (GemmPlan::permuted_positions) are planned only for 16-bit problems whose
  // rows and channels do not merge: every other instantiation keeps the second fragment column 8 on
  // as a constant (an immediate offset of each load and store, no runtime select in the k-step loop)
  static constexpr bool kMayPermute = kMath == Math::k16Bit && kMerge == Merge::kNone;
  __device__ static __forceinline__ bool permuted(const GemmProblem& p) { return kMayPermute && p.permuted_positions; }
  float acc[kSubtiles][kBlockM / 2];         // wgmma.cuh's d, per subtile (3xTF32: big x big)
  float correction[kSubtiles][kBlockM / 2];  // 3xTF32: the correction products (unused otherwise)
  uint32_t sets[2][2 * kSubtiles][4];        // two sets of A fragments (run_tap; 3xTF32: big parts)
  uint32_t small_sets[2][2 * kSubtiles][4];  // 3xTF32: their small parts (unused otherwise)

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int s = 0; s < kSubtiles; ++s)
#pragma unroll
      for (int e = 0; e < kBlockM / 2; ++e) acc[s][e] = correction[s][e] = 0.0f;
  }
  // The result of acc[s][e] (3xTF32: Accumulator::value)
  __device__ __forceinline__ float value(int s, int e) const {
    if constexpr (k3xTF32) {
      return isfinite(acc[s][e]) ? acc[s][e] + correction[s][e] : acc[s][e];
    } else {
      return acc[s][e];
    }
  }
  __device__ __forceinline__ void fence_accumulators() {
#pragma unroll
    for (int s = 0; s < kSubtiles; ++s) {
      wgmma_fence_accumulators(acc[s]);
      if constexpr (k3xTF32) wgmma_fence_accumulators(correction[s]);
    }
  }

  // One tap: in^T fragments of this warp's 16 columns of each subtile (operands().x_tap: the x_s
  // address of this lane's first column; loaded like mma.sync's B of columns g and g + 8), then the
  // k-steps of wgmma on the tap's A^T slot (w_slot; 3xTF32: w_small_slot its small parts), in two groups of half
  // the k-steps: one group's fragments load while the other's wgmma runs (a group is waited for when
  // at most the next one runs, before its set loads again two groups later; the sets and the
  // accumulators are pinned by empty asm operands meanwhile). round_fragments: TF32 x_s not yet
  // rounded, the fragments round as they load.
  template <int kKsteps, typename Operands>
  __device__ __forceinline__ void run_tap(const GemmProblem& p, Operands&& operands, int lane, const LaneRows& rows,
                                          bool round_fragments) {
    constexpr int kHalf = kKsteps / 2;
    using Kind = std::conditional_t<std::is_same_v<T, float>, Tf32, T>;
    constexpr int kKstepChannels = kMath == Math::k16Bit ? 16 : 8;
    const TapOperands<T> tap = operands();
    const T* const x_tap = tap.x_tap;
    // (permuted positions: the lane's second row is the next position; 4-byte loads at an even one)
    const bool paired = kMayPermute && rows.paired_positions;
    const int high_column = paired ? 1 : 8;
    const bool pair_loads = paired && reinterpret_cast<uintptr_t>(x_tap) % 4 == 0;
    const char* const w_slot = tap.w_slot;
    const char* const w_small_slot = tap.w_small_slot;
    uint32_t (&half_sets)[2][kHalf][kSubtiles][4] = *reinterpret_cast<uint32_t(*)[2][kHalf][kSubtiles][4]>(&sets[0][0][0]);
    uint32_t (&small_half_sets)[2][kHalf][kSubtiles][4] =
        *reinterpret_cast<uint32_t(*)[2][kHalf][kSubtiles][4]>(&small_sets[0][0][0]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t (&a)[kHalf][kSubtiles][4] = half_sets[half];
      uint32_t (&a_small)[kHalf][kSubtiles][4] = small_half_sets[half];
#pragma unroll
      for (int k = 0; k < kHalf; ++k)
#pragma unroll
        for (int s = 0; s < kSubtiles; ++s) {
          uint32_t low[2], high[2];  // columns g and g + 8
          if constexpr (kMerge == Merge::kChannels) {
            const T* x_kstep = x_tap + s * 64 * p.channel_phases + (half * kHalf + k) * kKstepChannels / p.channel_phases * p.x_row_elements;
            load_b_merged<T, kMath>(low, x_kstep, rows.phase_low, rows.phase_high);
            load_b_merged<T, kMath>(high, x_kstep + 8 * p.channel_phases, rows.phase_low, rows.phase_high);
          } else if (pair_loads) {
            load_position_pair<T>(low, high, x_tap + s * 64, rows, half * kHalf + k);
          } else {
            load_channel_rows<T, kMath>(low, x_tap + s * 64, rows, half * kHalf + k);
            load_channel_rows<T, kMath>(high, x_tap + s * 64 + high_column, rows, half * kHalf + k);
          }
          a[k][s][0] = low[0], a[k][s][1] = high[0], a[k][s][2] = low[1], a[k][s][3] = high[1];
          if constexpr (kMath == Math::kTF32) {
            if (round_fragments) {
#pragma unroll
              for (int e = 0; e < 4; ++e) a[k][s][e] = to_tf32(__uint_as_float(a[k][s][e]));
            }
          }
          if constexpr (k3xTF32) {
            const uint32_t raw[4] = {a[k][s][0], a[k][s][1], a[k][s][2], a[k][s][3]};
            split_tf32(raw, a[k][s], a_small[k][s]);
            wgmma_fence_operand(a_small[k][s]);
          }
          wgmma_fence_operand(a[k][s]);
        }
      fence_accumulators();
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kHalf; ++k) {
        const uint64_t b = swizzled_descriptor<kKsteps * 32>(w_slot + (half * kHalf + k) * 32);
#pragma unroll
        for (int s = 0; s < kSubtiles; ++s) wgmma_kstep<Kind, kBlockM>(acc[s], a[k][s], b);
        if constexpr (k3xTF32) {  // small x big and big x small
          const uint64_t b_small = swizzled_descriptor<kKsteps * 32>(w_small_slot + (half * kHalf + k) * 32);
#pragma unroll
          for (int s = 0; s < kSubtiles; ++s) {
            wgmma_kstep<Kind, kBlockM>(correction[s], a_small[k][s], b);
            wgmma_kstep<Kind, kBlockM>(correction[s], a[k][s], b_small);
          }
        }
      }
      wgmma_commit();
      fence_accumulators();
      wgmma_wait<1>();  // the group before is done: the other set may load
#pragma unroll
      for (int k = 0; k < kHalf; ++k)
#pragma unroll
        for (int s = 0; s < kSubtiles; ++s) {
          wgmma_fence_operand(half_sets[half ^ 1][k][s]);
          if constexpr (k3xTF32) wgmma_fence_operand(small_half_sets[half ^ 1][k][s]);
        }
    }
  }
  // run_tap for the problem's k-steps (2 or 4)
  template <typename Operands>
  __device__ __forceinline__ void run_tap(const GemmProblem& p, Operands&& operands, int lane, const LaneRows& rows,
                                          bool round_fragments) {
    if (p.ksteps == 4) {
      run_tap<4>(p, operands, lane, rows, round_fragments);
    } else {
      run_tap<2>(p, operands, lane, rows, round_fragments);
    }
  }
  // The last group, before the accumulators are read or the step's shared memory is reused
  __device__ __forceinline__ void wait_all() {
    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int f = 0; f < 2 * kSubtiles; ++f) {
        wgmma_fence_operand(sets[h][f]);
        if constexpr (k3xTF32) wgmma_fence_operand(small_sets[h][f]);
      }
    fence_accumulators();
  }
};

// ---- implicit_gemm_kernel: one step --------------------------------------------------------------

// The MMA of one staged step: mma.sync on 8 warps of kWarpTilesM x kWarpTilesN tiles, or wgmma on
// two warpgroups (WarpgroupMma, one 64-column subtile each)
template <typename T, Math kMath, int kWarpTilesM, int kWarpsM, bool kWarpgroups, bool kShiftedRows, Merge kMerge>
struct ImplicitGemmMainloop {
  static constexpr int kBlockM = kBlockMOf<kWarpTilesM, kWarpsM>, kBlockN = kBlockNOf<kWarpsM>;
  using Accumulators = Accumulator<kMath>[kWarpTilesM][kWarpTilesN];  // mma.sync tiles
  using Warpgroup = WarpgroupMma<T, kMath, kMerge, kBlockM, 1>;      // warpgroup tiles
  const GemmProblem& p;
  const T* in;
  int lane, warp;
  int warp_mtile;  // first m16 tile of this warp
  int warp_col;    // first column of this warp

  __device__ __forceinline__ ImplicitGemmMainloop(const GemmProblem& problem, const T* in_, int lane_, int warp_)
      : p(problem), in(in_), lane(lane_), warp(warp_) {
    warp_mtile = (warp % kWarpsM) * kWarpTilesM;
    warp_col = (warp / kWarpsM) * kWarpTilesN * 8;
  }

  __device__ __forceinline__ void clear(Accumulators& acc, Warpgroup& wg) const {
    if constexpr (kWarpgroups) {
#pragma unroll
      for (int e = 0; e < kBlockM / 2; ++e) wg.acc[0][e] = 0.0f;
    } else {
#pragma unroll
      for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kWarpTilesN; ++nt) acc[mt][nt].clear();
    }
  }

  // The step's taps on w_s (its slots) and x_s; with warpgroups every group done when it returns
  __device__ __forceinline__ void run_step(const GemmTile& tile, const GemmStep& step, const uint32_t* w_s, const T* x_s,
                                           Accumulators& acc, Warpgroup& wg) const {
    LaneRows rows;  // (0 where the tile went element by element)
    if constexpr (kMerge == Merge::kChannels) merged_channel_offsets<kMath>(p, lane, rows);
    if constexpr (kShiftedRows) {
      const int first = tile.col_tile * kBlockN + p.first_offset - p.lead;
      if (chunked_rows<T>(first)) {
        const int64_t first_channel = int64_t(tile.g) * p.channels_per_group + problem_chunk(p, step.chunk) * p.chunk_channels;
        const int low = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4;
        const T* window = in + tile.n * p.in_batch_stride + (first_channel + low) * p.in_channel_stride + first;
        rows.shift_low = elements_past_16_bytes(window), rows.shift_high = elements_past_16_bytes(window + p.in_channel_stride);
      }
    }
    if constexpr (kWarpgroups && kMerge != Merge::kChannels) {
      set_half_bases<T, kMath>(p, 1, rows);
      set_lane_offsets<kMath>(p, lane, rows);
    }
    for (int i = step.first_tap; i < step.end_tap; ++i) {
      const int offset = p.slot_offset[i];
      const int slot = p.resident ? step.chunk * p.taps + i : i - step.first_tap;
      if constexpr (kWarpgroups) {
        auto operands = [&] {
          // column col of the tile reads x_s position (col - col0) + offset_t - first_offset + lead
          // (merged channels: its row's phases from (col - col0 + offset_t - first_offset) * channel_phases + lead)
          const T* x_tap = x_s + (warp / 4) * 64 + (warp % 4) * 16 + lane / 4 + offset - p.first_offset + p.lead;
          if constexpr (kMerge == Merge::kChannels)
            x_tap = x_s + ((warp / 4) * 64 + (warp % 4) * 16 + lane / 4 + offset - p.first_offset) * p.channel_phases + p.lead;
          const char* w_slot = reinterpret_cast<const char*>(w_s + slot * p.slot_words);
          return TapOperands<T>{x_tap, w_slot, w_slot};
        };
        wg.run_tap(p, operands, lane, rows, false);  // (x_s rounded by round_x)
      } else {
        const T* x_tap = x_s + warp_col + lane / 4 + offset - p.first_offset + p.lead;
        const uint32_t* w_tap = w_s + slot * p.slot_words + warp_mtile * p.ksteps * kFragmentWords + lane * 4;
        warp_tile_tap(acc, x_tap, w_tap);
      }
    }
    if constexpr (kWarpgroups) wg.wait_all();  // before the accumulators are read or the buffers reused
  }

  // mma.sync on one tap: A fragments from w_tap (fragment order), B from x_tap (this lane's column),
  // k-steps `count` at a time (unrolled together: their loads can run ahead of the mma)
  __device__ __forceinline__ void warp_tile_tap(Accumulators& acc, const T* x_tap, const uint32_t* w_tap) const {
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
};

// ---- pipelined_gemm_kernel: the consumers' mainloop ----------------------------------------------

// A consumer warpgroup's MMA of one out phase of a tile: for each step (a pair's taps over a chunk;
// kPairs: the problem has several pairs, out phases or runs of taps, else every tap is in each step),
// wait for its stage's `full` barrier, run its taps on the stage, and hand the stage back (`empty`,
// a warp each) once its last group is done. Warp w computes columns
// (w / 4) * 64 * kSubtiles + 64 s + (w % 4) * 16 + lane / 4 (+ 8) in subtile s, with permuted
// positions + 2 (lane / 4) (+ 1).
template <typename T, Math kMath, Merge kMerge, int kBlockM, int kSubtiles, bool kPairs>
struct PipelinedMainloop {
  static constexpr int kBlockN = 128 * kSubtiles;
  using Mma = WarpgroupMma<T, kMath, kMerge, kBlockM, kSubtiles>;
  using Row = StagedRow<T, kMerge, kBlockN>;
  const GemmProblem& p;
  const T* in;
  PipelineStages<T> stages;
  int lane, warp, warp_first_col;
  int low_row;    // this lane's x_s rows of a k-step: channels c and c + 4 (16-bit: 2c, 2c + 1, 2c + 8 and 2c + 9)
  LaneRows rows;  // where this lane's channels sit in x_s (per tile: row_offsets' shifts)
  // TF32 x_s not copied by TMA (no tensor_rows) is raw float32: the fragments round to TF32 as they
  // load (in place of a rounding pass over x_s and a barrier of the consumers)
  bool round_fragments;

  __device__ __forceinline__ PipelinedMainloop(const GemmProblem& problem, const T* in_, const PipelineStages<T>& ring, int lane_,
                                               int warp_)
      : p(problem), in(in_), stages(ring), lane(lane_), warp(warp_) {
    warp_first_col = (warp / 4) * 64 * kSubtiles + (warp % 4) * 16 + (Mma::permuted(p) ? 2 * (lane / 4) : lane / 4);
    low_row = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4;
    if constexpr (kMerge == Merge::kChannels) merged_channel_offsets<kMath>(p, lane, rows);
    if constexpr (kMerge != Merge::kChannels) set_half_bases<T, kMath>(p, p.map_row_phases, rows);
    rows.paired_positions = Mma::permuted(p);
    round_fragments = kMath == Math::kTF32 && !p.tensor_rows;
  }

  // Each pair's slots [first_slot, first_slot + slots) of out phase `out_phase`, in the producer's order
  template <typename Body>
  __device__ __forceinline__ void for_each_pair(int out_phase, Body&& body) const {
    if constexpr (kPairs) {
      for (int pair = out_phase * p.in_phases; pair < (out_phase + 1) * p.in_phases; ++pair) {
        const int first_slot = p.pair_begin[pair], slots = p.pair_begin[pair + 1] - first_slot;
        if (slots > 0) body(first_slot, slots);  // (an out phase may have fewer runs than another)
      }
    } else {
      body(0, p.taps);
    }
  }

  // Out phase `out_phase` of a part: its pairs' steps in the producer's order (each pair, a run of
  // taps, over the part's chunks; docs/design.md §3.6)
  __device__ __forceinline__ void run_phase(const GemmTile& tile, int out_phase, ChunkRange chunks, PipelineState& state,
                                            Mma& mma) const {
    if constexpr (kMath == Math::k16Bit || kMath == Math::kTF32) {
      if (p.tap_boxes || p.position_rows) return run_phase_by_descriptors(out_phase, chunks, state, mma);
    }
    // The shifts of this lane's rows, the same in every chunk (chunks are whole multiples of the 4
    // (float) or 8 (16-bit) rows after which shifts repeat; rows c and c + 4 (16-bit: 2c and 2c + 8) share one)
    LaneRows tile_rows = rows;
    tile_rows.shift_low = p.tensor_rows ? 0 : Row::of(p, in, tile, 0, low_row).shift();
    tile_rows.shift_high = p.tensor_rows ? 0 : Row::of(p, in, tile, 0, low_row + 1).shift();
    if constexpr (kMerge != Merge::kChannels) set_lane_offsets<kMath>(p, lane, tile_rows);
    const bool round = round_fragments || (kMath == Math::kTF32 && phases_row_by_row<kBlockN>(p, tile.col_tile * kBlockN));
    // a pair's steps: its slots [first_slot, first_slot + slots) over every chunk
    auto run_pair = [&](int first_slot, int slots) {
      const int* const slot_offset = p.slot_offset + first_slot;
      for (int chunk = chunks.begin; chunk < chunks.end; ++chunk) {
        mbarrier_wait(stages.full + state.stage, state.parity);
        const T* x_s = stages.x_s(state.stage);
        const uint32_t* w_s = stages.w_s(state.stage);  // the pair's slots
        for (int i = 0; i < slots; ++i) {
          auto operands = [&] {
            const T* x_tap;
            if constexpr (kMerge == Merge::kChannels) {
              x_tap = x_s + (warp_first_col + slot_offset[i] - p.first_offset) * p.channel_phases + p.lead;
            } else if (p.tensor_rows) {  // this warpgroup's box, from its first column
              x_tap = x_s + (warp / 4) * stages.box_elements + warp_first_col - (warp / 4) * (kBlockN / 2) + slot_offset[i] -
                      p.first_offset + p.lead;
            } else {
              x_tap = x_s + warp_first_col + slot_offset[i] - p.first_offset + p.lead;
            }
            const char* w_slot = reinterpret_cast<const char*>(w_s + i * p.slot_words);
            const char* w_small_slot = w_slot + stages.part_weight_words * 4;  // 3xTF32
            return TapOperands<T>{x_tap, w_slot, w_small_slot};
          };
          mma.run_tap(p, operands, lane, tile_rows, round);
        }
        mma.wait_all();  // the stage's last group: then its w_s and x_s are free
        __syncwarp();
        if (lane == 0) mbarrier_arrive(stages.empty + state.stage);
        state.advance(p.stages);
      }
    };
    for_each_pair(out_phase, run_pair);
  }

  // run_phase with A (in^T) by descriptor (16-bit): tap boxes (GemmPlan::tap_boxes: each tap's boxes
  // of this warpgroup's subtiles, MN-major) or position rows (GemmPlan::position_rows: this
  // warpgroup's box of x's channels-inner rows, K-major, read from each tap's row on: a K-major A
  // may start at any row of its swizzled atoms, the swizzle follows the address). A step's taps and k-steps are issued as one group;
  // the stage goes back to the producer once the next step's group is issued and its own has
  // completed (wgmma_wait<1>), so that the tensor cores run from one step into the next.
  __device__ __forceinline__ void run_phase_by_descriptors(int out_phase, ChunkRange chunks, PipelineState& state, Mma& mma) const {
    constexpr int kBoxes = kBlockN / kTapBoxPositions;  // a tap's boxes: the tile's subtiles
    constexpr int kKstepElements = 16 * kTapBoxPositions;
    const int consumer = warp / 4, first_box = consumer * kSubtiles;
    using Kind = std::conditional_t<std::is_same_v<T, float>, Tf32, T>;
    const int row_bytes = p.chunk_channels * int(sizeof(T));  // position rows
    int held = -1;  // the stage whose group may still run
    auto release = [&](int stage) {
      __syncwarp();
      if (lane == 0) mbarrier_arrive(stages.empty + stage);
    };
    auto run_pair = [&](int first_slot, int slots) {
      for (int chunk = chunks.begin; chunk < chunks.end; ++chunk) {
        mbarrier_wait(stages.full + state.stage, state.parity);
        const T* x_s = stages.x_s(state.stage);
        const char* rows = reinterpret_cast<const char*>(x_s + consumer * stages.box_elements);  // (position rows)
        const char* w_s = reinterpret_cast<const char*>(stages.w_s(state.stage));
        mma.fence_accumulators();
        // a step's taps, each one run of k-steps x subtiles with no branch between its wgmma (the A
        // form and the k-steps chosen once a step)
        auto run_taps = [&](auto ksteps, auto tap_boxes) {
          constexpr int kKsteps = decltype(ksteps)::value;
          constexpr bool kTapBoxes = decltype(tap_boxes)::value;
          for (int i = 0; i < slots; ++i) {
            wgmma_fence();  // (a tap at a time: ptxas wants one at the top of a loop of wgmma)
            const T* boxes = x_s + (i * kBoxes + first_box) * stages.tap_box_elements;
            // position rows: subtile 0's first column reads row slot_offset - first_offset + lead
            const char* tap_rows = rows + (p.slot_offset[first_slot + i] - p.first_offset + p.lead) * row_bytes;
            const char* w_slot = w_s + i * p.slot_words * 4;
#pragma unroll
            for (int k = 0; k < kKsteps; ++k) {
              const uint64_t b = swizzled_descriptor<kKsteps * 32>(w_slot + k * 32);
#pragma unroll
              for (int s = 0; s < kSubtiles; ++s) {
                if constexpr (kTapBoxes) {
                  const MnMajorA a{swizzled_descriptor<128>(boxes + s * stages.tap_box_elements + k * kKstepElements)};
                  wgmma_kstep<Kind, kBlockM>(mma.acc[s], a, b);
                } else {
                  const KMajorA a{swizzled_descriptor<kKsteps * 32>(tap_rows + s * kTapBoxPositions * kKsteps * 32 + k * 32)};
                  wgmma_kstep<Kind, kBlockM>(mma.acc[s], a, b);
                }
              }
            }
          }
        };
        auto run_taps_of = [&](auto tap_boxes) {
          if (p.ksteps == 4) {
            run_taps(std::integral_constant<int, 4>(), tap_boxes);
          } else {
            run_taps(std::integral_constant<int, 2>(), tap_boxes);
          }
        };
        if constexpr (kMath == Math::k16Bit) {  // (tap boxes: 16-bit only)
          if (p.tap_boxes) {
            run_taps_of(std::true_type());
          } else {
            run_taps_of(std::false_type());
          }
        } else {
          run_taps_of(std::false_type());
        }
        wgmma_commit();
        mma.fence_accumulators();
        if (held >= 0) {
          wgmma_wait<1>();
          mma.fence_accumulators();
          release(held);
        }
        held = state.stage;
        state.advance(p.stages);
      }
    };
    for_each_pair(out_phase, run_pair);
    wgmma_wait<0>();  // before the accumulators are read (on every path: ptxas serialises the wgmma otherwise)
    mma.fence_accumulators();
    if (held >= 0) release(held);
  }
};

}  // namespace convt::cuda
