// The operator library: schemas, the shape op the fake implementations use, CPU registrations.
#include <torch/library.h>

#include "convt.h"
#include "cpu/conv_transpose1d_cpu.h"

namespace convt {
namespace {

// The fake (meta) implementations in torch_convt_op/ops.py call this so that one C++ helper does
// all validation and shape arithmetic for real and symbolic sizes alike.
std::vector<c10::SymInt> output_size_op(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                                        at::IntArrayRef dilation) {
  return conv_transpose1d_output_size(input, weight, bias, make_args(stride, padding, output_padding, groups, dilation));
}

void check_backward_op(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                       at::IntArrayRef dilation) {
  check_backward_args(grad_output, input, weight, make_args(stride, padding, output_padding, groups, dilation));
}

}  // namespace

TORCH_LIBRARY(convt, m) {
  m.def(
      "conv_transpose1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, "
      "int[1] output_padding=0, int groups=1, int[1] dilation=1) -> Tensor");
  m.def(
      "conv_transpose1d_backward(Tensor grad_output, Tensor input, Tensor weight, int[1] stride, int[1] padding, "
      "int[1] output_padding, int groups, int[1] dilation, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def(
      "_conv_transpose1d_output_size(Tensor input, Tensor weight, Tensor? bias, int[1] stride, int[1] padding, "
      "int[1] output_padding, int groups, int[1] dilation) -> SymInt[]",
      TORCH_FN(output_size_op));
  m.def(
      "_conv_transpose1d_backward_check(Tensor grad_output, Tensor input, Tensor weight, int[1] stride, int[1] padding, "
      "int[1] output_padding, int groups, int[1] dilation) -> ()",
      TORCH_FN(check_backward_op));
}

TORCH_LIBRARY_IMPL(convt, CPU, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_op<cpu::forward>));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_op<cpu::backward>));
}

}  // namespace convt
