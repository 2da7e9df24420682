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

#include "cuda/grad_weight_wgmma_epilogue.cuh"
#include "cuda/grad_weight_wgmma_loader.cuh"
#include "cuda/grad_weight_wgmma_mainloop.cuh"
#include "cuda/grad_weight_wgmma_scheduler.cuh"
#include "cuda/grad_weight_wgmma_tile.cuh"

namespace convt::cuda {

// kPipelined: the pipelined tiles (above): 384 threads, one block an SM
template <typename T, int kTaps, bool kSumsBias, bool kMerged, bool kPipelined>
__global__ void __launch_bounds__(kPipelined ? kPipelineThreads : kWgmmaThreads, kPipelined ? 1 : wgmma_min_blocks(kTaps))
    grad_weight_wgmma_kernel(const T* __restrict__ x, const T* __restrict__ gy, float* __restrict__ partial,
                             float* __restrict__ bias_partial, const __grid_constant__ WeightGradProblem p) {
#if CONVT_WGMMA_AVAILABLE  // (sm_90a only: other archs get an empty kernel)
  using Tr = WgmmaWeightGradTraits<T, kTaps, kSumsBias, kMerged, kPipelined>;
  extern __shared__ __align__(kMaxSwizzleAtomBytes) unsigned char wgmma_smem[];  // x buffers first: atoms aligned
  const WgmmaWeightGradSmem<Tr> smem(p, wgmma_smem);
  const WgmmaWeightGradTile<Tr> tile(p, smem.gy_rows);
  const WgmmaWeightGradLoader<Tr> loader{p, tile, smem, x, gy};
  const WgmmaWeightGradMainloop<Tr> mainloop{p, tile, smem, gy};
  WgmmaWeightGradAccumulators<kTaps> acc;
  write_ones_column(smem);
  const WgmmaWeightGradScheduler items(p, tile.slice);

  if constexpr (kPipelined) {
    const WgmmaWeightGradRing ring(smem.barriers(), smem.buffers);
    if (threadIdx.x >= kPipelineConsumerThreads) {
      WgmmaWeightGradProducer<Tr>{p, tile, smem, gy}.produce(items, ring);
      return;
    }
    mainloop.consume(acc, items, ring);
  } else {
    // double-buffered: item + 1's copies in flight while item's land, are rounded (TF32) and multiplied
    if (items.begin < items.end) loader.stage(items.begin, 0);
    cp_async_commit();
    int buffer = 0;
    for (int64_t item = items.begin; item < items.end; ++item, buffer ^= 1) {
      if (item + 1 < items.end) loader.stage(item + 1, buffer ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      loader.round_own_copies(item, buffer);
      fence_async_shared();  // x_s (cp.async and the rounding stores) is read by wgmma
      __syncthreads();
      mainloop.compute_item(acc, item, smem.x_s(buffer), smem.gy_s(buffer));
      __syncthreads();  // this buffer is consumed before the item after next overwrites it
    }
    cp_async_wait<0>();
  }

  const WgmmaWeightGradEpilogue<Tr> epilogue{p, tile, gy, partial, bias_partial};
  epilogue.store_bias(acc);
  epilogue.store_tile(acc);
#endif
}

}  // namespace convt::cuda
