// grad_weight_gemm_kernel's MMA mainloop: one staged item's products on mma.sync into every tap's
// accumulators (docs/design.md §5.2). M = ci (A = x_s shifted per tap), N = co (B = gy_s), the
// reduction over the item's positions; a warp holds a 16 ci x 32 co tile per tap.
#pragma once

#include "cuda/grad_weight_gemm_loader.cuh"

namespace convt::cuda {

template <typename T, Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
struct GradWGemmMainloop {
  using Smem = GradWGemmSharedStorage<T, kCiWarps, kCoWarps>;
  using Work = GradWGemmWork<kCiWarps, kCoWarps>;
  using Accumulators = Accumulator<kMath>[kGroupTaps][kGradWTilesN];  // [tap of the group][n8 tile of co]
  static constexpr int kGyRow = Smem::kGyRow;
  static constexpr bool k16 = kMath == Math::k16Bit;
  // A k-step covers kK positions. A lane's two registers of a fragment hold positions `first` and
  // first + kNext (TF32), or the pairs from there (16-bit, the lower position in the low half).
  static constexpr int kK = k16 ? 16 : 8, kNext = kK / 2;

  const WeightGradProblem& p;
  const Smem& smem;
  const Work& work;
  int x_lead;  // x_s position of the item's position 0 for the group's largest shift

  __device__ __forceinline__ GradWGemmMainloop(const WeightGradProblem& p_, const Smem& smem_, const Work& work_,
                                               int x_lead_)
      : p(p_), smem(smem_), work(work_), x_lead(x_lead_) {}

  __device__ __forceinline__ static void clear(Accumulators& acc) {
#pragma unroll
    for (int t = 0; t < kGroupTaps; ++t)
#pragma unroll
      for (int nt = 0; nt < kGradWTilesN; ++nt) acc[t][nt].clear();
  }

  // The products of the item staged in buffer `buffer` (landed and visible to the block). kEdge:
  // some tap's x position m - shift falls outside [0, L_in) in this item. Such a product does not
  // exist: its gy value is left out (x_s holds 0 there, but 0 x Inf or NaN in gy is NaN).
  __device__ __forceinline__ void mma_item(Accumulators& acc, int64_t item, int buffer) const {
    const T* gy_s = smem.gy_s(buffer);
    const T* x_s = smem.x_s(buffer);
    const int r = work.lane / 4, c = work.lane % 4;
    const int64_t m0 = int64_t(p.div_chunks_per_row.mod(unsigned(item))) * kGradWPositions;
    const int lane_position = k16 ? 2 * c : c;
    const int shift_min = work.shift_max - p.group_span[work.tile.tap_group];
    if (m0 < work.shift_max || m0 + kGradWPositions - 1 - shift_min >= p.length_in) {
      multiply<true>(acc, gy_s, x_s, m0, r, lane_position);
    } else {
      multiply<false>(acc, gy_s, x_s, m0, r, lane_position);
    }
  }

  // (r: the lane's first A row; lane_position: its first position in a k-step)
  template <bool kEdge>
  __device__ __forceinline__ void multiply(Accumulators& acc, const T* gy_s, const T* x_s, int64_t m0, int r,
                                           int lane_position) const {
    const int lane = work.lane, warp_ci = work.warp_ci, warp_co = work.warp_co;
    const int tap_group = work.tile.tap_group, count = work.count, shift_max = work.shift_max;
    const int x_row = smem.x_row;
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
        // (pointer steps keep the k-step's offset an immediate; one int sum holds more registers)
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
  }
};

}  // namespace convt::cuda
