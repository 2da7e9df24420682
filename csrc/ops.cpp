// The operator library: schemas, the shape op the fake implementations use, CPU registrations.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "convt.h"
#include "cpu/conv_transpose1d_cpu.h"
#include "plan.h"

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

// What the planner picks for a problem of contiguous tensors (sizes: N, C_in, C_out, K, L_in,
// stride, padding, output_padding, dilation, groups) on a card ("h100", "h200", "a100", or "cuda":
// the current device) or on this process's CPU ("cpu": cpu::describe_plan): [forward, grad_input,
// grad_weight, grad_bias], each "kernel=... key=value ...".
std::vector<std::string> plan_op(at::IntArrayRef sizes, at::ScalarType dtype, bool tf32, c10::string_view device) {
  TORCH_CHECK(sizes.size() == 10, "_plan: sizes must be [N, C_in, C_out, K, L_in, stride, padding, output_padding, dilation, groups]");
  const int64_t n = sizes[0], c_in = sizes[1], c_out = sizes[2], k = sizes[3], l_in = sizes[4];
  const int64_t stride = sizes[5], padding = sizes[6], output_padding = sizes[7], dilation = sizes[8], groups = sizes[9];
  TORCH_CHECK(n >= 1 && c_in >= 1 && c_out >= 1 && k >= 1 && l_in >= 1 && stride >= 1 && padding >= 0 &&
                  output_padding >= 0 && dilation >= 1 && groups >= 1 && c_in % groups == 0 && c_out % groups == 0,
              "_plan: sizes out of range");
  const ConvTArgs args = make_args({stride}, {padding}, {output_padding}, groups, {dilation});
  TORCH_CHECK(output_length(l_in, k, args) >= 1, "_plan: the output would be empty");
  // contiguous meta tensors of these sizes: the op's own validation and params, no data
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(dtype);
  const at::Tensor x = at::empty({n, c_in, l_in}, meta), w = at::empty({c_in, c_out / groups, k}, meta);
  const at::Tensor y = at::empty(C10_AS_INTARRAYREF_SLOW(conv_transpose1d_output_size(x, w, std::nullopt, args)), meta);
  const ConvTParams layer = make_params(x, w, y, args);
  // a shared step's passes that run as the reduced layer's (convt.cpp) have its plans, tagged with
  // the step; grad_bias sums the whole grad_y on the layer's own plan (that pass alone)
  const auto shared = shared_step(layer, device != "cpu");
  ConvTParams reduced = layer;
  if (shared) {
    const at::Tensor reached = at::empty({n, c_out, std::max<int64_t>(1, shared->positions(layer.length_out))}, meta);
    reduced = make_params(x, w, reached, reduced_args(args, *shared));
  }
  const bool forward_reduced = shared && shared->forward, backward_reduced = shared && shared->backward;
  const ConvTParams& forward = forward_reduced ? reduced : layer;
  const ConvTParams& backward = backward_reduced ? reduced : layer;
  const std::string step = shared ? " shared_step=" + std::to_string(shared->step) : "";
  const std::string forward_tag = forward_reduced ? step : "", backward_tag = backward_reduced ? step : "";
  if (device == "cpu") {
    const std::vector<std::string> layer_plans = cpu::describe_plan(layer, dtype);
    const std::vector<std::string> reduced_plans = shared ? cpu::describe_plan(reduced, dtype) : layer_plans;
    const std::vector<std::string>& forward_plans = forward_reduced ? reduced_plans : layer_plans;
    const std::vector<std::string>& backward_plans = backward_reduced ? reduced_plans : layer_plans;
    return {forward_plans[0] + forward_tag, backward_plans[1] + backward_tag, backward_plans[2] + backward_tag, layer_plans[3]};
  }
  DeviceLimits limits{};
  if (device == "h100" || device == "h200") {
    limits = DeviceLimits::h100();
  } else if (device == "a100") {
    limits = DeviceLimits::a100();
  } else {
    TORCH_CHECK(device == "cuda", "_plan: device must be h100, h200, a100, cuda or cpu, not ", device);
    TORCH_CHECK(current_cuda_device_limits != nullptr, "_plan: this build of torch_convt_op has no CUDA kernels");
    limits = current_cuda_device_limits();
  }
  const TensorFacts facts{int(c10::elementSize(dtype)), 256};
  const Math math = math_for(facts.element_size, tf32);
  const BackwardPlan backward_plan = plan_backward(backward, facts, facts, math, true, true, !backward_reduced, limits);
  const std::string grad_bias =
      describe_grad_bias(backward_reduced ? plan_backward(layer, facts, facts, math, false, false, true, limits) : backward_plan);
  return {describe(plan_forward(forward, facts, math, limits)) + forward_tag, describe(backward_plan.grad_input) + backward_tag,
          describe(backward_plan.grad_weight) + backward_tag, grad_bias};
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
  m.def("_plan(int[] sizes, ScalarType dtype, bool tf32, str device) -> str[]", TORCH_FN(plan_op));
}

TORCH_LIBRARY_IMPL(convt, CPU, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_op<cpu::forward>));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_op<cpu::backward>));
}

}  // namespace convt
