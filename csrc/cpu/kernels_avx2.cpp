// AVX2/FMA micro-kernels (kernels_avx2.h), the GEMM's also on AVX-512F's 16-float vectors
// (wide_vectors). Each function that uses an instruction set carries target("avx2,fma") or
// target("avx512f,avx2,fma"); nothing else in the library does, so it loads and runs on any x86-64 CPU, and
// these run only where available() says so (the planner asks it). Function by function rather than
// -mavx2 -mfma for this file: with the flags, every inline function of the headers it includes (the
// standard library's) would be compiled here for AVX2 too, and the linker may keep that copy for the
// whole library, which would then fault on CPUs without AVX2. tests/test_coverage.py checks that AVX
// instructions appear only in this file's functions.
#include "cpu/kernels_avx2.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define CONVT_AVX2 1
#include <immintrin.h>
#else
#define CONVT_AVX2 0
#endif

namespace convt::cpu::avx2 {

#if CONVT_AVX2

#define CONVT_TARGET __attribute__((target("avx2,fma")))
#define CONVT_TARGET_512 __attribute__((target("avx512f,avx2,fma")))
#define CONVT_UNROLL _Pragma("GCC unroll 16")

bool available() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// Whether the GEMM's micro-kernels run on 16-float vectors (AVX-512F), twice the columns a call.
// CONVT_CPU_VECTOR_BITS=256 keeps AVX2's on such a CPU (read once a process: tests run both kernels
// on one machine).
bool wide_vectors() {
  static const bool yes = [] {
    const char* bits = std::getenv("CONVT_CPU_VECTOR_BITS");
    return available() && __builtin_cpu_supports("avx512f") && !(bits != nullptr && std::strcmp(bits, "256") == 0);
  }();
  return yes;
}

namespace {

constexpr int64_t kDepthBlock = 128;  // reduction steps per block: the B rows of a column step stay in L1
constexpr int64_t kPrefetchRows = 8;  // gemm_blocks' copies of whole rows: rows requested this far ahead

// Columns per call for a tile of MR < 6 rows: 12 accumulators or fewer, at most 8 vectors.
template <int MR>
constexpr int kVectorsFor = MR == 1 ? 8 : MR == 2 ? 6 : MR == 3 ? 4 : MR == 4 ? 3 : 2;

// C (MR x 8*NV) (+)= A @ B over kc steps: A(r, kk) at a + kk*a_step + r (a packed panel), or with
// kRows at a + r*a_step + kk (rows read in place, a_step floats apart); B's row kk at b[kk] + column.
template <int MR, int NV, bool kRows = false>
CONVT_TARGET void kernel(int64_t kc, const float* a, int64_t a_step, const float* const* b, int64_t column, float* c, int64_t ldc,
                         bool accumulate) {
  __m256 acc[MR][NV];
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* row = b[kk] + column;
    const float* col = kRows ? a + kk : a + kk * a_step;
    __m256 bv[NV];
    CONVT_UNROLL for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(row + 8 * v);
    CONVT_UNROLL for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(kRows ? col + r * a_step : col + r);
      CONVT_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
  }
}

// The same on 16-float vectors: C (MR x 16*NV). A copy of `kernel`, not a vector-type parameter of
// it: the instruction set is the function's target attribute, which a template cannot vary, and one
// body compiled for AVX-512F could put EVEX code in the AVX2 kernels of CPUs without it.
template <int MR, int NV, bool kRows = false>
CONVT_TARGET_512 void kernel_512(int64_t kc, const float* a, int64_t a_step, const float* const* b, int64_t column, float* c,
                                 int64_t ldc, bool accumulate) {
  __m512 acc[MR][NV];
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* row = b[kk] + column;
    const float* col = kRows ? a + kk : a + kk * a_step;
    __m512 bv[NV];
    CONVT_UNROLL for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(row + 16 * v);
    CONVT_UNROLL for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(kRows ? col[r * a_step] : col[r]);
      CONVT_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

using Kernel = void (*)(int64_t, const float*, int64_t, const float* const*, int64_t, float*, int64_t, bool);
// Panels' kernels by rows (1..6) at NV vectors a row: 2, a column step; 1, a panel's last column step
// where at most one vector of its columns is left (a row of 100 positions: 3 full steps of 32 and 4
// columns), half the products of a full step (its 6 accumulators keep fewer FMAs in flight than a full
// step's 12, still more of its products count); with kRows, A's rows read in place. Narrow tiles' by
// rows (1..5), wider.
template <int NV, bool kRows = false>
constexpr Kernel kPanelKernels[7] = {nullptr,
                                     kernel<1, NV, kRows>,
                                     kernel<2, NV, kRows>,
                                     kernel<3, NV, kRows>,
                                     kernel<4, NV, kRows>,
                                     kernel<5, NV, kRows>,
                                     kernel<6, NV, kRows>};
constexpr Kernel kNarrowKernels[6] = {nullptr,
                                      kernel<1, kVectorsFor<1>>,
                                      kernel<2, kVectorsFor<2>>,
                                      kernel<3, kVectorsFor<3>>,
                                      kernel<4, kVectorsFor<4>>,
                                      kernel<5, kVectorsFor<5>>};
template <int NV, bool kRows = false>
constexpr Kernel kPanelKernels512[7] = {nullptr,
                                        kernel_512<1, NV, kRows>,
                                        kernel_512<2, NV, kRows>,
                                        kernel_512<3, NV, kRows>,
                                        kernel_512<4, NV, kRows>,
                                        kernel_512<5, NV, kRows>,
                                        kernel_512<6, NV, kRows>};
constexpr Kernel kNarrowKernels512[6] = {nullptr,
                                         kernel_512<1, kVectorsFor<1>>,
                                         kernel_512<2, kVectorsFor<2>>,
                                         kernel_512<3, kVectorsFor<3>>,
                                         kernel_512<4, kVectorsFor<4>>,
                                         kernel_512<5, kVectorsFor<5>>};

// The steps' start pointers for steps [k0, k0 + kc).
inline void step_pointers(const Operand& x, int64_t k0, int64_t kc, const float** out) {
  int64_t o = k0 / x.inner, i = k0 % x.inner;
  const float* base = x.base + o * x.outer_stride;
  for (int64_t kk = 0; kk < kc; ++kk) {
    out[kk] = base + x.offsets[i];
    if (++i == x.inner) {
      i = 0;
      base += x.outer_stride;
    }
  }
}

// ---- dot products ----

CONVT_TARGET inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

CONVT_TARGET inline __m256i tail_mask(int64_t count) {  // lanes [0, count) on, 0 < count < 8
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
}

// sums[r][c] = sum_{m < length} x[r*xs + m] * y[c][m]; U independent accumulators per pair.
template <int MR, int NC>
CONVT_TARGET void dot_kernel(int64_t length, const float* x, int64_t xs, const float* const* y, float sums[MR][NC]) {
  constexpr int U = MR * NC >= 6 ? 1 : MR * NC >= 3 ? 2 : 4;
  __m256 acc[U][MR][NC];
  CONVT_UNROLL for (int u = 0; u < U; ++u) {
    CONVT_UNROLL for (int r = 0; r < MR; ++r) {
      CONVT_UNROLL for (int c = 0; c < NC; ++c) acc[u][r][c] = _mm256_setzero_ps();
    }
  }
  int64_t m = 0;
  for (; m + 8 * U <= length; m += 8 * U) {
    CONVT_UNROLL for (int u = 0; u < U; ++u) {
      __m256 xv[MR];
      CONVT_UNROLL for (int r = 0; r < MR; ++r) xv[r] = _mm256_loadu_ps(x + r * xs + m + 8 * u);
      CONVT_UNROLL for (int c = 0; c < NC; ++c) {
        const __m256 yv = _mm256_loadu_ps(y[c] + m + 8 * u);
        CONVT_UNROLL for (int r = 0; r < MR; ++r) acc[u][r][c] = _mm256_fmadd_ps(xv[r], yv, acc[u][r][c]);
      }
    }
  }
  for (; m < length; m += 8) {
    const bool full = m + 8 <= length;
    const __m256i mask = full ? _mm256_set1_epi32(-1) : tail_mask(length - m);
    __m256 xv[MR];
    CONVT_UNROLL for (int r = 0; r < MR; ++r) xv[r] = _mm256_maskload_ps(x + r * xs + m, mask);
    CONVT_UNROLL for (int c = 0; c < NC; ++c) {
      const __m256 yv = _mm256_maskload_ps(y[c] + m, mask);
      CONVT_UNROLL for (int r = 0; r < MR; ++r) acc[0][r][c] = _mm256_fmadd_ps(xv[r], yv, acc[0][r][c]);
    }
  }
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int c = 0; c < NC; ++c) {
      __m256 total = acc[0][r][c];
      CONVT_UNROLL for (int u = 1; u < U; ++u) total = _mm256_add_ps(total, acc[u][r][c]);
      sums[r][c] = horizontal_sum(total);
    }
  }
}

template <int MR, int NC>
CONVT_TARGET void dot_block(int64_t length, const float* x, int64_t xs, const float* const* y, float* out, int64_t ld,
                            bool accumulate) {
  float sums[MR][NC];
  dot_kernel<MR, NC>(length, x, xs, y, sums);
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NC; ++c) out[r * ld + c] = accumulate ? out[r * ld + c] + sums[r][c] : sums[r][c];
  }
}

// The same on 16-float vectors (wide_vectors), blocks of up to 6 x 4: 24 accumulators for 10 loads, most
// of which cross a cache line (rows at any offset); lanes summed in a fixed tree at the end. A copy, as
// kernel_512 is of kernel: the instruction set is the function's target attribute.
template <int MR, int NC>
CONVT_TARGET_512 void dot_block512(int64_t length, const float* x, int64_t xs, const float* const* y, float* out, int64_t ld,
                                   bool accumulate) {
  constexpr int U = MR * NC >= 8 ? 1 : MR * NC >= 3 ? 2 : 4;
  __m512 acc[U][MR][NC];
  CONVT_UNROLL for (int u = 0; u < U; ++u) {
    CONVT_UNROLL for (int r = 0; r < MR; ++r) { CONVT_UNROLL for (int c = 0; c < NC; ++c) acc[u][r][c] = _mm512_setzero_ps(); }
  }
  int64_t m = 0;
  for (; m + 16 * U <= length; m += 16 * U) {
    CONVT_UNROLL for (int u = 0; u < U; ++u) {
      __m512 yv[NC];
      CONVT_UNROLL for (int c = 0; c < NC; ++c) yv[c] = _mm512_loadu_ps(y[c] + m + 16 * u);
      CONVT_UNROLL for (int r = 0; r < MR; ++r) {
        const __m512 xv = _mm512_loadu_ps(x + r * xs + m + 16 * u);
        CONVT_UNROLL for (int c = 0; c < NC; ++c) acc[u][r][c] = _mm512_fmadd_ps(xv, yv[c], acc[u][r][c]);
      }
    }
  }
  for (; m < length; m += 16) {  // (up to 16 U - 1 positions left)
    const __mmask16 mask = length - m >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (length - m)) - 1);
    __m512 yv[NC];
    CONVT_UNROLL for (int c = 0; c < NC; ++c) yv[c] = _mm512_maskz_loadu_ps(mask, y[c] + m);
    CONVT_UNROLL for (int r = 0; r < MR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + r * xs + m);
      CONVT_UNROLL for (int c = 0; c < NC; ++c) acc[0][r][c] = _mm512_fmadd_ps(xv, yv[c], acc[0][r][c]);
    }
  }
  CONVT_UNROLL for (int r = 0; r < MR; ++r) {
    CONVT_UNROLL for (int c = 0; c < NC; ++c) {
      __m512 total = acc[0][r][c];
      CONVT_UNROLL for (int u = 1; u < U; ++u) total = _mm512_add_ps(total, acc[u][r][c]);
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, total);
      const float sum = horizontal_sum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
      out[r * ld + c] = accumulate ? out[r * ld + c] + sum : sum;
    }
  }
}

using DotBlock = void (*)(int64_t, const float*, int64_t, const float* const*, float*, int64_t, bool);
constexpr DotBlock kDotBlocks[3][4] = {
    {dot_block<1, 1>, dot_block<1, 2>, dot_block<1, 3>, dot_block<1, 4>},
    {dot_block<2, 1>, dot_block<2, 2>, dot_block<2, 3>, dot_block<2, 4>},
    {dot_block<3, 1>, dot_block<3, 2>, dot_block<3, 3>, dot_block<3, 4>},
};
constexpr DotBlock kDotBlocks512[6][4] = {
    {dot_block512<1, 1>, dot_block512<1, 2>, dot_block512<1, 3>, dot_block512<1, 4>},
    {dot_block512<2, 1>, dot_block512<2, 2>, dot_block512<2, 3>, dot_block512<2, 4>},
    {dot_block512<3, 1>, dot_block512<3, 2>, dot_block512<3, 3>, dot_block512<3, 4>},
    {dot_block512<4, 1>, dot_block512<4, 2>, dot_block512<4, 3>, dot_block512<4, 4>},
    {dot_block512<5, 1>, dot_block512<5, 2>, dot_block512<5, 3>, dot_block512<5, 4>},
    {dot_block512<6, 1>, dot_block512<6, 2>, dot_block512<6, 3>, dot_block512<6, 4>},
};

}  // namespace

int64_t column_step(int64_t panel) {
  const int64_t lanes = wide_vectors() ? 16 : 8;
  switch (panel) {
    case 1: return lanes * kVectorsFor<1>;
    case 2: return lanes * kVectorsFor<2>;
    case 3: return lanes * kVectorsFor<3>;
    case 4: return lanes * kVectorsFor<4>;
    case 5: return lanes * kVectorsFor<5>;
    default: return 2 * lanes;
  }
}

// Per block of reduction steps, per column step, every panel of 6 rows (the last one shorter): the B
// rows of the column step stay in L1 across the panels, the A block in L2.
namespace {

// A block of in-place rows (rows x kc, row r at a + r*a_row) packed into panels of `panel` rows.
CONVT_TARGET void pack_block(int64_t rows, int64_t kc, const float* a, int64_t a_row, int64_t panel, float* out) {
  for (int64_t r0 = 0; r0 < rows; r0 += panel) {
    const int64_t valid = rows - r0 < panel ? rows - r0 : panel;
    float* dst = out + r0 * kc;
    for (int64_t r = 0; r < valid; ++r) {
      const float* src = a + (r0 + r) * a_row;
      for (int64_t kk = 0; kk < kc; ++kk) dst[kk * panel + r] = src[kk];
    }
    for (int64_t r = valid; r < panel; ++r) {
      for (int64_t kk = 0; kk < kc; ++kk) dst[kk * panel + r] = 0.0f;
    }
  }
}

// A row's `count` columns (a multiple of 8) to 32-byte aligned `out`
CONVT_TARGET void copy_columns(float* out, const float* row, int64_t count) {
  for (int64_t v = 0; v < count; v += 8) _mm256_store_ps(out + v, _mm256_loadu_ps(row + v));
}

enum class ASource { kPacked, kRows };

// Column steps up to which gemm_rows' kernels read A's rows in place (gemm_blocks)
constexpr int64_t kRowsInPlaceSteps = 16;

// This CPU's panel kernels at NV vectors a row, over A packed or its rows in place
template <int NV>
const Kernel* panel_kernels_of(bool rows_in_place) {
  if (wide_vectors()) return rows_in_place ? kPanelKernels512<NV, true> : kPanelKernels512<NV>;
  return rows_in_place ? kPanelKernels<NV, true> : kPanelKernels<NV>;
}

// kPacked: A packed by pack_a (panels of `panel` rows over the whole depth). kRows: A's rows in place
// (row r at a + r*a_row), packed here per block of steps into `scratch` (rows rounded up to panels x
// kDepthBlock floats): read in place directly, they would be re-read for every column step, often from
// the same cache sets, a_row a multiple of 4 KB. Except panels of 6 rows over at most
// kRowsInPlaceSteps column steps, whose kernels read the rows in place (kPanelKernels' kRows): the
// pack, a scalar transpose of every element, costs as much as the products it feeds over a few
// column steps (grad_input of short rows: on a 2-core Zen 3, 0.5-0.9x the time over 2-16 steps,
// docs/perf/2026-12-07-session105.md).
template <ASource kSource>
CONVT_TARGET void gemm_blocks(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row, int64_t panel,
                              int64_t panel_stride, const Operand& b, int64_t column, float* c, int64_t ldc, bool accumulate,
                              float* scratch) {
  const int64_t step = column_step(panel);
  const bool rows_in_place = kSource == ASource::kRows && panel == 6 && cols <= kRowsInPlaceSteps * step;
  const float* b_steps[kDepthBlock];
  for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    const int64_t kc = depth - k0 < kDepthBlock ? depth - k0 : kDepthBlock;
    step_pointers(b, k0, kc, b_steps);
    const float* a_block = a + k0 * panel;
    int64_t panel_offset = panel_stride, a_step = 6;
    if constexpr (kSource == ASource::kRows) {
      if (rows_in_place) {
        a_block = a + k0, panel_offset = 6 * a_row, a_step = a_row;
      } else {
        pack_block(rows, kc, a + k0, a_row, panel, scratch);
        a_block = scratch;
        panel_offset = panel * kc;
      }
    }
    const bool add = accumulate || k0 > 0;
    // Where several panels read a column step's B block (kc rows x step floats) whose steps are distinct
    // rows (inner 1), it is copied contiguous first ([kk][step]): in place, rows off 64-byte alignment
    // span two cache lines each, and rows a multiple of 4 KB apart fall in the same L1 sets. Steps that
    // are one row at several shifts (inner > 1: a channel's taps) touch few lines, which stay in L1, so
    // they are read in place (docs/perf/2026-11-30-cpu-b-in-place.md). Where B's steps are distinct rows
    // pages apart (a weight's rows, channels' rows; not a row at each tap's shift), the blocks
    // of all column steps are copied at once, each row read once along its columns, for any number of
    // panels (one narrow panel too): reading 64 bytes of each of kc such rows per column step defeats
    // the hardware prefetcher.
    const bool whole_rows = b.inner == 1 && b.outer_stride >= 1024;  // (B's steps rows pages apart)
    const bool copy_b = (rows > 12 && b.inner == 1) || whole_rows;
    const int64_t blocks_copied = whole_rows ? (cols + step - 1) / step : 1;
    thread_local std::vector<float> b_buffer;
    if (copy_b && static_cast<int64_t>(b_buffer.size()) < blocks_copied * kDepthBlock * step + 8) {
      b_buffer.resize(blocks_copied * kDepthBlock * step + 8);
    }
    float* const b_blocks =  // (32-byte aligned)
        b_buffer.data() + ((32 - reinterpret_cast<uintptr_t>(b_buffer.data()) % 32) % 32) / sizeof(float);
    if (whole_rows) {
      for (int64_t kk = 0; kk < kc; ++kk) {
        if (kk + kPrefetchRows < kc) {  // (a row's columns kPrefetchRows rows ahead: rows pages apart are
                                        // separate streams, which the hardware prefetcher starts late)
          const float* ahead = b_steps[kk + kPrefetchRows] + column;
          for (int64_t v = 0; v < cols; v += 16) _mm_prefetch(reinterpret_cast<const char*>(ahead + v), _MM_HINT_T0);
        }
        const float* row = b_steps[kk] + column;
        float* out = b_blocks + kk * step;
        for (int64_t j = 0; j < cols; j += step, out += kc * step) copy_columns(out, row + j, step);
      }
    }
    const float* copied[kDepthBlock];
    if (panel < 6) {  // one narrow panel, wide column steps
      const Kernel run = (wide_vectors() ? kNarrowKernels512 : kNarrowKernels)[rows];
      for (int64_t j = 0; j < cols; j += step) {
        if (!whole_rows) {
          run(kc, a_block, panel, b_steps, column + j, c + j, ldc, add);
          continue;
        }
        const float* block = b_blocks + (j / step) * kc * step;
        for (int64_t kk = 0; kk < kc; ++kk) copied[kk] = block + kk * step;
        run(kc, a_block, panel, copied, 0, c + j, ldc, add);
      }
      continue;
    }
    const Kernel* const panel_kernels = panel_kernels_of<2>(rows_in_place);
    const Kernel* const tail_kernels = panel_kernels_of<1>(rows_in_place);
    for (int64_t j = 0; j < cols; j += step) {
      // The next column step's block, into L1 while this one's products run: its kc rows are as many
      // streams (channels' rows), more than the hardware prefetcher follows, and copied in one go they
      // would come from L2 or L3 one latency at a time.
      if (copy_b && !whole_rows && j + step < cols) {
        for (int64_t kk = 0; kk < kc; ++kk) {
          const float* next = b_steps[kk] + column + j + step;
          for (int64_t v = 0; v < step; v += 16) _mm_prefetch(reinterpret_cast<const char*>(next + v), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(next + step - 1), _MM_HINT_T0);
        }
      }
      const float* const* steps = b_steps;
      int64_t b_column = column + j;
      if (copy_b) {
        float* block = whole_rows ? b_blocks + (j / step) * kc * step : b_blocks;
        if (!whole_rows) {  // column step j's block alone
          for (int64_t kk = 0; kk < kc; ++kk) copy_columns(block + kk * step, b_steps[kk] + column + j, step);
        }
        for (int64_t kk = 0; kk < kc; ++kk) copied[kk] = block + kk * step;
        steps = copied, b_column = 0;
      }
      const Kernel* const kernels = cols - j <= step / 2 ? tail_kernels : panel_kernels;
      for (int64_t r0 = 0, p = 0; r0 < rows; r0 += 6, ++p) {
        const int64_t panel_rows = rows - r0 < 6 ? rows - r0 : 6;
        kernels[panel_rows](kc, a_block + p * panel_offset, a_step, steps, b_column, c + r0 * ldc + j, ldc, add);
      }
    }
  }
}

// C's columns that gemm writes, zero (a product over no steps).
void zero_tile(int64_t rows, int64_t cols, int64_t panel, float* c, int64_t ldc) {
  const int64_t step = column_step(panel), width = (cols + step - 1) / step * step;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j) c[r * ldc + j] = 0.0f;
  }
}

}  // namespace

void gemm(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t panel, int64_t panel_stride,
          const Operand& b, int64_t column, float* c, int64_t ldc, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  if (depth <= 0) {
    if (!accumulate) zero_tile(rows, cols, panel, c, ldc);
    return;
  }
  gemm_blocks<ASource::kPacked>(rows, cols, depth, a, 1, panel, panel_stride, b, column, c, ldc, accumulate,
                                nullptr);
}

void gemm_rows(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row, int64_t panel,
               const Operand& b, int64_t column, float* c, int64_t ldc, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  if (depth <= 0) {
    if (!accumulate) zero_tile(rows, cols, panel, c, ldc);
    return;
  }
  thread_local std::vector<float> scratch;
  scratch.resize((rows + 5) / 6 * 6 * kDepthBlock);
  gemm_blocks<ASource::kRows>(rows, cols, depth, a, a_row, panel, 0, b, column, c, ldc, accumulate,
                              scratch.data());
}

template <int kRows>
CONVT_TARGET void stream_rows_of(int64_t count, int64_t depth, const float* a, int64_t a_step, const float* x, int64_t x_step,
                                 float* c, int64_t ldc) {
  int64_t d = 0;
  for (; d < depth; d += 4) {
    const int64_t steps = depth - d < 4 ? depth - d : 4;
    const float* rows[4];
    __m256 weights[4][kRows];
    for (int64_t u = 0; u < 4; ++u) {
      rows[u] = x + (d + (u < steps ? u : 0)) * x_step;  // (steps past depth: weight 0)
      for (int r = 0; r < kRows; ++r) weights[u][r] = _mm256_set1_ps(u < steps ? a[(d + u) * a_step + r] : 0.0f);
    }
    for (int64_t u = 0; u < 4 && d + kPrefetchRows + u < depth; ++u) {
      const float* ahead = x + (d + kPrefetchRows + u) * x_step;
      for (int64_t j = 0; j < count; j += 16) _mm_prefetch(reinterpret_cast<const char*>(ahead + j), _MM_HINT_T0);
    }
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
      const __m256 x0 = _mm256_loadu_ps(rows[0] + j), x1 = _mm256_loadu_ps(rows[1] + j);
      const __m256 x2 = _mm256_loadu_ps(rows[2] + j), x3 = _mm256_loadu_ps(rows[3] + j);
      for (int r = 0; r < kRows; ++r) {
        __m256 sum = _mm256_loadu_ps(c + r * ldc + j);
        sum = _mm256_fmadd_ps(weights[0][r], x0, sum);
        sum = _mm256_fmadd_ps(weights[1][r], x1, sum);
        sum = _mm256_fmadd_ps(weights[2][r], x2, sum);
        sum = _mm256_fmadd_ps(weights[3][r], x3, sum);
        _mm256_storeu_ps(c + r * ldc + j, sum);
      }
    }
    for (; j < count; ++j) {
      for (int r = 0; r < kRows; ++r) {
        float sum = c[r * ldc + j];
        for (int64_t u = 0; u < steps; ++u) sum += a[(d + u) * a_step + r] * rows[u][j];
        c[r * ldc + j] = sum;
      }
    }
  }
}

void stream_rows(int64_t rows, int64_t count, int64_t depth, const float* a, int64_t a_step, const float* x, int64_t x_step,
                 float* c, int64_t ldc) {
  switch (rows) {
    case 1: return stream_rows_of<1>(count, depth, a, a_step, x, x_step, c, ldc);
    case 2: return stream_rows_of<2>(count, depth, a, a_step, x, x_step, c, ldc);
    case 3: return stream_rows_of<3>(count, depth, a, a_step, x, x_step, c, ldc);
    case 4: return stream_rows_of<4>(count, depth, a, a_step, x, x_step, c, ldc);
    case 5: return stream_rows_of<5>(count, depth, a, a_step, x, x_step, c, ldc);
    default: std::abort();
  }
}

CONVT_TARGET bool write_row(const float* in, int64_t count, float add, float* out, int64_t step) {
  const __m256 bias = _mm256_set1_ps(add);
  __m256 check = _mm256_setzero_ps();  // v - v: 0 for finite v, NaN otherwise
  int64_t j = 0;
  if (step == 1) {
    for (; j + 8 <= count; j += 8) {
      const __m256 v = _mm256_add_ps(_mm256_loadu_ps(in + j), bias);
      check = _mm256_add_ps(check, _mm256_sub_ps(v, v));
      _mm256_storeu_ps(out + j, v);
    }
  }
  bool finite = _mm256_movemask_ps(_mm256_cmp_ps(check, check, _CMP_UNORD_Q)) == 0;
  for (; j < count; ++j) {
    const float v = in[j] + add;
    finite &= v - v == 0.0f;
    out[j * step] = v;
  }
  return finite;
}

CONVT_TARGET bool interleave_row(const float* phases, int64_t phase_stride, int64_t stride, int64_t count, float add,
                                 float* out) {
  const __m256 bias = _mm256_set1_ps(add);
  __m256 check = _mm256_setzero_ps();  // v - v: 0 for finite v, NaN otherwise
  int64_t j = 0;
  if (stride == 2) {
    const float* even = phases;
    const float* odd = phases + phase_stride;
    for (; j + 16 <= count; j += 16) {
      const __m256 a = _mm256_add_ps(_mm256_loadu_ps(even + j / 2), bias), b = _mm256_add_ps(_mm256_loadu_ps(odd + j / 2), bias);
      check = _mm256_add_ps(check, _mm256_add_ps(_mm256_sub_ps(a, a), _mm256_sub_ps(b, b)));
      const __m256 low = _mm256_unpacklo_ps(a, b), high = _mm256_unpackhi_ps(a, b);  // (pairs of each 128-bit lane)
      _mm256_storeu_ps(out + j, _mm256_permute2f128_ps(low, high, 0x20));
      _mm256_storeu_ps(out + j + 8, _mm256_permute2f128_ps(low, high, 0x31));
    }
  }
  if (stride >= 3 && stride <= 8) {
    // blocks of 8 m's: phase r's vector holds m0 .. m0 + 7, and output vector v of the block's 8 x stride
    // outputs takes lane l (j = 8v + l) from phase j mod stride at m j / stride: a permute of each
    // phase's vector by those m's, blended where the lane's phase is that phase
    alignas(32) int32_t lane_m[8][8];
    alignas(32) float lane_is[8][8][8];  // [v][phase][lane]: all ones where lane l of vector v is that phase's
    for (int64_t v = 0; v < stride; ++v) {
      for (int64_t l = 0; l < 8; ++l) {
        lane_m[v][l] = int32_t((8 * v + l) / stride);
        for (int64_t r = 0; r < stride; ++r) {
          uint32_t bits = (8 * v + l) % stride == r ? 0xffffffffu : 0u;
          std::memcpy(&lane_is[v][r][l], &bits, sizeof(bits));
        }
      }
    }
    for (; j + 8 * stride <= count; j += 8 * stride) {
      const int64_t m0 = j / stride;
      __m256 in[8];
      for (int64_t r = 0; r < stride; ++r) {
        in[r] = _mm256_add_ps(_mm256_loadu_ps(phases + r * phase_stride + m0), bias);
        check = _mm256_add_ps(check, _mm256_sub_ps(in[r], in[r]));
      }
      for (int64_t v = 0; v < stride; ++v) {
        const __m256i index = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_m[v]));
        __m256 value = _mm256_permutevar8x32_ps(in[0], index);
        for (int64_t r = 1; r < stride; ++r) {
          value = _mm256_blendv_ps(value, _mm256_permutevar8x32_ps(in[r], index), _mm256_load_ps(lane_is[v][r]));
        }
        _mm256_storeu_ps(out + j + 8 * v, value);
      }
    }
  }
  bool finite = _mm256_movemask_ps(_mm256_cmp_ps(check, check, _CMP_UNORD_Q)) == 0;
  // the rest phase by phase: phase r's outputs m from the first not written, at j = m * stride + r
  const int64_t written = j / stride;  // (outputs m of every phase below this: j is a multiple of stride)
  for (int64_t phase = 0; phase < stride; ++phase) {
    const float* in = phases + phase * phase_stride;
    for (int64_t m = written; m * stride + phase < count; ++m) {
      const float v = in[m] + add;
      finite &= v - v == 0.0f;
      out[m * stride + phase] = v;
    }
  }
  return finite;
}

CONVT_TARGET void taps_row(int64_t count, int64_t taps, const float* w, const int64_t* offsets, const float* in, float* out,
                           bool accumulate) {
  constexpr int kVectors = 8;  // 64 outputs a block: 8 FMA chains, each tap's 8 loads feeding them
  int64_t j = 0;
  for (; j + 8 * kVectors <= count; j += 8 * kVectors) {
    __m256 acc[kVectors];
    CONVT_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = accumulate ? _mm256_loadu_ps(out + j + 8 * v) : _mm256_setzero_ps();
    for (int64_t t = 0; t < taps; ++t) {
      const __m256 weight = _mm256_set1_ps(w[t]);
      const float* row = in + j + offsets[t];
      CONVT_UNROLL
      for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(row + 8 * v), acc[v]);
    }
    CONVT_UNROLL
    for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(out + j + 8 * v, acc[v]);
  }
  for (; j + 8 <= count; j += 8) {
    __m256 acc = accumulate ? _mm256_loadu_ps(out + j) : _mm256_setzero_ps();
    for (int64_t t = 0; t < taps; ++t) acc = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), _mm256_loadu_ps(in + j + offsets[t]), acc);
    _mm256_storeu_ps(out + j, acc);
  }
  for (; j < count; ++j) {
    float sum = accumulate ? out[j] : 0.0f;
    for (int64_t t = 0; t < taps; ++t) sum += w[t] * in[j + offsets[t]];
    out[j] = sum;
  }
}

void dot_columns(int64_t rows, int64_t cols, int64_t length, const float* x, int64_t x_stride, const float* const* y,
                 float* out, int64_t ld, bool accumulate) {
  constexpr int64_t kChunk = 1024;  // positions per pass: a block's rows stay in L1 and L2
  if (length <= 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) out[r * ld + c] = 0.0f;
      }
    }
    return;
  }
  const bool wide = wide_vectors();
  const int64_t block_rows = wide ? 6 : 3;
  for (int64_t m0 = 0; m0 < length; m0 += kChunk) {
    const int64_t chunk = length - m0 < kChunk ? length - m0 : kChunk;
    const bool add = accumulate || m0 > 0;
    for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
      const int64_t mr = rows - r0 < block_rows ? rows - r0 : block_rows;
      const DotBlock* const row_blocks = (wide ? kDotBlocks512 : kDotBlocks)[mr - 1];
      for (int64_t c0 = 0; c0 < cols; c0 += 4) {
        const int64_t nc = cols - c0 < 4 ? cols - c0 : 4;
        const float* columns[4];
        for (int64_t c = 0; c < nc; ++c) columns[c] = y[c0 + c] + m0;
        row_blocks[nc - 1](chunk, x + r0 * x_stride + m0, x_stride, columns, out + r0 * ld + c0, ld, add);
      }
    }
  }
}

#else  // no AVX2 kernels in this build

bool available() { return false; }
int64_t column_step(int64_t) { return 16; }
void gemm(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const Operand&, int64_t, float*, int64_t, bool) {}
void gemm_rows(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const Operand&, int64_t, float*, int64_t,
               bool) {}
void stream_rows(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
bool write_row(const float*, int64_t, float, float*, int64_t) { return false; }
bool interleave_row(const float*, int64_t, int64_t, int64_t, float, float*) { return false; }
void taps_row(int64_t, int64_t, const float*, const int64_t*, const float*, float*, bool) {}
void dot_columns(int64_t, int64_t, int64_t, const float*, int64_t, const float* const*, float*, int64_t, bool) {}

#endif

// Panels of 6 rows (rows < 6: one panel of `rows` rows), each [step][row]; rows past `rows` zero.
void pack_a(int64_t rows, int64_t outer, int64_t inner, const float* base, int64_t row_stride, int64_t outer_stride,
            const int64_t* offsets, float* out, int64_t o_begin, int64_t o_end, int64_t p_begin, int64_t p_end) {
  const int64_t depth = outer * inner;
  const int64_t width = rows < 6 ? rows : 6;
  const int64_t rs = row_stride;
  auto pack = [&](int64_t p, int64_t o) {
    const int64_t r0 = p * width;
    const float* source = base + r0 * rs + o * outer_stride;
    float* dst = out + r0 * depth + o * inner * width;
    if (width == 6 && rows - r0 >= 6) {
      for (int64_t i = 0; i < inner; ++i, dst += 6) {
        const float* column = source + offsets[i];
        const float v0 = column[0], v1 = column[rs], v2 = column[2 * rs], v3 = column[3 * rs], v4 = column[4 * rs],
                    v5 = column[5 * rs];
        dst[0] = v0, dst[1] = v1, dst[2] = v2, dst[3] = v3, dst[4] = v4, dst[5] = v5;
      }
      return;
    }
    const int64_t valid = rows - r0 < width ? rows - r0 : width;
    for (int64_t i = 0; i < inner; ++i, dst += width) {
      const float* column = source + offsets[i];
      for (int64_t r = 0; r < valid; ++r) dst[r] = column[r * rs];
      for (int64_t r = valid; r < width; ++r) dst[r] = 0.0f;
    }
  };
  // the loop over the larger stride outside: the source read in runs along the smaller one
  if (outer_stride >= row_stride) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      for (int64_t p = p_begin; p < p_end; ++p) pack(p, o);
    }
  } else {
    for (int64_t p = p_begin; p < p_end; ++p) {
      for (int64_t o = o_begin; o < o_end; ++o) pack(p, o);
    }
  }
}

}  // namespace convt::cpu::avx2
