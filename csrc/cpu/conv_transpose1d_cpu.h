#pragma once

#include <string>
#include <vector>

#include "convt.h"

namespace convt::cpu {

// The CPU kernels behind convt::conv_transpose1d and its backward (ForwardKernel / BackwardKernel).
void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args);
void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias);

// The form of each pass (forward, grad_input, grad_weight, grad_bias) that this CPU runs for a problem
// of this compute dtype, as "kernel=NAME vector_bits=B" (NAME a CONVT_CPU_FORMS name; B the AVX2 forms'
// vector width, 0 where they do not run), CONVT_CPU_FORMS applied: the CPU half of convt::_plan.
std::vector<std::string> describe_plan(const ConvTParams& p, at::ScalarType dtype);

}  // namespace convt::cpu
