// CPU kernels. Two paths, chosen in one place (use_direct_path):
//  - GEMM: output tiles (convt.h, "Polyphase indexing": one phase, a run of positions) accumulate one
//    GEMM per tap of the phase on windows of x read in place; grad_input likewise on grad_y's phases.
//  - direct: loops for few channels per group (depthwise), where GEMMs would be 1x1 matrices.
// float16 / bfloat16 are computed in float32, float64 in float64.
#include "cpu/conv_transpose1d_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace convt::cpu {
namespace {

at::ScalarType compute_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// A contiguous copy in the compute dtype (no copy when it already is one).
at::Tensor to_compute(const at::Tensor& t) { return t.to(compute_type(t.scalar_type())).contiguous(); }

// Where a kernel writes `out`: out itself when it is already a compute-dtype tensor, else a buffer
// that finish() copies back.
at::Tensor compute_buffer(const at::Tensor& out) {
  return out.scalar_type() == compute_type(out.scalar_type()) && out.is_contiguous()
             ? out
             : at::empty(out.sizes(), out.options().dtype(compute_type(out.scalar_type())));
}
void finish(const at::Tensor& out, const at::Tensor& buffer) {
  if (!out.is_same(buffer)) out.copy_(buffer);
}

bool use_direct_path(const ConvTParams& p) { return p.in_channels_per_group * p.out_channels_per_group <= 64; }

constexpr int64_t kGradWeightColumns = 512;  // positions summed per grad_weight GEMM call

// Positions per GEMM tile: wide for few channels (fewer calls), narrow for many (operands in L2).
int64_t tile_columns(const ConvTParams& p) {
  return std::clamp<int64_t>(32768 / std::max(p.in_channels_per_group, p.out_channels_per_group), 128, 1024) / 16 * 16;
}

// c (M x N, row stride ldc) += a (M x K) @ b (K x N), row-major with unit stride along rows. For float
// with leading dimensions below 2^24, oneDNN's AVX-512 brgemm micro-kernel that ATen exports (2-3x MKL's
// sgemm on AMD CPUs; oneDNN keeps them in int and fails from 2^25 on); otherwise at::addmm_ on views
// of the same memory. Called inside parallel regions: single-threaded.
template <typename scalar_t>
void gemm_accumulate(int64_t M, int64_t N, int64_t K, const scalar_t* a, int64_t lda, const scalar_t* b, int64_t ldb,
                     scalar_t* c, int64_t ldc) {
#if defined(CPUBLAS_BRGEMM_F32F32F32)
  constexpr int64_t kMaxBrgemmLeading = int64_t(1) << 24;
  if constexpr (std::is_same_v<scalar_t, float>) {
    if (std::max({lda, ldb, ldc}) < kMaxBrgemmLeading) {
      constexpr int64_t kRows = 64;  // rows per micro-kernel call: the A block stays in L2
      for (int64_t r0 = 0; r0 < M; r0 += kRows) {
        at::native::cpublas::brgemm(std::min(kRows, M - r0), N, K, lda, ldb, ldc, /*add_C=*/true, a + r0 * lda, b,
                                    c + r0 * ldc, /*is_vnni=*/false);
      }
      return;
    }
  }
#endif
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  at::from_blob(c, {M, N}, {ldc, 1}, options)
      .addmm_(at::from_blob(const_cast<scalar_t*>(a), {M, K}, {lda, 1}, options),
              at::from_blob(const_cast<scalar_t*>(b), {K, N}, {ldb, 1}, options));
}

// The weight as one (G, rows, cols) matrix batch per tap: taps[k][g] is w[g*Cig:(g+1)*Cig, :, k],
// transposed to (Cog, Cig) when `transposed`.
at::Tensor weight_taps(const at::Tensor& w, const ConvTParams& p, bool transposed) {
  const auto grouped = w.view({p.groups, p.in_channels_per_group, p.out_channels_per_group, p.kernel_size});
  return (transposed ? grouped.permute({3, 0, 2, 1}) : grouped.permute({3, 0, 1, 2})).contiguous();
}

// ---- GEMM path ---------------------------------------------------------------------------------
// Forward: tasks of (n, group, tile_columns outputs m of every phase), so one thread writes whole
// cache lines of y. Per phase a tile starts at the bias and accumulates, per tap k of the phase,
// W_k^T (Cog x Cig) @ x[n, group, m - shift_k] (a window of x read in place), then goes to
// y[n, :, m*stride + phase]. With stride 1 the tile is y itself.

template <typename scalar_t>
void forward_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& y,
                  const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group;
  const at::Tensor w_taps = weight_taps(w, p, /*transposed=*/true);  // (K, G, Cog, Cig)
  const scalar_t* w_data = w_taps.data_ptr<scalar_t>();
  const scalar_t* x_data = x.data_ptr<scalar_t>();
  const scalar_t* bias_data = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
  scalar_t* y_data = y.data_ptr<scalar_t>();
  const int64_t columns = tile_columns(p);
  const int64_t blocks = (phase_length(0, p.length_out, p.stride) + columns - 1) / columns;
  at::parallel_for(0, p.batch * p.groups * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<scalar_t> buffer(p.stride > 1 ? Cog * columns : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t block = task % blocks, g = (task / blocks) % p.groups, n = task / (blocks * p.groups);
      scalar_t* y_rows = y_data + (n * p.out_channels + g * Cog) * p.length_out;
      for (int64_t phase = 0; phase < std::min(p.stride, p.length_out); ++phase) {
        const int64_t m0 = block * columns;
        const int64_t width = std::min(columns, phase_length(phase, p.length_out, p.stride) - m0);
        if (width <= 0) continue;
        // the tile: y itself (stride 1) or the buffer
        scalar_t* tile = p.stride == 1 ? y_rows + m0 : buffer.data();
        const int64_t ld_tile = p.stride == 1 ? p.length_out : width;
        for (int64_t co = 0; co < Cog; ++co) {
          std::fill(tile + co * ld_tile, tile + co * ld_tile + width, bias_data ? bias_data[g * Cog + co] : scalar_t(0));
        }
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          if (tap.phase != phase) continue;
          const int64_t lo = std::max(m0, tap.shift), hi = std::min(m0 + width, p.length_in + tap.shift);
          if (lo >= hi) continue;
          gemm_accumulate<scalar_t>(Cog, hi - lo, Cig, w_data + (k * p.groups + g) * Cog * Cig, Cig,
                                    x_data + (n * p.in_channels + g * Cig) * p.length_in + (lo - tap.shift),
                                    p.length_in, tile + (lo - m0), ld_tile);
        }
        if (p.stride > 1) {
          for (int64_t co = 0; co < Cog; ++co) {
            scalar_t* out = y_rows + co * p.length_out + m0 * p.stride + phase;
            for (int64_t c = 0; c < width; ++c) out[c * p.stride] = tile[co * width + c];
          }
        }
      }
    }
  });
}

// Backward. grad_y's phases (grad_y[:, :, phase::stride], a copy only when stride > 1) are read in
// place: tap k of input i reads output m = i + shift_k of phase phase_k.
//   grad_x: tiles of (n, group, tile_columns inputs), accumulating W_k (Cig x Cog) @ phase window.
//   grad_w: per tap and group, the sum over the batch of window @ x^T (x transposed once).
template <typename scalar_t>
void backward_gemm(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTParams& p,
                   const at::Tensor& grad_x, const at::Tensor& grad_w) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group;
  const int64_t phase_capacity = phase_length(0, p.length_out, p.stride);
  at::Tensor phases = grad_y.unsqueeze(0);  // (stride, N, C_out, phase_capacity)
  if (p.stride > 1) {
    phases = at::empty({p.stride, p.batch, p.out_channels, phase_capacity}, grad_y.options());
    for (int64_t phase = 0; phase < std::min(p.stride, p.length_out); ++phase) {
      phases[phase]
          .narrow(2, 0, phase_length(phase, p.length_out, p.stride))
          .copy_(grad_y.slice(2, phase, p.length_out, p.stride));
    }
  }
  const scalar_t* phases_data = phases.data_ptr<scalar_t>();
  const int64_t phase_stride = p.batch * p.out_channels * phase_capacity;
  if (grad_x.defined()) {
    const at::Tensor w_taps = weight_taps(w, p, /*transposed=*/false);  // (K, G, Cig, Cog)
    const scalar_t* w_data = w_taps.data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.data_ptr<scalar_t>();
    const int64_t columns = tile_columns(p);
    const int64_t blocks = (p.length_in + columns - 1) / columns;
    at::parallel_for(0, p.batch * p.groups * blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t block = task % blocks, g = (task / blocks) % p.groups, n = task / (blocks * p.groups);
        const int64_t i0 = block * columns, width = std::min(columns, p.length_in - i0);
        scalar_t* tile = grad_x_data + (n * p.in_channels + g * Cig) * p.length_in + i0;
        for (int64_t ci = 0; ci < Cig; ++ci) std::fill(tile + ci * p.length_in, tile + ci * p.length_in + width, scalar_t(0));
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          const int64_t length = phase_length(tap.phase, p.length_out, p.stride);
          const int64_t lo = std::max(i0, -tap.shift), hi = std::min(i0 + width, length - tap.shift);
          if (lo >= hi) continue;
          const scalar_t* window =
              phases_data + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * phase_capacity + lo + tap.shift;
          gemm_accumulate<scalar_t>(Cig, hi - lo, Cog, w_data + (k * p.groups + g) * Cig * Cog, Cog, window,
                                    phase_capacity, tile + (lo - i0), p.length_in);
        }
      }
    });
  }
  if (grad_w.defined()) {
    // grad_w_k^T (Cog x Cig) = sum over n of grad_y window (Cog x positions) @ x^T window (positions x Cig):
    // one task per (tap, group), the batch and positions summed in order (deterministic).
    const at::Tensor x_t = x.view({p.batch, p.groups, Cig, p.length_in}).transpose(2, 3).contiguous();
    const scalar_t* x_t_data = x_t.data_ptr<scalar_t>();
    at::Tensor grad_w_taps = at::zeros({p.kernel_size, p.groups, Cog, Cig}, w.options());
    scalar_t* grad_w_data = grad_w_taps.data_ptr<scalar_t>();
    at::parallel_for(0, p.kernel_size * p.groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t k = task / p.groups, g = task % p.groups;
        const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
        const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
        for (int64_t n = 0; n < p.batch; ++n) {
          for (int64_t m = r.begin; m < r.end; m += kGradWeightColumns) {
            const int64_t count = std::min(kGradWeightColumns, r.end - m);
            gemm_accumulate<scalar_t>(
                Cog, Cig, count,
                phases_data + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * phase_capacity + m,
                phase_capacity, x_t_data + ((n * p.groups + g) * p.length_in + m - tap.shift) * Cig, Cig,
                grad_w_data + task * Cog * Cig, Cig);
          }
        }
      }
    });
    grad_w.copy_(grad_w_taps.permute({1, 3, 2, 0}).reshape(grad_w.sizes()));  // (K, G, Cog, Cig) -> (G*Cig, Cog, K)
  }
}

// ---- direct path (few channels per group) ----------------------------------------------------

template <typename scalar_t>
void forward_direct(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& y,
                    const ConvTParams& p) {
  const scalar_t* x_data = x.data_ptr<scalar_t>();
  const scalar_t* w_data = w.data_ptr<scalar_t>();
  const scalar_t* bias_data = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
  scalar_t* y_data = y.data_ptr<scalar_t>();
  // one task per output row (n, co): deterministic, no shared writes
  at::parallel_for(0, p.batch * p.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.out_channels, co = row % p.out_channels;
      const int64_t g = co / p.out_channels_per_group, co_in_group = co % p.out_channels_per_group;
      scalar_t* out = y_data + row * p.length_out;
      std::fill(out, out + p.length_out, bias_data ? bias_data[co] : scalar_t(0));
      for (int64_t ci = g * p.in_channels_per_group; ci < (g + 1) * p.in_channels_per_group; ++ci) {
        const scalar_t* in = x_data + (n * p.in_channels + ci) * p.length_in;
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const scalar_t weight = w_data[(ci * p.out_channels_per_group + co_in_group) * p.kernel_size + k];
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
          scalar_t* out_phase = out + tap.phase;
          for (int64_t m = r.begin; m < r.end; ++m) out_phase[m * p.stride] += weight * in[m - tap.shift];
        }
      }
    }
  });
}

template <typename scalar_t>
void backward_direct(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTParams& p,
                     const at::Tensor& grad_x, const at::Tensor& grad_w) {
  const scalar_t* grad_y_data = grad_y.data_ptr<scalar_t>();
  const scalar_t* x_data = x.data_ptr<scalar_t>();
  const scalar_t* w_data = w.data_ptr<scalar_t>();
  if (grad_x.defined()) {
    scalar_t* grad_x_data = grad_x.data_ptr<scalar_t>();
    // one task per input row (n, ci)
    at::parallel_for(0, p.batch * p.in_channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / p.in_channels, ci = row % p.in_channels;
        const int64_t g = ci / p.in_channels_per_group;
        scalar_t* out = grad_x_data + row * p.length_in;
        std::fill(out, out + p.length_in, scalar_t(0));
        for (int64_t co_in_group = 0; co_in_group < p.out_channels_per_group; ++co_in_group) {
          const int64_t co = g * p.out_channels_per_group + co_in_group;
          const scalar_t* in = grad_y_data + (n * p.out_channels + co) * p.length_out;
          for (int64_t k = 0; k < p.kernel_size; ++k) {
            const scalar_t weight = w_data[(ci * p.out_channels_per_group + co_in_group) * p.kernel_size + k];
            const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
            const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
            const scalar_t* in_phase = in + tap.phase;
            for (int64_t m = r.begin; m < r.end; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];
          }
        }
      }
    });
  }
  if (grad_w.defined()) {
    scalar_t* grad_w_data = grad_w.data_ptr<scalar_t>();
    // one task per weight element (ci, co_in_group, k): a dot product over batch and length
    at::parallel_for(0, grad_w.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t index = begin; index < end; ++index) {
        const auto [ci, co_in_group, k, co] = weight_element(index, p);
        const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
        const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
        scalar_t sum = 0;
        for (int64_t n = 0; n < p.batch; ++n) {
          const scalar_t* in = x_data + (n * p.in_channels + ci) * p.length_in;
          const scalar_t* out_phase = grad_y_data + (n * p.out_channels + co) * p.length_out + tap.phase;
          for (int64_t m = r.begin; m < r.end; ++m) sum += in[m - tap.shift] * out_phase[m * p.stride];
        }
        grad_w_data[index] = sum;
      }
    });
  }
}

}  // namespace

void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args) {
  const ConvTParams p = make_params(x, w, y, args);
  const at::Tensor x_c = to_compute(x), w_c = to_compute(w);
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? to_compute(*bias) : at::Tensor();
  const at::Tensor y_c = compute_buffer(y);
  AT_DISPATCH_FLOATING_TYPES(y_c.scalar_type(), "conv_transpose1d_cpu", [&] {
    if (use_direct_path(p)) {
      forward_direct<scalar_t>(x_c, w_c, bias_c, y_c, p);
    } else {
      forward_gemm<scalar_t>(x_c, w_c, bias_c, y_c, p);
    }
  });
  finish(y, y_c);
}

void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias) {
  const ConvTParams p = make_params(x, w, grad_y, args);
  const at::Tensor grad_y_c = to_compute(grad_y);
  if (grad_bias.defined()) grad_bias.copy_(grad_y_c.sum(at::IntArrayRef{0, 2}));
  if (!grad_x.defined() && !grad_w.defined()) return;
  const at::Tensor x_c = to_compute(x), w_c = to_compute(w);
  const at::Tensor grad_x_c = grad_x.defined() ? compute_buffer(grad_x) : at::Tensor();
  const at::Tensor grad_w_c = grad_w.defined() ? compute_buffer(grad_w) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(grad_y_c.scalar_type(), "conv_transpose1d_backward_cpu", [&] {
    if (use_direct_path(p)) {
      backward_direct<scalar_t>(grad_y_c, x_c, w_c, p, grad_x_c, grad_w_c);
    } else {
      backward_gemm<scalar_t>(grad_y_c, x_c, w_c, p, grad_x_c, grad_w_c);
    }
  });
  if (grad_x.defined()) finish(grad_x, grad_x_c);
  if (grad_w.defined()) finish(grad_w, grad_w_c);
}

}  // namespace convt::cpu
