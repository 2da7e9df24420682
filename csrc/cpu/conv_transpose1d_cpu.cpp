// CPU kernels. Two paths, chosen in one place (use_direct_path):
//  - GEMM: per tap k, a batched GEMM over the groups between the weight tap and a shifted window of
//    x, accumulated into the phase of y that the tap feeds (convt.h, "Polyphase indexing"). For
//    stride 1 the single phase is y itself; otherwise phases are accumulated in a phase-major
//    buffer and interleaved into y once.
//  - direct: loops for few channels per group (depthwise), where GEMMs would be 1x1 matrices.
// float16 / bfloat16 are computed in float32, float64 in float64.
#include "cpu/conv_transpose1d_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The weight as one (G, rows, cols) matrix batch per tap: taps[k][g] is w[g*Cig:(g+1)*Cig, :, k],
// transposed to (Cog, Cig) when `transposed`.
at::Tensor weight_taps(const at::Tensor& w, const ConvTParams& p, bool transposed) {
  const auto grouped = w.view({p.groups, p.in_channels_per_group, p.out_channels_per_group, p.kernel_size});
  return (transposed ? grouped.permute({3, 0, 2, 1}) : grouped.permute({3, 0, 1, 2})).contiguous();
}

// (G, channels_per_group, columns [begin, begin + count)) of one batch element of a (N, C, L) tensor.
at::Tensor group_window(const at::Tensor& t, int64_t n, int64_t groups, int64_t begin, int64_t count) {
  return t.select(0, n).view({groups, -1, t.size(-1)}).narrow(2, begin, count);
}

// ---- GEMM path -----------------------------------------------------------------------------

void forward_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& y,
                  const ConvTParams& p) {
  const int64_t phase_capacity = ceil_div(p.length_out, p.stride);
  // phases[phase] holds y[:, :, phase::stride]; with stride 1 it is y.
  const at::Tensor phases =
      p.stride == 1 ? y.unsqueeze(0) : at::empty({p.stride, p.batch, p.out_channels, phase_capacity}, y.options());
  if (bias.defined()) {
    phases.copy_(bias.view({1, 1, p.out_channels, 1}).expand_as(phases));
  } else {
    phases.zero_();
  }
  const at::Tensor w_taps = weight_taps(w, p, /*transposed=*/true);  // (K, G, Cog, Cig)
  for (int64_t k = 0; k < p.kernel_size; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
    if (r.empty()) continue;
    for (int64_t n = 0; n < p.batch; ++n) {
      group_window(phases[tap.phase], n, p.groups, r.begin, r.end - r.begin)
          .baddbmm_(w_taps[k], group_window(x, n, p.groups, r.begin - tap.shift, r.end - r.begin));
    }
  }
  if (p.stride > 1) {
    for (int64_t phase = 0; phase < std::min(p.stride, p.length_out); ++phase) {
      y.slice(2, phase, p.length_out, p.stride)
          .copy_(phases[phase].narrow(2, 0, phase_length(phase, p.length_out, p.stride)));
    }
  }
}

void backward_gemm(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTParams& p,
                   const at::Tensor& grad_x, const at::Tensor& grad_w) {
  const int64_t phase_capacity = ceil_div(p.length_out, p.stride);
  // phases[phase] holds grad_y[:, :, phase::stride], as in the forward.
  at::Tensor phases = grad_y.unsqueeze(0);
  if (p.stride > 1) {
    phases = at::empty({p.stride, p.batch, p.out_channels, phase_capacity}, grad_y.options());
    for (int64_t phase = 0; phase < std::min(p.stride, p.length_out); ++phase) {
      phases[phase]
          .narrow(2, 0, phase_length(phase, p.length_out, p.stride))
          .copy_(grad_y.slice(2, phase, p.length_out, p.stride));
    }
  }
  at::Tensor w_taps, grad_w_taps;
  if (grad_x.defined()) {
    grad_x.zero_();
    w_taps = weight_taps(w, p, /*transposed=*/false);  // (K, G, Cig, Cog)
  }
  if (grad_w.defined()) {
    grad_w_taps = at::zeros({p.kernel_size, p.groups, p.in_channels_per_group, p.out_channels_per_group}, w.options());
  }
  for (int64_t k = 0; k < p.kernel_size; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
    if (r.empty()) continue;
    for (int64_t n = 0; n < p.batch; ++n) {
      const at::Tensor grad_y_window = group_window(phases[tap.phase], n, p.groups, r.begin, r.end - r.begin);
      if (grad_x.defined()) {
        group_window(grad_x, n, p.groups, r.begin - tap.shift, r.end - r.begin).baddbmm_(w_taps[k], grad_y_window);
      }
      if (grad_w.defined()) {
        grad_w_taps[k].baddbmm_(group_window(x, n, p.groups, r.begin - tap.shift, r.end - r.begin),
                                grad_y_window.transpose(1, 2));
      }
    }
  }
  if (grad_w.defined()) {
    // (K, G, Cig, Cog) -> (G*Cig, Cog, K)
    grad_w.copy_(grad_w_taps.permute({1, 2, 3, 0}).reshape(grad_w.sizes()));
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
        const int64_t k = index % p.kernel_size;
        const int64_t co_in_group = (index / p.kernel_size) % p.out_channels_per_group;
        const int64_t ci = index / (p.kernel_size * p.out_channels_per_group);
        const int64_t co = (ci / p.in_channels_per_group) * p.out_channels_per_group + co_in_group;
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
  if (use_direct_path(p)) {
    AT_DISPATCH_FLOATING_TYPES(y_c.scalar_type(), "conv_transpose1d_cpu", [&] {
      forward_direct<scalar_t>(x_c, w_c, bias_c, y_c, p);
    });
  } else {
    forward_gemm(x_c, w_c, bias_c, y_c, p);
  }
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
  if (use_direct_path(p)) {
    AT_DISPATCH_FLOATING_TYPES(grad_y_c.scalar_type(), "conv_transpose1d_backward_cpu", [&] {
      backward_direct<scalar_t>(grad_y_c, x_c, w_c, p, grad_x_c, grad_w_c);
    });
  } else {
    backward_gemm(grad_y_c, x_c, w_c, p, grad_x_c, grad_w_c);
  }
  if (grad_x.defined()) finish(grad_x, grad_x_c);
  if (grad_w.defined()) finish(grad_w, grad_w_c);
}

}  // namespace convt::cpu
