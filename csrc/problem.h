// The problem of one call, without torch: the params struct (sizes and element strides, int64)
// and the polyphase index formulas (docs/design.md §2). Shared by the CPU kernels, the CUDA
// kernels and the planner (csrc/plan.h), which builds without torch or CUDA.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CONVT_HOST_DEVICE __host__ __device__
#else
#define CONVT_HOST_DEVICE
#endif

namespace convt {

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
CONVT_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
// a - floor_div(a, b) * b: in [0, b) for b > 0
CONVT_HOST_DEVICE inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

struct Tap {
  int64_t phase;  // the output phase j mod stride that this tap feeds
  int64_t shift;  // output m of that phase reads input i = m - shift
};

CONVT_HOST_DEVICE inline Tap tap_of(int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t offset = k * dilation - padding;
  const int64_t shift = floor_div(offset, stride);
  return {offset - shift * stride, shift};
}

// Number of outputs j in [0, length_out) with j mod stride == phase.
CONVT_HOST_DEVICE inline int64_t phase_length(int64_t phase, int64_t length_out, int64_t stride) {
  return phase < length_out ? (length_out - phase + stride - 1) / stride : 0;
}

// The outputs m in [begin, end) of tap k's phase that read an input inside [0, length_in).
struct TapRange {
  int64_t begin, end;
  CONVT_HOST_DEVICE bool empty() const { return begin >= end; }
};

CONVT_HOST_DEVICE inline TapRange tap_range(const Tap& tap, int64_t phase_len, int64_t length_in) {
  const int64_t begin = tap.shift > 0 ? tap.shift : 0;
  const int64_t end = length_in + tap.shift < phase_len ? length_in + tap.shift : phase_len;
  return {begin, end};
}

// Element `index` of a contiguous (C_in, C_out/groups, K) weight (or grad_weight), and the output
// channel co it connects to.
struct WeightElement {
  int64_t ci, co_in_group, k, co;
};

CONVT_HOST_DEVICE inline WeightElement weight_element(int64_t index, const ConvTParams& p) {
  const int64_t k = index % p.kernel_size;
  const int64_t co_in_group = (index / p.kernel_size) % p.out_channels_per_group;
  const int64_t ci = index / (p.kernel_size * p.out_channels_per_group);
  return {ci, co_in_group, k, (ci / p.in_channels_per_group) * p.out_channels_per_group + co_in_group};
}

}  // namespace convt
