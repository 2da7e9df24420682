// Which output tile, slice and items a grad_weight block works on (docs/design.md §5.1, §5.4).
// WeightGradTile serves both grad_weight kernels; GradWGemmWork and GradWGemmItems are
// grad_weight_gemm_kernel's.
#pragma once

#include "cuda/grad_weight_gemm_common.cuh"

namespace convt::cuda {

// Where block blockIdx.x works (both grad_weight kernels): block = slice * tiles + tile, tile =
// ((pack * ci_tiles + ci_tile) * co_tiles + co_tile) * tap_groups + tap_group, a pack the groups
// [pack * packed_groups, + packed_groups) (one group but on mma.sync tiles over small groups); the
// tile's first ci and co, and how many of its block_ci x block_co rows and columns lie inside the
// pack's groups
struct WeightGradTile {
  int64_t slice, pack, first_ci, first_co;
  int tap_group, ci_tile, ci_count, co_count;
  int ci_offset, co_offset;  // the tile's first ci and co inside its pack
  __device__ __forceinline__ WeightGradTile(const WeightGradProblem& p, int block_ci, int block_co) {
    const int64_t tile = blockIdx.x % p.tiles;
    slice = blockIdx.x / p.tiles;
    tap_group = int(tile % p.tap_groups);
    const int co_tile = int(tile / p.tap_groups % p.co_tiles);
    ci_tile = int(tile / p.tap_groups / p.co_tiles % p.ci_tiles);
    pack = tile / p.tap_groups / p.co_tiles / p.ci_tiles;
    const int64_t first_group = pack * p.packed_groups;
    const int64_t groups = p.groups - first_group < p.packed_groups ? p.groups - first_group : p.packed_groups;
    ci_offset = ci_tile * block_ci, co_offset = co_tile * block_co;
    first_ci = first_group * p.in_channels_per_group + ci_offset, first_co = first_group * p.out_channels_per_group + co_offset;
    const int64_t ci_left = groups * p.in_channels_per_group - int64_t(ci_tile) * block_ci;
    const int64_t co_left = groups * p.out_channels_per_group - int64_t(co_tile) * block_co;
    ci_count = ci_left < block_ci ? int(ci_left) : block_ci;
    co_count = co_left < block_co ? int(co_left) : block_co;
  }
  // Whether the tile's (ci, co) is a weight: both in one group (always, but in a pack of several)
  __device__ __forceinline__ bool same_group(const WeightGradProblem& p, int ci, int co) const {
    return p.packed_groups == 1 || (ci_offset + ci) / int(p.in_channels_per_group) == (co_offset + co) / int(p.out_channels_per_group);
  }
  // partial's index of (ci, co) of the tile, tap k, in a slice: taps first, (k * groups*Cig + g*Cig +
  // ci) * Cog + co, or grad_w's order, ((g*Cig + ci) * Cog + co) * taps + k (WeightGradPlan::taps_first;
  // co's place in its group in 32-bit arithmetic, the modulo only in a pack of several groups)
  __device__ __forceinline__ int64_t partial_index(const WeightGradProblem& p, int ci, int co, int k) const {
    const int pack_co = co_offset + co, group_co = p.packed_groups == 1 ? pack_co : pack_co % int(p.out_channels_per_group);
    if (p.taps_first) return (k * (p.groups * p.in_channels_per_group) + first_ci + ci) * p.out_channels_per_group + group_co;
    return ((first_ci + ci) * p.out_channels_per_group + group_co) * p.taps + k;
  }
};

// What a block of grad_weight_gemm_kernel works on (its tile, and the tap group's phase, tap count
// and largest shift), and this thread's place in it: warp (warp % kCiWarps, warp / kCiWarps) holds
// the 16 ci x 32 co warp tile from (warp_ci, warp_co). With grad_bias (TF32), every block of a phase
// (ci tiles x the phase's tap groups: bias_share of them) stages every item of its slice, so the
// items are dealt round robin: this block sums the gy of every bias_share-th item from bias_rank.
// A persistent or ping-pong schedule would make one of these per tile it hands out.
template <int kCiWarps, int kCoWarps>
struct GradWGemmWork {
  int lane, warp, warp_ci, warp_co;
  WeightGradTile tile;
  int phase, count, shift_max;
  int bias_share, bias_rank;
  __device__ __forceinline__ GradWGemmWork(const WeightGradProblem& p)
      : lane(threadIdx.x % 32), warp(threadIdx.x / 32), warp_ci((warp % kCiWarps) * 16),
        warp_co((warp / kCiWarps) * kGradWTilesN * 8), tile(p, 16 * kCiWarps, kGradWBlockCoOf<kCoWarps>),
        phase(p.group_phase[tile.tap_group]), count(p.group_count[tile.tap_group]),
        shift_max(p.group_shift_max[tile.tap_group]),
        bias_share(p.ci_tiles * p.group_phase_groups[tile.tap_group]),
        bias_rank(tile.ci_tile * p.group_phase_groups[tile.tap_group] + p.group_phase_index[tile.tap_group]) {}
};

// The items (n, m chunk) of the block's slice, [slice * items / slices, (slice + 1) * items / slices),
// in order: for (item = first(); item < end; item = next(item)), and which of them are the block's
// grad_bias items (GradWGemmWork). A ping-pong of two consumer groups would take first() + its
// index and steps of two here. (The bound is compared in the caller: a member function comparing
// its argument with `end` has the compiler swap the operands, which changes the code.)
struct GradWGemmItems {
  int64_t begin, end;
  int bias_share, bias_turn;  // bias_turn: items until this block's next grad_bias item
  template <typename Work>
  __device__ __forceinline__ GradWGemmItems(const WeightGradProblem& p, const Work& work)
      : begin(work.tile.slice * p.items / p.slices), end((work.tile.slice + 1) * p.items / p.slices),
        bias_share(work.bias_share), bias_turn(work.bias_rank) {}
  __device__ __forceinline__ int64_t first() const { return begin; }
  __device__ __forceinline__ int64_t next(int64_t item) const { return item + 1; }
  // Whether this item (the items taken in order) is one of this block's grad_bias items
  __device__ __forceinline__ bool take_bias_turn(bool sums_bias) {
    const bool bias_item = sums_bias && bias_turn == 0;
    bias_turn = bias_turn == 0 ? bias_share - 1 : bias_turn - 1;
    return bias_item;
  }
};

}  // namespace convt::cuda
