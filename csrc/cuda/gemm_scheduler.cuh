// Which tile, part and step a block works on (docs/design.md §3.3): GemmTile (where a tile sits),
// GemmStep (a reduction step of a tile) and GemmScheduler (the persistent blocks' walk).
#pragma once

#include "cuda/gemm_problem.cuh"

namespace convt::cuda {

// Where a tile sits. Resident weights: (group, row tile) outermost, so a block keeps its weight;
// otherwise row tiles innermost, so concurrent tiles share their x in L2. row_tile counts the
// problem's row tiles; the launch's packed weight holds its own (GemmPlan::first_row_tile).
struct GemmTile {
  int64_t n;
  int g, row_tile, col_tile;
  __device__ GemmTile(unsigned tile, const GemmProblem& p) {
    if (p.resident) {
      auto q = p.div_col_tiles.divmod(tile);
      col_tile = int(q.mod);
      q = p.div_batch.divmod(q.div);
      n = q.mod;
      q = p.div_row_tiles.divmod(q.div);
      row_tile = int(q.mod) + p.first_row_tile;
      g = int(q.div);
    } else {
      auto q = p.div_row_tiles.divmod(tile);
      row_tile = int(q.mod) + p.first_row_tile;
      q = p.div_col_tiles.divmod(q.div);
      col_tile = int(q.mod);
      q = p.div_groups.divmod(q.div);
      g = int(q.mod);
      n = q.div;
    }
  }
  __device__ int64_t weight_key() const { return (int64_t(g) << 32) + row_tile; }
  // (g, row tile) in the launch's packed weight
  __device__ int64_t packed_index(const GemmProblem& p) const { return int64_t(g) * p.row_tiles + row_tile - p.first_row_tile; }
};

// A reduction step of a tile: step = (out_phase * in_phases + in_phase) * chunks + chunk (list
// indices); its taps are step_tap[first_tap, end_tap).
// A launch's chunk `chunk` is the problem's chunk first_chunk + chunk (GemmPlan::first_chunk: the
// channels it reads; the packed weight holds the launch's own chunks from 0)
__device__ __forceinline__ int64_t problem_chunk(const GemmProblem& p, int chunk) { return int64_t(p.first_chunk) + chunk; }

struct GemmStep {
  int out_phase, in_phase, chunk, first_tap, end_tap;
  __device__ GemmStep(int step, const GemmProblem& p) {
    const auto q = p.div_chunks.divmod(unsigned(step));
    const auto phases = p.div_in_phases.divmod(q.div);
    chunk = int(q.mod), in_phase = int(phases.mod), out_phase = int(phases.div);
    first_tap = p.pair_begin[q.div];
    end_tap = p.pair_begin[q.div + 1];
  }
};

// A pipelined part's chunks [begin, end): every chunk of its tile, or with a reduction split (one
// pair: a step is a chunk) its run of split_steps
struct ChunkRange {
  int begin, end;
};

// The persistent walk: block b takes parts b, b + gridDim.x, ... in order.
// - pipelined_gemm_kernel walks parts (tile_of, out_phases_of, chunks_of): a tile's out phases (kPairs),
//   whole tiles (one pair, a phase pair, 3xTF32), or with a reduction split a tile's runs of chunks; its
//   producer and its consumers walk the same sequence. A ping-pong of the
//   two consumer warpgroups plugs in here: each consumer takes every other part of the block's
//   sequence (a first(consumer) and a next() of twice the stride) while the producer still walks all
//   of them in order.
// - implicit_gemm_kernel walks parts (GemmProblem::tile_parts: one out_phase's steps of a tile each,
//   a run of split_steps of them with a reduction split, or the whole tile) step by step, and stages
//   a step ahead: after() is the step that follows.
struct GemmScheduler {
  const GemmProblem& p;
  __device__ __forceinline__ explicit GemmScheduler(const GemmProblem& problem) : p(problem) {}
  __device__ __forceinline__ unsigned first() const { return blockIdx.x; }
  __device__ __forceinline__ unsigned next(unsigned index) const { return index + gridDim.x; }

  __device__ __forceinline__ bool has_part(unsigned part) const { return part < p.parts; }
  __device__ __forceinline__ GemmTile tile_of(unsigned part) const { return GemmTile(p.div_tile_parts.div(part), p); }
  // A part's first step; part_steps: the steps of a part without a split (every step of the tile, or
  // one out_phase's). With one, part (tile, out_phase, split) starts split_steps * split steps into
  // its out phase.
  __device__ __forceinline__ int first_step_of(unsigned part, int part_steps) const {
    const unsigned in_tile = p.div_tile_parts.mod(part);
    if (p.splits == 1) return int(in_tile) * part_steps;
    const auto phase_split = p.div_splits.divmod(in_tile);
    return int(phase_split.div) * p.in_phases * p.chunks + int(phase_split.mod) * p.split_steps;
  }
  // With a split: the last step of the part that starts at `first` (its run's, or its out phase's)
  // and the part's slice of the split sums
  __device__ __forceinline__ int last_step_of(int first) const {
    const int phase_steps = p.in_phases * p.chunks;
    return min(first + p.split_steps, (first / phase_steps + 1) * phase_steps) - 1;
  }
  __device__ __forceinline__ int split_of(unsigned part) const { return int(p.div_splits.mod(p.div_tile_parts.mod(part))); }
  // A pipelined part's out phases [begin, end): its own where the plan gives each out phase parts of
  // its own (tile_parts = out_phases * splits), else all of them (tile_parts 1: a phase pair's
  // part, 3xTF32's tile)
  struct PhaseRange {
    int begin, end;
  };
  __device__ __forceinline__ PhaseRange out_phases_of(unsigned part) const {
    if (p.tile_parts == 1) return {0, p.out_phases};
    const int phase = int(p.div_splits.div(p.div_tile_parts.mod(part)));
    return {phase, phase + 1};
  }
  __device__ __forceinline__ ChunkRange chunks_of(unsigned part) const {
    if (p.splits == 1) return {0, p.chunks};
    const int begin = split_of(part) * p.split_steps;
    return {begin, min(begin + p.split_steps, p.chunks)};
  }
  // The step after (part, step): the part's next step, or the first step of the block's next part
  // when this one ends (`valid`: there is one; `new_tile`: it belongs to another tile, tile_of(part))
  struct Next {
    unsigned part;
    int step;
    bool valid, new_tile;
  };
  __device__ __forceinline__ Next after(unsigned part, int step, bool phase_ends, bool tile_ends, int part_steps) const {
    const bool next_part = p.tile_parts > 1 ? phase_ends : tile_ends;
    const unsigned next_index = next_part ? next(part) : part;
    const bool has_next = has_part(next_index);
    const int next_step = next_part ? (has_next ? first_step_of(next_index, part_steps) : 0) : step + 1;
    return Next{next_index, next_step, has_next, next_part && has_next};
  }
};

}  // namespace convt::cuda
