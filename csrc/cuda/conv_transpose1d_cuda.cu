// CUDA registrations of convt::conv_transpose1d and its backward, and the one place where a problem
// picks its kernel (path, math mode, tile shape).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <numeric>

#include "convt.h"
#include "cuda/direct.cuh"
#include "cuda/forward_mma.cuh"

namespace convt::cuda {
namespace {

constexpr int kDirectThreads = 256;
constexpr int kReduceThreads = 256;
constexpr size_t kMmaSmemBudget = 110 * 1024;  // two blocks per SM

// Blocks of the row kernels (direct.cuh): positions along x, rows along y.
dim3 row_grid(int64_t rows, int64_t length, int threads) {
  const int64_t position_blocks = std::min<int64_t>((length + threads - 1) / threads, 1 << 20);
  return dim3(unsigned(position_blocks), unsigned(std::min<int64_t>(rows, 65535)));
}

int grid_size(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 64;
  return int(std::max<int64_t>(1, std::min(blocks, cap)));
}

template <typename scalar_t>
const scalar_t* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<scalar_t>() : nullptr;
}

// ---- tensor-core forward: tile shape ------------------------------------------------------------

std::optional<MmaShape> make_mma_shape(const ConvTParams& p, at::ScalarType dtype) {
  if (dtype == at::kDouble || p.in_channels_per_group < 8 || p.out_channels_per_group < 8) return std::nullopt;
  const int elements_per_word = dtype == at::kFloat ? 1 : 2;
  MmaShape t;
  t.block_n = kMmaWarpsN * kMmaWarpTilesN * 8;
  const int64_t shift_min = tap_of(0, p.stride, p.padding, p.dilation).shift;  // shifts grow with k
  t.shift_max = tap_of(p.kernel_size - 1, p.stride, p.padding, p.dilation).shift;
  t.x_rows = int(t.block_n + t.shift_max - shift_min);
  const int64_t tap_period = p.stride / std::gcd(p.stride, p.dilation);  // taps k and k + period share a phase
  const int taps_per_phase = int((p.kernel_size + tap_period - 1) / tap_period);
  t.co_tiles = (p.out_channels_per_group + kMmaBlockM - 1) / kMmaBlockM;
  t.m_tiles = (phase_length(0, p.length_out, p.stride) + t.block_n - 1) / t.block_n;
  const int64_t group_chunk = (p.in_channels_per_group + 15) / 16 * 16;
  // float x rows (per channel) padded to ≡ 8 words mod 32: conflict-free B fragments
  const int x_row_words = (t.x_rows + 23) / 32 * 32 + 8;
  for (int chunk : {64, 48, 32, 16}) {
    if (chunk > group_chunk && chunk != 16) continue;
    t.chunk = chunk;
    t.chunks = (p.in_channels_per_group + chunk - 1) / chunk;
    t.row_words = chunk / elements_per_word + 4;
    t.x_words = dtype == at::kFloat ? chunk * x_row_words : t.x_rows * t.row_words;
    auto smem_bytes = [&](int64_t slots, int buffers) {
      return size_t(slots * kMmaBlockM * t.row_words + int64_t(buffers) * t.x_words) * 4;
    };
    // the whole weight tile resident when one chunk holds the group (then float x is double-buffered),
    // else the taps of one phase
    const int resident_buffers = dtype == at::kFloat ? 2 : 1;
    const bool resident = t.chunks == 1 && smem_bytes(p.kernel_size, resident_buffers) <= kMmaSmemBudget;
    t.weight_slots = resident ? int(p.kernel_size) : taps_per_phase;
    t.x_buffers = resident ? resident_buffers : 1;
    t.smem_bytes = smem_bytes(t.weight_slots, t.x_buffers);
    if (t.smem_bytes <= kMmaSmemBudget) return t;
  }
  return std::nullopt;
}

template <typename T, Math kMath>
void launch_mma_kernel(const ConvTParams& p, const MmaShape& t, const T* x, const uint32_t* packed_w, const T* bias, T* y) {
  auto kernel = forward_mma_kernel<T, kMath>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(t.smem_bytes)));
  int blocks_per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kMmaThreads, t.smem_bytes));
  const int64_t tiles = t.co_tiles * t.m_tiles * p.groups * p.batch;
  const int64_t resident_blocks =
      int64_t(std::max(blocks_per_sm, 1)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const unsigned blocks = unsigned(std::min(tiles, resident_blocks));  // persistent: each block walks tiles
  kernel<<<blocks, kMmaThreads, t.smem_bytes, at::cuda::getCurrentCUDAStream()>>>(x, packed_w, bias, y, p, t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Packs the weight (pack_weight_kernel), then runs the tile kernel.
template <typename T, Math kMath>
void launch_mma(const ConvTParams& p, const MmaShape& t, const at::Tensor& x, const at::Tensor& w,
                const at::Tensor& bias, const at::Tensor& y) {
  auto as_t = [](const at::Tensor& tensor) { return reinterpret_cast<T*>(tensor.data_ptr()); };
  const int64_t words = p.groups * t.co_tiles * t.chunks * p.kernel_size * kMmaBlockM * t.row_words;
  const at::Tensor packed = at::empty({words}, w.options().dtype(at::kInt));
  const int64_t elements = words * (kMath == Math::k16Bit ? 2 : 1);
  pack_weight_kernel<T, kMath><<<grid_size(elements, kDirectThreads), kDirectThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      as_t(w), reinterpret_cast<uint32_t*>(packed.data_ptr()), p, t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const T* bias_data = bias.defined() ? as_t(bias) : nullptr;
  const uint32_t* packed_w = reinterpret_cast<const uint32_t*>(packed.data_ptr());
  launch_mma_kernel<T, kMath>(p, t, as_t(x), packed_w, bias_data, as_t(y));
}

// float32 follows PyTorch's convolution setting: TF32 when cuDNN may use it, else 3xTF32.
bool tf32_allowed() { return at::globalContext().allowTF32CuDNN(); }

// ---- the ops -------------------------------------------------------------------------------------

void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, y, args);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();  // read as bias[co]
  if (const auto shape = make_mma_shape(p, x.scalar_type())) {
    switch (x.scalar_type()) {
      case at::kFloat:
        return tf32_allowed() ? launch_mma<float, Math::kTF32>(p, *shape, x, w, bias_c, y)
                              : launch_mma<float, Math::k3xTF32>(p, *shape, x, w, bias_c, y);
      case at::kHalf: return launch_mma<__half, Math::k16Bit>(p, *shape, x, w, bias_c, y);
      case at::kBFloat16: return launch_mma<__nv_bfloat16, Math::k16Bit>(p, *shape, x, w, bias_c, y);
      default: break;
    }
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_transpose1d_cuda_direct", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    forward_direct_kernel<scalar_t, acc_t>
        <<<row_grid(p.batch * p.out_channels, p.length_out, kDirectThreads), kDirectThreads, 0, stream>>>(
            x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), data_or_null<scalar_t>(bias_c), y.data_ptr<scalar_t>(), p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, grad_y, args);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_transpose1d_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (grad_x.defined()) {
      grad_input_direct_kernel<scalar_t, acc_t>
          <<<row_grid(p.batch * p.in_channels, p.length_in, kDirectThreads), kDirectThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (grad_w.defined()) {
      grad_weight_direct_kernel<scalar_t, acc_t, kReduceThreads>
          <<<grid_size(grad_w.numel() * kReduceThreads, kReduceThreads), kReduceThreads, 0, stream>>>(
              grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), grad_w.data_ptr<scalar_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (grad_bias.defined()) {
      grad_bias_kernel<scalar_t, acc_t, kReduceThreads>
          <<<grid_size(p.out_channels * kReduceThreads, kReduceThreads), kReduceThreads, 0, stream>>>(
              grad_y.data_ptr<scalar_t>(), grad_bias.data_ptr<scalar_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(convt, CUDA, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_op<forward>));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_op<backward>));
}

}  // namespace convt::cuda
