// What both tensor-core grad_weight kernels share (grad_weight_gemm.cuh, grad_weight_wgmma.cuh):
// the kernel parameters, the fragment word of staged 16-bit pairs and the staging copy helpers.
// docs/design.md §5.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "plan.h"
#include "problem.h"
#include "cuda/implicit_gemm.cuh"

namespace convt::cuda {

// A block is kCiWarps x kCoWarps warps of 16 ci x 32 co: 32 ci (kCiWarps 2) where C_in per group is
// at most 32, else 64 (kCiWarps 4: each staged gy element feeds twice the ci); 32 co (kCoWarps 1)
// where C_out per group is at most 32, else 64 (kCoWarps 2: each staged x element feeds twice the co).
constexpr int kGradWTilesN = 4;                  // n8 tiles (of co) per warp: a 16 ci x 32 co warp tile
template <int kCoWarps>
constexpr int kGradWBlockCoOf = kCoWarps * kGradWTilesN * 8;
template <int kCiWarps, int kCoWarps>
constexpr int kGradWThreadsOf = 32 * kCiWarps * kCoWarps;

// The kernels' parameters: the plan (plan.h), and the dividers and tensor map that the launcher
// builds from it (make_weight_grad_problem).
struct WeightGradProblem : WeightGradPlan {
  Divider group_window_copies[kMaxGemmTaps];  // group_window_copy_count[q]: the copy loops divide by it
  Divider div_chunks_per_row;                 // item -> (n, chunk) without a 64-bit division per item
  CUtensorMap x_map;                          // pipelined tiles: x as (position, channel, batch)
};

// One 32-bit register of an mma fragment from the staged value(s) at `at`: a float (TF32 or 3xTF32),
// or two 16-bit values, at[0] in the low half; `aligned`: `at` is 4-byte aligned (16-bit only).
template <typename T>
__device__ __forceinline__ uint32_t fragment_word(const T* at, bool aligned) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(*at);
  } else {
    const unsigned short* halves = reinterpret_cast<const unsigned short*>(at);
    return aligned ? *reinterpret_cast<const uint32_t*>(at) : uint32_t(halves[0]) | (uint32_t(halves[1]) << 16);
  }
}

// body(std::integral_constant<int, elements>) for the copy sizes there are (16 or 8 bytes' worth of
// T, or a 16-bit pair): the staging loops' index math with constants
template <typename T, typename Body>
__device__ __forceinline__ void with_copy_size(int elements, Body&& body) {
  if (elements == 16 / int(sizeof(T))) {
    body(std::integral_constant<int, 16 / sizeof(T)>{});
  } else if (elements == 8 / int(sizeof(T))) {
    body(std::integral_constant<int, 8 / sizeof(T)>{});
  } else if constexpr (sizeof(T) == 2) {
    body(std::integral_constant<int, 2>{});
  }
}
// One element global -> shared, 0 where !inside: a synchronous load of a 16-bit value, or an
// asynchronous 4-byte copy of a float (from `aligned`, an aligned address it does not read, where
// !inside)
template <typename T>
__device__ __forceinline__ void copy_element(T* to, const T* from, bool inside, const T* aligned) {
  if constexpr (sizeof(T) == 2) {
    *to = inside ? *from : from_float<T>(0.0f);
  } else {
    cp_async_4(to, inside ? from : aligned, inside ? 4 : 0);
  }
}
// One element's copy global -> shared: its slot (nullptr: none, past the walk's end), its source,
// and whether it lies inside the tensor (else 0)
template <typename T>
struct ElementCopy {
  T* to;
  const T* from;
  bool inside;
};
// The 16-bit copies copy_of(0 .. kCount): kCount synchronous loads issued before their stores (one
// load and its store at a time would wait a full latency each); 0 outside the tensor
template <int kCount, typename T, typename CopyOf>
__device__ __forceinline__ void copy_elements(CopyOf&& copy_of) {
  static_assert(sizeof(T) == 2, "float elements go by asynchronous copies");
  T values[kCount];
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
    const ElementCopy<T> c = copy_of(u);
    values[u] = c.to != nullptr && c.inside ? *c.from : from_float<T>(0.0f);
  }
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
    T* const to = copy_of(u).to;
    if (to != nullptr) *to = values[u];
  }
}
// elements of a `vector`-element copy inside a row that has `left` elements from its start
__device__ __forceinline__ int elements_inside(int64_t left, int vector) {
  return left <= 0 ? 0 : left >= vector ? vector : int(left);
}

}  // namespace convt::cuda
