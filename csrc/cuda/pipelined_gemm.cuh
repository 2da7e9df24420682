// The warpgroup implicit GEMM with its copies taken off the MMA warps (sm_90a): the forward and
// grad_input problems of implicit_gemm.cuh whose every step reads one phase pair from contiguous
// rows in 16-byte chunks (stride 1, and strided problems with their phases merged into rows or
// channels), on warpgroup tiles of 128 rows x 128 or 256 columns, or 64 rows x 256 columns for
// groups of 33-64 rows (out^T = in^T A^T, as implicit_gemm.cuh's; each consumer warpgroup one or two
// 64-column subtiles, wgmma's N the tile's rows).
//
// A block is two consumer warpgroups and a producer warpgroup (which hands most of its registers to
// the consumers). The producer walks the block's tiles and steps (chunks of channels) and fills a
// ring of `stages` shared-memory stages, each one step's
//   w_s   the step's taps of A: one bulk copy of packed_w's consecutive slots
//   x_s   the step's staged rows of `in`: row r holds its window from the window start rounded down to
//         16 bytes (position start + j at element j; implicit_gemm.cuh's row_offsets), its whole
//         16-byte chunks inside the row by one bulk copy, the rest (row ends, positions outside the
//         row, rows past the group's channels) written by its producer thread element by element.
//         The rows are dealt out over the producer's four warps: a warp issues its bulk copies one
//         lane at a time, and one warp's 32 of them a step starved the consumers (H100, session 21:
//         hifigan_up0 TF32 forward 0.240 -> 0.200 ms with four).
// With tensor_rows (GemmProblem) x_s is instead two TMA boxes, one a consumer warpgroup, each its
// columns and their halo (TF32: rounded by the copy), both copied by producer thread 0.
// Stage s's `full` mbarrier completes when the 128 producer threads have arrived and every byte
// they announced has landed; the consumers wait for it, run the step's wgmma and arrive on its
// `empty` mbarrier (a warp each), after which the producer may refill it. TF32 x_s not copied by TMA
// is raw float32: the consumers round their fragments to TF32 as they load them. No block-wide
// barrier in the loop: the producer runs up to `stages` steps ahead, through the consumers'
// epilogue stores.
// 3xTF32 (128 x 128 tiles): w_s holds A's big TF32 parts and then its small parts (GemmProblem::
// weight_parts), the consumers split their raw float32 fragments of x_s in registers, and each k-step
// runs three wgmma, big x big into the accumulators and the two correction products into their own
// (implicit_gemm.cuh's Accumulator: an infinite or NaN main product keeps its value).
// The epilogue stores each accumulator where its row and column put it, plus bias, the bias of a
// thread's rows loaded before its first store, not one load latency a row (H100, session 21,
// forward kb64 TF32 2.03 -> 1.84 ms, 3xTF32 4.28 -> 3.93); 16-bit one out phase by column pairs,
// two adjacent columns of a row a store (session 22); one out phase of a strided forward (3xTF32,
// kb79: dilation a multiple of stride) writes the bias at the positions of the phases no tap
// reaches.
#pragma once

#include "cuda/implicit_gemm.cuh"

namespace convt::cuda {

constexpr int kPipelineConsumerThreads = 128 * kPipelineConsumers;
constexpr int kPipelineProducerWarps = 4, kPipelineProducerThreads = 32 * kPipelineProducerWarps;
constexpr int kPipelineThreads = kPipelineConsumerThreads + kPipelineProducerThreads;  // and the producer warpgroup
// Registers a thread: the producer warpgroup gives up most of its share to the consumers (an SM
// quarter's register file holds two consumer warps and one producer warp: 2 * 232 + 40 <= 512 a lane)
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

// One producer thread stages a row's window: `copied` elements (a multiple of 16 bytes) of `row` (of
// `length` elements, contiguous; nullptr: zeros) from position `start`, whose address is 16-byte
// aligned, to `to`; its whole 16-byte chunks inside the row by one bulk copy landing on `landed`
// (announced to it), the rest (row ends, positions outside the row) element by element, zero outside.
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

// condition ? a : b as a register select (a select of two elements of a register array may compile to
// a load from a selected address, which moves the whole array to local memory)
__device__ __forceinline__ float select_register(bool condition, float a, float b) {
  float chosen;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n selp.f32 %0, %1, %2, p;\n}" : "=f"(chosen) : "f"(a), "f"(b), "r"(int(condition)));
  return chosen;
}

// kBlockM rows (64 or 128) x kSubtiles 64-column subtiles per consumer warpgroup (1 or 2)
template <typename T, Math kMath, Merge kMerge, int kBlockM, int kSubtiles>
__global__ void __launch_bounds__(kPipelineThreads, 1)
    pipelined_gemm_kernel(const T* __restrict__ in, const uint32_t* __restrict__ packed_w, const T* __restrict__ bias,
                          T* __restrict__ out, const __grid_constant__ GemmProblem p) {
#if CONVT_WGMMA_AVAILABLE  // (sm_90a only: other archs get an empty kernel)
  constexpr bool k3xTF32 = kMath == Math::k3xTF32;
  static_assert(kBlockM == 64 || kBlockM == 128);
  static_assert(!k3xTF32 || kSubtiles * kBlockM <= 128);  // two accumulators a subtile
  constexpr int kBlockN = 128 * kSubtiles;  // columns of a tile
  extern __shared__ __align__(kMaxSwizzleAtomBytes) uint32_t smem[];  // weight slots first: swizzle atoms aligned
  const int part_weight_words = p.taps * p.slot_words;  // one part (3xTF32: big or small) of a step's A
  const int stage_weight_words = p.weight_parts * part_weight_words;  // one (g, row_tile, chunk) of packed_w
  uint32_t* w_stages = smem;
  T* x_stages = reinterpret_cast<T*>(smem + p.stages * stage_weight_words);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + p.stages * (stage_weight_words + p.x_words));
  uint64_t* empty = full + p.stages;
  const int x_stage_elements = p.x_words * 4 / int(sizeof(T));
  const int box_elements = p.staged_rows * p.x_row_elements;  // tensor_rows: a consumer warpgroup's box
  const int copied = p.row_copies * p.copy_elements;  // elements of a staged row (whole 16-byte chunks)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      mbarrier_init(full + s, kPipelineProducerThreads);        // the producer threads
      mbarrier_init(empty + s, kPipelineConsumerThreads / 32);  // the consumer warps
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  // Staged row r of (tile, chunk): its row of `in` (nullptr past the group's rows) and the position
  // of its window start; x_s element 0 is at the window start less its shift (elements past 16 bytes)
  struct StagedRow {
    const T* row;
    int window;
    __device__ int shift() const { return row ? elements_past_16_bytes(row + window) : 0; }
  };
  auto staged_row = [&](const GemmTile& tile, int chunk, int r) {
    if constexpr (kMerge == Merge::kChannels) {  // rows of `in` as they are (implicit_gemm.cuh)
      const int64_t group_rows = p.channels_per_group / p.channel_phases, row = int64_t(chunk) * p.staged_rows + r;
      const int window = (tile.col_tile * kBlockN + p.first_offset) * p.channel_phases - p.channel_origin - p.lead;
      return StagedRow{row < group_rows ? in + tile.n * p.in_batch_stride + (tile.g * group_rows + row) * p.in_channel_stride
                                        : nullptr,
                       window};
    } else {
      const int64_t channel = int64_t(chunk) * p.chunk_channels + r;
      const int window = tile.col_tile * kBlockN + p.first_offset - p.lead;
      return StagedRow{channel < p.channels_per_group
                           ? in + tile.n * p.in_batch_stride + (tile.g * p.channels_per_group + channel) * p.in_channel_stride
                           : nullptr,
                       window};
    }
  };

  if (warp >= kPipelineConsumerThreads / 32) {  // ---- the producer warpgroup ----
    set_max_registers<kProducerRegisters, false>();
    const int producer = threadIdx.x - kPipelineConsumerThreads;
    int stage = 0;
    uint32_t parity = 0;
    for (unsigned t = blockIdx.x; t < p.tiles; t += gridDim.x) {
      const GemmTile tile(t, p);
      for (int chunk = 0; chunk < p.chunks; ++chunk) {
        mbarrier_wait(empty + stage, parity ^ 1);
        uint64_t* landed = full + stage;
        if (producer == 0) {
          const uint32_t bytes = uint32_t(stage_weight_words) * 4;
          mbarrier_expect_bytes(landed, bytes);
          bulk_copy_to_shared(w_stages + stage * stage_weight_words,
                              packed_w + ((int64_t(tile.g) * p.row_tiles + tile.row_tile) * p.chunks + chunk) * stage_weight_words,
                              bytes, landed);
        }
        T* x_s = x_stages + stage * x_stage_elements;
        if (p.tensor_rows) {
          if (producer == 0) {
            mbarrier_expect_bytes(landed, uint32_t(p.x_words) * 4);
            for (int box = 0; box < kPipelineConsumers; ++box)
              tensor_copy_to_shared(x_s + box * box_elements, &p.in_map, tile.col_tile * kBlockN + box * (kBlockN / 2) + p.first_offset - p.lead,
                                    int(tile.g * p.channels_per_group) + chunk * p.chunk_channels, int(tile.n), landed);
          }
        } else {
          // row r by lane r / 4 of warp r % 4 (the header comment)
          for (int r = lane * kPipelineProducerWarps + producer / 32; r < p.staged_rows; r += kPipelineProducerThreads) {
            const StagedRow row = staged_row(tile, chunk, r);
            stage_window(x_s + r * p.x_row_elements, row.row, row.window - row.shift(), p.in_length, copied, landed);
          }
        }
        fence_async_shared();  // these stores before later bulk copies into the stage
        mbarrier_arrive(landed);
        if (++stage == p.stages) stage = 0, parity ^= 1;
      }
    }
    return;
  }

  set_max_registers<kConsumerRegisters, true>();
  // ---- the consumer warpgroups: warp w computes columns (w / 4) * 64 * kSubtiles + 64 s + (w % 4) * 16 +
  // lane / 4 (+ 8) in subtile s ----
  const int warp_first_col = (warp / 4) * 64 * kSubtiles + (warp % 4) * 16 + lane / 4;
  float acc[kSubtiles][kBlockM / 2];         // wgmma.cuh's d, per subtile (3xTF32: big x big)
  float correction[kSubtiles][kBlockM / 2];  // 3xTF32: the correction products (unused otherwise)
  uint32_t sets[2][2 * kSubtiles][4];        // two sets of A fragments (run_tap; 3xTF32: big parts)
  uint32_t small_sets[2][2 * kSubtiles][4];  // 3xTF32: their small parts (unused otherwise)
  // this lane's x_s rows of a k-step: channels c and c + 4 (16-bit: 2c, 2c + 1, 2c + 8 and 2c + 9)
  const int low_row = kMath == Math::k16Bit ? 2 * (lane % 4) : lane % 4;
  // merged channels: where this lane's channels sit in x_s (as channel (co, r): co*x_row_elements + r)
  int phase_low = 0, phase_high = 0;
  if constexpr (kMerge == Merge::kChannels) {
    const int high_row = low_row + (kMath == Math::k16Bit ? 8 : 4);
    phase_low = low_row / p.channel_phases * p.x_row_elements + low_row % p.channel_phases;
    phase_high = high_row / p.channel_phases * p.x_row_elements + high_row % p.channel_phases;
  }
  // TF32 x_s not rounded by its copy (no tensor_rows): the fragments round to TF32 as they load
  // (in place of a rounding pass over x_s and a barrier of the consumers)
  const bool round_fragments = kMath == Math::kTF32 && !p.tensor_rows;
  int stage = 0;
  uint32_t parity = 0;
  for (unsigned t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const GemmTile tile(t, p);
#pragma unroll
    for (int s = 0; s < kSubtiles; ++s)
#pragma unroll
      for (int e = 0; e < kBlockM / 2; ++e) acc[s][e] = correction[s][e] = 0.0f;
    // The shifts of this lane's rows, the same in every chunk (chunks are whole multiples of the 4
    // (float) or 8 (16-bit) rows after which shifts repeat; rows c and c + 4 (16-bit: 2c and 2c + 8) share one)
    const int shift_low = p.tensor_rows ? 0 : staged_row(tile, 0, low_row).shift();
    const int shift_high = p.tensor_rows ? 0 : staged_row(tile, 0, low_row + 1).shift();
    for (int chunk = 0; chunk < p.chunks; ++chunk) {
      mbarrier_wait(full + stage, parity);
      T* x_s = x_stages + stage * x_stage_elements;
      const uint32_t* w_s = w_stages + stage * stage_weight_words;
      for (int t = 0; t < p.taps; ++t) {
        // in^T fragments of this warp's 16 columns, then the k-steps of wgmma on the slot's A^T, in two
        // groups of half the k-steps: one group's fragments load while the other's wgmma runs
        // (implicit_gemm_kernel's run_tap)
        auto run_tap = [&](auto ksteps) {
          constexpr int kKsteps = decltype(ksteps)::value, kHalf = kKsteps / 2;
          using Kind = std::conditional_t<std::is_same_v<T, float>, Tf32, T>;
          constexpr int kKstepChannels = kMath == Math::k16Bit ? 16 : 8;
          const T* x_tap;
          if constexpr (kMerge == Merge::kChannels) {
            x_tap = x_s + (warp_first_col + p.tap_offset[t] - p.first_offset) * p.channel_phases + p.lead;
          } else if (p.tensor_rows) {  // this warpgroup's box, from its first column
            x_tap = x_s + (warp / 4) * box_elements + warp_first_col - (warp / 4) * (kBlockN / 2) + p.tap_offset[t] - p.first_offset +
                    p.lead;
          } else {
            x_tap = x_s + warp_first_col + p.tap_offset[t] - p.first_offset + p.lead;
          }
          const char* w_slot = reinterpret_cast<const char*>(w_s + t * p.slot_words);
          const char* w_small_slot = w_slot + part_weight_words * 4;  // 3xTF32
          uint32_t (&half_sets)[2][kHalf][kSubtiles][4] = *reinterpret_cast<uint32_t(*)[2][kHalf][kSubtiles][4]>(&sets[0][0][0]);
          uint32_t (&small_half_sets)[2][kHalf][kSubtiles][4] =
              *reinterpret_cast<uint32_t(*)[2][kHalf][kSubtiles][4]>(&small_sets[0][0][0]);
          auto fence_accumulators = [&] {
#pragma unroll
            for (int s = 0; s < kSubtiles; ++s) {
              wgmma_fence_accumulators(acc[s]);
              if constexpr (k3xTF32) wgmma_fence_accumulators(correction[s]);
            }
          };
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            uint32_t (&a)[kHalf][kSubtiles][4] = half_sets[half];
            uint32_t (&a_small)[kHalf][kSubtiles][4] = small_half_sets[half];
#pragma unroll
            for (int k = 0; k < kHalf; ++k)
#pragma unroll
              for (int s = 0; s < kSubtiles; ++s) {
                uint32_t low[2], high[2];  // columns g and g + 8
                if constexpr (kMerge == Merge::kChannels) {
                  const T* x_kstep = x_tap + s * 64 * p.channel_phases +
                                     (half * kHalf + k) * kKstepChannels / p.channel_phases * p.x_row_elements;
                  load_b_merged<T, kMath>(low, x_kstep, phase_low, phase_high);
                  load_b_merged<T, kMath>(high, x_kstep + 8 * p.channel_phases, phase_low, phase_high);
                } else {
                  const T* x_kstep = x_tap + s * 64 + (half * kHalf + k) * kKstepChannels * p.x_row_elements;
                  load_b<T, kMath>(low, x_kstep, p.x_row_elements, lane % 4, shift_low, shift_high);
                  load_b<T, kMath>(high, x_kstep + 8, p.x_row_elements, lane % 4, shift_low, shift_high);
                }
                a[k][s][0] = low[0], a[k][s][1] = high[0], a[k][s][2] = low[1], a[k][s][3] = high[1];
                if constexpr (kMath == Math::kTF32) {
                  if (round_fragments) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[k][s][e] = to_tf32(__uint_as_float(a[k][s][e]));
                  }
                }
                if constexpr (k3xTF32) {
                  const uint32_t raw[4] = {a[k][s][0], a[k][s][1], a[k][s][2], a[k][s][3]};
                  split_tf32(raw, a[k][s], a_small[k][s]);
                  wgmma_fence_operand(a_small[k][s]);
                }
                wgmma_fence_operand(a[k][s]);
              }
            fence_accumulators();
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < kHalf; ++k) {
              const uint64_t b = swizzled_b_descriptor<kKsteps * 32>(w_slot + (half * kHalf + k) * 32);
#pragma unroll
              for (int s = 0; s < kSubtiles; ++s) wgmma_kstep<Kind, kBlockM>(acc[s], a[k][s], b);
              if constexpr (k3xTF32) {  // small x big and big x small
                const uint64_t b_small = swizzled_b_descriptor<kKsteps * 32>(w_small_slot + (half * kHalf + k) * 32);
#pragma unroll
                for (int s = 0; s < kSubtiles; ++s) {
                  wgmma_kstep<Kind, kBlockM>(correction[s], a_small[k][s], b);
                  wgmma_kstep<Kind, kBlockM>(correction[s], a[k][s], b_small);
                }
              }
            }
            wgmma_commit();
            fence_accumulators();
            wgmma_wait<1>();  // the group before is done: the other set may load
#pragma unroll
            for (int k = 0; k < kHalf; ++k)
#pragma unroll
              for (int s = 0; s < kSubtiles; ++s) {
                wgmma_fence_operand(half_sets[half ^ 1][k][s]);
                if constexpr (k3xTF32) wgmma_fence_operand(small_half_sets[half ^ 1][k][s]);
              }
          }
        };
        if (p.ksteps == 4) {  // 2 or 4
          run_tap(std::integral_constant<int, 4>());
        } else {
          run_tap(std::integral_constant<int, 2>());
        }
      }
      wgmma_wait<0>();  // the stage's last group: then its w_s and x_s are free
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int f = 0; f < 2 * kSubtiles; ++f) {
          wgmma_fence_operand(sets[h][f]);
          if constexpr (k3xTF32) wgmma_fence_operand(small_sets[h][f]);
        }
#pragma unroll
      for (int s = 0; s < kSubtiles; ++s) {
        wgmma_fence_accumulators(acc[s]);
        if constexpr (k3xTF32) wgmma_fence_accumulators(correction[s]);
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(empty + stage);
      if (++stage == p.stages) stage = 0, parity ^= 1;
    }

    // ---- epilogue: acc[s][4j + e] is row first_row + 8j + e % 2, column col(s) + 8 * (e / 2) ----
    auto result = [&](int s, int e) {  // 3xTF32: Accumulator::value of implicit_gemm.cuh
      if constexpr (k3xTF32) {
        return isfinite(acc[s][e]) ? acc[s][e] + correction[s][e] : acc[s][e];
      } else {
        return acc[s][e];
      }
    };
    const int first_row = tile.row_tile * kBlockM + 2 * (lane % 4);
    if constexpr (kMerge == Merge::kRows) {
      // Row R is out row R / row_phases at position column*row_phases + R % row_phases - phase_origin,
      // so each even row and the next are adjacent positions of one out row (a pair store where
      // aligned) unless the even row is a last phase.
      const int64_t group_rows = p.rows_per_group / p.row_phases;  // out rows of a group
      T* const group_out = out + (tile.n * p.groups + tile.g) * group_rows * p.out_length;
      auto bias_at = [&](int out_row) { return bias ? to_float(bias[int64_t(tile.g) * group_rows + out_row]) : 0.0f; };
      auto store = [&](int out_row, int position, float value) {
        if (position >= 0 && position < p.out_length) group_out[int64_t(out_row) * p.out_length + position] = from_float<T>(value);
      };
      // the bias of this thread's rows and the next ones, loaded before any store (one load latency,
      // not one a row)
      float row_bias[kBlockM / 8], next_row_bias[kBlockM / 8];
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const int row = first_row + 8 * j;
        const int out_row = int(p.div_row_phases.div(unsigned(row))), next_out_row = int(p.div_row_phases.div(unsigned(row + 1)));
        row_bias[j] = row < p.rows_per_group ? bias_at(out_row) : 0.0f;
        next_row_bias[j] = row + 1 < p.rows_per_group ? bias_at(next_out_row) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const int row = first_row + 8 * j;
        if (row >= p.rows_per_group) continue;
        const auto q = p.div_row_phases.divmod(unsigned(row));
        const int out_row = int(q.div), phase = int(q.mod);
        const bool adjacent = phase + 1 < p.row_phases;  // row + 1: the next position of the same out row
        const bool next_inside = row + 1 < p.rows_per_group;
        const float bias_value = row_bias[j], next_bias = next_row_bias[j];
#pragma unroll
        for (int side = 0; side < 2 * kSubtiles; ++side) {
          const int s = side / 2, column = tile.col_tile * kBlockN + warp_first_col + 64 * s + 8 * (side % 2);
          const int position = column * p.row_phases + phase - p.phase_origin;
          const float first = result(s, 4 * j + 2 * (side % 2)) + bias_value;
          const float second = result(s, 4 * j + 2 * (side % 2) + 1) + next_bias;
          if (!adjacent) {
            store(out_row, position, first);
            if (next_inside) store(out_row + 1, column * p.row_phases - p.phase_origin, second);
          } else if (p.out_length % 2 == 0 && position % 2 == 0 && position >= 0 && position + 1 < p.out_length) {
            store_pair(group_out + int64_t(out_row) * p.out_length + position, first, second);
          } else {
            store(out_row, position, first);
            store(out_row, position + 1, second);
          }
        }
      }
    } else {
      // One out phase: column col holds out positions col*out_step + [0, out_step), the accumulator
      // at its phase and the bias at the others (no tap reaches them). Row pointers and bounds from
      // this thread's first row (64-bit math once).
      const int64_t rows_left = p.rows_per_group - first_row;
      T* const first_row_out = out + ((tile.n * p.groups + tile.g) * p.rows_per_group + first_row) * p.out_length;
      const T* const first_row_bias = bias ? bias + tile.g * p.rows_per_group + first_row : nullptr;
      if constexpr (sizeof(T) == 2) {
        // 16-bit (out_step 1: strided phases are 3xTF32's), column pairs: the thread of even column
        // col and the one of col + 1 (lanes 4 apart) swap values so that each holds one row's two
        // adjacent columns, row first_row + 8j of pair j for the even thread and + 1 for the odd one,
        // at columns col - column_odd and the next: one 4-byte store where out rows have an even
        // length; the bias of the rows it stores loaded before its first store. (Float stores its
        // two rows a column: pairs lost there. H100, session 22, forward ms: kb74 bf16 0.599 ->
        // 0.543, kb64 1.401 -> 1.359; kb64 TF32 1.849 -> 2.342.)
        const int column_odd = (lane / 4) % 2;  // the parity of this thread's columns
        float stored_bias[kBlockM / 8];
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
          const int row = 8 * j + column_odd;  // from first_row
          stored_bias[j] = first_row_bias && row < rows_left ? to_float(first_row_bias[row]) : 0.0f;
        }
        auto store_pairs = [&](auto even_length) {
#pragma unroll
          for (int j = 0; j < kBlockM / 8; ++j) {
            const int row = 8 * j + column_odd;  // from first_row
            T* const row_out = first_row_out + int64_t(row) * p.out_length;
#pragma unroll
            for (int side = 0; side < 2 * kSubtiles; ++side) {
              const int s = side / 2, e = 4 * j + 2 * (side % 2);  // rows 8j and 8j + 1 at column col
              const float given = __shfl_xor_sync(0xffffffffu, select_register(column_odd, acc[s][e], acc[s][e + 1]), 4);
              const float first = (column_odd ? given : acc[s][e]) + stored_bias[j];
              const float second = (column_odd ? acc[s][e + 1] : given) + stored_bias[j];
              const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s + 8 * (side % 2) - column_odd;
              if (row >= rows_left) continue;
              if constexpr (decltype(even_length)::value) {
                if (col + 1 < p.out_length) {
                  store_pair(row_out + col, first, second);
                } else if (col < p.out_length) {
                  row_out[col] = from_float<T>(first);
                }
              } else {
                if (col < p.out_length) row_out[col] = from_float<T>(first);
                if (col + 1 < p.out_length) row_out[col + 1] = from_float<T>(second);
              }
            }
          }
        };
        if (p.out_length % 2 == 0) {
          store_pairs(std::true_type{});
        } else {
          store_pairs(std::false_type{});
        }
      } else {
        const int phase = p.out_phase_value[0];
        // the bias of this thread's rows, loaded before any store (one load latency, not one a row)
        float row_bias[kBlockM / 8][2];
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = 8 * j + half;  // from first_row
            row_bias[j][half] = first_row_bias && row < rows_left ? to_float(first_row_bias[row]) : 0.0f;
          }
        auto store_tile = [&](auto one_step) {
          // column col's positions of one out row: out_step 1 a store; 2 a pair store where aligned
          auto store_column = [&](T* row_out, int col, float value, float bias_value) {
            if constexpr (decltype(one_step)::value) {
              if (col < p.out_length) row_out[col] = from_float<T>(value);
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
#pragma unroll
          for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = 8 * j + half;  // from first_row
              if (row >= rows_left) continue;
              const float bias_value = row_bias[j][half];
              T* const row_out = first_row_out + int64_t(row) * p.out_length;
#pragma unroll
              for (int s = 0; s < kSubtiles; ++s) {
                const int col = tile.col_tile * kBlockN + warp_first_col + 64 * s;
                store_column(row_out, col, result(s, 4 * j + half) + bias_value, bias_value);
                store_column(row_out, col + 8, result(s, 4 * j + 2 + half) + bias_value, bias_value);
              }
            }
        };
        if (p.out_step == 1) {
          store_tile(std::true_type{});
        } else {
          store_tile(std::false_type{});
        }
      }
    }
  }
#endif
}

}  // namespace convt::cuda
