// The warpgroup implicit GEMM with its copies taken off the MMA warps (sm_90a, docs/design.md §3.6):
// the forward and grad_input problems of implicit_gemm.cuh whose every step reads one phase pair
// from contiguous rows in 16-byte chunks (stride 1, and strided problems with their phases merged
// into rows or channels), on warpgroup tiles of 128 rows x 128 or 256 columns, or 64 rows x 256
// columns for groups of 33-64 rows (out^T = in^T A^T, §3.5; each consumer warpgroup one or two
// 64-column subtiles, wgmma's N the tile's rows).
//
// A block is two consumer warpgroups and a producer warpgroup (which hands most of its registers to
// the consumers), composed of
//   GemmScheduler      gemm_scheduler.cuh  the block's tiles, walked alike by producer and consumers
//   PipelinedProducer  gemm_loader.cuh     fills a ring of `stages` shared-memory stages (a step's
//                                          weight slots and x rows or TMA boxes), mbarrier `full`
//   PipelinedMainloop  gemm_mainloop.cuh   waits for a stage, runs its taps (WarpgroupMma, shared with
//                                          implicit_gemm_kernel), hands it back (`empty`); on tap
//                                          boxes (16-bit) or position rows (16-bit, TF32) A by
//                                          descriptor, a stage handed back a step late
//   PipelinedEpilogue  gemm_epilogue.cuh   the tile's accumulators -> out, plus bias
// No block-wide barrier in the loop: the producer runs up to `stages` steps ahead, through the
// consumers' epilogue stores. 3xTF32 (128 x 128 tiles, §7): the stage's weight holds A's big and then
// its small TF32 parts (GemmProblem::weight_parts), the consumers split their float32 fragments in
// registers, and each k-step runs three wgmma into two accumulator sets.
#pragma once

#include "cuda/gemm_epilogue.cuh"
#include "cuda/gemm_loader.cuh"
#include "cuda/gemm_mainloop.cuh"
#include "cuda/gemm_scheduler.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/implicit_gemm.cuh"

namespace convt::cuda {

// kBlockM rows (16, 32, 64 or 128) x kSubtiles 64-column subtiles per consumer warpgroup (1 or 2); kForm
// (plan.h's pipeline_form): kPairs, the problem's taps in several pairs (out phases, runs of taps), a
// tile out phase by out phase; kPhasePair, the two out phases of out_step 2 into two accumulator sets,
// stored together (each form its own instantiations, so that the one-pair kernels keep their code)
template <typename T, Math kMath, Merge kMerge, int kBlockM, int kSubtiles, PipelineForm kForm>
__global__ void __launch_bounds__(kPipelineThreads, 1)
    pipelined_gemm_kernel(const T* __restrict__ in, const uint32_t* __restrict__ packed_w, const T* __restrict__ bias,
                          T* __restrict__ out, const __grid_constant__ GemmProblem p) {
  begin_dependent_grid();
#if CONVT_WGMMA_AVAILABLE  // (sm_90a only: other archs get an empty kernel)
  static_assert(kBlockM == 16 || kBlockM == 32 || kBlockM == 64 || kBlockM == 128);
  static_assert(kMath != Math::k3xTF32 || kSubtiles * kBlockM <= 128);  // two accumulators a subtile
  static_assert(kForm != PipelineForm::kPhasePair || (kSubtiles * kBlockM <= 128 && kMath != Math::k3xTF32));
  constexpr bool kPairs = kForm != PipelineForm::kOnePair;
  constexpr int kBlockN = 128 * kSubtiles;  // columns of a tile
  if (p.gate != nullptr && *p.gate == 0) return;  // (the whole block, before any barrier: Launch::gate)
  extern __shared__ __align__(kMaxSwizzleAtomBytes) uint32_t smem[];  // weight slots first: swizzle atoms aligned
  const PipelineStages<T> stages(smem, p);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  stages.init_barriers(p);
  __syncthreads();
  const GemmScheduler scheduler(p);

  if (warp >= kPipelineConsumerThreads / 32) {  // ---- the producer warpgroup ----
    set_max_registers<kProducerRegisters, false>();
    const PipelinedProducer<T, kMerge, kBlockN, kPairs> producer{p, in, packed_w, stages, lane};
    producer.run(scheduler);
    return;
  }

  set_max_registers<kConsumerRegisters, true>();  // ---- the consumer warpgroups ----
  const PipelinedMainloop<T, kMath, kMerge, kBlockM, kSubtiles, kPairs> mainloop(p, in, stages, lane, warp);
  const PipelinedEpilogue<T, kMath, kMerge, kBlockM, kSubtiles, kForm> epilogue(p, bias, out, lane, warp);
  WarpgroupMma<T, kMath, kMerge, kBlockM, kSubtiles> mma;
  PipelineState state;
  for (unsigned part = scheduler.first(); scheduler.has_part(part); part = scheduler.next(part)) {
    const GemmTile tile = scheduler.tile_of(part);
    const ChunkRange chunks = scheduler.chunks_of(part);
    if constexpr (kForm == PipelineForm::kPhasePair) {
      WarpgroupMma<T, kMath, kMerge, kBlockM, kSubtiles> second;  // out phase 1's accumulators
      mma.clear();
      mainloop.run_phase(tile, 0, chunks, state, mma);
      second.clear();
      mainloop.run_phase(tile, 1, chunks, state, second);
      epilogue.store_phase_pair(tile, mma, second);
    } else {
      const auto phases = scheduler.out_phases_of(part);
      for (int out_phase = phases.begin; out_phase < (kPairs ? phases.end : 1); ++out_phase) {
        mma.clear();
        mainloop.run_phase(tile, out_phase, chunks, state, mma);
        if (p.float_sums) {
          epilogue.store_slice(tile, scheduler.split_of(part), mma);
        } else {
          epilogue.store_tile(tile, out_phase, mma);
        }
      }
    }
  }
#endif
}

}  // namespace convt::cuda
