// What every piece of grad_weight_wgmma_kernel shares (docs/design.md §5.3): the compile-time
// traits, the shared-memory layout and the block's tile with its tap group's geometry.
#pragma once

#include <type_traits>

#include "cuda/grad_weight_gemm.cuh"
#include "cuda/pipelined_gemm.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

constexpr int kWgmmaThreads = 128;  // one warpgroup

// Bytes of one x_s buffer: sizeof(T) / 2 halves (along positions) of kWgmmaBlockCi rows of 128 bytes,
// with the ones column kWgmmaOnesRows more rows (16-bit: one half)
template <typename T, bool kOnesColumn>
constexpr int kWgmmaXBytesOf = (kWgmmaBlockCi + (kOnesColumn ? kWgmmaOnesRows : 0)) * kGradWPositions * int(sizeof(T));

// The kernel's template parameters and what follows from them
template <typename T, int kTaps_, bool kSumsBias_, bool kMerged_, bool kPipelined_>
struct WgmmaWeightGradTraits {
  using Element = T;
  static constexpr int kTaps = kTaps_;
  static constexpr bool kSumsBias = kSumsBias_, kMerged = kMerged_, kPipelined = kPipelined_;
  static constexpr bool k16 = sizeof(T) == 2;
  using Kind = std::conditional_t<k16, T, Tf32>;
  // grad_bias by the ones column (16-bit) or by register sums in bias blocks (TF32): §5.4
  static constexpr bool kOnesColumn = kSumsBias && k16, kRegisterSums = kSumsBias && !k16;
  static constexpr int kXBytes = kWgmmaXBytesOf<T, kOnesColumn>, kHalfBytes = kWgmmaBlockCi * kWgmmaRowBytes;
  // x_s per buffer: pipelined, one for each consumer warpgroup (its 64 ci)
  static constexpr int kXPerBuffer = kPipelined ? 2 : 1;
  static constexpr int kChunk = 16 / int(sizeof(T));  // elements of a 16-byte gy copy
};

// Dynamic shared memory: `buffers` x_s buffers (x kXPerBuffer) first, so that their swizzle atoms
// stay aligned, then `buffers` gy_s buffers of gy_rows rows of gy_row elements (merged: a row per
// co), then (pipelined) the ring's mbarriers
template <class Tr>
struct WgmmaWeightGradSmem {
  using T = typename Tr::Element;
  int gy_row, gy_rows, buffers;  // buffers: two (double-buffered), or the ring's p.stages
  unsigned char* x_buffers;
  T* gy_buffers;
  __device__ __forceinline__ WgmmaWeightGradSmem(const WeightGradProblem& p, unsigned char* smem)
      : gy_row(Tr::kMerged ? p.window_row_elements : grad_w_window_row(p.window_row_elements, sizeof(T))),
        gy_rows(Tr::kMerged ? p.block_co : kWgmmaBlockCo),
        buffers(Tr::kPipelined ? p.stages : 2),
        x_buffers(smem),
        gy_buffers(reinterpret_cast<T*>(smem + buffers * Tr::kXPerBuffer * Tr::kXBytes)) {}
  __device__ __forceinline__ unsigned char* x_s(int index) const { return x_buffers + index * Tr::kXBytes; }
  __device__ __forceinline__ T* gy_s(int buffer) const { return gy_buffers + buffer * gy_rows * gy_row; }
  __device__ __forceinline__ uint64_t* barriers() const { return reinterpret_cast<uint64_t*>(gy_s(buffers)); }
};

// This thread's place: lane, warp of its warpgroup, and (pipelined) its consumer warpgroup, whose
// ci are 64 * wg past the tile's
struct WgmmaThreadPlace {
  int lane, warp, wg;
  template <bool kPipelined>
  __device__ __forceinline__ explicit WgmmaThreadPlace(std::bool_constant<kPipelined>)
      : lane(threadIdx.x % 32),
        warp(kPipelined ? threadIdx.x / 32 % 4 : threadIdx.x / 32),
        wg(kPipelined ? threadIdx.x / kWgmmaThreads : 0) {}
};

// The block's tile (WeightGradTile: group, ci and co tiles, slice, by blockIdx.x) with its tap
// group, and this thread's place in it (bases and members initialized in the order the kernel
// computed them before it was cut into pieces, which keeps its register allocation). A block with a tap group of `count` < kTaps taps computes
// tap 0 in the empty slots and does not write them, so that no branch lies between the wgmma of a
// k-step (§5.3).
template <class Tr>
struct WgmmaWeightGradTile : WgmmaThreadPlace, WeightGradTile {
  using T = typename Tr::Element;
  // A row a_row of the tile: its co, its phase r past each tap's k (merged: row co*s + r, else 0),
  // and as a row of unmerged sums its phase and the phase position of tap slot 0's first A value
  struct Row {
    int co, r, phase, shift_min;
  };
  const WeightGradProblem& p;
  int phase, count, shift_min, gy_positions, gy_elements;
  bool bias_block;   // adds grad_bias (§5.4): ci tile 0, warpgroup 0, the phase's first tap group
  // 16-bit, 3 taps at consecutive shifts, every row's window at the same parity (an even channel
  // stride; the form is chosen per lane, and wgmma needs the warpgroup converged): their A words are
  // shared (multiply's kPairs)
  bool consecutive;
  // gy rows go in 16-byte chunks from the window start's aligned-down address (gy_s row position
  // window_offset) where the plan allows (gy_copy_elements = kChunk: stride 1 or merged, contiguous
  // rows) and the item's chunks lie inside the rows; else element by element from position 0
  const Divider& gy_chunks_per_row;  // ceil((kChunk - 1 + gy_elements) / kChunk)
  int gy_chunks, gy_chunk_elements;

  // gy_rows: the tile's co rows (WgmmaWeightGradSmem's)
  __device__ __forceinline__ WgmmaWeightGradTile(const WeightGradProblem& problem, int gy_rows)
      : WgmmaThreadPlace(std::bool_constant<Tr::kPipelined>{}),
        WeightGradTile(problem, Tr::kXPerBuffer * kWgmmaBlockCi, gy_rows),
        p(problem),
        phase(p.group_phase[tap_group]),
        count(p.group_count[tap_group]),
        shift_min(p.group_shift_max[tap_group] - p.group_span[tap_group]),
        gy_positions(kGradWPositions + p.group_span[tap_group]),
        gy_elements(Tr::kMerged ? gy_positions * p.stride : gy_positions),  // of a window row
        bias_block(Tr::kSumsBias && ci_tile == 0 && wg == 0 && p.group_phase_index[tap_group] == 0),
        consecutive(consecutive_shifts()),
        gy_chunks_per_row(p.group_window_copies[tap_group]),
        gy_chunks(int(gy_chunks_per_row.divisor)),
        gy_chunk_elements(gy_chunks * Tr::kChunk) {}
  __device__ __forceinline__ bool consecutive_shifts() const {
    bool consecutive = !Tr::kMerged && Tr::k16 && Tr::kTaps == 3 && count == Tr::kTaps && p.gy_channel_stride % 2 == 0;
#pragma unroll
    for (int t = 1; t < Tr::kTaps; ++t) consecutive = consecutive && p.group_tap_shift[p.group_first[tap_group] + t] == shift_min + t;
    return consecutive;
  }
  __device__ __forceinline__ Row row(int a_row) const {
    if constexpr (Tr::kMerged) {
      const int co = a_row / p.stride, r = a_row % p.stride, past_origin = r - p.phase_origin;
      return past_origin < 0 ? Row{co, r, past_origin + p.stride, shift_min - 1} : Row{co, r, past_origin, shift_min};
    } else {
      return Row{a_row, 0, phase, shift_min};
    }
  }
  // The row element where the window of phase positions from m starts: m itself at stride 1
  // (strided windows go in chunks only merged)
  __device__ __forceinline__ int64_t window_start(int64_t first_position) const {
    return Tr::kMerged ? first_position * p.stride - p.phase_origin : first_position;
  }
  __device__ __forceinline__ bool chunked(int64_t first_element) const {
    return p.gy_copy_elements == Tr::kChunk && first_element >= Tr::kChunk - 1 && first_element + gy_chunk_elements <= p.length_out;
  }
  __device__ __forceinline__ int window_offset(const T* window, bool chunks) const {
    return chunks ? elements_past_16_bytes(window) : 0;
  }
};

// A thread's sums, three register arrays of the kernel: wgmma.cuh's d of each tap slot, grad_bias's
// register sums (TF32 bias blocks: rows co 16 * warp + lane / 4 and 8 more) and the ones column's
// accumulators (16-bit: slot 0's columns 64-71, column 64 the sums). The pieces get them by
// reference and index them only by constants after unrolling, so they stay in registers. (One
// struct holding the arrays compiled to more instructions than the three arrays.)
template <int kTaps>
struct WgmmaWeightGradAccumulators {
  float (&acc)[kTaps][kWgmmaBlockCi / 2];
  float (&bias_sums)[2];
  float (&ones_acc)[4];
};

}  // namespace convt::cuda
