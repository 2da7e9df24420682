// The loaders of grad_weight_wgmma_kernel (docs/design.md §5.3): global -> shared. Per item (n,
// chunk of kGradWPositions x positions from i0) they stage
//   x_s[ci][q]             x[n, ci, i0 + q]                                 q in [0, kGradWPositions)
//   gy_s[co][offset + q]   gy[n, co, (i0 + shift_min + q)*stride + phase]   q in [0, kGradWPositions + span)
// (merged: each co's whole window, gy_s[co][offset + e] = gy[n, co, (i0 + shift_min)*s - phase_origin
// + e]), zero outside the tensors, in the input's type: x_s as wgmma's B (K-major rows of 128 bytes,
// swizzled: wgmma.cuh; float rows are two such halves), gy_s in padded rows, each window at its row's
// offset (0, or the window start's misalignment where 16-byte chunks copy it).
//  - WgmmaWeightGradLoader: the one-warpgroup tiles, double-buffered: every thread's cp.async copies,
//    and TF32's pass rounding its own landed copies in place;
//  - WgmmaWeightGradProducer: the pipelined tiles' producer warpgroup: x_s by TMA boxes of p.x_map
//    (float as TFLOAT32: the copy rounds to nearest), gy_s by every producer thread's cp.async
//    chunks, or a lane a row (stage_window) where an item's windows reach past a row's ends.
#pragma once

#include "cuda/grad_weight_wgmma_scheduler.cuh"
#include "cuda/grad_weight_wgmma_tile.cuh"

namespace convt::cuda {

template <class Tr>
struct WgmmaWeightGradLoader {
  using T = typename Tr::Element;
  static constexpr int kChunk = Tr::kChunk;
  const WeightGradProblem& p;
  const WgmmaWeightGradTile<Tr>& tile;
  const WgmmaWeightGradSmem<Tr>& smem;
  const T* x;
  const T* gy;

  // Item `item` into buffer `buffer`: x in vector copies (a thread keeps its column q and steps
  // through the rows) or element by element with a warp per row and lanes along positions; gy in
  // chunks spread over the block or element by element. The visitors get the shared slot, the source, for vector copies
  // the vector size, and how many elements lie inside (or whether the element does); the same walk
  // serves the TF32 pass over this thread's landed copies. The loops stay rolled (unrolled, the
  // addresses they hoist out of the item loop cost registers). gy_copies false: x's copies only.
  // Float's single elements go by asynchronous copies, one at a time (element_copy); 16-bit ones are
  // synchronous loads, so they go in batches whose loads are all in flight before their stores
  // (element_copies(count, copy_of): an std::integral_constant count, copy_of(u) -> ElementCopy),
  // kRowsInFlight rows of x, kElementsInFlight of a merged gy row. (An unmerged gy row's four rows
  // at a time as one batch ran slower than as single copies, which the compiler already overlaps.)
  static constexpr int kRowsInFlight = 4, kElementsInFlight = 8;
  template <typename VectorCopy, typename OneElement, typename ElementBatch>
  __device__ __forceinline__ void for_each_copy(int64_t item, int buffer, VectorCopy&& vector_copy, OneElement&& element_copy,
                                                ElementBatch&& element_copies, bool gy_copies) const {
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t n = row.div, i0 = int64_t(row.mod) * kGradWPositions;
    unsigned char* x_s = smem.x_s(buffer);
    // x_s element (ci, q): byte b = q * sizeof(T) of the row lies in half b / 128, at 16-byte chunk
    // (b % 128) / 16 swizzled by the row's place in its atom of 8 (wgmma.cuh). (A local lambda: as a
    // member function the swizzle's arithmetic compiled differently.)
    auto x_slot = [&](unsigned char* x_s, int ci, int q) {
      const int byte = q * int(sizeof(T)), in_row = byte % kWgmmaRowBytes;
      return reinterpret_cast<T*>(x_s + byte / kWgmmaRowBytes * Tr::kHalfBytes + ci * kWgmmaRowBytes +
                                  ((in_row / 16) ^ swizzle_of_row(ci % 8, kWgmmaRowBytes)) * 16 + in_row % 16);
    };
    const T* x_n = x + n * p.x_batch_stride + tile.first_ci * p.x_channel_stride;
    if (p.x_copy_elements > 1) {  // i0 is a multiple of every vector size: a copy stays in one 16-byte chunk
      with_copy_size<T>(p.x_copy_elements, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value, kVectorsPerRow = kGradWPositions / kVector;
        constexpr int kRowsApart = kWgmmaThreads / kVectorsPerRow;  // 16-byte copies: 8 or 16, the same swizzle
        const int q = threadIdx.x % kVectorsPerRow * kVector, first_ci = threadIdx.x / kVectorsPerRow;
        const int inside_row = elements_inside(p.length_in - (i0 + q), kVector);
        T* const first_slot = x_slot(x_s, first_ci, q);
        const T* from = x_n + first_ci * p.x_channel_stride + i0 + q;
#pragma unroll 1
        for (int ci = first_ci; ci < kWgmmaBlockCi; ci += kRowsApart, from += kRowsApart * p.x_channel_stride) {
          const int inside = ci < tile.ci_count ? inside_row : 0;
          T* const slot = kRowsApart % 8 == 0 ? first_slot + (ci - first_ci) * (kWgmmaRowBytes / int(sizeof(T)))
                                              : x_slot(x_s, ci, q);
          vector_copy(slot, inside ? from : x, vector, inside);
        }
      });
    } else if constexpr (Tr::k16) {
      constexpr int kWarps = kWgmmaThreads / 32, kLanePositions = kGradWPositions / 32;
      static_assert(kWgmmaBlockCi % (kWarps * kRowsInFlight) == 0, "whole batches of rows");
#pragma unroll 1
      for (int first_ci = tile.warp; first_ci < kWgmmaBlockCi; first_ci += kWarps * kRowsInFlight) {
        element_copies(std::integral_constant<int, kRowsInFlight * kLanePositions>{}, [&](int u) {
          const int ci = first_ci + u / kLanePositions * kWarps, q = tile.lane + u % kLanePositions * 32;
          const int64_t i = i0 + q;
          return ElementCopy<T>{x_slot(x_s, ci, q), x_n + ci * p.x_channel_stride + i * p.x_length_stride,
                                ci < tile.ci_count && i < p.length_in};
        });
      }
    } else {
#pragma unroll 1
      for (int ci = tile.warp; ci < kWgmmaBlockCi; ci += kWgmmaThreads / 32) {
        for (int q = tile.lane; q < kGradWPositions; q += 32) {
          const int64_t i = i0 + q;
          element_copy(x_slot(x_s, ci, q), x_n + ci * p.x_channel_stride + i * p.x_length_stride,
                       ci < tile.ci_count && i < p.length_in);
        }
      }
    }
    if (!gy_copies) return;
    T* gy_s = smem.gy_s(buffer);
    const T* gy_n = gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride;
    const int64_t first_position = i0 + tile.shift_min, first_element = tile.window_start(first_position);
    if (tile.chunked(first_element)) {  // (rows past co_count: zeros, from row 0's first chunk)
      // a walk over the 64 x gy_chunks chunks: this thread's first (row, chunk), and the step to the
      // next one, kWgmmaThreads chunks on (no division in the loop; computed per item: held across
      // items, the four values cost the 3-tap kernels stack)
      const auto first_chunk = tile.gy_chunks_per_row.divmod(threadIdx.x), step = tile.gy_chunks_per_row.divmod(kWgmmaThreads);
      const int rows_step = int(step.div), chunks_step = int(step.mod);
      int co = int(first_chunk.div), chunk = int(first_chunk.mod);
#pragma unroll 1
      while (co < smem.gy_rows) {
        const int inside = co < tile.co_count ? kChunk : 0;
        const T* window = gy_n + (inside ? co : 0) * p.gy_channel_stride + first_element;
        vector_copy(gy_s + co * smem.gy_row + chunk * kChunk, window - tile.window_offset(window, true) + chunk * kChunk,
                    std::integral_constant<int, kChunk>{}, inside);
        co += rows_step, chunk += chunks_step;
        if (chunk >= tile.gy_chunks) chunk -= tile.gy_chunks, ++co;
      }
    } else if constexpr (Tr::kMerged && Tr::k16) {  // a warp per row
      constexpr int kWarps = kWgmmaThreads / 32;
      for (int co = tile.warp; co < smem.gy_rows; co += kWarps) {
        for (int first = tile.lane; first < tile.gy_elements; first += 32 * kElementsInFlight) {
          element_copies(std::integral_constant<int, kElementsInFlight>{}, [&](int u) {
            const int e = first + 32 * u;
            const int64_t j = first_element + e;
            return ElementCopy<T>{e < tile.gy_elements ? gy_s + co * smem.gy_row + e : nullptr,
                                  gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                                  co < tile.co_count && j >= 0 && j < p.length_out};
          });
        }
      }
    } else if constexpr (Tr::kMerged) {  // a warp per row, kInFlight elements a lane at a time
      constexpr int kInFlight = 4, kWarps = kWgmmaThreads / 32;
      for (int co = tile.warp; co < smem.gy_rows; co += kWarps) {
        for (int first = tile.lane; first < tile.gy_elements; first += 32 * kInFlight) {
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) {
            const int e = first + 32 * u;
            const int64_t j = first_element + e;
            if (e < tile.gy_elements)
              element_copy(gy_s + co * smem.gy_row + e, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                           co < tile.co_count && j >= 0 && j < p.length_out);
          }
        }
      }
    } else {  // rows kRowsInFlight at a time (16-bit: loads the compiler issues before their stores)
      constexpr int kWarps = kWgmmaThreads / 32;
      for (int first_row = tile.warp; first_row < kWgmmaBlockCo; first_row += kWarps * kRowsInFlight) {
        for (int q = tile.lane; q < tile.gy_positions; q += 32) {
          const int64_t m = first_position + q, j = m * p.stride + tile.phase;
#pragma unroll
          for (int r = 0; r < kRowsInFlight; ++r) {
            const int co = first_row + r * kWarps;
            element_copy(gy_s + co * smem.gy_row + q, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                         co < tile.co_count && m >= 0 && j < p.length_out);
          }
        }
      }
    }
  }
  // Issues item `item`'s copies into buffer `buffer` (the caller commits the cp.async group)
  __device__ __forceinline__ void stage(int64_t item, int buffer) const {
    for_each_copy(
        item, buffer,
        [&](T* to, const T* from, auto vector, int inside) {
          cp_async<decltype(vector)::value * int(sizeof(T))>(to, from, inside * int(sizeof(T)));
        },
        [&](T* to, const T* from, bool inside) { copy_element(to, from, inside, x); },
        [&](auto count, auto&& copy_of) { copy_elements<decltype(count)::value, T>(copy_of); }, true);
  }
  // TF32: round this thread's landed copies in place, once instead of at every fragment load (gy's
  // but in bias blocks, which sum gy unrounded)
  __device__ __forceinline__ void round_own_copies(int64_t item, int buffer) const {
    if constexpr (!Tr::k16) {
      for_each_copy(
          item, buffer, [&](T* to, const T*, auto vector, int) { round_to_tf32<decltype(vector)::value>(to); },
          [&](T* to, const T*, bool) { round_to_tf32<1>(to); }, [](auto, auto&&) {}, !(Tr::kRegisterSums && tile.bias_block));
    }
  }
};

// 16-bit grad_bias: rows 64-71 of every x_s buffer are the ones column (§5.4): 1.0, then zeros (16
// bytes a thread); written once, before the first block barrier
template <class Tr>
__device__ __forceinline__ void write_ones_column(const WgmmaWeightGradSmem<Tr>& smem) {
  using T = typename Tr::Element;
  if constexpr (Tr::kOnesColumn) {
    const T one = from_float<T>(1.0f);
    uint16_t one_bits;
    memcpy(&one_bits, &one, sizeof(one));
    const uint32_t one_pair = one_bits * 0x10001u;
    const int byte = threadIdx.x % 64 * 16;  // byte of the buffer's 8 rows
    const uint32_t word = byte < kWgmmaRowBytes ? one_pair : 0u;
    auto write_ones = [&](int buffer) {
      *reinterpret_cast<uint4*>(smem.x_s(buffer) + kWgmmaBlockCi * kWgmmaRowBytes + byte) = make_uint4(word, word, word, word);
    };
    if constexpr (Tr::kPipelined) {
      for (int buffer = threadIdx.x / 64; buffer < smem.buffers * Tr::kXPerBuffer; buffer += kPipelineThreads / 64)
        write_ones(buffer);
      fence_async_shared();  // read by wgmma (after the ring's block barrier)
    } else {
      write_ones(threadIdx.x / 64);
    }
  }
}

// The pipelined tiles' producer warpgroup (threads kPipelineConsumerThreads on): fills the ring's
// stages with the scheduler's items, in order, running up to `stages` items ahead of the consumers
template <class Tr>
struct WgmmaWeightGradProducer {
  using T = typename Tr::Element;
  static constexpr int kChunk = Tr::kChunk;
  const WeightGradProblem& p;
  const WgmmaWeightGradTile<Tr>& tile;
  const WgmmaWeightGradSmem<Tr>& smem;
  const T* gy;

  __device__ __forceinline__ void produce(const WgmmaWeightGradScheduler& items, const WgmmaWeightGradRing& ring) const {
    set_max_registers<kProducerRegisters, false>();
    const int producer = threadIdx.x - kPipelineConsumerThreads;
    // a walk over the co_count x gy_chunks chunks of an item's windows, kWgmmaThreads chunks apart
    // (as WgmmaWeightGradLoader's)
    const auto first_chunk = tile.gy_chunks_per_row.divmod(producer), step = tile.gy_chunks_per_row.divmod(kWgmmaThreads);
    const int rows_step = int(step.div), chunks_step = int(step.mod);
    WgmmaWeightGradRingPosition at;
    for (int64_t item = items.begin; item < items.end; ++item) {
      mbarrier_wait(ring.empty + at.stage, at.parity ^ 1);
      uint64_t* landed = ring.full + at.stage;
      const auto row = p.div_chunks_per_row.divmod(unsigned(item));
      const int n = int(row.div), i0 = int(row.mod) * kGradWPositions;
      // x: a box of 64 ci x 128 bytes of positions per consumer warpgroup and half, swizzled as wgmma's
      // B (the tensor map's), zeros past the tensor's positions and channels
      if (producer == 0) {
        constexpr int kHalves = int(sizeof(T)) / 2, kHalfPositions = kWgmmaRowBytes / int(sizeof(T));
        mbarrier_expect_bytes(landed, Tr::kXPerBuffer * kHalves * Tr::kHalfBytes);
        for (int w = 0; w < Tr::kXPerBuffer; ++w)
          for (int half = 0; half < kHalves; ++half)
            tensor_copy_to_shared(smem.x_s(at.stage * Tr::kXPerBuffer + w) + half * Tr::kHalfBytes, &p.x_map,
                                  i0 + half * kHalfPositions, int(tile.first_ci) + w * kWgmmaBlockCi, n, landed);
      }
      // gy: each row's window from its 16-byte boundary (rows past co_count are not staged: their
      // products are not written); inside the rows in 16-byte cp.async copies from every producer
      // thread (many small copies an item: one bulk copy a row was slower), at a row's ends by the
      // first warp, a lane a row (stage_window)
      T* gy_s = smem.gy_s(at.stage);
      const T* gy_n = gy + n * p.gy_batch_stride + tile.first_co * p.gy_channel_stride;
      const int first_element = int(tile.window_start(i0 + tile.shift_min));
      if (tile.chunked(first_element)) {
        int co = int(first_chunk.div), chunk = int(first_chunk.mod);
#pragma unroll 1
        while (co < tile.co_count) {
          const T* window = gy_n + co * p.gy_channel_stride + first_element;
          cp_async_16(gy_s + co * smem.gy_row + chunk * kChunk, window - elements_past_16_bytes(window) + chunk * kChunk);
          co += rows_step, chunk += chunks_step;
          if (chunk >= tile.gy_chunks) chunk -= tile.gy_chunks, ++co;
        }
        cp_async_arrive(landed);
      } else {
        for (int co = producer; co < tile.co_count && producer < 32; co += 32) {
          const T* gy_co = gy_n + co * p.gy_channel_stride;
          stage_window(gy_s + co * smem.gy_row, gy_co, first_element - elements_past_16_bytes(gy_co + first_element),
                       p.length_out, tile.gy_chunk_elements, landed);
        }
        fence_async_shared();  // these stores before later bulk copies into the stage
        mbarrier_arrive(landed);
      }
      at.advance(ring.stages);
    }
  }
};

}  // namespace convt::cuda
