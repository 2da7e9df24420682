// The autograd formulas of both ops (docs/design.md §1), registered for the Autograd key in C++:
// a call pays no Python, and C++ programs (libtorch training, AOTInductor) get gradients too.
//
// Forward: y = conv_transpose1d(x, w) + b; its backward is the backward op.
// Backward op: (gx, gw, gb) = backward(gy, x, w). All three are linear in gy, gx is linear in w and
// gw in x. With cotangents (ggx, ggw, ggb) of (gx, gw, gb):
//   d/d gy = conv_transpose1d(ggx, w, ggb) + conv_transpose1d(x, ggw)
//   d/d x  = grad_input of backward(gy, x, ggw)
//   d/d w  = grad_weight of backward(gy, ggx, w)
// so double (and higher) backward runs on the same two ops.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace convt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ops through the dispatcher (below Autograd inside a Function's forward, with autograd in a
// backward, so that a backward of a backward is recorded)
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

// The integer arguments, kept in a Function's saved data
void save_args(AutogradContext* ctx, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
               int64_t groups, at::IntArrayRef dilation) {
  ctx->saved_data["stride"] = stride.vec();
  ctx->saved_data["padding"] = padding.vec();
  ctx->saved_data["output_padding"] = output_padding.vec();
  ctx->saved_data["groups"] = groups;
  ctx->saved_data["dilation"] = dilation.vec();
}
struct SavedArgs {
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups;
  explicit SavedArgs(AutogradContext* ctx)
      : stride(ctx->saved_data["stride"].toIntVector()),
        padding(ctx->saved_data["padding"].toIntVector()),
        output_padding(ctx->saved_data["output_padding"].toIntVector()),
        dilation(ctx->saved_data["dilation"].toIntVector()),
        groups(ctx->saved_data["groups"].toInt()) {}
};

struct ForwardFunction : public torch::autograd::Function<ForwardFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({input, weight});
    save_args(ctx, stride, padding, output_padding, groups, dilation);
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["has_bias"] = has_bias;
    return forward_call(input, weight, bias, stride, padding, output_padding, groups, dilation);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const SavedArgs args(ctx);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    // (the edges: input 0, weight 1, and bias 2 where there is one)
    const std::array<bool, 3> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                   has_bias && ctx->needs_input_grad(2)};
    at::Tensor none;
    if (!grad_outputs[0].defined() || !(mask[0] || mask[1] || mask[2])) return {none, none, none, none, none, none, none, none};
    auto [grad_input, grad_weight, grad_bias] = backward_call(grad_outputs[0], saved[0], saved[1], args.stride, args.padding,
                                                              args.output_padding, args.groups, args.dilation, mask);
    return {mask[0] ? grad_input : none, mask[1] ? grad_weight : none, mask[2] ? grad_bias : none, none, none, none, none,
            none};
  }
};

struct BackwardFunction : public torch::autograd::Function<BackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad_output, const at::Tensor& input,
                               const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation,
                               std::array<bool, 3> output_mask) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({grad_output, input, weight});
    save_args(ctx, stride, padding, output_padding, groups, dilation);
    ctx->saved_data["output_mask"] = std::vector<bool>(output_mask.begin(), output_mask.end());
    auto [grad_input, grad_weight, grad_bias] =
        backward_call(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask);
    return {grad_input, grad_weight, grad_bias};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &grad_output = saved[0], &input = saved[1], &weight = saved[2];
    const SavedArgs args(ctx);
    const c10::List<bool> output_mask = ctx->saved_data["output_mask"].toBoolList();
    const bool has_ggx = output_mask[0] && grads[0].defined(), has_ggw = output_mask[1] && grads[1].defined(),
               has_ggb = output_mask[2] && grads[2].defined();
    at::Tensor d_grad_output, d_input, d_weight, none;
    if (ctx->needs_input_grad(0)) {
      if (has_ggx || has_ggb) {
        d_grad_output = forward_call(has_ggx ? grads[0] : at::zeros_like(input), weight,
                                     has_ggb ? std::optional<at::Tensor>(grads[2]) : std::nullopt, args.stride, args.padding,
                                     args.output_padding, args.groups, args.dilation);
      }
      if (has_ggw) {
        const at::Tensor term = forward_call(input, grads[1], std::nullopt, args.stride, args.padding, args.output_padding,
                                             args.groups, args.dilation);
        d_grad_output = d_grad_output.defined() ? at::add(d_grad_output, term) : term;
      }
      if (!d_grad_output.defined()) d_grad_output = at::zeros_like(grad_output);
    }
    if (ctx->needs_input_grad(1) && has_ggw) {
      d_input = std::get<0>(backward_call(grad_output, input, grads[1], args.stride, args.padding, args.output_padding,
                                          args.groups, args.dilation, {true, false, false}));
    }
    if (ctx->needs_input_grad(2) && has_ggx) {
      d_weight = std::get<1>(backward_call(grad_output, grads[0], weight, args.stride, args.padding, args.output_padding,
                                           args.groups, args.dilation, {false, true, false}));
    }
    return {d_grad_output, d_input, d_weight, none, none, none, none, none, none};
  }
};

at::Tensor forward_autograd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                            at::IntArrayRef dilation) {
  return ForwardFunction::apply(input, weight, bias, stride, padding, output_padding, groups, dilation);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_autograd(const at::Tensor& grad_output, const at::Tensor& input,
                                                                 const at::Tensor& weight, at::IntArrayRef stride,
                                                                 at::IntArrayRef padding, at::IntArrayRef output_padding,
                                                                 int64_t groups, at::IntArrayRef dilation,
                                                                 std::array<bool, 3> output_mask) {
  const variable_list grads =
      BackwardFunction::apply(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask);
  return {grads[0], grads[1], grads[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(convt, Autograd, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_autograd));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_autograd));
}

}  // namespace convt
