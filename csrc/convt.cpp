#include "convt.h"

#include <ATen/ATen.h>

#include "plan.h"

namespace convt {
namespace {

// Numbers in error messages are formatted here (std::to_string), never streamed into TORCH_CHECK's
// std::ostream: where torch's libraries and the compiler's libstdc++ disagree on locale facets
// (pytorch/pytorch#81543; torch 2.11 on Ubuntu 24.04's g++ 13.3), streaming an integer crashes.
std::string text(int64_t value) { return std::to_string(value); }
std::string text(const c10::SymInt& value) {
  const auto concrete = value.maybe_as_int();
  return concrete ? std::to_string(*concrete) : value.toSymNode()->str();
}
template <typename T>
std::string text(c10::ArrayRef<T> values) {
  std::string joined = "[";
  for (size_t i = 0; i < values.size(); ++i) joined += (i ? ", " : "") + text(values[i]);
  return joined + "]";
}

int64_t single_value(at::IntArrayRef values, const char* name) {
  TORCH_CHECK(values.size() == 1, "conv_transpose1d: expected ", name,
              " to be a single integer value or a list of 1 value, but got ", name, "=", text(values));
  return values[0];
}

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void check_same_dtype_and_device(const at::Tensor& input, const at::Tensor& other, const char* name) {
  TORCH_CHECK(other.scalar_type() == input.scalar_type(), "conv_transpose1d: expected ", name,
              " to have the same dtype as input (", input.scalar_type(), "), but got ", name, " of dtype ",
              other.scalar_type());
  TORCH_CHECK(other.device() == input.device(), "conv_transpose1d: expected ", name,
              " to be on the same device as input (", input.device().str(), "), but got ", name, " on ", other.device().str());
}

}  // namespace

ConvTArgs make_args(at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                    int64_t groups, at::IntArrayRef dilation) {
  ConvTArgs a{single_value(stride, "stride"), single_value(padding, "padding"),
              single_value(output_padding, "output_padding"), single_value(dilation, "dilation"), groups};
  TORCH_CHECK(a.stride >= 1, "conv_transpose1d: expected stride >= 1, but got stride=", text(a.stride));
  TORCH_CHECK(a.dilation >= 1, "conv_transpose1d: expected dilation >= 1, but got dilation=", text(a.dilation));
  TORCH_CHECK(a.padding >= 0, "conv_transpose1d: expected padding >= 0, but got padding=", text(a.padding));
  TORCH_CHECK(a.groups >= 1, "conv_transpose1d: expected groups >= 1, but got groups=", text(a.groups));
  TORCH_CHECK(a.output_padding >= 0, "conv_transpose1d: expected output_padding >= 0, but got output_padding=",
              text(a.output_padding));
  // Below 2^31 each, and with L_in and K below 2^31 too, every product in the index math of convt.h
  // ((L_in - 1)*stride, dilation*(K - 1), ...) stays far inside int64.
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"stride", a.stride}, {"padding", a.padding},
                                    {"output_padding", a.output_padding}, {"dilation", a.dilation}, {"groups", a.groups}}) {
    TORCH_CHECK(value <= kMaxArgument, "conv_transpose1d: expected ", name, " < 2^31, but got ", name, "=", text(value));
  }
  TORCH_CHECK(a.output_padding < a.stride || a.output_padding < a.dilation,
              "conv_transpose1d: expected output_padding to be smaller than stride or dilation, but got output_padding=",
              text(a.output_padding), ", stride=", text(a.stride), ", dilation=", text(a.dilation));
  return a;
}

std::vector<c10::SymInt> conv_transpose1d_output_size(const at::Tensor& input, const at::Tensor& weight,
                                                      const std::optional<at::Tensor>& bias, const ConvTArgs& a) {
  TORCH_CHECK(input.dim() == 2 || input.dim() == 3,
              "conv_transpose1d: expected input to be 2-D (C_in, L_in) or 3-D (N, C_in, L_in), but got input of size ",
              text(input.sym_sizes()));
  TORCH_CHECK(weight.dim() == 3, "conv_transpose1d: expected weight to be 3-D (C_in, C_out/groups, K), but got weight of size ",
              text(weight.sym_sizes()));
  TORCH_CHECK(is_supported_dtype(input.scalar_type()),
              "conv_transpose1d: expected input to be float16, bfloat16, float32 or float64, but got ", input.scalar_type());
  check_same_dtype_and_device(input, weight, "weight");

  const c10::SymInt in_channels = input.sym_size(-2);
  const c10::SymInt length_in = input.sym_size(-1);
  const c10::SymInt kernel_size = weight.sym_size(2);
  TORCH_SYM_CHECK(in_channels.sym_ge(1), "conv_transpose1d: expected input to have at least 1 channel, but got input of size ",
                  text(input.sym_sizes()));
  TORCH_SYM_CHECK(length_in.sym_ge(1), "conv_transpose1d: expected input to have length (last dim) of at least 1, but got input of size ",
                  text(input.sym_sizes()));
  TORCH_SYM_CHECK(length_in.sym_le(kMaxArgument), "conv_transpose1d: expected input length (last dim) < 2^31, but got input of size ",
                  text(input.sym_sizes()));
  TORCH_SYM_CHECK(weight.sym_size(0).sym_eq(in_channels), "conv_transpose1d: expected input", text(input.sym_sizes()),
                  " to have ", text(weight.sym_size(0)), " channels (weight.size(0)), but got ", text(in_channels),
                  " channels instead");
  TORCH_SYM_CHECK((in_channels % a.groups).sym_eq(0), "conv_transpose1d: expected groups (", text(a.groups),
                  ") to divide the input channels (", text(in_channels), ")");
  TORCH_SYM_CHECK(weight.sym_size(1).sym_ge(1), "conv_transpose1d: expected weight.size(1) (C_out/groups) >= 1, but got weight of size ",
                  text(weight.sym_sizes()));
  TORCH_SYM_CHECK(kernel_size.sym_ge(1), "conv_transpose1d: expected weight.size(2) (kernel size) >= 1, but got weight of size ",
                  text(weight.sym_sizes()));
  TORCH_SYM_CHECK(kernel_size.sym_le(kMaxArgument), "conv_transpose1d: expected weight.size(2) (kernel size) < 2^31, but got weight of size ",
                  text(weight.sym_sizes()));

  const c10::SymInt out_channels = weight.sym_size(1) * a.groups;
  if (bias.has_value() && bias->defined()) {
    check_same_dtype_and_device(input, *bias, "bias");
    TORCH_CHECK(bias->dim() == 1, "conv_transpose1d: expected bias to be 1-D of size (C_out,) = (", text(out_channels),
                "), but got bias of size ", text(bias->sym_sizes()));
    TORCH_SYM_CHECK(bias->sym_size(0).sym_eq(out_channels), "conv_transpose1d: expected bias to be 1-D of size (C_out,) = (",
                    text(out_channels), "), but got bias of size ", text(bias->sym_sizes()));
  }

  const c10::SymInt length_out = output_length(length_in, kernel_size, a);
  TORCH_SYM_CHECK(length_out.sym_ge(1), "conv_transpose1d: the output length (L_out) would be ", text(length_out),
                  " = (L_in - 1)*stride - 2*padding + dilation*(K - 1) + output_padding + 1 with L_in=", text(length_in),
                  ", K=", text(kernel_size), ", stride=", text(a.stride), ", padding=", text(a.padding),
                  ", dilation=", text(a.dilation), ", output_padding=", text(a.output_padding), "; it must be at least 1 (padding too large?)");
  if (input.dim() == 2) return {out_channels, length_out};
  return {input.sym_size(0), out_channels, length_out};
}

void check_backward_args(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                         const ConvTArgs& args) {
  const auto expected = conv_transpose1d_output_size(input, weight, std::nullopt, args);
  check_same_dtype_and_device(input, grad_output, "grad_output");
  TORCH_CHECK(grad_output.sym_sizes() == c10::SymIntArrayRef(expected),
              "conv_transpose1d_backward: expected grad_output of size ", text(c10::SymIntArrayRef(expected)),
              " (the forward's output), but got grad_output of size ", text(grad_output.sym_sizes()));
}

ConvTParams make_params(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, const ConvTArgs& a) {
  ConvTParams p;
  p.batch = x.size(0);
  p.in_channels = x.size(1);
  p.length_in = x.size(2);
  p.groups = a.groups;
  p.in_channels_per_group = p.in_channels / a.groups;
  p.out_channels_per_group = w.size(1);
  p.out_channels = p.out_channels_per_group * a.groups;
  p.kernel_size = w.size(2);
  p.length_out = y.size(2);
  p.stride = a.stride;
  p.padding = a.padding;
  p.dilation = a.dilation;
  p.x_batch_stride = x.stride(0);
  p.x_channel_stride = x.stride(1);
  p.x_length_stride = x.stride(2);
  p.w_in_stride = w.stride(0);
  p.w_out_stride = w.stride(1);
  p.w_tap_stride = w.stride(2);
  p.y_batch_stride = y.stride(0);
  p.y_channel_stride = y.stride(1);
  p.y_length_stride = y.stride(2);
  return p;
}

}  // namespace convt

namespace convt {

ConvTArgs reduced_args(const ConvTArgs& args, const SharedStep& shared) {
  ConvTArgs reduced = args;
  reduced.stride = shared.stride, reduced.padding = shared.padding, reduced.dilation = shared.dilation;
  reduced.output_padding = 0;  // (the kernels take L_out from their output)
  return reduced;
}

namespace {

// The forward of a layer of a shared step (SharedStep): the reduced layer's outputs through a scratch
// of at most shared_step_scratch_bytes, batch elements at a time, or windows of positions [m0, m1) of
// one, each over the inputs that reach them: i in [i0, i1), i0 = max(0, floor((m0 + padding - (K -
// 1)*dilation) / stride)), i1 = min(L_in, floor((m1 - 1 + padding) / stride) + 1), window position
// m - m0 = (i - i0)*stride - (padding + m0 - i0*stride) + k*dilation (all of the reduced layer's):
// the window's padding is at least 0. y is written once, in blocks of step positions: block m holds
// the reduced layer's position m at first and the bias elsewhere (one pass, every block whole); the
// L_out mod step positions past the last whole block hold the bias, and position m = L_out div step
// where first is among them.
void forward_shared_step(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
                         const ConvTArgs& args, const SharedStep& shared, ForwardKernel kernel) {
  const at::Tensor bias_values = bias.has_value() && bias->defined() ? bias->view({1, -1, 1}) : at::zeros({}, y.options());
  const int64_t positions = shared.positions(y.size(2)), step = shared.step;
  const int64_t blocks = y.size(2) / step, tail = y.size(2) - blocks * step;
  if (tail > 0 || positions == 0) {
    const at::Tensor rest = y.narrow(2, blocks * step, positions == 0 ? y.size(2) - blocks * step : tail);
    rest.copy_(bias_values.expand_as(rest));
  }
  if (positions == 0) {
    const at::Tensor whole = y.narrow(2, 0, blocks * step);
    whole.copy_(bias_values.expand_as(whole));
    return;
  }
  const at::Tensor y_blocks = y.narrow(2, 0, blocks * step).unflatten(2, {blocks, step});  // (N, C_out, blocks, step)
  const at::Tensor reached_slot = at::arange(step, y.options().dtype(at::kLong)).eq(shared.first);  // (step,)
  const at::Tensor block_bias = bias_values.unsqueeze(-1);
  const int64_t batch = x.size(0), channels = y.size(1), length_in = x.size(2), span = (w.size(2) - 1) * shared.dilation;
  const int64_t scratch_rows = std::max<int64_t>(1, shared_step_scratch_bytes() / y.element_size() / channels);
  const int64_t batch_chunk = std::max<int64_t>(1, scratch_rows / positions);
  const int64_t window = std::min(positions, scratch_rows);
  ConvTArgs window_args = reduced_args(args, shared);
  for (int64_t n0 = 0; n0 < batch; n0 += batch_chunk) {
    const int64_t count = std::min(batch_chunk, batch - n0);
    for (int64_t m0 = 0; m0 < positions; m0 += window) {
      const int64_t m1 = std::min(positions, m0 + window);
      const int64_t i0 = std::max<int64_t>(0, floor_div(m0 + shared.padding - span, shared.stride));
      const int64_t i1 = std::min(length_in, floor_div(m1 - 1 + shared.padding, shared.stride) + 1);
      const at::Tensor scratch = at::empty({count, channels, m1 - m0}, y.options());
      if (i1 > i0) {
        window_args.padding = shared.padding + m0 - i0 * shared.stride;
        kernel(x.narrow(0, n0, count).narrow(2, i0, i1 - i0), w, bias, scratch, window_args);
      } else {  // no input reaches these positions: the bias alone
        scratch.copy_(bias_values.expand_as(scratch));
      }
      const int64_t whole = std::min(m1, blocks) - m0;
      if (whole > 0) {
        at::Tensor target = y_blocks.narrow(0, n0, count).narrow(2, m0, whole);
        at::where_out(target, reached_slot, scratch.narrow(2, 0, whole).unsqueeze(3), block_bias);
      }
      if (m1 > blocks) y.narrow(0, n0, count).select(2, blocks * step + shared.first).copy_(scratch.select(2, blocks - m0));
    }
  }
}

}  // namespace

at::Tensor conv_transpose1d_forward(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                                    int64_t groups, at::IntArrayRef dilation, ForwardKernel kernel) {
  const ConvTArgs args = make_args(stride, padding, output_padding, groups, dilation);
  const auto sizes = conv_transpose1d_output_size(input, weight, bias, args);
  at::Tensor output = at::empty(C10_AS_INTARRAYREF_SLOW(sizes), input.options());
  if (output.numel() > 0) {
    const at::Tensor x = as_batched(input), y = as_batched(output);
    const auto shared = shared_step(make_params(x, weight, y, args), input.is_cuda());
    if (shared && shared->forward) {
      forward_shared_step(x, weight, bias, y, args, *shared, kernel);
    } else {
      kernel(x, weight, bias, y, args);
    }
  }
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose1d_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation,
    std::array<bool, 3> output_mask, BackwardKernel kernel) {
  const ConvTArgs args = make_args(stride, padding, output_padding, groups, dilation);
  check_backward_args(grad_output, input, weight, args);
  const int64_t out_channels = weight.size(1) * args.groups;
  at::Tensor grad_input = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::empty({0}, input.options());
  at::Tensor grad_weight = output_mask[1] ? at::empty(weight.sizes(), weight.options()) : at::empty({0}, weight.options());
  at::Tensor grad_bias = output_mask[2] ? at::empty({out_channels}, weight.options()) : at::empty({0}, weight.options());
  if (input.numel() == 0) {  // an empty batch: nothing flows back
    grad_weight.zero_();
    grad_bias.zero_();
  } else if (output_mask[0] || output_mask[1] || output_mask[2]) {
    const at::Tensor grad_y = as_batched(grad_output), x = as_batched(input);
    const at::Tensor grad_x = output_mask[0] ? as_batched(grad_input) : at::Tensor();
    const at::Tensor grad_w = output_mask[1] ? grad_weight : at::Tensor();
    const at::Tensor grad_b = output_mask[2] ? grad_bias : at::Tensor();
    const auto shared = shared_step(make_params(x, weight, grad_y, args), input.is_cuda());
    if (shared && shared->backward && (grad_x.defined() || grad_w.defined())) {
      // grad_x and grad_w read grad_y at the positions the taps reach only: the reduced layer's
      // grad_y, those positions copied out (contiguous: the layout the kernels read fastest)
      const int64_t positions = shared->positions(grad_y.size(2));
      if (positions == 0) {
        if (grad_x.defined()) grad_x.zero_();
        if (grad_w.defined()) grad_w.zero_();
      } else {
        const at::Tensor reached = grad_y.slice(2, shared->first, grad_y.size(2), shared->step).contiguous();
        kernel(reached, x, weight, reduced_args(args, *shared), grad_x, grad_w, at::Tensor());
      }
      if (grad_b.defined()) kernel(grad_y, x, weight, args, at::Tensor(), at::Tensor(), grad_b);
    } else {
      kernel(grad_y, x, weight, args, grad_x, grad_w, grad_b);
    }
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace convt
