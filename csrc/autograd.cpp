// The autograd formulas of both ops (docs/design.md §1), registered for the Autograd key in C++:
// a call pays no Python, and C++ programs (libtorch training, AOTInductor) get gradients too.
//
// Forward: y = conv_transpose1d(x, w) + b; its backward is the backward op.
// Backward op: (gx, gw, gb) = backward(gy, x, w). All three are linear in gy, gx is linear in w and
// gw in x. With cotangents (ggx, ggw, ggb) of (gx, gw, gb):
//   d/d gy = conv_transpose1d(ggx, w, ggb) + conv_transpose1d(x, ggw)
//   d/d x  = grad_input of backward(gy, x, ggw)
//   d/d w  = grad_weight of backward(gy, ggx, w)
// so double (and higher) backward runs on the same two ops; so does forward mode of either op.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <type_traits>

namespace convt {
namespace {

using torch::autograd::variable_list;

// The ops through the dispatcher (below Autograd in a kernel, with autograd in a node's backward, so
// that a backward of a backward is recorded)
at::Tensor forward_call(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                        at::IntArrayRef dilation) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("convt::conv_transpose1d", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                               at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, at::IntArrayRef)>();
  return op.call(input, weight, bias, stride, padding, output_padding, groups, dilation);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_call(const at::Tensor& grad_output, const at::Tensor& input,
                                                             const at::Tensor& weight, at::IntArrayRef stride,
                                                             at::IntArrayRef padding, at::IntArrayRef output_padding,
                                                             int64_t groups, at::IntArrayRef dilation,
                                                             std::array<bool, 3> output_mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("convt::conv_transpose1d_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t,
                                                                at::IntArrayRef, std::array<bool, 3>)>();
  return op.call(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask);
}

// The integer arguments, kept by a node for its backward
struct IntArgs {
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups;
};

// A node of the backward graph, held as this torch's nodes are (Edge::function's pointer type:
// std::shared_ptr, or c10::intrusive_ptr in later versions)
template <typename NodeType>
auto make_node() {
  using Pointer = decltype(torch::autograd::Edge::function);
  if constexpr (std::is_same_v<Pointer, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<NodeType>();
  } else {
    return c10::make_intrusive<NodeType>();
  }
}

// The nodes are written as PyTorch's generated ones are (not as torch::autograd::Function, which
// torch.func's transforms refuse): the kernel runs the op below Autograd and records a node whose
// next edges are the differentiable inputs, so grad, vjp and jacrev work as on torch's own ops.

// y = conv_transpose1d(x, w, b): edges input 0, weight 1, bias 2
struct ConvTranspose1dBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable input, weight;
  IntArgs args;
  std::string name() const override { return "ConvTranspose1dBackward"; }
  void release_variables() override {
    input.reset_data();
    weight.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const std::array<bool, 3> mask{task_should_compute_output(0), task_should_compute_output(1),
                                   task_should_compute_output(2)};
    at::Tensor none;
    if (!grads[0].defined() || !(mask[0] || mask[1] || mask[2])) return {none, none, none};
    auto [grad_input, grad_weight, grad_bias] = backward_call(grads[0], input.unpack(), weight.unpack(), args.stride,
                                                              args.padding, args.output_padding, args.groups,
                                                              args.dilation, mask);
    return {mask[0] ? grad_input : none, mask[1] ? grad_weight : none, mask[2] ? grad_bias : none};
  }
};

// (gx, gw, gb) = backward(gy, x, w): edges grad_output 0, input 1, weight 2; the cotangents of the
// three outputs arrive as (ggx, ggw, ggb), each used only where output_mask computed its output
struct ConvTranspose1dBackwardBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable grad_output, input, weight;
  IntArgs args;
  std::array<bool, 3> output_mask;
  std::string name() const override { return "ConvTranspose1dBackwardBackward"; }
  void release_variables() override {
    grad_output.reset_data();
    input.reset_data();
    weight.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor gy = grad_output.unpack(), x = input.unpack(), w = weight.unpack();
    const bool has_ggx = output_mask[0] && grads[0].defined(), has_ggw = output_mask[1] && grads[1].defined(),
               has_ggb = output_mask[2] && grads[2].defined();
    at::Tensor d_grad_output, d_input, d_weight;
    if (task_should_compute_output(0)) {
      if (has_ggx || has_ggb) {
        d_grad_output = forward_call(has_ggx ? grads[0] : at::zeros_like(x), w,
                                     has_ggb ? std::optional<at::Tensor>(grads[2]) : std::nullopt, args.stride, args.padding,
                                     args.output_padding, args.groups, args.dilation);
      }
      if (has_ggw) {
        const at::Tensor term =
            forward_call(x, grads[1], std::nullopt, args.stride, args.padding, args.output_padding, args.groups, args.dilation);
        d_grad_output = d_grad_output.defined() ? at::add(d_grad_output, term) : term;
      }
      if (!d_grad_output.defined()) d_grad_output = at::zeros_like(gy);
    }
    if (task_should_compute_output(1) && has_ggw) {
      d_input = std::get<0>(backward_call(gy, x, grads[1], args.stride, args.padding, args.output_padding, args.groups,
                                          args.dilation, {true, false, false}));
    }
    if (task_should_compute_output(2) && has_ggx) {
      d_weight = std::get<1>(backward_call(gy, grads[0], w, args.stride, args.padding, args.output_padding, args.groups,
                                           args.dilation, {false, true, false}));
    }
    return {d_grad_output, d_input, d_weight};
  }
};

bool has_forward_grad(const at::Tensor& t) { return t.defined() && t._fw_grad(/*level=*/0).defined(); }

at::Tensor forward_autograd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                            at::IntArrayRef dilation) {
  const bool has_bias = bias.has_value() && bias->defined();
  decltype(make_node<ConvTranspose1dBackward>()) node;
  if (torch::autograd::compute_requires_grad(input, weight, bias)) {
    node = make_node<ConvTranspose1dBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
    node->input = torch::autograd::SavedVariable(input, /*is_output=*/false);
    node->weight = torch::autograd::SavedVariable(weight, /*is_output=*/false);
    node->args = {stride.vec(), padding.vec(), output_padding.vec(), dilation.vec(), groups};
  }
  at::Tensor output;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    output = forward_call(input, weight, bias, stride, padding, output_padding, groups, dilation);
  }
  if (node) torch::autograd::set_history(output, node);
  // Forward mode (torch.func.jvp, jacfwd): the op is linear in (x, b) and in w, so the tangent is
  // conv_transpose1d(x_t, w, b_t) + conv_transpose1d(x, w_t), on the primal values
  if (has_forward_grad(input) || has_forward_grad(weight) || (has_bias && has_forward_grad(*bias))) {
    const at::Tensor x = input._fw_primal(0), w = weight._fw_primal(0);
    const at::Tensor x_t = input._fw_grad(0), w_t = weight._fw_grad(0);
    const at::Tensor b_t = has_bias ? bias->_fw_grad(0) : at::Tensor();
    at::Tensor tangent;
    if (x_t.defined() || b_t.defined()) {
      tangent = forward_call(x_t.defined() ? x_t : at::zeros_like(x), w,
                             b_t.defined() ? std::optional<at::Tensor>(b_t) : std::nullopt, stride, padding, output_padding,
                             groups, dilation);
    }
    if (w_t.defined()) {
      const at::Tensor term = forward_call(x, w_t, std::nullopt, stride, padding, output_padding, groups, dilation);
      tangent = tangent.defined() ? at::add(tangent, term) : term;
    }
    output._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/false);
  }
  return output;
}

// Forward mode of the backward op (jvp or jacfwd of a gradient, e.g. Hessian-vector products): gx is
// linear in gy and in w, gw in gy and in x, gb in gy, so on the primal values
//   gx_t = gx(gy_t, w) + gx(gy, w_t),  gw_t = gw(gy_t, x) + gw(gy, x_t),  gb_t = gb(gy_t)
void set_backward_tangents(std::tuple<at::Tensor, at::Tensor, at::Tensor>& grads, const at::Tensor& grad_output,
                           const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                           at::IntArrayRef dilation, std::array<bool, 3> output_mask) {
  const at::Tensor gy = grad_output._fw_primal(0), x = input._fw_primal(0), w = weight._fw_primal(0);
  const at::Tensor gy_t = grad_output._fw_grad(0), x_t = input._fw_grad(0), w_t = weight._fw_grad(0);
  std::array<at::Tensor, 3> tangents;
  auto accumulate = [&](int index, const at::Tensor& term) {
    tangents[index] = tangents[index].defined() ? at::add(tangents[index], term) : term;
  };
  if (gy_t.defined()) {
    auto [gx, gw, gb] = backward_call(gy_t, x, w, stride, padding, output_padding, groups, dilation, output_mask);
    const std::array<at::Tensor, 3> terms{gx, gw, gb};
    for (int index : {0, 1, 2}) {
      if (output_mask[index]) accumulate(index, terms[index]);
    }
  }
  if (w_t.defined() && output_mask[0]) {
    accumulate(0, std::get<0>(backward_call(gy, x, w_t, stride, padding, output_padding, groups, dilation,
                                            {true, false, false})));
  }
  if (x_t.defined() && output_mask[1]) {
    accumulate(1, std::get<1>(backward_call(gy, x_t, w, stride, padding, output_padding, groups, dilation,
                                            {false, true, false})));
  }
  std::array<at::Tensor*, 3> outputs{&std::get<0>(grads), &std::get<1>(grads), &std::get<2>(grads)};
  for (int index : {0, 1, 2}) {
    if (tangents[index].defined() && outputs[index]->defined()) {
      outputs[index]->_set_fw_grad(tangents[index], /*level=*/0, /*is_inplace_op=*/false);
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_autograd(const at::Tensor& grad_output, const at::Tensor& input,
                                                                 const at::Tensor& weight, at::IntArrayRef stride,
                                                                 at::IntArrayRef padding, at::IntArrayRef output_padding,
                                                                 int64_t groups, at::IntArrayRef dilation,
                                                                 std::array<bool, 3> output_mask) {
  decltype(make_node<ConvTranspose1dBackwardBackward>()) node;
  if (torch::autograd::compute_requires_grad(grad_output, input, weight)) {
    node = make_node<ConvTranspose1dBackwardBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(grad_output, input, weight));
    node->grad_output = torch::autograd::SavedVariable(grad_output, /*is_output=*/false);
    node->input = torch::autograd::SavedVariable(input, /*is_output=*/false);
    node->weight = torch::autograd::SavedVariable(weight, /*is_output=*/false);
    node->args = {stride.vec(), padding.vec(), output_padding.vec(), dilation.vec(), groups};
    node->output_mask = output_mask;
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    grads = backward_call(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask);
  }
  if (node) torch::autograd::set_history({std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)}, node);
  if (has_forward_grad(grad_output) || has_forward_grad(input) || has_forward_grad(weight)) {
    set_backward_tangents(grads, grad_output, input, weight, stride, padding, output_padding, groups, dilation,
                          output_mask);
  }
  return grads;
}

}  // namespace

TORCH_LIBRARY_IMPL(convt, Autograd, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_autograd));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_autograd));
}

}  // namespace convt
