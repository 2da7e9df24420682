// float32 micro-kernels for x86-64 CPUs with AVX2 and FMA, on 16-float vectors where the CPU has
// AVX-512F (docs/design.md §6.3), compiled for those instruction sets function by function
// (kernels_avx2.cpp), so the library still loads and runs on any x86-64 CPU: callers ask available()
// first. Plain C++: no torch here.
#pragma once

#include <cstdint>

namespace convt::cpu::avx2 {

// Whether this CPU runs the kernels (AVX2 and FMA; false where they are not compiled in).
bool available();

// Where reduction step kk of the GEMM operand B starts (kk = o*inner + i, o < outer, i < inner):
// base + o*outer_stride + offsets[i], the step's row of contiguous columns. A convolution's GEMM
// steps through (channel, tap) pairs this way and reads the activations in place.
struct Operand {
  const float* base;
  int64_t outer_stride;
  int64_t inner;
  const int64_t* offsets;
};

// Whether the micro-kernels run on 16-float vectors (AVX-512F; not under CONVT_CPU_VECTOR_BITS=256)
bool wide_vectors();
// Rows per panel of A for a matrix of `rows` rows: 6, or all of them where there are fewer. Every
// block of rows that a caller hands gemm starts at a multiple of the panel.
inline int64_t panel_rows(int64_t rows) { return rows < 6 ? rows : 6; }
// The columns one call of the micro-kernel covers with panels of `panel` rows: 16 for 6, wider for
// fewer (so that 12 accumulators stay busy); twice as many on 16-float vectors (AVX-512F). Callers
// size tiles and buffers by it, never by a constant.
int64_t column_step(int64_t panel);
inline int64_t round_up_columns(int64_t cols, int64_t panel) {
  const int64_t step = column_step(panel);
  return (cols + step - 1) / step * step;
}

// The packed A of gemm (rows x depth, depth = outer * inner): element (r, o*inner + i) of A is
// base[r*row_stride + o*outer_stride + offsets[i]]. Panels of 6 rows (the last one zero-padded; one
// panel of `rows` rows where rows < 6), each a [step][row] block. Writes the part with o in
// [o_begin, o_end) and panels [p_begin, p_end) of packed_size(rows, depth) floats at out, so that
// callers can split the work. Plain C++ (no AVX2 needed).
inline int64_t panels(int64_t rows) { return rows < 6 ? 1 : (rows + 5) / 6; }
inline int64_t packed_size(int64_t rows, int64_t depth) { return (rows < 6 ? rows : panels(rows) * 6) * depth; }
void pack_a(int64_t rows, int64_t outer, int64_t inner, const float* base, int64_t row_stride, int64_t outer_stride,
            const int64_t* offsets, float* out, int64_t o_begin, int64_t o_end, int64_t p_begin, int64_t p_end);

// c[r*ldc + j] (+ c where `accumulate`) = sum_{kk < depth} A(r, kk) * B(kk, j) for r < rows,
// j < round_up_columns(cols, panel) (where panels of 6 rows leave at most one vector of columns to
// their last column step, j up to that vector's end only): A a block of a matrix packed by pack_a with
// panels of `panel` rows (a at the first step of the block's first panel; panels panel_stride floats
// apart: panel * the matrix's depth), B(kk, j) = b's step kk [column + j]; every B row must be readable
// for round_up_columns(cols, panel) floats from `column`. Single-threaded.
void gemm(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t panel, int64_t panel_stride,
          const Operand& b, int64_t column, float* c, int64_t ldc, bool accumulate);

// The same with A read in place, A(r, kk) = a[r*a_row + kk] (rows of contiguous steps), and c += A @ B
// where `accumulate`.
void gemm_rows(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row, int64_t panel,
               const Operand& b, int64_t column, float* c, int64_t ldc, bool accumulate);

// c[r*ldc + j] += sum_{d < depth} a[d*a_step + r] * x[d*x_step + j] for r < rows (at most 5), j < count:
// x's rows streamed in order, four at a time, each element loaded once for all rows (a narrow A: the
// forward's Z = W^T X of few output channels). Reads no element of a row past `count`; prefetches the
// rows kPrefetchRows ahead (rows pages apart are streams the hardware prefetcher starts late).
void stream_rows(int64_t rows, int64_t count, int64_t depth, const float* a, int64_t a_step, const float* x, int64_t x_step,
                 float* c, int64_t ldc);

// out[j*step] = in[j] + add for j < count; false where a value written is not finite.
bool write_row(const float* in, int64_t count, float add, float* out, int64_t step);

// out[j] = phases[(j mod stride) * phase_stride + j / stride] + add for j < count: a row's phases
// (each its outputs m = 0, 1, ... at j = m * stride + phase) interleaved, whole vectors at strides 2-8
// (the rest of the row, and other strides, one value at a time); false where a value written is not finite.
bool interleave_row(const float* phases, int64_t phase_stride, int64_t stride, int64_t count, float add, float* out);

// out[j] (+)= sum_{t < taps} w[t] * in[j + offsets[t]] for j < count, the taps in order (out[j] = the
// sum where not `accumulate`: zeros at 0 taps): one input row's taps into one output row, each output
// in registers for all its taps. Every in[j + offsets[t]] must be readable (callers pad the row).
// Single-threaded.
void taps_row(int64_t count, int64_t taps, const float* w, const int64_t* offsets, const float* in, float* out, bool accumulate);

// out[r*ld + c] (+)= sum_{m < length} x[r*x_stride + m] * y[c][m] for r < rows, c < cols (column c's
// values at y[c]: rows of several phases, at shifts): the sum in a fixed order (8 lanes, each in order
// of m, then the lanes in a fixed tree; chunks of positions in order). Reads no element past `length`
// in a row. Single-threaded.
void dot_columns(int64_t rows, int64_t cols, int64_t length, const float* x, int64_t x_stride, const float* const* y,
                 float* out, int64_t ld, bool accumulate);

}  // namespace convt::cpu::avx2
