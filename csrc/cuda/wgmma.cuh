// Warpgroup tensor-core building blocks (wgmma, sm_90a: H100 / H200), used by the implicit GEMM's
// warpgroup tiles (implicit_gemm.cuh) and the warpgroup grad_weight (grad_weight_wgmma.cuh). A
// warpgroup is 4 consecutive warps; one wgmma.m64nNkK computes a 64 x N tile, A (64 x K) from
// registers, B (K x N) from shared memory through a descriptor.
//
// Compiled only for sm_90a (setup.py builds 9.0 as 9.0a): elsewhere the wrappers trap, and the host
// never picks warpgroup tiles (wgmma_built()).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONVT_WGMMA_AVAILABLE 1
#else
#define CONVT_WGMMA_AVAILABLE 0
#endif

namespace convt::cuda {

// Whether this library's device code has the wgmma kernels (setup.py defines CONVT_WGMMA when it
// builds for 9.0a)
constexpr bool wgmma_built() {
#ifdef CONVT_WGMMA
  return true;
#else
  return false;
#endif
}

// B in shared memory, K-major and swizzled, in rows of kRowBytes = 64 or 128 bytes along K: for each
// group of 8 B columns (n) an atom of 8 rows (8 * kRowBytes bytes, aligned to its size), atoms of
// consecutive column groups adjacent. Byte k of column n sits at
//   (n / 8) * 8 * kRowBytes + (n % 8) * kRowBytes + ((k / 16) ^ swizzle(n % 8)) * 16 + k % 16,
// swizzle(r) = r for 128-byte rows, r / 2 for 64-byte rows (the hardware XORs address bits 7-9, or
// 7-8, into bits 4-6, or 4-5). One k-step (32 bytes of K: 8 TF32 or 16 16-bit values) starts 32 bytes
// further along the row.
constexpr int kMaxSwizzleAtomBytes = 1024;
// (row_bytes divides 128: atom_row * row_bytes / 128 is atom_row / (128 / row_bytes), by a shift)
__host__ __device__ constexpr int swizzle_of_row(int atom_row, int row_bytes) { return atom_row * row_bytes / 128; }
// The descriptor of such a B starting at `b` (+ 32 bytes per k-step). The same atoms describe a
// 16-bit A (64 x K) MN-major at 128-byte rows, a row a k (the 64 M values of channel k), as a TMA box
// of 64 positions x K channels lands with 128-byte swizzling (+ 2048 bytes per k-step of 16 rows):
// the instruction's transpose flag tells them apart (wgmma_kstep on a descriptor).
template <int kRowBytes>
__device__ __forceinline__ uint64_t swizzled_descriptor(const void* b) {
  static_assert(kRowBytes == 64 || kRowBytes == 128);
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(b));
  return uint64_t((address & 0x3FFFF) >> 4)                 // start address / 16
         | uint64_t(1) << 16                                 // leading-dimension offset (unused when swizzled)
         | uint64_t(8 * kRowBytes >> 4) << 32                // stride between atoms / 16
         | uint64_t(kRowBytes == 128 ? 1 : 2) << 62;         // 128- or 64-byte swizzle
}

// A 16-bit B (K x N) N-major in shared memory as TMA boxes of 64 N values x K rows land with
// 128-byte swizzling: a row a k (its 64 N values, 128 bytes), 8-row atoms 1024 bytes apart along K
// (+ 2048 bytes per k-step of 16 rows), the next 64 N values `block_bytes` further on (the
// descriptor's leading-dimension offset; its stride offset the atoms')
__device__ __forceinline__ uint64_t mn_major_descriptor(const void* b, uint32_t block_bytes) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(b));
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t((block_bytes >> 4) & 0x3FFF) << 16 | uint64_t(1024 >> 4) << 32 |
         uint64_t(1) << 62;
}

// Ordering: registers (A, accumulators) written before a wgmma need wgmma_fence(); a batch of wgmma
// is committed as one group and waited for before its accumulators are read, B's shared memory is
// overwritten or its A registers are reused (ptxas does not keep them: loading the next batch's A
// while one runs gives wrong sums).
// B written to shared memory by ordinary stores or cp.async needs fence_async_shared() in each
// writing thread before the barrier that precedes the wgmma.
__device__ __forceinline__ void wgmma_fence() {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Holds computed A registers in place before wgmma_fence(): otherwise the compiler may finish them
// (16-bit pair merges, masks) after the fence, and ptxas then injects a wait before each wgmma
__device__ __forceinline__ void wgmma_fence_operand(uint32_t (&a)[4]) {
  asm volatile("" : "+r"(a[0]), "+r"(a[1]), "+r"(a[2]), "+r"(a[3])::"memory");
}
// The accumulators of wgmma still running stay where they are (no compiler copies while it runs)
template <int N>
__device__ __forceinline__ void wgmma_fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) asm volatile("" : "+f"(d[e])::"memory");
}
__device__ __forceinline__ void wgmma_commit() {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Wait until at most kPending committed groups are still running
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
__device__ __forceinline__ void fence_async_shared() {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// This warpgroup's registers a thread become kRegisters (raised, or lowered to hand them to others)
template <int kRegisters, bool kRaise>
__device__ __forceinline__ void set_max_registers() {
#if CONVT_WGMMA_AVAILABLE
  if constexpr (kRaise) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  }
#endif
}

// ---- bulk copies and mbarriers (sm_90) ----------------------------------------------------------
// An mbarrier phase completes when its expected arrivals have come and the bytes announced to it
// (expect_tx) have landed; waiters name the phase by its parity.
__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, int arrivals) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
#endif
}
// Makes initialised mbarriers visible to the asynchronous proxy (bulk copies); a block barrier follows
__device__ __forceinline__ void mbarrier_init_fence() {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier)) : "memory");
#endif
}
// Arrives on the barrier once this thread's cp.async copies issued so far have landed (counted
// among its expected arrivals)
__device__ __forceinline__ void cp_async_arrive(uint64_t* barrier) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(barrier)) : "memory");
#endif
}
// Announces `bytes` more to land in the barrier's current phase
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* barrier, uint32_t bytes) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes) : "memory");
#endif
}
// Waits until the phase of this parity has completed (a fresh barrier's phase of parity 1 counts as
// completed: the one before its first)
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
#if CONVT_WGMMA_AVAILABLE
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred completed;\nmbarrier.try_wait.parity.shared::cta.b64 completed, [%1], %2;\nselp.u32 %0, 1, 0, completed;\n}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  }
#endif
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, landing on `barrier`
__device__ __forceinline__ void bulk_copy_to_shared(void* shared, const void* global, uint32_t bytes, uint64_t* barrier) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(shared)),
               "l"(global), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
#endif
}

// The box of a 3-D tensor map (the host's cuTensorMapEncodeTiled) at coordinates (c0 innermost, c1,
// c2) -> shared memory, landing on `barrier` (bytes: the whole box, zeros where it lies outside the
// tensor); `map` in parameter, constant or global memory
__device__ __forceinline__ void tensor_copy_to_shared(void* shared, const void* map, int c0, int c1, int c2, uint64_t* barrier) {
#if CONVT_WGMMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          shared_address(shared)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(barrier))
      : "memory");
#endif
}

// One k-step, d (64 x kN, f32) += a (64 x K) * b (K x kN), kN = 16, 32, 64 or 128, K = 8 (TF32) or 16
// (16-bit), for the element type Kind (Tf32 tags float data in TF32 mode). Fragments per warp w of
// the warpgroup, g = lane / 4, c = lane % 4:
//   A: rows 16w + (g, g + 8), the same registers as mma.sync's m16n8k8 (TF32) / m16n8k16 (16-bit) A
//   d: d[4j + e] = row 16w + g + 8 * (e / 2), column 8j + 2c + e % 2
// scale-d is a predicate set from 1 (accumulate: the kernels clear their accumulators themselves).
struct Tf32 {};

// The accumulator operands of an m64nN wgmma: the text of its N / 2 registers, operands %0 on, and
// their constraints (n72: d's 32 and `extra`'s 4)
#define CONVT_WGMMA_D16_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define CONVT_WGMMA_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define CONVT_WGMMA_D32_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define CONVT_WGMMA_D32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define CONVT_WGMMA_D64_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define CONVT_WGMMA_D64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define CONVT_WGMMA_D128_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define CONVT_WGMMA_D128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define CONVT_WGMMA_D256_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define CONVT_WGMMA_D256 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define CONVT_WGMMA_D72_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
#define CONVT_WGMMA_D72 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(extra[0]), "+f"(extra[1]), "+f"(extra[2]), "+f"(extra[3])

// One wgmma after the accumulators (operand D, the last accumulator register's index) with A from
// registers (operands D + 1 to D + 4) or from shared memory by descriptor (`a`, MN-major: 16-bit
// only), B by descriptor; scale-d is a predicate set from the last operand (1: accumulate, the
// kernels clear their accumulators themselves). TAIL: B's transpose flag where the type has one
// (16-bit: 0, K-major; TF32 has none).
#define CONVT_WGMMA_RS(SHAPE_AND_TYPES, D_TEXT, A0, A1, A2, A3, B, P, TAIL, ...)                              \
  asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %" P ", 0;\n"                          \
               "wgmma.mma_async.sync.aligned." SHAPE_AND_TYPES " " D_TEXT ", {%" A0 ", %" A1 ", %" A2 ", %" A3 \
               "}, %" B ", accumulate, 1, 1" TAIL ";\n}\n"                                               \
               : __VA_ARGS__                                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
#define CONVT_WGMMA_SS(SHAPE_AND_TYPES, D_TEXT, A, B, P, TAIL, ...)                                           \
  asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %" P ", 0;\n"                          \
               "wgmma.mma_async.sync.aligned." SHAPE_AND_TYPES " " D_TEXT ", %" A ", %" B                    \
               ", accumulate, 1, 1" TAIL ";\n}\n"                                                          \
               : __VA_ARGS__                                                                            \
               : "l"(a_descriptor), "l"(b), "r"(1))
// the register-A form of m64nN (operand indices after its N / 2 accumulators)
#define CONVT_WGMMA_RS_N128(SHAPE, TAIL) CONVT_WGMMA_RS(SHAPE, CONVT_WGMMA_D128_TEXT, "64", "65", "66", "67", "68", "69", TAIL, CONVT_WGMMA_D128)
#define CONVT_WGMMA_RS_N64(SHAPE, TAIL) CONVT_WGMMA_RS(SHAPE, CONVT_WGMMA_D64_TEXT, "32", "33", "34", "35", "36", "37", TAIL, CONVT_WGMMA_D64)
#define CONVT_WGMMA_RS_N32(SHAPE, TAIL) CONVT_WGMMA_RS(SHAPE, CONVT_WGMMA_D32_TEXT, "16", "17", "18", "19", "20", "21", TAIL, CONVT_WGMMA_D32)
#define CONVT_WGMMA_RS_N16(SHAPE, TAIL) CONVT_WGMMA_RS(SHAPE, CONVT_WGMMA_D16_TEXT, "8", "9", "10", "11", "12", "13", TAIL, CONVT_WGMMA_D16)
#define CONVT_WGMMA_RS_N72(SHAPE, TAIL) CONVT_WGMMA_RS(SHAPE, CONVT_WGMMA_D72_TEXT, "36", "37", "38", "39", "40", "41", TAIL, CONVT_WGMMA_D72)
#define CONVT_WGMMA_SS_N256(SHAPE, TAIL) CONVT_WGMMA_SS(SHAPE, CONVT_WGMMA_D256_TEXT, "128", "129", "130", TAIL, CONVT_WGMMA_D256)
#define CONVT_WGMMA_SS_N128(SHAPE, TAIL) CONVT_WGMMA_SS(SHAPE, CONVT_WGMMA_D128_TEXT, "64", "65", "66", TAIL, CONVT_WGMMA_D128)
#define CONVT_WGMMA_SS_N64(SHAPE, TAIL) CONVT_WGMMA_SS(SHAPE, CONVT_WGMMA_D64_TEXT, "32", "33", "34", TAIL, CONVT_WGMMA_D64)
#define CONVT_WGMMA_SS_N32(SHAPE, TAIL) CONVT_WGMMA_SS(SHAPE, CONVT_WGMMA_D32_TEXT, "16", "17", "18", TAIL, CONVT_WGMMA_D32)
#define CONVT_WGMMA_SS_N16(SHAPE, TAIL) CONVT_WGMMA_SS(SHAPE, CONVT_WGMMA_D16_TEXT, "8", "9", "10", TAIL, CONVT_WGMMA_D16)

// the instruction's shape and types; A and B's transpose flags where the type has them (16-bit:
// B 0, K-major; A from shared memory 1, MN-major, or 0, K-major; TF32 has none: both K-major)
#define CONVT_WGMMA_KSTEP(N)                                                    \
  if constexpr (kMnMajorA && std::is_same_v<Kind, __nv_bfloat16>) {             \
    CONVT_WGMMA_SS_N##N("m64n" #N "k16.f32.bf16.bf16", ", 1, 0");              \
  } else if constexpr (kMnMajorA) {                                             \
    CONVT_WGMMA_SS_N##N("m64n" #N "k16.f32.f16.f16", ", 1, 0");                \
  } else if constexpr (kKMajorA && std::is_same_v<Kind, Tf32>) {                \
    CONVT_WGMMA_SS_N##N("m64n" #N "k8.f32.tf32.tf32", "");                     \
  } else if constexpr (kKMajorA && std::is_same_v<Kind, __nv_bfloat16>) {       \
    CONVT_WGMMA_SS_N##N("m64n" #N "k16.f32.bf16.bf16", ", 0, 0");              \
  } else if constexpr (kKMajorA) {                                              \
    CONVT_WGMMA_SS_N##N("m64n" #N "k16.f32.f16.f16", ", 0, 0");                \
  } else if constexpr (std::is_same_v<Kind, Tf32>) {                            \
    CONVT_WGMMA_RS_N##N("m64n" #N "k8.f32.tf32.tf32", "");                     \
  } else if constexpr (std::is_same_v<Kind, __nv_bfloat16>) {                   \
    CONVT_WGMMA_RS_N##N("m64n" #N "k16.f32.bf16.bf16", ", 0");                 \
  } else {                                                                      \
    CONVT_WGMMA_RS_N##N("m64n" #N "k16.f32.f16.f16", ", 0");                   \
  }

// A of a k-step in shared memory by its descriptor (swizzled_descriptor<row bytes>): MN-major
// (16-bit only) or K-major (B's own layout)
struct MnMajorA {
  uint64_t descriptor;
};
struct KMajorA {
  uint64_t descriptor;
};

// `a`: this thread's A fragment (uint32_t[4], the layout above), or A in shared memory (MnMajorA,
// KMajorA); d's layout the same
// kMnMajorB: B N-major (16-bit, A K-major in shared memory: mn_major_descriptor). kN = 256: A from
// shared memory only, K-major.
template <typename Kind, int kN, typename A, bool kMnMajorB = false>
__device__ __forceinline__ void wgmma_kstep(float (&d)[kN / 2], const A& a, uint64_t b) {
  static_assert(kN == 16 || kN == 32 || kN == 64 || kN == 128 || kN == 256);
  constexpr bool kMnMajorA = std::is_same_v<A, MnMajorA>, kKMajorA = std::is_same_v<A, KMajorA>;
  static_assert(!kMnMajorA || !std::is_same_v<Kind, Tf32>);  // (TF32's A is K-major only)
  static_assert(kN != 256 || kKMajorA);
  static_assert(!kMnMajorB || (kKMajorA && !std::is_same_v<Kind, Tf32> && kN >= 64));
#if CONVT_WGMMA_AVAILABLE
  uint64_t a_descriptor = 0;
  if constexpr (kMnMajorA || kKMajorA) a_descriptor = a.descriptor;
  if constexpr (kMnMajorB) {
    constexpr bool kBf16 = std::is_same_v<Kind, __nv_bfloat16>;
    if constexpr (kN == 256) {
      if constexpr (kBf16) { CONVT_WGMMA_SS_N256("m64n256k16.f32.bf16.bf16", ", 0, 1"); }
      else { CONVT_WGMMA_SS_N256("m64n256k16.f32.f16.f16", ", 0, 1"); }
    } else if constexpr (kN == 128) {
      if constexpr (kBf16) { CONVT_WGMMA_SS_N128("m64n128k16.f32.bf16.bf16", ", 0, 1"); }
      else { CONVT_WGMMA_SS_N128("m64n128k16.f32.f16.f16", ", 0, 1"); }
    } else {
      if constexpr (kBf16) { CONVT_WGMMA_SS_N64("m64n64k16.f32.bf16.bf16", ", 0, 1"); }
      else { CONVT_WGMMA_SS_N64("m64n64k16.f32.f16.f16", ", 0, 1"); }
    }
  } else if constexpr (kN == 256) {
    if constexpr (std::is_same_v<Kind, Tf32>) {
      CONVT_WGMMA_SS_N256("m64n256k8.f32.tf32.tf32", "");
    } else if constexpr (std::is_same_v<Kind, __nv_bfloat16>) {
      CONVT_WGMMA_SS_N256("m64n256k16.f32.bf16.bf16", ", 0, 0");
    } else {
      CONVT_WGMMA_SS_N256("m64n256k16.f32.f16.f16", ", 0, 0");
    }
  } else if constexpr (kN == 128) {
    CONVT_WGMMA_KSTEP(128)
  } else if constexpr (kN == 64) {
    CONVT_WGMMA_KSTEP(64)
  } else if constexpr (kN == 32) {
    CONVT_WGMMA_KSTEP(32)
  } else {
    CONVT_WGMMA_KSTEP(16)
  }
#else
  __trap();
#endif
}
// A 16-bit k-step of 72 columns (bfloat16 or half): the 64 of d and 8 more in `extra` (extra[e] as
// d[32 + e] of the layout above: columns 64 + 2c + e % 2)
template <typename Kind>
__device__ __forceinline__ void wgmma_kstep_n72(float (&d)[32], float (&extra)[4], const uint32_t (&a)[4], uint64_t b) {
  static_assert(!std::is_same_v<Kind, Tf32>);
#if CONVT_WGMMA_AVAILABLE
  if constexpr (std::is_same_v<Kind, __nv_bfloat16>) {
    CONVT_WGMMA_RS_N72("m64n72k16.f32.bf16.bf16", ", 0");
  } else {
    CONVT_WGMMA_RS_N72("m64n72k16.f32.f16.f16", ", 0");
  }
#else
  __trap();
#endif
}
#undef CONVT_WGMMA_KSTEP
#undef CONVT_WGMMA_RS_N128
#undef CONVT_WGMMA_RS_N64
#undef CONVT_WGMMA_RS_N32
#undef CONVT_WGMMA_RS_N16
#undef CONVT_WGMMA_RS_N72
#undef CONVT_WGMMA_SS_N256
#undef CONVT_WGMMA_SS_N128
#undef CONVT_WGMMA_SS_N64
#undef CONVT_WGMMA_SS_N32
#undef CONVT_WGMMA_SS_N16
#undef CONVT_WGMMA_RS
#undef CONVT_WGMMA_SS
#undef CONVT_WGMMA_D16_TEXT
#undef CONVT_WGMMA_D16
#undef CONVT_WGMMA_D32_TEXT
#undef CONVT_WGMMA_D32
#undef CONVT_WGMMA_D64_TEXT
#undef CONVT_WGMMA_D64
#undef CONVT_WGMMA_D256_TEXT
#undef CONVT_WGMMA_D256
#undef CONVT_WGMMA_D128_TEXT
#undef CONVT_WGMMA_D128
#undef CONVT_WGMMA_D72_TEXT
#undef CONVT_WGMMA_D72

}  // namespace convt::cuda
