// The launchers of every kernel family, declared once: ops_cuda.cpp calls them, and one .cu file
// per family and dtype instantiates them (csrc/cuda/instantiations/), so the build compiles the
// families in parallel. No torch here: raw pointers, the plan, the stream.
//
// scalar_t is the element type as torch names it (float, double, c10::Half, c10::BFloat16); the
// tensor-core launchers take the CUDA types of the same layout inside.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "plan.h"
#include "problem.h"

namespace convt::cuda {

// The accumulation type of the CUDA-core kernels and of the sliced reductions (at::opmath_type)
template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// The CUDA type of the same layout as torch's element type
template <typename scalar_t>
struct CudaType {
  using type = scalar_t;
};
template <>
struct CudaType<c10::Half> {
  using type = __half;
};
template <>
struct CudaType<c10::BFloat16> {
  using type = __nv_bfloat16;
};
template <typename scalar_t>
using cuda_type = typename CudaType<scalar_t>::type;
template <typename scalar_t>
auto as_cuda(scalar_t* pointer) {
  return reinterpret_cast<std::conditional_t<std::is_const_v<scalar_t>, const cuda_type<std::remove_const_t<scalar_t>>,
                                             cuda_type<scalar_t>>*>(pointer);
}

// The device's SMs, its shared memory a block and the stream: what a launch needs besides the plan
// and the pointers
struct Launch {
  int sm_count;
  cudaStream_t stream;
  int smem_limit;  // sharedMemPerBlockOptin (allow_dynamic_smem)
  int device;      // the stream's device, current while launching
  // The GEMM kernels of this launch run only where *gate is non-zero (a device flag; nullptr: always),
  // so that a plan's exact fallback is decided on the device (DataPlan::exact)
  const int* gate = nullptr;
  // The GEMM kernels of this launch set *nonfinite to 1 where a sum they hold is Inf or NaN (a forward merged
  // with zero taps: its exact plan runs behind that flag, DataPlan::exact; nullptr: no flag)
  int* nonfinite = nullptr;
  // Each kernel may start while the one before it in the stream finishes (sm_90's programmatic
  // dependent launch; grid_dependency.cuh's invariant makes that safe)
  bool overlap = false;
};

// kernel<<<grid, block, smem, launch.stream>>>(args...), overlapping the kernel before it where
// launch.overlap: every launch of the package goes through here
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const Launch& launch, Args&&... args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = launch.stream;
  config.attrs = &overlap;
  config.numAttrs = launch.overlap ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// What the runtime says of a kernel on a device, asked once a process (where that succeeds): the
// dynamic shared memory attribute set (allow_dynamic_smem) and the blocks an SM holds at a launch's
// threads and shared memory (resident_blocks_per_sm); both hold for the process, so asking them again
// at every launch would only add host time. One mutex keeps the cache safe for threads launching on
// any streams and devices.
struct KernelFacts {
  std::mutex mutex;
  std::set<std::pair<const void*, int>> smem_allowed;                       // (kernel, device)
  std::map<std::tuple<const void*, int, int, size_t>, int> blocks_per_sm;  // (kernel, device, threads, bytes)
};
inline KernelFacts& kernel_facts() {
  static KernelFacts facts;
  return facts;
}

// Lets `kernel` take all the dynamic shared memory a block may have beside its static arrays. The
// attribute is the process's, not the call's: were it set to each call's own size, a thread could
// lower it between another thread's setting and launch of the same kernel with more
// (cudaErrorInvalidValue). One value a kernel for every call keeps concurrent launches on any streams
// valid; a launch takes what it names.
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, const Launch& launch) {
  KernelFacts& facts = kernel_facts();
  const std::lock_guard<std::mutex> lock(facts.mutex);
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), launch.device);
  if (facts.smem_allowed.count(key) != 0) return cudaSuccess;
  cudaFuncAttributes attributes{};
  cudaError_t error = cudaFuncGetAttributes(&attributes, kernel);
  if (error == cudaSuccess) {
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 launch.smem_limit - int(attributes.sharedSizeBytes));
  }
  if (error == cudaSuccess) facts.smem_allowed.insert(key);
  return error;
}

// The blocks of `kernel` one SM holds at `threads` and `smem_bytes` of dynamic shared memory (after
// allow_dynamic_smem)
template <typename Kernel>
cudaError_t resident_blocks_per_sm(Kernel kernel, int threads, size_t smem_bytes, const Launch& launch, int* blocks) {
  KernelFacts& facts = kernel_facts();
  const std::lock_guard<std::mutex> lock(facts.mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), launch.device, threads, smem_bytes);
  if (const auto known = facts.blocks_per_sm.find(key); known != facts.blocks_per_sm.end()) {
    *blocks = known->second;
    return cudaSuccess;
  }
  const cudaError_t error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, smem_bytes);
  if (error == cudaSuccess) facts.blocks_per_sm.emplace(key, *blocks);
  return error;
}

// ---- implicit GEMM (forward and grad_input) ----------------------------------------------------------

// Packs A into the mma fragment order of the plan's tiles: packed_weight_words(plan) words.
template <typename scalar_t, Math kMath>
void pack_gemm_weight(const GemmPlan& plan, const GemmWeight& weight, const scalar_t* w, uint32_t* packed, Launch launch);
// implicit_gemm_kernel: kGemmTileShapes of the warp or the warpgroup family; slices: the fp32
// slices where plan.float_sums (float_sums_bytes), which launch_sum_slices then adds
template <typename scalar_t, Math kMath, GemmFamily kFamily>
void launch_implicit_gemm(const GemmPlan& plan, const scalar_t* in, const uint32_t* packed_w, const scalar_t* bias,
                          scalar_t* out, float* slices, Launch launch);
// pipelined_gemm_kernel: the pipelined family; in_map: `in` as a tensor map where plan.tensor_rows;
// kForm: pipeline_form(plan) (pipelined_gemm.cuh; no kPhasePair in 3xTF32)
template <typename scalar_t, Math kMath, PipelineForm kForm>
void launch_pipelined_gemm(const GemmPlan& plan, const CUtensorMap* in_map, const scalar_t* in, const uint32_t* packed_w,
                           const scalar_t* bias, scalar_t* out, float* slices, Launch launch);

// ---- grad_weight on tensor cores: partial sums per slice (then launch_sum_slices) ----------------------

template <typename scalar_t, Math kMath>
void launch_grad_weight_gemm(const WeightGradPlan& plan, const scalar_t* x, const scalar_t* grad_y, float* partial,
                             float* bias_partial, Launch launch);
// x_map: x as a tensor map where plan.stages > 0 (kPipelined); kMerged: plan.merged
template <typename scalar_t, bool kPipelined, bool kMerged>
void launch_grad_weight_wgmma(const WeightGradPlan& plan, const CUtensorMap* x_map, const scalar_t* x,
                              const scalar_t* grad_y, float* partial, float* bias_partial, Launch launch);
// The box tiles (plan.box_columns > 0; 16-bit and TF32): x's map and grad_y's map of each tap (plan.taps)
template <typename scalar_t>
void launch_grad_weight_boxes(const WeightGradPlan& plan, const CUtensorMap* x_map, const CUtensorMap* grad_y_maps,
                              float* partial, Launch launch);

// ---- the packed taps (packed_taps.cuh, packed_taps_grad_input.cuh) -----------------------------------

template <typename scalar_t, Math kMath>
void launch_packed_taps_forward(const ConvTParams& p, const PackedTapsPlan& plan, const scalar_t* x, const scalar_t* w,
                                const scalar_t* bias, scalar_t* y, Launch launch);
// (grad_x contiguous)
template <typename scalar_t, Math kMath>
void launch_packed_taps_grad_input(const ConvTParams& p, const PackedTapsPlan& plan, const scalar_t* grad_y, const scalar_t* w,
                                   scalar_t* grad_x, Launch launch);

// ---- CUDA-core kernels (direct.cuh, depthwise.cuh) -----------------------------------------------------

template <typename scalar_t>
void launch_forward_direct(const ConvTParams& p, const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* y,
                           Launch launch);
template <typename scalar_t>
void launch_depthwise_forward(const ConvTParams& p, const DepthwisePlan& plan, const scalar_t* x, const scalar_t* w,
                              const scalar_t* bias, scalar_t* y, Launch launch);
template <typename scalar_t>
void launch_grad_input_direct(const ConvTParams& p, const scalar_t* grad_y, const scalar_t* w, scalar_t* grad_x,
                              Launch launch);
// partial: plan.co_blocks x grad_x.numel() sums where plan.co_blocks > 1 (grad_x is then not written), else null
template <typename scalar_t>
void launch_depthwise_grad_input(const ConvTParams& p, const DepthwisePlan& plan, const scalar_t* grad_y, const scalar_t* w,
                                 scalar_t* grad_x, acc_type<scalar_t>* partial, Launch launch);
// partial: slices x grad_w.numel() sums
template <typename scalar_t>
void launch_depthwise_grad_weight(const ConvTParams& p, int64_t slices, const scalar_t* grad_y, const scalar_t* x,
                                  acc_type<scalar_t>* partial, Launch launch);
template <typename scalar_t>
void launch_grad_weight_direct(const ConvTParams& p, const scalar_t* grad_y, const scalar_t* x, scalar_t* grad_w,
                               Launch launch);
// grad_y deinterleaved (GemmPlan::deinterleaved, WeightPlan::deinterleaved_grad_y): out[n, co * phases
// + r, m] = grad_y[n, co, m * stride + r * phase_step - padding], (N, C_out * phases, row_length),
// contiguous; *nonfinite set where grad_y holds Inf or NaN (else left as it is)
template <typename scalar_t>
void launch_deinterleave_grad_y(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, int* nonfinite, int64_t phases,
                                int64_t phase_step, int64_t row_length, Launch launch);
// ... and channels-last (DataPlan::channels_last_grad_y; at stride 1 phases 1, padding 0): out[(n *
// rows + m) * row_elements + co * phases + r] = grad_y[n, co, m * stride + r - padding] for m < rows,
// r < phases (at most kChannelsLastTile), zero outside grad_y; elements from C_out * phases on of a
// row are not written (row_elements a multiple of 16 bytes); *nonfinite set where grad_y holds Inf or NaN
template <typename scalar_t>
void launch_deinterleave_grad_y_channels_last(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, int* nonfinite,
                                              int64_t phases, int64_t rows, int64_t row_elements, Launch launch);
// grad_y unrolled by taps (WeightPlan::unrolled_grad_y): out (N, C_out * K, unrolled_row_length(p)), contiguous
template <typename scalar_t>
void launch_unroll_grad_y(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, Launch launch);
// (N, C, L) rows read through element strides: what the layout copies below read
struct RowsView {
  int64_t batch, channels, length;
  int64_t batch_stride, channel_stride, length_stride;
};
// Channels-last rows by phase: out[((n * phases + r) * phase_rows + m) * row_elements + c] = in[n, c,
// m * phases + r] for every position m * phases + r < length and c < channels (row_elements >=
// channels; channels [channels, row_elements) of a written row may take zeros, rows of no position
// are not written). x channels-last (DataPlan::copy_channels_last) at phases 1; grad_y by phase
// (WeightPlan::channels_last_grad_y).
struct ChannelsLastCopy {
  RowsView in;
  int64_t phases, phase_rows, row_elements;
};
template <typename scalar_t>
void launch_channels_last(const ChannelsLastCopy& copy, const scalar_t* in, scalar_t* out, Launch launch);
// Rows of row_elements elements (a multiple of 16 bytes; WeightPlan::aligned_x, DataPlan::copy_batch):
// out[(n * channels + c) * row_elements + i] = in[n, c, i] for i < length, zeros after
template <typename scalar_t>
void launch_aligned_rows(const RowsView& in, const scalar_t* in_data, int64_t row_elements, scalar_t* out, Launch launch);
// row_sums[(n * rows.segments + s) * C_out + co] = sum over j in segment s of grad_y[n, co, j]
// (RowSumsPlan: a warp a row, or a block a row segment)
template <typename scalar_t>
void launch_grad_y_row_sums(const ConvTParams& p, const RowSumsPlan& rows, const scalar_t* grad_y, acc_type<scalar_t>* row_sums,
                            Launch launch);
// out[e] = the sum over s of partial[s][e], in order of s (deterministic), plus bias[(e / length) mod
// channels] where bias is not null (out as (N, channels, length)); nothing where launch.gate is set and 0.
// taps > 1: partial's sums are taps first (WeightGradPlan::taps_first), sum e going to out[(e mod
// rows) * taps + e div rows], rows = elements / taps.
template <typename scalar_t>
void launch_sum_slices(const acc_type<scalar_t>* partial, scalar_t* out, int64_t elements, int64_t slices, Launch launch,
                       const scalar_t* bias = nullptr, int64_t length = 1, int64_t channels = 1, int64_t taps = 1);

}  // namespace convt::cuda
