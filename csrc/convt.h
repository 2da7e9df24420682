// The torch-facing vocabulary of the CPU and CUDA paths: the integer arguments, the one
// shape-and-validation helper (used by the CPU path, the CUDA path and — through the
// convt::_conv_transpose1d_output_size op — the fake implementation), make_params and the op
// front ends. The params struct and the polyphase index formulas are in problem.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/macros/Macros.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "problem.h"

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

// x and y batched (3-D); y is the forward's output or the backward's grad_output.
ConvTParams make_params(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, const ConvTArgs& args);

struct SharedStep;  // (plan.h)
// The arguments of a shared step's reduced layer, at stride/step and dilation/step (SharedStep,
// docs/design.md §2.1); its y holds the reached positions (SharedStep::positions)
ConvTArgs reduced_args(const ConvTArgs& args, const SharedStep& shared);

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

}  // namespace convt
