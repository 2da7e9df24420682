// CPU kernels (docs/design.md §6.3). Each pass (forward, grad_input, grad_weight) runs in one of these
// forms, chosen per problem and pass in one place (plan, near the end of the file):
//  - AVX2 (float32 on CPUs with AVX2 and FMA; kernels_avx2.h): implicit GEMMs on a register-blocked
//    micro-kernel, activations read in place. Forward packed (the weight packed per phase) or streamed
//    (the weight read in place as B, x^T packed, col2im); grad_input on the packed weight and grad_y's
//    phases; grad_weight as dot products over positions or a GEMM over positions.
//  - unrolled: one BLAS GEMM over every tap at once, with the weight read in place as the (Cig x
//    Cog*K) matrix it is. Forward: Z[(co,k), i] = sum_ci W[ci, co, k] x[ci, i], then each row of Z is
//    added into y at i*stride + k*dilation - padding (col2im). Backward: G[(co,k), i] = grad_y[co,
//    i*stride + k*dilation - padding] (im2col, 0 outside), grad_x = W @ G, grad_w = X @ G^T.
//  - taps: per output phase one BLAS GEMM per tap (convt.h, "Polyphase indexing") on windows of x (of
//    grad_y's phases) read in place, accumulated in a tile.
//  - direct: loops, for few channels per group (depthwise), where GEMMs would be tiny matrices; on
//    AVX2 the forward's tap rows (forward_tap_rows: each output in a register for all its taps).
// float16 / bfloat16 are computed in float32, float64 in float64.
#include "cpu/conv_transpose1d_cpu.h"
#include "cpu/kernels_avx2.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace convt::cpu {
namespace {

at::ScalarType compute_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// A contiguous copy in the compute dtype (no copy when it already is one).
at::Tensor to_compute(const at::Tensor& t) { return t.to(compute_type(t.scalar_type())).contiguous(); }

// Where a kernel writes `out`: out itself when it is already a compute-dtype tensor, else a buffer
// that finish() copies back.
at::Tensor compute_buffer(const at::Tensor& out) {
  return out.scalar_type() == compute_type(out.scalar_type()) && out.is_contiguous()
             ? out
             : at::empty(out.sizes(), out.options().dtype(compute_type(out.scalar_type())));
}
void finish(const at::Tensor& out, const at::Tensor& buffer) {
  if (!out.is_same(buffer)) out.copy_(buffer);
}

int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }  // b > 0, any sign of a

// ---- GEMM ----------------------------------------------------------------------------------------
// c (m x n, row stride ldc) = a @ b (+ c when accumulate), row-major. a is stored (m x k, row stride
// lda), or with trans_a as (k x m); b likewise (k x n) or, with trans_b, (n x k). Called inside parallel
// regions: single-threaded. Goes through at::mm_out / addmm_ on views of the same memory (BLAS), except
// untransposed float products on CPUs with AVX-512, which oneDNN's JIT brgemm micro-kernel (ATen's
// cpublas::brgemm) targets; without AVX-512 its float path takes unpacked operands at a disadvantage.
bool use_brgemm() {
#if defined(CPUBLAS_BRGEMM_F32F32F32) && (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, T(0));
    }
    return;
  }
#if defined(CPUBLAS_BRGEMM_F32F32F32)
  if constexpr (std::is_same_v<T, float>) {
    // oneDNN keeps the leading dimensions in int and fails from 2^25 on
    constexpr int64_t kMaxBrgemmLeading = int64_t(1) << 24;
    if (!trans_a && !trans_b && use_brgemm() && std::max({lda, ldb, ldc}) < kMaxBrgemmLeading) {
      constexpr int64_t kRows = 64;  // rows per micro-kernel call: the A block stays in L2
      for (int64_t r0 = 0; r0 < m; r0 += kRows) {
        at::native::cpublas::brgemm(std::min(kRows, m - r0), n, k, lda, ldb, ldc, accumulate, a + r0 * lda, b,
                                    c + r0 * ldc, /*is_vnni=*/false);
      }
      return;
    }
  }
#endif
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  const at::Tensor a_view = trans_a ? at::from_blob(const_cast<T*>(a), {m, k}, {1, lda}, options)
                                    : at::from_blob(const_cast<T*>(a), {m, k}, {lda, 1}, options);
  const at::Tensor b_view = trans_b ? at::from_blob(const_cast<T*>(b), {k, n}, {1, ldb}, options)
                                    : at::from_blob(const_cast<T*>(b), {k, n}, {ldb, 1}, options);
  at::Tensor c_view = at::from_blob(c, {m, n}, {ldc, 1}, options);
  if (accumulate) {
    c_view.addmm_(a_view, b_view);
  } else {
    at::mm_out(c_view, a_view, b_view);
  }
}

int64_t threads() { return std::max<int64_t>(1, at::get_num_threads()); }

// The forms of a pass (plan, near the end of the file, picks one).
enum class Form { kDirect, kTaps, kUnrolled, kFolded, kPacked, kStreamed, kScatter, kTapRows, kDot, kPositions };

// ---- weight layouts ------------------------------------------------------------------------------
// The weight (C_in, Cog, K) as one (C_in, Cog) matrix per tap: (K, C_in, Cog).
template <typename T>
void pack_taps(const T* w, T* out, int64_t rows, int64_t cols, int64_t taps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* in = w + r * cols * taps;
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t k = 0; k < taps; ++k) out[(k * rows + r) * cols + c] = in[c * taps + k];
      }
    }
  });
}

// ---- unrolled form -------------------------------------------------------------------------------
// Tap k of output channel co is row r = co*K + k of Z and G; it moves input i to output
// i*stride + offset(k), offset(k) = k*dilation - padding.

constexpr int64_t kUnrolledBuffer = 64 * 1024;  // elements of a Z or G tile: stays in L2 with its operands

// col2im of one row (co, k) of Z: y_row[i*stride + offset] += z_row[i] for inputs i in [ia, ib), with
// offset = k*dilation - padding (z_row indexed by input position)
template <typename T>
void add_tap_row(T* y_row, const T* z_row, int64_t offset, int64_t stride, int64_t ia, int64_t ib) {
  T* out = y_row + offset;
  if (stride == 1) {
    for (int64_t i = ia; i < ib; ++i) out[i] += z_row[i];
  } else {
    for (int64_t i = ia; i < ib; ++i) out[i * stride] += z_row[i];
  }
}

// Forward: tasks of (n, group, block of output channels, segment of output positions); a task owns
// its y block, starts it at the bias, and runs over the input tiles that reach its segment (a segment
// recomputes the inputs at its edges that its neighbour also needs; only contributions inside the
// segment are added).
template <typename T>
void forward_unrolled(const T* x, const T* w, const T* bias, T* y, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, R = Cog * K;
  const int64_t s = p.stride, pad = p.padding, d = p.dilation;
  const int64_t span = (K - 1) * d;  // output positions between the first and last tap of an input
  // rows of Z per GEMM at most 1024 (whole channels); tiles of 64..1024 input positions
  const int64_t block = std::clamp<int64_t>(1024 / K, 1, Cog);
  const int64_t blocks = (Cog + block - 1) / block;
  const int64_t tile = std::clamp<int64_t>(kUnrolledBuffer / (block * K), 64, 1024);
  // segments: enough tasks for the threads, each covering at least 4 halos (the recomputed edge) and a tile
  const int64_t units = p.batch * p.groups * blocks;
  const int64_t halo = ceil_div(span, s) + 1;
  const int64_t most = std::max<int64_t>(1, p.length_in / std::max(tile, 4 * halo));
  const int64_t segments = std::clamp<int64_t>(ceil_div(4 * threads(), units), 1, most);
  const int64_t segment = ceil_div(p.length_out, segments);
  at::parallel_for(0, units * segments, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> z(block * K * tile);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t q = task % segments, b = (task / segments) % blocks, g = (task / (segments * blocks)) % p.groups;
      const int64_t n = task / (segments * blocks * p.groups);
      const int64_t c0 = b * block, c1 = std::min(Cog, c0 + block);
      const int64_t j0 = q * segment, j1 = std::min(p.length_out, j0 + segment);
      if (j0 >= j1) continue;
      T* y_rows = y + (n * p.out_channels + g * Cog) * p.length_out;
      for (int64_t co = c0; co < c1; ++co) {
        std::fill(y_rows + co * p.length_out + j0, y_rows + co * p.length_out + j1,
                  bias ? bias[g * Cog + co] : T(0));
      }
      // inputs i with i*s + offset in [j0, j1) for some offset in [-pad, span - pad]
      const int64_t i_lo = std::max<int64_t>(0, ceil_div(j0 - span + pad, s));
      const int64_t i_hi = std::min(p.length_in, floor_div(j1 - 1 + pad, s) + 1);
      const T* x_rows = x + (n * p.in_channels + g * Cig) * p.length_in;
      for (int64_t i0 = i_lo; i0 < i_hi; i0 += tile) {
        const int64_t width = std::min(tile, i_hi - i0);
        gemm<T>(/*trans_a=*/true, false, (c1 - c0) * K, width, Cig, w + g * Cig * R + c0 * K, R, x_rows + i0,
                p.length_in, false, z.data(), width);
        for (int64_t co = c0; co < c1; ++co) {
          T* y_row = y_rows + co * p.length_out;
          for (int64_t k = 0; k < K; ++k) {
            const int64_t offset = k * d - pad;
            const int64_t ia = std::max(i0, ceil_div(j0 - offset, s));
            const int64_t ib = std::min(i0 + width, ceil_div(j1 - offset, s));
            add_tap_row(y_row, z.data() + ((co - c0) * K + k) * width - i0, offset, s, ia, ib);
          }
        }
      }
    }
  });
}

// Forward with the batch folded into the GEMM's columns (forward_folded_applies: wide layers on short
// rows, where each batch element's GEMM would be a narrow one): per group and chunk of whole batch
// elements, X (C_in/g x nb*L_in) = x's rows with the batch folded (a copy), Z = W_g^T X (rows (co, k),
// one at::mm: the library's threads and blocking over the whole product), then col2im over the
// chunk's rows (n, co) in parallel, each started at its bias. A chunk keeps Z within kFoldedBuffer
// elements.
constexpr int64_t kFoldedBuffer = 4 << 20;

template <typename T>
void forward_folded(const at::Tensor& x, const at::Tensor& w, const T* bias, T* y, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, R = Cog * K;
  const int64_t L = p.length_in, s = p.stride, pad = p.padding, d = p.dilation;
  const int64_t chunk = std::clamp<int64_t>(kFoldedBuffer / std::max<int64_t>(1, R * L), 1, p.batch);
  for (int64_t g = 0; g < p.groups; ++g) {
    const at::Tensor w_g = w.narrow(0, g * Cig, Cig).reshape({Cig, R});  // (contiguous: a view)
    for (int64_t n0 = 0; n0 < p.batch; n0 += chunk) {
      const int64_t nb = std::min(chunk, p.batch - n0), columns = nb * L;
      const at::Tensor folded_x = x.narrow(0, n0, nb).narrow(1, g * Cig, Cig).permute({1, 0, 2}).reshape({Cig, columns});
      const at::Tensor z = at::mm(w_g.t(), folded_x);  // (R, nb * L), contiguous
      const T* z_data = z.data_ptr<T>();
      at::parallel_for(0, nb * Cog, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t n = n0 + row / Cog, co = row % Cog;
          T* y_row = y + (n * p.out_channels + g * Cog + co) * p.length_out;
          std::fill(y_row, y_row + p.length_out, bias ? bias[g * Cog + co] : T(0));
          for (int64_t k = 0; k < K; ++k) {
            const int64_t offset = k * d - pad;
            // inputs i with 0 <= i*s + offset < L_out
            const int64_t ia = std::max<int64_t>(0, ceil_div(-offset, s));
            const int64_t ib = std::min(L, ceil_div(p.length_out - offset, s));
            add_tap_row(y_row, z_data + (co * K + k) * columns + (row / Cog) * L, offset, s, ia, ib);
          }
        }
      });
    }
  }
}

// G rows [r0, r1) for inputs [i0, i0 + width) of batch row n, group g: (r1 - r0) x width, row stride width.
template <typename T>
void gather_rows(const T* grad_y, const ConvTParams& p, int64_t n, int64_t g, int64_t r0, int64_t r1, int64_t i0,
                 int64_t width, T* out) {
  const int64_t K = p.kernel_size, s = p.stride;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t co = r / K, k = r % K;
    const int64_t offset = k * p.dilation - p.padding;
    const T* src = grad_y + (n * p.out_channels + g * p.out_channels_per_group + co) * p.length_out + offset;
    T* dst = out + (r - r0) * width - i0;
    // i with 0 <= i*s + offset < L_out
    const int64_t ia = std::clamp(ceil_div(-offset, s), i0, i0 + width);
    const int64_t ib = std::clamp(ceil_div(p.length_out - offset, s), ia, i0 + width);
    std::fill(dst + i0, dst + ia, T(0));
    if (s == 1) {
      std::memcpy(dst + ia, src + ia, (ib - ia) * sizeof(T));
    } else {
      for (int64_t i = ia; i < ib; ++i) dst[i] = src[i * s];
    }
    std::fill(dst + ib, dst + i0 + width, T(0));
  }
}

// grad_input: tasks of (n, group, segment of input positions); per tile, grad_x = W @ G with the
// reduction over rows (co, k) in chunks.
template <typename T>
void grad_input_unrolled(const T* grad_y, const T* w, T* grad_x, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, R = p.out_channels_per_group * p.kernel_size;
  const int64_t chunk = std::min<int64_t>(R, 512);
  const int64_t tile = std::clamp<int64_t>(kUnrolledBuffer / chunk, 64, 1024);
  const int64_t units = p.batch * p.groups;
  const int64_t segments = std::clamp<int64_t>(ceil_div(4 * threads(), units), 1, ceil_div(p.length_in, tile));
  const int64_t segment = ceil_div(p.length_in, segments);
  at::parallel_for(0, units * segments, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buffer(chunk * tile);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t q = task % segments, g = (task / segments) % p.groups, n = task / (segments * p.groups);
      const int64_t a = q * segment, b = std::min(p.length_in, a + segment);
      T* gx_rows = grad_x + (n * p.in_channels + g * Cig) * p.length_in;
      for (int64_t i0 = a; i0 < b; i0 += tile) {
        const int64_t width = std::min(tile, b - i0);
        for (int64_t r0 = 0; r0 < R; r0 += chunk) {
          const int64_t r1 = std::min(R, r0 + chunk);
          gather_rows(grad_y, p, n, g, r0, r1, i0, width, buffer.data());
          gemm<T>(false, false, Cig, width, r1 - r0, w + g * Cig * R + r0, R, buffer.data(), width, r0 > 0,
                  gx_rows + i0, p.length_in);
        }
      }
    }
  });
}

// grad_weight: tasks of (group, block of rows (co, k), block of input channels), each summing over
// the batch and the input tiles in order into its block of grad_w (deterministic: the blocks and tiles
// depend on the problem only, not on the threads).
template <typename T>
void grad_weight_unrolled(const T* grad_y, const T* x, T* grad_w, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, R = p.out_channels_per_group * p.kernel_size;
  const int64_t rows = std::min<int64_t>(R, 256);
  const int64_t row_blocks = ceil_div(R, rows);
  const int64_t tile = std::clamp<int64_t>(kUnrolledBuffer / rows, 128, 2048);
  // at least 8 tasks where the input channels allow blocks of 16
  const int64_t ci_blocks = std::clamp<int64_t>(ceil_div(8, p.groups * row_blocks), 1, ceil_div(Cig, 16));
  const int64_t ci_block = ceil_div(Cig, ci_blocks);
  at::parallel_for(0, p.groups * row_blocks * ci_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buffer(rows * tile);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t cb = task % ci_blocks, rb = (task / ci_blocks) % row_blocks, g = task / (ci_blocks * row_blocks);
      const int64_t r0 = rb * rows, r1 = std::min(R, r0 + rows);
      const int64_t c0 = cb * ci_block, c1 = std::min(Cig, c0 + ci_block);
      if (c0 >= c1) continue;
      T* out = grad_w + (g * Cig + c0) * R + r0;
      bool first = true;
      for (int64_t n = 0; n < p.batch; ++n) {
        const T* x_rows = x + (n * p.in_channels + g * Cig + c0) * p.length_in;
        for (int64_t i0 = 0; i0 < p.length_in; i0 += tile) {
          const int64_t width = std::min(tile, p.length_in - i0);
          gather_rows(grad_y, p, n, g, r0, r1, i0, width, buffer.data());
          gemm<T>(false, /*trans_b=*/true, c1 - c0, r1 - r0, width, x_rows + i0, p.length_in, buffer.data(), width,
                  !first, out, R);
          first = false;
        }
      }
      if (first) {
        for (int64_t c = c0; c < c1; ++c) std::fill(out + (c - c0) * R, out + (c - c0) * R + (r1 - r0), T(0));
      }
    }
  });
}

// ---- taps form -----------------------------------------------------------------------------------

// The taps of each output phase that has any (phases past L_out aside).
std::vector<std::vector<int64_t>> taps_by_phase(const ConvTParams& p) {
  std::vector<std::vector<int64_t>> phases(std::min(p.stride, p.length_out));
  for (int64_t k = 0; k < p.kernel_size; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    if (tap.phase < static_cast<int64_t>(phases.size())) phases[tap.phase].push_back(k);
  }
  return phases;
}

// Positions per tile: wide for few channels (fewer calls), narrow for many (operands in L2).
int64_t tile_columns(const ConvTParams& p) {
  return std::clamp<int64_t>(32768 / std::max(p.in_channels_per_group, p.out_channels_per_group), 128, 1024) / 16 * 16;
}

// Forward: tasks of (n, group, block of output channels, block of positions m of every phase). Per phase
// a tile starts at the bias and accumulates, per tap k of the phase, W_k^T @ x[n, group, m - shift_k]
// (a window of x read in place), then goes to y[n, :, m*stride + phase]. With stride 1 the tile is y.
template <typename T>
void forward_taps(const T* x, const T* w_taps, const T* bias, T* y, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group;
  const auto phases = taps_by_phase(p);
  const int64_t columns = tile_columns(p);
  const int64_t blocks = ceil_div(phase_length(0, p.length_out, p.stride), columns);
  const int64_t units = p.batch * p.groups * blocks;
  const int64_t channel_blocks = std::clamp<int64_t>(ceil_div(4 * threads(), units), 1, ceil_div(Cog, 64));
  const int64_t channel_block = ceil_div(Cog, channel_blocks);
  at::parallel_for(0, units * channel_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buffer(p.stride > 1 ? channel_block * columns : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t cb = task % channel_blocks, block = (task / channel_blocks) % blocks;
      const int64_t g = (task / (channel_blocks * blocks)) % p.groups, n = task / (channel_blocks * blocks * p.groups);
      const int64_t c0 = cb * channel_block, c1 = std::min(Cog, c0 + channel_block);
      if (c0 >= c1) continue;
      T* y_rows = y + (n * p.out_channels + g * Cog) * p.length_out;
      const T* x_rows = x + (n * p.in_channels + g * Cig) * p.length_in;
      const int64_t m0 = block * columns;
      for (int64_t phase = 0; phase < static_cast<int64_t>(phases.size()); ++phase) {
        const int64_t width = std::min(columns, phase_length(phase, p.length_out, p.stride) - m0);
        if (width <= 0) continue;
        T* tile = p.stride == 1 ? y_rows + c0 * p.length_out + m0 : buffer.data();
        const int64_t ld_tile = p.stride == 1 ? p.length_out : width;
        for (int64_t co = c0; co < c1; ++co) {
          std::fill(tile + (co - c0) * ld_tile, tile + (co - c0) * ld_tile + width, bias ? bias[g * Cog + co] : T(0));
        }
        for (const int64_t k : phases[phase]) {
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          const int64_t lo = std::max(m0, tap.shift), hi = std::min(m0 + width, p.length_in + tap.shift);
          if (lo >= hi) continue;
          gemm<T>(/*trans_a=*/true, false, c1 - c0, hi - lo, Cig, w_taps + (k * p.in_channels + g * Cig) * Cog + c0, Cog,
                  x_rows + (lo - tap.shift), p.length_in, true, tile + (lo - m0), ld_tile);
        }
        if (p.stride > 1) {
          for (int64_t co = c0; co < c1; ++co) {
            T* out = y_rows + co * p.length_out + m0 * p.stride + phase;
            const T* in = tile + (co - c0) * width;
            for (int64_t c = 0; c < width; ++c) out[c * p.stride] = in[c];
          }
        }
      }
    }
  });
}

// grad_y's phases, (min(stride, L_out), N, C_out, phase_capacity): grad_y[:, :, phase::stride], a copy
// only when stride > 1.
at::Tensor phases_of(const at::Tensor& grad_y, const ConvTParams& p) {
  if (p.stride == 1) return grad_y.unsqueeze(0);
  const int64_t capacity = phase_length(0, p.length_out, p.stride);
  at::Tensor phases =
      at::empty({std::min(p.stride, p.length_out), p.batch, p.out_channels, capacity}, grad_y.options());
  for (int64_t phase = 0; phase < std::min(p.stride, p.length_out); ++phase) {
    phases[phase]
        .narrow(2, 0, phase_length(phase, p.length_out, p.stride))
        .copy_(grad_y.slice(2, phase, p.length_out, p.stride));
  }
  return phases;
}

// grad_input: tiles of (n, group, inputs), accumulating W_k (Cig x Cog) @ phase window: tap k of input
// i reads output m = i + shift_k of phase phase_k.
template <typename T>
void grad_input_taps(const T* phases, const T* w_taps, T* grad_x, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group;
  const int64_t capacity = phase_length(0, p.length_out, p.stride);
  const int64_t phase_stride = p.batch * p.out_channels * capacity;
  const int64_t columns = tile_columns(p);
  const int64_t blocks = ceil_div(p.length_in, columns);
  at::parallel_for(0, p.batch * p.groups * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t block = task % blocks, g = (task / blocks) % p.groups, n = task / (blocks * p.groups);
      const int64_t i0 = block * columns, width = std::min(columns, p.length_in - i0);
      T* tile = grad_x + (n * p.in_channels + g * Cig) * p.length_in + i0;
      for (int64_t ci = 0; ci < Cig; ++ci) std::fill(tile + ci * p.length_in, tile + ci * p.length_in + width, T(0));
      for (int64_t k = 0; k < p.kernel_size; ++k) {
        const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
        const int64_t length = phase_length(tap.phase, p.length_out, p.stride);
        const int64_t lo = std::max(i0, -tap.shift), hi = std::min(i0 + width, length - tap.shift);
        if (lo >= hi) continue;
        const T* window = phases + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * capacity + lo + tap.shift;
        gemm<T>(false, false, Cig, hi - lo, Cog, w_taps + (k * p.in_channels + g * Cig) * Cog, Cog, window, capacity,
                true, tile + (lo - i0), p.length_in);
      }
    }
  });
}

// grad_weight: grad_w_k (Cig x Cog) = sum over n of x window (Cig x positions) @ phase window^T, per
// (tap, group, block of input channels), the batch and positions summed in order (deterministic), into
// rows (C_in, K, Cog): each input channel's K x Cog block in one run, which interleave_taps transposes
// into grad_w's (Cog, K) row within L1 (one read and one write stream through memory, where a layout
// (K, C_in, Cog) would read K streams a row).
template <typename T>
void grad_weight_taps(const T* phases, const T* x, T* grad_w_rows, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const int64_t ld = K * Cog;
  const int64_t capacity = phase_length(0, p.length_out, p.stride);
  const int64_t phase_stride = p.batch * p.out_channels * capacity;
  constexpr int64_t kColumns = 512;  // positions summed per GEMM call
  const int64_t units = K * p.groups;
  const int64_t ci_blocks = std::clamp<int64_t>(ceil_div(8, units), 1, ceil_div(Cig, 32));
  const int64_t ci_block = ceil_div(Cig, ci_blocks);
  at::parallel_for(0, units * ci_blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t cb = task % ci_blocks, g = (task / ci_blocks) % p.groups, k = task / (ci_blocks * p.groups);
      const int64_t c0 = cb * ci_block, c1 = std::min(Cig, c0 + ci_block);
      if (c0 >= c1) continue;
      const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
      const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
      T* out = grad_w_rows + (g * Cig + c0) * ld + k * Cog;
      bool first = true;
      for (int64_t n = 0; n < p.batch; ++n) {
        for (int64_t m = r.begin; m < r.end; m += kColumns) {
          const int64_t count = std::min(kColumns, r.end - m);
          gemm<T>(false, /*trans_b=*/true, c1 - c0, Cog, count,
                  x + (n * p.in_channels + g * Cig + c0) * p.length_in + m - tap.shift, p.length_in,
                  phases + tap.phase * phase_stride + (n * p.out_channels + g * Cog) * capacity + m, capacity, !first,
                  out, ld);
          first = false;
        }
      }
      if (first) {
        for (int64_t ci = 0; ci < c1 - c0; ++ci) std::fill_n(out + ci * ld, Cog, T(0));
      }
    }
  });
}

// grad_w[ci, co, k] = rows[(ci * K + k) * Cog + co]: per input channel a (K x Cog) -> (Cog x K)
// transpose, the tap loop unrolled for K up to 8 (kTaps; the taps form's filters), longer ones a loop
// (kTaps 0: K at run time).
template <typename T, int64_t kTaps>
void interleave_row(const T* in, T* out, int64_t Cog, int64_t K) {
  const int64_t taps = kTaps > 0 ? kTaps : K;
  for (int64_t co = 0; co < Cog; ++co) {
    for (int64_t k = 0; k < taps; ++k) out[co * taps + k] = in[k * Cog + co];
  }
}
template <typename T>
void interleave_taps(const T* rows, T* w, int64_t C_in, int64_t Cog, int64_t K) {
  at::parallel_for(0, C_in, 16, [&](int64_t begin, int64_t end) {
    for (int64_t ci = begin; ci < end; ++ci) {
      const T* in = rows + ci * K * Cog;
      T* out = w + ci * Cog * K;
      switch (K) {
        case 1: std::copy_n(in, Cog, out); break;
        case 2: interleave_row<T, 2>(in, out, Cog, K); break;
        case 3: interleave_row<T, 3>(in, out, Cog, K); break;
        case 4: interleave_row<T, 4>(in, out, Cog, K); break;
        case 5: interleave_row<T, 5>(in, out, Cog, K); break;
        case 6: interleave_row<T, 6>(in, out, Cog, K); break;
        case 7: interleave_row<T, 7>(in, out, Cog, K); break;
        case 8: interleave_row<T, 8>(in, out, Cog, K); break;
        default: interleave_row<T, 0>(in, out, Cog, K);
      }
    }
  });
}

// ---- AVX2 forms (float32 where the CPU has AVX2 and FMA) ------------------------------------------
// Implicit GEMMs on avx2's micro-kernel. The packed forward reads x in place, with padded windows at
// its ends, and grad_input grad_y's phases from copies padded with zeros, so that every window a tap
// reads lies inside its row. The zeros are multiplied by
// the weight: where an output comes out not finite (Inf or NaN in the inputs), the pass runs again
// in a BLAS or direct form, which forms no such product. The streamed and scatter forwards form
// products of real inputs only. grad_weight: a dot product per (tap, input channel, output channel)
// over the positions the tap reaches (avx2::dot), or a GEMM over positions (grad_weight_avx2_gemm).

constexpr int64_t kAvx2Columns = 256;  // positions per task: a tile of C stays in L2
constexpr int64_t kAvx2Rows = 96;      // rows per task (16 panels): the A block stays in L2
constexpr int64_t kWeightColumns = 256;  // columns (co, k) of a task: the streamed forward's B, grad_weight's GEMM C
constexpr int64_t kSharedCopy = int64_t(4) << 20;  // floats of a padded copy of x made once per call, at most

int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Rows of a task's block for a matrix of `rows` rows: at most kAvx2Rows, whole panels, the blocks of
// about equal size (a short last block would leave a thread idle at the end).
int64_t balanced_rows(int64_t rows) {
  if (rows < 6) return rows;
  return std::min(round_up(ceil_div(rows, ceil_div(rows, kAvx2Rows)), 6), round_up(rows, 6));
}

// Columns (positions) per task of the packed GEMM forms: at most kAvx2Columns rounded to the column
// step, the blocks of about equal size (334 positions as 256 + 78 gave the tasks of one block a third
// of the others' work, and a split into contiguous runs one thread all of the long ones).
int64_t balanced_columns(int64_t total, int64_t step) {
  const int64_t most = round_up(kAvx2Columns, step);
  return total <= most ? most : round_up(ceil_div(total, ceil_div(total, most)), step);
}

// Sizes of the blocks that split `total` into blocks of at most `block`.
std::vector<int64_t> block_sizes(int64_t total, int64_t block) {
  std::vector<int64_t> sizes;
  for (int64_t begin = 0; begin < total; begin += block) sizes.push_back(std::min(block, total - begin));
  return sizes;
}

// The share of the threads' time that tasks keep busy: a task per combination of one block of each
// dimension (the first dimension's index varying fastest), its work the product of their sizes, the
// tasks split as parallel() splits them.
double busy_share(const std::vector<std::vector<int64_t>>& dimensions, int64_t thread_count) {
  int64_t tasks = 1;
  for (const auto& sizes : dimensions) tasks *= static_cast<int64_t>(sizes.size());
  if (tasks >= 64 * thread_count) return 1.0;  // many tasks a thread: within a few percent of even
  std::vector<double> work{1.0};
  for (const auto& sizes : dimensions) {
    std::vector<double> next;
    for (const int64_t size : sizes) {
      for (const double w : work) next.push_back(w * double(size));
    }
    work = std::move(next);
  }
  // parallel()'s runs, each to the thread that finishes first (one task a thread where there are few)
  std::vector<double> finish(thread_count, 0.0);
  double total = 0;
  for (int64_t begin = 0; begin < tasks;) {
    const int64_t run = tasks <= thread_count ? 1 : std::max<int64_t>(1, (tasks - begin) / (2 * thread_count));
    double share = 0;
    for (int64_t t = begin; t < std::min(tasks, begin + run); ++t) share += work[t];
    *std::min_element(finish.begin(), finish.end()) += share;
    total += share;
    begin += run;
  }
  const double longest = *std::max_element(finish.begin(), finish.end());
  return longest > 0 ? total / (double(thread_count) * longest) : 1.0;
}

// The tasks of the packed GEMM forms (forward_avx2, grad_input_avx2): a block of rows of the matrix
// (output channels, or input channels), a block of columns (positions), a group and a block of batch
// rows, the first varying fastest, in the order parallel() splits them. Blocks of rows and columns are
// of about equal size. Batch rows per task: where a task's columns are few, one block of A serves
// several batch rows while it is in cache (up to 1024 columns of tiles), as long as the tasks keep the
// threads about as busy as single batch rows would (7 tasks on 2 threads leave one idle an eighth of
// the time); one where `share_batch_rows` is false.
struct PackedTasks {
  int64_t rows, row_block, row_blocks;
  int64_t columns, column_block, column_blocks;
  int64_t width;  // of a tile: its columns rounded up to the column step
  int64_t groups, batch, batch_block, batch_blocks;

  struct Task {
    int64_t row0, rows, column0, columns, group, n0, n1;
  };
  int64_t count() const { return row_blocks * column_blocks * groups * batch_blocks; }
  Task operator[](int64_t task) const {
    const int64_t rb = task % row_blocks, cb = (task / row_blocks) % column_blocks;
    const int64_t g = (task / (row_blocks * column_blocks)) % groups;
    const int64_t n0 = (task / (row_blocks * column_blocks * groups)) * batch_block;
    const int64_t row0 = rb * row_block, column0 = cb * column_block;
    return {row0, std::min(row_block, rows - row0), column0, std::min(column_block, columns - column0), g, n0,
            std::min(batch, n0 + batch_block)};
  }
};

PackedTasks packed_tasks(int64_t rows, int64_t columns, int64_t step, int64_t groups, int64_t batch,
                         bool share_batch_rows) {
  PackedTasks t;
  t.rows = rows, t.row_block = balanced_rows(rows), t.row_blocks = ceil_div(rows, t.row_block);
  t.columns = columns, t.column_block = balanced_columns(columns, step);
  t.column_blocks = ceil_div(columns, t.column_block);
  t.width = round_up(std::min(t.column_block, columns), step);
  t.groups = groups, t.batch = batch, t.batch_block = 1;
  if (share_batch_rows) {
    const std::vector<int64_t> row_sizes = block_sizes(rows, t.row_block),
                               column_sizes = block_sizes(columns, t.column_block), group_sizes(groups, 1);
    auto share = [&](int64_t rows_per_task) {
      return busy_share({row_sizes, column_sizes, group_sizes, block_sizes(batch, rows_per_task)}, threads());
    };
    const double best = share(1);
    for (int64_t rows_per_task = std::clamp<int64_t>(1024 / t.width, 1, batch); rows_per_task > 1; --rows_per_task) {
      if (share(rows_per_task) >= best - 0.03) {
        t.batch_block = rows_per_task;
        break;
      }
    }
  }
  t.batch_blocks = ceil_div(batch, t.batch_block);
  return t;
}

// A row length of at least `needed` floats, 16-float aligned, an odd number of 64-byte lines (rows
// read together do not all fall in the same cache sets).
int64_t padded_length(int64_t needed) {
  const int64_t lines = std::max<int64_t>(1, ceil_div(needed, 16));
  return 16 * (lines % 2 == 0 ? lines + 1 : lines);
}

// A padded copy is worth making when it holds at most about twice the elements of the original.
bool padding_is_small(int64_t padded, int64_t original) { return padded <= 2 * original + (int64_t(1) << 20); }

// Problems of fewer multiply-adds than this run on one thread: a parallel region costs more than it
// saves, and on a busy machine one descheduled thread stalls the region.
constexpr double kSerialWork = double(1 << 20);
// A copied or packed element weighs as this many multiply-adds against kSerialWork: copies of more than
// 16k elements run on every thread. (Counted as one, a copy of up to 2^20 elements, 4 MB, ran on one
// thread while the others waited: a short input's padded copy took a fifth of its forward.)
constexpr double kCopyWork = 64;

// The tasks [0, tasks) on the threads, f(begin, end) per run of them; on one thread where `work`
// (multiply-adds or copies, all tasks) is small. Guided: each thread takes the next run of
// (tasks left) / (2 x threads) tasks, at least one, until none are left, so that a thread slowed by
// longer tasks (windows copied at x's ends, partial blocks) or by another process takes fewer, where
// a split into fixed contiguous runs left the other waiting; the first runs still long, for the scratch
// a run allocates and the data consecutive tasks share. Which thread runs a task changes no result:
// every task writes its own outputs, its sums in an order of its own.
template <typename F>
void parallel(int64_t tasks, double work, const F& f) {
  const int64_t thread_count = threads();
  if (work < kSerialWork || tasks <= thread_count) {
    at::parallel_for(0, tasks, work < kSerialWork ? std::max<int64_t>(tasks, 1) : 1, f);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, thread_count, 1, [&](int64_t, int64_t) {
    for (;;) {
      int64_t begin = next.load(), run = 0;
      do {
        if (begin >= tasks) return;
        run = std::max<int64_t>(1, (tasks - begin) / (2 * thread_count));
      } while (!next.compare_exchange_weak(begin, begin + run));
      f(begin, std::min(tasks, begin + run));
    }
  });
}

// Independent pieces of preparation (copies, packing), run in one parallel region.
struct Jobs {
  std::vector<std::function<void()>> jobs;
  double work = 0;
  void add(double elements, std::function<void()> job) {
    work += elements;
    jobs.push_back(std::move(job));
  }
  // row(r) for rows [0, rows) in order, in jobs of about 32k elements (row_elements a row)
  template <typename Row>
  void add_rows(int64_t rows, int64_t row_elements, Row row) {
    const int64_t per_job = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(row_elements, 1));
    for (int64_t r0 = 0; r0 < rows; r0 += per_job) {
      const int64_t r1 = std::min(rows, r0 + per_job);
      add(double(r1 - r0) * row_elements, [=] {
        for (int64_t r = r0; r < r1; ++r) row(r);
      });
    }
  }
  void run() {
    parallel(static_cast<int64_t>(jobs.size()), work * kCopyWork, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) jobs[j]();
    });
    jobs.clear();
    work = 0;
  }
};

// dst (length elements) := zeros, its elements [lead, lead + count) being in[m*step]
void pad_row(const float* in, int64_t step, int64_t count, float* dst, int64_t length, int64_t lead) {
  std::fill(dst, dst + lead, 0.0f);
  if (step == 1) {
    std::memcpy(dst + lead, in, count * sizeof(float));
  } else {
    for (int64_t m = 0; m < count; ++m) dst[lead + m] = in[m * step];
  }
  std::fill(dst + lead + count, dst + length, 0.0f);
}

// Jobs that fill out (rows x length) with zeros, row r's elements [lead, lead + count) being
// src[r*src_stride + m*step].
void pad_rows(Jobs& jobs, const float* src, int64_t src_stride, int64_t step, int64_t count, int64_t rows, float* out,
              int64_t length, int64_t lead) {
  jobs.add_rows(rows, length, [=](int64_t r) { pad_row(src + r * src_stride, step, count, out + r * length, length, lead); });
}

// Jobs that pack A of each unit u < units (avx2::pack_a with base(u), the same sizes and strides for
// every unit) into out, unit u's at u * packed_size(rows, outer * offsets.size()); the work split over
// units and blocks of o or of panels. `offsets` must outlive the jobs.
template <typename Base>
void pack_units(Jobs& jobs, int64_t units, int64_t rows, int64_t outer, const std::vector<int64_t>& offsets, Base base,
                int64_t row_stride, int64_t outer_stride, float* out) {
  const int64_t inner = static_cast<int64_t>(offsets.size());
  const int64_t size = avx2::packed_size(rows, outer * inner);
  const bool by_outer = outer_stride >= row_stride;  // as pack_a's loops
  const int64_t parts = by_outer ? outer : avx2::panels(rows);
  const int64_t per_part = std::max<int64_t>(1, size / parts);
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 15) / per_part);  // about 32k elements a job
  for (int64_t u = 0; u < units; ++u) {
    const float* source = base(u);
    for (int64_t q0 = 0; q0 < parts; q0 += chunk) {
      const int64_t q1 = std::min(parts, q0 + chunk);
      jobs.add(double(q1 - q0) * per_part, [=, &offsets] {
        avx2::pack_a(rows, outer, inner, source, row_stride, outer_stride, offsets.data(), out + u * size,
                     by_outer ? q0 : 0, by_outer ? q1 : outer, by_outer ? 0 : q0, by_outer ? avx2::panels(rows) : q1);
      });
    }
  }
}

// Forward with the weight read in place as the GEMM's B, for short inputs and many channels (where the
// weight is the larger operand) and for few output channels (where the weight is small and x would be
// read once per tap otherwise): Z^T[(n, i), (co, k)] = sum_ci x[n, ci, i] * w[ci, co, k], then each Z^T
// element added into y at i*stride + k*dilation - padding (col2im). A, x^T, is packed once per group and
// chunk of batch rows (every block of output channels reads it). A task owns its rows of y: (group,
// block of whole output channels) with every batch row of the chunk where the inputs are few (the
// weight crosses memory once per tile of 192 input positions), else (group, block, n, segment of
// outputs) with the inputs that reach the segment. Only products of real inputs reach y, so Inf and NaN
// land as torch puts them.
constexpr int64_t kStreamedPositions = 192;  // rows of a Z^T tile (32 panels)

bool streamed_by_batch(const ConvTParams& p) { return p.batch * p.length_in > 2 * kStreamedPositions; }

// The streamed forward's blocks of output channels per group: at most kWeightColumns columns (co, k)
// a block, the blocks of about equal size. Where the batch rows do not split the tasks
// (streamed_by_batch: a task is a group's block) and the tasks are few, as many blocks as make the tasks
// a multiple of the threads, so that no thread waits on another's last task (a block's columns are their
// own products: the sums and their order are the same however many blocks).
int64_t streamed_channel_blocks(const ConvTParams& p) {
  const int64_t Cog = p.out_channels_per_group;
  const int64_t by_columns = ceil_div(Cog, std::clamp<int64_t>(kWeightColumns / p.kernel_size, 1, Cog));
  if (streamed_by_batch(p) || p.groups * by_columns >= 4 * threads()) return by_columns;
  const int64_t blocks_step = threads() / std::gcd(threads(), p.groups);  // (groups * blocks a multiple of threads)
  return std::min(Cog, round_up(by_columns, blocks_step));
}

// The scatter forward's output channels per task: rows (co, k) of at most kAvx2Rows
int64_t scatter_channels(const ConvTParams& p) {
  return std::clamp<int64_t>(kAvx2Rows / p.kernel_size, 1, p.out_channels_per_group);
}

// Jobs that pack x^T of each group for batch rows [n0, n1): rows (n, i) flattened (r = (n - n0)*L_in + i),
// steps ci, panels of `panel` rows (avx2::pack_a's layout), group g's at g * packed_size(rows, Cig).
void pack_x_transposed(Jobs& jobs, const float* x, const ConvTParams& p, int64_t n0, int64_t n1, float* out) {
  const int64_t Cig = p.in_channels_per_group, rows = (n1 - n0) * p.length_in;
  const int64_t panel = avx2::panel_rows(rows), panels = avx2::panels(rows), size = avx2::packed_size(rows, Cig);
  const int64_t per_job = std::max<int64_t>(1, (int64_t(1) << 15) / (panel * Cig));  // about 32k elements a job
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t q0 = 0; q0 < panels; q0 += per_job) {
      const int64_t q1 = std::min(panels, q0 + per_job);
      jobs.add(double(q1 - q0) * panel * Cig, [=, &p] {
        for (int64_t q = q0; q < q1; ++q) {
          const float* sources[6];
          for (int64_t lane = 0; lane < panel; ++lane) {
            const int64_t r = std::min(q * panel + lane, rows - 1);  // (lanes past the end: any row, never used)
            sources[lane] = x + ((n0 + r / p.length_in) * p.in_channels + g * Cig) * p.length_in + r % p.length_in;
          }
          float* dst = out + g * size + q * panel * Cig;
          for (int64_t ci = 0; ci < Cig; ++ci, dst += panel) {
            for (int64_t lane = 0; lane < panel; ++lane) dst[lane] = sources[lane][ci * p.length_in];
          }
        }
      });
    }
  }
}

constexpr int64_t kCol2imChannels = 32;  // (forward_avx2_streamed's col2im)

void forward_avx2_streamed(const float* x, const float* w, const float* bias, float* y, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, R = Cog * K;
  const int64_t span = (K - 1) * p.dilation;
  const int64_t blocks = streamed_channel_blocks(p), channels = ceil_div(Cog, blocks);  // output channels per task
  const bool by_batch = streamed_by_batch(p);
  // batch rows per chunk: x^T of a chunk at most kSharedCopy floats (one batch row at least)
  const int64_t chunk = by_batch ? std::clamp<int64_t>(kSharedCopy / (p.in_channels * p.length_in), 1, p.batch) : p.batch;
  // segments of outputs per batch row: enough tasks for the threads, each at least 4 halos of inputs
  const int64_t halo = ceil_div(span, p.stride) + 1;
  const int64_t most = std::max<int64_t>(1, p.length_in / std::max(kStreamedPositions, 4 * halo));
  const int64_t segments =
      by_batch ? std::clamp<int64_t>(ceil_div(4 * threads(), p.groups * blocks * chunk), 1, most) : 1;
  const int64_t segment = ceil_div(p.length_out, segments);
  const int64_t chunk_rows = chunk * p.length_in, panel = avx2::panel_rows(chunk_rows);
  const int64_t group_size = avx2::packed_size(chunk_rows, Cig);
  const at::Tensor packed_x =
      at::empty({std::max<int64_t>(1, p.groups * group_size)}, at::TensorOptions().dtype(at::kFloat));
  float* const packed = packed_x.data_ptr<float>();
  const int64_t zero = 0;
  for (int64_t n0 = 0; n0 < p.batch; n0 += chunk) {
    const int64_t n1 = std::min(p.batch, n0 + chunk);
    Jobs jobs;
    pack_x_transposed(jobs, x, p, n0, n1, packed);
    jobs.run();
    const int64_t units = p.groups * blocks * (by_batch ? (n1 - n0) * segments : 1);
    parallel(units, double(n1 - n0) * p.in_channels * p.out_channels_per_group * p.kernel_size * p.length_in,
             [&](int64_t begin, int64_t end) {
      // (a tile: the rows of a gemm call at its widest width, column steps of the panel it runs)
      std::vector<float> tile(kStreamedPositions * avx2::round_up_columns(channels * K, panel)), tail;
      for (int64_t task = begin; task < end; ++task) {
        int64_t rest = task;
        const int64_t q = by_batch ? rest % segments : 0;
        rest = by_batch ? rest / segments : rest;
        const int64_t n_only = by_batch ? n0 + rest % (n1 - n0) : -1;
        rest = by_batch ? rest / (n1 - n0) : rest;
        const int64_t b = rest % blocks, g = rest / blocks;
        const int64_t co0 = b * channels, count = std::min(channels, Cog - co0), cols = count * K;
        const int64_t j0 = q * segment, j1 = std::min(p.length_out, j0 + segment);
        if (j0 >= j1) continue;
        // the task's rows of x^T: [first, last), (n, i) with i in [i_lo, i_hi) for each n
        const int64_t i_lo = by_batch ? std::max<int64_t>(0, ceil_div(j0 - span + p.padding, p.stride)) : 0;
        const int64_t i_hi = by_batch ? std::min(p.length_in, floor_div(j1 - 1 + p.padding, p.stride) + 1) : p.length_in;
        const int64_t base = by_batch ? (n_only - n0) * p.length_in : 0;
        const int64_t first = base + i_lo, last = by_batch ? base + std::max(i_lo, i_hi) : chunk_rows;
        const int64_t width = avx2::round_up_columns(cols, panel);
        for (int64_t n = by_batch ? n_only : n0; n < (by_batch ? n_only + 1 : n1); ++n) {
          for (int64_t c = 0; c < count; ++c) {
            float* row = y + (n * p.out_channels + g * Cog + co0 + c) * p.length_out;
            std::fill(row + j0, row + j1, bias ? bias[g * Cog + co0 + c] : 0.0f);
          }
        }
        if (first >= last) continue;
        // B: w's rows from column co0*K; where the tile's columns run past a row, a copy padded with zeros
        avx2::Operand b_rows{w + g * Cig * R + co0 * K, R, 1, &zero};
        if (co0 * K + width > R) {
          tail.assign(Cig * width, 0.0f);
          for (int64_t ci = 0; ci < Cig; ++ci) {
            std::memcpy(tail.data() + ci * width, w + (g * Cig + ci) * R + co0 * K, cols * sizeof(float));
          }
          b_rows = avx2::Operand{tail.data(), width, 1, &zero};
        }
        // tiles from the panel that holds `first` (its rows before `first` are another task's: skipped)
        for (int64_t r0 = first / panel * panel; r0 < last; r0 += kStreamedPositions) {
          const int64_t rows = std::min(kStreamedPositions, last - r0);
          avx2::gemm(rows, cols, Cig, packed + g * group_size + r0 * Cig, panel, panel * Cig, b_rows, 0, tile.data(), width,
                     false);
          // col2im by blocks of kCol2imChannels output channels: a block's y lines stay in L1 across the
          // tile's consecutive positions (every channel at once, each add would touch a line of its own)
          for (int64_t c0 = 0; c0 < count; c0 += kCol2imChannels) {
            const int64_t c1 = std::min(count, c0 + kCol2imChannels);
            for (int64_t r = std::max<int64_t>(0, first - r0); r < rows; ++r) {
              const float* z = tile.data() + r * width;
              const int64_t n = n0 + (r0 + r) / p.length_in, i = (r0 + r) % p.length_in;
              const int64_t origin = i * p.stride - p.padding;
              float* y_rows = y + (n * p.out_channels + g * Cog + co0) * p.length_out;
              for (int64_t k = 0; k < K; ++k) {
                const int64_t j = origin + k * p.dilation;
                if (j < j0 || j >= j1) continue;
                float* out = y_rows + j;
                for (int64_t c = c0; c < c1; ++c) out[c * p.length_out] += z[c * K + k];
              }
            }
          }
        }
      }
    });
  }
}

// Forward for few output channels per group (waveform decoders, C_out 1-4): Z[(co, k), i] = sum_ci
// w[ci, co, k] * x[ci, i] with the positions along the vectors (A = w^T packed, small; B = x's rows read
// in place: each x element loaded once for every tap of a block of output channels), then col2im into y.
// Tasks of (group, block of whole output channels, n, segment of outputs), each with the inputs that
// reach its segment (as forward_avx2_streamed); only products of real inputs reach y.
void forward_avx2_scatter(const float* x, const float* w, const float* bias, float* y, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, R = Cog * K;
  constexpr int64_t kColumns = 256;  // positions of a Z tile
  // Blocks of at most kStreamMostRows rows (co, k) stream x's rows in order (avx2::stream_rows, 4 rows
  // of x a pass over the tile's kStreamColumns positions) instead of the micro-kernel's column steps
  // down all of x's rows: 0.68-0.84x the time on 14 narrow layers of 1-5 rows, long rows of 13k-400k
  // inputs (at 8 rows 0.96x, from 9 up to 5x slower: the tile's rows no longer fit the registers)
  constexpr int64_t kStreamColumns = 2048, kStreamMostRows = 5;
  const int64_t span = (K - 1) * p.dilation;
  const int64_t channels = scatter_channels(p);  // output channels per task
  const int64_t blocks = ceil_div(Cog, channels);
  const int64_t halo = ceil_div(span, p.stride) + 1;
  const int64_t most = std::max<int64_t>(1, p.length_in / std::max(kColumns, 4 * halo));
  const int64_t segments = std::clamp<int64_t>(ceil_div(4 * threads(), p.groups * blocks * p.batch), 1, most);
  const int64_t segment = ceil_div(p.length_out, segments);
  // A per (group, block): rows (co, k) of the block, steps ci: w[g*Cig + ci, co0*K + row]
  const int64_t block_rows = channels * K;
  const int64_t packed = avx2::packed_size(block_rows, Cig);
  at::Tensor a_packed = at::empty({std::max<int64_t>(1, p.groups * blocks * packed)}, at::TensorOptions().dtype(at::kFloat));
  float* a = a_packed.data_ptr<float>();
  const int64_t zero = 0;
  parallel(p.groups * blocks, kCopyWork * p.groups * Cig * R, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t g = u / blocks, co0 = (u % blocks) * channels, rows = std::min(channels, Cog - co0) * K;
      if (rows <= kStreamMostRows) continue;  // (read in place: stream_rows)
      avx2::pack_a(rows, Cig, 1, w + g * Cig * R + co0 * K, 1, R, &zero, a + u * packed, 0, Cig, 0, avx2::panels(rows));
    }
  });
  const int64_t tasks = p.groups * blocks * p.batch * segments;
  parallel(tasks, double(p.batch) * p.in_channels * p.out_channels_per_group * p.kernel_size * p.length_in,
           [&](int64_t begin, int64_t end) {
    std::vector<float> tile(block_rows * (kColumns + 64)), window, stream_tile;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t q = task % segments, n = (task / segments) % p.batch, u = task / (segments * p.batch);
      const int64_t g = u / blocks, co0 = (u % blocks) * channels, count = std::min(channels, Cog - co0);
      const int64_t rows = count * K, panel = avx2::panel_rows(rows);  // as pack_a packed the block
      const int64_t step = avx2::column_step(panel), width = round_up(kColumns, step);
      const int64_t j0 = q * segment, j1 = std::min(p.length_out, j0 + segment);
      if (j0 >= j1) continue;
      float* y_rows = y + (n * p.out_channels + g * Cog + co0) * p.length_out;
      for (int64_t c = 0; c < count; ++c) {
        std::fill(y_rows + c * p.length_out + j0, y_rows + c * p.length_out + j1, bias ? bias[g * Cog + co0 + c] : 0.0f);
      }
      const int64_t i_lo = std::max<int64_t>(0, ceil_div(j0 - span + p.padding, p.stride));
      const int64_t i_hi = std::min(p.length_in, floor_div(j1 - 1 + p.padding, p.stride) + 1);
      const float* x_rows = x + (n * p.in_channels + g * Cig) * p.length_in;
      if (rows <= kStreamMostRows) {  // (x's rows streamed, kStreamColumns positions at a time)
        stream_tile.resize(rows * kStreamColumns);
        for (int64_t i0 = i_lo; i0 < i_hi; i0 += kStreamColumns) {
          const int64_t cols = std::min(kStreamColumns, i_hi - i0);
          std::fill(stream_tile.begin(), stream_tile.end(), 0.0f);
          avx2::stream_rows(rows, cols, Cig, w + g * Cig * R + co0 * K, R, x_rows + i0, p.length_in, stream_tile.data(),
                            kStreamColumns);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t c = r / K, k = r % K, offset = k * p.dilation - p.padding;
            const int64_t ia = std::max(i0, ceil_div(j0 - offset, p.stride));
            const int64_t ib = std::min(i0 + cols, ceil_div(j1 - offset, p.stride));
            add_tap_row(y_rows + c * p.length_out, stream_tile.data() + r * kStreamColumns - i0, offset, p.stride, ia, ib);
          }
        }
        continue;
      }
      for (int64_t i0 = i_lo; i0 < i_hi; i0 += kColumns) {
        const int64_t cols = std::min(kColumns, i_hi - i0);
        // B: x's rows from i0, or where the kernel's columns would run past a row, a padded copy
        avx2::Operand b{x_rows, p.length_in, 1, &zero};
        int64_t column = i0;
        if (i0 + round_up(cols, step) > p.length_in) {
          window.assign(Cig * width, 0.0f);
          for (int64_t ci = 0; ci < Cig; ++ci) {
            std::memcpy(window.data() + ci * width, x_rows + ci * p.length_in + i0, cols * sizeof(float));
          }
          b = avx2::Operand{window.data(), width, 1, &zero}, column = 0;
        }
        avx2::gemm(rows, cols, Cig, a + u * packed, panel, panel * Cig, b, column, tile.data(), width, false);
        for (int64_t r = 0; r < rows; ++r) {  // col2im: row (c, k) of Z to y[c] at i*stride + k*dilation - padding
          const int64_t c = r / K, k = r % K, offset = k * p.dilation - p.padding;
          const int64_t ia = std::max(i0, ceil_div(j0 - offset, p.stride));
          const int64_t ib = std::min(i0 + cols, ceil_div(j1 - offset, p.stride));
          add_tap_row(y_rows + c * p.length_out, tile.data() + r * width - i0, offset, p.stride, ia, ib);
        }
      }
    }
  });
}

// The forward's AVX2 form, by estimates in cycles of each: its multiply-adds (16 a cycle) with the
// columns each GEMM rounds up to the micro-kernel's step (a phase of 33 positions runs 48), and beyond
// them: packed, its products a fifth slower (B's rows at each tap's shift) and about 4 per weight element
// to pack, and with fewer than 6 output channels per group a kernel that loads a vector of x per
// multiply-add row or two (x read once per tap); streamed, about 1.5 per element of Z^T (N*L_in*Cog*K,
// the col2im), 2 per element of x to pack x^T, and the weight read again per tile of 192 input
// positions; scatter, the col2im and the packing of w^T. (The constants: a fit to the three forms'
// times on 130 sweep layers, docs/perf/2026-11-28-cpu-forward-forms.md.)
Form forward_avx2_form(const ConvTParams& p) {
  const double Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, G = p.groups;
  const double N = p.batch, weight = G * Cig * Cog * K, positions = N * p.length_in;
  const double col2im = 1.5 * positions * Cog * K * G;
  // packed: per phase, its taps' weight times its positions rounded up to the column step
  const int64_t packed_step = avx2::column_step(avx2::panel_rows(p.out_channels_per_group));
  double packed_columns = 0, packed_outputs = 0;  // sums over phases of taps x rounded positions, of rounded positions
  const auto phases = taps_by_phase(p);
  for (size_t r = 0; r < phases.size(); ++r) {
    const double columns = double(round_up(phase_length(static_cast<int64_t>(r), p.length_out, p.stride), packed_step));
    packed_columns += double(phases[r].size()) * columns;
    if (!phases[r].empty()) packed_outputs += columns;
  }
  // (the products a tenth slower than the other forms' on 8-float vectors, B's rows starting at each
  // tap's shift, and at their pace on 16-float ones (refit on a Zen 4 core: CPU v49,
  // docs/perf/2026-12-07-session102.md); and each output of a phase's GEMM about 2 cycles beyond them,
  // its accumulators loaded and stored and the bias added, which a short reduction, C_in/g x taps a
  // phase, does not amortize)
  const double packed_pace = avx2::wide_vectors() ? 1.0 : 1.1;
  const double packed_products = packed_pace * G * Cig * Cog * N * packed_columns / 16;
  const double packed = packed_products + 4 * weight + 2 * G * Cog * N * packed_outputs +
                        (Cog < 6 ? packed_products * (6 / Cog - 1) / 2 : 0);
  // streamed: columns (co, k) in blocks of whole output channels, each rounded up to 16
  const int64_t blocks = streamed_channel_blocks(p);
  const int64_t block_columns = ceil_div(p.out_channels_per_group, blocks) * p.kernel_size;
  const double streamed_products = G * Cig * positions * double(blocks * round_up(block_columns, 16)) / 16;
  const double tiles = streamed_by_batch(p) ? N * std::ceil(p.length_in / double(kStreamedPositions))
                                            : std::ceil(positions / kStreamedPositions);
  const double streamed = streamed_products + col2im + 2 * positions * Cig * G + weight * (tiles - 1) / 2;
  // scatter: rows (co, k), columns the input positions rounded up to the column step
  const int64_t scatter_rows = scatter_channels(p) * p.kernel_size;
  const int64_t scatter_step = avx2::column_step(avx2::panel_rows(scatter_rows));
  const double scatter = weight * N * double(round_up(p.length_in, scatter_step)) / 16 + col2im + 4 * weight;
  if (packed <= streamed && packed <= scatter) return Form::kPacked;
  return streamed <= scatter ? Form::kStreamed : Form::kScatter;
}

// Forward: per (group, phase) A = W_phase (Cog x Cig*taps), element (co, ci*taps + t) = w[ci, co, k_t];
// B row (ci, t) = x_padded[ci] shifted by -shift_t. Tasks of (n, group, block of positions, block of
// rows), each running every phase (they read the same window of x); the epilogue adds the bias and
// writes the phase's positions of y. B's rows come from x in place, and for the blocks whose windows
// reach past its ends from a padded copy of the window, per task; with padded_copy (or where a
// task's windows would be large: taps far apart) from one copy of x padded with zeros, made once,
// where that is small (a pass of its own over x, where the tasks copy only the windows at its ends).
// False: not run (both copies would be large), or an output is not
// finite (Inf or NaN in x or w: the products with the padding may have made NaN of what torch leaves
// finite, and the caller reruns the pass in a form that forms no such product).
bool forward_avx2(const float* x, const float* w, const float* bias, float* y, const ConvTParams& p,
                  bool padded_copy) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const auto phases = taps_by_phase(p);
  const int64_t count = static_cast<int64_t>(phases.size());
  std::vector<std::vector<int64_t>> offsets(count);
  int64_t min_shift = 0, max_shift = 0;
  for (int64_t r = 0; r < count; ++r) {
    for (const int64_t k : phases[r]) {
      const int64_t shift = tap_of(k, p.stride, p.padding, p.dilation).shift;
      offsets[r].push_back(-shift);
      min_shift = std::min(min_shift, shift);
      max_shift = std::max(max_shift, shift);
    }
  }
  const int64_t step = avx2::column_step(avx2::panel_rows(Cog));
  const int64_t longest = phase_length(0, p.length_out, p.stride);
  const int64_t lead = max_shift;
  const int64_t length = padded_length(std::max(lead + p.length_in, lead + longest + step - min_shift));
  const int64_t window = padded_length(balanced_columns(longest, step) + step + max_shift - min_shift);
  // Windows are copied by the tasks at x's ends: per (n, group, block of rows) the first and last block
  // of columns. The shared copy where it fits and those copies would be larger than it (short inputs:
  // every task copies nearly all of its rows, once per block of rows).
  const PackedTasks windowed = packed_tasks(Cog, longest, step, p.groups, p.batch, false);
  const int64_t ends = std::min<int64_t>(windowed.column_blocks, 2);
  const bool copy_fits = p.batch * p.in_channels * length <= kSharedCopy;
  const bool shared_copy = copy_fits && (padded_copy || Cig * window > kSharedCopy ||
                                         windowed.row_blocks * ends * window > length);
  if (!shared_copy && Cig * window > kSharedCopy) return false;  // taps far apart: windows as large as x
  // (tasks of several batch rows only on the shared copy: a window is one batch row's)
  const PackedTasks grid = shared_copy ? packed_tasks(Cog, longest, step, p.groups, p.batch, true) : windowed;
  const int64_t columns_per_task = grid.column_block;

  // A per (phase, group): A(co, (ci, t)) = w[g*Cig + ci, co, k_t], at a_offsets[phase] + g * its size
  Jobs jobs;
  std::vector<int64_t> a_offsets(count + 1, 0);
  for (int64_t r = 0; r < count; ++r) {
    a_offsets[r + 1] = a_offsets[r] + p.groups * avx2::packed_size(Cog, Cig * static_cast<int64_t>(phases[r].size()));
  }
  const at::Tensor a_packed = at::empty({std::max<int64_t>(1, a_offsets[count])}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t r = 0; r < count; ++r) {
    pack_units(jobs, p.groups, Cog, Cig, phases[r], [&](int64_t g) { return w + g * Cig * Cog * K; }, K, Cog * K,
               a_packed.data_ptr<float>() + a_offsets[r]);
  }
  at::Tensor x_padded;
  if (shared_copy) {
    x_padded = at::empty({p.batch * p.in_channels, length}, at::TensorOptions().dtype(at::kFloat));
    pad_rows(jobs, x, p.length_in, 1, p.length_in, p.batch * p.in_channels, x_padded.data_ptr<float>(), length, lead);
  }
  jobs.run();
  const float* xp = shared_copy ? x_padded.data_ptr<float>() : nullptr;

  // Tasks of several batch rows keep their outputs side by side in tiles; the reduction then runs in
  // blocks of whole input channels, each block's products for every batch row of the task in turn.
  const int64_t tile_size = grid.row_block * grid.width;
  const int64_t panel = avx2::panel_rows(Cog);
  std::atomic<bool> finite{true};
  parallel(grid.count(), double(p.batch) * p.in_channels * p.out_channels_per_group * K * p.length_in,
           [&](int64_t begin, int64_t end) {
    std::vector<float> tiles(grid.batch_block * tile_size);
    std::vector<float> window_rows;
    bool all_finite = true;
    for (int64_t task = begin; task < end; ++task) {
      const PackedTasks::Task t = grid[task];
      const int64_t row0 = t.row0, rows = t.rows, m0 = t.column0, g = t.group, n0 = t.n0, n1 = t.n1;
      // where row (ci, t) of B starts for output m0 of batch row n: base(n) + ci*stride + offset_t + column
      const float* window_base = nullptr;
      int64_t stride = length, column = m0;
      if (!shared_copy) {  // (one batch row a task)
        const int64_t lo = m0 - max_shift, hi = m0 + columns_per_task + step - min_shift;
        const float* x_rows = x + (n0 * p.in_channels + g * Cig) * p.length_in;
        if (lo >= 0 && hi <= p.length_in) {
          window_base = x_rows, stride = p.length_in;
        } else {
          window_rows.resize(Cig * window);
          const int64_t a0 = std::clamp<int64_t>(lo, 0, p.length_in), a1 = std::clamp<int64_t>(hi, a0, p.length_in);
          for (int64_t ci = 0; ci < Cig; ++ci) {
            float* out = window_rows.data() + ci * window;
            std::fill(out, out + window, 0.0f);
            std::memcpy(out + (a0 - lo), x_rows + ci * p.length_in + a0, (a1 - a0) * sizeof(float));
          }
          window_base = window_rows.data() + max_shift, stride = window, column = 0;
        }
      }
      auto base = [&](int64_t n) {
        return shared_copy ? xp + (n * p.in_channels + g * Cig) * length + lead : window_base;
      };
      for (int64_t r = 0; r < count; ++r) {
        const int64_t cols = std::min(columns_per_task, phase_length(r, p.length_out, p.stride) - m0);
        if (cols <= 0) continue;
        const int64_t taps = static_cast<int64_t>(phases[r].size());
        const int64_t depth = Cig * taps;  // B((ci, t), m) = x[ci, m - shift_t]
        const float* a = a_packed.data_ptr<float>() + a_offsets[r] + g * avx2::packed_size(Cog, depth) + row0 * depth;
        // blocks of about 256 steps (whole input channels) where several batch rows share them
        const int64_t channels = n1 - n0 > 1 ? std::clamp<int64_t>(256 / std::max<int64_t>(taps, 1), 1, Cig) : Cig;
        for (int64_t c0 = 0; c0 < Cig; c0 += channels) {
          const int64_t kc = (std::min(Cig, c0 + channels) - c0) * taps;
          for (int64_t n = n0; n < n1; ++n) {
            avx2::gemm(rows, cols, kc, a + c0 * taps * panel, panel, panel * depth,
                       avx2::Operand{base(n) + c0 * stride, stride, taps, offsets[r].data()}, column,
                       tiles.data() + (n - n0) * tile_size, grid.width, c0 > 0);
          }
        }
        for (int64_t n = n0; n < n1; ++n) {
          const float* tile = tiles.data() + (n - n0) * tile_size;
          for (int64_t rr = 0; rr < rows; ++rr) {
            const int64_t co = g * Cog + row0 + rr;
            all_finite &= avx2::write_row(tile + rr * grid.width, cols, bias ? bias[co] : 0.0f,
                                          y + (n * p.out_channels + co) * p.length_out + m0 * p.stride + r, p.stride);
          }
        }
      }
    }
    if (!all_finite) finite = false;
  });
  return finite;
}

// grad_y's phases padded: phase r's N*C_out rows of `length` floats from r * phase_stride, its outputs at
// [lead, lead + phase_length(r)) of each row.
struct PaddedPhases {
  at::Tensor data;
  int64_t count = 0, length = 0, lead = 0, phase_stride = 0;
  std::vector<int64_t> taps;  // the taps whose phase exists (phase < L_out), in order of k
  const float* row(int64_t phase, int64_t row_index) const {
    return data.data_ptr<float>() + phase * phase_stride + row_index * length;
  }
};

// false: the padded copy would be large.
bool pad_phases(const float* grad_y, const ConvTParams& p, int64_t step, PaddedPhases& out) {
  out.count = std::min(p.stride, p.length_out);
  int64_t min_shift = 0, max_shift = 0;
  for (int64_t k = 0; k < p.kernel_size; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    if (tap.phase >= out.count) continue;
    out.taps.push_back(k);
    min_shift = std::min(min_shift, tap.shift);
    max_shift = std::max(max_shift, tap.shift);
  }
  const int64_t longest = phase_length(0, p.length_out, p.stride);
  out.lead = -min_shift;
  out.length = padded_length(std::max(out.lead + longest, out.lead + p.length_in + step + max_shift));
  const int64_t rows = p.batch * p.out_channels;
  // Phases an odd number of 64-byte lines apart: a channel's taps read the same columns of every phase,
  // and phases a multiple of 4 KB apart (N*C_out a multiple of 64) fall in one L1 set, more of them than
  // its 8 ways at stride 9 or more (grad_input's B re-read from L2 by every panel of A)
  out.phase_stride = padded_length(rows * out.length);
  if (!padding_is_small(out.count * out.phase_stride, rows * p.length_out)) return false;
  out.data = at::empty({out.count * out.phase_stride}, at::TensorOptions().dtype(at::kFloat));
  // Each grad_y row's phases one after the other, while the row is in L1: the row crosses memory once
  // (a pass over all of grad_y per phase had read it `stride` times)
  float* const data = out.data.data_ptr<float>();
  const int64_t count = out.count, length = out.length, lead = out.lead, length_out = p.length_out, stride = p.stride;
  const int64_t phase_stride = out.phase_stride;
  Jobs jobs;
  jobs.add_rows(rows, length_out, [=](int64_t r) {
    for (int64_t phase = 0; phase < count; ++phase) {
      pad_row(grad_y + r * length_out + phase, stride, phase_length(phase, length_out, stride),
              data + phase * phase_stride + r * length, length, lead);
    }
  });
  jobs.run();
  return true;
}

// grad_input: per group A = W (Cig x Cog*taps), element (ci, co*taps + v) = w[ci, co, k_v]; B row (co, v) =
// phase_v of grad_y[co] shifted by shift_v. Tasks of (n, group, block of inputs, block of rows). False
// where an output is not finite (as forward_avx2).
bool grad_input_avx2(const PaddedPhases& phases, const float* w, float* grad_x, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const int64_t taps = static_cast<int64_t>(phases.taps.size());
  std::vector<int64_t> offsets;
  for (const int64_t k : phases.taps) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    offsets.push_back(tap.phase * phases.phase_stride + tap.shift);
  }
  const int64_t depth = Cog * taps;
  const float* base = phases.data.data_ptr<float>();
  const int64_t step = avx2::column_step(avx2::panel_rows(Cig));
  const PackedTasks grid = packed_tasks(Cig, p.length_in, step, p.groups, p.batch, true);
  const int64_t tile_size = grid.row_block * grid.width;
  // A per group: A(ci, (co, v)) = w[g*Cig + ci, co, k_v]. Packed once where two tasks or more read each
  // block of it; else w's rows themselves where every tap has outputs (steps (co, k) in order), packed
  // per block of steps by the one task that reads it.
  const bool in_place = taps == K && grid.batch_blocks * grid.column_blocks == 1;
  at::Tensor a_packed;
  if (!in_place) {
    a_packed = at::empty({std::max<int64_t>(1, p.groups * avx2::packed_size(Cig, depth))},
                         at::TensorOptions().dtype(at::kFloat));
    Jobs jobs;
    pack_units(jobs, p.groups, Cig, Cog, phases.taps, [&](int64_t g) { return w + g * Cig * Cog * K; }, Cog * K, K,
               a_packed.data_ptr<float>());
    jobs.run();
  }
  const int64_t panel = avx2::panel_rows(Cig);
  std::atomic<bool> finite{true};
  parallel(grid.count(), double(p.batch) * p.in_channels * p.out_channels_per_group * p.kernel_size * p.length_in,
           [&](int64_t begin, int64_t end) {
    std::vector<float> tiles(grid.batch_block * tile_size);
    bool all_finite = true;
    for (int64_t task = begin; task < end; ++task) {
      const PackedTasks::Task t = grid[task];
      const int64_t row0 = t.row0, rows = t.rows, i0 = t.column0, cols = t.columns, g = t.group, n0 = t.n0, n1 = t.n1;
      // blocks of about 256 steps (whole output channels) where several batch rows share them
      const int64_t channels = n1 - n0 > 1 ? std::clamp<int64_t>(256 / std::max<int64_t>(taps, 1), 1, Cog) : Cog;
      for (int64_t c0 = 0; c0 < Cog; c0 += channels) {
        const int64_t kc = (std::min(Cog, c0 + channels) - c0) * taps;
        for (int64_t n = n0; n < n1; ++n) {
          // B((co, v), i) = phase_v of grad_y[co] at i + shift_v
          const avx2::Operand b{base + (n * p.out_channels + g * Cog + c0) * phases.length + phases.lead,
                                phases.length, taps, offsets.data()};
          float* tile = tiles.data() + (n - n0) * tile_size;
          if (in_place) {
            avx2::gemm_rows(rows, cols, kc, w + (g * Cig + row0) * depth + c0 * taps, depth, panel, b, i0, tile,
                            grid.width, c0 > 0);
          } else {
            const float* a = a_packed.data_ptr<float>() + g * avx2::packed_size(Cig, depth) + row0 * depth;
            avx2::gemm(rows, cols, kc, a + c0 * taps * panel, panel, panel * depth, b, i0, tile, grid.width, c0 > 0);
          }
        }
      }
      for (int64_t n = n0; n < n1; ++n) {
        const float* tile = tiles.data() + (n - n0) * tile_size;
        for (int64_t rr = 0; rr < rows; ++rr) {
          all_finite &= avx2::write_row(tile + rr * grid.width, cols, 0.0f,
                                        grad_x + (n * p.in_channels + g * Cig + row0 + rr) * p.length_in + i0, 1);
        }
      }
    }
    if (!all_finite) finite = false;
  });
  return finite;
}

// The dot-product grad_weight's task shape (grad_weight_avx2): blocks of kDotInBlock input and
// kDotOutBlock output channels (multiples of dot's 3 x 4 blocks) and of dot_taps_per_task taps; a
// chunk of kDotPositions of x's rows and grad_y's stays in L2.
constexpr int64_t kDotInBlock = 24, kDotOutBlock = 32, kDotPositions = 1024;
// taps per task: all of them where there are 32 units or more (blocks of channels), else as many as
// make about 32 tasks; a constant, not the thread count: the taps a task holds set the order of its
// sums (the inputs every one of them reaches, then each one's own), and results must not depend on it
int64_t dot_taps_per_task(const ConvTParams& p) {
  const int64_t units = p.groups * ceil_div(p.in_channels_per_group, kDotInBlock) * ceil_div(p.out_channels_per_group, kDotOutBlock);
  return ceil_div(p.kernel_size, std::clamp<int64_t>(ceil_div(32, units), 1, p.kernel_size));
}
// Per tap k, the inputs [first[k], last[k]) whose output it reaches (none where its phase, of
// min(stride, L_out), has no outputs)
struct TapInputs {
  std::vector<Tap> taps;
  std::vector<int64_t> first, last;
};
TapInputs tap_inputs(const ConvTParams& p) {
  const int64_t K = p.kernel_size, phase_count = std::min(p.stride, p.length_out);
  TapInputs t{std::vector<Tap>(K), std::vector<int64_t>(K, 0), std::vector<int64_t>(K, 0)};
  for (int64_t k = 0; k < K; ++k) {
    t.taps[k] = tap_of(k, p.stride, p.padding, p.dilation);
    if (t.taps[k].phase >= phase_count) continue;
    const TapRange range = tap_range(t.taps[k], phase_length(t.taps[k].phase, p.length_out, p.stride), p.length_in);
    if (range.empty()) continue;
    t.first[k] = range.begin - t.taps[k].shift, t.last[k] = range.end - t.taps[k].shift;
  }
  return t;
}

// Taps [k0, k1) of a dot task: `reaching`, those that reach inputs; [lo, hi) the inputs any of them
// reaches, [both_lo, both_hi) those every one reaches (empty: none in common)
struct TapBlockInputs {
  int64_t lo, hi, both_lo, both_hi;
};
TapBlockInputs tap_block_inputs(const TapInputs& inputs, int64_t k0, int64_t k1, int64_t length_in,
                                std::vector<int64_t>& reaching) {
  TapBlockInputs b{length_in, 0, 0, length_in};
  reaching.clear();
  for (int64_t k = k0; k < k1; ++k) {
    if (inputs.first[k] >= inputs.last[k]) continue;
    reaching.push_back(k);
    b.lo = std::min(b.lo, inputs.first[k]), b.hi = std::max(b.hi, inputs.last[k]);
    b.both_lo = std::max(b.both_lo, inputs.first[k]), b.both_hi = std::min(b.both_hi, inputs.last[k]);
  }
  return b;
}

// grad_weight: grad_w[ci, co, k] = sum over n and the inputs i whose output tap k reaches of
// x[n, ci, i] * phase_k of grad_y[n, co] at i + shift_k. Tasks of (group, block of input channels, block
// of output channels, block of taps): every tap where that leaves enough tasks, so that each chunk of
// x's rows (kDotPositions) crosses memory once for all of them, not once per tap; the inputs of a chunk
// that all the task's taps reach run as one dot product of x's rows with every (tap, output channel)
// column (x loaded once for 4 of them: a narrow output's taps). Each grad_w element sums over the batch,
// then the chunks, in order, within a chunk its tap's own inputs before those, those, then its own
// after (deterministic: blocks and chunks depend on the problem only), and only over the inputs its
// tap reaches (products of real values only).
void grad_weight_avx2(const PaddedPhases& phases, const float* x, float* grad_w, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const int64_t in_blocks = ceil_div(Cig, kDotInBlock), out_blocks = ceil_div(Cog, kDotOutBlock);
  const int64_t units = p.groups * in_blocks * out_blocks;
  const int64_t taps_per_task = dot_taps_per_task(p), tap_blocks = ceil_div(K, taps_per_task);
  const TapInputs inputs = tap_inputs(p);  // (phases.count: min(stride, L_out) too)
  const std::vector<Tap>& taps = inputs.taps;
  const std::vector<int64_t>&first = inputs.first, &last = inputs.last;
  const int64_t ld = taps_per_task * kDotOutBlock;  // tiles: row r, column (j, c) for the task's j-th tap reaching inputs
  parallel(units * tap_blocks, double(p.batch) * p.in_channels * p.out_channels_per_group * p.kernel_size * p.length_in,
           [&](int64_t begin, int64_t end) {
    std::vector<float> tiles(kDotInBlock * ld);
    std::vector<int64_t> reaching;  // the task's taps that reach inputs
    std::vector<const float*> columns(ld);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t k0 = (task % tap_blocks) * taps_per_task, k1 = std::min(K, k0 + taps_per_task);
      const int64_t ob = (task / tap_blocks) % out_blocks, ib = (task / (tap_blocks * out_blocks)) % in_blocks;
      const int64_t g = task / (tap_blocks * out_blocks * in_blocks);
      const int64_t c0 = ib * kDotInBlock, rows = std::min(kDotInBlock, Cig - c0);
      const int64_t o0 = ob * kDotOutBlock, cols = std::min(kDotOutBlock, Cog - o0);
      std::fill(tiles.begin(), tiles.end(), 0.0f);
      const auto [lo, hi, both_lo, both_hi] = tap_block_inputs(inputs, k0, k1, p.length_in, reaching);
      const int64_t count = static_cast<int64_t>(reaching.size());
      for (int64_t n = 0; n < p.batch; ++n) {
        const float* x_rows = x + (n * p.in_channels + g * Cig + c0) * p.length_in;
        // column (j, c): phase of grad_y[n, o0 + c] for tap reaching[j], at input 0
        for (int64_t j = 0; j < count; ++j) {
          const Tap& tap = taps[reaching[j]];
          const float* phase_rows = phases.row(tap.phase, n * p.out_channels + g * Cog + o0) + phases.lead + tap.shift;
          for (int64_t c = 0; c < cols; ++c) columns[j * cols + c] = phase_rows + c * phases.length;
        }
        auto add = [&](int64_t j0, int64_t taps_count, int64_t a, int64_t b) {  // inputs [a, b) of taps j0..
          const float* shifted[4 * kDotOutBlock];
          for (int64_t q = 0; q < taps_count * cols; ++q) shifted[q] = columns[j0 * cols + q] + a;
          avx2::dot_columns(rows, taps_count * cols, b - a, x_rows + a, p.length_in, shifted, tiles.data() + j0 * cols,
                            ld, true);
        };
        for (int64_t i0 = lo; i0 < hi; i0 += kDotPositions) {
          const int64_t i1 = std::min(i0 + kDotPositions, hi);
          // the inputs of the chunk that every tap reaches in one pass (x's rows read once for all of
          // them), then each tap's own inputs before and after those
          const int64_t a = std::max(i0, both_lo), b = std::min(i1, both_hi);
          for (int64_t j = 0; j < count; ++j) {
            const int64_t k = reaching[j], own_a = std::max(i0, first[k]), own_b = std::min(i1, last[k]);
            if (a >= b) {
              if (own_a < own_b) add(j, 1, own_a, own_b);
              continue;
            }
            if (own_a < a) add(j, 1, own_a, a);
          }
          if (a < b) {
            for (int64_t j = 0; j < count; j += 4) add(j, std::min<int64_t>(4, count - j), a, b);
            for (int64_t j = 0; j < count; ++j) {
              const int64_t k = reaching[j], own_b = std::min(i1, last[k]);
              if (b < own_b) add(j, 1, b, own_b);
            }
          }
        }
      }
      for (int64_t k = k0; k < k1; ++k) {  // (taps that reach no input: zero)
        const int64_t j = std::find(reaching.begin(), reaching.end(), k) - reaching.begin();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            grad_w[((g * Cig + c0 + r) * Cog + o0 + c) * K + k] = j < count ? tiles[r * ld + j * cols + c] : 0.0f;
          }
        }
      }
    }
  });
}

// Input channels per block of grad_weight's GEMM form: each block of a task builds its own G^T
// (Cog*K*positions elements, g_transpose_cycles each), so fewer blocks cost less, while more tasks keep the
// threads busy: of the counts from one block per kWeightRowBlockMost channels (a 192 x 256 tile stays
// in L2) up to one per 24, the one that minimises (products + building) / the threads' busy share.
constexpr int64_t kWeightRowBlockMost = 192;
constexpr double kGTransposeCycles = 1;  // (an element of G^T built 16 rows at a time: grad_weight_by_gemm)
constexpr int64_t kRunsLeastTaps = 8;    // (G^T copied by rows, each output channel's taps a run of grad_y)
// An element of G^T's cost on 8-float vectors (CPUs of AVX2 only) where it is built column by column
// (filters shorter than kRunsLeastTaps): on a Zen 3 core each 16-row block's reads, from as many
// grad_y rows as its columns' channels, wait on L2 and L3 (perf on 5,128,64,4,2246,s2: the build
// 0.7-0.9x the products' samples, about 5 cycles an element); runs of a channel's taps copy at a
// cycle. Fitted on 42 layers timed in both forms (chosen/fastest 1.063 -> 1.023:
// docs/perf/2026-12-07-session105.md).
constexpr double kGTransposeColumnCycles8 = 5;
// The same where a dilated filter's runs are copied element by element (taps `dilation` apart in grad_y,
// no memcpy): perf on 1,521,93,10,3095,d4 had the build at a third of the products' samples, about 3.6
// cycles an element. Fitted on 8 dilated layers timed in both forms, checked on 24 fresh ones
// (docs/perf/2026-12-08-cpu-phase-sets.md).
constexpr double kGTransposeStridedCycles8 = 3;
double g_transpose_cycles(const ConvTParams& p) {
  if (avx2::wide_vectors()) return kGTransposeCycles;
  if (p.kernel_size < kRunsLeastTaps) return kGTransposeColumnCycles8;
  return p.dilation > 1 ? kGTransposeStridedCycles8 : kGTransposeCycles;
}
int64_t grad_weight_row_block(const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, R = p.out_channels_per_group * p.kernel_size;
  if (Cig < 6) return Cig;
  const double positions = double(p.batch) * p.length_in;
  const double products = double(Cig) * R * positions / 16;
  const std::vector<int64_t> columns = block_sizes(R, kWeightColumns), group_blocks(p.groups, 1);
  int64_t best = 0;
  double best_cost = 0;
  for (int64_t count = ceil_div(Cig, kWeightRowBlockMost); count <= ceil_div(Cig, 24); ++count) {
    const int64_t rows = round_up(ceil_div(Cig, count), 6);
    const int64_t blocks = ceil_div(Cig, rows);  // (rounding may leave fewer blocks than asked)
    const double cost = (products + double(R) * positions * blocks * g_transpose_cycles(p)) /
                        busy_share({columns, block_sizes(Cig, rows), group_blocks}, threads());
    if (best == 0 || cost < best_cost) best = rows, best_cost = cost;
  }
  return best;
}

// grad_weight as a GEMM over positions (short rows, where per-pair dot products would spend more on
// their horizontal sums than on the products): per group grad_w (Cig x Cog*K, w's layout) =
// sum over n and input positions i of x[n, ci, i] * G^T[i, (co, k)], G^T[i, (co, k)] = grad_y[n, co,
// i*stride + k*dilation - padding] (0 outside), built per task for its columns and a chunk of
// positions. Tasks of (group, block of input channels, block of columns (co, k)), each summing over the
// batch and the chunks in order (deterministic: the blocks and chunks depend on the problem only).
// G^T's zeros meet x: false where a value of grad_w is not finite (Inf or NaN in x may have made NaN of
// what the products that exist leave finite; the caller reruns the pass as dot products).
bool grad_weight_avx2_gemm(const float* grad_y, const float* x, float* grad_w, const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size, R = Cog * K;
  const int64_t column_blocks = ceil_div(R, kWeightColumns);
  const int64_t panel = avx2::panel_rows(Cig);
  const int64_t row_block = grad_weight_row_block(p);
  const int64_t row_blocks = ceil_div(Cig, row_block);
  constexpr int64_t kColumns = kWeightColumns, kChunk = 512;
  // x per group packed once: A(ci, (n, i)) = x[n, g*Cig + ci, i], panels of ci, steps (n, i)
  const int64_t positions = p.batch * p.length_in;
  const int64_t packed = avx2::packed_size(Cig, positions);
  const at::Tensor x_packed =
      at::empty({std::max<int64_t>(1, p.groups * packed)}, at::TensorOptions().dtype(at::kFloat));
  float* xp = x_packed.data_ptr<float>();
  std::vector<int64_t> along(p.length_in);
  for (int64_t i = 0; i < p.length_in; ++i) along[i] = i;
  Jobs jobs;
  pack_units(jobs, p.groups, Cig, p.batch, along, [&](int64_t g) { return x + g * Cig * p.length_in; }, p.length_in,
             p.in_channels * p.length_in, xp);
  jobs.run();
  const int64_t tasks = p.groups * row_blocks * column_blocks;
  std::atomic<bool> finite{true};
  parallel(tasks, double(p.batch) * p.in_channels * p.out_channels_per_group * p.kernel_size * p.length_in,
           [&](int64_t begin, int64_t end) {
    bool all_finite = true;
    const int64_t width = avx2::round_up_columns(kColumns, panel);
    std::vector<float> tile(row_block * width), sum(row_block * width), rows_t(kChunk * width);
    std::vector<const float*> column_src(kColumns);
    std::vector<int64_t> column_first(kColumns), column_last(kColumns);
    constexpr int64_t kRowBlock = 16;
    const int64_t zero_offset = 0;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t cb = task % column_blocks, rb = (task / column_blocks) % row_blocks;
      const int64_t g = task / (column_blocks * row_blocks);
      const int64_t c0 = cb * kColumns, cols = std::min(kColumns, R - c0);
      const int64_t row0 = rb * row_block, rows = std::min(row_block, Cig - row0);
      const int64_t padded = avx2::round_up_columns(cols, panel);
      bool first = true;
      for (int64_t q0 = 0; q0 < positions; q0 += kChunk) {
        const int64_t count = std::min(kChunk, positions - q0);
        // G^T for the chunk's positions (n, i), columns [c0, c0 + padded): column (co, k) is grad_y[n, co] at
        // i*stride + k*dilation - padding, 0 outside; by batch row
        for (int64_t t0 = 0; t0 < count;) {
          const int64_t n = (q0 + t0) / p.length_in, i0 = (q0 + t0) % p.length_in;
          const int64_t run = std::min(count - t0, p.length_in - i0);  // rows t0.. of batch row n, from i0
          const float* gy_rows = grad_y + (n * p.out_channels + g * Cog) * p.length_out;
          float* rows_n = rows_t.data() + t0 * width;
          // copied by rows (each output channel's K taps a run of grad_y) where runs are long, else by
          // columns (each read along a row of grad_y)
          if (K >= kRunsLeastTaps) {
            for (int64_t i = 0; i < run; ++i) {
              float* out = rows_n + i * width;
              const int64_t base = (i0 + i) * p.stride - p.padding;
              for (int64_t c = 0, co = c0 / K, k = c0 % K; c < cols; ++co, k = 0) {
                const int64_t span = std::min(K - k, cols - c), j0 = base + k * p.dilation;
                const float* src = gy_rows + co * p.length_out;
                if (p.dilation == 1 && j0 >= 0 && j0 + span <= p.length_out) {
                  std::memcpy(out + c, src + j0, span * sizeof(float));
                } else {
                  for (int64_t t = 0; t < span; ++t) {
                    const int64_t j = j0 + t * p.dilation;
                    out[c + t] = j >= 0 && j < p.length_out ? src[j] : 0.0f;
                  }
                }
                c += span;
              }
            }
          } else {
            // column c reads grad_y from src[c] at rows [first[c], last[c]) (zeros elsewhere); written 16
            // rows at a time (a block's rows, `width` floats apart, stay in L1 across its columns: a whole
            // column's rows would fall in a few cache sets and be evicted before the next column's writes)
            for (int64_t c = 0, co = c0 / K, k = c0 % K; c < cols; ++c) {
              const int64_t offset = i0 * p.stride + k * p.dilation - p.padding;  // of position i0 (+ i*stride)
              column_src[c] = gy_rows + co * p.length_out + offset;
              column_first[c] = std::clamp<int64_t>(ceil_div(-offset, p.stride), 0, run);
              column_last[c] = std::clamp<int64_t>(ceil_div(p.length_out - offset, p.stride), column_first[c], run);
              if (++k == K) k = 0, ++co;
            }
            for (int64_t b0 = 0; b0 < run; b0 += kRowBlock) {
              const int64_t b1 = std::min(run, b0 + kRowBlock);
              for (int64_t c = 0; c < cols; ++c) {
                const float* src = column_src[c];
                const int64_t ia = std::clamp(column_first[c], b0, b1), ib = std::clamp(column_last[c], ia, b1);
                float* dst = rows_n + c;
                for (int64_t i = b0; i < ia; ++i) dst[i * width] = 0.0f;
                for (int64_t i = ia; i < ib; ++i) dst[i * width] = src[i * p.stride];
                for (int64_t i = ib; i < b1; ++i) dst[i * width] = 0.0f;
              }
            }
          }
          for (int64_t i = 0; i < run; ++i) std::fill(rows_n + i * width + cols, rows_n + i * width + padded, 0.0f);
          t0 += run;
        }
        // each chunk's sums apart, then added in order: no chain of more than kChunk roundings
        const avx2::Operand b{rows_t.data(), width, 1, &zero_offset};
        avx2::gemm(rows, cols, count, xp + g * packed + row0 * positions + q0 * panel, panel, panel * positions, b, 0,
                   first ? sum.data() : tile.data(), width, false);
        if (!first) {
          for (int64_t r = 0; r < rows; ++r) {
            float* to = sum.data() + r * width;
            const float* from = tile.data() + r * width;
            for (int64_t c = 0; c < cols; ++c) to[c] += from[c];
          }
        }
        first = false;
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* out = grad_w + (g * Cig + row0 + r) * R + c0;
        if (first) {
          std::fill(out, out + cols, 0.0f);
        } else {
          all_finite &= avx2::write_row(sum.data() + r * width, cols, 0.0f, out, 1);
        }
      }
    }
    if (!all_finite) finite = false;
  });
  return finite;
}

// The 3 x 4 blocks of the dot products form (grad_weight_avx2), each closed by a horizontal sum:
// per task's taps, batch row and chunk of kDotPositions inputs, one block a 3 x 4 of every
// dot_columns call: the inputs all the task's taps reach, 4 taps a call, then each tap's own inputs
// before and after those (a call each); where the taps reach no inputs in common (a long filter on a
// short input), each tap's own in every chunk it reaches. Counted call by call as the kernel makes
// them, with the chunks that hold no range end counted together.
double dot_sum_blocks(const ConvTParams& p) {
  const int64_t Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const TapInputs inputs = tap_inputs(p);
  const int64_t taps_per_task = dot_taps_per_task(p);
  // 3-row blocks over a task set's input blocks; 4-column blocks of a call over `taps` taps, over its output blocks
  const double row_blocks = double(Cig / kDotInBlock) * (kDotInBlock / 3) + ceil_div(Cig % kDotInBlock, 3);
  auto column_blocks = [&](int64_t taps) {
    return double(Cog / kDotOutBlock) * ceil_div(kDotOutBlock * taps, 4) + ceil_div((Cog % kDotOutBlock) * taps, 4);
  };
  double blocks = 0;
  std::vector<int64_t> reaching;
  for (int64_t k0 = 0; k0 < K; k0 += taps_per_task) {
    const TapBlockInputs block = tap_block_inputs(inputs, k0, std::min(K, k0 + taps_per_task), p.length_in, reaching);
    const int64_t lo = block.lo, hi = block.hi, both_lo = block.both_lo, both_hi = block.both_hi;  // (lambdas use them)
    const int64_t count = static_cast<int64_t>(reaching.size());
    if (count == 0) continue;
    const auto chunk_of = [&](int64_t i) { return (i - lo) / kDotPositions; };
    const auto chunks_over = [&](int64_t a, int64_t b) { return a < b ? double(chunk_of(b - 1) - chunk_of(a) + 1) : 0.0; };
    const bool common = both_lo < both_hi;
    if (common) {
      double common_calls = 0;
      for (int64_t j = 0; j < count; j += 4) common_calls += column_blocks(std::min<int64_t>(4, count - j));
      blocks += chunks_over(both_lo, both_hi) * common_calls;
    }
    // the chunks the common inputs span: [c_lo, c_hi] (none: every chunk takes each tap's own call)
    const int64_t c_lo = common ? chunk_of(both_lo) : hi, c_hi = common ? chunk_of(both_hi - 1) : -1;
    const int64_t span_lo = lo + c_lo * kDotPositions, span_hi = lo + (c_hi + 1) * kDotPositions;
    for (const int64_t k : reaching) {
      const int64_t first = inputs.first[k], last = inputs.last[k];
      double calls = common ? chunks_over(first, std::min(last, span_lo)) + chunks_over(std::max(first, span_hi), last)
                            : chunks_over(first, last);
      if (common && first < both_lo && span_lo < both_lo) calls += 1;  // own inputs before the common ones
      if (common && last > both_hi && std::min(span_hi, hi) > both_hi) calls += 1;  // and after them
      blocks += calls * column_blocks(1);
    }
  }
  return blocks * row_blocks * p.groups * p.batch;
}

// Which grad_weight form costs less, in cycles (multiply-adds 16 a cycle): the dot products make
// Cig*Cog*K*N*L_in of them and pay a horizontal sum per 3 x 4 block of each call (dot_sum_blocks;
// about 120 cycles with the call's share of setting up its columns); the GEMM makes its products as
// its tiles run them (rows in 6-row panels, each block of kWeightColumns columns (co, k) rounded up
// to the micro-kernel's column step: a few channels a group pad them many times over) at the same
// pace, packs x once (a cycle an element: as much as its products where the columns are few, a
// narrow output's), and builds those columns of G^T once per block of input channels
// (g_transpose_cycles an element), counted at the fewest blocks (kWeightRowBlockMost channels each:
// the count grad_weight_row_block takes depends on the threads, and the form, whose order of
// summation is its own, must not). Fitted on a Zen 5 core (CPU v50-v51: two fresh draws of 40
// layers, every form timed, docs/perf/2026-12-07-cpu-grad-weight-zen5.md).
bool grad_weight_by_gemm(const ConvTParams& p) {
  const double Cig = p.in_channels_per_group, Cog = p.out_channels_per_group, K = p.kernel_size;
  const double positions = double(p.batch) * p.length_in, groups = double(p.groups);  // (dot_sum_blocks: every group's)
  const double products = groups * Cig * Cog * K * positions / 16;
  const double sums = dot_sum_blocks(p) * 120;
  const int64_t panel = avx2::panel_rows(p.in_channels_per_group);
  double columns = 0;  // (the GEMM's, padded)
  for (const int64_t block : block_sizes(p.out_channels_per_group * p.kernel_size, kWeightColumns))
    columns += double(avx2::round_up_columns(block, panel));
  const double rows = panel < 6 ? Cig : std::ceil(Cig / 6) * 6;
  const double gemm_products = groups * rows * columns * positions / 16;
  const double build = g_transpose_cycles(p) * groups * columns * positions * std::ceil(Cig / kWeightRowBlockMost);
  const double pack = groups * Cig * positions;
  return pack + build + gemm_products < products + sums;
}

// ---- direct form (few channels per group) ----------------------------------------------------

template <typename scalar_t>
void forward_direct(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& y,
                    const ConvTParams& p) {
  const scalar_t* x_data = x.data_ptr<scalar_t>();
  const scalar_t* w_data = w.data_ptr<scalar_t>();
  const scalar_t* bias_data = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
  scalar_t* y_data = y.data_ptr<scalar_t>();
  // one task per output row (n, co): deterministic, no shared writes
  at::parallel_for(0, p.batch * p.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.out_channels, co = row % p.out_channels;
      const int64_t g = co / p.out_channels_per_group, co_in_group = co % p.out_channels_per_group;
      scalar_t* out = y_data + row * p.length_out;
      std::fill(out, out + p.length_out, bias_data ? bias_data[co] : scalar_t(0));
      for (int64_t ci = g * p.in_channels_per_group; ci < (g + 1) * p.in_channels_per_group; ++ci) {
        const scalar_t* in = x_data + (n * p.in_channels + ci) * p.length_in;
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const scalar_t weight = w_data[(ci * p.out_channels_per_group + co_in_group) * p.kernel_size + k];
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
          scalar_t* out_phase = out + tap.phase;
          for (int64_t m = r.begin; m < r.end; ++m) out_phase[m * p.stride] += weight * in[m - tap.shift];
        }
      }
    }
  });
}

// The tap rows: the forward of few channels a group (depthwise, a multiplier of 2) in float32 on AVX2,
// each output row's phases as rows of taps (avx2::taps_row) over its group's input rows, each copied
// once with zeros around it, then the bias added and the phases interleaved (avx2::interleave_row). An
// output then stays in a register for all its taps, where forward_direct's loops pass over the whole
// row once a tap (and at a stride store one element at a time). The zeros' products with the weight
// exist here: false where an output is not finite (the caller then runs the direct loops, so
// Inf and NaN land where the products that exist put them).
bool forward_tap_rows(const float* x, const float* w, const float* bias, float* y, const ConvTParams& p) {
  const int64_t K = p.kernel_size, stride = p.stride, Cig = p.in_channels_per_group, Cog = p.out_channels_per_group;
  // the phases that have outputs, each with its taps k in order
  const int64_t phases = std::min(stride, p.length_out);
  std::vector<std::vector<int64_t>> phase_taps(static_cast<size_t>(phases));
  std::vector<int64_t> shifts(static_cast<size_t>(K));
  int64_t most_shift = 0, least_shift = 0;
  for (int64_t k = 0; k < K; ++k) {
    const Tap tap = tap_of(k, stride, p.padding, p.dilation);
    if (tap.phase >= phases) continue;
    phase_taps[static_cast<size_t>(tap.phase)].push_back(k);
    shifts[static_cast<size_t>(k)] = tap.shift;
    most_shift = std::max(most_shift, tap.shift), least_shift = std::min(least_shift, tap.shift);
  }
  // an input row at [lead, lead + L_in) of zeros: output m of a phase reads input m - shift at
  // lead - shift + m, inside [0, padded) for every m < longest
  const int64_t longest = phase_length(0, p.length_out, stride), lead = most_shift;
  const int64_t padded = std::max(lead + p.length_in, lead - least_shift + longest);
  std::atomic<bool> finite{true};
  // one task a (batch row, group): its input rows copied once for all its output rows
  at::parallel_for(0, p.batch * p.groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(static_cast<size_t>(Cig * padded)), sums(static_cast<size_t>(stride > 1 ? phases * longest : 0));
    std::vector<float> weights(static_cast<size_t>(K));
    std::vector<int64_t> offsets(static_cast<size_t>(K));
    bool all_finite = true;
    // output channel co's phase over the group's rows into sum
    auto output_phase = [&](int64_t g, int64_t co_in_group, int64_t phase, float* sum) {
      const int64_t count = phase_length(phase, p.length_out, stride);
      const std::vector<int64_t>& ks = phase_taps[static_cast<size_t>(phase)];
      const int64_t taps = static_cast<int64_t>(ks.size());
      for (int64_t c = 0; c < Cig; ++c) {
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t k = ks[static_cast<size_t>(t)];
          weights[static_cast<size_t>(t)] = w[((g * Cig + c) * Cog + co_in_group) * K + k];
          offsets[static_cast<size_t>(t)] = lead - shifts[static_cast<size_t>(k)];
        }
        avx2::taps_row(count, taps, weights.data(), offsets.data(), rows.data() + c * padded, sum, c > 0);
      }
    };
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / p.groups, g = item % p.groups;
      for (int64_t c = 0; c < Cig; ++c) {
        float* padded_row = rows.data() + c * padded;
        std::fill(padded_row, padded_row + padded, 0.0f);
        std::memcpy(padded_row + lead, x + (n * p.in_channels + g * Cig + c) * p.length_in, p.length_in * sizeof(float));
      }
      for (int64_t co_in_group = 0; co_in_group < Cog; ++co_in_group) {
        const int64_t co = g * Cog + co_in_group;
        float* out = y + (n * p.out_channels + co) * p.length_out;
        const float add = bias ? bias[co] : 0.0f;
        if (stride == 1) {  // (the row itself, the bias added in place)
          output_phase(g, co_in_group, 0, out);
          all_finite &= avx2::write_row(out, p.length_out, add, out, 1);
          continue;
        }
        for (int64_t phase = 0; phase < phases; ++phase) output_phase(g, co_in_group, phase, sums.data() + phase * longest);
        all_finite &= avx2::interleave_row(sums.data(), longest, stride, p.length_out, add, out);
      }
    }
    if (!all_finite) finite = false;
  });
  return finite;
}

template <typename scalar_t>
void grad_input_direct(const at::Tensor& grad_y, const at::Tensor& w, const ConvTParams& p, const at::Tensor& grad_x) {
  const scalar_t* grad_y_data = grad_y.data_ptr<scalar_t>();
  const scalar_t* w_data = w.data_ptr<scalar_t>();
  scalar_t* grad_x_data = grad_x.data_ptr<scalar_t>();
  // one task per input row (n, ci)
  at::parallel_for(0, p.batch * p.in_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.in_channels, ci = row % p.in_channels;
      const int64_t g = ci / p.in_channels_per_group;
      scalar_t* out = grad_x_data + row * p.length_in;
      std::fill(out, out + p.length_in, scalar_t(0));
      for (int64_t co_in_group = 0; co_in_group < p.out_channels_per_group; ++co_in_group) {
        const int64_t co = g * p.out_channels_per_group + co_in_group;
        const scalar_t* in = grad_y_data + (n * p.out_channels + co) * p.length_out;
        for (int64_t k = 0; k < p.kernel_size; ++k) {
          const scalar_t weight = w_data[(ci * p.out_channels_per_group + co_in_group) * p.kernel_size + k];
          const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
          const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
          const scalar_t* in_phase = in + tap.phase;
          for (int64_t m = r.begin; m < r.end; ++m) out[m - tap.shift] += weight * in_phase[m * p.stride];
        }
      }
    }
  });
}

template <typename scalar_t>
void grad_weight_direct(const at::Tensor& grad_y, const at::Tensor& x, const ConvTParams& p, const at::Tensor& grad_w) {
  const scalar_t* grad_y_data = grad_y.data_ptr<scalar_t>();
  const scalar_t* x_data = x.data_ptr<scalar_t>();
  scalar_t* grad_w_data = grad_w.data_ptr<scalar_t>();
  // one task per weight element (ci, co_in_group, k): a dot product over batch and length
  at::parallel_for(0, grad_w.numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      const auto [ci, co_in_group, k, co] = weight_element(index, p);
      const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
      const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
      scalar_t sum = 0;
      for (int64_t n = 0; n < p.batch; ++n) {
        const scalar_t* in = x_data + (n * p.in_channels + ci) * p.length_in;
        const scalar_t* out_phase = grad_y_data + (n * p.out_channels + co) * p.length_out + tap.phase;
        for (int64_t m = r.begin; m < r.end; ++m) sum += in[m - tap.shift] * out_phase[m * p.stride];
      }
      grad_w_data[index] = sum;
    }
  });
}

// ---- plans -----------------------------------------------------------------------------------------
// Each pass's form is chosen here, from the problem alone (docs/design.md §6.3):
//  - float32 where the CPU has AVX2 and FMA: the AVX2 forms. Forward: the weight packed, streamed (Z^T,
//    then col2im) or scattered (Z, then col2im), by forward_avx2_form; grad_input: packed weight on grad_y's phases;
//    grad_weight: dot products or a GEMM over positions, by grad_weight_by_gemm.
//  - otherwise (float64; float32 on other CPUs), and where an AVX2 pass hands back: direct loops for
//    few channels per group, else BLAS GEMMs, one per tap (taps) or one over every tap (unrolled).

struct Plans {
  Form forward, grad_input, grad_weight;
  bool padded_copy = false;  // forward kPacked: x from one padded copy rather than in place (forward_avx2)
  int vector_bits = 0;        // the AVX2 forms' vector width where they run (float32 on an AVX2 CPU), else 0
};

Form blas_form(const ConvTParams& p) {
  if (p.in_channels_per_group * p.out_channels_per_group <= 64) return Form::kDirect;  // GEMMs of tiny matrices
  // more than 4 taps per phase: one GEMM over every tap, rather than a pass over the tile per tap
  return ceil_div(p.kernel_size, p.stride) > 4 ? Form::kUnrolled : Form::kTaps;
}

// Test and A/B hook: CONVT_CPU_FORMS, a comma-separated list of `pass=form` (passes forward, grad_input,
// grad_weight) and `portable`, read at every call. `pass=form` overrides the planner for that pass where
// the form applies (the AVX2 forms: float32 on an AVX2 CPU): direct, taps, unrolled, folded (forward),
// packed, packed_copy (forward), streamed and scatter (forward), dot and positions (grad_weight);
// forward=avx2 is the planner's choice among the AVX2 forward forms (not folded). `portable`
// plans as on a CPU without AVX2 and FMA, so that an AVX2 machine tests the forms every CPU runs.
// Unknown names are errors (a misspelt override would otherwise test the planner's choice again).
struct Override {
  bool portable = false;
  std::string forward, grad_input, grad_weight;
};

Override read_override() {
  Override out;
  const char* value = std::getenv("CONVT_CPU_FORMS");
  if (value == nullptr) return out;
  const std::string spec(value);
  for (size_t begin = 0; begin <= spec.size();) {
    const size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string item = spec.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) continue;
    if (item == "portable") {
      out.portable = true;
      continue;
    }
    const size_t equals = item.find('=');
    const std::string pass = item.substr(0, equals), form = equals == std::string::npos ? "" : item.substr(equals + 1);
    std::string* slot = pass == "forward" ? &out.forward : pass == "grad_input" ? &out.grad_input
                      : pass == "grad_weight" ? &out.grad_weight : nullptr;
    TORCH_CHECK(slot != nullptr && !form.empty(), "CONVT_CPU_FORMS: '", item,
                "' is not portable or pass=form with pass forward, grad_input or grad_weight");
    *slot = form;
  }
  return out;
}

// The form `name` for a pass, where it applies, else `form` unchanged.
Form overridden(Form form, const std::string& name, bool avx2_float, bool is_forward, bool is_weight, bool& padded_copy) {
  if (name.empty()) return form;
  if (name == "direct") return Form::kDirect;
  if (name == "taps") return Form::kTaps;
  if (name == "unrolled") return Form::kUnrolled;
  if (name == "folded" && is_forward) return Form::kFolded;
  const bool known = name == "packed" ||
                     (is_forward && (name == "packed_copy" || name == "streamed" || name == "scatter" || name == "tap_rows")) ||
                     (is_weight && (name == "dot" || name == "positions"));
  TORCH_CHECK(known, "CONVT_CPU_FORMS: no form '", name, "' for this pass");
  if (!avx2_float) return form;
  if (name == "packed" || name == "packed_copy") {
    padded_copy = is_forward && name == "packed_copy";
    return Form::kPacked;
  }
  if (name == "streamed") return Form::kStreamed;
  if (name == "scatter") return Form::kScatter;
  if (name == "tap_rows") return Form::kTapRows;
  return name == "dot" ? Form::kDot : Form::kPositions;
}

// Whether at::mm outruns the 16-float micro-kernel on wide layers: MKL (the x86 builds' BLAS) on an
// Intel CPU, whose AVX-512 kernels it runs; not on an AMD one (Zen 4: forward_folded_applies).
// CONVT_CPU_FAST_BLAS=0|1 sets it (read once a process: tests plan both on one machine).
bool fast_blas() {
  static const bool yes = [] {
    const char* value = std::getenv("CONVT_CPU_FAST_BLAS");
    if (value != nullptr && *value != '\0') {
      TORCH_CHECK(std::strcmp(value, "0") == 0 || std::strcmp(value, "1") == 0, "CONVT_CPU_FAST_BLAS must be 0 or 1; got '",
                  value, "'");
      return value[0] == '1';
    }
#if defined(__x86_64__) || defined(__i386__)
    return bool(__builtin_cpu_is("intel"));
#else
    return false;
#endif
  }();
  return yes;
}

// Wide layers: every per-tap GEMM large (C_in/g >= 256 and C_out/g >= 128, at most 4 taps a phase).
bool wide_layer(const ConvTParams& p) {
  return p.in_channels_per_group >= 256 && p.out_channels_per_group >= 128 && blas_form(p) == Form::kTaps;
}

// The forward with the batch folded into one at::mm (forward_folded), where at::mm runs nearer the
// CPU's peak than the micro-kernel does: wide layers (C_in/g >= 384, C_out/g >= 64) of at most
// 7 taps (kFoldedRule) whose Z rows of one batch element fit kFoldedBuffer, on CPUs of 8-float vectors
// (AVX2 only): from C_in/g 384 it ran 0.92x the AVX2 forms' time on a Zen 1 core (fresh draws), at
// 256-383 mixed, 0.8-1.3x (docs/perf/2026-12-01-cpu-folded-avx2.md); filters of 8 taps or more (Z holds
// every tap's rows) 1.2-1.7x slower (docs/perf/2026-12-01-cpu-folded-taps.md). Not on 16-float vectors
// (AVX-512) of an AMD CPU, where the micro-kernel runs them too: on a Zen 4 core the folded form took
// 1.19x and 1.13x the AVX2 forms' time (geomean) on 46 and 30 fresh sweep layers it took (1.33x and
// 1.20x below C_in/g 1024, 1.06x and 1.03x from it), 27 and 19 of them below 0.9x oneDNN against 8
// and 10 (docs/perf/2026-12-04-cpu-folded-zen4.md). (The rule from 256 channels came from a Xeon,
// docs/perf/2026-11-30-cpu-folded-forward.md; on Zen 4 in CPU v32 short filters ran folded 0.94-1.18x
// the AVX2 forms' time, docs/perf/2026-12-01-cpu-folded-taps.md.)
// On 16-float vectors where at::mm is MKL on an Intel CPU (fast_blas), where MKL's AVX-512 sgemm ran
// 330 GFLOP/s on two cores against the micro-kernel's 200-250, wider: from 256 input channels a group,
// up to 12 taps, from 128 columns (kFastBlasFoldedRule). On a 2-core Xeon the folded form took 0.83x
// the AVX-512 forms' time on 30 fresh layers of the 8-float rule (0.73-0.93x, every one faster; below
// 0.9x torch 15 -> 0), and on 30 fresh layers that only the wider rule takes 0.89x (25 faster, 5 of
// 139-204 columns 1.03-1.09x slower; below 0.9x torch 9 -> 1); filters of 16 taps or more mostly
// slower (1.2-1.7x on short rows of 768-1536 channels), narrow outputs, narrow inputs and groups of
// few channels up to 4x and more (docs/perf/2026-12-05-cpu-folded-intel.md).
struct FoldedRule {
  int64_t least_inputs, most_taps, least_columns;  // C_in/g, K, N * L_in
};
constexpr FoldedRule kFoldedRule{384, 7, 256}, kFastBlasFoldedRule{256, 12, 128};
bool forward_folded_applies(const ConvTParams& p) {
  const bool narrow_vectors = !avx2::wide_vectors();
  if (!narrow_vectors && !fast_blas()) return false;
  const FoldedRule& rule = narrow_vectors ? kFoldedRule : kFastBlasFoldedRule;
  return p.in_channels_per_group >= rule.least_inputs && p.out_channels_per_group >= 64 && p.kernel_size <= rule.most_taps &&
         p.batch * p.length_in >= rule.least_columns && p.out_channels_per_group * p.kernel_size * p.length_in <= kFoldedBuffer;
}

// Where at::mm is MKL on an Intel CPU (fast_blas), narrow outputs (at most kNarrowUnrolledOutputs
// channels a group, from at least 64 input channels a group) that forward_avx2_form gives to the
// scatter form run as the BLAS unrolled form on up to kNarrowUnrolledPositions positions (N x L_in):
// both form Z = W^T x and col2im it, but Z's (C_out/g x K) rows are few, and the micro-kernel's panel
// rounds them up, where at::mm's small-M kernels do not. The position bound: past it, at batch 2 and
// more, the unrolled form (an at::mm a tile of 1,024 columns) ran slower than the scatter form
// (CPU v45, docs/perf/2026-12-05-cpu-narrow-unrolled.md).
constexpr int64_t kNarrowUnrolledOutputs = 4, kNarrowUnrolledPositions = 131072;
bool narrow_output_unrolled(const ConvTParams& p) {
  return fast_blas() && p.out_channels_per_group <= kNarrowUnrolledOutputs && p.in_channels_per_group >= 64 &&
         p.batch * p.length_in <= kNarrowUnrolledPositions;
}

// The forward's AVX2-path form past the folded rule: forward_avx2_form, narrow_output_unrolled's layers
// taken off its scatter form
Form forward_avx2_or_unrolled(const ConvTParams& p) {
  const Form form = forward_avx2_form(p);
  return form == Form::kScatter && narrow_output_unrolled(p) ? Form::kUnrolled : form;
}

// Where at::mm is MKL on an Intel CPU (fast_blas), filters shorter than kRunsLeastTaps that reach
// every phase (K >= stride, K >= 2) and that grad_weight_by_gemm gives to the positions form (G^T
// built column by column, a read of grad_y a column) take the taps form, except groups of fewer than
// 64 input channels, where it runs a tiny GEMM a group and tap (CPU v43: 0.72x the time on 30 fresh
// sweep layers, 0.40-1.08x; groups of 16-48 channels ran 1.3-2.6x slower on it; at K < stride,
// where K = 1 or 2 GEMMs sum a few positions each, the positions form stayed faster on most:
// docs/perf/2026-12-05-cpu-grad-weight-short-taps.md). kShortFilterTapsLeastChannels: the group size
// that splits these layers between the taps form and grouped_short_filter_unrolled.
constexpr int64_t kShortFilterTapsLeastChannels = 64;
bool short_filter_blas_taps(const ConvTParams& p, bool by_gemm) {
  return by_gemm && fast_blas() && p.kernel_size >= 2 && p.kernel_size >= p.stride && p.kernel_size < kRunsLeastTaps &&
         (p.groups == 1 || p.in_channels_per_group >= kShortFilterTapsLeastChannels);
}

// ... and groups of fewer than 64 input channels there, on rows of at least kGroupedUnrolledLeastRow
// inputs, take the BLAS unrolled form (one at::mm a group over an im2col of grad_y) in place of the
// positions form (CPU v44: its column-by-column G^T ran 1.7-2.8x the unrolled form's time on every
// such layer of 50-135 inputs in a fresh draw; on rows of 32-48 the two were within 0.9-1.55x:
// docs/perf/2026-12-05-cpu-grad-weight-short-taps.md).
constexpr int64_t kGroupedUnrolledLeastRow = 50;
bool grouped_short_filter_unrolled(const ConvTParams& p) {
  return fast_blas() && p.groups > 1 && p.in_channels_per_group < kShortFilterTapsLeastChannels && p.kernel_size < kRunsLeastTaps &&
         p.length_in >= kGroupedUnrolledLeastRow;
}

// Whether grad_weight runs faster as the BLAS taps form than as the AVX2 forms: on wide layers where the
// per-tap GEMMs are also long (at least 192 positions a tap, over the batch), at::mm's packed, blocked
// GEMM outruns the micro-kernel. On 16-float vectors only where at::mm is MKL on an Intel CPU
// (fast_blas; elsewhere it runs 8-float vectors: on a Zen 5 core at half the positions form's pace
// once that form built G^T 16 rows at a time, CPU v50, docs/perf/2026-12-07-cpu-grad-weight-zen5.md):
// there from 64 channels a group in and out on rows of at least 64
// inputs, whatever the batch and the taps a phase (each tap is a GEMM of its own; a call sums one
// row's positions, too few below that) (docs/perf/2026-11-30-cpu-grad-weight-taps.md). Except, on
// 16-float vectors, filters of kRunsLeastTaps taps or more that grad_weight_by_gemm gives to the
// GEMM over positions: from that many taps it builds G^T by runs of grad_y, and reads x once for
// every tap's columns (co, k), where the taps form runs a GEMM a tap, each re-reading x's window and
// zeroing, reading and writing its tap's (C_in/g x C_out/g) block, then transposes every input
// channel's (K x C_out/g) block into w's layout. On a Zen 4 core the taps form took 1.33x and 1.30x
// the positions form's time (geomean) on 20 and 23 fresh sweep layers of 8 taps or more (CPU v36,
// before that transpose); at 7 taps (G^T built column by column) 0.92x (10 layers); where the model
// picks the dot products, those were no faster than the taps form (docs/perf/2026-12-04-cpu-zen4-rules.md);
// shorter filters on an Intel CPU: short_filter_blas_taps. (by_gemm: grad_weight_by_gemm(p))
bool grad_weight_by_blas_taps(const ConvTParams& p, bool by_gemm) {
  const bool wide_rows = p.batch * p.length_in >= 192 && wide_layer(p);
  if (!avx2::wide_vectors()) return wide_rows;
  if (!fast_blas()) return false;
  if (p.kernel_size >= kRunsLeastTaps && by_gemm) return false;
  if (short_filter_blas_taps(p, by_gemm)) return true;
  return wide_rows || (p.in_channels_per_group >= 64 && p.out_channels_per_group >= 64 && p.length_in >= 64);
}

// grad_weight's AVX2-path form: the rules above in order, grad_weight_by_gemm's model weighed once
// (plan runs at every call).
Form grad_weight_avx2_form(const ConvTParams& p) {
  const bool by_gemm = grad_weight_by_gemm(p);
  if (grad_weight_by_blas_taps(p, by_gemm)) return Form::kTaps;
  if (!by_gemm) return Form::kDot;
  return grouped_short_filter_unrolled(p) ? Form::kUnrolled : Form::kPositions;
}

// grad_input of wide layers on few positions (N * L_in <= 128): the BLAS unrolled form, one at::mm over
// every (output channel, tap) step, whose im2col of grad_y is then small; the packed form's tiles are
// then one narrow block of positions, re-read for every block of input channels. Elsewhere the packed
// form (it outran the BLAS taps form, its per-tap GEMMs each a pass over the tile, on every wide layer
// of the CPU sweep's seeds 29-36), and on an AVX-512 CPU at batch 1 (one block of positions then, its
// 16-float micro-kernel 1.2-1.4x faster than the unrolled form's at::mm there). On an AVX-512 CPU, short
// rows (at most 128 inputs) of 6 or more (batch, group) items at most 4 taps a phase take the BLAS taps
// form: a tile a row, one at::mm a tap, 1.2-2.2x faster than the packed form's single narrow block
// of positions a row there (docs/perf/2026-11-30-cpu-grad-weight-taps.md); at more than 4 taps a phase
// rows of at most kUnrolledShortRow inputs take the unrolled form (one at::mm over every tap): 0.37-
// 0.61x the packed form's time on five such layers, as fast on a sixth (docs/perf/2026-11-30-cpu-folded-forward.md).
// Short rows of long filters (kLongFilter taps or more on at most kUnrolledShortRow inputs) take the
// packed form at any batch, its B rows read in place at each tap's shift (CPU v30), where the batch
// rules below would give them a GEMM a tap or one at::mm over an im2col of grad_y. On a Zen 4 core,
// training steps 0.89x the time with the unrolled form there (47 layers of 16-128 taps, two runs; 1.06-
// 1.11x on two of 115-128 taps at batch 2) (CPU v40, replacing v29's unrolled form, which a Xeon
// measured before v30: docs/perf/2026-12-04-cpu-v38.md).
// On an AVX-512 CPU, longer rows of 6 or more items take the BLAS taps form too where each tap's GEMM
// reduces over at least kTapsLeastOutputs output channels and its weight block holds at least
// kTapsLeastWeights elements: at::mm's blocked GEMM then outruns the micro-kernel, and the taps form
// reads grad_y's phases in place, one at::mm a tap, where the packed form packs grad_y's (C_out/g x
// taps) rows for every block of input channels. Narrow outputs (a reduction of a few channels),
// smaller blocks (the micro-kernel's packed tiles) and fewer items keep the packed form (CPU v41,
// docs/perf/2026-12-05-cpu-v41.md).
constexpr int64_t kTapsLeastOutputs = 16, kTapsLeastWeights = 8192;
constexpr int64_t kUnrolledShortRow = 64, kLongFilter = 16;
Form grad_input_avx2_form(const ConvTParams& p) {
  if (avx2::wide_vectors() && p.length_in <= kUnrolledShortRow && p.kernel_size >= kLongFilter) return Form::kPacked;
  // (blas_form: at most 4 taps a phase, and no tiny matrices)
  if (avx2::wide_vectors() && p.batch * p.groups >= 6) {
    const Form blas = blas_form(p);
    const bool wide_blocks = p.out_channels_per_group >= kTapsLeastOutputs &&
                             p.in_channels_per_group * p.out_channels_per_group >= kTapsLeastWeights;
    if (blas == Form::kTaps && (p.length_in <= 128 || wide_blocks)) return Form::kTaps;
    if (blas == Form::kUnrolled && p.length_in <= kUnrolledShortRow) return Form::kUnrolled;
  }
  const bool few_positions = p.batch * p.length_in <= 128 && !(avx2::wide_vectors() && p.batch == 1);
  return wide_layer(p) && few_positions ? Form::kUnrolled : Form::kPacked;
}

constexpr int64_t kDirectGradWeightMostInputs = 256;  // (plan: one or two channels a group)

// The forward's tap rows where they outrun the direct loops (plan: one or two channels a group): at
// stride 1 or 2, at kTapRowsLeastPhaseTaps taps a phase (K / stride) or more, and at strides up to
// kTapRowsMostStride (phases interleaved by whole vectors) on rows of kTapRowsLeastInputs inputs or
// more; elsewhere the loops' pass over a phase a tap costs less than the rows' fixed costs a row (the
// copy, a call a phase) or their interleave one value at a time (strides 3-8 below 3 taps a phase:
// 0.44-1.0x the loops' time on 7 rows of 334-5000 inputs, 1.0-2.0x on 5 rows of 32-166;
// docs/perf/2026-12-07-cpu-tap-rows.md).
constexpr int64_t kTapRowsLeastPhaseTaps = 3, kTapRowsMostStride = 8, kTapRowsLeastInputs = 256;
bool tap_rows_pay(const ConvTParams& p) {
  return p.stride <= 2 || p.kernel_size >= kTapRowsLeastPhaseTaps * p.stride ||
         (p.stride <= kTapRowsMostStride && p.length_in >= kTapRowsLeastInputs);
}

Plans plan(const ConvTParams& p, at::ScalarType dtype) {
  const Override override = read_override();
  const bool avx2_float = dtype == at::kFloat && avx2::available() && !override.portable;
  Plans plans{blas_form(p), blas_form(p), blas_form(p)};
  if (avx2_float) {
    plans.vector_bits = avx2::wide_vectors() ? 512 : 256;
    // At one or two channels a group (C_in/g x C_out/g <= 2: depthwise, a multiplier of 2 or two
    // inputs a group) the micro-kernels' reduction, C_in/g x taps a phase, is too short to pay for
    // their tiles, and the direct forms, vectorized along the row, do less work: the forward's tap rows
    // where they pay (tap_rows_pay: at stride 1-2 0.17-0.92x the packed form's time and 0.33-0.58x the
    // loops' on 7 layers) or else its loops, grad_input's loops (0.48-0.79x the packed form's
    // time on six) and grad_weight's on rows of at most kDirectGradWeightMostInputs inputs (0.15x and
    // 0.46x the dot form's on rows of 32 and 200; on rows of 1000-20000 the dot form's per-row costs are
    // spread thin: 1.1-2x faster than direct).
    const bool one_channel_pairs = p.in_channels_per_group * p.out_channels_per_group <= 2;
    const Form direct_forward = tap_rows_pay(p) ? Form::kTapRows : Form::kDirect;
    plans.forward = one_channel_pairs ? direct_forward : forward_folded_applies(p) ? Form::kFolded : forward_avx2_or_unrolled(p);
    plans.grad_input = one_channel_pairs ? Form::kDirect : grad_input_avx2_form(p);
    plans.grad_weight = one_channel_pairs && p.length_in <= kDirectGradWeightMostInputs ? Form::kDirect
                                                                                        : grad_weight_avx2_form(p);
  }
  bool unused = false;
  if (override.forward == "avx2") {  // (the AVX2 forms' own choice, folded aside: an A/B of forward_folded_applies)
    if (avx2_float && plans.forward == Form::kFolded) plans.forward = forward_avx2_form(p);
  } else {
    plans.forward = overridden(plans.forward, override.forward, avx2_float, true, false, plans.padded_copy);
  }
  plans.grad_input = overridden(plans.grad_input, override.grad_input, avx2_float, false, false, unused);
  plans.grad_weight = overridden(plans.grad_weight, override.grad_weight, avx2_float, false, true, unused);
  return plans;
}

// A form's CONVT_CPU_FORMS name.
const char* form_name(Form form, bool padded_copy) {
  switch (form) {
    case Form::kDirect: return "direct";
    case Form::kTaps: return "taps";
    case Form::kUnrolled: return "unrolled";
    case Form::kFolded: return "folded";
    case Form::kPacked: return padded_copy ? "packed_copy" : "packed";
    case Form::kStreamed: return "streamed";
    case Form::kScatter: return "scatter";
    case Form::kTapRows:
      return "tap_rows";
    case Form::kDot: return "dot";
    case Form::kPositions: return "positions";
  }
  return "?";
}

}  // namespace

std::vector<std::string> describe_plan(const ConvTParams& p, at::ScalarType dtype) {
  const Plans plans = plan(p, compute_type(dtype));
  const std::string bits =
      " vector_bits=" + std::to_string(plans.vector_bits) + " fast_blas=" + std::to_string(int(fast_blas()));
  return {std::string("kernel=") + form_name(plans.forward, plans.padded_copy) + bits,
          std::string("kernel=") + form_name(plans.grad_input, false) + bits,
          std::string("kernel=") + form_name(plans.grad_weight, false) + bits, "kernel=sum"};
}

void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args) {
  const ConvTParams p = make_params(x, w, y, args);
  const at::Tensor x_c = to_compute(x), w_c = to_compute(w);
  const Plans plans = plan(p, x_c.scalar_type());
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? to_compute(*bias) : at::Tensor();
  const at::Tensor y_c = compute_buffer(y);
  AT_DISPATCH_FLOATING_TYPES(y_c.scalar_type(), "conv_transpose1d_cpu", [&] {
    const scalar_t* bias_data = bias_c.defined() ? bias_c.data_ptr<scalar_t>() : nullptr;
    Form form = plans.forward;
    if (form == Form::kStreamed || form == Form::kScatter) {  // (float32 only: plan)
      (form == Form::kStreamed ? forward_avx2_streamed : forward_avx2_scatter)(
          x_c.data_ptr<float>(), w_c.data_ptr<float>(), reinterpret_cast<const float*>(bias_data), y_c.data_ptr<float>(),
          p);
      return;
    }
    if (form == Form::kTapRows) {  // (float32 only: plan)
      if (forward_tap_rows(x_c.data_ptr<float>(), w_c.data_ptr<float>(), reinterpret_cast<const float*>(bias_data),
                           y_c.data_ptr<float>(), p)) {
        return;
      }
      form = Form::kDirect;  // a non-finite output: the loops, which form no padding products
    }
    if (form == Form::kPacked) {
      if (forward_avx2(x_c.data_ptr<float>(), w_c.data_ptr<float>(), reinterpret_cast<const float*>(bias_data),
                       y_c.data_ptr<float>(), p, plans.padded_copy)) {
        return;
      }
      form = blas_form(p);  // a non-finite output (or windows too large): a form that forms no padding products
    }
    switch (form) {
      case Form::kDirect:
        forward_direct<scalar_t>(x_c, w_c, bias_c, y_c, p);
        break;
      case Form::kTaps: {
        at::Tensor w_taps = at::empty({p.kernel_size, p.in_channels, p.out_channels_per_group}, w_c.options());
        pack_taps(w_c.data_ptr<scalar_t>(), w_taps.data_ptr<scalar_t>(), p.in_channels, p.out_channels_per_group,
                  p.kernel_size);
        forward_taps<scalar_t>(x_c.data_ptr<scalar_t>(), w_taps.data_ptr<scalar_t>(), bias_data,
                               y_c.data_ptr<scalar_t>(), p);
        break;
      }
      case Form::kFolded:
        forward_folded<scalar_t>(x_c, w_c, bias_data, y_c.data_ptr<scalar_t>(), p);
        break;
      default:
        forward_unrolled<scalar_t>(x_c.data_ptr<scalar_t>(), w_c.data_ptr<scalar_t>(), bias_data,
                                   y_c.data_ptr<scalar_t>(), p);
        break;
    }
  });
  finish(y, y_c);
}

void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias) {
  const ConvTParams p = make_params(x, w, grad_y, args);
  const at::Tensor grad_y_c = to_compute(grad_y);
  if (grad_bias.defined()) grad_bias.copy_(grad_y_c.sum(at::IntArrayRef{0, 2}));
  if (!grad_x.defined() && !grad_w.defined()) return;
  const at::Tensor x_c = to_compute(x), w_c = to_compute(w);
  const Plans plans = plan(p, grad_y_c.scalar_type());
  const at::Tensor grad_x_c = grad_x.defined() ? compute_buffer(grad_x) : at::Tensor();
  const at::Tensor grad_w_c = grad_w.defined() ? compute_buffer(grad_w) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(grad_y_c.scalar_type(), "conv_transpose1d_backward_cpu", [&] {
    Form input_form = grad_x.defined() ? plans.grad_input : Form::kDirect;
    Form weight_form = grad_w.defined() ? plans.grad_weight : Form::kDirect;
    bool input_done = !grad_x.defined(), weight_done = !grad_w.defined();
    // (the AVX2 forms are planned for float32 only)
    if (!weight_done && weight_form == Form::kPositions) {
      weight_done =
          grad_weight_avx2_gemm(grad_y_c.data_ptr<float>(), x_c.data_ptr<float>(), grad_w_c.data_ptr<float>(), p);
      if (!weight_done) weight_form = Form::kDot;  // not finite: the dot products form no product with G^T's zeros
    }
    if ((!input_done && input_form == Form::kPacked) || (!weight_done && weight_form == Form::kDot)) {
      PaddedPhases phases;
      const int64_t step = avx2::column_step(avx2::panel_rows(p.in_channels_per_group));
      if (pad_phases(grad_y_c.data_ptr<float>(), p, step, phases)) {
        if (!input_done && input_form == Form::kPacked) {
          input_done = grad_input_avx2(phases, w_c.data_ptr<float>(), grad_x_c.data_ptr<float>(), p);
        }
        if (!weight_done && weight_form == Form::kDot) {
          grad_weight_avx2(phases, x_c.data_ptr<float>(), grad_w_c.data_ptr<float>(), p);
          weight_done = true;
        }
      }
    }
    // what is left (float64, other CPUs, an AVX2 pass handed back): direct or BLAS forms. The unrolled
    // form multiplies the zeros of G (grad_y's im2col) by w and by x: where its result is not finite,
    // the pass runs again as taps, which forms no product with a position outside grad_y.
    if (input_form != Form::kDirect && input_form != Form::kTaps && input_form != Form::kUnrolled) {
      input_form = blas_form(p);
    }
    if (weight_form != Form::kDirect && weight_form != Form::kTaps && weight_form != Form::kUnrolled) {
      weight_form = blas_form(p);
    }
    if (!input_done && input_form == Form::kUnrolled) {
      grad_input_unrolled<scalar_t>(grad_y_c.data_ptr<scalar_t>(), w_c.data_ptr<scalar_t>(),
                                    grad_x_c.data_ptr<scalar_t>(), p);
      input_done = at::isfinite(grad_x_c).all().item<bool>();
      input_form = Form::kTaps;
    }
    if (!weight_done && weight_form == Form::kUnrolled) {
      grad_weight_unrolled<scalar_t>(grad_y_c.data_ptr<scalar_t>(), x_c.data_ptr<scalar_t>(),
                                     grad_w_c.data_ptr<scalar_t>(), p);
      weight_done = at::isfinite(grad_w_c).all().item<bool>();
      weight_form = Form::kTaps;
    }
    const bool taps = (!input_done && input_form == Form::kTaps) || (!weight_done && weight_form == Form::kTaps);
    const at::Tensor phases = taps ? phases_of(grad_y_c, p) : at::Tensor();
    if (!input_done && input_form == Form::kDirect) {
      grad_input_direct<scalar_t>(grad_y_c, w_c, p, grad_x_c);
    } else if (!input_done) {
      at::Tensor w_taps = at::empty({p.kernel_size, p.in_channels, p.out_channels_per_group}, w_c.options());
      pack_taps(w_c.data_ptr<scalar_t>(), w_taps.data_ptr<scalar_t>(), p.in_channels, p.out_channels_per_group,
                p.kernel_size);
      grad_input_taps<scalar_t>(phases.data_ptr<scalar_t>(), w_taps.data_ptr<scalar_t>(),
                                grad_x_c.data_ptr<scalar_t>(), p);
    }
    if (!weight_done && weight_form == Form::kDirect) {
      grad_weight_direct<scalar_t>(grad_y_c, x_c, p, grad_w_c);
    } else if (!weight_done) {
      at::Tensor rows = at::empty({p.in_channels, p.kernel_size, p.out_channels_per_group}, w_c.options());
      grad_weight_taps<scalar_t>(phases.data_ptr<scalar_t>(), x_c.data_ptr<scalar_t>(), rows.data_ptr<scalar_t>(), p);
      interleave_taps(rows.data_ptr<scalar_t>(), grad_w_c.data_ptr<scalar_t>(), p.in_channels,
                      p.out_channels_per_group, p.kernel_size);
    }
  });
  if (grad_x.defined()) finish(grad_x, grad_x_c);
  if (grad_w.defined()) finish(grad_w, grad_w_c);
}

}  // namespace convt::cpu
