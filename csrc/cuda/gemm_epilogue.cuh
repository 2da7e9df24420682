// Accumulators -> out, plus bias (docs/design.md §3.4, §3.6): the merged-row store shared by both
// kernels, implicit_gemm_kernel's epilogue (y_s staging or direct stores, per out_phase) and
// pipelined_gemm_kernel's (direct stores per tile).
//
// An epilogue is a struct whose store_tile (pipelined) or store_phase / finish_tile (implicit) the
// MMA warps call with their accumulators; each stores synchronously today. An asynchronous form
// (the accumulators staged in shared memory and written by bulk copies that the MMA warps do not
// wait for) is another struct with the same store_tile: it writes its staging buffer, fences
// (fence_async_shared), syncs the consumer warpgroup on a named barrier, lets one thread issue the
// bulk copies and commit them as a bulk group, waits for that group's reads before the buffer is
// written again, and drains the groups before the kernel exits; the kernel takes the epilogue as a
// template parameter.
#pragma once

#include <type_traits>

#include "cuda/gemm_mainloop.cuh"

namespace convt::cuda {

// condition ? a : b as a register select (a select of two elements of a register array may compile to
// a load from a selected address, which moves the whole array to local memory)
__device__ __forceinline__ float select_register(bool condition, float a, float b) {
  float chosen;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n selp.f32 %0, %1, %2, p;\n}" : "=f"(chosen) : "f"(a), "f"(b), "r"(int(condition)));
  return chosen;
}

// Merged rows (docs/design.md §3.2): each thread stores rows first_row + 8j and the next (first_row
// even) at kSides columns column(side), their accumulators value(j, side, 0) and value(j, side, 1)
// (the two kernels index their accumulators in their own way: WarpgroupMma's layout, one or two
// subtiles). Row R is out row R / row_phases at position column*column_positions + R % row_phases -
// phase_origin, so each even row and the next are adjacent positions of one out row (a pair store
// where aligned) unless the even row is a last phase. kBiasFirst: the bias of all of this thread's
// rows is loaded before its first store (one load latency, not one a row); otherwise each row's
// bias at its stores. Where p.nonfinite is set (a forward merged with zero taps), a thread with an
// Inf or NaN among its accumulators sets *p.nonfinite: a zero tap's product is 0 unless its x is Inf
// or NaN, and then the sum it adds to is NaN, so where every sum is finite the merged result is the
// exact one (DataPlan::exact runs behind the flag).
template <int kBlockM, int kSides, bool kBiasFirst, typename T, typename Column, typename Value>
__device__ __forceinline__ void store_merged_rows(const GemmProblem& p, const T* bias, T* out, const GemmTile& tile, int first_row,
                                                  Column&& column_of, Value&& value) {
  const int64_t group_rows = p.rows_per_group / p.row_phases;  // out rows of a group
  T* const group_out = out + (tile.n * p.groups + tile.g) * group_rows * p.out_length;
  auto bias_at = [&](int out_row) { return bias ? to_float(bias[int64_t(tile.g) * group_rows + out_row]) : 0.0f; };
  auto store = [&](T* row_out, int position, float value) {
    if (position >= 0 && position < p.out_length) row_out[position] = from_float<T>(value);
  };
  float row_bias[kBlockM / 8], next_row_bias[kBlockM / 8];  // kBiasFirst: of rows first_row + 8j and the next
  if constexpr (kBiasFirst) {
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const int row = first_row + 8 * j;
      const int out_row = int(p.div_row_phases.div(unsigned(row))), next_out_row = int(p.div_row_phases.div(unsigned(row + 1)));
      row_bias[j] = row < p.rows_per_group ? bias_at(out_row) : 0.0f;
      next_row_bias[j] = row + 1 < p.rows_per_group ? bias_at(next_out_row) : 0.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const int row = first_row + 8 * j;
    if (row >= p.rows_per_group) continue;
    const auto q = p.div_row_phases.divmod(unsigned(row));
    const int out_row = int(q.div), phase = int(q.mod);
    const bool adjacent = phase + 1 < p.row_phases;  // row + 1: the next position of the same out row
    const bool next_inside = row + 1 < p.rows_per_group;
    // rows of phases without a tap are not stored (stored_row_phases: out holds the bias there)
    const bool first_stored = phase < p.stored_row_phases, second_stored = adjacent ? phase + 1 < p.stored_row_phases : next_inside;
    T* const row_out = group_out + int64_t(out_row) * p.out_length;  // (64-bit math once a row)
    float bias_value, next_bias;
    if constexpr (kBiasFirst) {
      bias_value = row_bias[j], next_bias = next_row_bias[j];
    } else {
      bias_value = bias_at(out_row), next_bias = adjacent || !next_inside ? bias_value : bias_at(out_row + 1);
    }
#pragma unroll
    for (int side = 0; side < kSides; ++side) {
      const int column = column_of(side);
      const int position = column * p.column_positions + phase - p.phase_origin;
      const float first = value(j, side, 0) + bias_value, second = value(j, side, 1) + next_bias;
      if (!adjacent) {
        if (first_stored) store(row_out, position, first);
        if (next_inside) store(row_out + p.out_length, column * p.column_positions - p.phase_origin, second);
      } else if (second_stored && p.out_length % 2 == 0 && position % 2 == 0 && position >= 0 && position + 1 < p.out_length) {
        store_pair(row_out + position, first, second);  // (second_stored: first too)
      } else {
        if (first_stored) store(row_out, position, first);
        if (second_stored) store(row_out, position + 1, second);
      }
    }
  }
  if (p.nonfinite != nullptr) {  // (a pass of its own, a uniform branch: only the plans that read the flag pay its tests)
    bool finite = true;
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const int row = first_row + 8 * j;
      if (row >= p.rows_per_group) continue;
      const bool next_inside = row + 1 < p.rows_per_group;
#pragma unroll
      for (int side = 0; side < kSides; ++side)
        finite &= isfinite(value(j, side, 0)) & (isfinite(value(j, side, 1)) | !next_inside);
    }
    if (!finite) *p.nonfinite = 1;
  }
}

// ---- implicit_gemm_kernel ------------------------------------------------------------------------

// Where a tile's outputs go: its rows of out and their bias, y_s (staged output), and the per-tile
// part of the epilogue: finish_tile writes, staged, every out position of the tile from y_s plus bias
// in 16-byte vectors by whole warps along the row (phases without taps: bias only); direct, the bias
// at the positions of phases no tap reaches.
template <typename T, int kBlockM, int kBlockN>
struct ImplicitGemmOutput {
  static constexpr int kVector = 16 / sizeof(T);
  const GemmProblem& p;
  const T* bias;
  T* out;
  float* y_s;
  bool clear_y_s;  // phases that no tap reaches keep the zeros of a cleared y_s (the flush clears what it reads)
  int lane, warp;

  __device__ __forceinline__ ImplicitGemmOutput(const GemmProblem& problem, const T* bias_, T* out_, float* y_s_, int lane_, int warp_)
      : p(problem), bias(bias_), out(out_), y_s(y_s_), clear_y_s(problem.stage_output && problem.out_phases < problem.out_step),
        lane(lane_), warp(warp_) {}

  // The tile's rows of out, and their bias
  __device__ __forceinline__ T* out_row(const GemmTile& tile, int row) const {
    return out + (tile.n * p.groups + tile.g) * p.rows_per_group * p.out_length + int64_t(row) * p.out_length;
  }
  __device__ __forceinline__ float bias_of(const GemmTile& tile, int row) const {
    return bias ? to_float(bias[int64_t(tile.g) * p.rows_per_group + row]) : 0.0f;
  }
  // Staged output: the tile's out positions of a row start at y_s element `shift` of that row, so
  // that 16-byte vectors of y_s rows and of out rows line up.
  __device__ __forceinline__ int64_t first_position(const GemmTile& tile) const { return int64_t(tile.col_tile) * kBlockN * p.out_step; }
  __device__ __forceinline__ int shift_of(const T* out_positions) const {
    return int(reinterpret_cast<uintptr_t>(out_positions) / sizeof(T) % kVector);
  }

  __device__ __forceinline__ void clear_staging() const {
    if (clear_y_s) {
      for (int v = threadIdx.x * 4; v < kBlockM * p.y_row_elements; v += kGemmThreads * 4)
        *reinterpret_cast<float4*>(y_s + v) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }

  // The tile's kBlockN * out_step out positions, a warp per row. Staged: from y_s plus bias, in
  // 16-byte vectors (elements at the ends of the row segment one by one). Not staged: the positions
  // of phases no tap reaches get the bias.
  __device__ __forceinline__ void finish_tile(const GemmTile& tile) const {
    if (!p.stage_output && p.out_phases == p.out_step) return;
    const int positions = int(min(int64_t(kBlockN) * p.out_step, p.out_length - first_position(tile)));
    for (int tile_row = warp; tile_row < kBlockM; tile_row += kGemmThreads / 32) {
      const int row = tile.row_tile * kBlockM + tile_row;
      if (row >= p.rows_per_group) break;
      const float bias_value = bias_of(tile, row);
      T* out_positions = out_row(tile, row) + first_position(tile);
      if (!p.stage_output) {
        for (int pos = lane; pos < positions; pos += 32) {
          bool reached = false;
          for (int r = 0; r < p.out_phases; ++r) reached |= p.out_phase_value[r] == pos % p.out_step;
          if (!reached) out_positions[pos] = from_float<T>(bias_value);
        }
        continue;
      }
      const int shift = shift_of(out_positions);
      T* out_vectors = out_positions - shift;  // 16-byte aligned
      float* y = y_s + tile_row * p.y_row_elements;
      for (int begin = lane * kVector; begin < shift + positions; begin += 32 * kVector) {
        float values[kVector];
#pragma unroll
        for (int e = 0; e < kVector; e += 4) {
          float4* from = reinterpret_cast<float4*>(y + begin + e);
          const float4 v = *from;
          if (clear_y_s) *from = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          values[e] = v.x + bias_value, values[e + 1] = v.y + bias_value;
          values[e + 2] = v.z + bias_value, values[e + 3] = v.w + bias_value;
        }
        if (begin >= shift && begin + kVector <= shift + positions) {
          store_vector(out_vectors + begin, values);
        } else {
#pragma unroll
          for (int e = 0; e < kVector; ++e)
            if (begin + e >= shift && begin + e < shift + positions) out_vectors[begin + e] = from_float<T>(values[e]);
        }
      }
    }
    if (clear_y_s) clear_unread(tile, positions);
  }

  // A cleared y_s must be all zeros again when a tile ends: the next tile of this block reads its
  // unreached phases' positions from it. finish_tile clears what it reads, which is every element
  // store_phase staged except, in a part-empty tile, those of rows past the group's (cleared here
  // whole) and, where the row ends in the tile, those past the row's end (cleared here from the
  // first vector finish_tile did not read). Same warp per row as finish_tile.
  __device__ __forceinline__ void clear_unread(const GemmTile& tile, int positions) const {
    const int64_t rows = p.rows_per_group - int64_t(tile.row_tile) * kBlockM;
    if (rows >= kBlockM && positions == kBlockN * p.out_step) return;
    for (int tile_row = warp; tile_row < kBlockM; tile_row += kGemmThreads / 32) {
      float* y = y_s + tile_row * p.y_row_elements;
      int first = 0;
      if (tile_row < rows) {
        const int shift = shift_of(out_row(tile, tile.row_tile * kBlockM + tile_row) + first_position(tile));
        first = (shift + positions + kVector - 1) / kVector * kVector;
      }
      for (int v = first + lane * 4; v < p.y_row_elements; v += 32 * 4)
        *reinterpret_cast<float4*>(y + v) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
};

// Per out_phase, store_phase: the accumulators to y_s (staged output) or straight to out plus bias
// (docs/design.md §3.4); merged rows by store_merged_rows. finish_tile (ImplicitGemmOutput) ends a tile.
template <typename T, Math kMath, int kWarpTilesM, int kWarpsM, bool kWarpgroups, Merge kMerge>
struct ImplicitGemmEpilogue : ImplicitGemmOutput<T, kBlockMOf<kWarpTilesM, kWarpsM>, kBlockNOf<kWarpsM>> {
  static constexpr int kBlockM = kBlockMOf<kWarpTilesM, kWarpsM>, kBlockN = kBlockNOf<kWarpsM>;
  using Output = ImplicitGemmOutput<T, kBlockM, kBlockN>;
  using Output::bias, Output::lane, Output::out, Output::p, Output::warp, Output::y_s;
  using Output::first_position, Output::out_row, Output::bias_of, Output::shift_of;
  using Accumulators = Accumulator<kMath>[kWarpTilesM][kWarpTilesN];
  using Warpgroup = WarpgroupMma<T, kMath, kMerge, kBlockM, 1>;
  int warp_mtile, warp_col;  // this warp's first m16 tile and first column (mma.sync tiles)

  __device__ __forceinline__ ImplicitGemmEpilogue(const GemmProblem& problem, const T* bias_, T* out_, float* y_s_, int lane_,
                                                  int warp_)
      : Output(problem, bias_, out_, y_s_, lane_, warp_) {
    warp_mtile = (warp % kWarpsM) * kWarpTilesM;
    warp_col = (warp / kWarpsM) * kWarpTilesN * 8;
  }

  __device__ __forceinline__ void store_phase(const GemmTile& tile, int out_phase, const Accumulators& acc, const Warpgroup& wg) const {
    const int phase = p.out_phase_value[out_phase];
    const int columns = p.out_length > phase ? (p.out_length - phase + p.out_step - 1) / p.out_step : 0;
    if constexpr (kWarpgroups) {
      if constexpr (kMerge == Merge::kRows) {
        const int col = tile.col_tile * kBlockN + (warp / 4) * 64 + (warp % 4) * 16 + lane / 4;
        const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
        // columns col and col + 8; wg.acc[0][4j + e] (WarpgroupMma)
        store_merged_rows<kBlockM, 2, false>(
            p, bias, out, tile, first_row, [&](int side) { return col + 8 * side; },
            [&](int j, int side, int e) { return wg.acc[0][4 * j + 2 * side + e]; });
      } else {
        store_warpgroup_phase(tile, phase, columns, wg);
      }
    } else {
      store_warp_tile_phase(tile, phase, columns, acc);
    }
  }

  // A part's sums (GemmPlan::float_sums; warp tiles with direct stores only: sums_in_slices) to its
  // fp32 slice, out's layout, without the bias (the second kernel adds it); a launch after the first
  // of chunk ranges adds them to the slice's
  __device__ __forceinline__ void store_slice(const GemmTile& tile, int out_phase, int split, const Accumulators& acc) const {
    if constexpr (!kWarpgroups) {
      const int phase = p.out_phase_value[out_phase];
      const int columns = p.out_length > phase ? (p.out_length - phase + p.out_step - 1) / p.out_step : 0;
      float* const slice = p.slices + int64_t(split) * p.batch * p.groups * p.rows_per_group * p.out_length;
      const bool accumulate = p.first_chunk > 0;
      auto store_sum = [accumulate](float* sum, float value) { *sum = accumulate ? *sum + value : value; };
#pragma unroll
      for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = tile.row_tile * kBlockM + (warp_mtile + mt) * 16 + lane / 4 + half * 8;
          if (row >= p.rows_per_group) continue;
          float* const row_sums = slice + ((tile.n * p.groups + tile.g) * p.rows_per_group + row) * p.out_length + phase;
#pragma unroll
          for (int nt = 0; nt < kWarpTilesN; ++nt) {
            const int col = tile.col_tile * kBlockN + warp_col + nt * 8 + 2 * (lane % 4);
            if (col < columns) store_sum(row_sums + int64_t(col) * p.out_step, acc[mt][nt].value(half * 2));
            if (col + 1 < columns) store_sum(row_sums + int64_t(col + 1) * p.out_step, acc[mt][nt].value(half * 2 + 1));
          }
        }
    }
  }

  // wg.acc[0][4j + e] is row 8j + 2c + e % 2, column (this warp's 16) g + 8 * (e / 2): per row, two
  // columns. Row pointers and bounds from this thread's first row (64-bit math once, not per row).
  __device__ __forceinline__ void store_warpgroup_phase(const GemmTile& tile, int phase, int columns, const Warpgroup& wg) const {
    const int warp_first_col = (warp / 4) * 64 + (warp % 4) * 16 + lane / 4;
    const int col = tile.col_tile * kBlockN + warp_first_col;
    const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
    const int64_t rows_left = p.rows_per_group - first_row;
    T* const first_row_positions = out_row(tile, first_row);
    const T* const first_row_bias = bias ? bias + tile.g * p.rows_per_group + first_row : nullptr;
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 8 * j + half;  // from first_row
        const float first = wg.acc[0][4 * j + half], second = wg.acc[0][4 * j + 2 + half];  // columns col, col + 8
        T* out_positions = first_row_positions + int64_t(row) * p.out_length;
        if (p.stage_output) {
          float* y = y_s + ((row + 2 * (lane % 4)) * p.y_row_elements + shift_of(out_positions + first_position(tile)) + phase +
                            warp_first_col * p.out_step);
          y[0] = first;
          y[8 * p.out_step] = second;
          continue;
        }
        if (row >= rows_left) continue;
        const float bias_value = first_row_bias ? to_float(first_row_bias[row]) : 0.0f;
        T* out_first = out_positions + int64_t(col) * p.out_step + phase;
        if (col < columns) out_first[0] = from_float<T>(first + bias_value);
        if (col + 8 < columns) out_first[8 * p.out_step] = from_float<T>(second + bias_value);
      }
  }

  // Element e of mma tile (mt, nt) sits at row lane/4 (+8 for e >= 2) and column 2*(lane%4) + e%2
  // of the tile; at out_step 1 two adjacent columns go in one aligned store.
  __device__ __forceinline__ void store_warp_tile_phase(const GemmTile& tile, int phase, int columns, const Accumulators& acc) const {
    const bool paired = p.out_step == 1 && p.out_length % 2 == 0;
#pragma unroll
    for (int mt = 0; mt < kWarpTilesM; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tile_row = (warp_mtile + mt) * 16 + lane / 4 + half * 8;
        const int row = tile.row_tile * kBlockM + tile_row;
        T* out_positions = out_row(tile, row);
        if (p.stage_output) {
          float* y = y_s + (tile_row * p.y_row_elements + shift_of(out_positions + first_position(tile)) + phase);
#pragma unroll
          for (int nt = 0; nt < kWarpTilesN; ++nt) {
            const int tile_col = warp_col + nt * 8 + 2 * (lane % 4);
            y[tile_col * p.out_step] = acc[mt][nt].value(half * 2);
            y[(tile_col + 1) * p.out_step] = acc[mt][nt].value(half * 2 + 1);
          }
          continue;
        }
        if (row >= p.rows_per_group) continue;
        const float bias_value = bias_of(tile, row);
#pragma unroll
        for (int nt = 0; nt < kWarpTilesN; ++nt) {
          const int col = tile.col_tile * kBlockN + warp_col + nt * 8 + 2 * (lane % 4);
          const float v0 = acc[mt][nt].value(half * 2) + bias_value, v1 = acc[mt][nt].value(half * 2 + 1) + bias_value;
          if (paired && col + 1 < columns) {
            store_pair(out_positions + col, v0, v1);
          } else {
            const int64_t position = int64_t(col) * p.out_step + phase;
            if (col < columns) out_positions[position] = from_float<T>(v0);
            if (col + 1 < columns) out_positions[position + p.out_step] = from_float<T>(v1);
          }
        }
      }
  }
};

// ---- pipelined_gemm_kernel -----------------------------------------------------------------------

// store_tile: each accumulator of one out phase where its row and column put it, plus bias, the
// bias of all of a thread's rows loaded before its first store. Merged rows: store_merged_rows.
// Otherwise out_step 1: 16-bit by column pairs, float by columns; strided (out_step > 1, any type):
// by columns at the phase's positions, and where the problem has one out phase the thread also
// writes the bias at the positions of the phases no tap reaches (kForm kPairs: several out phases,
// the positions of unreached ones holding the launcher's bias: bias_first(GemmPlan); docs/design.md §3.6).
// store_phase_pair (kForm kPhasePair, TF32 and 16-bit): out_step 2's two out phases together.
template <typename T, Math kMath, Merge kMerge, int kBlockM, int kSubtiles, PipelineForm kForm>
struct PipelinedEpilogue {
  static constexpr int kBlockN = 128 * kSubtiles;
  using Mma = WarpgroupMma<T, kMath, kMerge, kBlockM, kSubtiles>;
  const GemmProblem& p;
  const T* bias;
  T* out;
  int lane, warp_first_col;  // (PipelinedMainloop's)
  int side_columns;          // from a lane's first column of a subtile to its second: 8, or 1 (permuted_positions)

  __device__ __forceinline__ PipelinedEpilogue(const GemmProblem& problem, const T* bias_, T* out_, int lane_, int warp)
      : p(problem), bias(bias_), out(out_), lane(lane_) {
    warp_first_col = (warp / 4) * 64 * kSubtiles + (warp % 4) * 16 + (Mma::permuted(p) ? 2 * (lane / 4) : lane / 4);
    side_columns = Mma::permuted(p) ? 1 : 8;
  }

  // Row pointers and bounds from this thread's first row (64-bit math once): the rows left in the
  // group from it, its out row and its bias
  struct ThreadRows {
    int64_t left;
    T* first_out;
    const T* first_bias;
  };
  __device__ __forceinline__ ThreadRows thread_rows(const GemmTile& tile, int first_row) const {
    return {p.rows_per_group - first_row, out + ((tile.n * p.groups + tile.g) * p.rows_per_group + first_row) * p.out_length,
            bias ? bias + tile.g * p.rows_per_group + first_row : nullptr};
  }

  // The bias of rows 8j + half from the first row (0 past the group's rows or without bias)
  __device__ __forceinline__ void load_row_bias(int64_t rows_left, const T* first_row_bias, float (&row_bias)[kBlockM / 8][2]) const {
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 8 * j + half;  // from first_row
        row_bias[j][half] = first_row_bias && row < rows_left ? to_float(first_row_bias[row]) : 0.0f;
      }
  }

  // store(j, half, row_out) for each of the thread's rows 8j + half from the first that lies in the group
  template <typename Store>
  __device__ __forceinline__ void for_each_thread_row(int64_t rows_left, T* first_row_out, Store&& store) const {
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 8 * j + half;  // from first_row
        if (row < rows_left) store(j, half, first_row_out + int64_t(row) * p.out_length);
      }
  }

  __device__ __forceinline__ void store_tile(const GemmTile& tile, int out_phase, const Mma& mma) const {
    const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
    if constexpr (kMerge == Merge::kRows) {
      // subtile s = side / 2, its columns col(s) and col(s) + side_columns
      store_merged_rows<kBlockM, 2 * kSubtiles, true>(
          p, bias, out, tile, first_row,
          [&](int side) { return tile.col_tile * kBlockN + warp_first_col + 64 * (side / 2) + side_columns * (side % 2); },
          [&](int j, int side, int e) { return mma.value(side / 2, 4 * j + 2 * (side % 2) + e); });
    } else {
      const ThreadRows rows = thread_rows(tile, first_row);
      if constexpr (sizeof(T) == 2) {
        if (p.out_step == 1 && p.out_length % 2 == 0) {
          if (Mma::permuted(p)) {
            store_adjacent_columns(tile, mma, rows.left, rows.first_out, rows.first_bias);
          } else {
            store_column_pairs(tile, mma, rows.left, rows.first_out, rows.first_bias);
          }
          return;
        }
      }
      store_columns(tile, p.out_phase_value[out_phase], mma, rows.left, rows.first_out, rows.first_bias);
    }
  }

  // A part's sums (GemmPlan::float_sums: one pair of out_step 1, nothing merged; sums_in_slices) to
  // its fp32 slice `split`, out's layout, without the bias (sum_slices adds it); a launch after the
  // first of chunk ranges adds them to the slice's. Each value where store_columns puts it.
  __device__ __forceinline__ void store_slice(const GemmTile& tile, int split, const Mma& mma) const {
    if constexpr (kMerge == Merge::kNone && kForm == PipelineForm::kOnePair) {
      const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
      const int64_t rows_left = p.rows_per_group - first_row;
      float* const first_row_sums = p.slices + int64_t(split) * p.batch * p.groups * p.rows_per_group * p.out_length +
                                    ((tile.n * p.groups + tile.g) * p.rows_per_group + first_row) * p.out_length;
      const bool accumulate = p.first_chunk > 0;
      auto store_sum = [&](float* row_sums, int col, float value) {
        if (col < p.out_length) row_sums[col] = accumulate ? row_sums[col] + value : value;
      };
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = 8 * j + half;  // from first_row
          if (row >= rows_left) continue;
          float* const row_sums = first_row_sums + int64_t(row) * p.out_length;
#pragma unroll
          for (int s = 0; s < kSubtiles; ++s) {
            const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s;
            store_sum(row_sums, col, mma.value(s, 4 * j + half));
            store_sum(row_sums, col + side_columns, mma.value(s, 4 * j + 2 + half));
          }
        }
    }
  }

  // The two out phases of out_step 2 (kPhasePair): column col holds positions 2 col and 2 col + 1,
  // the accumulators of phase value 0 and 1 (first: out phase 0's, whichever value that is), plus
  // the row's bias; one pair store where the position is aligned to two elements (every row where out
  // rows have an even length), else element by element.
  __device__ __forceinline__ void store_phase_pair(const GemmTile& tile, const Mma& first, const Mma& second) const {
    const bool swapped = p.out_phase_value[0] != 0;  // (first holds phase value 1)
    const ThreadRows rows = thread_rows(tile, tile.row_tile * kBlockM + 2 * (lane % 4));
    const int64_t rows_left = rows.left;
    T* const first_row_out = rows.first_out;
    float row_bias[kBlockM / 8][2];
    load_row_bias(rows_left, rows.first_bias, row_bias);
    for_each_thread_row(rows_left, first_row_out, [&](int j, int half, T* row_out) {
      const bool aligned = reinterpret_cast<uintptr_t>(row_out) % (2 * sizeof(T)) == 0;
#pragma unroll
      for (int s = 0; s < kSubtiles; ++s)
#pragma unroll
        for (int side = 0; side < 2; ++side) {  // columns col and col + side_columns
          const int e = 4 * j + 2 * side + half;
          const int64_t position = 2 * int64_t(tile.col_tile * kBlockN + warp_first_col + 64 * s + side_columns * side);
          const float low = select_register(swapped, second.value(s, e), first.value(s, e)) + row_bias[j][half];
          const float high = select_register(swapped, first.value(s, e), second.value(s, e)) + row_bias[j][half];
          if (aligned && position + 1 < p.out_length) {
            store_pair(row_out + position, low, high);
          } else {
            if (position < p.out_length) row_out[position] = from_float<T>(low);
            if (position + 1 < p.out_length) row_out[position + 1] = from_float<T>(high);
          }
        }
    });
  }

  // 16-bit (out_step 1), out rows of an even length, column pairs: the thread of even column col and
  // the one of col + 1 (lanes 4 apart) swap values so that each holds one row's two adjacent columns,
  // row first_row + 8j of pair j for the even thread and + 1 for the odd one, at columns col -
  // column_odd and the next: one 4-byte store. (Float stores its two rows a column: pairs are no gain
  // there; nor at an odd length, where every other row's pairs straddle 4 bytes: store_columns
  // stores each value where it is, without the swap, whose shuffle each store then waited for.)
  __device__ __forceinline__ void store_column_pairs(const GemmTile& tile, const Mma& mma, int64_t rows_left, T* first_row_out,
                                                     const T* first_row_bias) const {
    const int column_odd = (lane / 4) % 2;  // the parity of this thread's columns
    float stored_bias[kBlockM / 8];
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const int row = 8 * j + column_odd;  // from first_row
      stored_bias[j] = first_row_bias && row < rows_left ? to_float(first_row_bias[row]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const int row = 8 * j + column_odd;  // from first_row
      T* const row_out = first_row_out + int64_t(row) * p.out_length;
#pragma unroll
      for (int side = 0; side < 2 * kSubtiles; ++side) {
        const int s = side / 2, e = 4 * j + 2 * (side % 2);  // rows 8j and 8j + 1 at column col
        const float given = __shfl_xor_sync(0xffffffffu, select_register(column_odd, mma.acc[s][e], mma.acc[s][e + 1]), 4);
        const float first = (column_odd ? given : mma.acc[s][e]) + stored_bias[j];
        const float second = (column_odd ? mma.acc[s][e + 1] : given) + stored_bias[j];
        const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s + 8 * (side % 2) - column_odd;
        if (row >= rows_left) continue;
        if (col < p.out_length) store_pair(row_out + col, first, second);  // (col even, out_length even)
      }
    }
  }

  // 16-bit (out_step 1), out rows of an even length, permuted positions: a thread's two columns of a
  // subtile are adjacent (the first even), one 4-byte store a row
  __device__ __forceinline__ void store_adjacent_columns(const GemmTile& tile, const Mma& mma, int64_t rows_left, T* first_row_out,
                                                         const T* first_row_bias) const {
    float row_bias[kBlockM / 8][2];
    load_row_bias(rows_left, first_row_bias, row_bias);
    for_each_thread_row(rows_left, first_row_out, [&](int j, int half, T* row_out) {
#pragma unroll
      for (int s = 0; s < kSubtiles; ++s) {
        const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s;  // (even, and out_length even)
        if (col < p.out_length)
          store_pair(row_out + col, mma.acc[s][4 * j + half] + row_bias[j][half], mma.acc[s][4 * j + 2 + half] + row_bias[j][half]);
      }
    });
  }

  // Column col holds out positions col*out_step + [0, out_step): the accumulator at `phase`, and with
  // one out phase the bias at the others (no tap reaches them)
  __device__ __forceinline__ void store_columns(const GemmTile& tile, int phase, const Mma& mma, int64_t rows_left, T* first_row_out,
                                                const T* first_row_bias) const {
    float row_bias[kBlockM / 8][2];
    load_row_bias(rows_left, first_row_bias, row_bias);
    auto store_tile = [&](auto one_step) {
      // column col's positions of one out row: out_step 1 a store; 2 a pair store where aligned
      auto store_column = [&](T* row_out, int col, float value, float bias_value) {
        if constexpr (decltype(one_step)::value) {
          if (col < p.out_length) row_out[col] = from_float<T>(value);
        } else if (kForm == PipelineForm::kPairs && p.out_phases > 1) {  // (every phase reached: each by its own out phase)
          const int64_t position = int64_t(col) * p.out_step + phase;
          if (position < p.out_length) row_out[position] = from_float<T>(value);
        } else {
          const int64_t first = int64_t(col) * p.out_step;
          if (p.out_step == 2 && first + 1 < p.out_length && reinterpret_cast<uintptr_t>(row_out + first) % (2 * sizeof(T)) == 0) {
            store_pair(row_out + first, phase == 0 ? value : bias_value, phase == 0 ? bias_value : value);
          } else {
            for (int k = 0; k < p.out_step && first + k < p.out_length; ++k)
              row_out[first + k] = from_float<T>(k == phase ? value : bias_value);
          }
        }
      };
      for_each_thread_row(rows_left, first_row_out, [&](int j, int half, T* row_out) {
        const float bias_value = row_bias[j][half];
#pragma unroll
        for (int s = 0; s < kSubtiles; ++s) {
          const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s;
          store_column(row_out, col, mma.value(s, 4 * j + half) + bias_value, bias_value);
          store_column(row_out, col + side_columns, mma.value(s, 4 * j + 2 + half) + bias_value, bias_value);
        }
      });
    };
    if (p.out_step == 1) {
      store_tile(std::true_type{});
    } else {
      store_tile(std::false_type{});
    }
  }
};

}  // namespace convt::cuda
