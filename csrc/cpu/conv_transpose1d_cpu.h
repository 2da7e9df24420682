#pragma once

#include "convt.h"

namespace convt::cpu {

// The CPU kernels behind convt::conv_transpose1d and its backward (ForwardKernel / BackwardKernel).
void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args);
void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias);

}  // namespace convt::cpu
