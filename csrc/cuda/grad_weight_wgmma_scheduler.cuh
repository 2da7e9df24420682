// The scheduler of grad_weight_wgmma_kernel (docs/design.md §5.1): a block owns one output tile and
// one slice of the (n, chunk) items (both from blockIdx.x: WeightGradTile, as grad_weight_gemm.cuh's
// blocks), and walks the slice's items in order; the slices' sums are added in a fixed order
// afterwards (§8). With the items, the ring of stages through which the pipelined tiles walk them.
#pragma once

#include "cuda/grad_weight_gemm.cuh"
#include "cuda/pipelined_gemm.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// The items of the block's slice (its tile: WeightGradTile, by blockIdx.x): [begin, end), walked in
// order by every walker of the block (the double-buffered loop; the producer and the consumers,
// whose ring stages follow that order). The walkers test `item < end` themselves: behind a call,
// the loop condition compiled differently. A ping-pong of the two consumer warpgroups (each its own
// items, one in wgmma while the other is in its epilogue) would be another scheduler giving each
// consumer its begin and a step of the number of consumers, the producer still walking every item.
struct WgmmaWeightGradScheduler {
  int64_t begin, end;
  __device__ __forceinline__ WgmmaWeightGradScheduler(const WeightGradProblem& p, int64_t slice)
      : begin(slice * p.items / p.slices), end((slice + 1) * p.items / p.slices) {}
};

// Where a walker of the ring stands: stage, and the phase parity of its mbarriers
struct WgmmaWeightGradRingPosition {
  int stage = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) stage = 0, parity ^= 1;
  }
};

// The pipelined tiles' ring (§5.3): stage s is x_s buffers 2s (ci 0-63) and 2s + 1 (ci 64-127) and
// gy_s buffer s, filled when full[s] completes (an arrival of each producer thread, after its
// copies, and every announced byte), free again when empty[s] has the consumers' 8 warps.
// Constructed by every thread of the block: thread 0 initializes, a block barrier publishes.
struct WgmmaWeightGradRing {
  uint64_t* full;
  uint64_t* empty;
  int stages;
  __device__ __forceinline__ WgmmaWeightGradRing(uint64_t* barriers, int ring_stages)
      : full(barriers), empty(barriers + ring_stages), stages(ring_stages) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) {
        mbarrier_init(full + s, kPipelineProducerThreads);
        mbarrier_init(empty + s, kPipelineConsumerThreads / 32);
      }
      mbarrier_init_fence();
    }
    __syncthreads();
  }
};

}  // namespace convt::cuda
