// grad_weight_gemm_kernel's shared memory and its loader: an item's gy rows and x window global ->
// shared (docs/design.md §5.2), and TF32's pass over the landed copies with the grad_bias slot sums
// (§5.4).
#pragma once

#include "cuda/grad_weight_gemm_scheduler.cuh"

namespace convt::cuda {

// Two buffers each of
//   gy_s[co][q]   gy[n, co, (m0 + q)*stride + phase]       q in [0, kGradWPositions)
//   x_s[ci][q]    x[n, ci, m0 + q - shift_max - lead]       q in [0, kGradWPositions + span + lead)
// in the input's own type (rows of kGyRow and x_row elements, padded so that fragment loads hit
// distinct banks), then, where grad_bias is summed, bias_s[co][slot] in float.
template <typename T, int kCiWarps, int kCoWarps>
struct GradWGemmSharedStorage {
  static constexpr int kBlockCi = 16 * kCiWarps, kBlockCo = kGradWBlockCoOf<kCoWarps>;
  static constexpr int kGyRow = grad_w_gy_row(sizeof(T));
  int x_row;
  T* gy_buffers;  // 2 x kBlockCo x kGyRow
  T* x_buffers;   // 2 x kBlockCi x x_row
  float* bias_s;  // kBlockCo x bias_slots, if summed
  __device__ __forceinline__ GradWGemmSharedStorage(unsigned char* smem, const WeightGradProblem& p)
      : x_row(grad_w_window_row(p.window_row_elements, sizeof(T))) {
    gy_buffers = reinterpret_cast<T*>(smem);
    x_buffers = gy_buffers + 2 * kBlockCo * kGyRow;
    bias_s = reinterpret_cast<float*>(x_buffers + 2 * kBlockCi * x_row);
  }
  __device__ __forceinline__ T* gy_s(int buffer) const { return gy_buffers + buffer * kBlockCo * kGyRow; }
  __device__ __forceinline__ T* x_s(int buffer) const { return x_buffers + buffer * kBlockCi * x_row; }
};

// Stages item (n, m chunk) into a buffer: contiguous, aligned rows in asynchronous copies of 16 or 8
// bytes (or 4: pairs of 16-bit values) spread over the block, other rows one element at a time (a
// warp per row, lanes along positions; asynchronously for float). Zero outside the tensors. The
// caller commits and waits for the cp.async groups.
template <typename T, Math kMath, int kCiWarps, int kCoWarps>
struct GradWGemmLoader {
  using Smem = GradWGemmSharedStorage<T, kCiWarps, kCoWarps>;
  using Work = GradWGemmWork<kCiWarps, kCoWarps>;
  static constexpr int kThreads = kGradWThreadsOf<kCiWarps, kCoWarps>;
  static constexpr int kBlockCi = Smem::kBlockCi, kBlockCo = Smem::kBlockCo, kGyRow = Smem::kGyRow;
  static constexpr bool k16 = kMath == Math::k16Bit;

  const WeightGradProblem& p;
  const Smem& smem;
  const Work& work;
  const T* x;
  const T* gy;
  int x_vector, gy_vector, x_lead, x_positions;  // x_s position q holds x position m0 - shift_max - x_lead + q
  const Divider& x_vectors_per_row;              // ceil(x_positions / x_vector)

  __device__ __forceinline__ GradWGemmLoader(const WeightGradProblem& p_, const Smem& smem_, const Work& work_,
                                             const T* x_, const T* gy_)
      : p(p_), smem(smem_), work(work_), x(x_), gy(gy_), x_vector(p_.x_copy_elements), gy_vector(p_.gy_copy_elements),
        x_lead(p_.group_lead[work_.tile.tap_group]),
        x_positions(kGradWPositions + p_.group_span[work_.tile.tap_group] + x_lead),
        x_vectors_per_row(p_.group_window_copies[work_.tile.tap_group]) {}

  // Walks this thread's copies of the item: vector_copy(shared slot, source, vector size, elements
  // inside, grad_bias slot) and element_copy(shared slot, source, inside, grad_bias slot); the bias
  // slot is nullptr for x. stage() and finish_own_copies() both walk it, so a bias slot always
  // belongs to the same thread.
  template <typename VectorCopy, typename ElementCopy>
  __device__ __forceinline__ void for_each_copy(int64_t item, int buffer, VectorCopy&& vector_copy,
                                                ElementCopy&& element_copy) const {
    const int64_t first_ci = work.tile.first_ci, first_co = work.tile.first_co;
    const int ci_count = work.tile.ci_count, co_count = work.tile.co_count, lane = work.lane, warp = work.warp;
    const auto row = p.div_chunks_per_row.divmod(unsigned(item));
    const int64_t n = row.div, m0 = int64_t(row.mod) * kGradWPositions;
    T* gy_s = smem.gy_s(buffer);
    const T* gy_n = gy + n * p.gy_batch_stride + first_co * p.gy_channel_stride;
    if (gy_vector > 1) {  // stride 1: gy positions m0 + q
      with_copy_size<T>(gy_vector, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value, kVectorsPerRow = kGradWPositions / kVector;
        // float's 16-byte copies unrolled; the rest rolled (unrolled, they hold about 30 more registers)
        constexpr int kUnroll = !k16 && kVector == 4 ? 4 : 1;
#pragma unroll(kUnroll)
        for (int index = threadIdx.x; index < kBlockCo * kVectorsPerRow; index += kThreads) {
          const int co = index / kVectorsPerRow, q = index % kVectorsPerRow * kVector;
          const int64_t j = m0 + q;
          const int inside = co < co_count ? elements_inside(p.length_out - j, kVector) : 0;
          vector_copy(gy_s + co * kGyRow + q, inside ? gy_n + co * p.gy_channel_stride + j : gy, vector, inside,
                      smem.bias_s + index);  // slot co * bias_slots + index % kVectorsPerRow
        }
      });
    } else {
      for (int co = warp; co < kBlockCo; co += kThreads / 32) {
        for (int q = lane; q < kGradWPositions; q += 32) {
          const int64_t j = (m0 + q) * p.stride + work.phase;
          element_copy(gy_s + co * kGyRow + q, gy_n + co * p.gy_channel_stride + j * p.gy_length_stride,
                       co < co_count && j < p.length_out, smem.bias_s + co * p.bias_slots + lane);
        }
      }
    }
    T* x_s = smem.x_s(buffer);
    const T* x_n = x + n * p.x_batch_stride + first_ci * p.x_channel_stride;
    const int64_t first_position = m0 - work.shift_max - x_lead;
    if (x_vector > 1) {  // first_position is a multiple of x_vector: copies lie wholly inside or outside [0, L_in) but at the end
      with_copy_size<T>(x_vector, [&](auto vector) {
        constexpr int kVector = decltype(vector)::value;
        constexpr int kUnroll = !k16 && kVector == 4 ? 4 : 1;
#pragma unroll(kUnroll)
        for (int index = threadIdx.x; index < kBlockCi * int(x_vectors_per_row.divisor); index += kThreads) {
          const auto row = x_vectors_per_row.divmod(unsigned(index));
          const int ci = int(row.div), q = int(row.mod) * kVector;
          const int64_t i = first_position + q;
          const int inside = ci < ci_count && i >= 0 ? elements_inside(p.length_in - i, kVector) : 0;
          vector_copy(x_s + ci * smem.x_row + q, inside ? x_n + ci * p.x_channel_stride + i : x, vector, inside,
                      nullptr);
        }
      });
    } else {
      for (int ci = warp; ci < kBlockCi; ci += kThreads / 32) {
        for (int q = lane; q < x_positions; q += 32) {
          const int64_t i = first_position + q;
          element_copy(x_s + ci * smem.x_row + q, x_n + ci * p.x_channel_stride + i * p.x_length_stride,
                       ci < ci_count && i >= 0 && i < p.length_in, nullptr);
        }
      }
    }
  }

  // Issues the item's copies into buffer `buffer`.
  __device__ __forceinline__ void stage(int64_t item, int buffer) const {
    for_each_copy(
        item, buffer,
        [&](T* to, const T* from, auto vector, int inside, float*) {
          cp_async<decltype(vector)::value * int(sizeof(T))>(to, from, inside * int(sizeof(T)));
        },
        [&](T* to, const T* from, bool inside, float*) { copy_element(to, from, inside, x); });
  }

  // TF32: once this thread's copies have landed (cp.async.wait_group), rounds them to TF32 in place,
  // once instead of at every fragment load; on the block's grad_bias items (bias_item) adds each gy
  // copy into its slot first, unrounded. Nothing for the other math modes.
  __device__ __forceinline__ void finish_own_copies(int64_t item, int buffer, bool bias_item) const {
    if constexpr (kMath == Math::kTF32) {
      auto finish = [&](float* values, int count, float* bias_slot) {
        if (bias_item && bias_slot != nullptr) {
          float sum = 0.0f;
          for (int e = 0; e < count; ++e) sum += values[e];
          *bias_slot += sum;
        }
        for (int e = 0; e < count; ++e) values[e] = __uint_as_float(to_tf32(values[e]));
      };
      for_each_copy(
          item, buffer, [&](float* to, const T*, int vector, int, float* bias_slot) { finish(to, vector, bias_slot); },
          [&](float* to, const T*, bool, float* bias_slot) { finish(to, 1, bias_slot); });
    }
  }

  // Zeroes the grad_bias slots (the caller synchronizes before the first item lands on them).
  __device__ __forceinline__ void clear_bias_slots() const {
    for (int i = threadIdx.x; i < kBlockCo * p.bias_slots; i += kThreads) smem.bias_s[i] = 0.0f;
  }
};

}  // namespace convt::cuda
