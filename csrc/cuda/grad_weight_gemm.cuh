// Tensor-core grad_weight on mma.sync (docs/design.md §5): a reduction over batch and length,
// deterministic.
//
//   grad_w[g*Cig + ci, co, k] = sum over n, m of x[n, g*Cig + ci, m - shift_k] * gy[n, g*Cog + co, m*stride + phase_k]
//
// is, for each tap, a GEMM with M = ci, N = co and the reduction over positions (n, m) (§5.1). Taps
// of one phase read the same gy positions, so they are handled together in tap groups of up to 4 or
// 8 (kGroupTaps; the x window of the group covers every shift). A block owns one output tile
// (group, 32 or 64 ci, 32 or 64 co, tap group) and one slice of the (n, m-chunk) items; per item it
// stages gy_s and x_s (double buffered, GradWGemmLoader), runs mma.sync (4 or 8 warps, 2 or 4 x 2, a
// 16 ci x 32 co warp tile per tap: GradWGemmMainloop) and writes its fp32 sums to partial[slice]
// (GradWGemmEpilogue). A second kernel adds the slices in order (sum_slices_kernel): no atomics, the
// same inputs give bit-identical gradients. On sm_90, where C_in and C_out per group exceed 32,
// grad_weight_wgmma.cuh computes the same sums on warpgroup MMA instead (plan_grad_weight, §4.6).
//
// grad_bias comes along in TF32 where every phase has a tap (sums_bias, §5.4): in TF32's pass over
// the landed copies, each block adds the gy copies of its grad_bias items (GradWGemmItems) into
// per-thread shared slots, and sums each co's slots in order at the end. 16-bit has no such pass
// (and one added only for the sums would slow the kernel where they go unused).
//
// float32 goes through TF32 mma (m16n8k8) as TF32 (rounded to nearest) or 3xTF32 (strict), as the
// forward; bfloat16 and float16 through their own mma (m16n8k16, fp32 accumulation), two positions
// to a 32-bit register (§7). A tap whose x window starts at an odd position reads its A pairs as two
// 16-bit loads.
//
// Pieces: grad_weight_gemm_common.cuh (parameters and helpers both grad_weight kernels share),
// _scheduler.cuh (tile, slice, items), _loader.cuh (shared memory, global -> shared, the TF32 pass),
// _mainloop.cuh (mma.sync), _epilogue.cuh (partial sums, grad_bias slots).
#pragma once

#include "cuda/grad_weight_gemm_common.cuh"
#include "cuda/grad_weight_gemm_epilogue.cuh"
#include "cuda/grad_weight_gemm_loader.cuh"
#include "cuda/grad_weight_gemm_mainloop.cuh"
#include "cuda/grad_weight_gemm_scheduler.cuh"
#include "cuda/grid_dependency.cuh"

namespace convt::cuda {

// The blocks an SM must hold, which set the register budget (§5.2): blocks of 64 or 128 threads,
// 384 threads an SM (at most 170 registers); 256-thread blocks, two an SM with 4 taps (at most 128)
// and one with 8; 3xTF32, one block (its accumulators would spill under a lower cap).
template <Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
constexpr int kGradWMinBlocksOf = kMath == Math::k3xTF32                   ? 1
                               : kGradWThreadsOf<kCiWarps, kCoWarps> == 256 ? (kGroupTaps == kGradWGroupTaps ? 2 : 1)
                                                                         : 384 / kGradWThreadsOf<kCiWarps, kCoWarps>;

// Items are staged one ahead: item + 1's copies are in flight while item's are multiplied; a
// buffer is consumed (barrier) before the item after next overwrites it. The pieces are
// constructed in this order because it is the order in which they read the parameters, which the
// generated code follows (the register allocation with it).
template <typename T, Math kMath, int kCiWarps, int kCoWarps, int kGroupTaps>
__global__ void __launch_bounds__(kGradWThreadsOf<kCiWarps, kCoWarps>, (kGradWMinBlocksOf<kMath, kCiWarps, kCoWarps, kGroupTaps>))
    grad_weight_gemm_kernel(const T* __restrict__ x, const T* __restrict__ gy, float* __restrict__ partial,
                            float* __restrict__ bias_partial, const __grid_constant__ WeightGradProblem p) {
  begin_dependent_grid();
  static_assert((kMath == Math::k16Bit) == (sizeof(T) == 2),
                "16-bit inputs use the 16-bit mma, float32 TF32 or 3xTF32");
  using Smem = GradWGemmSharedStorage<T, kCiWarps, kCoWarps>;
  using Loader = GradWGemmLoader<T, kMath, kCiWarps, kCoWarps>;
  using Mainloop = GradWGemmMainloop<T, kMath, kCiWarps, kCoWarps, kGroupTaps>;
  using Epilogue = GradWGemmEpilogue<T, kMath, kCiWarps, kCoWarps, kGroupTaps>;  // (an asynchronous one: here)
  extern __shared__ __align__(16) unsigned char wg_smem[];
  const Smem smem(wg_smem, p);
  const GradWGemmWork<kCiWarps, kCoWarps> work(p);
  const Loader loader(p, smem, work, x, gy);
  const Mainloop mainloop(p, smem, work, loader.x_lead);

  typename Mainloop::Accumulators acc;
  Mainloop::clear(acc);
  GradWGemmItems items(p, work);
  const bool sums_bias = kMath == Math::kTF32 && p.sums_bias;
  if (sums_bias) {
    loader.clear_bias_slots();
    __syncthreads();
  }
  if (items.first() < items.end) loader.stage(items.first(), 0);
  cp_async_commit();
  int buffer = 0;
  for (int64_t item = items.first(); item < items.end; item = items.next(item), buffer ^= 1) {
    if (items.next(item) < items.end) loader.stage(items.next(item), buffer ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    loader.finish_own_copies(item, buffer, items.take_bias_turn(sums_bias));
    __syncthreads();
    mainloop.mma_item(acc, item, buffer);
    __syncthreads();  // this buffer is consumed before the item after next overwrites it
  }
  cp_async_wait<0>();

  const Epilogue epilogue{p, work};
  if (sums_bias) {
    __syncthreads();  // every thread's slots are complete
    epilogue.store_bias(smem, bias_partial);
  }
  epilogue.store_tile(acc, partial);
}

}  // namespace convt::cuda
