// The CUDA-core launchers (launch.h): direct.cuh's one-thread-per-output kernels, depthwise.cuh's
// row-segment kernels, and the fixed-order slice sums. Included by the instantiation file of each dtype.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <type_traits>

#include "cuda/depthwise.cuh"
#include "cuda/direct.cuh"
#include "cuda/launch.h"

namespace convt::cuda {

constexpr int kDirectThreads = 256;
constexpr int64_t kDeinterleaveBytes = 32 * 1024;  // a block's staged grad_y elements
constexpr int kReduceThreads = 256;

// Blocks of the row kernels (direct.cuh): positions along x, rows along y.
inline dim3 row_grid(int64_t rows, int64_t length, int threads) {
  const int64_t position_blocks = std::min<int64_t>((length + threads - 1) / threads, 1 << 20);
  return dim3(unsigned(position_blocks), unsigned(std::min<int64_t>(rows, 65535)));
}

// Blocks of a grid-stride loop over `items`, at most 64 an SM
inline unsigned grid_size(int64_t items, int threads, const Launch& launch) {
  const int64_t blocks = (items + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(blocks, 1, int64_t(launch.sm_count) * 64));
}

template <typename Kernel>
dim3 depthwise_grid(int64_t rows, int64_t length, Kernel kernel, const DepthwisePlan& plan, const Launch& launch) {
  C10_CUDA_CHECK(allow_dynamic_smem(kernel, launch));
  const int64_t row_blocks = (rows + plan.row_groups - 1) / plan.row_groups;
  return dim3(unsigned((length + plan.segment() - 1) / plan.segment()), unsigned(std::min<int64_t>(row_blocks, 65535)),
              unsigned(plan.co_blocks));
}

// run(std::true_type{}) where the plan's blocks take groups of rows, else run(std::false_type{}): the
// depthwise kernels' compile-time kRowGroups
template <typename Run>
void dispatch_row_groups(const DepthwisePlan& plan, Run run) {
  if (plan.row_groups > 1) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
}

template <typename scalar_t>
void launch_forward_direct(const ConvTParams& p, const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* y,
                           Launch launch) {
  launch_kernel(forward_direct_kernel<scalar_t, acc_type<scalar_t>>,
                row_grid(p.batch * p.out_channels, p.length_out, kDirectThreads), kDirectThreads, 0, launch, x, w, bias, y, p);
}

template <typename scalar_t>
void launch_depthwise_forward(const ConvTParams& p, const DepthwisePlan& plan, const scalar_t* x, const scalar_t* w,
                              const scalar_t* bias, scalar_t* y, Launch launch) {
  using acc_t = acc_type<scalar_t>;
  const bool one_input_channel = p.in_channels_per_group == 1, phase_taps = plan.tap_step > 1;
  auto run = [&](auto row_groups) {
    constexpr bool kRowGroups = decltype(row_groups)::value;
    auto kernel = one_input_channel ? (phase_taps ? depthwise_forward_kernel<scalar_t, acc_t, true, true, kRowGroups>
                                                  : depthwise_forward_kernel<scalar_t, acc_t, true, false, kRowGroups>)
                                    : (phase_taps ? depthwise_forward_kernel<scalar_t, acc_t, false, true, kRowGroups>
                                                  : depthwise_forward_kernel<scalar_t, acc_t, false, false, kRowGroups>);
    const dim3 grid = depthwise_grid(p.batch * p.groups, p.length_out, kernel, plan, launch);
    launch_kernel(kernel, grid, kDwThreads, plan.smem_bytes, launch, x, w, bias, y, p, plan);
  };
  dispatch_row_groups(plan, run);
}

template <typename scalar_t>
void launch_grad_input_direct(const ConvTParams& p, const scalar_t* grad_y, const scalar_t* w, scalar_t* grad_x,
                              Launch launch) {
  launch_kernel(grad_input_direct_kernel<scalar_t, acc_type<scalar_t>>,
                row_grid(p.batch * p.in_channels, p.length_in, kDirectThreads), kDirectThreads, 0, launch, grad_y, w, grad_x, p);
}

template <typename scalar_t>
void launch_depthwise_grad_input(const ConvTParams& p, const DepthwisePlan& plan, const scalar_t* grad_y, const scalar_t* w,
                                 scalar_t* grad_x, acc_type<scalar_t>* partial, Launch launch) {
  auto run = [&](auto row_groups) {
    auto kernel = depthwise_grad_input_kernel<scalar_t, acc_type<scalar_t>, decltype(row_groups)::value>;
    const dim3 grid = depthwise_grid(p.batch * p.in_channels, p.length_in, kernel, plan, launch);
    launch_kernel(kernel, grid, kDwThreads, plan.smem_bytes, launch, grad_y, w, grad_x, partial, p, plan);
  };
  dispatch_row_groups(plan, run);
}

template <typename scalar_t>
void launch_depthwise_grad_weight(const ConvTParams& p, int64_t slices, const scalar_t* grad_y, const scalar_t* x,
                                  acc_type<scalar_t>* partial, Launch launch) {
  const int64_t blocks = p.in_channels * p.out_channels_per_group * slices;
  launch_kernel(depthwise_grad_weight_kernel<scalar_t, acc_type<scalar_t>>, grid_size(blocks * kDwThreads, kDwThreads, launch),
                kDwThreads, 0, launch, grad_y, x, partial, p, slices);
}

template <typename scalar_t>
void launch_grad_weight_direct(const ConvTParams& p, const scalar_t* grad_y, const scalar_t* x, scalar_t* grad_w,
                               Launch launch) {
  const int64_t elements = p.in_channels * p.out_channels_per_group * p.kernel_size;
  launch_kernel(grad_weight_direct_kernel<scalar_t, acc_type<scalar_t>, kReduceThreads>,
                grid_size(elements * kReduceThreads, kReduceThreads, launch), kReduceThreads, 0, launch, grad_y, x, grad_w, p);
}

template <typename scalar_t>
void launch_grad_y_row_sums(const ConvTParams& p, const RowSumsPlan& rows, const scalar_t* grad_y, acc_type<scalar_t>* row_sums,
                            Launch launch) {
  static_assert(kReduceThreads == kRowSumBlockThreads, "the planner prices the row sums' blocks at kRowSumBlockThreads");
  const int64_t items = p.batch * p.out_channels * rows.segments;
  if (rows.warp_rows) {
    launch_kernel(grad_y_row_sums_kernel<scalar_t, acc_type<scalar_t>, 32>, grid_size(items * 32, kReduceThreads, launch),
                  kReduceThreads, 0, launch, grad_y, row_sums, p, rows.segments);
  } else {
    launch_kernel(grad_y_row_sums_kernel<scalar_t, acc_type<scalar_t>, kReduceThreads>,
                  grid_size(items * kReduceThreads, kReduceThreads, launch), kReduceThreads, 0, launch, grad_y, row_sums, p,
                  rows.segments);
  }
}

template <typename scalar_t>
void launch_deinterleave_grad_y(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, int* nonfinite, int64_t phases,
                                int64_t phase_step, int64_t row_length, Launch launch) {
  // segments of up to kDeinterleaveBytes staged (a multiple of 32 positions where longer; phases is
  // at most kMaxDeinterleavedPhases, so one position always fits)
  const int64_t stage_elements = kDeinterleaveBytes / int64_t(sizeof(scalar_t));
  const int columns = int(std::min<int64_t>(row_length, std::max<int64_t>(1, stage_elements / phases / 32 * 32)));
  const size_t smem = sizeof(scalar_t) * staged_elements_padded(columns * phases);
  launch_kernel(deinterleave_grad_y_kernel<scalar_t>, row_grid(p.batch * p.out_channels, row_length, columns), kDirectThreads,
                smem, launch, grad_y, out, nonfinite, p, int(phases), int(phase_step), row_length, columns);
}

template <typename scalar_t>
void launch_unroll_grad_y(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, Launch launch) {
  const int64_t row_length = unrolled_row_length(p);
  const UnrollWindow window = unroll_window(p, int(sizeof(scalar_t)));
  TORCH_INTERNAL_ASSERT(window.positions > 0, "unrolled grad_y: no window fits (unrolled_copy_fits)");
  const int64_t windows = (row_length + window.positions - 1) / window.positions * ((p.kernel_size + window.taps - 1) / window.taps);
  const dim3 grid(unsigned(windows), unsigned(std::min<int64_t>(p.batch * p.out_channels, 65535)));
  launch_kernel(unroll_grad_y_kernel<scalar_t>, grid, kDirectThreads, sizeof(scalar_t) * staged_elements_padded(window.elements),
                launch, grad_y, out, p, row_length, window);
}

// Blocks of a copy_tiles kernel (direct.cuh): as many as the device runs at once, at most one a tile
template <typename Kernel>
unsigned copy_grid(Kernel kernel, int64_t tiles, const Launch& launch) {
  TORCH_CHECK(tiles <= std::numeric_limits<int>::max(), "convt: internal error: a layout copy of ", tiles, " tiles");
  int blocks_per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kChannelsLastThreads, 0));
  return unsigned(std::clamp<int64_t>(tiles, 1, int64_t(launch.sm_count) * std::max(blocks_per_sm, 1)));
}
inline int64_t copy_tiles_of(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }

template <typename scalar_t>
void launch_channels_last(const ChannelsLastCopy& copy, const scalar_t* in, scalar_t* out, Launch launch) {
  const RowsView& rows = copy.in;
  const int64_t channel_tiles = copy_tiles_of(rows.channels, kChannelsLastTile), position_tiles = copy_tiles_of(rows.length, kChannelsLastTile);
  const int64_t tiles = rows.batch * channel_tiles * position_tiles;
  // the widest loads (16, 8, 4 bytes or one element) that every row's start and the base allow
  auto loads_of = [&](int64_t elements) {
    return rows.length_stride == 1 && rows.channel_stride % elements == 0 && rows.batch_stride % elements == 0 &&
           reinterpret_cast<uintptr_t>(in) % (elements * sizeof(scalar_t)) == 0;
  };
  constexpr int kVector = CopyVector<scalar_t>::kElements;
  const bool vector_stores = copy.row_elements % kVector == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  auto run = [&](auto load_elements, auto vector_store) {
    const auto kernel = channels_last_kernel<scalar_t, decltype(load_elements)::value, decltype(vector_store)::value>;
    launch_kernel(kernel, copy_grid(kernel, tiles, launch), kChannelsLastThreads, 0, launch, in, out, copy, int(channel_tiles),
                  int(position_tiles));
  };
  auto run_loads = [&](auto load_elements) {
    if (vector_stores) {
      run(load_elements, std::true_type{});
    } else {
      run(load_elements, std::false_type{});
    }
  };
  if (loads_of(kVector)) {
    run_loads(std::integral_constant<int, kVector>{});
  } else if (kVector >= 4 && loads_of(kVector / 2)) {
    run_loads(std::integral_constant<int, std::max(1, kVector / 2)>{});
  } else if (kVector >= 8 && loads_of(kVector / 4)) {
    run_loads(std::integral_constant<int, std::max(1, kVector / 4)>{});
  } else {
    run_loads(std::integral_constant<int, 1>{});
  }
}

template <typename scalar_t>
void launch_deinterleave_grad_y_channels_last(const ConvTParams& p, const scalar_t* grad_y, scalar_t* out, int* nonfinite,
                                              int64_t phases, int64_t rows, int64_t row_elements, Launch launch) {
  TORCH_CHECK(phases >= 1 && phases <= kChannelsLastTile && row_elements * int64_t(sizeof(scalar_t)) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "convt: internal error: a channels-last deinterleaved copy of ", phases, " phases, rows of ", row_elements);
  const int64_t channel_tiles = copy_tiles_of(p.out_channels, kChannelsLastTile);
  const int64_t row_tiles = copy_tiles_of(rows, kChannelsLastTile / phases);
  const auto kernel = deinterleave_channels_last_kernel<scalar_t>;
  launch_kernel(kernel, copy_grid(kernel, p.batch * channel_tiles * row_tiles, launch), kChannelsLastThreads, 0, launch, grad_y,
                out, nonfinite, p, int(phases), rows, row_elements, int(channel_tiles), int(row_tiles));
}

template <typename scalar_t>
void launch_aligned_rows(const RowsView& in, const scalar_t* in_data, int64_t row_elements, scalar_t* out, Launch launch) {
  const int64_t vectors = in.batch * in.channels * row_elements / (16 / int64_t(sizeof(scalar_t)));
  launch_kernel(aligned_rows_kernel<scalar_t>, grid_size(vectors, kDirectThreads, launch), kDirectThreads, 0, launch, in_data,
                out, in, row_elements);
}

template <typename scalar_t>
void launch_sum_slices(const acc_type<scalar_t>* partial, scalar_t* out, int64_t elements, int64_t slices, Launch launch,
                       const scalar_t* bias, int64_t length, int64_t channels, int64_t taps) {
  constexpr int kVector = 16 / int(sizeof(acc_type<scalar_t>));
  auto run = [&](auto slice_warps, auto vector) {
    constexpr int kSliceWarps = decltype(slice_warps)::value, kLaneElements = decltype(vector)::value;
    launch_kernel(sum_slices_kernel<scalar_t, acc_type<scalar_t>, kSliceWarps, kLaneElements>,
                  grid_size(elements / kLaneElements, 32 * (kSumWarps / kSliceWarps), launch), 32 * kSumWarps, 0, launch, partial,
                  bias, out, elements, slices, length, channels, taps, launch.gate);
  };
  auto with_warps = [&](auto vector) {
    switch (sum_slice_warps(slices)) {
      case 1: return run(std::integral_constant<int, 1>{}, vector);
      case 2: return run(std::integral_constant<int, 2>{}, vector);
      case 4: return run(std::integral_constant<int, 4>{}, vector);
      default: return run(std::integral_constant<int, kSumWarps>{}, vector);
    }
  };
  // (16-byte loads where every slice's elements start 16-byte aligned)
  if (elements % kVector == 0 && reinterpret_cast<uintptr_t>(partial) % 16 == 0) {
    with_warps(std::integral_constant<int, kVector>{});
  } else {
    with_warps(std::integral_constant<int, 1>{});
  }
}

}  // namespace convt::cuda
