// Depthwise kernels (one input channel per group, or a few: depthwise_channels): every output row
// reads its group's input rows, so a block stages a segment of them in shared memory once and each
// thread computes kDwPerThread outputs from it, along the row (coalesced loads and stores).
// Polyphase indexing as in convt.h; any dtype, acc_t accumulation; 64-bit offsets. docs/design.md
// §6.1.
#pragma once

#include "plan.h"
#include "problem.h"
#include "cuda/direct.cuh"
#include "cuda/grid_dependency.cuh"

namespace convt::cuda {

// A block's row groups (DepthwisePlan::row_groups): row_groups rows side by side, each taken by
// kDwThreads / row_groups consecutive threads (whole warps) with its own staged weights and row
// segment, so that rows shorter than a block's kDwSegment outputs keep its threads busy. Without
// kRowGroups (one row a block) every member is a constant: long rows' loops keep their constant
// steps (a run-time group size cost them registers and spills, and a fifth of their time).
template <bool kRowGroups>
struct DwRowGroup {
  int group, lane, threads;  // this thread's group and place in it, the group's threads
  __device__ explicit DwRowGroup(int row_groups)
      : group(kRowGroups ? int(threadIdx.x) / (kDwThreads / row_groups) : 0),
        lane(kRowGroups ? int(threadIdx.x) % (kDwThreads / row_groups) : int(threadIdx.x)),
        threads(kRowGroups ? kDwThreads / row_groups : kDwThreads) {}
};

// Stages w_s[(c*co_count + cc)*K + k] = w[first_ci + c, co_begin + cc, k] for c < ci_count, cc <
// co_count (and, given bias, b_s[cc] = bias[first_bias + cc] after them) by the threads of a row
// group: issued beside a row segment's loads, so that one barrier covers both.
template <typename scalar_t, typename acc_t, bool kRowGroups>
__device__ void stage_depthwise_weights(const scalar_t* w, const scalar_t* bias, acc_t* w_s, int64_t first_ci, int ci_count,
                                        int co_begin, int co_count, int64_t first_bias, const ConvTParams& p,
                                        const DwRowGroup<kRowGroups>& rows) {
  const int row_weights = co_count * int(p.kernel_size), weights = ci_count * row_weights;
  for (int e = rows.lane; e < weights; e += rows.threads) {
    const int64_t ci = first_ci + e / row_weights, co = co_begin + e % row_weights / int(p.kernel_size);
    const int64_t k = e % int(p.kernel_size);
    w_s[e] = acc_t(w[ci * p.w_in_stride + co * p.w_out_stride + k * p.w_tap_stride]);
  }
  if (bias == nullptr) return;
  for (int c = rows.lane; c < co_count; c += rows.threads) w_s[weights + c] = acc_t(bias[first_bias + c]);
}

// y[n, g*Cog + co, j] = bias + sum over the group's input channels ci = g*Cig + c and the taps k of
// phase j mod stride of w[ci, co, k] * x[n, ci, j div stride - shift_k]
// Block: outputs j0 + [0, segment) of output rows co_begin + [0, co_block) (blockIdx.z) of
// row_groups (n, g) group rows, one a row group (DwRowGroup). Per row, behind one barrier, a row
// group stages x_s[c*staged + q] = x[n, g*Cig + c, i_lo + q] for the group's Cig input channels and
// those rows' weights and biases (w_s), each group in its own part of shared memory. kPhaseTaps
// (DepthwisePlan::tap_step > 1): a thread visits the taps of its output's phase only, k0, k0 +
// tap_step, ... (k0 from a per-phase table); else every tap, skipping those of other phases. Either
// way in increasing k: the same sums. (Cig * K steps an output, or Cig * K / tap_step: planned only
// for Cig <= 4.) kOneInputChannel: Cig is 1 (a constant: the channel loop compiles away).
template <typename scalar_t, typename acc_t, bool kOneInputChannel, bool kPhaseTaps, bool kRowGroups>
__global__ void __launch_bounds__(kDwThreads, 4)
    depthwise_forward_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                             const scalar_t* __restrict__ bias, scalar_t* __restrict__ y, ConvTParams p, DepthwisePlan a) {
  begin_dependent_grid();
  extern __shared__ __align__(16) unsigned char dw_smem[];
  const DwRowGroup<kRowGroups> rows(a.row_groups);
  const int in_per_group = kOneInputChannel ? 1 : int(p.in_channels_per_group);
  acc_t* w_s = reinterpret_cast<acc_t*>(dw_smem) + rows.group * a.weights;
  scalar_t* x_s = reinterpret_cast<scalar_t*>(reinterpret_cast<acc_t*>(dw_smem) + a.row_groups * a.weights) +
                  rows.group * in_per_group * a.staged;
  const int co_begin = int(blockIdx.z) * a.co_block;
  const int co_count = min(a.co_block, int(p.out_channels_per_group) - co_begin);
  const acc_t* b_s = w_s + in_per_group * co_count * p.kernel_size;
  const int64_t j0 = int64_t(blockIdx.x) * a.segment(), i_lo = floor_div(j0, p.stride) - a.shift_max;
  const int first_phase = int(j0 % p.stride), stride = int(p.stride);  // output j0 + t has phase (first_phase + t) mod stride
  const int segment_outputs = int(min(int64_t(a.segment()), p.length_out - j0));
  // per tap: phase, and x_s position of output m = j0 div stride, the same for every row; with
  // kPhaseTaps, per phase below kDwThreads its first tap (kernel_size where none)
  __shared__ int tap_phase[kDwMaxTaps], tap_position[kDwMaxTaps];
  __shared__ int phase_first_tap[kPhaseTaps ? kDwThreads : 1];
  const int kernel_size = int(p.kernel_size);
  if (threadIdx.x < kernel_size) {
    const Tap tap = tap_of(threadIdx.x, p.stride, p.padding, p.dilation);
    tap_phase[threadIdx.x] = int(tap.phase);
    tap_position[threadIdx.x] = int(a.shift_max - tap.shift);
  }
  // (the first tap_step taps hold one tap of each phase that has any)
  auto first_tap_of = [&](int phase) {
    int k = 0;
    while (k < kernel_size && k < a.tap_step && tap_phase[k] != phase) ++k;
    return k < kernel_size && k < a.tap_step ? k : kernel_size;
  };
  const bool phase_table = kPhaseTaps && stride <= kDwThreads;
  if constexpr (kPhaseTaps) {
    __syncthreads();  // (tap_phase)
    if (phase_table && int(threadIdx.x) < stride) phase_first_tap[threadIdx.x] = first_tap_of(int(threadIdx.x));
  }
  // x_s positions [first_inside, end_inside) lie inside the row (both clamped to [0, staged])
  auto clamp_staged = [&](int64_t q) { return int(min(a.staged, max(int64_t(0), q))); };
  const int first_inside = clamp_staged(-i_lo), end_inside = clamp_staged(p.length_in - i_lo);
  const int64_t group_rows = p.batch * p.groups;
  for (int64_t first_row = int64_t(blockIdx.y) * a.row_groups; first_row < group_rows; first_row += int64_t(gridDim.y) * a.row_groups) {
    const int64_t row = first_row + rows.group, n = row / p.groups, g = row % p.groups;
    const bool has_row = row < group_rows;  // (else the group only meets the block's barriers)
    __syncthreads();  // the previous rows' x_s and w_s are consumed
    if (has_row) {
      for (int c = 0; c < in_per_group; ++c) {
        const scalar_t* x_row = x + n * p.x_batch_stride + (g * in_per_group + c) * p.x_channel_stride;
        for (int64_t q = rows.lane; q < a.staged; q += rows.threads) {
          const int64_t i = i_lo + q;
          x_s[c * a.staged + q] = i >= 0 && i < p.length_in ? x_row[i * p.x_length_stride] : scalar_t(0.0f);
        }
      }
      stage_depthwise_weights(w, bias, w_s, g * in_per_group, in_per_group, co_begin, co_count,
                              g * p.out_channels_per_group + co_begin, p, rows);
    }
    __syncthreads();
    if (!has_row) continue;
    for (int cc = 0; cc < co_count; ++cc) {
      const acc_t bias_value = bias ? b_s[cc] : acc_t(0);
      scalar_t* y_segment = y + (n * p.out_channels + g * p.out_channels_per_group + co_begin + cc) * p.length_out + j0;
#pragma unroll
      for (int e = 0; e < kDwPerThread; ++e) {
        const int t = rows.lane + e * rows.threads;
        if (t >= segment_outputs) break;
        const int phase = stride == 1 ? 0 : (first_phase + t) % stride;  // m = j0 div stride + steps
        const int steps = stride == 1 ? t : (first_phase + t) / stride;
        acc_t acc = bias_value;
        for (int c = 0; c < in_per_group; ++c) {
          const acc_t* weight = w_s + (c * co_count + cc) * kernel_size;
          const scalar_t* x_c = x_s + c * a.staged;
          // x_s holds 0 outside the row, but such a product does not exist (0 x Inf or NaN is NaN)
          if constexpr (kPhaseTaps) {
            const int first_tap = phase_table ? phase_first_tap[phase] : first_tap_of(phase);
            for (int k = first_tap; k < kernel_size; k += a.tap_step) {
              const int q = tap_position[k] + steps;
              if (q >= first_inside && q < end_inside) acc += weight[k] * acc_t(x_c[q]);
            }
          } else {
            // (bounded by the 64-bit p.kernel_size: nvcc then unrolls the float loop with four taps'
            // shared-memory loads in flight, which the 32-bit bound's loop does not)
            for (int k = 0; k < p.kernel_size; ++k) {
              const int q = tap_position[k] + steps;
              if (tap_phase[k] == phase && q >= first_inside && q < end_inside) acc += weight[k] * acc_t(x_c[q]);
            }
          }
        }
        y_segment[t] = scalar_t(acc);
      }
    }
  }
}

// grad_x[n, ci, i] = sum over co and taps k of w[ci, co, k] * grad_y[n, g*Cog + co, (i + shift_k)*stride + phase_k]
// (g = ci div Cig). Block: inputs i0 + [0, segment) of row_groups (n, ci) rows, one a row group
// (DwRowGroup), summed over output channels co_begin + [0, co_block) (blockIdx.z); per co, a group
// stages gy_s[q] = grad_y[n, g*Cog + co, j_lo + q] for the q the segment's inputs reach, its row's
// weights (w_s) with the first co's. With one co block the sums go to grad_x; with several (a few
// rows of many output channels would leave the SMs idle) block z's go to partial[z] (grad_x's
// layout, acc_t), added in order by sum_slices_kernel.
template <typename scalar_t, typename acc_t, bool kRowGroups>
__global__ void __launch_bounds__(kDwThreads)
    depthwise_grad_input_kernel(const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ w,
                                scalar_t* __restrict__ grad_x, acc_t* __restrict__ partial, ConvTParams p, DepthwisePlan a) {
  begin_dependent_grid();
  extern __shared__ __align__(16) unsigned char dw_smem[];
  const DwRowGroup<kRowGroups> rows(a.row_groups);
  acc_t* w_s = reinterpret_cast<acc_t*>(dw_smem) + rows.group * a.weights;
  scalar_t* gy_s = reinterpret_cast<scalar_t*>(reinterpret_cast<acc_t*>(dw_smem) + a.row_groups * a.weights) + rows.group * a.staged;
  __shared__ TapTable taps;
  taps.fill(p);
  const int co_begin = int(blockIdx.z) * a.co_block;
  const int co_count = min(a.co_block, int(p.out_channels_per_group) - co_begin);
  const int64_t i0 = int64_t(blockIdx.x) * a.segment(), j_lo = (i0 + a.shift_min) * p.stride;
  // inputs i < i0 + segment_inputs read gy_s below (segment_inputs + shift_max - shift_min) * stride
  const int64_t segment_inputs = min(int64_t(a.segment()), p.length_in - i0);
  const int64_t staged = min(a.staged, (segment_inputs + a.shift_max - a.shift_min) * p.stride);
  const int64_t input_rows = p.batch * p.in_channels;
  for (int64_t first_row = int64_t(blockIdx.y) * a.row_groups; first_row < input_rows; first_row += int64_t(gridDim.y) * a.row_groups) {
    const int64_t row = first_row + rows.group, n = row / p.in_channels, ci = row % p.in_channels;
    const bool has_row = row < input_rows;  // (else the group only meets the block's barriers)
    acc_t acc[kDwPerThread] = {};
    for (int c = 0; c < co_count; ++c) {
      const int64_t channel = ci / p.in_channels_per_group * p.out_channels_per_group + co_begin + c;
      const scalar_t* gy_row = grad_y + n * p.y_batch_stride + channel * p.y_channel_stride;
      __syncthreads();  // the previous gy_s (and, on a new row, w_s) is consumed
      if (has_row) {
        if (c == 0) stage_depthwise_weights(w, static_cast<const scalar_t*>(nullptr), w_s, ci, 1, co_begin, co_count, 0, p, rows);
        for (int64_t q = rows.lane; q < staged; q += rows.threads) {
          const int64_t j = j_lo + q;
          gy_s[q] = j >= 0 && j < p.length_out ? gy_row[j * p.y_length_stride] : scalar_t(0.0f);
        }
      }
      __syncthreads();
      if (!has_row) continue;
      const acc_t* weight = w_s + c * p.kernel_size;
      for (int64_t k = 0; k < p.kernel_size; ++k) {
        const Tap tap = taps(k, p);
#pragma unroll
        for (int e = 0; e < kDwPerThread; ++e) {
          const int64_t i = i0 + rows.lane + e * rows.threads;
          if (i < p.length_in) acc[e] += weight[k] * acc_t(gy_s[(i + tap.shift) * p.stride + tap.phase - j_lo]);
        }
      }
    }
    if (!has_row) continue;
#pragma unroll
    for (int e = 0; e < kDwPerThread; ++e) {
      const int64_t i = i0 + rows.lane + e * rows.threads;
      if (i >= p.length_in) continue;
      if (partial != nullptr) {
        partial[(blockIdx.z * input_rows + row) * p.length_in + i] = acc[e];
      } else {
        grad_x[row * p.length_in + i] = scalar_t(acc[e]);
      }
    }
  }
}

// grad_w[ci, co, k] = sum over n and i of x[n, ci, i] * grad_y[n, g*Cog + co, i*stride - padding + k*dilation] (g = ci div Cig)
// (that is (i + shift_k)*stride + phase_k). Block: one (weight row (ci, co), slice s). Its threads
// stride over the (n, i) of every n and the slice's inputs i in [s*L_in/slices, (s+1)*L_in/slices),
// n-major (on slices shorter than a block, items n * span + offset kDwThreads apart, so that every
// thread is busy), each thread in a fixed order, keeping every tap's sum (x is read once per row, not once per tap); fixed-order block sums go to
// partial[s][row][k], and sum_slices_kernel adds the slices in order: deterministic (§8). Slices
// give long rows several blocks; 64 registers give four blocks per SM.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kDwThreads, 4)
    depthwise_grad_weight_kernel(const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ x,
                                 acc_t* __restrict__ partial, ConvTParams p, int64_t slices) {
  begin_dependent_grid();
  const int64_t weight_rows = p.in_channels * p.out_channels_per_group;
  for (int64_t block = blockIdx.x; block < weight_rows * slices; block += gridDim.x) {
    const int64_t weight_row = block % weight_rows, slice = block / weight_rows;
    const int64_t ci = weight_row / p.out_channels_per_group, co = weight_row % p.out_channels_per_group;
    const int64_t channel = ci / p.in_channels_per_group * p.out_channels_per_group + co;
    const int64_t i_begin = slice * p.length_in / slices, span = (slice + 1) * p.length_in / slices - i_begin;
    acc_t acc[kDwMaxTaps] = {};
    auto accumulate = [&](int64_t n, int64_t i) {
      const scalar_t* gy_row = grad_y + n * p.y_batch_stride + channel * p.y_channel_stride;
      const acc_t x_value = acc_t(x[n * p.x_batch_stride + ci * p.x_channel_stride + i * p.x_length_stride]);
      int64_t j = i * p.stride - p.padding;  // input i meets tap k at output j = i*stride - padding + k*dilation
#pragma unroll
      for (int k = 0; k < kDwMaxTaps; ++k, j += p.dilation) {
        if (k >= p.kernel_size) break;
        if (j >= 0 && j < p.length_out) acc[k] += x_value * acc_t(gy_row[j * p.y_length_stride]);
      }
    };
    if (span >= kDwThreads) {
      for (int64_t n = 0; n < p.batch; ++n) {
        for (int64_t i = i_begin + threadIdx.x; i < i_begin + span; i += kDwThreads) accumulate(n, i);
      }
    } else {  // (items n * span + offset: every thread busy on short rows)
      for (int64_t item = threadIdx.x; item < p.batch * span; item += kDwThreads) accumulate(item / span, i_begin + item % span);
    }
#pragma unroll
    for (int k = 0; k < kDwMaxTaps; ++k) {
      if (k >= p.kernel_size) break;
      const acc_t total = block_sum<acc_t, kDwThreads>(acc[k]);
      if (threadIdx.x == 0) partial[(slice * weight_rows + weight_row) * p.kernel_size + k] = total;
    }
  }
}

}  // namespace convt::cuda
