// CUDA registrations of convt::conv_transpose1d and its backward: the device's limits and the
// operands' facts go to the planner (plan.h), and each planned pass to its launcher (launch.h).
// Workspace (packed weights, partial sums) is allocated here through torch's allocator.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "convt.h"
#include "cuda/launch.h"
#include "plan.h"

namespace convt::cuda {
namespace {

// The current device's limits. The sm_90a kernels run on sm_90 devices when the library was built
// for 9.0a (setup.py defines CONVT_WGMMA).
DeviceLimits device_limits() {
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
#ifdef CONVT_WGMMA
  const bool sm90a = device->major == 9 && device->minor == 0;
#else
  const bool sm90a = false;
#endif
  return {device->multiProcessorCount, int64_t(device->sharedMemPerBlockOptin), int64_t(device->sharedMemPerMultiprocessor),
          int64_t(device->reservedSharedMemPerBlock), sm90a, sm90a};
}

TensorFacts facts_of(const at::Tensor& t) {
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  const int64_t alignment = address == 0 ? 256 : std::min<int64_t>(256, int64_t(address & (~address + 1)));
  return {int(t.element_size()), alignment};
}

// Launches are serial unless CONVT_OVERLAP_LAUNCHES=always (read at every call): then, on sm_90 and
// later, each overlaps the kernel before it (Launch::overlap), starting as its predecessor's last
// blocks finish (docs/design.md §9). Serial by default: overlapped, training steps and some long
// forwards ran slower (v128, docs/perf/2026-12-07-session102.md).
bool overlaps_launches() {
  return read_plan_override("CONVT_OVERLAP_LAUNCHES") == PlanOverride::kAlways &&
         at::cuda::getCurrentDeviceProperties()->major >= 9;
}

// Launches go to the current stream; persistent grids size themselves by the SMs the planner saw
Launch launch_for(const DeviceLimits& limits) {
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  Launch launch{limits.sm_count, stream, int(limits.smem_per_block_optin), stream.device_index()};
  launch.overlap = overlaps_launches();
  return launch;
}

// float32 follows PyTorch's convolution setting: TF32 when cuDNN may use it, else 3xTF32.
Math math_of(const at::Tensor& t) { return math_for(int(t.element_size()), at::globalContext().allowTF32CuDNN()); }

// f(scalar_t{}) for the tensor's dtype: the one dtype dispatch of the CUDA path
template <typename F>
void dispatch_dtype(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kHalf: return f(c10::Half{});
    case at::kBFloat16: return f(c10::BFloat16{});
    default: TORCH_CHECK(false, "conv_transpose1d: unsupported dtype ", dtype);
  }
}
// f(scalar_t{}, std::integral_constant<Math, ...>{}) for a tensor-core pass
template <typename F>
void dispatch_math(at::ScalarType dtype, Math math, F&& f) {
  using TF32 = std::integral_constant<Math, Math::kTF32>;
  using Split = std::integral_constant<Math, Math::k3xTF32>;
  using Bit16 = std::integral_constant<Math, Math::k16Bit>;
  switch (dtype) {
    case at::kFloat: return math == Math::kTF32 ? f(float{}, TF32{}) : f(float{}, Split{});
    case at::kHalf: return f(c10::Half{}, Bit16{});
    case at::kBFloat16: return f(c10::BFloat16{}, Bit16{});
    default: TORCH_CHECK(false, "conv_transpose1d: no tensor-core path for ", dtype);
  }
}

template <typename scalar_t>
scalar_t* data_of(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<scalar_t*>(t.data_ptr()) : nullptr;
}

// ---- TMA tensor maps ----------------------------------------------------------------------------

// A driver API function reached through the runtime (the library does not link libcuda); nullptr
// where the driver lacks it
template <typename Function>
Function driver_function(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Function>(function);
}

// `t` as a TMA tensor map (cuTensorMapEncodeTiled) of (length, channels, batch) with element strides
// (channel_stride, batch_stride), positions contiguous, copied in boxes of `box` elements, zeros
// outside the tensor; float with `tf32` as TFLOAT32, which the copies round to nearest, ties to even.
// False where the driver refuses the map (the planner has checked what it documents).
bool encode_tensor_map(CUtensorMap& map, const at::Tensor& t, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> strides, std::initializer_list<int> box, CUtensorMapSwizzle swizzle,
                       bool tf32) {
  using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                   const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const auto encode = driver_function<EncodeTiled>("cuTensorMapEncodeTiled");
  static const auto current_context = driver_function<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  // The encoder needs a current context, which a thread that has made no runtime call yet lacks
  // (autograd's backward thread): the runtime's primary context, which cudaSetDevice makes current
  CUcontext context = nullptr;
  if (!encode || !current_context || current_context(&context) != CUDA_SUCCESS) return false;
  int device = 0;
  if (!context && (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess)) {
    (void)cudaGetLastError();
    return false;
  }
  constexpr size_t kMaxRank = 5;
  const size_t rank = dims.size();
  TORCH_INTERNAL_ASSERT(rank <= kMaxRank && strides.size() + 1 == rank && box.size() == rank);
  const int64_t element_size = t.element_size();
  cuuint64_t dim_sizes[kMaxRank], byte_strides[kMaxRank];
  cuuint32_t box_sizes[kMaxRank], steps[kMaxRank];
  std::copy(dims.begin(), dims.end(), dim_sizes);
  std::copy(box.begin(), box.end(), box_sizes);
  std::fill(steps, steps + rank, 1u);
  size_t d = 0;
  for (const int64_t stride : strides) byte_strides[d++] = cuuint64_t(stride * element_size);
  const CUtensorMapDataType type = t.scalar_type() == at::kFloat ? (tf32 ? CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
                                   : t.scalar_type() == at::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(&map, type, cuuint32_t(rank), t.data_ptr(), dim_sizes, byte_strides, box_sizes, steps,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The pipelined forward's x_s boxes (GemmPlan::tensor_rows): rows of map_row_phases channels back
// to back, a box the staged rows of one channel phase; tap boxes (GemmPlan::tap_boxes): 64
// positions x a chunk's channels, swizzled as wgmma's MN-major A
bool encode_in_map(CUtensorMap& map, const GemmPlan& g, const at::Tensor& in, Math math) {
  if (g.position_rows) {  // (channels contiguous)
    return encode_tensor_map(map, in, {g.groups * g.channels_per_group, g.in_length, g.batch}, {g.in_length_stride, g.in_batch_stride},
                             {g.chunk_channels, g.x_row_elements, 1},
                             g.chunk_channels * in.element_size() == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                             /*tf32=*/math == Math::kTF32);
  }
  if (g.tap_boxes) {
    return encode_tensor_map(map, in, {g.in_length, g.groups * g.channels_per_group, g.batch}, {g.in_channel_stride, g.in_batch_stride},
                             {kTapBoxPositions, g.chunk_channels, 1}, CU_TENSOR_MAP_SWIZZLE_128B, /*tf32=*/false);
  }
  const int64_t phases = g.map_row_phases;
  return encode_tensor_map(map, in, {phases * g.in_length, g.groups * g.channels_per_group / phases, g.batch},
                           {phases * g.in_channel_stride, g.in_batch_stride}, {g.x_row_elements, int(g.staged_rows / phases), 1},
                           CU_TENSOR_MAP_SWIZZLE_NONE, /*tf32=*/math == Math::kTF32);
}
// The pipelined grad_weight's x boxes: 64 channels x 128 bytes of positions, swizzled as wgmma's B
bool encode_x_map(CUtensorMap& map, const at::Tensor& x, const ConvTParams& p) {
  return encode_tensor_map(map, x, {p.length_in, p.in_channels, p.batch}, {p.x_channel_stride, p.x_batch_stride},
                           {int(kWgmmaRowBytes / x.element_size()), kWgmmaBlockCi, 1}, CU_TENSOR_MAP_SWIZZLE_128B,
                           /*tf32=*/true);
}

// A limit set without TMA: what the planner gets after the driver refused a tensor map
DeviceLimits without_tma(DeviceLimits limits) {
  limits.tma = false;
  return limits;
}

// ---- the passes ------------------------------------------------------------------------------------

// grad_y deinterleaved (GemmPlan::deinterleaved, WeightPlan::deinterleaved_grad_y), and a device flag
// set where grad_y holds Inf or NaN (DataPlan::exact runs behind it): grad_input's copy, rows r at
// r - padding (the phases of its (shift, phase) grid); grad_weight's at r * dilation - padding (the
// same copy at dilation 1)
struct GradYCopy {
  at::Tensor values, nonfinite;
};
GradYCopy deinterleave(const ConvTParams& p, const at::Tensor& grad_y, int64_t rows, int64_t phase_step, int64_t row_length,
                       Launch launch) {
  GradYCopy copy{at::empty({p.batch, p.out_channels * rows, row_length}, grad_y.options()),
                 at::zeros({1}, grad_y.options().dtype(at::kInt))};
  dispatch_dtype(grad_y.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_deinterleave_grad_y<scalar_t>(p, data_of<scalar_t>(grad_y), data_of<scalar_t>(copy.values),
                                         copy.nonfinite.data_ptr<int>(), rows, phase_step, row_length, launch);
  });
  return copy;
}
GradYCopy deinterleaved_grad_y(const ConvTParams& p, const at::Tensor& grad_y, Launch launch) {
  return deinterleave(p, grad_y, deinterleaved_phases(p), 1, deinterleaved_row_length(p), launch);
}
GradYCopy weight_deinterleaved_grad_y(const ConvTParams& p, const at::Tensor& grad_y, Launch launch) {
  return deinterleave(p, grad_y, weight_deinterleaved_rows(p), p.dilation, weight_deinterleaved_row_length(p), launch);
}

// grad_y copied channels-last for grad_input (DataPlan::channels_last_grad_y): (N,
// channels_last_grad_y_rows, channels_last_grad_y_row_elements), deinterleaved at stride > 1; the
// flag as deinterleaved_grad_y's
GradYCopy channels_last_grad_y_copy(const ConvTParams& p, const at::Tensor& grad_y, Launch launch) {
  const int64_t phases = p.stride > 1 ? deinterleaved_phases(p) : 1, rows = channels_last_grad_y_rows(p);
  const int64_t row_elements = channels_last_grad_y_row_elements(p, int(grad_y.element_size()));
  GradYCopy copy{at::empty({p.batch, rows, row_elements}, grad_y.options()), at::zeros({1}, grad_y.options().dtype(at::kInt))};
  ConvTParams q = p;
  if (p.stride == 1) q.padding = 0;  // (stride 1: grad_y's own positions, which the plan pads itself)
  dispatch_dtype(grad_y.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_deinterleave_grad_y_channels_last<scalar_t>(q, data_of<scalar_t>(grad_y), data_of<scalar_t>(copy.values),
                                                       copy.nonfinite.data_ptr<int>(), phases, rows, row_elements, launch);
  });
  return copy;
}

// grad_y unrolled by taps (WeightPlan::unrolled_grad_y): (N, C_out * K, unrolled_row_length(p))
at::Tensor unrolled_grad_y(const ConvTParams& p, const at::Tensor& grad_y, Launch launch) {
  const at::Tensor out = at::empty({p.batch, p.out_channels * p.kernel_size, unrolled_row_length(p)}, grad_y.options());
  dispatch_dtype(grad_y.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_unroll_grad_y<scalar_t>(p, data_of<scalar_t>(grad_y), data_of<scalar_t>(out), launch);
  });
  return out;
}

// t (N, C, L) as the layout copies read it
RowsView rows_of(const at::Tensor& t) {
  return RowsView{t.size(0), t.size(1), t.size(2), t.stride(0), t.stride(1), t.stride(2)};
}

// t (N, C, L) in rows of 16-byte multiples (WeightPlan::aligned_x, DataPlan::copy_batch): a view (N,
// C, L) of the copy
at::Tensor aligned_rows_copy(const at::Tensor& t, Launch launch) {
  const int64_t length = t.size(2), row_length = aligned_row_length(length, int(t.element_size()));
  const at::Tensor copy = at::empty({t.size(0), t.size(1), row_length}, t.options());
  dispatch_dtype(t.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_aligned_rows<scalar_t>(rows_of(t), data_of<scalar_t>(t), row_length, data_of<scalar_t>(copy), launch);
  });
  return copy.narrow(2, 0, length);
}

// `in` (N, C, L) into channels-last rows by phase (launch_channels_last)
void channels_last_copy(const at::Tensor& in, int64_t phases, int64_t phase_rows, int64_t row_elements, const at::Tensor& out,
                        Launch launch) {
  dispatch_dtype(in.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_channels_last<scalar_t>(ChannelsLastCopy{rows_of(in), phases, phase_rows, row_elements}, data_of<scalar_t>(in),
                                   data_of<scalar_t>(out), launch);
  });
}

// x channels-last (DataPlan::copy_channels_last): a view (N, C_in, L_in) of the copy (N, L_in, C_in)
at::Tensor channels_last_x_copy(const at::Tensor& x, Launch launch) {
  const at::Tensor copy = at::empty({x.size(0), x.size(2), x.size(1)}, x.options());
  channels_last_copy(x, 1, x.size(2), x.size(1), copy, launch);
  return copy.transpose(1, 2);
}

// grad_y channels-last by phase (WeightPlan::channels_last_grad_y): (N, stride,
// channels_last_phase_length, q.y_length_stride), rows of C_out rounded up to 16 bytes whose
// channels past C_out are never read (the maps end at C_out): phase r's rows m = 0 ..
// phase_length(r) - 1 hold positions m * stride + r (the maps end there; where L_out < stride, the
// phases without positions are zeros, which their maps' one row reads). At stride 1 (N, L_out, ...).
at::Tensor channels_last_grad_y(const ConvTParams& p, const ConvTParams& q, const at::Tensor& grad_y, Launch launch) {
  const std::vector<int64_t> sizes{p.batch, p.stride, channels_last_phase_length(p), q.y_length_stride};
  const at::Tensor copy = p.length_out < p.stride ? at::zeros(sizes, grad_y.options()) : at::empty(sizes, grad_y.options());
  channels_last_copy(grad_y, p.stride, channels_last_phase_length(p), q.y_length_stride, copy, launch);
  return p.stride > 1 ? copy : copy.squeeze(1);
}

// What a GEMM plan reads as `in`: the tensor itself, or grad_y deinterleaved (made once: *copy keeps
// it), or grad_y channels-last (*channels_last keeps it: a layout no other pass reads)
at::Tensor gemm_input(const DataPlan& plan, const ConvTParams& p, const at::Tensor& in, Launch launch, GradYCopy* copy,
                      GradYCopy* channels_last) {
  if (plan.kernel != Kernel::kGemm) return in;
  if (plan.channels_last_grad_y) {
    *channels_last = channels_last_grad_y_copy(p, in, launch);
    return channels_last->values;
  }
  if (!plan.gemm.deinterleaved) return in;
  if (!copy->values.defined()) *copy = deinterleaved_grad_y(p, in, launch);
  return copy->values;
}

// The launches of one GEMM plan over `in` (in_map: its tensor map where the plan has tensor_rows)
// (`packed_once`: the weight already packed for this plan, one launch: forward chunks share it)
void run_gemm(const GemmPlan& gemm, const GemmWeight& weight, const at::Tensor& in, const CUtensorMap* in_map,
              const at::Tensor& w, const at::Tensor& bias, const at::Tensor& out, Math math, Launch launch,
              const at::Tensor& packed_once = at::Tensor()) {
  // the packed weight of one launch at a time (row_tile_range or chunk_range), within
  // workspace_bound. Launches after the first of a chunk split store their sums, without the
  // bias, into `partial` (out's shape; zero where no launch stores) and add it to out: the kernels'
  // epilogues only ever store (a float out: one rounding a launch). A plan with float_sums stores its
  // parts' sums into fp32 slices of out's shape instead (a later chunk range's launch adds to them),
  // which sum_slices then adds in order with the bias (docs/design.md §3.8).
  const int launch_row_tiles = gemm.launch_row_tiles, launch_chunks = gemm.launch_chunks;
  const bool float_sums = gemm.float_sums;
  TORCH_INTERNAL_ASSERT(launch_row_tiles >= 1 && launch_chunks >= 1, "convt: a GEMM plan without its launches (plan_gemm sets them)");
  TORCH_INTERNAL_ASSERT(launch_chunks == gemm.chunks || (launch_row_tiles == gemm.row_tiles && (out.element_size() == 4 || float_sums)),
                        "convt: a chunk split of a float output, or into fp32 slices, over every row tile");
  TORCH_INTERNAL_ASSERT(!packed_once.defined() || (launch_row_tiles == gemm.row_tiles && launch_chunks == gemm.chunks),
                        "convt: a weight packed once for a plan of several launches");
  TORCH_INTERNAL_ASSERT(!float_sums || (launch_row_tiles == gemm.row_tiles && (gemm.splits == 1 || launch_chunks == gemm.chunks) &&
                                        float_sums_bytes(gemm) == 4 * gemm.splits * out.numel()),
                        "convt: fp32 slices over row ranges, split over chunk ranges, or of another output");
  const at::Tensor packed =
      packed_once.defined() ? packed_once : at::empty({packed_weight_words(first_launch(gemm))}, w.options().dtype(at::kInt));
  const at::Tensor partial = launch_chunks < gemm.chunks && !float_sums ? at::zeros_like(out) : at::Tensor();
  const at::Tensor slices = float_sums ? at::empty({float_sums_bytes(gemm) / 4}, out.options().dtype(at::kFloat)) : at::Tensor();
  float* slices_data = float_sums ? slices.data_ptr<float>() : nullptr;
  auto* packed_w = reinterpret_cast<uint32_t*>(packed.data_ptr());
  std::vector<GemmPlan> launches;
  for (int first = 0; first < gemm.row_tiles; first += launch_row_tiles)
    for (int chunk = 0; chunk < gemm.chunks; chunk += launch_chunks)
      launches.push_back(chunk_range(row_tile_range(gemm, first, std::min(launch_row_tiles, gemm.row_tiles - first)), chunk,
                                     std::min(launch_chunks, gemm.chunks - chunk)));
  dispatch_math(in.scalar_type(), math, [&](auto element, auto math_mode) {
    using scalar_t = decltype(element);
    constexpr Math kMath = decltype(math_mode)::value;
    const scalar_t* in_data = data_of<scalar_t>(in);
    for (const GemmPlan& part : launches) {
      const bool later_chunks = part.first_chunk > 0, into_partial = later_chunks && !float_sums;
      const scalar_t* bias_data = later_chunks ? nullptr : data_of<scalar_t>(bias);
      scalar_t* out_data = into_partial ? data_of<scalar_t>(partial) : data_of<scalar_t>(out);
      if (!packed_once.defined()) pack_gemm_weight<scalar_t, kMath>(part, weight, data_of<scalar_t>(w), packed_w, launch);
      switch (kGemmTileShapes[part.tile_shape].family) {
        case GemmFamily::kPipelined: {
          const CUtensorMap* map = part.tensor_rows ? in_map : nullptr;
          auto run = [&](auto form) {
            launch_pipelined_gemm<scalar_t, kMath, decltype(form)::value>(part, map, in_data, packed_w, bias_data, out_data,
                                                                         slices_data, launch);
          };
          switch (pipeline_form(part)) {
            case PipelineForm::kOnePair: run(std::integral_constant<PipelineForm, PipelineForm::kOnePair>()); break;
            case PipelineForm::kPairs: run(std::integral_constant<PipelineForm, PipelineForm::kPairs>()); break;
            case PipelineForm::kPhasePair:  // (TF32 and 16-bit only: 3xTF32 has two weight parts)
              if constexpr (kMath != Math::k3xTF32) run(std::integral_constant<PipelineForm, PipelineForm::kPhasePair>());
              break;
          }
          break;
        }
        case GemmFamily::kWarpgroupTiles:
          launch_implicit_gemm<scalar_t, kMath, GemmFamily::kWarpgroupTiles>(part, in_data, packed_w, bias_data, out_data,
                                                                             slices_data, launch);
          break;
        case GemmFamily::kWarpTiles:
          launch_implicit_gemm<scalar_t, kMath, GemmFamily::kWarpTiles>(part, in_data, packed_w, bias_data, out_data, slices_data,
                                                                        launch);
          break;
      }
      if (into_partial) out.add_(partial);
    }
    if (float_sums) {
      launch_sum_slices<scalar_t>(slices_data, data_of<scalar_t>(out), out.numel(), gemm.splits, launch, data_of<scalar_t>(bias),
                                  gemm.out_length, gemm.groups * gemm.rows_per_group);
    }
  });
}

// out = the sum of partial's slices (each out.numel() elements of out's accumulation type), in order;
// taps > 1: partial's sums taps first (launch_sum_slices)
void sum_slices(const at::Tensor& partial, const at::Tensor& out, int64_t slices, const Launch& launch, int64_t taps = 1) {
  dispatch_dtype(out.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    launch_sum_slices<scalar_t>(data_of<acc_type<scalar_t>>(partial), data_of<scalar_t>(out), out.numel(), slices, launch, nullptr, 1,
                                1, taps);
  });
}

template <typename scalar_t>
at::ScalarType acc_dtype() {
  return std::is_same_v<scalar_t, double> ? at::kDouble : at::kFloat;
}

// plan.gemm's weight packed for its one launch (the forward's chunks over x's copies share it)
at::Tensor packed_weight(const DataPlan& plan, const at::Tensor& w, Math math, Launch launch) {
  const GemmPlan gemm = first_launch(plan.gemm);
  const at::Tensor packed = at::empty({packed_weight_words(gemm)}, w.options().dtype(at::kInt));
  dispatch_math(w.scalar_type(), math, [&](auto element, auto math_mode) {
    using scalar_t = decltype(element);
    pack_gemm_weight<scalar_t, decltype(math_mode)::value>(gemm, plan.weight, data_of<scalar_t>(w),
                                                           reinterpret_cast<uint32_t*>(packed.data_ptr()), launch);
  });
  return packed;
}

// The forward (in = x, out = y) or grad_input (in = grad_y, out = grad_x) as planned
// (grad_y_copy: grad_y deinterleaved where a pass made it already, else where this one makes it)
// (packed_once: plan.gemm's weight packed already, used where the plan stands: the forward's chunks)
void run_data(DataPlan plan, const ConvTParams& p, const at::Tensor& in_tensor, const at::Tensor& w, const at::Tensor& bias,
              const at::Tensor& out, bool forward, Math math, const DeviceLimits& limits, GradYCopy* grad_y_copy,
              at::Tensor packed_once = at::Tensor()) {
  const Launch launch = launch_for(limits);
  GradYCopy channels_last;
  at::Tensor in = gemm_input(plan, p, in_tensor, launch, grad_y_copy, &channels_last);
  CUtensorMap in_map{}, exact_map{};  // (the exact plan reads `in` as it is)
  const bool mapped = plan.kernel != Kernel::kGemm ||
                      ((!plan.gemm.tensor_rows || encode_in_map(in_map, plan.gemm, in, math)) &&
                       (!plan.gemm.zero_taps || !plan.exact.tensor_rows || encode_in_map(exact_map, plan.exact, in_tensor, math)));
  if (!mapped) {  // the driver refused a tensor map
    packed_once = at::Tensor();  // (another plan: its own packing)
    plan = forward ? plan_forward(p, facts_of(in_tensor), math, without_tma(limits))
                   : plan_grad_input(p, facts_of(in_tensor), math, without_tma(limits));
    in = gemm_input(plan, p, in_tensor, launch, grad_y_copy, &channels_last);
  }
  if (plan.kernel == Kernel::kGemm) {
    if (bias_first(plan.gemm)) {  // (positions no kernel stores hold the bias alone)
      if (bias.defined()) {
        out.copy_(bias.view({1, -1, 1}).expand_as(out));
      } else {
        out.zero_();
      }
    }
    if (!plan.gemm.zero_taps) {
      run_gemm(plan.gemm, plan.weight, in, &in_map, w, bias, out, math, launch, packed_once);
      return;
    }
    // zero taps: the exact plan over it where `in` is not finite. grad_y: the flag of the copy that
    // the plan reads; x: the merged rows' own flag, set where their epilogue holds an Inf or NaN sum
    // (store_merged_rows: no pass over x)
    const bool copy_flags = plan.channels_last_grad_y || plan.gemm.deinterleaved;
    TORCH_INTERNAL_ASSERT(copy_flags || (forward && plan.gemm.row_phases > 1),
                          "convt: zero taps without a flag for their exact plan");
    const at::Tensor nonfinite = plan.channels_last_grad_y ? channels_last.nonfinite
                                 : plan.gemm.deinterleaved ? grad_y_copy->nonfinite
                                                           : at::zeros({1}, in_tensor.options().dtype(at::kInt));
    Launch merged = launch, gated = launch;
    if (!copy_flags) merged.nonfinite = nonfinite.data_ptr<int>();
    gated.gate = nonfinite.data_ptr<int>();
    run_gemm(plan.gemm, plan.weight, in, &in_map, w, bias, out, math, merged, packed_once);
    run_gemm(plan.exact, plan.weight, in_tensor, &exact_map, w, bias, out, math, gated);
    return;
  }
  if (plan.kernel == Kernel::kPackedTaps) {
    dispatch_math(in.scalar_type(), math, [&](auto element, auto math_mode) {
      using scalar_t = decltype(element);
      constexpr Math kMath = decltype(math_mode)::value;
      if (forward) {
        launch_packed_taps_forward<scalar_t, kMath>(p, plan.packed_taps, data_of<scalar_t>(in), data_of<scalar_t>(w),
                                                    data_of<scalar_t>(bias), data_of<scalar_t>(out), launch);
      } else {
        launch_packed_taps_grad_input<scalar_t, kMath>(p, plan.packed_taps, data_of<scalar_t>(in), data_of<scalar_t>(w),
                                                       data_of<scalar_t>(out), launch);
      }
    });
    return;
  }
  dispatch_dtype(in.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    const scalar_t *in_data = data_of<scalar_t>(in), *w_data = data_of<scalar_t>(w);
    scalar_t* out_data = data_of<scalar_t>(out);
    if (plan.kernel == Kernel::kDepthwise && forward) {
      launch_depthwise_forward<scalar_t>(p, plan.depthwise, in_data, w_data, data_of<scalar_t>(bias), out_data, launch);
    } else if (plan.kernel == Kernel::kDepthwise) {
      // several co blocks: their sums go to partial, added in order (deterministic)
      const int64_t co_blocks = plan.depthwise.co_blocks;
      const at::Tensor partial =
          co_blocks > 1 ? at::empty({co_blocks * out.numel()}, out.options().dtype(acc_dtype<scalar_t>())) : at::Tensor();
      launch_depthwise_grad_input<scalar_t>(p, plan.depthwise, in_data, w_data, out_data,
                                            co_blocks > 1 ? data_of<acc_type<scalar_t>>(partial) : nullptr, launch);
      if (co_blocks > 1) sum_slices(partial, out, co_blocks, launch);
    } else {
      forward ? launch_forward_direct<scalar_t>(p, in_data, w_data, data_of<scalar_t>(bias), out_data, launch)
              : launch_grad_input_direct<scalar_t>(p, in_data, w_data, out_data, launch);
    }
  });
}

// The box tiles' grad_y maps (WeightBoxProblem::grad_y_maps), tap k's over rows that end at
// min(rows, L_in + shift_k) (at least 1: a tap past every position reads zeros at negative ones),
// boxes of 64 co x 128 bytes of positions. 16-bit: over grad_y channels-last (by phase,
// channels_last_grad_y), tap k's over its phase's rows, as (channel, position, batch). TF32: over
// grad_y's own rows (a stride-1 problem, every shift a multiple of 16 bytes) or its unrolled copy (one
// tap at shift 0), as (position, channel, batch), rounded to TF32 as they land.
void encode_grad_y_maps(CUtensorMap* maps, const WeightGradPlan& g, const at::Tensor& grad_y, const ConvTParams& p) {
  const int positions = kBoxItemBytes / int(grad_y.element_size());
  const bool k_major = box_grad_y_k_major(int(grad_y.element_size()));
  const int64_t phase_rows = k_major ? 0 : channels_last_phase_length(p);
  for (int k = 0; k < g.taps; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    TORCH_INTERNAL_ASSERT(tap.shift == g.group_tap_shift[k], "convt: a box tap's shift differs from its plan's");
    const int64_t rows = k_major ? p.length_out : phase_length(tap.phase, p.length_out, p.stride);
    const int64_t length = std::max<int64_t>(1, std::min<int64_t>(rows, p.length_in + tap.shift));
    const bool encoded =
        k_major ? encode_tensor_map(maps[k], grad_y, {length, p.out_channels, p.batch}, {p.y_channel_stride, p.y_batch_stride},
                                    {positions, kBoxSlotCo, 1}, CU_TENSOR_MAP_SWIZZLE_128B, /*tf32=*/true)
                : encode_tensor_map(maps[k], grad_y.as_strided({1}, {1}, grad_y.storage_offset() + tap.phase * phase_rows * p.y_length_stride),
                                    {p.out_channels, length, p.batch}, {p.y_length_stride, p.y_batch_stride},
                                    {kBoxSlotCo, positions, 1}, CU_TENSOR_MAP_SWIZZLE_128B, /*tf32=*/false);
    TORCH_CHECK(encoded, "convt: the driver refused grad_output's tensor map");
  }
}

// grad_weight as planned, and grad_bias too where the plan sums it
// (x_map: x's tensor map where the plan has stages)
void run_grad_weight(const WeightPlan& plan, const ConvTParams& p, const at::Tensor& x, const at::Tensor& grad_y,
                     const at::Tensor& grad_w, const at::Tensor& grad_bias, Math math, const CUtensorMap& x_map,
                     const Launch& launch) {
  if (plan.kernel == Kernel::kGradWeightBoxes) {
    const WeightGradPlan& g = plan.gemm;
    const at::Tensor partial = at::empty({g.slices * grad_w.numel()}, grad_w.options().dtype(at::kFloat));
    CUtensorMap grad_y_maps[kMaxBoxTaps];
    encode_grad_y_maps(grad_y_maps, g, grad_y, p);
    dispatch_dtype(x.scalar_type(), [&](auto element) {
      using scalar_t = decltype(element);
      if constexpr (sizeof(scalar_t) == 2 || std::is_same_v<scalar_t, float>) {
        TORCH_INTERNAL_ASSERT(sizeof(scalar_t) == 2 || math == Math::kTF32, "convt: box tiles planned for strict float32");
        launch_grad_weight_boxes<scalar_t>(g, &x_map, grad_y_maps, data_of<float>(partial), launch);
      } else {
        TORCH_INTERNAL_ASSERT(false, "convt: box tiles planned for a ", sizeof(scalar_t), "-byte dtype");
      }
    });
    sum_slices(partial, grad_w, g.slices, launch);
    return;
  }
  if (plan.kernel == Kernel::kGradWeightGemm || plan.kernel == Kernel::kGradWeightWgmma) {
    const WeightGradPlan& g = plan.gemm;
    const int64_t elements = grad_w.numel();
    const at::Tensor partial = at::empty({g.slices * elements}, grad_w.options().dtype(at::kFloat));
    // bias_partial[slice][phase][co] (warpgroup tiles) or [slice][ci tile][tap group][co]
    const int64_t bias_slices = !g.sums_bias ? 0 : g.warpgroups ? g.slices * g.stride : g.slices * g.ci_tiles * g.tap_groups;
    const at::Tensor bias_partial =
        bias_slices > 0 ? at::empty({bias_slices * grad_bias.numel()}, grad_w.options().dtype(at::kFloat)) : at::Tensor();
    dispatch_math(x.scalar_type(), math, [&](auto element, auto math_mode) {
      using scalar_t = decltype(element);
      constexpr Math kMath = decltype(math_mode)::value;
      float* bias_data = bias_slices > 0 ? data_of<float>(bias_partial) : nullptr;
      if (plan.kernel == Kernel::kGradWeightWgmma) {
        const scalar_t *x_data = data_of<scalar_t>(x), *grad_y_data = data_of<scalar_t>(grad_y);
        float* partial_data = data_of<float>(partial);
        if (g.stages > 0) {
          (g.merged ? launch_grad_weight_wgmma<scalar_t, true, true> : launch_grad_weight_wgmma<scalar_t, true, false>)(
              g, &x_map, x_data, grad_y_data, partial_data, bias_data, launch);
        } else {
          (g.merged ? launch_grad_weight_wgmma<scalar_t, false, true> : launch_grad_weight_wgmma<scalar_t, false, false>)(
              g, nullptr, x_data, grad_y_data, partial_data, bias_data, launch);
        }
      } else {
        launch_grad_weight_gemm<scalar_t, kMath>(g, data_of<scalar_t>(x), data_of<scalar_t>(grad_y), data_of<float>(partial),
                                                 bias_data, launch);
      }
    });
    sum_slices(partial, grad_w, g.slices, launch, g.taps_first ? g.taps : 1);
    if (bias_slices > 0) sum_slices(bias_partial, grad_bias, bias_slices, launch);
    return;
  }
  dispatch_dtype(x.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    if (plan.kernel == Kernel::kDepthwise) {
      const at::Tensor partial = at::empty({plan.depthwise_slices * grad_w.numel()}, grad_w.options().dtype(acc_dtype<scalar_t>()));
      launch_depthwise_grad_weight<scalar_t>(p, plan.depthwise_slices, data_of<scalar_t>(grad_y), data_of<scalar_t>(x),
                                             data_of<acc_type<scalar_t>>(partial), launch);
      sum_slices(partial, grad_w, plan.depthwise_slices, launch);
    } else {
      launch_grad_weight_direct<scalar_t>(p, data_of<scalar_t>(grad_y), data_of<scalar_t>(x), data_of<scalar_t>(grad_w), launch);
    }
  });
}

// grad_bias from row sums of grad_y: row_sums[n][segment][co], then one slice per (n, segment)
void run_grad_bias_row_sums(const ConvTParams& p, const RowSumsPlan& rows, const at::Tensor& grad_y, const at::Tensor& grad_bias,
                            const Launch& launch) {
  dispatch_dtype(grad_y.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    const int64_t slices = p.batch * rows.segments;
    const at::Tensor row_sums = at::empty({slices * p.out_channels}, grad_y.options().dtype(acc_dtype<scalar_t>()));
    launch_grad_y_row_sums<scalar_t>(p, rows, data_of<scalar_t>(grad_y), data_of<acc_type<scalar_t>>(row_sums), launch);
    sum_slices(row_sums, grad_bias, slices, launch);
  });
}

// ---- the ops -----------------------------------------------------------------------------------------

void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, y, args);
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();  // read as bias[co]
  const Math math = math_of(x);
  const DeviceLimits limits = device_limits();
  GradYCopy unused;
  const DataPlan plan = plan_forward(p, facts_of(x), math, limits);
  if (plan.copy_batch == 0) {
    run_data(plan, p, x, w, bias_c, y, /*forward=*/true, math, limits, &unused);
    return;
  }
  // x copied into rows of 16-byte multiples or channels-last, copy_batch batch elements at a time
  // (DataPlan::copy_batch: one chunk's copy and the packed weight within the workspace bound), every whole chunk on plan.gemm
  // and its weight packed once; a last, shorter chunk as planned for it (its own packing, in place of
  // that one: the workspace bound)
  at::Tensor packed = packed_weight(plan, w, math, launch_for(limits));
  for (int64_t first = 0; first < p.batch; first += plan.copy_batch) {
    const int64_t count = std::min(plan.copy_batch, p.batch - first);
    const at::Tensor x_chunk = x.narrow(0, first, count);
    const at::Tensor x_rows = plan.copy_channels_last ? channels_last_x_copy(x_chunk, launch_for(limits))
                                                      : aligned_rows_copy(x_chunk, launch_for(limits));
    const at::Tensor y_part = y.narrow(0, first, count);
    const ConvTParams q = make_params(x_rows, w, y_part, args);
    if (count == plan.copy_batch) {
      run_data(plan, q, x_rows, w, bias_c, y_part, /*forward=*/true, math, limits, &unused, packed);
    } else {
      packed = at::Tensor();
      run_data(plan_forward(q, facts_of(x_rows), math, limits), q, x_rows, w, bias_c, y_part, /*forward=*/true, math, limits,
               &unused);
    }
  }
}

void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, grad_y, args);
  const Math math = math_of(x);
  DeviceLimits limits = device_limits();
  BackwardPlan plan = plan_backward(p, facts_of(x), facts_of(grad_y), math, grad_x.defined(), grad_w.defined(),
                                    grad_bias.defined(), limits);
  at::Tensor weight_x = plan.grad_weight.aligned_x ? aligned_rows_copy(x, launch_for(limits)) : x;  // grad_weight's x
  CUtensorMap x_map{};
  if (plan.grad_weight.gemm.stages > 0 && !encode_x_map(x_map, weight_x, plan.grad_weight.problem)) {  // the driver refused
    limits = without_tma(limits);
    plan = plan_backward(p, facts_of(x), facts_of(grad_y), math, grad_x.defined(), grad_w.defined(), grad_bias.defined(), limits);
    weight_x = x;
  }
  GradYCopy grad_y_copy;  // grad_y deinterleaved, made once for both passes
  if (plan.grad_input.kernel != Kernel::kNone) {
    run_data(plan.grad_input, p, grad_y, w, at::Tensor(), grad_x, /*forward=*/false, math, limits, &grad_y_copy);
  }
  const Launch launch = launch_for(limits);
  const WeightPlan& weight = plan.grad_weight;
  if (weight.kernel != Kernel::kNone) {
    if (weight.deinterleaved_grad_y) {
      // the stride-1 problem's weight (C_in, C_out/groups * P, taps) holds W's tap t*stride + r at
      // channel co*P + r, tap t (grad_weight_over_copies)
      const ConvTParams& q = weight.problem;
      if (!grad_y_copy.values.defined() || !grad_input_copy_serves_grad_weight(p)) {
        grad_y_copy = weight_deinterleaved_grad_y(p, grad_y, launch);
      }
      const at::Tensor over = at::empty({q.in_channels, q.out_channels_per_group, q.kernel_size}, grad_w.options());
      run_grad_weight(weight, q, weight_x, grad_y_copy.values, over, grad_bias, math, x_map, launch);
      // (one pass, into grad_w's memory (contiguous, made by the op): its whole runs of `phases` taps,
      // then the last run's first K mod phases)
      const int64_t phases = weight_deinterleaved_rows(p), whole_runs = p.kernel_size / phases, rest = p.kernel_size % phases;
      const at::Tensor by_tap = over.view({p.in_channels, p.out_channels_per_group, phases, q.kernel_size}).transpose(2, 3);
      grad_w.narrow(2, 0, whole_runs * phases)
          .view({p.in_channels, p.out_channels_per_group, whole_runs, phases})
          .copy_(by_tap.narrow(2, 0, whole_runs));
      if (rest > 0) grad_w.narrow(2, whole_runs * phases, rest).copy_(by_tap.select(2, whole_runs).narrow(2, 0, rest));
    } else if (weight.channels_last_grad_y) {
      run_grad_weight(weight, weight.problem, weight_x, channels_last_grad_y(p, weight.problem, grad_y, launch), grad_w,
                      grad_bias, math, x_map, launch);
    } else if (weight.unrolled_grad_y) {
      // the one-tap problem's weight (C_in, C_out/groups * K, 1) is grad_w's memory (grad_weight_over_unrolled)
      run_grad_weight(weight, weight.problem, weight_x, unrolled_grad_y(p, grad_y, launch), grad_w, grad_bias, math, x_map, launch);
    } else {
      run_grad_weight(weight, weight.problem, weight_x, grad_y, grad_w, grad_bias, math, x_map, launch);
    }
  }
  if (plan.grad_bias == Kernel::kGradBiasRowSums) run_grad_bias_row_sums(p, plan.grad_bias_rows, grad_y, grad_bias, launch);
}

}  // namespace

// torch.ops.convt._plan(..., device="cuda") plans for the current device
const bool kRegisteredDeviceLimits = (current_cuda_device_limits = device_limits, true);

TORCH_LIBRARY_IMPL(convt, CUDA, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_op<forward>));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_op<backward>));
}

}  // namespace convt::cuda
