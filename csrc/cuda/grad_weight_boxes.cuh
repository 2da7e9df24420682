// grad_weight by box tiles (sm_90a, 16-bit and TF32; docs/design.md §5.7). For a stride-1 problem,
// tap k at shift s_k = k * dilation - padding:
//
//   grad_w[g*Cig + ci, co, k] = sum over n, i in [0, L_in) of x[n, g*Cig + ci, i] * gy[n, g*Cog + co, i + s_k]
//
// one GEMM whose M is ci (A = x, K-major: positions contiguous), whose N is (tap slot, co) and whose
// reduction runs over the items (n, 128 bytes of x positions). Both operands come by TMA boxes
// straight into wgmma's swizzled layouts: x as 64 ci x 128 bytes of positions per consumer
// warpgroup, gy as 64 co x 128 bytes of positions per box, a slot's block_co / 64 boxes back to
// back, so that one wgmma covers every tap of the tile. 16-bit: gy is a channels-last copy, B
// N-major (a tap's shift is an outer coordinate, which TMA takes at any value, while an inner one
// must be 16-byte aligned). TF32 (whose B is K-major only): gy's own rows or a copy of them, B
// K-major as A is, every tap's shift a multiple of 16 bytes (the planner's). A tap's boxes are read
// through its own tensor map, whose positions end at L_in + s_k (at most L_out), where the tap's x
// positions do: positions past L_in give zeros on both sides, so Inf or NaN in gy stays where torch
// puts it.
//
// A block owns one tile (group, 128 ci, block_co co x box_slots taps) and one slice of the items;
// its fp32 sums go to partial[slice], added by sum_slices_kernel in a fixed order (§8). Pieces:
//   BoxTile      the block's tile and slice (scheduler)
//   BoxStages    the ring of stages in shared memory and its mbarriers
//   BoxProducer  one thread: per item the x boxes and each tap slot's gy boxes into a free stage (loader)
//   BoxMainloop  each consumer warpgroup: per item 4 k-steps of wgmma over the stage, one item in flight
//   BoxEpilogue  the accumulators -> partial[slice], through shared memory
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "plan.h"
#include "cuda/gemm_problem.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// The kernel's parameters: the plan (tiles and tap_groups: the launch's window of taps) and the
// tensor maps the launcher encodes (ops_cuda.cpp)
struct WeightBoxProblem : WeightGradPlan {
  CUtensorMap x_map;  // x as (position, channel, batch): boxes of 64 ci x 128 bytes of positions
  int first_window_tap;  // the launch's first tap (its tap groups: tap_groups from first_window_tap / box_slots)
  // tap first_window_tap + k: gy as (channel, position < min(L_out, L_in + s_k), batch), 16-bit; as
  // (position, channel, batch), TF32
  CUtensorMap grad_y_maps[kBoxWindowTaps];
};

constexpr int kBoxHalfCi = kBoxBlockCi / 2;  // a consumer warpgroup's ci (wgmma's M)
constexpr int kBoxXBytes = kBoxBlockCi * kBoxItemBytes;
constexpr int kBoxBoxBytes = kBoxSlotCo * kBoxItemBytes;  // a gy box: 64 co x 128 bytes of positions

// The block's tile and slice, from blockIdx.x = slice * tiles + tile (the blocks of a wave walk the
// same items: their boxes come from L2), tile = ((group * ci_tiles + ci_tile) * co_tiles + co_tile)
// * tap_groups + tap_group, the tap group counted from the launch's window (first_window_tap)
struct BoxTile {
  int group, first_ci, first_co, first_tap, taps;  // taps: the tap group's (box_slots, or fewer in the last)
  int64_t slice, begin, end;                       // the slice's items [begin, end)
  __device__ __forceinline__ explicit BoxTile(const WeightBoxProblem& p) {
    const int64_t tile = int64_t(blockIdx.x) % p.tiles;
    slice = int64_t(blockIdx.x) / p.tiles;
    const int tap_group = int(tile % p.tap_groups), co_tile = int(tile / p.tap_groups % p.co_tiles);
    const int64_t ci_tiles_of_groups = tile / p.tap_groups / p.co_tiles;
    group = int(ci_tiles_of_groups / p.ci_tiles);
    first_ci = int(ci_tiles_of_groups % p.ci_tiles) * kBoxBlockCi;
    first_co = co_tile * p.block_co;
    first_tap = p.first_window_tap + tap_group * p.box_slots;
    taps = min(p.box_slots, p.taps - first_tap);
    begin = slice * p.items / p.slices;
    end = (slice + 1) * p.items / p.slices;
  }
};

// Stage s: x_s (two 64-ci boxes) then gy_s (kColumns / 64 boxes of 64 co x 128 bytes), kBoxXBytes +
// kColumns * 128 bytes (a multiple of the 1024-byte swizzle atom); after the stages, full[s] (the producer's arrival and the
// boxes' bytes) and empty[s] (the consumers' 8 warps)
template <int kColumns>
struct BoxStages {
  static constexpr int kStageBytes = kBoxXBytes + kColumns * kBoxItemBytes;
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  int count;
  __device__ __forceinline__ BoxStages(unsigned char* smem, int stages)
      : base(smem),
        full(reinterpret_cast<uint64_t*>(smem + stages * kStageBytes)),
        empty(reinterpret_cast<uint64_t*>(smem + stages * kStageBytes) + stages),
        count(stages) {}
  __device__ __forceinline__ unsigned char* x_s(int stage) const { return base + stage * kStageBytes; }
  __device__ __forceinline__ unsigned char* gy_s(int stage) const { return x_s(stage) + kBoxXBytes; }
  // by thread 0, before a block barrier
  __device__ __forceinline__ void init() const {
    for (int s = 0; s < count; ++s) {
      mbarrier_init(full + s, 1);
      mbarrier_init(empty + s, kPipelineConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
};

// A walker's place in the ring: stage, and the parity of its mbarriers' current phase
struct BoxRingPosition {
  int stage = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) stage = 0, parity ^= 1;
  }
};

// One thread: for each item (n, x positions [i0, i0 + 64)) of the slice, once its stage is free, the
// two x boxes at (i0, ci) and each tap slot's gy boxes at (co, i0 + s_k) of tap k's map
template <typename T, int kColumns>
struct BoxProducer {
  static constexpr int kPositions = kBoxItemBytes / int(sizeof(T));
  const WeightBoxProblem& p;
  const BoxTile& tile;
  const BoxStages<kColumns>& stages;
  __device__ __forceinline__ void run() const {
    const int x_channel = tile.group * int(p.in_channels_per_group) + tile.first_ci;
    const int grad_y_channel = tile.group * int(p.out_channels_per_group) + tile.first_co;
    const uint32_t bytes = kBoxXBytes + uint32_t(tile.taps * p.block_co * kBoxItemBytes);
    BoxRingPosition at;
    for (int64_t item = tile.begin; item < tile.end; ++item) {
      mbarrier_wait(stages.empty + at.stage, at.parity ^ 1);
      uint64_t* const full = stages.full + at.stage;
      const int n = int(item / p.chunks_per_row), i0 = int(item % p.chunks_per_row) * kPositions;
      mbarrier_expect_bytes(full, bytes);
      for (int half = 0; half < 2; ++half)
        tensor_copy_to_shared(stages.x_s(at.stage) + half * kBoxHalfCi * kBoxItemBytes, &p.x_map, i0,
                              x_channel + half * kBoxHalfCi, n, full);
      for (int slot = 0; slot < tile.taps; ++slot) {
        const int k = tile.first_tap + slot;
        for (int co = 0; co < p.block_co; co += kBoxSlotCo)
          copy_grad_y_box(stages.gy_s(at.stage) + (slot * p.block_co + co) * kBoxItemBytes, &p.grad_y_maps[k - p.first_window_tap],
                          grad_y_channel + co, i0 + p.group_tap_shift[k], n, full);
      }
      mbarrier_arrive(full);
      at.advance(stages.count);
    }
  }
  // a gy box of 64 co from `channel` at `position` (the map's coordinates: the inner one first)
  __device__ __forceinline__ static void copy_grad_y_box(void* shared, const CUtensorMap* map, int channel, int position, int n,
                                                         uint64_t* full) {
    if constexpr (box_grad_y_k_major(sizeof(T))) {
      tensor_copy_to_shared(shared, map, position, channel, n, full);
    } else {
      tensor_copy_to_shared(shared, map, channel, position, n, full);
    }
  }
};

// Consumer warpgroup wg (ci 64 * wg on): per item, wait for its stage, 4 k-steps of 32 bytes of
// positions (16-bit: 16 positions, 16 rows of 128 bytes of gy's N-major boxes; TF32: 8, 32 bytes
// along gy's K-major rows as along x's), commit;
// the previous item's stage goes back to the producer once that item's wgmma are done (one group in flight)
template <typename T, int kColumns>
struct BoxMainloop {
  static constexpr bool kKMajorB = box_grad_y_k_major(sizeof(T));
  using Kind = std::conditional_t<kKMajorB, Tf32, T>;
  const BoxTile& tile;
  const BoxStages<kColumns>& stages;
  int wg, lane;
  __device__ __forceinline__ void run(float (&acc)[kColumns / 2]) const {
    BoxRingPosition at;
    int held = -1;  // the stage whose wgmma may still run
    for (int64_t item = tile.begin; item < tile.end; ++item) {
      mbarrier_wait(stages.full + at.stage, at.parity);
      const uint64_t a0 = swizzled_descriptor<kBoxItemBytes>(stages.x_s(at.stage) + wg * kBoxHalfCi * kBoxItemBytes);
      const uint64_t b0 = kKMajorB ? swizzled_descriptor<kBoxItemBytes>(stages.gy_s(at.stage))
                                   : mn_major_descriptor(stages.gy_s(at.stage), kBoxBoxBytes);
      constexpr int kBStep = kKMajorB ? 2 : 128;  // (B a k-step: K-major 32 bytes, N-major 2048; the address field /16)
      wgmma_fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < kBoxItemBytes / 32; ++step)  // (A: 32 bytes a k-step, 2 in the address field)
        wgmma_kstep<Kind, kColumns, KMajorA, /*kMnMajorB=*/!kKMajorB>(acc, KMajorA{a0 + uint64_t(2 * step)}, b0 + uint64_t(kBStep * step));
      wgmma_commit();
      wgmma_fence_accumulators(acc);
      wgmma_wait<1>();
      if (held >= 0 && lane == 0) mbarrier_arrive(stages.empty + held);
      held = at.stage;
      at.advance(stages.count);
    }
    wgmma_wait<0>();
    wgmma_fence_accumulators(acc);
  }
};

// The accumulators -> partial[slice] (grad_w's layout (C_in, C_out/groups, K)): d[4j + e] is ci row
// 16 * warp + lane / 4 + 8 * (e / 2) of the warpgroup's 64, column 8j + 2 * (lane % 4) + e % 2, in
// tap slot 8j / block_co (block_co a multiple of 8: a column group lies in one slot). Straight from
// the registers a warp's store would touch 32 sectors (a value's neighbours in grad_w are its other
// taps, in other tiles' columns); so the tile goes through shared memory (the stages' bytes, free
// once both consumer warpgroups' wgmma are done; the planner keeps them large enough), rows of ci at
// box_staging_pitch floats (plan.h), slot t's co c at t * (block_co + 8) + c (the pitch 8 mod 32: the
// fragments' pairs store without bank conflicts, and reads along taps of neighbouring co hit
// distinct banks), and leaves along grad_w's runs: a thread's consecutive elements the tile's taps
// of one co, then the next co.
template <int kColumns>
struct BoxEpilogue {
  const WeightGradPlan& p;
  const BoxTile& tile;
  float* partial;
  int wg, warp, lane;
  static constexpr int kConsumerBarrier = 1;  // (named barrier 0 is __syncthreads')
  __device__ __forceinline__ void store(const float (&acc)[kColumns / 2], float* staging) const {
    const int64_t weight_elements = int64_t(p.groups) * p.in_channels_per_group * p.out_channels_per_group * p.taps;
    float* const out = partial + tile.slice * weight_elements;
    const int row_pitch = box_staging_pitch(p.box_slots, p.block_co), first_row = wg * kBoxHalfCi + 16 * warp + lane / 4;
    consumer_barrier();  // (the other warpgroup's wgmma may still read the stages)
#pragma unroll
    for (int j = 0; j < kColumns / 8; ++j) {
      const int slot = 8 * j / p.block_co, co = 8 * j - slot * p.block_co + 2 * (lane % 4);
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(staging + (first_row + 8 * half) * row_pitch + slot * (p.block_co + 8) + co) =
            make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
    }
    consumer_barrier();
    // a warp a row of ci at a time, its lanes along the row's run of (co, tap slot) pairs, (co, slot)
    // = (e / taps, e % taps) by a multiply (exact: e < 1,024 and taps <= 4)
    const int taps = tile.taps, run = taps * p.block_co, reciprocal = (65536 + taps - 1) / taps;
    for (int row = int(threadIdx.x) / 32; row < kBoxBlockCi; row += kPipelineConsumerThreads / 32) {
      const int ci = tile.first_ci + row;
      if (ci >= p.in_channels_per_group) break;  // (rows ascend: the rest too)
      float* const out_row = out + ((int64_t(tile.group) * p.in_channels_per_group + ci) * p.out_channels_per_group + tile.first_co) * p.taps + tile.first_tap;
      const float* const staged_row = staging + row * row_pitch;
      for (int e = lane; e < run; e += 32) {
        const int co = (e * reciprocal) >> 16, slot = e - co * taps;
        if (tile.first_co + co < p.out_channels_per_group) out_row[int64_t(co) * p.taps + slot] = staged_row[slot * (p.block_co + 8) + co];
      }
    }
  }
  __device__ __forceinline__ static void consumer_barrier() {
    asm volatile("bar.sync %0, %1;" ::"n"(kConsumerBarrier), "n"(kPipelineConsumerThreads) : "memory");
  }
};

template <typename T, int kColumns>
__global__ void __launch_bounds__(kPipelineThreads, 1)
    grad_weight_boxes_kernel(float* __restrict__ partial, const __grid_constant__ WeightBoxProblem p) {
  begin_dependent_grid();
#if CONVT_WGMMA_AVAILABLE  // (sm_90a only: other archs get an empty kernel)
  extern __shared__ __align__(kMaxSwizzleAtomBytes) unsigned char box_smem[];
  const BoxStages<kColumns> stages(box_smem, p.stages);
  const BoxTile tile(p);
  if (threadIdx.x == 0) stages.init();
  __syncthreads();
  if (threadIdx.x >= kPipelineConsumerThreads) {  // ---- the producer warpgroup: one thread copies ----
    set_max_registers<kProducerRegisters, false>();
    if (threadIdx.x == kPipelineConsumerThreads) BoxProducer<T, kColumns>{p, tile, stages}.run();
    return;
  }
  set_max_registers<kConsumerRegisters, true>();  // ---- the consumer warpgroups ----
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  float acc[kColumns / 2];
#pragma unroll
  for (int e = 0; e < kColumns / 2; ++e) acc[e] = 0.0f;
  BoxMainloop<T, kColumns>{tile, stages, wg, lane}.run(acc);
  BoxEpilogue<kColumns>{p, tile, partial, wg, warp, lane}.store(acc, reinterpret_cast<float*>(box_smem));
#endif
}

}  // namespace convt::cuda
