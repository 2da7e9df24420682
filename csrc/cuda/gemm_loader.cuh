// Global -> shared pieces of the implicit GEMM (docs/design.md §3.3, §3.6): the asynchronous
// copies, implicit_gemm_kernel's loader (a step's x window and weight slots into one of two
// buffers, cp.async), and pipelined_gemm_kernel's producer (a ring of mbarrier stages filled by
// bulk copies or TMA boxes).
#pragma once

#include <type_traits>

#include "cuda/gemm_scheduler.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// ---- asynchronous copies -------------------------------------------------------------------------

// 4, 8 or 16 bytes global -> shared; the first `bytes` come from global, the rest is zero.
__device__ __forceinline__ void cp_async_4(void* shared, const void* global, int bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_8(void* shared, const void* global, int bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, int bytes = 16) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
// A copy of kSize bytes (16, 8 or 4), the first `bytes` of them from global
template <int kSize>
__device__ __forceinline__ void cp_async(void* shared, const void* global, int bytes) {
  if constexpr (kSize == 16) {
    cp_async_16(shared, global, bytes);
  } else if constexpr (kSize == 8) {
    cp_async_8(shared, global, bytes);
  } else {
    cp_async_4(shared, global, bytes);
  }
}
// `words` words global -> shared by the block, 16 bytes a thread at a time (16-byte aligned, words a
// multiple of 4): one shared address and one pointer stepped per copy
__device__ __forceinline__ void copy_words_async(uint32_t* shared, const uint32_t* global, int words) {
  unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared)) + threadIdx.x * 16;
  const uint32_t* from = global + threadIdx.x * 4;
  for (int v = threadIdx.x * 4; v < words; v += kGemmThreads * 4, to += kGemmThreads * 16, from += kGemmThreads * 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// ---- implicit_gemm_kernel: two buffers, cp.async -------------------------------------------------

// row_offsets (docs/design.md §3.3): whether a tile's windows, starting at position `first`, go in
// 16-byte chunks (a row's shift is elements_past_16_bytes of its window start)
template <typename T>
__device__ __forceinline__ bool chunked_rows(int first) {
  return first >= 16 / int(sizeof(T)) - 1;
}

// implicit_gemm_kernel's shared memory: the weight buffers first (swizzle atoms aligned; one when
// resident, else two, each weight_slots x slot_words), two x buffers of x_words, then y_s
template <typename T>
struct ImplicitGemmSmem {
  uint32_t* w_buffers;
  T* x_buffers;
  float* y_s;
  int x_buffer_elements;
  __device__ __forceinline__ ImplicitGemmSmem(uint32_t* smem, const GemmProblem& p) {
    const int weight_buffers = p.resident ? 1 : 2;
    w_buffers = smem;
    x_buffers = reinterpret_cast<T*>(smem + weight_buffers * p.weight_slots * p.slot_words);
    y_s = reinterpret_cast<float*>(smem + (weight_buffers * p.weight_slots * p.slot_words + 2 * p.x_words));
    x_buffer_elements = p.x_words * 4 / int(sizeof(T));
  }
};

// body(ch, copy) for this thread's copies of a step's x_s: the chunk_channels (merged channels:
// staged_rows) x row_copies copies spread over the whole block (the staging and the rounding pass
// walk the same ones)
template <Merge kMerge, typename Body>
__device__ __forceinline__ void for_each_x_copy(const GemmProblem& p, Body&& body) {
  // (a loop of its own: one loop with the bound chosen by kMerge changes other kernels' code)
  if constexpr (kMerge == Merge::kChannels) {
    for (int index = threadIdx.x; index < p.staged_rows * p.row_copies; index += kGemmThreads) {
      const auto q = p.div_row_copies.divmod(unsigned(index));
      body(int(q.div), int(q.mod));
    }
  } else {
    for (int index = threadIdx.x; index < p.chunk_channels * p.row_copies; index += kGemmThreads) {
      const auto q = p.div_row_copies.divmod(unsigned(index));
      body(int(q.div), int(q.mod));
    }
  }
}

// x_s of a step (docs/design.md §3.3): x_s[ch][pos] = in[n, ch, (col0 + first_offset - lead +
// pos)*in_step + in_phase], zero outside, by cp.async (16-bit single elements by synchronous loads),
// each thread its share of the copies (for_each_x_copy)
template <typename T, int kBlockN, bool kShiftedRows, Merge kMerge>
struct XWindowStager {
  const GemmProblem& p;
  const T* in;

  __device__ __forceinline__ void stage(const GemmTile& tile, const GemmStep& step, T* x_s) const {
    if constexpr (kMerge == Merge::kChannels) {
      stage_merged_channels(tile, step, x_s);
    } else if constexpr (kShiftedRows) {
      stage_shifted_rows(tile, step, x_s);
    } else {
      stage_rows(tile, step, x_s);
    }
  }

  // the column of x_s position 0, and the step's first channel row of `in`
  __device__ __forceinline__ int window_start(const GemmTile& tile) const { return tile.col_tile * kBlockN + p.first_offset - p.lead; }
  __device__ __forceinline__ const T* in_chunk(const GemmTile& tile, const GemmStep& step) const {
    const int64_t first_channel = int64_t(tile.g) * p.channels_per_group + problem_chunk(p, step.chunk) * p.chunk_channels;
    return in + tile.n * p.in_batch_stride + first_channel * p.in_channel_stride;
  }
  __device__ __forceinline__ bool channel_inside(const GemmStep& step, int ch) const {
    return problem_chunk(p, step.chunk) * p.chunk_channels + ch < p.channels_per_group;
  }
  __device__ __forceinline__ bool element_inside(const GemmStep& step, int ch, int position) const {
    return channel_inside(step, ch) && position >= 0 && position < p.in_length;
  }

  // Merged channels (docs/design.md §3.2): whole rows of `in`, 16-byte copies (copy_elements)
  __device__ __forceinline__ void stage_merged_channels(const GemmTile& tile, const GemmStep& step, T* x_s) const {
    constexpr int kChunk = 16 / int(sizeof(T));
    const int64_t group_rows = p.channels_per_group / p.channel_phases;  // rows of `in` a group has
    const int64_t first_row = problem_chunk(p, step.chunk) * p.staged_rows;  // of the group
    const T* in_rows = in + tile.n * p.in_batch_stride + (tile.g * group_rows + first_row) * p.in_channel_stride;
    const int first_position = (tile.col_tile * kBlockN + p.first_offset) * p.channel_phases - p.channel_origin - p.lead;
    for_each_x_copy<kMerge>(p, [&](int row, int copy) {
      const int position = first_position + copy * kChunk;  // (a multiple of kChunk: lead)
      const int inside = first_row + row < group_rows && position >= 0 ? max(0, min(kChunk, p.in_length - position)) : 0;
      const T* from = inside ? in_rows + row * p.in_channel_stride + position : in;
      cp_async<16>(x_s + row * p.x_row_elements + copy * kChunk, from, inside * int(sizeof(T)));
    });
  }

  // row_offsets (in_step 1, copy_elements 16 bytes' worth): each row from its window start rounded
  // down to 16 bytes, or element by element, unshifted, where the row start is within a chunk
  __device__ __forceinline__ void stage_shifted_rows(const GemmTile& tile, const GemmStep& step, T* x_s) const {
    constexpr int kChunk = 16 / int(sizeof(T));
    const int first = window_start(tile);
    const T* in_chunk = this->in_chunk(tile, step);
    if (chunked_rows<T>(first)) {
      for_each_x_copy<kMerge>(p, [&](int ch, int copy) {
        const int position = first - elements_past_16_bytes(in_chunk + ch * p.in_channel_stride + first) + copy * kChunk;
        const int inside = channel_inside(step, ch) ? max(0, min(kChunk, p.in_length - position)) : 0;
        const T* from = inside ? in_chunk + ch * p.in_channel_stride + position : in;
        cp_async<16>(x_s + ch * p.x_row_elements + copy * kChunk, from, inside * int(sizeof(T)));
      });
    } else {
      for_each_x_copy<kMerge>(p, [&](int ch, int copy) {
        T values[kChunk];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const int position = first + copy * kChunk + e;
          const bool inside = element_inside(step, ch, position);
          if constexpr (sizeof(T) == 2) {
            values[e] = inside ? in_chunk[ch * p.in_channel_stride + position] : from_float<T>(0.0f);
          } else {
            cp_async_4(x_s + ch * p.x_row_elements + copy * kChunk + e, inside ? in_chunk + ch * p.in_channel_stride + position : in,
                       inside ? 4 : 0);
          }
        }
        if constexpr (sizeof(T) == 2) {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) x_s[ch * p.x_row_elements + copy * kChunk + e] = values[e];
        }
      });
    }
  }

  // Rows by the widest copies (copy_elements) to which they are contiguous and aligned, or element
  // by element (in_step > 1, or rows not aligned): position pos of x_s reads (first + pos)*in_step + in_phase
  __device__ __forceinline__ void stage_rows(const GemmTile& tile, const GemmStep& step, T* x_s) const {
    const int first = window_start(tile);
    const int in_phase = p.in_phase_value[step.in_phase];
    const T* in_chunk = this->in_chunk(tile, step);
    auto element_position = [&](int pos) { return (first + pos) * p.in_step + in_phase; };
    if constexpr (sizeof(T) == 2) {
      if (p.copy_elements == 1) {
        // 16-bit elements have no asynchronous copy: synchronous loads, kLoadsInFlight of them issued
        // before their stores (not one load and its store at a time, each waiting its full latency).
        // A step's copies wait ceil(copies / (threads x kLoadsInFlight)) load latencies one after the
        // other (a 128-channel chunk of 136-position rows: 9 at 8, 17 at 4). Not 16: narrow-channel
        // forwards ran slower at 16 than at 4 or 8, for little more in grad_input (docs/perf/2026-12-07-untimed-patches.md)
        constexpr int kLoadsInFlight = 8;
        const int copies = p.chunk_channels * p.row_copies;
        for (int first_index = threadIdx.x; first_index < copies; first_index += kGemmThreads * kLoadsInFlight) {
          T values[kLoadsInFlight];
          int slots[kLoadsInFlight];
#pragma unroll
          for (int u = 0; u < kLoadsInFlight; ++u) {
            const int index = first_index + u * kGemmThreads;
            const auto q = p.div_row_copies.divmod(unsigned(index));
            const int ch = int(q.div), position = element_position(int(q.mod));
            const bool inside = index < copies && element_inside(step, ch, position);
            values[u] = inside ? in_chunk[ch * p.in_channel_stride + position * p.in_length_stride] : from_float<T>(0.0f);
            slots[u] = index < copies ? ch * p.x_row_elements + int(q.mod) : -1;
          }
#pragma unroll
          for (int u = 0; u < kLoadsInFlight; ++u)
            if (slots[u] >= 0) x_s[slots[u]] = values[u];
        }
        return;
      }
    }
    // in_step 1, contiguous aligned rows, `first` a multiple of copy_elements: copies of kBytes
    auto copy_vectors = [&](auto bytes) {
      constexpr int kBytes = decltype(bytes)::value, kElements = kBytes / int(sizeof(T));
      for_each_x_copy<kMerge>(p, [&](int ch, int copy) {
        const int position = first + copy * kElements;
        const int inside = channel_inside(step, ch) && position >= 0 ? max(0, min(kElements, p.in_length - position)) : 0;
        const T* from = inside ? in_chunk + ch * p.in_channel_stride + position : in;
        cp_async<kBytes>(x_s + ch * p.x_row_elements + copy * kElements, from, inside * int(sizeof(T)));
      });
    };
    const int copy_bytes = p.copy_elements * int(sizeof(T));
    if (copy_bytes == 16) {
      copy_vectors(std::integral_constant<int, 16>());
    } else if (copy_bytes == 8) {
      copy_vectors(std::integral_constant<int, 8>());
    } else if constexpr (sizeof(T) == 2) {  // pairs (single 16-bit elements: above)
      copy_vectors(std::integral_constant<int, 4>());
    } else {  // one float a copy
      for_each_x_copy<kMerge>(p, [&](int ch, int pos) {
        const int position = element_position(pos);
        const bool inside = element_inside(step, ch, position);
        const T* from = inside ? in_chunk + ch * p.in_channel_stride + position * p.in_length_stride : in;
        cp_async_4(x_s + ch * p.x_row_elements + pos, from, inside ? 4 : 0);
      });
    }
  }
};

// implicit_gemm_kernel's loader: stages a step, its x_s (XWindowStager) and unless resident the
// step's taps of A (consecutive slots of packed_w), into buffer `buffer`; the caller commits the
// cp.async group. Resident weights are loaded whole when a tile needs another one.
template <typename T, Math kMath, int kBlockN, bool kShiftedRows, Merge kMerge>
struct ImplicitGemmLoader {
  const GemmProblem& p;
  const uint32_t* packed_w;
  ImplicitGemmSmem<T> smem;
  XWindowStager<T, kBlockN, kShiftedRows, kMerge> x;
  int64_t tile_words;  // one (g, row_tile, chunk) of packed_w

  __device__ __forceinline__ ImplicitGemmLoader(const GemmProblem& problem, const T* in, const uint32_t* packed,
                                                const ImplicitGemmSmem<T>& buffers)
      : p(problem), packed_w(packed), smem(buffers), x{problem, in}, tile_words(int64_t(problem.taps) * problem.slot_words) {}

  __device__ __forceinline__ T* x_s(int buffer) const { return smem.x_buffers + buffer * smem.x_buffer_elements; }
  __device__ __forceinline__ const uint32_t* w_s(int buffer) const {
    return smem.w_buffers + (p.resident ? 0 : buffer * p.weight_slots * p.slot_words);
  }

  // Resident weights (docs/design.md §3.3): (re)loads every chunk and tap of the tile's (g,
  // row_tile) when the tile's weight is not the one held (resident_key: the GemmTile::weight_key of
  // the weight w_buffers holds, -1 for none), and waits for it
  __device__ __forceinline__ void load_resident_weight(const GemmTile& tile, int64_t& resident_key) const {
    if (p.resident && tile.weight_key() != resident_key) {
      const int64_t words = p.chunks * tile_words;
      const uint32_t* from = packed_w + tile.packed_index(p) * words;
      copy_words_async(smem.w_buffers, from, int(words));
      cp_async_commit();
      cp_async_wait<0>();
      resident_key = tile.weight_key();
    }
  }

  __device__ __forceinline__ void stage(const GemmTile& tile, const GemmStep& step, int buffer) const {
    if (!p.resident) {  // the step's taps are consecutive slots of packed_w
      const uint32_t* from = packed_w +
          (tile.packed_index(p) * p.chunks + step.chunk) * tile_words + step.first_tap * p.slot_words;
      uint32_t* to = smem.w_buffers + buffer * p.weight_slots * p.slot_words;
      const int words = (step.end_tap - step.first_tap) * p.slot_words;
      copy_words_async(to, from, words);
    }
    x.stage(tile, step, x_s(buffer));
  }

  // kTF32: rounds this thread's copies of x_s (landed: cp.async.wait_group) to TF32 in place, once
  // per step instead of at every fragment load (docs/design.md §7)
  __device__ __forceinline__ void round_x(int buffer) const {
    if constexpr (kMath == Math::kTF32) {
      float* x_s = this->x_s(buffer);
      auto round_copies = [&](auto elements) {  // copies of kElements floats, in one shared load and store
        constexpr int kElements = decltype(elements)::value;
        struct alignas(4 * kElements) Copy { float v[kElements]; };
        for_each_x_copy<kMerge>(p, [&](int ch, int copy) {
          Copy* values = reinterpret_cast<Copy*>(x_s + ch * p.x_row_elements + copy * kElements);
          Copy c = *values;
#pragma unroll
          for (int e = 0; e < kElements; ++e) c.v[e] = __uint_as_float(to_tf32(c.v[e]));
          *values = c;
        });
      };
      if (p.copy_elements == 4) {
        round_copies(std::integral_constant<int, 4>());
      } else if (p.copy_elements == 2) {
        round_copies(std::integral_constant<int, 2>());
      } else {
        round_copies(std::integral_constant<int, 1>());
      }
    }
  }
};

// ---- pipelined_gemm_kernel: the producer warpgroup and its ring of stages -------------------------

// One producer thread stages a row's window: `copied` elements (a multiple of 16 bytes) of `row` (of
// `length` elements, contiguous; nullptr: zeros) from position `start`, whose address is 16-byte
// aligned, to `to`; its whole 16-byte chunks inside the row by one bulk copy landing on `landed`
// (announced to it), the rest (row ends, positions outside the row) element by element, zero outside;
// a chunk wholly outside the row (every chunk of a nullptr row: the channels that pad a chunk past a
// narrow group's) by one zero store, without the per-element loads and bounds of a row's ends.
template <typename T>
__device__ __forceinline__ void stage_window(T* to, const T* row, int start, int length, int copied, uint64_t* landed) {
  constexpr int kChunk = 16 / int(sizeof(T));
  // elements [inside_begin, inside_end) of the window are positions of the row; chunks [bulk_begin,
  // bulk_end) of them are whole
  const int inside_begin = row ? min(max(-start, 0), copied) : 0;
  const int inside_end = row ? max(min(length - start, copied), inside_begin) : 0;
  const int bulk_begin = (inside_begin + kChunk - 1) / kChunk, bulk_end = max(inside_end / kChunk, bulk_begin);
  if (bulk_end > bulk_begin) {
    const uint32_t bytes = uint32_t(bulk_end - bulk_begin) * 16;
    mbarrier_expect_bytes(landed, bytes);
    bulk_copy_to_shared(to + bulk_begin * kChunk, row + start + bulk_begin * kChunk, bytes, landed);
  }
  auto write_chunk = [&](int c) {  // element by element, zero outside the row
    if (c * kChunk >= inside_end || (c + 1) * kChunk <= inside_begin) {
      *reinterpret_cast<uint4*>(to + c * kChunk) = make_uint4(0u, 0u, 0u, 0u);
      return;
    }
    T values[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      const int j = c * kChunk + e;
      values[e] = j >= inside_begin && j < inside_end ? row[start + j] : from_float<T>(0.0f);
    }
    *reinterpret_cast<uint4*>(to + c * kChunk) = *reinterpret_cast<const uint4*>(values);
  };
  for (int c = 0; c < bulk_begin; ++c) write_chunk(c);
  for (int c = bulk_end; c < copied / kChunk; ++c) write_chunk(c);
}

// pipelined_gemm_kernel's shared memory: `stages` stages of a step's weight slots (first: swizzle
// atoms aligned; weight_parts parts of taps x slot_words) and x_s (x_words), then each stage's
// `full` and `empty` mbarriers (docs/design.md §3.6)
template <typename T>
struct PipelineStages {
  int part_weight_words;   // one part (3xTF32: big or small) of a stage's A: weight_slots slots
  int stage_weight_words;  // every part
  uint32_t* w_stages;
  T* x_stages;
  uint64_t* full;
  uint64_t* empty;
  int x_stage_elements;
  int box_elements;  // tensor_rows: a consumer warpgroup's boxes (each channel phase's)
  int tap_box_elements;  // tap_boxes: one tap box (kTapBoxPositions x chunk_channels)
  int copied;        // elements of a staged row (whole 16-byte chunks)
  __device__ __forceinline__ PipelineStages(uint32_t* smem, const GemmProblem& p) {
    part_weight_words = p.weight_slots * p.slot_words;
    stage_weight_words = p.weight_parts * part_weight_words;
    w_stages = smem;
    x_stages = reinterpret_cast<T*>(smem + p.stages * stage_weight_words);
    full = reinterpret_cast<uint64_t*>(smem + p.stages * (stage_weight_words + p.x_words));
    empty = full + p.stages;
    x_stage_elements = p.x_words * 4 / int(sizeof(T));
    box_elements = p.map_row_phases * p.map_phase_elements;
    tap_box_elements = kTapBoxPositions * p.chunk_channels;
    copied = p.row_copies * p.copy_elements;
  }
  // `full` completes when the producer threads have arrived and every byte they announced has
  // landed; `empty` when every consumer warp has arrived. Thread 0; a block barrier follows.
  __device__ __forceinline__ void init_barriers(const GemmProblem& p) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < p.stages; ++s) {
        mbarrier_init(full + s, kPipelineProducerThreads);
        mbarrier_init(empty + s, kPipelineConsumerThreads / 32);
      }
      mbarrier_init_fence();
    }
  }
  __device__ __forceinline__ uint32_t* w_s(int stage) const { return w_stages + stage * stage_weight_words; }
  __device__ __forceinline__ T* x_s(int stage) const { return x_stages + stage * x_stage_elements; }
};

// Elements that the rows of channel phase `phase` (GemmPlan::map_row_phases) sit late in their x_s
// boxes: their super-row position past a 16-byte multiple (the box starts at that multiple)
template <typename T>
__device__ __forceinline__ int channel_phase_shift(const GemmProblem& p, int phase) {
  return phase * p.in_length % (16 / int(sizeof(T)));
}

// Whether a tile of a map of several channel phases reads past x's row ends, where a super row's
// box would hold the neighbouring rows: the producer stages it row by row instead (unrounded: TF32
// fragments round as they load)
template <int kBlockN>
__device__ __forceinline__ bool phases_row_by_row(const GemmProblem& p, int tile_col) {
  return p.tensor_rows && p.map_row_phases > 1 &&
         (tile_col + p.first_offset < 0 || tile_col + kBlockN - 1 + p.last_offset >= p.in_length);
}

// A position in the ring: the stage and the parity of its current mbarrier phase
struct PipelineState {
  int stage = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) stage = 0, parity ^= 1;
  }
};

// Staged row r of (tile, chunk): its row of `in` (nullptr past the group's rows) and the position
// of its window start; x_s element 0 is at the window start less its shift (elements past 16 bytes)
template <typename T, Merge kMerge, int kBlockN>
struct StagedRow {
  const T* row;
  int window;
  __device__ int shift() const { return row ? elements_past_16_bytes(row + window) : 0; }

  static __device__ __forceinline__ StagedRow of(const GemmProblem& p, const T* in, const GemmTile& tile, int chunk, int r) {
    if constexpr (kMerge == Merge::kChannels) {  // rows of `in` as they are (docs/design.md §3.2)
      const int64_t group_rows = p.channels_per_group / p.channel_phases, row = problem_chunk(p, chunk) * p.staged_rows + r;
      const int window = (tile.col_tile * kBlockN + p.first_offset) * p.channel_phases - p.channel_origin - p.lead;
      return StagedRow{row < group_rows ? in + tile.n * p.in_batch_stride + (tile.g * group_rows + row) * p.in_channel_stride
                                        : nullptr,
                       window};
    } else {
      const int64_t channel = problem_chunk(p, chunk) * p.chunk_channels + r;
      const int window = tile.col_tile * kBlockN + p.first_offset - p.lead;
      return StagedRow{channel < p.channels_per_group
                           ? in + tile.n * p.in_batch_stride + (tile.g * p.channels_per_group + channel) * p.in_channel_stride
                           : nullptr,
                       window};
    }
  }
};

// The producer warpgroup: walks the block's parts and their steps (chunks; kPairs: (pair, chunk),
// docs/design.md §3.6), and fills the ring's stages: the step's weight slots by one bulk copy (kPairs:
// one a part), x_s as a TMA box a tap and 64-column subtile (tap_boxes), as two TMA boxes
// (tensor_rows, one a consumer warpgroup: its columns and their halo; TF32 rounded by the copy), or
// row by row (stage_window), the rows dealt out over the four producer warps (a warp issues its bulk
// copies one lane at a time: one warp's copies alone starve the consumers).
template <typename T, Merge kMerge, int kBlockN, bool kPairs>
struct PipelinedProducer {
  const GemmProblem& p;
  const T* in;
  const uint32_t* packed_w;
  PipelineStages<T> stages;
  int lane;

  // A part's steps in the consumers' order: its out phases' pairs (runs of taps), each over every
  // chunk; the x_s of a chunk is the same for every pair (all of them read in phase value 0)
  __device__ __forceinline__ void run(const GemmScheduler& scheduler) const {
    PipelineState state;
    auto fill_pair = [&](const GemmTile& tile, int first_slot, int slots, ChunkRange chunks) {
      for (int chunk = chunks.begin; chunk < chunks.end; ++chunk) {
        mbarrier_wait(stages.empty + state.stage, state.parity ^ 1);
        fill(tile, first_slot, slots, chunk, state.stage);
        state.advance(p.stages);
      }
    };
    for (unsigned part = scheduler.first(); scheduler.has_part(part); part = scheduler.next(part)) {
      const GemmTile tile = scheduler.tile_of(part);
      const ChunkRange chunks = scheduler.chunks_of(part);
      if constexpr (kPairs) {  // the pairs of the part's out phases
        const auto phases = scheduler.out_phases_of(part);
        for (int pair = phases.begin * p.in_phases; pair < phases.end * p.in_phases; ++pair) {
          const int first_slot = p.pair_begin[pair], slots = p.pair_begin[pair + 1] - first_slot;
          if (slots > 0) fill_pair(tile, first_slot, slots, chunks);
        }
      } else {
        fill_pair(tile, 0, p.taps, chunks);
      }
    }
  }

  // Stage `stage` := slots [first_slot, first_slot + slots) of packed_w (a pair's taps) over chunk
  // `chunk` of `tile`; every producer thread arrives on its `full` barrier
  __device__ __forceinline__ void fill(const GemmTile& tile, int first_slot, int slots, int chunk, int stage) const {
    const int producer = threadIdx.x - kPipelineConsumerThreads;
    uint64_t* landed = stages.full + stage;
    if (producer == 0) {
      if constexpr (kPairs) {  // packed [part][slot]: each part's slots of the pair
        const uint32_t* chunk_w = packed_w + (tile.packed_index(p) * p.chunks + chunk) * p.weight_parts * p.taps * p.slot_words;
        const uint32_t part_bytes = uint32_t(slots * p.slot_words) * 4;
        mbarrier_expect_bytes(landed, p.weight_parts * part_bytes);
        for (int part = 0; part < p.weight_parts; ++part)
          bulk_copy_to_shared(stages.w_s(stage) + part * stages.part_weight_words,
                              chunk_w + (part * p.taps + first_slot) * p.slot_words, part_bytes, landed);
      } else {  // every slot of every part: the stage's weight
        const uint32_t bytes = uint32_t(stages.stage_weight_words) * 4;
        mbarrier_expect_bytes(landed, bytes);
        bulk_copy_to_shared(stages.w_s(stage), packed_w + (tile.packed_index(p) * p.chunks + chunk) * stages.stage_weight_words,
                            bytes, landed);
      }
    }
    T* x_s = stages.x_s(stage);
    const int tile_col = tile.col_tile * kBlockN;
    if (phases_row_by_row<kBlockN>(p, tile_col)) {
      // the boxes' layout row by row (each row's window from the same 16-byte boundary, zero outside
      // the row), box r / staged_rows's x_s row r % staged_rows, thread t the rows t, t + 128, ...
      const int phase_rows = p.staged_rows / p.map_row_phases;
      for (int r = lane * kPipelineProducerWarps + producer / 32; r < kPipelineConsumers * p.staged_rows; r += kPipelineProducerThreads) {
        const int box = r / p.staged_rows, phase = r % p.staged_rows / phase_rows, phase_row = r % p.staged_rows % phase_rows;
        // (boxes never merge channels: GemmPlan::tensor_rows needs channel_phases 1)
        const T* row = StagedRow<T, Merge::kNone, kBlockN>::of(p, in, tile, chunk, phase_row * p.map_row_phases + phase).row;
        const int window = tile_col + box * (kBlockN / 2) + p.first_offset - p.lead - channel_phase_shift<T>(p, phase);
        stage_window(x_s + box * stages.box_elements + phase * p.map_phase_elements + phase_row * p.x_row_elements, row, window,
                     p.in_length, p.x_row_elements, landed);
      }
    } else if (p.tap_boxes) {
      if (producer == 0) {
        // box (i, b): tap i's positions of the tile's 64-column subtile b (its columns + the tap's offset)
        constexpr int kBoxes = kBlockN / kTapBoxPositions;
        const int first_channel = int(tile.g * p.channels_per_group + problem_chunk(p, chunk) * p.chunk_channels);
        mbarrier_expect_bytes(landed, uint32_t(slots * kBoxes * stages.tap_box_elements * int(sizeof(T))));
        for (int i = 0; i < slots; ++i)
          for (int box = 0; box < kBoxes; ++box)
            tensor_copy_to_shared(x_s + (i * kBoxes + box) * stages.tap_box_elements, &p.in_map,
                                  tile_col + box * kTapBoxPositions + p.slot_offset[first_slot + i], first_channel, int(tile.n),
                                  landed);
      }
    } else if (p.position_rows) {
      if (producer == 0) {
        // a box a consumer warpgroup: its columns and their halo, positions x the chunk's channels
        const int first_channel = int(tile.g * p.channels_per_group + problem_chunk(p, chunk) * p.chunk_channels);
        mbarrier_expect_bytes(landed, uint32_t(kPipelineConsumers * stages.box_elements * int(sizeof(T))));
        for (int box = 0; box < kPipelineConsumers; ++box)
          tensor_copy_to_shared(x_s + box * stages.box_elements, &p.in_map, first_channel,
                                tile_col + box * (kBlockN / 2) + p.first_offset, int(tile.n), landed);
      }
    } else if (p.tensor_rows) {
      if (producer == 0) {
        // channel phase j's rows (every map_row_phases-th channel from the chunk's first) at super-row
        // position j * in_length + the window's, rounded down to 16 bytes (a box starts there: its
        // rows sit channel_phase_shift late), staged after the phases before it
        const int first_super_row = int((tile.g * p.channels_per_group + problem_chunk(p, chunk) * p.chunk_channels) / p.map_row_phases);
        mbarrier_expect_bytes(landed, uint32_t(kPipelineConsumers * p.staged_rows * p.x_row_elements * int(sizeof(T))));
        for (int box = 0; box < kPipelineConsumers; ++box)
          for (int phase = 0; phase < p.map_row_phases; ++phase)
            tensor_copy_to_shared(x_s + box * stages.box_elements + phase * p.map_phase_elements, &p.in_map,
                                  phase * p.in_length - channel_phase_shift<T>(p, phase) + tile_col + box * (kBlockN / 2) +
                                      p.first_offset - p.lead,
                                  first_super_row, int(tile.n), landed);
      }
    } else {
      // row r by lane r / 4 of warp r % 4
      for (int r = lane * kPipelineProducerWarps + producer / 32; r < p.staged_rows; r += kPipelineProducerThreads) {
        const auto row = StagedRow<T, kMerge, kBlockN>::of(p, in, tile, chunk, r);
        stage_window(x_s + r * p.x_row_elements, row.row, row.window - row.shift(), p.in_length, stages.copied, landed);
      }
    }
    fence_async_shared();  // these stores before later bulk copies into the stage
    mbarrier_arrive(landed);
  }
};

}  // namespace convt::cuda
