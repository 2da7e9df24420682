// Warp-level tensor-core building blocks (mma.sync, sm_80+): the operand types and one
// multiply-accumulate step for each math mode.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#include "plan.h"

namespace convt::cuda {


// Conversions that work with torch's -D__CUDA_NO_HALF_CONVERSIONS__.
__device__ __forceinline__ float to_float(float value) { return value; }
__device__ __forceinline__ float to_float(__half value) { return __half2float(value); }
__device__ __forceinline__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename T>
__device__ __forceinline__ T from_float(float value) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(value);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(value);
  } else {
    return value;
  }
}

// Two adjacent outputs in one aligned store (address must be aligned to two elements).
template <typename T>
__device__ __forceinline__ void store_pair(T* address, float first, float second) {
  if constexpr (std::is_same_v<T, __half>) {
    *reinterpret_cast<__half2*>(address) = __floats2half2_rn(first, second);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(address) = __floats2bfloat162_rn(first, second);
  } else {
    *reinterpret_cast<float2*>(address) = make_float2(first, second);
  }
}

// 16 bytes of outputs (4 floats or 8 16-bit values) in one store; the address must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void store_vector(T* address, const float (&values)[16 / sizeof(T)]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(address) = make_float4(values[0], values[1], values[2], values[3]);
  } else {
    uint32_t words[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const T low = from_float<T>(values[2 * e]), high = from_float<T>(values[2 * e + 1]);
      words[e] = uint32_t(*reinterpret_cast<const unsigned short*>(&low)) |
                 (uint32_t(*reinterpret_cast<const unsigned short*>(&high)) << 16);
    }
    *reinterpret_cast<uint4*>(address) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Elements of T from the 16-byte boundary at or below `at` (aligned to sizeof(T)) to `at`
template <typename T>
__device__ __forceinline__ int elements_past_16_bytes(const T* at) {
  return int(reinterpret_cast<uintptr_t>(at) % 16 / sizeof(T));
}

// float32 to TF32 (its low 13 mantissa bits zero), to nearest, as cuDNN's kernels for the GPU round:
// on sm_90 ties to even (cuDNN's Hopper kernels, and TMA's TFLOAT32 copies), before it ties away from
// zero (its sm_80 kernels; cvt.rn.tf32 needs sm_90). Ties broken the other way differ from cuDNN's
// TF32 result by about 1e-4 (docs/design.md §7; docs/perf/2026-11-27-tf32-rounding.md).
__device__ __forceinline__ uint32_t to_tf32(float value) {
  uint32_t result;
#if __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(result) : "f"(value));
#else
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(result) : "f"(value));
#endif
  return result;
}
// kElements (1, 2 or 4) floats at `values` (aligned to their size) rounded to TF32 in place, in one
// load and one store
template <int kElements>
__device__ __forceinline__ void round_to_tf32(float* values) {
  using Vector = std::conditional_t<kElements == 4, float4, std::conditional_t<kElements == 2, float2, float>>;
  static_assert(sizeof(Vector) == kElements * sizeof(float));
  Vector vector = *reinterpret_cast<Vector*>(values);
  float* elements = reinterpret_cast<float*>(&vector);
#pragma unroll
  for (int e = 0; e < kElements; ++e) elements[e] = __uint_as_float(to_tf32(elements[e]));
  *reinterpret_cast<Vector*>(values) = vector;
}

// Four 8 x 8 matrices of 16-bit values (or 8 x 4 of 32-bit ones) from shared memory, one register
// each: lanes 8m to 8m + 7 give the 16-byte aligned row addresses of matrix m; lane l receives
// row l / 4, 32-bit column l % 4 of every matrix (the layout of an mma B fragment register).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&d)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address));
}

// The same four matrices transposed: lane l receives 32-bit row l % 4 (two stored rows, 2 (l % 4)
// and 2 (l % 4) + 1), column l / 4 of every matrix: an mma A fragment from operands stored K-major.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&d)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address));
}

// D += A * B for one m16n8k8 tile in TF32 (A: 4 registers, B: 2 registers, D: 4 floats).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D += A * B for one m16n8k16 tile of bfloat16 / float16 pairs.
template <typename T>
__device__ __forceinline__ void mma_16bit(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace convt::cuda
