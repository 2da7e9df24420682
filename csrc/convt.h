// The shared vocabulary of the CPU and CUDA paths: the integer arguments, the one
// shape-and-validation helper (used by the CPU path, the CUDA path and — through the
// convt::_conv_transpose1d_output_size op — the fake implementation), the params struct,
// and the polyphase index formulas.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/macros/Macros.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace convt {

// The largest stride, padding, output_padding, dilation, groups, L_in and K accepted (2^31 - 1).
constexpr int64_t kMaxArgument = (int64_t(1) << 31) - 1;

// stride, padding, output_padding, groups and dilation as the schema receives them
// (each list argument an int or a 1-element list), validated.
struct ConvTArgs {
  int64_t stride;
  int64_t padding;
  int64_t output_padding;
  int64_t dilation;
  int64_t groups;
};

ConvTArgs make_args(at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                    int64_t groups, at::IntArrayRef dilation);

// L_out = (L_in - 1)*stride - 2*padding + dilation*(K - 1) + output_padding + 1
template <typename Int>
Int output_length(const Int& length_in, const Int& kernel_size, const ConvTArgs& a) {
  return (length_in - 1) * a.stride - 2 * a.padding + (kernel_size - 1) * a.dilation + a.output_padding + 1;
}

// Checks every argument the way torch.nn.functional.conv_transpose1d does (errors name the
// argument) and returns the output's sizes: {N, C_out, L_out}, or {C_out, L_out} unbatched.
// Works on real, meta and fake tensors (symbolic sizes).
std::vector<c10::SymInt> conv_transpose1d_output_size(const at::Tensor& input, const at::Tensor& weight,
                                                      const std::optional<at::Tensor>& bias, const ConvTArgs& args);

// The same checks for the backward op, plus grad_output's shape.
void check_backward_args(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                         const ConvTArgs& args);

// A 2-D (unbatched) tensor as a batch of one; a 3-D tensor as it is.
inline at::Tensor as_batched(const at::Tensor& t) { return t.dim() == 2 ? t.unsqueeze(0) : t; }

// Sizes and element strides of one problem, all int64: x is (N, C_in, L_in), w is
// (C_in, C_out/groups, K), y is (N, C_out, L_out). Filled in one place: make_params.
struct ConvTParams {
  int64_t batch, in_channels, out_channels, groups;
  int64_t in_channels_per_group, out_channels_per_group;
  int64_t kernel_size, length_in, length_out;
  int64_t stride, padding, dilation;
  int64_t x_batch_stride, x_channel_stride, x_length_stride;
  int64_t w_in_stride, w_out_stride, w_tap_stride;
  int64_t y_batch_stride, y_channel_stride, y_length_stride;
};

// x and y batched (3-D); y is the forward's output or the backward's grad_output.
ConvTParams make_params(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, const ConvTArgs& args);

// The device-independent front end of both ops, shared by the CPU and CUDA registrations: it
// validates, allocates fresh contiguous outputs, treats unbatched input as a batch of one, skips
// empty problems, and hands the kernel batched (3-D) tensors.
using ForwardKernel = void (*)(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                               const at::Tensor& y, const ConvTArgs& args);
// grad_input / grad_weight / grad_bias are undefined where output_mask is false.
using BackwardKernel = void (*)(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
                                const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias);

at::Tensor conv_transpose1d_forward(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                                    int64_t groups, at::IntArrayRef dilation, ForwardKernel kernel);

// Outputs that output_mask leaves out come back as empty (0-element) tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose1d_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation,
    std::array<bool, 3> output_mask, BackwardKernel kernel);

// The schema-shaped entry point of one device's kernels, for TORCH_LIBRARY_IMPL.
template <ForwardKernel kKernel>
at::Tensor forward_op(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                      at::IntArrayRef dilation) {
  return conv_transpose1d_forward(input, weight, bias, stride, padding, output_padding, groups, dilation, kKernel);
}

template <BackwardKernel kKernel>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(const at::Tensor& grad_output, const at::Tensor& input,
                                                           const at::Tensor& weight, at::IntArrayRef stride,
                                                           at::IntArrayRef padding, at::IntArrayRef output_padding,
                                                           int64_t groups, at::IntArrayRef dilation,
                                                           std::array<bool, 3> output_mask) {
  return conv_transpose1d_backward(grad_output, input, weight, stride, padding, output_padding, groups, dilation,
                                   output_mask, kKernel);
}

// ---------------------------------------------------------------------------------------------
// Polyphase indexing. Input position i feeds output position j through tap k:
//
//     j = i*stride - padding + k*dilation.
//
// Writing k*dilation - padding = shift_k*stride + phase_k with phase_k in [0, stride) (floor
// division), j = (i + shift_k)*stride + phase_k: tap k feeds only the outputs of phase phase_k
// (j mod stride), and output m of that phase (j = m*stride + phase) takes input i = m - shift_k.
// So the transposed convolution is `stride` stride-1 correlations, one per phase, each over the
// taps of that phase. No multiplications by inserted zeros.
// ---------------------------------------------------------------------------------------------
C10_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
// a - floor_div(a, b) * b: in [0, b) for b > 0
C10_HOST_DEVICE inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

struct Tap {
  int64_t phase;  // the output phase j mod stride that this tap feeds
  int64_t shift;  // output m of that phase reads input i = m - shift
};

C10_HOST_DEVICE inline Tap tap_of(int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t offset = k * dilation - padding;
  const int64_t shift = floor_div(offset, stride);
  return {offset - shift * stride, shift};
}

// Number of outputs j in [0, length_out) with j mod stride == phase.
C10_HOST_DEVICE inline int64_t phase_length(int64_t phase, int64_t length_out, int64_t stride) {
  return phase < length_out ? (length_out - phase + stride - 1) / stride : 0;
}

// The outputs m in [begin, end) of tap k's phase that read an input inside [0, length_in).
struct TapRange {
  int64_t begin, end;
  C10_HOST_DEVICE bool empty() const { return begin >= end; }
};

C10_HOST_DEVICE inline TapRange tap_range(const Tap& tap, int64_t phase_len, int64_t length_in) {
  const int64_t begin = tap.shift > 0 ? tap.shift : 0;
  const int64_t end = length_in + tap.shift < phase_len ? length_in + tap.shift : phase_len;
  return {begin, end};
}

// Element `index` of a contiguous (C_in, C_out/groups, K) weight (or grad_weight), and the output
// channel co it connects to.
struct WeightElement {
  int64_t ci, co_in_group, k, co;
};

C10_HOST_DEVICE inline WeightElement weight_element(int64_t index, const ConvTParams& p) {
  const int64_t k = index % p.kernel_size;
  const int64_t co_in_group = (index / p.kernel_size) % p.out_channels_per_group;
  const int64_t ci = index / (p.kernel_size * p.out_channels_per_group);
  return {ci, co_in_group, k, (ci / p.in_channels_per_group) * p.out_channels_per_group + co_in_group};
}

}  // namespace convt
