// The MMA mainloop of grad_weight_wgmma_kernel (docs/design.md §5.3): per landed item, for each tap
// slot a GEMM with M = co (A from registers: tap t at k-step position q reads
// gy_s[co][offset + q + shift_t - shift_min], merged gy_s[co][offset + (q + t)*s + r]) and N = ci (B =
// x_s by descriptor), k-steps over the item's kGradWPositions positions.
#pragma once

#include "cuda/grad_weight_wgmma_scheduler.cuh"
#include "cuda/grad_weight_wgmma_tile.cuh"

namespace convt::cuda {

template <class Tr>
struct WgmmaWeightGradMainloop {
  using T = typename Tr::Element;
  using Kind = typename Tr::Kind;
  using Accumulators = WgmmaWeightGradAccumulators<Tr::kTaps>;
  static constexpr int kTaps = Tr::kTaps;
  static constexpr bool k16 = Tr::k16;
  // A k-step covers kK positions (32 bytes of an x_s row). This lane's two registers of a fragment
  // hold positions `first` and first + kNext (TF32), or the pairs from there (16-bit, the lower
  // position in the low half); its rows are co 16 * warp + lane / 4 and 8 more, each from its
  // window's offset in gy_s
  static constexpr int kK = k16 ? 16 : 8, kNext = kK / 2;
  const WeightGradProblem& p;
  const WgmmaWeightGradTile<Tr>& tile;
  const WgmmaWeightGradSmem<Tr>& smem;
  const T* gy;

  // An item's operands: this warpgroup's x_s, and this lane's A rows in gy_s (compute_item's locals,
  // referred to: a struct holding their values compiled differently in the 16-bit bias kernels)
  struct Operands {
    const unsigned char* const& x_s;
    const T* const (&a_rows)[2];    // the lane's rows g and g + 8
    const int& lane_position;       // of the lane's first A value in a k-step
    const int& window_parity;       // of the lane's rows' window offsets (rows 8 apart: the same)
    const int& positions_inside;    // of the item, inside x (< kGradWPositions: the last chunk of a row)
  };

  // Item `item` from x_s (this warpgroup's) and gy_s, both landed: the products into acc
  __device__ __forceinline__ void compute_item(const Accumulators& acc, int64_t item, const unsigned char* x_s, const T* gy_s) const {
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t i0 = int64_t(row.mod) * kGradWPositions, first_element = tile.window_start(i0 + tile.shift_min);
    const int lane_position = k16 ? 2 * (tile.lane % 4) : tile.lane % 4;
    const bool chunks = Tr::kPipelined || tile.chunked(first_element);  // (pipelined: every window from its 16-byte boundary)
    const T* a_rows[2];     // merged: row (co, r) at tap slot 0, else at shift 0
    int window_parity = 0;  // of the lane's two rows' offsets (8 rows apart: 16-byte multiples apart)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // (merged rows past the tile's: its last gy_s row, whose products are not written)
      const auto a_row = tile.row(16 * tile.warp + tile.lane / 4 + 8 * half);
      const int co = Tr::kMerged ? min(a_row.co, smem.gy_rows - 1) : a_row.co, r = a_row.r;
      const int offset =
          tile.window_offset(gy + row.div * p.gy_batch_stride + (tile.first_co + co) * p.gy_channel_stride + first_element, chunks);
      a_rows[half] = Tr::kMerged ? gy_s + co * smem.gy_row + offset + r + lane_position * p.stride
                                 : gy_s + co * smem.gy_row + offset + lane_position - tile.shift_min;
      window_parity = offset % 2;
    }
    // kEdge: the item reaches past L_in; the A values of positions i >= L_in are dropped (x_s holds 0
    // there, but 0 x Inf or NaN in gy is NaN)
    const int positions_inside = int(min(int64_t(kGradWPositions), p.length_in - i0));
    const Operands in{x_s, a_rows, lane_position, window_parity, positions_inside};
    if (positions_inside < kGradWPositions) {
      multiply_item<true>(acc, in);
    } else {
      multiply_item<false>(acc, in);
    }
  }

  // The item's k-steps in the form its block and item take (every form a compile-time specialization)
  template <bool kEdge>
  __device__ __forceinline__ void multiply_item(const Accumulators& acc, const Operands& in) const {
    if (Tr::kRegisterSums && tile.bias_block) {
      multiply<kEdge, Tr::kRegisterSums, -1>(acc, in);
      return;
    }
    if constexpr (k16 && !Tr::kMerged) {
      if (tile.consecutive) {
        in.window_parity ? multiply<kEdge, false, 1>(acc, in) : multiply<kEdge, false, 0>(acc, in);
        return;
      }
    }
    multiply<kEdge, false, -1>(acc, in);
  }

  // kBias: a TF32 bias block (its register sums, and the rounding of A). kPairs >= 0: 16-bit taps at
  // consecutive shifts, whose pairs start kPairs + t elements past tap 0's aligned word (kPairs:
  // window_parity): the words of each register place load once for all taps.
  // Two sets of A registers: k-step s loads set s % 2 while the wgmma of k-step s - 1 (set
  // (s + 1) % 2) may still run; the wait for at most one running group after each commit frees the
  // set loaded next. The sets and the accumulators are pinned by empty asm operands so that the
  // compiler neither reuses nor copies them while a group runs.
  template <bool kEdge, bool kBias, int kPairs>
  __device__ __forceinline__ void multiply(const Accumulators& acc, const Operands& in) const {
    uint32_t a[2][kTaps][4];
#pragma unroll
    for (int kstep = 0; kstep < kGradWPositions / kK; ++kstep) {
      uint32_t (&set)[kTaps][4] = a[kstep % 2];
      load_a<kEdge, kBias, kPairs>(set, kstep, in, acc.bias_sums);
      // B: the k-step's 32 bytes of the x_s rows
      const int byte = kstep * 32;
      const uint64_t b = swizzled_descriptor<kWgmmaRowBytes>(in.x_s + byte / kWgmmaRowBytes * Tr::kHalfBytes + byte % kWgmmaRowBytes);
      issue_kstep(acc, set, b);
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
      wgmma_fence_accumulators(acc.acc[t]);
    }
    if constexpr (Tr::kOnesColumn) wgmma_fence_accumulators(acc.ones_acc);
  }

  // A fragments of k-step `kstep` for every tap slot into `set`
  template <bool kEdge, bool kBias, int kPairs>
  __device__ __forceinline__ void load_a(uint32_t (&set)[kTaps][4], int kstep, const Operands& in, float (&bias_sums)[2]) const {
    constexpr bool kRoundA = kBias || (Tr::kPipelined && !k16);  // TF32 from unrounded gy_s (pipelined: always)
    constexpr int kWords = kPairs < 0 ? 1 : (kPairs + kTaps) / 2 + 1;
    uint32_t words[4][kWords];  // kPairs >= 0: register place r (as set[t][r]) from the aligned word of tap 0's pair
    if constexpr (kPairs >= 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t* aligned = reinterpret_cast<const uint32_t*>(in.a_rows[r % 2] + tile.shift_min + kstep * kK - kPairs + kNext * (r / 2));
#pragma unroll
        for (int w = 0; w < kWords; ++w) words[r][w] = aligned[w];
      }
    }
    // merged: register place e's value of slot t lies t positions (t*stride elements) past slot 0's;
    // with the 16-bit pair's second value there are kTaps (+ 1) of them (slots past count repeat tap 0)
    constexpr int kMergedValues = kTaps + (k16 ? 1 : 0);
    uint32_t merged_values[4][kMergedValues];  // 16-bit: the value's bits in the low half
    if constexpr (Tr::kMerged) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const T* at = in.a_rows[e % 2] + (kstep * kK + kNext * (e / 2)) * p.stride;
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
      if constexpr (Tr::kMerged) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool own = t < tile.count;  // (selects between constant indices: the values stay in registers)
          set[t][e] = own ? merged_values[e][t] : merged_values[e][0];
          if constexpr (k16) set[t][e] |= (own ? merged_values[e][t + 1] : merged_values[e][1]) << 16;
        }
      } else if constexpr (kPairs >= 0) {
        const int o = kPairs + t, w = o / 2;  // tap t's pair: element o past the aligned word
#pragma unroll
        for (int r = 0; r < 4; ++r) set[t][r] = o % 2 == 0 ? words[r][w] : __funnelshift_r(words[r][w], words[r][min(w + 1, kWords - 1)], 16);
      } else {
        const int shift = p.group_tap_shift[p.group_first[tile.tap_group] + (t < tile.count ? t : 0)];
        // 16-bit: odd, the pairs start at odd elements (lane_position is even); each is cut from the
        // two aligned words around it (two loads and a funnel shift, the same for both cases)
        const int odd = k16 ? (in.window_parity - tile.shift_min + shift) & 1 : 0;
        const T* at = in.a_rows[0] + shift + kstep * kK - odd;
        const T* at_below = in.a_rows[1] + shift + kstep * kK - odd;  // 8 rows down
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
          const int q = kstep * kK + in.lane_position + kNext * half;  // item position of register half * 2 (and + 1)
          uint32_t keep = q < in.positions_inside ? ~0u : 0u;          // 16-bit: the low half, then the high one
          if constexpr (k16) keep = (keep & 0xffffu) | (q + 1 < in.positions_inside ? 0xffff0000u : 0u);
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
  }

  // One k-step's wgmma for every tap slot (16-bit grad_bias: slot 0's as m64n72, the ones column),
  // as one committed group
  __device__ __forceinline__ void issue_kstep(const Accumulators& acc, uint32_t (&set)[kTaps][4], uint64_t b) const {
#pragma unroll
    for (int t = 0; t < kTaps; ++t) wgmma_fence_operand(set[t]), wgmma_fence_accumulators(acc.acc[t]);
    if constexpr (Tr::kOnesColumn) wgmma_fence_accumulators(acc.ones_acc);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      if constexpr (Tr::kOnesColumn) {
        if (t == 0) {
          wgmma_kstep_n72<Kind>(acc.acc[0], acc.ones_acc, set[0], b);
          continue;
        }
      }
      wgmma_kstep<Kind, kWgmmaBlockCi>(acc.acc[t], set[t], b);
    }
    wgmma_commit();
#pragma unroll
    for (int t = 0; t < kTaps; ++t) wgmma_fence_accumulators(acc.acc[t]);
    if constexpr (Tr::kOnesColumn) wgmma_fence_accumulators(acc.ones_acc);
  }

  // The pipelined tiles' consumer warpgroups: each item's stage once full, then released to the
  // producer (a warp each on `empty`). x_s lands rounded to TF32 (the tensor map's TFLOAT32); gy's A
  // values round as they load.
  __device__ __forceinline__ void consume(const Accumulators& acc, const WgmmaWeightGradScheduler& items,
                                          const WgmmaWeightGradRing& ring) const {
    set_max_registers<kConsumerRegisters, true>();
    WgmmaWeightGradRingPosition at;
    for (int64_t item = items.begin; item < items.end; ++item) {
      mbarrier_wait(ring.full + at.stage, at.parity);
      compute_item(acc, item, smem.x_s(at.stage * Tr::kXPerBuffer + tile.wg), smem.gy_s(at.stage));
      __syncwarp();
      if (tile.lane == 0) mbarrier_arrive(ring.empty + at.stage);
      at.advance(ring.stages);
    }
  }
};

}  // namespace convt::cuda
